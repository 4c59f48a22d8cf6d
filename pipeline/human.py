"""How values read in the CLI's human output (``--json`` prints them as they are): no Python
reprs, so ``None`` is ``-``, a dict is ``key value`` pairs and a list is comma-separated."""

from __future__ import annotations

from typing import Any


def human(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 10_000 else str(value)
    if isinstance(value, float):
        return f"{value:,.3f}".rstrip("0").rstrip(".")
    if isinstance(value, dict):
        return ", ".join(f"{k} {human(v)}" for k, v in value.items()) or "-"
    if isinstance(value, list | tuple):
        return ", ".join(human(v) for v in value) or "-"
    return str(value)


def rows(pairs: dict[str, Any]) -> str:
    """``key  value`` lines, keys aligned."""
    width = max((len(k) for k in pairs), default=0)
    return "\n".join(f"{k.replace('_', ' ').ljust(width)}  {human(v)}" for k, v in pairs.items())
