"""What every command module shares: size arguments (`parse_size`), the `--memory-budget` every
command takes, JSON output, and `options`, which builds a command's options dataclass from its
parsed arguments (the `--config` file included) by field name, so a new option is not copied by
hand.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar

from rechain.workers.memory import DEFAULT_MEMORY_BUDGET

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    #: The object `add_subparsers` returns, which each command module adds its parsers to.
    Subparsers: TypeAlias = argparse._SubParsersAction[argparse.ArgumentParser]

#: A command's handler (`set_defaults(handler=...)`): its parsed arguments → exit code.
Handler: TypeAlias = Callable[[argparse.Namespace], int]

SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}

Options = TypeVar("Options", bound="DataclassInstance")


def parse_size(text: str) -> int:
    """'512M', '2GiB', '1g', '1048576' → bytes (binary units)."""
    m = SIZE.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 512M, 2G)")
    unit = (m.group(2) or "").lower()[:1]
    return int(float(m.group(1)) * UNITS[unit])


def add_memory_budget(p: argparse.ArgumentParser, help: str | None = None) -> None:
    """`--memory-budget SIZE` (default `DEFAULT_MEMORY_BUDGET`), as every command takes it."""
    p.add_argument("--memory-budget", type=parse_size, default=DEFAULT_MEMORY_BUDGET, help=help)


def print_json(obj: Any) -> None:
    print(json.dumps(obj, sort_keys=False))


def options(cls: type[Options], args: argparse.Namespace, **explicit: Any) -> Options:
    """An instance of the options dataclass `cls` from a command's parsed arguments.

    Each field takes the argument whose dest has its name (`--ray-address` → `ray_address`,
    `--from` with `dest="first"` → `first`); a field `x` with no such argument but a `--no-x`
    flag (dest `no_x`) takes its negation (`--no-progress` → `progress=False`); `explicit`
    values (a command's special cases) win over both; a field no argument names keeps the
    dataclass's default. The `--config` file needs no step here: `config.apply` made its values
    the parser's defaults before parsing, so `args` already holds flag > file > parser default.
    """
    values: dict[str, Any] = {}
    for field in dataclasses.fields(cls):
        if not field.init or field.name in explicit:
            continue
        if hasattr(args, field.name):
            values[field.name] = getattr(args, field.name)
        elif hasattr(args, f"no_{field.name}"):
            values[field.name] = not getattr(args, f"no_{field.name}")
    return cls(**values, **explicit)
