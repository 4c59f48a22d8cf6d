"""Flow checkpoints (flow-go's v6 format): reading one into a data folder, writing one from a
data folder's registers, and the loading/naming helpers the replay uses to resume from and to
write checkpoints.

Reading: the 16 subtrie parts are decoded and fully verified (CRCs, node order, every node hash
recomputed from the leaf values) on this process's threads, or on Ray workers when a cluster
is given; the tries are assembled (top-level nodes re-hashed, every trie root compared with
its record). Only a
checkpoint that passed all of this is published, so a bad one leaves the data folder as it was.

Writing: the `registers` Parquet table (path order) is streamed into the Rust builder, which
writes the parts as it goes (memory bounded by one row group, not by the trie). The
`register_hashes` table published with it gives each leaf's compact hash: a leaf at the same
height whose `HashLeaf(path, value)` still matches takes it instead of rerunning its chain of
~250 permutations; the interior hashes and the root are recomputed either way and the root
compared with the state's.
"""

from __future__ import annotations

import argparse
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rechain.pipeline.errors import RechainError
from rechain.pipeline.store import DataDir
from rechain.schemas import flow as fs
from rechain.schemas import rocksdb as layout
from rechain.workers import _native

if TYPE_CHECKING:  # loaded by the functions that read Parquet: a replay never does
    import pyarrow as pa

_NAME = re.compile(r"^checkpoint\.(\d+)$")


def checkpoint_name(number: int) -> str:
    return f"checkpoint.{number:08d}"


def list_checkpoints(directory: Path) -> list[tuple[int, str]]:
    """Checkpoint numbers and names as flow-go lists them (`checkpoint.` + an integer)."""
    if not directory.is_dir():
        raise RechainError(f"{directory}: checkpoint folder not found")
    found = []
    for entry in os.listdir(directory):
        m = _NAME.match(entry)
        if m:
            found.append((int(m.group(1)), entry))
    return sorted(found)


def _raise(e: Exception) -> None:
    raise RechainError(str(e)) from e


def load_forest(
    directory: Path,
    name: str,
    workers: int,
    ray_address: str | None = None,
    verify_leaves: bool = True,
) -> tuple[Any, dict[str, Any]]:
    """Verifies the 16 subtrie parts and assembles the tries. Without `ray_address` this is
    one pass in this process, the parts spread over `workers` threads (Ray's start-up and
    processes would cost more than the hashing they could share on one machine, and the parts
    would be read twice); with it, the parts are verified on Ray workers first and then read
    again here. `verify_leaves=False` trusts the stored leaf hashes (flow-go trusts every
    stored hash); interior hashes, and so every root, are recomputed either way.
    Returns a `FlowForest` (current root = the checkpoint's last trie) and what was read."""
    t0 = time.perf_counter()
    header = directory / name
    if not header.is_file():
        raise RechainError(f"{header}: checkpoint file not found")
    if ray_address is None:
        try:
            forest, info = _native.flow_checkpoint_load(
                str(directory), name, threads=workers, verify_leaves=verify_leaves
            )
        except _native.FlowCheckpointError as e:
            _raise(e)
        info = dict(info)
        load_s = time.perf_counter() - t0
        info.update(
            {
                "name": name,
                "ray_start_s": 0.0,
                # One pass: verification and assembly are not timed apart.
                "verify_s": load_s,
                "assemble_s": 0.0,
                "load_s": load_s,
                "leaves": sum(int(p["leaves"]) for p in info["parts"]),
                "verified_leaf_hashes": verify_leaves,
                "verify": "in_process",
            }
        )
        return forest, info
    return _load_forest_on_ray(directory, name, workers, ray_address, verify_leaves, t0)


