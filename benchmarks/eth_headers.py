"""Ethereum header import and ethash verification, rechain side by side with go-ethereum.

1. Header import: a generated dev chain of ``--headers`` blocks without transactions (era1
   files, ``rechain gen eth``) imported by ``rechain eth import --no-pow`` (every header decoded
   and checked, accumulators recomputed, the five tables and the header index written) and by
   go-ethereum v1.17.10's own header import of the same headers (``HeaderChain`` via
   ``InsertHeaderChain``, holiman/headerimport's method, proof of work off; the `gethharness`
   oracle in tests/geth). geth's figure counts only its validate and insert calls, not its
   reading of the files. Both must reach the same tip.
2. ethash: the real mainnet epoch file (8,192 Frontier headers, epochs 0 and 1), verified by
   ``rechain eth import`` (with everything else an import does) on 1 and 2 workers, and by
   go-ethereum v1.11.6's ethash (the last with it; `gethethash` in tests/geth_ethash) on 1 and 2
   threads. Headers per second per core, and the scaling from 1 to 2.
3. Ere: a generated ``devmerge`` chain of ``--ere-blocks`` blocks with transactions across the
   merge, Shanghai, Cancun and Prague (``gen eth --format ere``), imported by ``rechain eth
   import --ere`` (every block, body and receipt checked, five tables written) and by
   go-ethereum's own history import of the same files (``ImportHistory`` with its Ere reader:
   ``gethharness ere --mode import``; timed is its ImportHistory call alone). Both must reach
   the same tip. The read-and-hash floor as in 1. Proof checks: a pre-merge stretch of the same
   network written with block proofs (profile ``full``) and without (``noproofs``), imported by
   both sides: rechain checks each proof against the accumulator, geth's import reads past them.

    .venv/bin/python benchmarks/eth_headers.py [--headers 1000000] [--ere-blocks 100000]
        [--workers 2] [--only ere]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import BIN, machine, run_measured, write_result  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("RECHAIN_SHARED", REPO.parent / "shared"))
MAINNET_EPOCH = SHARED / "data" / "ethereum" / "era1" / "mainnet-00003-d8b8a40b.era1"
CACHE = Path(
    os.environ.get("RECHAIN_GETHHARNESS_CACHE", Path.home() / ".cache" / "rechain" / "gethharness")
)


def oracle(harness: str) -> Path:
    out = subprocess.run(
        ["bash", str(REPO / "tests" / harness / "build.sh"), str(CACHE)],
        check=True,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    return Path(out.stdout.strip().splitlines()[-1])


def go_json(cmd: list[str]) -> tuple[dict[str, Any], float, int]:
    done, rss, wall = run_measured(cmd)
    out: dict[str, Any] = json.loads(done.stdout)
    if not out.get("ok"):
        raise RuntimeError(f"{cmd[0]} failed: {out}")
    return out, wall, rss.peak_tree >> 20


def rechain_import(
    era: Path, data: Path, network: str, workers: int, *extra: str, kind: str = "--era1"
) -> Any:
    shutil.rmtree(data, ignore_errors=True)
    done, rss, wall = run_measured(
        [
            str(BIN),
            "eth",
            "import",
            kind,
            str(era),
            "--data",
            str(data),
            "--network",
            network,
            "--workers",
            str(workers),
            "--no-progress",
            "--json",
            *extra,
        ]
    )
    return json.loads(done.stdout), wall, rss.peak_tree >> 20


def decode_hash_floor(era: Path, workers: int, suffix: str = ".era1") -> tuple[float, str]:
    """The least an import does, timed in this process: every archive read, its layout
    checked, every header decompressed and hashed (Rust, on ``workers`` threads). Returns the
    seconds and the last header's hash."""
    from concurrent.futures import ThreadPoolExecutor

    from rechain.workers import _native

    files = sorted(era.glob("*" + suffix))
    hashes = _native.eth_era1_header_hashes if suffix == ".era1" else _native.eth_ere_header_hashes
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        out = list(pool.map(lambda p: hashes(str(p)), files))
    seconds = time.perf_counter() - t0
    assert sum(n for n, _ in out) > 0
    return seconds, out[-1][1]


def table_encode_floor(data: Path, workers: int) -> float:
    """The least writing the one table a header import must produce costs, timed in this
    process: every ``eth_blocks`` part the import published, read back into memory (not
    timed), encoded again as Parquet with the table's declared settings and made durable, by
    the import's own ``write_part`` on ``workers`` threads. Returns the seconds."""
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow.parquet as pq
    from rechain.pipeline.ethereum.units import table_dir
    from rechain.pipeline.store.datadir import DataDir
    from rechain.schemas import tables
    from rechain.workers.eth_import import write_part

    name = tables.ETH_BLOCKS.name
    with DataDir(data, readonly=True) as d:
        parts = sorted(table_dir(d, name).glob("*.parquet"))
    batches = [pq.read_table(p).combine_chunks().to_batches()[0] for p in parts]
    out = data.parent / "table-floor"
    out.mkdir()
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(
            pool.map(
                lambda ib: write_part(ib[1], str(out / f"{ib[0]}.parquet"), name),
                enumerate(batches),
            )
        )
    seconds = time.perf_counter() - t0
    shutil.rmtree(out)
    return seconds


