"""Test-only fault injection for scan tasks, driven by ``RECHAIN_FAULT`` (unset: does nothing).

``RECHAIN_FAULT=<action>:<seq>:<marker>``, several separated by ``;``:

* ``kill`` — the first attempt of shard ``seq`` SIGKILLs its own worker process (a lost node or
  an OOM kill); ``marker`` is created first, so the retry runs normally.
* ``kill-always`` — every attempt of shard ``seq`` SIGKILLs its worker (a shard whose bytes crash
  the process); each attempt appends a line to ``marker`` first.
* ``raise`` — every attempt of shard ``seq`` raises, as a decoder failing on bad bytes would;
  each attempt appends a line to ``marker`` so a test can count them.

Only the Ray task path calls this (never the coordinator's in-process rescans).

``RECHAIN_KILL_AT=<point>:<n>`` (``kill_point``): the coordinator SIGKILLs itself the n-th time
it passes the named point (1 = the first), so a test can land a kill -9 exactly between two
commits of a stage.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

ENV = "RECHAIN_FAULT"
KILL_AT_ENV = "RECHAIN_KILL_AT"
_passes: dict[str, int] = {}


class InjectedFault(ValueError):
    """What the ``raise`` action throws: a deterministic failure on the shard's bytes."""


def maybe_inject(seq: int) -> None:
    spec = os.environ.get(ENV)
    if not spec:
        return
    for item in spec.split(";"):
        action, target, marker = item.split(":", 2)
        if int(target) != seq:
            continue
        path = Path(marker)
        if action == "kill":
            try:
                # O_EXCL: exactly one attempt ever sees the marker missing.
                os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                continue
            os.kill(os.getpid(), signal.SIGKILL)
        elif action == "kill-always":
            with open(path, "a") as f:
                f.write(f"{os.getpid()}\n")
            os.kill(os.getpid(), signal.SIGKILL)
        elif action == "raise":
            with open(path, "a") as f:
                f.write(f"{os.getpid()}\n")
            raise InjectedFault(f"injected fault: shard {seq} cannot be decoded")
        else:
            raise ValueError(f"{ENV}: unknown action {action!r}")


def kill_point(point: str) -> None:
    """Passes the named point (see ``RECHAIN_KILL_AT``)."""
    spec = os.environ.get(KILL_AT_ENV)
    if not spec:
        return
    name, _, nth = spec.rpartition(":")
    if name != point:
        return
    _passes[point] = _passes.get(point, 0) + 1
    if _passes[point] == int(nth):
        os.kill(os.getpid(), signal.SIGKILL)
