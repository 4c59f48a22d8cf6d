"""Flow v6 checkpoints, rechain side by side with flow-go v0.33.1 on the same checkpoint.

A WAL is generated (rechain's generator; its bytes equal flow-go's, see test_flow_interop), then
flow-go replays it and writes checkpoint C with its own writer. On C:

* read: `rechain flow checkpoint read` (parts verified on `--workers` threads with every node
  hash recomputed, tries assembled, registers published to RocksDB + Parquet) vs flow-go's
  `LoadCheckpoint` (which trusts the stored hashes and publishes nothing);
* read again with `--trust-leaf-hashes` (interior hashes and roots still recomputed), with
  `--trust-hashes` (every stored hash taken, as flow-go does), with `--in-memory` (the whole
  forest loaded first), and streamed within `--memory-budget` of a tenth of the checkpoint;
* verify: `rechain flow checkpoint verify`, every check of the read with nothing published
  (every hash recomputed, and with `--trust-hashes`): like for like with flow-go's read, which
  publishes nothing;
* write: `rechain flow checkpoint write` (streams the data folder's registers with the leaf
  hashes the read published in `register_hashes`, checks each by `HashLeaf`, recomputes the
  interior hashes and the root) vs flow-go's `StoreCheckpointV6Concurrently` of the tries it
  loaded (its load is timed separately and not counted), the same write without
  `register_hashes` (every leaf's hash chain run), and rechain's forest writer on tries it
  loaded (load not counted);
* the keccak floor: the multi-lane keccak's best rate on `--workers` threads (measured before
  and after the reads, same code as the verifier's leaf chains) times the permutations the
  read's hash recomputation ran: the least time any reader that recomputes every hash needs
  on this machine now, next to flow-go's read (which recomputes none);
* at ten times the budget (`--big-updates`, `--big-budget`): a checkpoint of a larger WAL,
  written by rechain's replay checkpointer, read and verified streamed within `--big-budget`
  and read by flow-go (the whole trie in memory): time and peak RSS of each;
* the publish floor: the `registers` and `register_hashes` parts the read published, encoded
  again from memory on `--workers` threads (best of three): the least any read that publishes
  them spends writing them, next to flow-go's read (which publishes nothing) and, with the
  keccak floor, under the verifying read;

reporting seconds and peak RSS of each, and checking both sides agree on the root and register
count (and that flow-go loads rechain's checkpoint). The verifying read, the `--trust-hashes`
read, flow-go's read and both verifications run `--repeat` times each, in turn, and so do
rechain's write and flow-go's store; each reports its least time (all of them are kept) and
its largest peak RSS, as the floor is the best of several runs. The checkpoint's files are read
once before each timed read (`warm_page_cache`: these hosts page idle files out).

    .venv/bin/python benchmarks/flow_checkpoint.py [--updates 8000] [--registers-per-update 40]
        [--repeat 3] [--big-updates 24000] [--big-budget 16M]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (  # noqa: E402
    TreeRss,
    encoding_floor,
    machine,
    run_measured,
    warm_page_cache,
    write_result,
)
from flow_replay import BIN, flowgo_binary  # noqa: E402
from rechain.pipeline.cli import parse_size  # noqa: E402
from rechain.pipeline.flow.checkpoint import checkpoint_bytes, list_checkpoints  # noqa: E402

KECCAK_RATE = """
import json, sys
from rechain.workers import _native
print(json.dumps(_native.flow_keccak_throughput(int(sys.argv[1]), int(sys.argv[2])).as_dict()))
"""


def keccak_rate(threads: int) -> dict[str, float]:
    """The multi-lane keccak's rate on `threads` threads (best of three short runs)."""
    runs = [
        json.loads(
            subprocess.run(
                [sys.executable, "-c", KECCAK_RATE, str(threads), "4000000"],
                check=True,
                capture_output=True,
                text=True,
                timeout=600,
            ).stdout
        )
        for _ in range(3)
    ]
    return max(runs, key=lambda r: r["permutations_per_s"])


