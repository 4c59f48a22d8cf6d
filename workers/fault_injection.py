"""Test-only fault injection for Ray tasks, driven by ``RECHAIN_FAULT`` (unset: does nothing).

``RECHAIN_FAULT=<action>:<task>:<marker>``, several separated by ``;``. ``task`` names one
task: a scan shard by its ``seq``; any other task by its function and submission index within
one ``ordered_results`` or ``spread_tasks`` call (``pipeline/runtime/ray_cluster.py``), as
``_apply_task/0`` or ``resolve_partition/2``.

* ``kill`` — the first attempt of the task SIGKILLs its own worker process (a lost node or
  an OOM kill); ``marker`` is created first, so the retry runs normally.
* ``kill-always`` — every attempt of the task SIGKILLs its worker (a shard whose bytes crash
  the process); each attempt appends a line to ``marker`` first.
* ``raise`` — every attempt of the task raises, as a decoder failing on bad bytes would;
  each attempt appends a line to ``marker`` so a test can count them.

Only Ray task paths call this (never the coordinator's in-process runs).

``RECHAIN_KILL_AT=<point>:<n>`` (``kill_point``): the coordinator SIGKILLs itself the n-th time
it passes the named point (1 = the first), so a test can land a kill -9 exactly between two
commits of a stage. ``KILL_POINTS`` is the one list of them: a point passed but not listed
fails the run, so ``tests/test_kill_points.py`` can run every one by name.
``RECHAIN_KILL_TRACE=<file>``: every pass of a point appends its name to the file, so a test can
see which points a run passes, and how often.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

ENV = "RECHAIN_FAULT"
KILL_AT_ENV = "RECHAIN_KILL_AT"
KILL_TRACE_ENV = "RECHAIN_KILL_TRACE"
_passes: dict[str, int] = {}

#: Every kill point, ``<stage>.<what>``: the commit boundaries a kill -9 can fall between.
KILL_POINTS: tuple[str, ...] = (
    # A table generation's folder, synced, before and after its rename (``DataDir``'s one
    # atomic publish, used by every stage that publishes Parquet).
    "store.generation_staged",
    "store.generation_renamed",
    # The table view switched to a run's tables, before the old generations are removed.
    "store.view_switched",
    # The stage driver, after each stage's checkpoint.
    "engine.stage_checkpointed",
    # Bitcoin.
    "scan.shard_committed",
    "link.index_reset",
    "link.index_ingested",
    "link.published",
    "link.summary_written",
    "bodies.part_renamed",
    "bodies.part_registered",
    "chain_state.unwound",
    "chain_state.spends_written",
    "chain_state.applied",
    "scripts.run_checked",
    "publish.outputs_shared",
    "publish.manifest_written",
    "indexes.sst_written",
    "indexes.index_reset",
    "indexes.sst_ingested",
    "indexes.entries_updated",
    "indexes.record_written",
    "indexes.generations_removed",
    "indexes.summary_written",
    # A UTXO snapshot written in full under its temporary name, before it is landed.
    "utxo_dump.written",
    # Flow.
    "flow_replay.checkpoint_writing",
    "flow_replay.checkpoint_written",
    "flow_publish.registers_reset",
    "flow_publish.registers_ingested",
    "flow_publish.summary_written",
    "flow_checkpoint.read_staged",
    "flow_checkpoint.read_recorded",
    "flow_checkpoint.stats_gathered",
    "flow_checkpoint.stats_recorded",
    "flow_checkpoint.writing",
    "flow_checkpoint.written",
    # Ethereum.
    "eth.parts_renamed",
    "eth.index_ingested",
    "eth.unit_committed",
)
_REGISTERED = frozenset(KILL_POINTS)


class InjectedFault(ValueError):
    """What the ``raise`` action throws: a deterministic failure on the shard's bytes."""


def maybe_inject(task: int | str) -> None:
    """Applies the faults ``RECHAIN_FAULT`` names for ``task`` (see the module)."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    for item in spec.split(";"):
        action, target, marker = item.split(":", 2)
        if target != str(task):
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
            what = f"shard {task}" if isinstance(task, int) else f"task {task}"
            raise InjectedFault(f"injected fault: {what} cannot be decoded")
        else:
            raise ValueError(f"{ENV}: unknown action {action!r}")


def kill_point(point: str) -> None:
    """Passes the named point (see ``RECHAIN_KILL_AT`` and ``RECHAIN_KILL_TRACE``)."""
    spec = os.environ.get(KILL_AT_ENV)
    trace = os.environ.get(KILL_TRACE_ENV)
    if not (spec or trace):
        return
    if point not in _REGISTERED:
        raise ValueError(f"kill point {point!r} is not in fault_injection.KILL_POINTS")
    if trace:
        with open(trace, "a") as f:
            f.write(point + "\n")
    if not spec:
        return
    name, _, nth = spec.rpartition(":")
    if name != point:
        return
    _passes[point] = _passes.get(point, 0) + 1
    if _passes[point] == int(nth):
        os.kill(os.getpid(), signal.SIGKILL)
