"""The stage engine: a pipeline is an ordered list of stages, each resumable on its own.

A stage has one job. It reads what the stages before it committed, does its work in bounded
units, commits its results and then its checkpoint, and reports an *output token*: a short
value that changes whenever what it committed changed. The checkpoint records the token of
the stage's input (the previous stage's output token) when it last completed, so a rerun
skips every stage whose input is unchanged: a rerun with nothing new costs no more than the
scan that finds nothing new.

A stage that learns something an earlier stage must take into account (a copy of a block
that failed its checks, a block that breaks a consensus rule) returns ``Invalidate(name)``:
the driver reruns the pipeline from that stage, within ``MAX_ROUNDS``, instead of loops
written into the stages. ``--from-stage NAME`` does the same from the command line (for
example: republish the tables after a schema change without decoding again).

Checkpoints live in RocksDB (``CF_META``, key ``stage/<pipeline>/<stage>``, JSON), written
after the stage's own commits: a run killed inside a stage reruns that stage, which resumes
from its own committed progress.
"""

from __future__ import annotations

import json
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

from rechain.pipeline.errors import RechainError
from rechain.pipeline.runtime import placement
from rechain.pipeline.store.datadir import DataDir
from rechain.schemas import rocksdb as layout
from rechain.workers.fault_injection import kill_point

log = logging.getLogger(__name__)

#: A pipeline whose stages keep invalidating each other cannot loop forever (each round of
#: the Bitcoin pipeline settles at least one copy or block).
MAX_ROUNDS = 10_000

C = TypeVar("C")


@dataclass
class Done:
    """What a completed stage reports for ``rechain stages``."""

    rows: int = 0
    height: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Invalidate:
    """Ask the driver to rerun the pipeline from stage ``stage`` (inclusive)."""

    stage: str
    reason: str


class Stage(ABC, Generic[C]):
    """One step of a pipeline. Subclasses set ``name`` and implement ``run``.

    ``ephemeral``: the stage's output lives only in this process (a DuckDB session, say).
    ``uses``: the ephemeral stages whose output this one reads; when it must run, the driver
    runs them first in this process, whatever their checkpoints say.
    """

    name: str = ""
    ephemeral: bool = False
    uses: tuple[str, ...] = ()

    def pending(self, ctx: C) -> bool:
        """Whether the stage has work though its input is unchanged: new bytes on disk, or
        a log an earlier run left changed (only the stage itself can tell)."""
        return False

    @abstractmethod
    def output(self, ctx: C) -> Any:
        """The token of what the stage has committed, read from the data folder (so a run
        killed between a stage's commit and its checkpoint still hands on the right one)."""

    @abstractmethod
    def run(self, ctx: C) -> Done | Invalidate:
        """Does the stage's work and commits it."""

    def unwind(self, ctx: C, data: DataDir) -> None:
        """Drops what the stage derived (called when it is invalidated). The default keeps it:
        the stage's next run replaces its output whole."""

    def reset(self, ctx: C, data: DataDir) -> None:
        """Drops what the stage derived so that its next run starts from nothing (called for
        ``--from-stage``). The default is ``unwind``; a stage that keeps incremental state
        across invalidations (the chain state follows reorgs itself) drops it here."""
        self.unwind(ctx, data)


def checkpoint_key(pipeline: str, stage: str) -> bytes:
    return f"{layout.META_STAGE_PREFIX.decode()}{pipeline}/{stage}".encode()


def read_checkpoints(data: DataDir, pipeline: str) -> dict[str, dict[str, Any]]:
    prefix = f"{layout.META_STAGE_PREFIX.decode()}{pipeline}/".encode()
    return {
        key[len(prefix) :].decode(): json.loads(value)
        for key, value in data.items(layout.CF_META, prefix)
    }


