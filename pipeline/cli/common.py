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


#: The smallest value each numeric option takes (by its dest), checked after parsing so that a
#: `--config` file's values are held to it too. `--memory-budget` below `SLOW_MEMORY_BUDGET`
#: runs, with a warning: a small budget means many small units.
MINIMUMS = {
    # Tests force paging on tiny inputs with budgets of a few KiB; zero or a stray byte count
    # ("512") is a mistake. Below SLOW_MEMORY_BUDGET a run is warned that it cuts its work small.
    "memory_budget": 1 << 10,
    "workers": 1,
    "threads": 1,
    "shard_size": 1 << 12,
    "file_size": 1 << 12,
    "segment_size": 1 << 12,
    "metrics_port": 1,
    "metrics_linger": 0,
    "checkpoint_every": 0,
    "first": 0,
    "last": 0,
    "height": 0,
    "number": 0,
    "updates": 1,
    "registers_per_update": 1,
    "side_branches": 0,
    "orphans": 0,
    "reorg": 0,
    "shuffle_window": 1,
}
SLOW_MEMORY_BUDGET = 64 << 20


def check_numbers(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """Problems (numeric options below their minimum, `MINIMUMS`) and warnings."""
    problems = []
    for dest, minimum in MINIMUMS.items():
        value = getattr(args, dest, None)
        if isinstance(value, int | float) and not isinstance(value, bool) and value < minimum:
            shown = format_size(minimum) if dest == "memory_budget" else f"{minimum:,}"
            problems.append(f"--{dest.replace('_', '-')} must be at least {shown} (got {value})")
    warnings = []
    budget = getattr(args, "memory_budget", None)
    if isinstance(budget, int) and MINIMUMS["memory_budget"] <= budget < SLOW_MEMORY_BUDGET:
        warnings.append(
            f"--memory-budget {format_size(budget)} is small: the work is cut into many small "
            f"units (at least {format_size(SLOW_MEMORY_BUDGET)} is advised)"
        )
    return problems, warnings


def format_size(n: int) -> str:
    """Bytes as `parse_size` reads them: ``1K``, ``64M``, ``1.5G``."""
    for unit, shift in (("T", 40), ("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):g}{unit}"
    return str(n)


def add_workers(p: argparse.ArgumentParser, help: str = "parallel tasks (default: cores)") -> None:
    """`--workers N` (at least 1; unset: one per core)."""
    p.add_argument("--workers", type=int, default=None, metavar="N", help=help)


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
            value = getattr(args, field.name)
            # An option left unset keeps the dataclass's default (`--workers`: one per core).
            if value is not None or field.default is None:
                values[field.name] = value
        elif hasattr(args, f"no_{field.name}"):
            values[field.name] = not getattr(args, f"no_{field.name}")
    return cls(**values, **explicit)