def header_import(work: Path, headers: int, workers: int, geth: Path) -> dict[str, Any]:
    gen = work / "gen"
    subprocess.run(
        [
            str(BIN),
            "gen",
            "eth",
            str(gen),
            "--blocks",
            str(headers),
            "--format",
            "era1",
            "--network",
            "dev",
            "--tx-per-block",
            "0:0",
        ],
        check=True,
        capture_output=True,
        timeout=3600,
    )
    era = gen / "era1"
    mine, wall, rss = rechain_import(era, work / "data", "dev", workers, "--no-pow")
    assert mine["failed"] == 0 and mine["blocks"] == headers, mine["verdicts"][:3]
    theirs, geth_wall, geth_rss = go_json(
        [str(geth), "headerimport", "--era1", str(era), "--network", "dev"]
    )
    same_tip = mine["tip_hash"] == "0x" + theirs["tip"]
    floor_s, floor_tip = decode_hash_floor(era, workers)
    assert floor_tip == mine["tip_hash"], (floor_tip, mine["tip_hash"])
    table_s = table_encode_floor(work / "data", workers)
    geth_s = float(theirs["seconds"])
    return {
        "headers": headers,
        "era1_bytes": sum(p.stat().st_size for p in era.iterdir()),
        "same_tip": same_tip,
        "rechain_wall_s": round(wall, 3),
        "rechain_stage_s": round(mine["run"]["total_s"], 3),
        "rechain_worker_s": round(mine["run"]["worker_s"], 3),
        "rechain_commit_s": round(mine["run"]["commit_s"], 3),
        "rechain_headers_per_s": round(headers / wall),
        "rechain_peak_rss_mib": rss,
        # Reading, decompressing and hashing every header and nothing else, on as many threads.
        "decode_hash_floor_s": round(floor_s, 3),
        "geth_insert_s": round(geth_s, 3),
        "geth_validate_s": round(float(theirs["validate_seconds"]), 3),
        "geth_write_s": round(float(theirs["write_seconds"]), 3),
        "geth_wall_s": round(geth_wall, 3),
        "geth_headers_per_s": round(headers / geth_s),
        "geth_peak_rss_mib": geth_rss,
        # rechain's whole run (process start included) against geth's insert calls only.
        "speedup_vs_geth_insert": round(geth_s / wall, 3),
        "speedup_vs_geth_wall": round(geth_wall / wall, 3),
        # The speed-up an import doing nothing but the floor's work would reach.
        "floor_speedup_vs_geth_insert": round(geth_s / floor_s, 3),
        # Encoding eth_blocks as Parquet alone (the table the import exists to produce), and
        # the floor with it: read, hash and write the table, no check, no index, no start-up.
        "table_encode_floor_s": round(table_s, 3),
        "floor_with_table_s": round(floor_s + table_s, 3),
        "floor_with_table_speedup_vs_geth_insert": round(geth_s / (floor_s + table_s), 3),
        "target": 10.0,
    }


def gen_devmerge(out: Path, blocks: int, *extra: str) -> Path:
    """A generated devmerge chain as Ere files; returns their folder (genesis.json beside)."""
    subprocess.run(
        [str(BIN), "gen", "eth", str(out), "--blocks", str(blocks), "--format", "ere"]
        + ["--network", "devmerge", "--tx-per-block", "0:3", *extra],
        check=True,
        capture_output=True,
        timeout=3600,
    )
    return out / "ere"


def geth_ere_import(geth: Path, ere: Path) -> tuple[dict[str, Any], float]:
    theirs, wall, rss = go_json(
        [str(geth), "ere", "--dir", str(ere), "--network", "devmerge", "--mode", "import"]
        + ["--genesis", str(ere.parent / "genesis.json"), "--blocks=false"]
    )
    return theirs, float(theirs["import_seconds"])


