"""Full reindex against the crates.io parsers at several chain sizes: the ratio at one size says
little about another, because fixed costs (start-up, planning, opening and publishing the
store, the peers' own set-up) weigh differently as the chain grows.

Per size (``--blocks``, default 3,000, 6,500 and 13,500 blocks of 100-400 transactions: about
239, 527 and 1,106 MB of blocks, the last ``btc_full``'s chain): ``--rounds`` rounds, each a
2-worker full reindex (threads, as ``btc_full``'s ratios run it) and then bitcoin-block-parser's
``BlockParser`` and ``UtxoParser`` (sized UTXO estimate) and blocks_iterator back to back
(``peer_parsers``), each after the blk files are read once; the first round checks every peer's
counts against rechain's tables. Per program: wall and CPU seconds, MB/s, the host's steal and
load average. Ratios are rechain's MB/s over each peer's (each over its own decoded block
bytes), per round and their median. Over the sizes, each program's seconds are fitted as
``fixed + per_GB x GB`` (least squares): the fixed part is what a small chain over-weighs.

    .venv/bin/python benchmarks/btc_full_sizes.py [--blocks 3000,6500,13500] [--rounds 2]
        [--node-cache DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peer_parsers  # noqa: E402
from common import (  # noqa: E402
    btc_reindex_cmd,
    machine,
    run_measured,
    warm_page_cache,
    write_result,
)
from rechain.workers import _native  # noqa: E402

MB = 1e6
PEERS = (
    ("block_parser", "block_parser", False),
    ("utxo_parser_sized", "utxo_parser", True),
    ("blocks_iterator", "blocks_iterator", False),
)


def chain(cache: Path, blocks: int, lo: int, hi: int) -> Path:
    """The generated regtest chain of ``btc_full`` (same generator and seed) at ``blocks``."""
    node = cache / f"chain-{blocks}-{lo}-{hi}"
    made = node / "generated"
    # Another run generating the same chain into the cache: wait for it rather than race it.
    lock = cache / f"chain-{blocks}-{lo}-{hi}.pid"
    while not made.exists() and _alive(lock):
        time.sleep(10)
    if not made.exists():
        shutil.rmtree(node, ignore_errors=True)
        cache.mkdir(parents=True, exist_ok=True)
        lock.write_text(str(os.getpid()))
        _native.generate_bitcoin(
            str(node),
            _native.BtcGenConfig(
                blocks=blocks,
                network="regtest",
                seed=7,
                file_size=134_217_728,
                xor=False,
                shuffle_window=16,
                side_branches=5,
                orphans=3,
                tx_min=lo,
                tx_max=hi,
            ),
        )
        made.touch()
    return node / "blocks"


def _alive(pidfile: Path) -> bool:
    try:
        os.kill(int(pidfile.read_text()), 0)
        return True
    except (OSError, ValueError):
        return False


def reindex(blocks: Path, data: Path, budget: str) -> dict[str, Any]:
    shutil.rmtree(data, ignore_errors=True)
    warm_page_cache(blocks)
    load = os.getloadavg()
    cmd = btc_reindex_cmd(blocks, data, 2, "--mode", "full", "--memory-budget", budget)
    done, rss, wall = run_measured(cmd)
    run = json.loads(done.stdout)["run"]
    return {
        # As btc_full's: the process's wall time, Ray start-up apart (0 on threads).
        "whole_pipeline_s": wall - run["ray_start_s"],
        "cpu_s": rss.cpu_s,
        "steal_s": rss.steal_s,
        "peak_rss_tree_mib": round(rss.peak_tree / 2**20),
        "load_avg_before": [round(x, 2) for x in load],
    }


def fit(points: list[tuple[float, float]]) -> dict[str, float] | None:
    """Least squares of seconds on GB: ``fixed_s`` + ``s_per_gb`` x GB."""
    if len(points) < 2:
        return None
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return None
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    return {"fixed_s": round(my - slope * mx, 3), "s_per_gb": round(slope, 3)}


def measure(blocks: Path, work: Path, budget: str, rounds: int) -> dict[str, Any]:
    binary = peer_parsers.build()
    data = work / "data"
    out_rounds: list[dict[str, Any]] = []
    checks: dict[str, Any] = {}
    nbytes = 0
    for i in range(rounds):
        row: dict[str, Any] = {"rechain": reindex(blocks, data, budget)}
        ours = peer_parsers.rechain_counts(data)
        nbytes = ours["block_bytes"]
        rechain_mb_s = nbytes / row["rechain"]["whole_pipeline_s"] / MB
        row["rechain"]["mb_per_s"] = round(rechain_mb_s, 2)
        for name, peer, sized in PEERS:
            extra = ("--estimated-utxos", str(ours["outputs"])) if sized else ()
            warm_page_cache(blocks)
            load = os.getloadavg()
            got = peer_parsers.run(binary, peer, blocks, *extra)
            if i == 0:
                checks[name] = peer_parsers.check(peer, got, data, ours)
            row[name] = {
                "wall_s": round(got["wall_s"], 3),
                "cpu_s": round(got["cpu_s"], 3),
                "steal_s": round(got["steal_s"], 2),
                "mb_per_s": round(got["mb_per_s"], 2),
                "peak_rss_mib": round(got["peak_rss_mib"]),
                "load_avg_before": [round(x, 2) for x in load],
            }
            row[f"vs_{name}"] = round(rechain_mb_s / got["mb_per_s"], 3)
            # The peer's CPU seconds over rechain's (the same bytes): steadier than wall time
            # on a busy host, blind to how many cores each keeps busy.
            row[f"cpu_vs_{name}"] = round(got["cpu_s"] / row["rechain"]["cpu_s"], 3)
        out_rounds.append(row)
        print(json.dumps(row), flush=True)
    shutil.rmtree(data, ignore_errors=True)
    return {
        "block_bytes": nbytes,
        "rounds": out_rounds,
        **{
            f"median_{kind}_{name}": round(
                statistics.median(r[f"{kind}_{name}"] for r in out_rounds), 3
            )
            for kind in ("vs", "cpu_vs")
            for name, _, _ in PEERS
        },
        "checks": checks,
        "peer_mismatches": [f"{n}: {m}" for n, c in checks.items() for m in c["mismatches"]],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", default="3000,6500,13500", help="chain sizes in blocks")
    ap.add_argument("--tx-per-block", default="100:400")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--memory-budget", default="1G")
    ap.add_argument("--node-cache", type=Path, default=None, help="keep generated chains here")
    args = ap.parse_args()
    lo, hi = (int(x) for x in args.tx_per_block.split(":"))
    work = Path(tempfile.mkdtemp(prefix="rechain-bench-sizes-"))
    cache = args.node_cache or work
    start = machine()
    sizes: dict[str, Any] = {}
    try:
        for n in (int(x) for x in args.blocks.split(",")):
            blocks = chain(cache, n, lo, hi)
            sizes[str(n)] = measure(blocks, work, args.memory_budget, args.rounds)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    fits: dict[str, Any] = {}
    for prog in ("rechain", *(name for name, _, _ in PEERS)):
        key = "whole_pipeline_s" if prog == "rechain" else "wall_s"
        fits[prog] = fit(
            [
                (s["block_bytes"] / 1e9, statistics.median(r[prog][key] for r in s["rounds"]))
                for s in sizes.values()
            ]
        )
    out = {
        "benchmark": "btc_full_sizes",
        "machine": machine(),
        "machine_at_start": start,
        "rounds": args.rounds,
        "sizes": sizes,
        # rechain's MB/s over each peer's, the median of the rounds, per chain size (MB).
        "ratio_by_size_mb": {
            f"{s['block_bytes'] / MB:.0f}": {name: s[f"median_vs_{name}"] for name, _, _ in PEERS}
            | {f"cpu_{name}": s[f"median_cpu_vs_{name}"] for name, _, _ in PEERS}
            for s in sizes.values()
        },
        "seconds_fit": fits,
        # UtxoParser sized to the chain's outputs loses unspent outputs on small chains
        # (peer_parsers says why); every mismatch is listed here and on stderr, as btc_full's.
        "peer_mismatches": {n: s["peer_mismatches"] for n, s in sizes.items()},
    }
    path = write_result("btc_full_sizes", out)
    print(json.dumps(out, indent=1))
    print(f"wrote {path}")
    for n, found in out["peer_mismatches"].items():
        for m in found:
            print(f"PEER COUNT MISMATCH at {n} blocks: {m}", file=sys.stderr)


if __name__ == "__main__":
    main()
