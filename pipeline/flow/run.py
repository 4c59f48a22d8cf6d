"""The Flow WAL replay as stages: ``replay`` (segments decoded and applied to the forest in WAL
order, writing the periodic checkpoints asked for as it goes), then ``publish`` (the forest's
state to RocksDB and Parquet). ``FlowRun`` is what they share.

The forest lives in this process, so ``replay`` is ephemeral: ``publish`` reruns it. Both are
skipped when the WAL (and the checkpoint options) are unchanged since the last publish."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rechain.pipeline.runtime.executor import Executor

if TYPE_CHECKING:
    from rechain.pipeline.flow.replay import ReplayOptions
    from rechain.pipeline.store.datadir import DataDir

PIPELINE = "flow"


@dataclass
class FlowRun:
    opts: ReplayOptions
    data: DataDir
    #: WAL segments (number, path), all of them; ``replay`` keeps those after a checkpoint.
    segments: list[tuple[int, str]]
    workers: int
    #: Threads or Ray for this run's units, chosen once as the run starts.
    executor: Executor = field(init=False)
    forest: Any = None
    #: The segments the replay applied (after the checkpoint it resumed from), for publish.
    replayed: list[tuple[int, str]] = field(default_factory=list)
    #: The checkpoint the replay started from, if any (``--checkpoint``).
    resumed: dict[str, Any] | None = None
    skipped: list[dict[str, Any]] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    #: The replay's figures (Ray start-up, decode mode) for the run report.
    report: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.executor = Executor.choose(self.opts.ray_address, self.workers)


def source_token(opts: ReplayOptions, segments: list[tuple[int, str]]) -> str:
    """What a replay reads: every segment's number, size and modification time, and the
    checkpoint options (resuming from another checkpoint is another replay)."""
    items: list[Any] = [
        (n, Path(p).stat().st_size, Path(p).stat().st_mtime_ns) for n, p in segments
    ]
    if opts.checkpoint is not None:
        found = sorted(opts.checkpoint.glob("checkpoint.*"))
        resume = [(f.name, f.stat().st_size) for f in found]
        items.append(("resume", str(opts.checkpoint), resume, opts.trust_hashes))
    items.append(("every", opts.checkpoint_every, str(opts.checkpoint_dir or opts.wal)))
    return hashlib.sha256(json.dumps(items).encode()).hexdigest()[:32]