class Driver(Generic[C]):
    """Runs one pipeline's stages in order over a context shared by its stages."""

    def __init__(self, pipeline: str, stages: Sequence[Stage[C]], data: DataDir) -> None:
        names = [s.name for s in stages]
        if len(set(names)) != len(names) or not all(names):
            raise ValueError(f"stage names must be unique and set: {names}")
        self.pipeline = pipeline
        self.stages = list(stages)
        self.data = data
        self.ran: list[str] = []
        self.source: Any = None
        self.seconds: dict[str, float] = {}

    def index(self, name: str) -> int:
        for i, s in enumerate(self.stages):
            if s.name == name:
                return i
        raise RechainError(
            f"no stage {name!r} in the {self.pipeline} pipeline "
            f"(stages: {', '.join(s.name for s in self.stages)})"
        )

    def invalidate_from(self, name: str, ctx: C, *, reset: bool = False) -> None:
        """Marks ``name`` and every later stage to run again (a durable mark: a run killed
        before they complete still reruns them); ``reset``: from nothing."""
        first = self.index(name)
        puts = []
        for stage in self.stages[first:]:
            cp = self.checkpoint(stage.name) or {"stage": stage.name}
            cp["input"] = None
            cp["invalidated"] = True
            puts.append((checkpoint_key(self.pipeline, stage.name), cp))
        self.data.write({layout.CF_META: puts})
        for stage in self.stages[first:]:
            if reset:
                stage.reset(ctx, self.data)
            else:
                stage.unwind(ctx, self.data)

    def checkpoint(self, name: str) -> dict[str, Any] | None:
        return self.data.meta_get(checkpoint_key(self.pipeline, name))

    def run(self, ctx: C, from_stage: str | None = None, source: Any = None) -> None:
        """Runs the stages that are stale. ``source``: the token of the pipeline's input (a
        fingerprint of the files it reads), the first stage's input; None for a first stage
        that looks at its input itself (``pending``)."""
        self.source = source
        placement.reset()
        if from_stage is not None:
            self.invalidate_from(from_stage, ctx, reset=True)
        live: set[str] = set()
        rounds = 0
        i = 0
        previous_output: Any = source
        while i < len(self.stages):
            stage = self.stages[i]
            cp = self.checkpoint(stage.name)
            # Stale: never run, invalidated, its input changed, or its committed output is not
            # what it recorded (written by something else since, or a run killed between its
            # commit and its checkpoint).
            stale = (
                cp is None
                or cp.get("invalidated")
                or cp.get("input") != previous_output
                or (not stage.ephemeral and cp.get("output") != stage.output(ctx))
            )
            if not (stale or stage.pending(ctx)):
                previous_output = stage.output(ctx)
                i += 1
                continue
            # A stage reading an ephemeral stage's output needs that stage run in this process.
            missing = [self.index(n) for n in stage.uses if n not in live]
            j = min(missing, default=i)
            if j < i:
                log.info("stage %s needs %s run first", stage.name, self.stages[j].name)
                previous_output = self._input_of(j, ctx)
                i = j
                stage = self.stages[i]
            t0 = time.perf_counter()
            log.info("stage %s: run", stage.name)
            placement.enter(stage.name)
            outcome = stage.run(ctx)
            seconds = time.perf_counter() - t0
            self.seconds[stage.name] = self.seconds.get(stage.name, 0.0) + seconds
            self.ran.append(stage.name)
            if isinstance(outcome, Invalidate):
                rounds += 1
                if rounds > MAX_ROUNDS:
                    raise RechainError(
                        f"the {self.pipeline} pipeline did not settle after {MAX_ROUNDS} rounds"
                    )
                log.info("stage %s: rerun from %s (%s)", stage.name, outcome.stage, outcome.reason)
                self.invalidate_from(outcome.stage, ctx)
                live.clear()
                i = self.index(outcome.stage)
                previous_output = self._input_of(i, ctx)
                continue
            if stage.ephemeral:
                live.add(stage.name)
            output = stage.output(ctx)
            self._commit(stage.name, previous_output, output, outcome, seconds)
            kill_point("engine.stage_checkpointed")
            previous_output = output
            i += 1
        # Every stage is done: readers switch to this run's tables, all at once.
        self.data.publish_view()

    def _input_of(self, i: int, ctx: C) -> Any:
        return self.source if i == 0 else self.stages[i - 1].output(ctx)

    def _commit(self, name: str, input_token: Any, output: Any, done: Done, seconds: float) -> None:
        previous = self.checkpoint(name) or {}
        cp = {
            "stage": name,
            "input": input_token,
            "output": output,
            "rows": done.rows,
            "height": done.height,
            "last_run": datetime.now(UTC).isoformat(timespec="seconds"),
            "seconds": round(seconds, 3),
            "runs": int(previous.get("runs", 0)) + 1,
            **({"detail": done.detail} if done.detail else {}),
        }
        self.data.write({layout.CF_META: [(checkpoint_key(self.pipeline, name), cp)]})
