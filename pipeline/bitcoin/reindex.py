"""``rechain btc reindex``: opens the data folder and runs the Bitcoin pipeline's stages.

Header mode runs ``scan`` and ``link``; full mode adds ``bodies``, ``chain_state``,
``publish`` and ``indexes`` (``pipeline/bitcoin/stages/``). Each stage resumes from its own
checkpoint and is skipped when its input is unchanged, so a rerun costs what its new data
costs. This module builds the run report.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rechain.pipeline.bitcoin.core_index import CoreIndexGuide
from rechain.pipeline.bitcoin.plan import (
    DEFAULT_SHARD_BYTES,
    check_network,
    find_blk_files,
    read_xor_key,
    resolve_blocks_dir,
)
from rechain.pipeline.bitcoin.run import PIPELINE, BtcRun
from rechain.pipeline.bitcoin.scan_log import BtcCommitter, remove_unreferenced_segments
from rechain.pipeline.bitcoin.script_checks import normalize_assume_valid
from rechain.pipeline.bitcoin.stages import stages
from rechain.pipeline.bitcoin.stages.link import check_found_records
from rechain.pipeline.engine.driver import Driver
from rechain.pipeline.errors import RechainError
from rechain.pipeline.runtime import placement
from rechain.pipeline.runtime.budget import budget_share
from rechain.pipeline.store.datadir import DataDir, memtable_bytes
from rechain.pipeline.store.folder import claim, folder_record
from rechain.schemas import rocksdb as layout
from rechain.workers.memory import DEFAULT_MEMORY_BUDGET

log = logging.getLogger(__name__)


@dataclass
class ReindexOptions:
    blocks: Path
    data: Path
    #: None: the data folder's network (``main`` for a new folder).
    network: str | None = None
    workers: int = 0
    ray_address: str | None = None
    memory_budget: int = DEFAULT_MEMORY_BUDGET
    shard_bytes: int = DEFAULT_SHARD_BYTES
    progress: bool = True
    check_bodies: bool = False
    root_hash: str | None = None
    #: "headers" (block index only) or "full" (every transaction, UTXO set); None: the data
    #: folder's mode (``headers`` for a new folder).
    mode: str | None = None
    #: A Bitcoin Core ``blocks/index`` whose record positions guide the scan.
    core_index: Path | None = None
    #: Rerun the pipeline from this stage on (``--from-stage``), whatever the checkpoints say.
    from_stage: str | None = None
    #: Verify every input's script with Core's interpreter (full mode); None: the data
    #: folder's choice (off for a new folder).
    scripts: bool | None = None
    #: ``--assume-valid``: a block hash whose ancestors' scripts are skipped, "0" to check
    #: every script; None: the data folder's (else "0").
    assume_valid: str | None = None


def folder_network(path: Path) -> str:
    """The network a data folder was indexed for; ``main`` for a new folder."""
    if not (path / "rocksdb" / "CURRENT").exists():
        return "main"
    with DataDir(path, readonly=True) as data:
        return str(data.meta_get(layout.META_BTC_NETWORK) or "main")


def folder_mode(data: DataDir, asked: str | None) -> str:
    """The mode a run uses: the one asked for, else the folder's. A folder holding full-mode
    tables cannot run in header mode: its tables and UTXO set would stay behind the index."""
    held = folder_record(data).get("mode", "headers")
    if asked is None:
        return str(held)
    if asked == "headers" and held == "full":
        raise RechainError(
            f"{data.path} holds full-mode tables and UTXO set; a --mode headers run would "
            "leave them behind the block index. Rerun without --mode (the folder's mode is "
            "full), or index headers only into another --data"
        )
    return asked


def folder_scripts(data: DataDir, opts: ReindexOptions) -> ReindexOptions:
    """``--scripts`` and ``--assume-valid`` as asked, else as the folder recorded them: a folder
    whose scripts were checked keeps them checked until a run says ``--no-scripts``."""
    held = folder_record(data)
    scripts = bool(held.get("scripts", False)) if opts.scripts is None else opts.scripts
    if opts.assume_valid is None:
        assume_valid = held.get("assume_valid")
    else:
        assume_valid = normalize_assume_valid(opts.assume_valid)
    if scripts and opts.mode != "full":
        raise RechainError(
            "--scripts checks the transactions of a full reindex: add --mode full "
            f"(the data folder's mode is {opts.mode})"
        )
    return replace(opts, scripts=scripts, assume_valid=assume_valid)


#: The stages after the header pass, whose time is the report's ``full_total_s``.
FULL_STAGES = ("bodies", "chain_state", "scripts", "publish", "indexes")


def run(opts: ReindexOptions) -> dict[str, Any]:
    t_start = time.perf_counter()
    opts = replace(opts, network=opts.network or folder_network(opts.data))
    opts = replace(opts, blocks=resolve_blocks_dir(opts.blocks, opts.network))
    files = find_blk_files(opts.blocks)
    key = read_xor_key(opts.blocks)
    check_network(files, opts.network, key)
    workers = opts.workers or os.cpu_count() or 1
    memtables = memtable_bytes(budget_share(opts.memory_budget, "bitcoin", "rocksdb.memtables"))
    with DataDir(opts.data, memtables=memtables) as data:
        stored = data.meta_get(layout.META_BTC_NETWORK)
        if stored is not None and stored != opts.network:
            raise RechainError(
                f"{opts.data} holds a {stored} index; this run asked for --network {opts.network}"
            )
        opts = replace(opts, mode=folder_mode(data, opts.mode))
        opts = folder_scripts(data, opts)
        claim(
            data,
            PIPELINE,
            network=opts.network,
            mode=opts.mode,
            scripts=opts.scripts,
            assume_valid=opts.assume_valid,
        )
        pipeline = stages(opts.mode, scripts=bool(opts.scripts))
        data.write({layout.CF_META: [(layout.META_BTC_NETWORK, opts.network)]})
        committer = BtcCommitter(data, opts.network, root_hash=opts.root_hash)
        committer.forget_missing_files({f.file_no for f in files})
        remove_unreferenced_segments(data)
        guide = CoreIndexGuide.load(opts.core_index, files, workers) if opts.core_index else None
        committer.keep_positions = guide is not None
        ctx = BtcRun(opts, data, committer, files, key, workers, guide)
        driver = Driver(PIPELINE, pipeline, data)
        try:
            driver.run(ctx, opts.from_stage)
        finally:
            ctx.close()
        summary = data.meta_get(layout.META_BTC_SUMMARY)
        check_found_records(ctx, summary)
        s = committer.stats
        report: dict[str, Any] = {
            "files": len(files),
            "shards": s.shards,
            "rescans": s.rescans,
            "records_scanned": s.records,
            "file_bytes": sum(f.size for f in files),
            "bytes_planned": ctx.scan.get("bytes_planned", 0),
            "bytes_read": s.bytes_read,
            "ray_start_s": ctx.scan.get("ray_start_s", 0.0),
            "scan_s": ctx.scan.get("scan_s", 0.0),
            "worker_decode_s": s.decode_seconds,
            "commit_s": s.commit_seconds,
            **s.link,
            "total_s": time.perf_counter() - t_start,
            "workers": workers,
            "mode": opts.mode,
            "stages_run": driver.ran,
            "stage_s": dict(driver.seconds),
            "placement": placement.report(driver.ran),
        }
        full: dict[str, Any] | None = None
        if opts.mode == "full":
            full = data.meta_get(layout.META_BTC_FULL)
            figures = {
                **ctx.full,
                "full_total_s": sum(driver.seconds.get(n, 0.0) for n in FULL_STAGES),
            }
            report.update({f"full_{k}" if k in report else k: v for k, v in figures.items()})
        if guide is not None:
            report["core_index"] = guide.report(data, committer.linked_positions)
        data.write({layout.CF_META: [(layout.META_BTC_RUN, report)]})
        data.write_report(
            "btc_reindex",
            {
                **report,
                "tip_hash": summary["tip_hash"],
                "tip_height": summary["tip_height"],
                "skipped": len(committer.skipped()),
            },
        )
        result = {**summary, "run": report}
        if full is not None:
            result["full"] = full
        return result
