"""Config dataclasses to text and back: MLflow parameters, ``mlflow run -P`` values and the
arguments of ``python -m pipeline.<step>``. Steps are launched, params logged and a run's
config read back through here, so a value has one spelling everywhere.

Field ``batch_size`` is parameter ``batch_size`` and option ``--batch-size``. A value is
written as the command line takes it: ``true``/``false`` for a bool (click reads ``True`` too,
MLproject's string parameters need one spelling), ``str()`` for numbers and text. Read back,
each parameter is parsed by its field's type, accepting what MLflow may have logged for it:
``12.0`` for an int (``mlflow run`` types integers as floats) and ``''`` for an empty string
(``mlflow run`` logs its parameters shell-quoted).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from typing import Any

import click

from pipeline.cli import option_name


def param_text(value: Any) -> str:
    """One value as a parameter: true/false as the CLI spells them, lists of plain values
    comma-separated (as the options take them), anything nested as JSON."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (list, tuple)) and all(
        isinstance(v, (int, float, str)) and "," not in str(v) for v in value
    ):
        return ",".join(str(v) for v in value)
    if isinstance(value, (list, dict, tuple)):
        return json.dumps(value)
    return str(value)


def flat_params(*configs) -> dict[str, str]:
    """The parameters of config dataclasses (or dicts), each value as ``param_text`` spells it."""
    params: dict[str, str] = {}
    for cfg in configs:
        items = dataclasses.asdict(cfg).items() if dataclasses.is_dataclass(cfg) else dict(cfg).items()
        params.update((key, param_text(value)) for key, value in items)
    return params


def non_default_params(*configs) -> dict[str, str]:
    """The parameters of the fields that differ from their class's default: the ``-P``
    options that rebuild these configs."""
    changed = {}
    for cfg in configs:
        default = type(cfg)()
        for f in dataclasses.fields(cfg):
            if getattr(cfg, f.name) != getattr(default, f.name):
                changed[f.name] = getattr(cfg, f.name)
    return flat_params(changed)


def to_argv(*configs) -> list[str]:
    """Command-line arguments that give a ``python -m pipeline.<step>`` these configs."""
    return [arg for key, text in flat_params(*configs).items() for arg in (option_name(key), text)]


def entry_configs(entry_point: str) -> tuple[type, ...]:
    """The config dataclasses whose fields are ``entry_point``'s options (its module's
    ``CONFIGS``); imported when asked, since steps are launched by name."""
    return importlib.import_module(f"pipeline.{entry_point}").CONFIGS


def default_params(entry_point: str) -> dict[str, str]:
    """Every parameter of ``entry_point`` at its default, as MLproject declares it."""
    return flat_params(*(cls() for cls in entry_configs(entry_point)))


def unquote(text: str) -> str:
    """A parameter as the step received it: ``mlflow run`` logs ``''`` for an empty one and
    ``'x y'`` for one it had to quote."""
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] == "'" else text


def canonical(text: Any) -> str:
    """One spelling per parameter value, to tell whether a run logged what is wanted: 12,
    12.0 and '12' agree, as do true and True, and an empty value and ``''``."""
    text = unquote(str(text).strip()).strip()
    if text.lower() in ("true", "false"):
        return text.lower()
    try:
        number = float(text)
    except ValueError:
        return text
    return repr(int(number)) if number.is_integer() else repr(number)


def same_param(a: Any, b: Any) -> bool:
    """Whether two spellings of a parameter are one value (see ``canonical``)."""
    return canonical(a) == canonical(b)


def parse_param(text: str, default: Any) -> Any:
    """A logged parameter as a value of its field's type (the type of the field's default)."""
    text = unquote(str(text))
    if isinstance(default, bool):
        return click.BOOL.convert(text.strip(), None, None)  # as the option parses it
    if isinstance(default, int):
        try:
            return int(text)
        except ValueError:
            number = float(text)
        if not number.is_integer():
            raise ValueError(f"{text!r} is not a whole number")
        return int(number)
    if isinstance(default, float):
        return float(text)
    if isinstance(default, str):
        return text
    raise TypeError(f"no parameter spelling for a {type(default).__name__} field")


def from_params(cls: type, params: dict[str, str]):
    """``cls`` from a run's parameters; a field the run never logged (an option added since)
    takes its default, and parameters of other configs are ignored."""
    values = {}
    for f in dataclasses.fields(cls):
        if f.name in params:
            try:
                values[f.name] = parse_param(params[f.name], f.default)
            except (ValueError, click.BadParameter) as err:
                raise ValueError(f"parameter {f.name} {params[f.name]!r}: {err}") from None
    return cls(**values)
