"""``rechain eth import``: plans the units of an archive folder (era1 and Ere files, alone or
mixed) or a geth freezer and runs the
Ethereum pipeline's stages (``pipeline/ethereum/stages/``); ``rechain eth status``."""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rechain.pipeline.engine.driver import Driver
from rechain.pipeline.errors import RechainError
from rechain.pipeline.ethereum import archives
from rechain.pipeline.ethereum.run import PIPELINE, EthRun
from rechain.pipeline.ethereum.stages import stages
from rechain.pipeline.ethereum.units import committed_units
from rechain.pipeline.runtime import placement
from rechain.pipeline.store.datadir import DataDir
from rechain.pipeline.store.folder import claim
from rechain.schemas import rocksdb as layout
from rechain.workers import _native
from rechain.workers.eth_import import EthUnit
from rechain.workers.memory import DEFAULT_MEMORY_BUDGET

#: Blocks per freezer unit (an archive's).
UNIT_BLOCKS = archives.FILE_BLOCKS


@dataclass
class ImportOptions:
    data: Path
    era1: Path | None = None
    #: A folder of Ere files (``--ere``); like ``era1``, it may mix both formats.
    ere: Path | None = None
    freezer: Path | None = None
    #: None: the data folder's network, else the archives' (their names carry it), else
    #: mainnet.
    network: str | None = None
    workers: int = 0
    ray_address: str | None = None
    #: First and last block to import (inclusive); None: all.
    first: int | None = None
    last: int | None = None
    memory_budget: int = DEFAULT_MEMORY_BUDGET
    progress: bool = True
    #: Check ethash proof of work of every pre-merge header (``--no-pow`` turns it off).
    pow: bool = True
    from_stage: str | None = None

    @property
    def kind(self) -> str:
        if self.era1 is not None:
            return "era1"
        return "ere" if self.ere is not None else "freezer"

    @property
    def source(self) -> Path:
        src = self.era1 or self.ere or self.freezer
        assert src is not None
        return src

    @property
    def to_block(self) -> int:
        """One past the last block to import."""
        return (1 << 63) if self.last is None else self.last + 1


def _archive_units(opts: ImportOptions) -> list[EthUnit]:
    """One unit per era1 or Ere file of the folder (geth refuses a folder mixing the two;
    histories across the merge come that way)."""
    units: list[EthUnit] = []
    lo, hi = opts.first or 0, opts.to_block
    for a in archives.scan(opts.source, opts.network):
        if a.end <= lo or a.first >= hi:
            continue
        units.append(
            EthUnit(
                seq=len(units),
                kind=a.kind,
                path=str(a.path),
                first=a.first,
                end=a.end,
                key=a.path.name,
                network=a.network,
                pow=opts.pow,
                from_block=lo,
                to_block=hi,
            )
        )
    return units


def _freezer_units(opts: ImportOptions) -> list[EthUnit]:
    try:
        tail, head, chain = _native.eth_freezer_extent(str(opts.source))
    except ValueError as e:
        raise RechainError(f"{opts.source}: {e}") from e
    lo, hi = max(tail, opts.first or 0), min(head, opts.to_block)
    units: list[EthUnit] = []
    start = lo - lo % UNIT_BLOCKS
    for first in range(start, hi, UNIT_BLOCKS):
        a, b = max(first, lo), min(first + UNIT_BLOCKS, hi)
        units.append(
            EthUnit(
                seq=len(units),
                kind="freezer",
                path=chain,
                first=a,
                end=b,
                key=f"freezer-{first:012d}",
                network=opts.network,
                pow=opts.pow,
                from_block=lo,
                to_block=hi,
            )
        )
    return units


def _fingerprint(unit: EthUnit) -> str:
    """What a unit's result depends on: its input's bytes (size and modification time of its
    file, or its block range) and the options."""
    if unit.kind != "freezer":
        st = os.stat(unit.path)
        src: list[Any] = [st.st_size, st.st_mtime_ns]
    else:
        src = [unit.first, unit.end]
    # --from/--to as they cut this unit: a longer freezer or range leaves earlier units as they
    # are (a freezer only grows at its head).
    cut = [max(unit.from_block, unit.first), min(unit.to_block, unit.end)]
    items = [unit.kind, src, unit.network, unit.pow, cut]
    return hashlib.sha256(json.dumps(items).encode()).hexdigest()[:24]


def _check_same_chain(data: DataDir, opts: ImportOptions) -> None:
    """A data folder holds one chain from one source: a second import must name the same."""
    want = {"kind": opts.kind, "source": str(opts.source.resolve()), "network": opts.network}
    have = data.meta_get(layout.META_ETH_IMPORT)
    if have is not None and have != want:
        raise RechainError(
            f"{data.path} holds an import of {have['network']} {have['kind']} {have['source']}; "
            "import into a new --data folder"
        )
    if have is None:
        data.write({layout.CF_META: [(layout.META_ETH_IMPORT, want)]})