NAME = "checkpoint.00000000"
FOREST_WRITE = """
import json, sys, time
from rechain.workers import _native
t0 = time.perf_counter()
forest, _ = _native.flow_checkpoint_load(sys.argv[1], sys.argv[2], verify_hashes=False)
t1 = time.perf_counter()
_native.flow_checkpoint_write(forest, sys.argv[3], sys.argv[2])
print(json.dumps({"load_s": t1 - t0, "store_s": time.perf_counter() - t1}))
"""


def measure_ten_times_budget(
    flowgo: Path, work: Path, workers: int, budget: int, updates: int
) -> dict[str, Any]:
    """A checkpoint of at least ten times `budget`, written by rechain's replay checkpointer
    (flow-go's bytes, see test_flow_checkpoint) from a generated WAL of `updates` updates of
    40 registers: read (streamed, published) and verified within `budget`, each with every hash
    recomputed and with `--trust-hashes`, and read by flow-go, which holds the whole trie. Time
    and peak RSS of each."""
    wal = work / "wal-big"
    subprocess.run(
        [
            str(BIN),
            "gen",
            "flow",
            str(wal),
            "--updates",
            str(updates),
            "--registers-per-update",
            "40",
            "--seed",
            "11",
            "--segment-size",
            str(4 << 20),
        ],
        check=True,
        capture_output=True,
        timeout=3600,
    )
    segments = sum(1 for p in wal.iterdir() if p.name.isdigit())
    cps = work / "cps-big"
    subprocess.run(
        [
            str(BIN),
            "flow",
            "replay",
            "--wal",
            str(wal),
            "--data",
            str(work / "d-big-replay"),
            "--workers",
            str(workers),
            "--no-progress",
            "--json",
            "--checkpoint-every",
            str(segments),
            "--checkpoint-dir",
            str(cps),
        ],
        check=True,
        capture_output=True,
        timeout=3600,
    )
    shutil.rmtree(work / "d-big-replay")
    [(_, name)] = list_checkpoints(cps)
    cp_bytes = checkpoint_bytes(cps, name)
    mib = 2**20

    def ours(action: str, *flags: str) -> tuple[dict[str, Any], int]:
        warm_page_cache(cps)
        data = ["--data", str(work / f"d-big-{len(flags)}")] if action == "read" else []
        done, rss, _ = run_measured(
            [
                str(BIN),
                "flow",
                "checkpoint",
                action,
                "--dir",
                str(cps),
                *data,
                "--workers",
                str(workers),
                "--memory-budget",
                str(budget),
                "--json",
                *flags,
            ]
        )
        return json.loads(done.stdout), rss.peak_root

    runs = {
        "rechain_read": ours("read"),
        "rechain_verify": ours("verify"),
        "rechain_read_trust_hashes": ours("read", "--trust-hashes"),
        "rechain_verify_trust_hashes": ours("verify", "--trust-hashes"),
    }
    warm_page_cache(cps)
    theirs, go_rss, _ = run_measured(
        [str(flowgo), "read-checkpoint", "--dir", str(cps), "--file", name]
    )
    go = json.loads(theirs.stdout)
    go_s = float(go["elapsed_seconds"])
    want = (go["tries"][-1]["root"], go["tries"][-1]["reg_count"])
    return {
        "checkpoint_bytes": cp_bytes,
        "registers": go["tries"][-1]["reg_count"],
        "memory_budget": budget,
        "checkpoint_over_budget": round(cp_bytes / budget, 2),
        "same_root_and_registers": all(
            (r["root"], r["reg_count"]) == want for r, _ in runs.values()
        ),
        "modes": {k: r["mode"] for k, (r, _) in runs.items()},
        "seconds": {
            **{k: round(r["total_s"], 3) for k, (r, _) in runs.items()},
            "flowgo_read": round(go_s, 3),
        },
        "peak_rss_mib": {
            **{k: round(rss / mib) for k, (_, rss) in runs.items()},
            "flowgo_read": round(go_rss.peak_root / mib),
        },
        "flowgo_rss_over_rechain": {
            k: round(go_rss.peak_root / rss, 2) for k, (_, rss) in runs.items()
        },
        "speed_vs_flowgo_read": {k: round(go_s / r["total_s"], 3) for k, (r, _) in runs.items()},
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--updates", type=int, default=8_000)
    ap.add_argument("--registers-per-update", type=int, default=40)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3, help="runs of each timed read")
    ap.add_argument(
        "--big-updates",
        type=int,
        default=24_000,
        help="updates of the WAL whose checkpoint is read at a tenth of its size (0: skip)",
    )
    ap.add_argument("--big-budget", type=parse_size, default=parse_size("16M"))
    args = ap.parse_args()
    flowgo = flowgo_binary()
    work = Path(tempfile.mkdtemp(prefix="rechain-cp-bench-"))
    try:
        wal = work / "wal"
        subprocess.run(
            [
                str(BIN),
                "gen",
                "flow",
                str(wal),
                "--updates",
                str(args.updates),
                "--registers-per-update",
                str(args.registers_per_update),
                "--seed",
                "7",
            ],
            check=True,
            capture_output=True,
            timeout=3600,
        )
        cp = work / "cp"
        made = json.loads(
            subprocess.run(
                [str(flowgo), "checkpoint", "--wal", str(wal), "--out", str(cp)],
                check=True,
                capture_output=True,
                text=True,
                timeout=3600,
            ).stdout
        )
        cp_bytes = sum(p.stat().st_size for p in cp.iterdir())
        rate_before = keccak_rate(args.workers)

        # Read: the verifying read, the read trusting every stored hash (like for like with
        # flow-go's) and flow-go's, in turn, each into a fresh data folder.
        def our_read(data: str, *flags: str) -> tuple[dict[str, Any], TreeRss, float]:
            shutil.rmtree(work / data, ignore_errors=True)
            warm_page_cache(cp)
            done, rss, wall = run_measured(
                [
                    str(BIN),
                    "flow",
                    "checkpoint",
                    "read",
                    "--dir",
                    str(cp),
                    "--file",
                    NAME,
                    "--data",
                    str(work / data),
                    "--workers",
                    str(args.workers),
                    "--json",
                    *flags,
                ]
            )
            return json.loads(done.stdout), rss, wall

        def our_verify(*flags: str) -> tuple[dict[str, Any], TreeRss, float]:
            warm_page_cache(cp)
            done, rss, wall = run_measured(
                [
                    str(BIN),
                    "flow",
                    "checkpoint",
                    "verify",
                    "--dir",
                    str(cp),
                    "--file",
                    NAME,
                    "--workers",
                    str(args.workers),
                    "--json",
                    *flags,
                ]
            )
            return json.loads(done.stdout), rss, wall

        def go_read_once() -> tuple[dict[str, Any], TreeRss, float]:
            warm_page_cache(cp)
            done, rss, wall = run_measured(
                [str(flowgo), "read-checkpoint", "--dir", str(cp), "--file", NAME]
            )
            got = json.loads(done.stdout)
            return {**got, "total_s": float(got["elapsed_seconds"])}, rss, wall

        runs: dict[str, list[tuple[dict[str, Any], TreeRss, float]]] = {
            "verify": [],
            "trust": [],
            "flowgo": [],
            "verify_only": [],
            "verify_only_trust": [],
        }
        for _ in range(max(1, args.repeat)):
            runs["verify"].append(our_read("data"))
            runs["trust"].append(our_read("data_trust_all", "--trust-hashes"))
            runs["flowgo"].append(go_read_once())
            runs["verify_only"].append(our_verify())
            runs["verify_only_trust"].append(our_verify("--trust-hashes"))

        def least(kind: str) -> tuple[dict[str, Any], TreeRss, float]:
            """The fastest run of `kind`, with the largest peak RSS of all its runs."""
            best = min(runs[kind], key=lambda r: float(r[0]["total_s"]))
            peak = max(runs[kind], key=lambda r: r[1].peak_root)[1]
            return best[0], peak, best[2]

        def times(kind: str) -> list[float]:
            return [round(float(r[0]["total_s"]), 3) for r in runs[kind]]

        mine, ours_r_rss, ours_r_wall = least("verify")
        trust_all, ours_th_rss, _ = least("trust")
        go_read, go_r_rss, go_r_wall = least("flowgo")
        checked, checked_rss, _ = least("verify_only")
        checked_trust, checked_trust_rss, _ = least("verify_only_trust")
        warm_page_cache(cp)
        ours_t, ours_t_rss, _ = run_measured(
            [
                str(BIN),
                "flow",
                "checkpoint",
                "read",
                "--dir",
                str(cp),
                "--file",
                NAME,
                "--data",
                str(work / "data_trust"),
                "--workers",
                str(args.workers),
                "--trust-leaf-hashes",
                "--json",
            ]
        )
        trusting = json.loads(ours_t.stdout)
        # The whole forest loaded first (the replay's loader), then published.
        warm_page_cache(cp)
        ours_m, ours_m_rss, _ = run_measured(
            [
                str(BIN),
                "flow",
                "checkpoint",
                "read",
                "--dir",
                str(cp),
                "--file",
                NAME,
                "--data",
                str(work / "data_memory"),
                "--workers",
                str(args.workers),
                "--in-memory",
                "--json",
            ]
        )
        in_memory = json.loads(ours_m.stdout)
        # Streamed within a budget of a tenth of the checkpoint.
        budget = max(16 << 20, (cp_bytes // 10) >> 20 << 20)
        warm_page_cache(cp)
        ours_b, ours_b_rss, _ = run_measured(
            [
                str(BIN),
                "flow",
                "checkpoint",
                "read",
                "--dir",
                str(cp),
                "--file",
                NAME,
                "--data",
                str(work / "data_budget"),
                "--workers",
                str(args.workers),
                "--memory-budget",
                str(budget),
                "--json",
            ]
        )
        bounded = json.loads(ours_b.stdout)
        ours_read_s = mine["total_excluding_ray_start_s"]
        go_read_s = float(go_read["elapsed_seconds"])
        rate_after = keccak_rate(args.workers)
        best_rate = max(rate_before, rate_after, key=lambda r: r["permutations_per_s"])
        # Every permutation the read's recomputation ran: subtrie parts (leaf chains and
        # interior nodes) and one per top-level node.
        permutations = sum(int(p["permutations"]) for p in mine["parts"]) + int(mine["top_nodes"])
        floor_s = permutations / best_rate["permutations_per_s"]
        # What the read publishes costs at the least: its two tables encoded again from memory
        # on the same threads (the registers' SST files, written too, are not counted).
        published = sorted((work / "data" / "parquet").glob("register*/*/*.parquet"))
        publish_floor = encoding_floor(published, args.workers, repeat=3)

        # Write: rechain's (from the data folder) and flow-go's store, in turn.
        def our_write() -> tuple[dict[str, Any], TreeRss, float]:
            shutil.rmtree(work / "out_rechain", ignore_errors=True)
            done, rss, wall = run_measured(
                [
                    str(BIN),
                    "flow",
                    "checkpoint",
                    "write",
                    "--data",
                    str(work / "data"),
                    "--out",
                    str(work / "out_rechain"),
                    "--number",
                    "0",
                    "--json",
                ]
            )
            return json.loads(done.stdout), rss, wall

        def go_write_once() -> tuple[dict[str, Any], TreeRss, float]:
            shutil.rmtree(work / "out_flowgo", ignore_errors=True)
            done, rss, wall = run_measured(
                [
                    str(flowgo),
                    "rewrite-checkpoint",
                    "--dir",
                    str(cp),
                    "--file",
                    NAME,
                    "--out",
                    str(work / "out_flowgo"),
                ]
            )
            got = json.loads(done.stdout)
            return {**got, "total_s": float(got["store_seconds"])}, rss, wall

        runs["write"], runs["flowgo_write"] = [], []
        for _ in range(max(1, args.repeat)):
            runs["write"].append(our_write())
            runs["flowgo_write"].append(go_write_once())
        wrote, ours_w_rss, ours_w_wall = least("write")
        go_write, go_w_rss, go_w_wall = least("flowgo_write")
        # The same write without the leaf hashes the read published: every chain is run.
        hashes_dir = work / "data" / "parquet" / "register_hashes"
        os.rename(hashes_dir, work / "register_hashes.away")
        ours_n, ours_n_rss, _ = run_measured(
            [
                str(BIN),
                "flow",
                "checkpoint",
                "write",
                "--data",
                str(work / "data"),
                "--out",
                str(work / "out_nocache"),
                "--number",
                "0",
                "--json",
            ]
        )
        os.rename(work / "register_hashes.away", hashes_dir)
        wrote_nocache = json.loads(ours_n.stdout)
        go_write_s = float(go_write["store_seconds"])
        # Like for like with flow-go's store: tries already in memory, written by rechain's
        # forest writer (the load before it is not counted, as for flow-go).
        ours_f, ours_f_rss, _ = run_measured(
            [sys.executable, "-c", FOREST_WRITE, str(cp), NAME, str(work / "out_forest")]
        )
        forest_write = json.loads(ours_f.stdout)
        ours_write_s = float(wrote["total_s"])

        # flow-go loads what rechain wrote.
        check = json.loads(
            subprocess.run(
                [
                    str(flowgo),
                    "read-checkpoint",
                    "--dir",
                    str(work / "out_rechain"),
                    "--file",
                    NAME,
                ],
                check=True,
                capture_output=True,
                text=True,
                timeout=3600,
            ).stdout
        )
        root = made["tries"][-1]["root"]
        regs = made["tries"][-1]["reg_count"]
        out = {
            "benchmark": "flow_checkpoint",
            "machine": machine(),
            "input": {
                "updates": args.updates,
                "registers_per_update": args.registers_per_update,
                "tries": len(made["tries"]),
                "registers": regs,
                "checkpoint_bytes": cp_bytes,
                "node_count": sum(p["nodes"] for p in mine["parts"]) + mine["top_nodes"],
            },
            "same_root_and_registers": {
                "rechain_read": mine["root"] == root and mine["reg_count"] == regs,
                "rechain_read_in_memory": in_memory["root"] == root
                and in_memory["reg_count"] == regs,
                "rechain_read_trust_hashes": trust_all["root"] == root
                and trust_all["reg_count"] == regs,
                "rechain_read_at_budget": bounded["root"] == root and bounded["reg_count"] == regs,
                "rechain_verify": checked["root"] == root and checked["reg_count"] == regs,
                "rechain_verify_trust_hashes": checked_trust["root"] == root
                and checked_trust["reg_count"] == regs,
                "rechain_write": wrote["root"] == root and wrote["reg_count"] == regs,
                "rechain_write_without_register_hashes": wrote_nocache["root"] == root
                and wrote_nocache["reg_count"] == regs,
                "flowgo_loads_rechain_checkpoint": check["tries"][-1]["root"] == root
                and check["tries"][-1]["reg_count"] == regs,
            },
            "read": {
                "rechain_seconds_excluding_ray_start": round(ours_read_s, 3),
                "rechain_trusting_leaf_hashes_s": round(trusting["total_excluding_ray_start_s"], 3),
                "rechain_trusting_leaf_hashes_verify_parts_s": round(trusting["verify_s"], 3),
                "rechain_verify_parts_s": round(mine["verify_s"], 3),
                "rechain_assemble_s": round(mine["assemble_s"], 3),
                "rechain_publish_s": round(mine["publish_s"], 3),
                "rechain_ray_start_s": round(mine["ray_start_s"], 3),
                "rechain_wall_s": round(ours_r_wall, 3),
                "flowgo_seconds": round(go_read_s, 3),
                "flowgo_wall_s": round(go_r_wall, 3),
                "runs_s": {k: times(k) for k in ("verify", "trust", "flowgo")},
                "speedup_vs_flowgo": round(go_read_s / ours_read_s, 3),
                "speedup_vs_flowgo_trusting_leaf_hashes": round(
                    go_read_s / trusting["total_excluding_ray_start_s"], 3
                ),
                "peak_rss_mib": {
                    "rechain_process": round(ours_r_rss.peak_root / 2**20),
                    "rechain_process_trusting_leaf_hashes": round(ours_t_rss.peak_root / 2**20),
                    "rechain_ray_tree": round(ours_r_rss.peak_tree / 2**20),
                    "flowgo": round(go_r_rss.peak_root / 2**20),
                },
            },
            "read_modes": {
                "streaming_s": round(mine["total_s"], 3),
                "streaming_mode": mine.get("mode"),
                "in_memory_s": round(in_memory["total_s"], 3),
                "trust_hashes_s": round(trust_all["total_s"], 3),
                "budget_tenth_of_checkpoint_bytes": budget,
                "streaming_at_budget_s": round(bounded["total_s"], 3),
                "flowgo_s": round(go_read_s, 3),
                "trust_hashes_speedup_vs_flowgo": round(go_read_s / trust_all["total_s"], 3),
                "streaming_at_budget_vs_flowgo": round(go_read_s / bounded["total_s"], 3),
                "peak_rss_mib": {
                    "streaming": round(ours_r_rss.peak_root / 2**20),
                    "in_memory": round(ours_m_rss.peak_root / 2**20),
                    "trust_hashes": round(ours_th_rss.peak_root / 2**20),
                    "streaming_at_budget": round(ours_b_rss.peak_root / 2**20),
                    "flowgo": round(go_r_rss.peak_root / 2**20),
                },
                "flowgo_rss_over_streaming_at_budget": round(
                    go_r_rss.peak_root / ours_b_rss.peak_root, 2
                ),
            },
            # `checkpoint verify`: the read's checks, nothing published, as flow-go's read
            # publishes nothing (like for like with it, and with the keccak floor).
            "verify_only": {
                "full_s": round(checked["total_s"], 3),
                "trust_hashes_s": round(checked_trust["total_s"], 3),
                "runs_s": {k: times(k) for k in ("verify_only", "verify_only_trust")},
                "flowgo_read_s": round(go_read_s, 3),
                "trust_hashes_speedup_vs_flowgo_read": round(
                    go_read_s / checked_trust["total_s"], 3
                ),
                "full_vs_keccak_floor": round(checked["total_s"] / floor_s, 3),
                "peak_rss_mib": {
                    "full": round(checked_rss.peak_root / 2**20),
                    "trust_hashes": round(checked_trust_rss.peak_root / 2**20),
                    "flowgo": round(go_r_rss.peak_root / 2**20),
                },
            },
            "keccak_floor": {
                "backend": best_rate["backend"],
                "lanes": best_rate["lanes"],
                "threads": best_rate["threads"],
                "permutations_per_s_before_reads": round(rate_before["permutations_per_s"]),
                "permutations_per_s_after_reads": round(rate_after["permutations_per_s"]),
                "read_permutations": permutations,
                "floor_seconds": round(floor_s, 3),
                "floor_vs_flowgo_read": round(floor_s / go_read_s, 3),
                "rechain_read_vs_floor": round(ours_read_s / floor_s, 3),
                "rechain_verify_vs_floor": round(mine["verify_s"] / floor_s, 3),
                "read_2x_flowgo_reachable_while_hashing": floor_s <= go_read_s / 2,
            },
            "publish_floor": {
                "tables": sorted({f.parts[-3] for f in published}),
                "files": publish_floor["files"],
                "threads": publish_floor["threads"],
                "cpu_s": round(publish_floor["cpu_s"], 3),
                "floor_seconds": round(publish_floor["floor_s"], 3),
                "floor_vs_flowgo_read": round(publish_floor["floor_s"] / go_read_s, 3),
                "trust_hashes_read_vs_floor": round(
                    trust_all["total_s"] / publish_floor["floor_s"], 3
                ),
                "trust_hashes_read_2x_flowgo_reachable_while_publishing": publish_floor["floor_s"]
                <= go_read_s / 2,
                "keccak_and_publish_floor_seconds": round(floor_s + publish_floor["floor_s"], 3),
                "rechain_read_vs_keccak_and_publish_floor": round(
                    ours_read_s / (floor_s + publish_floor["floor_s"]), 3
                ),
            },
            "write": {
                "rechain_seconds": round(ours_write_s, 3),
                "rechain_cached_leaves": wrote["cached_leaves"],
                "rechain_hashed_leaves": wrote["hashed_leaves"],
                "rechain_without_register_hashes_s": round(float(wrote_nocache["total_s"]), 3),
                "rechain_without_register_hashes_hashed_leaves": wrote_nocache["hashed_leaves"],
                "rechain_wall_s": round(ours_w_wall, 3),
                "runs_s": {k: times(k) for k in ("write", "flowgo_write")},
                "flowgo_store_seconds": round(go_write_s, 3),
                "flowgo_load_seconds_not_counted": round(float(go_write["load_seconds"]), 3),
                "flowgo_wall_s": round(go_w_wall, 3),
                "speedup_vs_flowgo": round(go_write_s / ours_write_s, 3),
                "rechain_forest_store_s": round(forest_write["store_s"], 3),
                "rechain_forest_load_s_not_counted": round(forest_write["load_s"], 3),
                "forest_store_speedup_vs_flowgo": round(go_write_s / forest_write["store_s"], 3),
                "peak_rss_mib": {
                    "rechain_process": round(ours_w_rss.peak_root / 2**20),
                    "rechain_process_without_register_hashes": round(ours_n_rss.peak_root / 2**20),
                    "rechain_forest_load_and_store": round(ours_f_rss.peak_root / 2**20),
                    "flowgo_load_and_store": round(go_w_rss.peak_root / 2**20),
                },
            },
            "targets": {
                "trust-hashes read >= 2x flowgo": go_read_s / trust_all["total_s"] >= 2,
                "verifying read <= 1.25x keccak floor": ours_read_s / floor_s <= 1.25,
                "trust-hashes verify (nothing published, as flow-go) >= 2x flowgo read": go_read_s
                / checked_trust["total_s"]
                >= 2,
                "verify (nothing published) <= 1.25x keccak floor": checked["total_s"] / floor_s
                <= 1.25,
                "write no slower": ours_write_s <= go_write_s,
                "forest store no slower": forest_write["store_s"] <= go_write_s,
                "read rss (rechain process) <= flowgo": ours_r_rss.peak_root <= go_r_rss.peak_root,
                "write rss <= flowgo": ours_w_rss.peak_root <= go_w_rss.peak_root,
            },
        }
        if args.big_updates:
            big = measure_ten_times_budget(
                flowgo, work, args.workers, args.big_budget, args.big_updates
            )
            out["at_ten_times_budget"] = big
            out["same_root_and_registers"]["at_ten_times_budget"] = big["same_root_and_registers"]
            out["targets"]["checkpoint >= 10x budget"] = big["checkpoint_over_budget"] >= 10
        path = write_result("flow_checkpoint", out)
        print(json.dumps(out, indent=1))
        print(f"wrote {path}")
        if not all(out["same_root_and_registers"].values()):
            raise SystemExit("roots or register counts differ")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
