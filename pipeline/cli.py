"""Click options generated from config dataclasses, so a default lives in one place only, and
the error a bad option value raises (``ConfigError``).

Field ``batch_size`` becomes option ``--batch-size`` and MLproject parameter ``batch_size``.
A bool field takes a value (``--deterministic true``) rather than being a bare flag, so that
MLproject can pass it through as ``--deterministic {deterministic}``. Help text comes from the
field's metadata.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import click

from models.errors import UserError


class ConfigError(UserError):
    """An option value that cannot work; the message names the option."""


def opt(default: Any, help: str) -> Any:
    """A dataclass field with help text for its command-line option."""
    return dataclasses.field(default=default, metadata={"help": help})


def option_name(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


def added_at_default(mine: dict, theirs: dict, defaults: dict) -> set[str]:
    """The options of ``mine`` that ``theirs``, a record written by an earlier version of a
    command, lacks while ``mine`` has them at their default (``defaults``): options added since.
    A record written then is the same one now only at those defaults, which assumes that an
    option's default keeps what ran before the option existed."""
    return {k for k in mine if k not in theirs and k in defaults and mine[k] == defaults[k]}


def config_options(*classes: type):
    """Decorator adding one click option per field of each dataclass."""

    def decorate(command):
        for cls in reversed(classes):
            for f in reversed(dataclasses.fields(cls)):
                help_text = f.metadata.get("help", "")
                kind = click.BOOL if isinstance(f.default, bool) else type(f.default)
                if f.name == "seed" or f.name.endswith("_seed"):
                    kind = seed_type(f.default)
                command = click.option(
                    option_name(f.name),
                    f.name,
                    type=kind,
                    default=f.default,
                    show_default=True,
                    help=help_text,
                )(command)
        return command

    return decorate


# numpy's seeds are 32-bit: a larger one failed after the data had loaded, naming numpy, not the option
SEED_MAX = 2**32 - 1


def seed_type(default: int) -> click.IntRange:
    """A seed option's type: 0 .. 2^32 - 1, and -1 where that is its default (-1: "choose one")."""
    return click.IntRange(-1 if default == -1 else 0, SEED_MAX)


def help_text(doc: str) -> str:
    """A module docstring as a command's help, its command-line examples kept one per line.

    Click rewraps every paragraph into one; a paragraph that opens with ``\\b`` it leaves as
    written. Examples are the paragraphs whose every line is indented or starts with a command."""
    paragraphs = []
    for paragraph in (doc or "").strip("\n").split("\n\n"):
        lines = [line for line in paragraph.splitlines() if line.strip()]
        if lines and all(line.startswith((" ", "python ", "mlflow ")) for line in lines):
            paragraph = "\b\n" + paragraph
        paragraphs.append(paragraph)
    return "\n\n".join(paragraphs)


def build_config(cls: type, values: dict[str, Any]):
    """Instantiate ``cls`` from the click values that belong to it."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})
