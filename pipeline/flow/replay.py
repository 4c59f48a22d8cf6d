"""``rechain flow replay``: opens the data folder and runs the Flow pipeline's stages
(``pipeline/flow/stages/``: replay, publish); ``rechain flow status``."""

from __future__ import annotations

import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rechain.pipeline.engine.driver import Driver
from rechain.pipeline.errors import RechainError
from rechain.pipeline.flow.run import PIPELINE, FlowRun, source_token
from rechain.pipeline.flow.stages import stages
from rechain.pipeline.flow.stages.replay import NODE_STORE
from rechain.pipeline.runtime import placement
from rechain.pipeline.store.datadir import DataDir
from rechain.pipeline.store.folder import claim
from rechain.schemas import flow as fs
from rechain.schemas import rocksdb as layout
from rechain.workers import _native
from rechain.workers.memory import DEFAULT_MEMORY_BUDGET

log = logging.getLogger(__name__)


@dataclass
class ReplayOptions:
    wal: Path
    data: Path
    workers: int = 0
    ray_address: str | None = None
    memory_budget: int = DEFAULT_MEMORY_BUDGET
    progress: bool = True
    #: Resume from the latest checkpoint in this folder (replay only the segments after it).
    checkpoint: Path | None = None
    #: Resuming, take the checkpoint's stored hashes as flow-go does (each root still checked).
    trust_hashes: bool = False
    #: Write a checkpoint after every N segments (0: never), as flow-go's checkpointer does.
    checkpoint_every: int = 0
    #: Where those checkpoints go (default: the WAL folder, like flow-go).
    checkpoint_dir: Path | None = None
    #: Rerun from this stage on (``--from-stage``), whatever the checkpoints say.
    from_stage: str | None = None


def _segments(wal: Path) -> list[tuple[int, str]]:
    if not wal.is_dir():
        raise RechainError(f"{wal}: WAL folder not found")
    try:
        return [(int(n), str(p)) for n, p in _native.flow_list_segments(str(wal))]
    except Exception as e:  # FlowWalError (segment gap) and OS errors carry their own message
        raise RechainError(f"{wal}: {e}") from e


def run(opts: ReplayOptions) -> dict[str, Any]:
    t_start = time.perf_counter()
    segments = _segments(opts.wal)
    workers = opts.workers or os.cpu_count() or 1
    with DataDir(opts.data) as data:
        claim(data, PIPELINE)
        ctx = FlowRun(opts, data, segments, workers)
        driver = Driver(PIPELINE, stages(), data)
        try:
            driver.run(ctx, opts.from_stage, source=source_token(opts, segments))
        finally:
            # A paged forest's node store is scratch: gone with the run, killed or not (a
            # later run empties the folder before using it).
            ctx.forest = None
            shutil.rmtree(opts.data / NODE_STORE, ignore_errors=True)
        summary = data.meta_get(fs.META_FLOW_SUMMARY)
        if ctx.written:
            summary["checkpoints_written"] = ctx.written
        report = {
            "ray_start_s": ctx.report.get("ray_start_s", 0.0),
            "total_s": time.perf_counter() - t_start,
            "segments": summary["segments"],
            "updates": summary["updates_applied"],
            "workers": workers,
            "decode": ctx.report.get("decode", "skipped"),
            "hash_permutations": ctx.report.get("hash_permutations"),
            "parallel_subtries": ctx.report.get("parallel_subtries"),
            "node_store": ctx.report.get("node_store"),
            "stages_run": driver.ran,
            "placement": placement.report(driver.ran),
        }
        data.write({layout.CF_META: [(fs.META_FLOW_RUN, report)]})
        data.write_report("flow_replay", {**summary, **report})
        return {**summary, "run": report}


def status(data_path: Path) -> dict[str, Any]:
    with DataDir(data_path, readonly=True) as data:
        summary = data.meta_get(fs.META_FLOW_SUMMARY)
        if summary is None:
            raise RechainError(f"{data_path}: no Flow replay here yet")
        return {**summary, "run": data.meta_get(fs.META_FLOW_RUN)}