def _load_forest_on_ray(
    directory: Path,
    name: str,
    workers: int,
    ray_address: str,
    verify_leaves: bool,
    t0: float,
) -> tuple[Any, dict[str, Any]]:
    import ray
    from rechain.pipeline.ray_runtime import ensure_ray
    from rechain.workers.flow_checkpoint import verify_part

    ray_start = ensure_ray(ray_address, workers)
    t_verify = time.perf_counter()
    task = ray.remote(num_cpus=1, max_retries=3)(verify_part)
    parts = ray.get([task.remote(str(directory), name, i, verify_leaves) for i in range(16)])
    for p in parts:
        err = p.get("error")
        if err:
            raise RechainError(err["message"])
    verify_s = time.perf_counter() - t_verify
    t_load = time.perf_counter()
    try:
        forest, info = _native.flow_checkpoint_load(str(directory), name, verify_hashes=False)
    except _native.FlowCheckpointError as e:
        _raise(e)
    info = dict(info)
    info.update(
        {
            "name": name,
            "ray_start_s": ray_start,
            "verify_s": verify_s,
            "assemble_s": time.perf_counter() - t_load,
            "load_s": time.perf_counter() - t0 - ray_start,
            "leaves": sum(int(p["leaves"]) for p in parts),
            "verified_leaf_hashes": verify_leaves,
            "verify": "ray",
        }
    )
    return forest, info


def read(
    cpdir: Path,
    name: str,
    data_path: Path,
    workers: int = 0,
    ray_address: str | None = None,
    verify_leaves: bool = True,
) -> dict[str, Any]:
    """`rechain flow checkpoint read`: verify and load, then publish the last trie's registers
    (RocksDB `flow_registers` and the `registers` table) and the checkpoint's roots."""
    from rechain.pipeline.stages.flow.publish import publish_forest

    t0 = time.perf_counter()
    m = _NAME.match(name)
    number = int(m.group(1)) if m else None
    forest, info = load_forest(
        cpdir, name, workers or os.cpu_count() or 1, ray_address, verify_leaves
    )
    last = info["tries"][-1]
    if int(info["last_trie_registers"]) != int(last["reg_count"]):
        raise RechainError(
            f"{cpdir / name}: the last trie record says {last['reg_count']} registers but the "
            f"trie holds {info['last_trie_registers']}"
        )
    with DataDir(data_path) as data:
        summary = publish_forest(data, forest, [], [], last_segment=number)
        tries = [dict(t) for t in info["tries"]]
        record = {
            "checkpoint": str(cpdir / name),
            "number": number,
            "tries": tries,
            "root": tries[-1]["root"],
            "reg_count": int(tries[-1]["reg_count"]),
            "registers_published": summary["register_rows"],
        }
        data.write({layout.CF_META: [(fs.META_FLOW_CHECKPOINT, record)]})
        report = {
            **record,
            "ray_start_s": info["ray_start_s"],
            "verify": info["verify"],
            "verify_s": info["verify_s"],
            "assemble_s": info["assemble_s"],
            "publish_s": summary["publish_s"],
            "total_s": time.perf_counter() - t0,
            "total_excluding_ray_start_s": time.perf_counter() - t0 - info["ray_start_s"],
            "parts": [dict(p) for p in info["parts"]],
            "top_nodes": info["top_nodes"],
            "verified_leaf_hashes": verify_leaves,
        }
        data.write_report("flow_checkpoint_read", report)
    return report


def _registers_files(data: DataDir) -> list[Path]:
    base = data.parquet_dir(fs.REGISTERS)
    gens = (
        sorted(p for p in base.iterdir() if p.is_dir() and not p.name.startswith("."))
        if base.is_dir()
        else []
    )
    if not gens:
        return []
    return sorted(gens[-1].glob("*.parquet"))


def _register_groups(files: list[Path]) -> Iterator[tuple[pa.RecordBatch, pa.RecordBatch | None]]:
    """Row groups of the `registers` files with the same row groups of `register_hashes`
    (same generation, written alongside in the same row groups) where those exist."""
    import pyarrow.parquet as pq

    for f in files:
        hashes_file = f.parent.parent.parent / fs.REGISTER_HASHES / f.parent.name / f.name
        regs = pq.ParquetFile(f)
        hashes = pq.ParquetFile(hashes_file) if hashes_file.is_file() else None
        if hashes is not None and hashes.metadata.num_rows != regs.metadata.num_rows:
            hashes = None
        for i in range(regs.num_row_groups):
            t = regs.read_row_group(i, columns=["path", "encoded_key", "value"])
            if t.num_rows == 0:
                continue
            h = None
            if hashes is not None and i < hashes.num_row_groups:
                h = hashes.read_row_group(i).combine_chunks().to_batches()[0]
            yield t.combine_chunks().to_batches()[0], h