def default_network(opts: ImportOptions) -> str:
    """The network of an import run without ``--network``."""
    if (opts.data / "rocksdb" / "CURRENT").exists():
        with DataDir(opts.data, readonly=True) as data:
            have = data.meta_get(layout.META_ETH_IMPORT)
        if have is not None:
            return str(have["network"])
    if opts.kind != "freezer":
        named = archives.folder_network(opts.source)
        if named is not None:
            return named
    return "mainnet"


def run(opts: ImportOptions) -> dict[str, Any]:
    t_start = time.perf_counter()
    opts = replace(opts, network=opts.network or default_network(opts))
    if opts.network not in archives.NETWORKS:
        raise RechainError(f"unknown network {opts.network!r} ({', '.join(archives.NETWORKS)})")
    if opts.first is not None and opts.last is not None and opts.last < opts.first:
        raise RechainError(f"--to {opts.last} is below --from {opts.first}")
    units = _freezer_units(opts) if opts.kind == "freezer" else _archive_units(opts)
    workers = opts.workers or os.cpu_count() or 1
    with DataDir(opts.data) as data:
        claim(data, PIPELINE)
        _check_same_chain(data, opts)
        ctx = EthRun(opts, data, units, {u.key: _fingerprint(u) for u in units}, workers)
        driver = Driver(PIPELINE, stages(), data)
        driver.run(ctx, opts.from_stage)
        summary = summarize(data)
        report = {
            **{k: ctx.report.get(k, 0) for k in ("units", "worker_s", "commit_s", "ray_start_s")},
            "execution": ctx.report.get("execution", "skipped"),
            "units_planned": len(units),
            "workers": workers,
            "stages_run": driver.ran,
            "placement": placement.report(driver.ran),
            "total_s": time.perf_counter() - t_start,
        }
        data.write({layout.CF_META: [(layout.META_ETH_RUN, report)]})
        data.write_report("eth_import", {**summary, "run": report})
        return {**summary, "run": report}


def summarize(data: DataDir) -> dict[str, Any]:
    """The import's figures from the committed units (``eth status``)."""
    source = data.meta_get(layout.META_ETH_IMPORT)
    if source is None:
        raise RechainError(f"{data.path}: no Ethereum import here yet")
    units = sorted(committed_units(data).values(), key=lambda u: (u["first"], u["end"]))
    links = data.meta_get(layout.META_ETH_LINKS) or {"checked": 0, "verdicts": [], "gaps": []}
    with_blocks = [u for u in units if u["blocks"]]
    counts: dict[str, int] = {}
    rules: dict[str, int] = {}
    verdicts: list[dict[str, Any]] = []
    skipped = []
    for u in units:
        for table, n in u.get("rows", {}).items():
            counts[table] = counts.get(table, 0) + n
        for rule, n in u.get("rules", {}).items():
            rules[rule] = rules.get(rule, 0) + n
        source_name = Path(u["part"]).name
        verdicts += [{"source": source_name, **v} for v in u.get("verdicts", [])]
        if u["blocks"] == 0:
            detail = u["verdicts"][0]["detail"] if u.get("verdicts") else None
            skipped.append({"source": source_name, "reason": "unreadable", "detail": detail})
    for v in links["verdicts"]:
        rules[v["rule"]] = rules.get(v["rule"], 0) + 1
    verdicts += links["verdicts"]
    tip = with_blocks[-1] if with_blocks else None
    tip_number = tip["end"] - 1 if tip else None
    tip_hash = None
    if tip_number is not None:
        raw = data.get(layout.CF_ETH_CANONICAL, tip_number.to_bytes(8, "big"))
        tip_hash = "0x" + raw.hex() if raw else None
    blocks = sum(u["blocks"] for u in units)
    return {
        "network": source["network"],
        "source": source["source"],
        "kind": source["kind"],
        "first_block": with_blocks[0]["first"] if with_blocks else None,
        "last_block": tip_number,
        "tip_hash": tip_hash,
        "total_difficulty": tip.get("last_td") if tip else None,
        "blocks": blocks,
        "units": len(units),
        "counts": counts,
        "checks": {
            "headers": blocks,
            "pow": sum(u.get("pow_checked", 0) for u in units),
            # Ere block proofs: read, and checked against an accumulator root (the others
            # need beacon state).
            "proofs": sum(u.get("proofs", 0) for u in units),
            "proofs_checked": sum(u.get("proofs_checked", 0) for u in units),
            "accumulators": sum(1 for u in with_blocks if u.get("accumulator")),
            "links": links["checked"],
        },
        "failed": sum(u.get("violations", 0) for u in units) + len(links["verdicts"]),
        "failed_by_rule": rules,
        "verdicts": verdicts,
        "skipped": skipped,
        # Block ranges below a unit that no unit holds (a folder with some epochs only).
        "gaps": links["gaps"],
        "unrecovered_senders": sum(u.get("unrecovered_senders", 0) for u in units),
    }


def status(data_path: Path) -> dict[str, Any]:
    with DataDir(data_path, readonly=True) as data:
        return {**summarize(data), "run": data.meta_get(layout.META_ETH_RUN)}
