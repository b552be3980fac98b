"""User text in MLflow filter strings. MLflow's filter grammar quotes a value in single or double
quotes and has no escape: a run name with an apostrophe must go in double quotes, one with both
kinds of quote cannot be written at all. ``literal`` quotes what can be quoted; the callers
filter the rest in Python."""

from __future__ import annotations


def literal(value: str) -> str | None:
    """``value`` as a filter string literal, or None when it holds both ``'`` and ``"``."""
    if "'" not in value:
        return f"'{value}'"
    if '"' not in value:
        return f'"{value}"'
    return None


def clause(field: str, op: str, value: str) -> str | None:
    """``field op literal``, or None where the value cannot be quoted (filter it in Python)."""
    quoted = literal(value)
    return None if quoted is None else f"{field} {op} {quoted}"