def write(
    data_path: Path,
    out: Path,
    root: str | None = None,
    number: int | None = None,
    threads: int | None = None,
) -> dict[str, Any]:
    """`rechain flow checkpoint write`: the data folder's current state as a one-trie v6
    checkpoint, streamed from the `registers` table (path order)."""
    t0 = time.perf_counter()
    with DataDir(data_path, readonly=True) as data:
        summary = data.meta_get(fs.META_FLOW_SUMMARY)
        if summary is None:
            raise RechainError(
                f"{data_path}: no Flow state here yet (replay or read a checkpoint first)"
            )
        current = str(summary["root"])
        if root is not None and root.lower() != current:
            raise RechainError(
                f"{data_path}: holds the state at root {current}, not {root} "
                "(only the current state is kept; replay up to that root first)"
            )
        if number is None:
            number = int(summary.get("last_segment") or 0)
        files = _registers_files(data)
        name = checkpoint_name(number)
        builder = _native.FlowCheckpointBuilder(str(out), name, threads)
        try:
            rows = 0
            for batch, hashes in _register_groups(files):
                builder.push(batch, hashes)
                rows += batch.num_rows
            reg_size = summary.get("reg_size")
            result = dict(builder.finish(None if reg_size is None else int(reg_size)))
        except _native.FlowCheckpointError as e:
            builder.abort()
            _raise(e)
        except Exception:
            builder.abort()
            raise
    trie = dict(result["tries"][0])
    if trie["root"] != current:
        for p in out.glob(f"{name}*"):
            p.unlink()
        raise RechainError(
            f"{data_path}: registers hash to root {trie['root']}, but the state's root is {current}"
        )
    return {
        "checkpoint": str(out / name),
        "root": trie["root"],
        "reg_count": int(trie["reg_count"]),
        "reg_size": int(trie["reg_size"]),
        "registers_read": rows,
        "bytes": int(result["bytes"]),
        "part_nodes": list(result["part_nodes"]),
        "top_nodes": int(result["top_nodes"]),
        # Leaves whose compact hash came from `register_hashes` / whose chain was run.
        "cached_leaves": int(result["cached_leaves"]),
        "hashed_leaves": int(result["hashed_leaves"]),
        "total_s": time.perf_counter() - t0,
    }


# -- CLI (registered from pipeline/cli.py) ----------------------------------------------------


def add_cli(flow: Any) -> None:
    """Adds `flow checkpoint read|write` to the `flow` subparsers."""
    cp = flow.add_parser("checkpoint", help="Flow v6 checkpoints").add_subparsers(
        dest="cp_action", required=True
    )
    r = cp.add_parser("read", help="verify a checkpoint and load it into the data folder")
    r.add_argument("--dir", type=Path, required=True, help="folder holding the checkpoint files")
    r.add_argument("--file", default=None, help="main file name (default: the latest checkpoint)")
    r.add_argument("--data", type=Path, required=True)
    r.add_argument("--workers", type=int, default=0)
    r.add_argument("--ray-address", default=None)
    r.add_argument(
        "--trust-leaf-hashes",
        action="store_true",
        help="do not recompute leaf hashes from the values (interior hashes and roots still are)",
    )
    r.add_argument("--json", action="store_true")
    w = cp.add_parser("write", help="write the data folder's state as a v6 checkpoint")
    w.add_argument("--data", type=Path, required=True)
    w.add_argument("--out", type=Path, required=True)
    w.add_argument("--root", default=None, help="fail unless the state has this root hash")
    w.add_argument(
        "--number", type=int, default=None, help="checkpoint number (default: last segment)"
    )
    w.add_argument("--threads", type=int, default=None)
    w.add_argument("--json", action="store_true")


def dispatch(args: argparse.Namespace) -> dict[str, Any]:
    if args.cp_action == "read":
        name = args.file
        if name is None:
            found = list_checkpoints(args.dir)
            if not found:
                raise RechainError(f"{args.dir}: no checkpoint.NNNNNNNN file here")
            name = found[-1][1]
        result = read(
            args.dir, name, args.data, args.workers, args.ray_address, not args.trust_leaf_hashes
        )
        if not args.json:
            print(
                f"read {result['checkpoint']}: {len(result['tries'])} trie(s); last root "
                f"{result['root']}; {result['reg_count']:,} registers"
            )
        return result
    result = write(args.data, args.out, args.root, args.number, args.threads)
    if not args.json:
        print(
            f"wrote {result['checkpoint']}: root {result['root']}; "
            f"{result['reg_count']:,} registers; {result['bytes']:,} bytes"
        )
    return result