def ere_import(work: Path, blocks: int, workers: int, geth: Path) -> dict[str, Any]:
    ere = gen_devmerge(work / "ere-gen", blocks)
    mine, wall, rss = rechain_import(
        ere, work / "ere-data", "devmerge", workers, "--no-pow", kind="--ere"
    )
    assert mine["failed"] == 0 and mine["blocks"] == blocks, mine["verdicts"][:3]
    theirs, geth_s = geth_ere_import(geth, ere)
    floor_s, floor_tip = decode_hash_floor(ere, workers, ".ere")
    assert floor_tip == mine["tip_hash"], (floor_tip, mine["tip_hash"])
    # Proofs: the pre-merge stretch (the merge comes near block 12,000) with and without them.
    pre = 11_000
    proofs: dict[str, Any] = {"blocks": pre}
    for profile in ("full", "noproofs"):
        folder = gen_devmerge(work / f"ere-{profile}", pre, "--ere-profile", profile)
        r, w, _ = rechain_import(
            folder, work / f"ere-{profile}-data", "devmerge", workers, "--no-pow", kind="--ere"
        )
        assert r["failed"] == 0 and r["blocks"] == pre, r["verdicts"][:3]
        _, g = geth_ere_import(geth, folder)
        proofs[f"{profile}_bytes"] = sum(p.stat().st_size for p in folder.iterdir())
        proofs[f"rechain_{profile}_wall_s"] = round(w, 3)
        proofs[f"geth_{profile}_import_s"] = round(g, 3)
    proofs["rechain_proof_cost_s"] = round(
        proofs["rechain_full_wall_s"] - proofs["rechain_noproofs_wall_s"], 3
    )
    return {
        "blocks": blocks,
        "transactions": mine["counts"].get("eth_transactions", 0),
        "ere_bytes": sum(p.stat().st_size for p in ere.iterdir()),
        "same_tip": theirs.get("head") == blocks - 1
        and theirs["files"][-1]["last_hash"] == mine["tip_hash"].removeprefix("0x"),
        "rechain_wall_s": round(wall, 3),
        "rechain_worker_s": round(mine["run"]["worker_s"], 3),
        "rechain_commit_s": round(mine["run"]["commit_s"], 3),
        "rechain_blocks_per_s": round(blocks / wall),
        "rechain_peak_rss_mib": rss,
        "geth_import_s": round(geth_s, 3),
        "geth_blocks_per_s": round(blocks / geth_s),
        "speedup_vs_geth_import": round(geth_s / wall, 3),
        "decode_hash_floor_s": round(floor_s, 3),
        "floor_speedup_vs_geth_import": round(geth_s / floor_s, 3),
        "proofs": proofs,
    }


def ethash(work: Path, geth: Path, ethash_bin: Path) -> dict[str, Any]:
    era = work / "mainnet"
    era.mkdir()
    shutil.copy2(MAINNET_EPOCH, era / MAINNET_EPOCH.name)
    headers = work / "mainnet.headers"
    go_json([str(geth), "headers", "--era1", str(era), "--out", str(headers)])
    out: dict[str, Any] = {"headers": 8192, "file": MAINNET_EPOCH.name}
    for workers in (1, 2):
        mine, wall, _ = rechain_import(era, work / f"pow{workers}", "mainnet", workers)
        assert mine["failed"] == 0 and mine["checks"]["pow"] == 8192
        out[f"rechain_{workers}_wall_s"] = round(wall, 3)
        out[f"rechain_{workers}_headers_per_s"] = round(8192 / wall, 1)
        theirs, _, _ = go_json(
            [
                str(ethash_bin),
                "ethash",
                "--headers",
                str(headers),
                "--network",
                "mainnet",
                "--threads",
                str(workers),
            ]
        )
        assert theirs["errors"] == 0
        # Cache generation included, as in rechain's figure.
        go_s = float(theirs["seconds"]) + float(theirs["warmup_seconds"])
        out[f"geth_{workers}_s"] = round(go_s, 3)
        # The file's first header is only the parent of the ones verified.
        out[f"geth_{workers}_headers_per_s"] = round(int(theirs["headers"]) / go_s, 1)
    nopow, wall, _ = rechain_import(era, work / "nopow", "mainnet", 1, "--no-pow")
    out["rechain_1_without_pow_wall_s"] = round(wall, 3)
    out["per_core_vs_geth"] = round(out["rechain_1_headers_per_s"] / out["geth_1_headers_per_s"], 3)
    out["rechain_scaling_1_to_2"] = round(out["rechain_1_wall_s"] / out["rechain_2_wall_s"], 3)
    out["geth_scaling_1_to_2"] = round(out["geth_1_s"] / out["geth_2_s"], 3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--headers", type=int, default=1_000_000)
    ap.add_argument("--ere-blocks", type=int, default=100_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument(
        "--only", choices=["ere"], default=None, help="run one section, keep the others' figures"
    )
    args = ap.parse_args()
    geth, ethash_bin = oracle("geth"), oracle("geth_ethash")
    work = Path(tempfile.mkdtemp(prefix="rechain-eth-bench-"))
    try:
        if args.only == "ere":
            previous = REPO / "benchmarks" / "results" / "eth_headers.json"
            result = json.loads(previous.read_text()) if previous.exists() else {}
            result["ere_machine"] = machine()
        else:
            result = {
                "benchmark": "eth_headers",
                "machine": machine(),
                "header_import": header_import(work, args.headers, args.workers, geth),
                "ethash": ethash(work, geth, ethash_bin),
            }
        result["ere_import"] = ere_import(work, args.ere_blocks, args.workers, geth)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    path = write_result("eth_headers", result)
    print(json.dumps(result, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
