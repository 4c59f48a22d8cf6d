"""UTXO snapshots (``btc dump-utxo``) on a generated chain of about 1 GB, in one run:

* the chain's full reindex (``--mode full``), the time the snapshots are measured against;
* a snapshot in Core's format at the tip and at a height 10% of the blocks below it, each at a
  ``--memory-budget`` of a tenth of the chain: wall time against the reindex's, and peak RSS
  against the baseline plus that budget. The baseline is what does not grow with the input:
  the same dump on a 150-block chain at the smallest budget;
* the ``utxo`` Parquet table at the tip: coins per CPU second (per core) against
  utxo-to-parquet's published rate (177.5 M coins in 5 min 50 s on one thread, from Core's
  dump, which it needs Core to make first);
* the snapshot at the tip split into txid ranges over 2 workers (``--workers 2``), which must
  be byte for byte the single task's file: its speed-up;
* ``check-utxo --data`` of the past snapshot: its digests read back equal the data folder's.

    .venv/bin/python benchmarks/btc_utxo.py [--blocks 13500] [--tx-per-block 100:400]
        [--node DIR]   # generate the chain here, or reuse it (btc_full.py's chain is the same)
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import BIN, btc_reindex_cmd, machine, run_measured, warm_page_cache, write_result  # noqa: E402
from rechain.workers import _native  # noqa: E402

#: utxo-to-parquet's published conversion: 177.5 M coins in 5 min 50 s on one thread.
UTXO_TO_PARQUET_COINS_PER_S = 177_500_000 / 350
BASELINE_BLOCKS = 150
BASELINE_BUDGET_MIB = 16


def generate(node: Path, blocks: int, tx_per_block: str) -> None:
    lo, hi = (int(x) for x in tx_per_block.split(":"))
    made = node / f"generated-{blocks}-{lo}-{hi}"
    if made.exists():
        return
    shutil.rmtree(node, ignore_errors=True)
    _native.generate_bitcoin(
        str(node),
        _native.BtcGenConfig(
            blocks=blocks, network="regtest", seed=7, file_size=134_217_728, xor=False,
            shuffle_window=16, side_branches=5, orphans=3, tx_min=lo, tx_max=hi,
        ),
    )  # fmt: skip
    made.touch()


def measured(cmd: list[str]) -> dict[str, Any]:
    done, rss, elapsed = run_measured(cmd)
    out: dict[str, Any] = json.loads(done.stdout) if done.stdout.strip() else {}
    return out | {
        "wall_s": elapsed,
        "cpu_s": rss.cpu_s,
        "peak_rss_mib": rss.peak_root / 2**20,
        "steal_s": rss.steal_s,
    }


def dump(data: Path, *extra: object) -> dict[str, Any]:
    return measured([str(BIN), "btc", "dump-utxo", "--data", str(data), "--json", *map(str, extra)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--blocks", type=int, default=13_500, help="13,500 blocks: about 1.06 GB")
    ap.add_argument("--tx-per-block", default="100:400")
    ap.add_argument("--node", type=Path, default=None)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rechain-bench-utxo-"))
    node = args.node or work / "node"
    try:
        generate(node, args.blocks, args.tx_per_block)
        blocks = node / "blocks"
        chain_bytes = sum(f.stat().st_size for f in blocks.glob("blk*.dat"))
        budget_mib = max(64, chain_bytes // 10 // 2**20)
        data = work / "data"
        warm_page_cache(blocks)
        reindex = measured(btc_reindex_cmd(blocks, data, 2, "--mode", "full"))
        tip = int(reindex["tip_height"])
        past = tip - args.blocks // 10
        small = work / "small"
        _native.generate_bitcoin(
            str(small),
            _native.BtcGenConfig(
                blocks=BASELINE_BLOCKS, network="regtest", seed=7, file_size=134_217_728,
                xor=False, shuffle_window=16, side_branches=0, orphans=0, tx_min=100, tx_max=400,
            ),
        )  # fmt: skip
        measured(btc_reindex_cmd(small / "blocks", work / "small-data", 1, "--mode", "full"))
        baseline = dump(
            work / "small-data", "--out", work / "small.utxo", "--memory-budget",
            f"{BASELINE_BUDGET_MIB}M",
        )  # fmt: skip
        budget = ["--memory-budget", f"{budget_mib}M"]
        at_tip = dump(data, "--out", work / "tip.utxo", *budget)
        at_past = dump(data, "--height", past, "--out", work / "past.utxo", *budget)
        split = dump(data, "--out", work / "tip-split.utxo", "--workers", 2, *budget)
        same = (work / "tip-split.utxo").read_bytes() == (work / "tip.utxo").read_bytes()
        assert same, "the split dump's file differs from the single task's"
        table = dump(data, "--format", "parquet", "--out", work / "utxo", *budget)
        checked = measured(
            [str(BIN), "btc", "check-utxo", str(work / "past.utxo"), "--data", str(data),
             "--json", *budget]
        )  # fmt: skip
        assert checked["matches"], checked["mismatch"]
        assert table["hash_serialized_3"] == at_tip["hash_serialized_3"]
        limit = baseline["peak_rss_mib"] + budget_mib
        coins_per_cpu_s = table["coins"] / table["cpu_s"]
        result = {
            "machine": machine(),
            "chain": {
                "blocks": args.blocks,
                "tx_per_block": args.tx_per_block,
                "bytes": chain_bytes,
                "tip": tip,
                "past_height": past,
            },  # fmt: skip
            "memory_budget_mib": budget_mib,
            "rechain_full_reindex": {k: reindex[k] for k in ("wall_s", "cpu_s", "peak_rss_mib")},
            "baseline_small_chain_dump": baseline,
            "dump_at_tip": at_tip,
            "dump_10pct_below_tip": at_past,
            "parquet_at_tip": table,
            "dump_at_tip_2_workers": split,
            "check_utxo_past": {k: checked[k] for k in ("matches", "wall_s", "cpu_s")},
            "ratios": {
                "tip_dump_over_reindex": at_tip["wall_s"] / reindex["wall_s"],
                "tip_dump_1_over_2_workers": at_tip["wall_s"] / split["wall_s"],
                "past_dump_over_reindex": at_past["wall_s"] / reindex["wall_s"],
                "tip_peak_rss_over_baseline_plus_budget": at_tip["peak_rss_mib"] / limit,
                "past_peak_rss_over_baseline_plus_budget": at_past["peak_rss_mib"] / limit,
                "parquet_coins_per_cpu_s_over_utxo_to_parquet": coins_per_cpu_s
                / UTXO_TO_PARQUET_COINS_PER_S,
            },
            "targets": {
                "tip_peak_rss_over_baseline_plus_budget": 1.0,
                "past_peak_rss_over_baseline_plus_budget": 1.0,
            },
            "parquet_coins_per_cpu_s": coins_per_cpu_s,
            "parquet_coins_per_wall_s": table["coins"] / table["wall_s"],
            "utxo_to_parquet_published_coins_per_s": UTXO_TO_PARQUET_COINS_PER_S,
        }
        path = write_result("btc_utxo", result)
        print(f"wrote {path}")
        for k, v in result["ratios"].items():
            print(f"  {k}: {v:.3f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
