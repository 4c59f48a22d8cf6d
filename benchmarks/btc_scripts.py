"""Script validation (``btc reindex --mode full --scripts``), in one run on one signed generated
chain spending every script kind the generator signs (``--script-kinds all``), warm page cache:

* rechain's full reindex with ``--scripts`` against Bitcoin Core's reindex with
  ``-assumevalid=0`` through the oracle harness of ``tests/bitcoin_core`` (every script
  checked on Core's script-check threads), which must end on rechain's tip and UTXO set;
* the ``scripts`` stage against its floor: the same blocks' inputs through the same
  interpreter in a tight loop on all cores (every run of blocks read and checked by the Rust
  core with the run's undo records already in memory, no stage, no commits);
* the stage with 1 and with 2 workers (``--from-stage scripts``);
* peak RSS of a second ``--scripts`` run at a ``--memory-budget`` of a tenth of the chain,
  against the baseline plus that budget. The baseline is what does not grow with the input:
  the peak of the same command on a 150-block chain at the smallest budget, with every
  library the run maps (DuckDB, the interpreter) loaded; a rerun with nothing to do, which
  maps neither, is reported beside it. The run against Core keeps the default budget, as
  Core keeps its default cache;
* a transaction of thousands of inputs: the time per input as the input count grows (one
  deserialization and one ``PrecomputedTransactionData`` per transaction keep it flat; the
  ``bitcoinconsensus`` crate's per-input call redoes both for every input, n^2);
* a projection of mainnet from the measured CPU time per input, with and without
  ``--assume-valid``, on 4 and 16 nodes of 16 cores.

    .venv/bin/python benchmarks/btc_scripts.py [--blocks 3600] [--tx-per-block 600:900]
        [--node DIR]   # keep the generated chain in DIR and reuse it when it is there
        [--memory-only]   # only the peak RSS figure (the budgeted run and its baseline)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import peer_parsers  # noqa: E402
from common import (  # noqa: E402
    BIN,
    RESULTS,
    btc_reindex_cmd,
    machine,
    run_measured,
    warm_page_cache,
    write_result,
)
from rechain.pipeline.bitcoin import chain_parts  # noqa: E402
from rechain.pipeline.store.datadir import DataDir  # noqa: E402
from rechain.schemas import rocksdb as layout  # noqa: E402
from rechain.workers import _native  # noqa: E402

#: Mainnet's inputs (non-coinbase), about 3.3 billion at the end of 2026; the share of them in
#: blocks above Core's default assumed-valid block (height 938,343) is what a run with Core's
#: default still checks: about 4% (the last ~40,000 blocks of ~950,000, at ~7,000 inputs each,
#: against the chain's average of ~3,500).
MAINNET_INPUTS = 3.3e9
MAINNET_INPUTS_ABOVE_DEFAULT_ASSUME_VALID = 0.04 * MAINNET_INPUTS


def generate(node: Path, blocks: int, tx_per_block: str) -> dict[str, Any]:
    done, _, _ = run_measured(
        [str(BIN), "gen", "bitcoin", str(node), "--blocks", str(blocks), "--tx-per-block",
         tx_per_block, "--seed", "31", "--script-kinds", "all"]
    )  # fmt: skip
    del done
    return dict(json.loads((node / "expected.json").read_text()))


def reindex(blocks: Path, data: Path, workers: int, *extra: str) -> dict[str, Any]:
    done, rss, elapsed = run_measured(btc_reindex_cmd(blocks, data, workers, *extra))
    result: dict[str, Any] = json.loads(done.stdout)
    return {
        "wall_s": elapsed,
        "cpu_s": rss.cpu_s,
        "peak_rss_mib": rss.peak_root / 2**20,
        "steal_s": rss.steal_s,
        "stage_s": result["run"]["stage_s"],
        "inputs_checked": result["run"].get("scripts_inputs_checked", 0),
        "tip_hash": result["tip_hash"],
        "utxo_count": result["full"]["utxo_count"],
    }


#: The smallest budget the baseline run takes, and its chain's length (spends start at ~101).
BASELINE_BUDGET_MIB = 16
BASELINE_BLOCKS = 150


def memory_figures(blocks: Path, work: Path, budget_mib: int) -> dict[str, Any]:
    """Peak RSS at a budget of a tenth of the chain against the baseline plus that budget."""
    small = work / "small"
    generate(small, BASELINE_BLOCKS, "600:900")
    baseline = reindex(
        small / "blocks", work / "small-data", 2, "--mode", "full", "--scripts",
        "--memory-budget", f"{BASELINE_BUDGET_MIB}M",
    )  # fmt: skip
    warm_page_cache(blocks)
    budgeted = reindex(
        blocks, work / "budgeted", 2, "--mode", "full", "--scripts",
        "--memory-budget", f"{budget_mib}M",
    )  # fmt: skip
    return {
        "rechain_baseline_small_chain": baseline | {"blocks": BASELINE_BLOCKS},
        "rechain_full_scripts_at_budget": budgeted,
        "peak_rss_over_baseline_plus_budget": budgeted["peak_rss_mib"]
        / (baseline["peak_rss_mib"] + budget_mib),
    }


def run_floor(blocks: Path, data: Path, threads: int) -> dict[str, Any]:
    with DataDir(data, readonly=True) as d:
        cs = chain_parts.checkpoint(d)
        assert cs is not None
        best = chain_parts.best_chain(d)
        runs = []
        for first, hashes, entries in chain_parts.best_chain_runs(
            d, best, 0, int(cs["height"]), 16 << 20, 1_000
        ):
            undos = d.cf(layout.CF_BTC_UNDO)[
                [layout.undo_key(h) for h in range(first, first + len(hashes))]
            ]
            runs.append((first, hashes, entries, undos))
    paths = {int(p.name[3:8]): str(p) for p in blocks.glob("blk*.dat")}
    key = (blocks / "xor.dat").read_bytes()
    inputs = 0
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    for first, hashes, entries, undos in runs:
        checked = _native.verify_block_scripts(
            "regtest",
            key,
            first,
            list(hashes),
            [paths[e.file] for e in entries],
            [e.offset for e in entries],
            list(undos),
            threads,
        )
        assert checked.failure is None, checked.failure
        inputs += checked.inputs
    wall = time.perf_counter() - t0
    return {
        "threads": threads,
        "runs": len(runs),
        "inputs": inputs,
        "wall_s": wall,
        "cpu_s": time.process_time() - cpu0,
        "inputs_per_s": inputs / wall,
    }


def wide_transaction(n: int) -> tuple[bytes, list[tuple[int, bytes]]]:
    """A segwit transaction spending ``n`` P2WSH outputs whose witness script is ``OP_TRUE``:
    no signature, so the time is the interpreter's per-input work plus whatever is redone per
    input (the BIP143 midstates need every input's prevout and sequence)."""
    witness_script = b"\x51"
    spk = b"\x00\x20" + hashlib.sha256(witness_script).digest()
    ins = b"".join(
        hashlib.sha256(struct.pack("<I", i)).digest() + struct.pack("<I", 0) + b"\x00"
        + b"\xff\xff\xff\xff"
        for i in range(n)
    )  # fmt: skip
    count = _compact(n)
    outs = b"\x01" + struct.pack("<q", n * 1000 - 500) + b"\x01\x51"
    witness = b"".join(b"\x01\x01" + witness_script for _ in range(n))
    tx = struct.pack("<i", 2) + b"\x00\x01" + count + ins + outs + witness + b"\x00" * 4
    return tx, [(1000, spk)] * n


def _compact(n: int) -> bytes:
    if n < 0xFD:
        return bytes([n])
    if n <= 0xFFFF:
        return b"\xfd" + struct.pack("<H", n)
    return b"\xfe" + struct.pack("<I", n)


def wide_transactions(sizes: tuple[int, ...] = (500, 2_000, 8_000)) -> list[dict[str, Any]]:
    out = []
    for n in sizes:
        tx, spent = wide_transaction(n)
        t0 = time.perf_counter()
        verdict = _native.core_verify_tx(tx, spent, _native.script_flag_bits()["WITNESS"] | 1)
        seconds = time.perf_counter() - t0
        assert verdict[0] == "valid", verdict
        out.append({"inputs": n, "seconds": seconds, "us_per_input": seconds / n * 1e6})
    return out


def projection(cpu_s_per_input: float) -> dict[str, Any]:
    """Mainnet's scripts on clusters of 16-core nodes at the measured CPU time per input (no
    scaling loss assumed: the runs are independent)."""
    out: dict[str, Any] = {"cpu_s_per_input": cpu_s_per_input}
    for nodes in (4, 16):
        cores = nodes * 16
        out[f"{nodes}_nodes_all_scripts_h"] = MAINNET_INPUTS * cpu_s_per_input / cores / 3600
        out[f"{nodes}_nodes_default_assume_valid_h"] = (
            MAINNET_INPUTS_ABOVE_DEFAULT_ASSUME_VALID * cpu_s_per_input / cores / 3600
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--blocks", type=int, default=3_600, help="1.1 GB at 600-900 txs a block")
    ap.add_argument("--tx-per-block", default="600:900")
    ap.add_argument("--node", type=Path, default=None)
    ap.add_argument("--memory-only", action="store_true")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rechain-bench-scripts-"))
    node = args.node or work / "node"
    try:
        if not (node / "expected.json").exists():
            generate(node, args.blocks, args.tx_per_block)
        blocks = node / "blocks"
        chain_bytes = sum(f.stat().st_size for f in blocks.glob("blk*.dat"))
        # A tenth of the chain, so that the run streams ten times its budget of input.
        budget_mib = max(64, chain_bytes // 10 // 2**20)
        memory = memory_figures(blocks, work, budget_mib)
        if args.memory_only:
            # The other figures stay those of the last full run; the memory ones are replaced
            # and stamped with this run's machine and time.
            last = RESULTS / "btc_scripts.json"
            result = json.loads(last.read_text()) if last.exists() else {"ratios": {}}
            result |= memory | {"memory_budget_mib": budget_mib, "memory_machine": machine()}
            result["ratios"]["peak_rss_over_baseline_plus_budget"] = memory[
                "peak_rss_over_baseline_plus_budget"
            ]
            print(json.dumps(memory, indent=1))
            print(f"wrote {write_result('btc_scripts', result)}")
            return
        warm_page_cache(blocks)
        full = reindex(blocks, work / "data", 2, "--mode", "full", "--scripts")
        noop = reindex(blocks, work / "data", 2)
        warm_page_cache(blocks)
        plain = reindex(blocks, work / "plain", 2, "--mode", "full")
        core_binary = peer_parsers.build_core_oracle()
        warm_page_cache(blocks)
        core = peer_parsers.run_json(
            [str(core_binary), "--network", "regtest", "--blocks", str(blocks), "--assumevalid",
             "0", "--threads", str(os.cpu_count() or 1)]
        )  # fmt: skip
        assert core["tip_hash"] == full["tip_hash"], (core["tip_hash"], full["tip_hash"])
        assert core["utxo_count"] == full["utxo_count"]
        one = reindex(blocks, work / "data", 1, "--from-stage", "scripts")
        two = reindex(blocks, work / "data", 2, "--from-stage", "scripts")
        floor_2 = run_floor(blocks, work / "data", 2)
        stage_2 = two["stage_s"]["scripts"]
        stage_1 = one["stage_s"]["scripts"]
        cpu_per_input = floor_2["cpu_s"] / max(floor_2["inputs"], 1)
        result = {
            "machine": machine(),
            "chain": {
                "blocks": args.blocks,
                "tx_per_block": args.tx_per_block,
                "bytes": chain_bytes,
                "inputs": floor_2["inputs"],
            },  # fmt: skip
            "memory_budget_mib": budget_mib,
            "rechain_full_scripts": full,
            "rechain_noop_rerun": noop,
            **memory,
            "rechain_full_no_scripts": plain,
            "core_reindex_assumevalid_0": {
                k: core[k]
                for k in ("wall_s", "process_wall_s", "cpu_s", "peak_rss_mib", "steal_s")
                if k in core
            }
            | {"import_seconds": core["import_seconds"]},  # fmt: skip
            "scripts_stage_1_worker_s": stage_1,
            "scripts_stage_2_workers_s": stage_2,
            "floor_2_threads": floor_2,
            "wide_transactions": wide_transactions(),
            "ratios": {
                "core_over_rechain_full_scripts": core["import_seconds"] / full["wall_s"],
                "stage_over_floor": stage_2 / floor_2["wall_s"],
                "stage_1_over_2_workers": stage_1 / stage_2,
                "peak_rss_over_baseline_plus_budget": memory["peak_rss_over_baseline_plus_budget"],
            },
            "targets": {
                "core_over_rechain_full_scripts": 1.3,
                "stage_over_floor": 1.15,
                "stage_1_over_2_workers": 1.8,
                "peak_rss_over_baseline_plus_budget": 1.0,
            },
            "mainnet_projection": projection(cpu_per_input),
        }
        path = write_result("btc_scripts", result)
        print(f"wrote {path}")
        for k, v in result["ratios"].items():
            print(f"  {k}: {v:.2f} (target {result['targets'][k]})")
    finally:
        if args.node is None:
            shutil.rmtree(work, ignore_errors=True)
        else:
            shutil.rmtree(work / "data", ignore_errors=True)
            shutil.rmtree(work / "plain", ignore_errors=True)
            shutil.rmtree(work / "budgeted", ignore_errors=True)


if __name__ == "__main__":
    main()
