"""Flow checkpoints (flow-go's v6 format; versions 1/3/4/5 read too): reading one into a data
folder, writing one from a data folder's registers, and the loading/naming helpers the replay
uses to resume from and to write checkpoints.

Reading, streamed (v6, one trie; `checkpoint read`'s default): the Rust reader verifies the 16
subtrie parts on this process's threads (CRCs, node order, every node hash recomputed from the
leaf values with a stack as deep as the trie) while the last trie's registers are written into
staged `registers` / `register_hashes` parts and RocksDB SST files, within `--memory-budget`;
published (tables renamed into place, SST files ingested) only when every root checked out.

Reading in memory (several tries, versions 1/3/4/5, `--ray-address`, `--in-memory`, and the
replay's resume): the parts are decoded and fully verified on threads or Ray workers, the
tries assembled (top-level nodes re-hashed, every trie root compared with its record), then
published from the forest. Either way a checkpoint that fails a check leaves the data folder
as it was.

Stats (`checkpoint stats`, v6, one trie): the same streamed read folds each part's checked
leaves into counts on its thread (per owner, per register kind, per depth; flow-go's
`checkpoint-collect-stats`), the owner counts spilled as sorted runs past their share of
`--memory-budget` and merged while their table is written; the four `flow_checkpoint_*`
tables are published only once the whole checkpoint checked out.

Writing: the `registers` Parquet table (path order) is streamed into the Rust builder, which
writes the parts as it goes (memory bounded by one row group, not by the trie). The
`register_hashes` table published with it gives each leaf's compact hash: a leaf at the same
height whose `HashLeaf(path, value)` still matches takes it instead of rerunning its chain of
~250 permutations; the interior hashes and the root are recomputed either way and the root
compared with the state's.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rechain.pipeline.errors import RechainError
from rechain.pipeline.runtime.budget import budget_share
from rechain.pipeline.store.datadir import DataDir
from rechain.pipeline.store.folder import claim
from rechain.schemas import flow as fs
from rechain.schemas import rocksdb as layout
from rechain.workers import _native
from rechain.workers.fault_injection import kill_point
from rechain.workers.memory import DEFAULT_MEMORY_BUDGET

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


def checkpoint_version(directory: Path, name: str) -> int:
    """The version of checkpoint `name` (its header file's), or `RechainError` naming the file
    when it is missing or not a checkpoint."""
    if not (directory / name).is_file():
        raise RechainError(f"{directory / name}: checkpoint file not found")
    try:
        return int(_native.flow_checkpoint_version(str(directory), name))
    except _native.FlowCheckpointError as e:
        raise RechainError(str(e)) from e


def _verify_mode(verify_leaves: bool, trust_hashes: bool) -> str:
    """The Rust reader's `verify`: every hash (`full`), leaf hashes trusted (`interior`), or
    every stored hash trusted (`none`)."""
    return "none" if trust_hashes else ("full" if verify_leaves else "interior")


def _stream_share(memory_budget: int, threads: int) -> int:
    """Bytes of leaves one streamed part buffers: the output files it may buffer for
    (registers + hashes row groups, the batch of leaves being checked, the reader's buffer),
    its thread's part of the stream's share."""
    return max(64 << 10, budget_share(memory_budget, "flow", "checkpoint.stream") // threads)


def load_forest(
    directory: Path,
    name: str,
    workers: int,
    ray_address: str | None = None,
    verify_leaves: bool = True,
    trust_hashes: bool = False,
) -> tuple[Any, dict[str, Any]]:
    """Verifies the 16 subtrie parts and assembles the tries. Without `ray_address` this is
    one pass in this process, the parts spread over `workers` threads (Ray's start-up and
    processes would cost more than the hashing they could share on one machine, and the parts
    would be read twice); with it, the parts are verified on Ray workers first and then read
    again here. `verify_leaves=False` trusts the stored leaf hashes, `trust_hashes` every
    stored hash (as flow-go does; each root is still compared with its record).
    Returns a `FlowForest` (current root = the checkpoint's last trie) and what was read."""
    t0 = time.perf_counter()
    version = checkpoint_version(directory, name)
    # Versions 1, 3, 4 and 5 are one file without parts to share out: read here, whole.
    if ray_address is None or version != 6:
        try:
            forest, info = _native.flow_checkpoint_load(
                str(directory),
                name,
                threads=workers,
                verify_hashes=not trust_hashes,
                verify_leaves=verify_leaves,
            )
        except _native.FlowCheckpointError as e:
            _raise(e)
        info = info.as_dict()
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
                "version": version,
            }
        )
        return forest, info
    return _load_forest_on_ray(directory, name, workers, ray_address, verify_leaves, t0)


def checkpoint_bytes(directory: Path, name: str) -> int:
    """Bytes of checkpoint ``name``: its header and every part file."""
    return sum(p.stat().st_size for p in directory.glob(f"{name}*") if p.is_file())


#: How many times its size an in-memory read of a checkpoint peaks at (nodes and payloads
#: as objects, with the parts' read buffers).
IN_MEMORY_FACTOR = 3


def needs_paging(directory: Path, name: str, memory_budget: int) -> bool:
    """Whether checkpoint ``name`` is too large to hold in memory within the budget."""
    return checkpoint_bytes(directory, name) * IN_MEMORY_FACTOR > memory_budget


def paging_split(memory_budget: int) -> dict[str, int]:
    """How a paged forest spends the budget: three eighths are the node store's cache (the
    top of the newest trie as last written, and nodes loaded again), a quarter holds new nodes
    before they are written out; the rest is the update at hand, the page-out pass and the
    allocator's slack over the nodes' heap bytes. Publication empties the cache first and its
    writers take a share within it (``publish.sst`` in ``runtime/budget.py``)."""
    return {
        "cache_bytes": budget_share(memory_budget, "flow", "forest.node_cache"),
        "hold_bytes": budget_share(memory_budget, "flow", "forest.node_hold"),
    }


def page_forest(
    directory: Path,
    name: str,
    store_dir: Path,
    memory_budget: int,
    workers: int,
    trust_hashes: bool = False,
) -> tuple[Any, dict[str, Any]] | None:
    """A forest holding checkpoint ``name``'s trie paged out to a node store in
    ``store_dir`` (scratch: emptied first, removed with the forest), streamed and fully
    verified, the budget split as ``paging_split`` says, so replaying on top of it stays
    within the budget whatever the checkpoint's size. ``trust_hashes`` takes the stored node
    hashes as flow-go does (the root is still compared with its record). Returns the forest
    and what was read, as ``load_forest`` does, or None for a checkpoint of several tries
    (they share nodes: only the in-memory read takes them)."""
    t0 = time.perf_counter()
    shutil.rmtree(store_dir, ignore_errors=True)
    try:
        forest, info = _native.flow_checkpoint_page_in(
            str(directory),
            name,
            str(store_dir),
            **paging_split(memory_budget),
            threads=workers or None,
            verify="none" if trust_hashes else "full",
        )
    except _native.FlowCheckpointError as e:
        if e.kind == "shared_node":
            shutil.rmtree(store_dir, ignore_errors=True)
            return None
        _raise(e)
    info = info.as_dict()
    load_s = time.perf_counter() - t0
    info.update({"name": name, "ray_start_s": 0.0, "load_s": load_s, "verify": "paged"})
    return forest, info


def _load_forest_on_ray(
    directory: Path,
    name: str,
    workers: int,
    ray_address: str,
    verify_leaves: bool,
    t0: float,
) -> tuple[Any, dict[str, Any]]:
    import ray
    from rechain.pipeline.runtime.executor import Executor
    from rechain.workers.flow_checkpoint import verify_part

    ray_start = Executor.choose(ray_address, workers).start(ray=True)
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
    info = info.as_dict()
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
            "version": 6,
        }
    )
    return forest, info


def _read_streaming(
    cpdir: Path,
    name: str,
    data_path: Path,
    number: int | None,
    threads: int,
    verify: str,
    memory_budget: int,
    t0: float,
) -> dict[str, Any] | None:
    """The streamed read (v6, one trie): parts verified on `threads` threads while the last
    trie's registers are staged as Parquet and as RocksDB SST files (each part writes its own:
    the parts are disjoint path ranges); published only if every root checks out. None when
    the checkpoint holds several tries sharing nodes (read in memory instead)."""
    from rechain.pipeline.flow.publication import publish_staged_registers
    from rechain.pipeline.store.datadir import part_file_name
    from rechain.schemas import tables

    share = _stream_share(memory_budget, threads)
    with DataDir(data_path) as data:
        claim(data, "flow")
        generation = int(data.meta_get(fs.META_FLOW_GENERATION) or 0) + 1
        staged = {
            t: data.begin_generation(t, generation) for t in (fs.REGISTERS, fs.REGISTER_HASHES)
        }
        files = {t: [str(d / part_file_name(i)) for i in range(16)] for t, d in staged.items()}
        sst_dir = data.sst_dir(layout.CF_FLOW_REGISTERS)

        def discard() -> None:
            for d in (*staged.values(), sst_dir):
                shutil.rmtree(d, ignore_errors=True)

        t_read = time.perf_counter()
        try:
            info = _native.flow_checkpoint_stream(
                str(cpdir),
                name,
                files[fs.REGISTERS],
                files[fs.REGISTER_HASHES],
                tables.REGISTERS.native_layout(min(tables.REGISTERS.row_group_bytes, share)),
                tables.REGISTER_HASHES.native_layout(),
                threads=threads,
                verify=verify,
                batch_bytes=share,
                sst_dir=str(sst_dir),
                sst_memory=max(
                    64 << 10, budget_share(memory_budget, "flow", "checkpoint.sst") // threads
                ),
                sst_version=fs.REGISTER_VALUE_VERSION,
            )
        except _native.FlowCheckpointError as e:
            discard()
            if getattr(e, "kind", "") == "shared_node":
                return None
            _raise(e)
        verify_s = time.perf_counter() - t_read
        kill_point("flow_checkpoint.read_staged")
        # The stream refuses a checkpoint without tries (kind `no_tries`).
        tries = [t.as_dict() for t in info.tries]
        last = tries[-1]
        if int(info.registers) != int(last["reg_count"]):
            discard()
            raise RechainError(
                f"{cpdir / name}: the last trie record says {last['reg_count']} registers but "
                f"the trie holds {info.registers}"
            )
        summary = publish_staged_registers(
            data,
            generation,
            staged,
            [Path(f) for f in info.sst_files],
            str(last["root"]),
            int(info.registers),
            int(last["reg_size"]),
            int(info.rows),
            number,
        )
        record = {
            "checkpoint": str(cpdir / name),
            "number": number,
            "version": 6,
            "tries": tries,
            "root": last["root"],
            "reg_count": int(last["reg_count"]),
            "registers_published": summary["register_rows"],
        }
        data.write({layout.CF_META: [(fs.META_FLOW_CHECKPOINT, record)]})
        kill_point("flow_checkpoint.read_recorded")
        report = {
            **record,
            "mode": "streaming",
            "memory_budget": memory_budget,
            "ray_start_s": 0.0,
            "verify": verify,
            "verify_s": verify_s,
            "assemble_s": 0.0,
            "publish_s": summary["publish_s"],
            "total_s": time.perf_counter() - t0,
            "total_excluding_ray_start_s": time.perf_counter() - t0,
            "parts": [p.as_dict() for p in info.parts],
            "top_nodes": info.top_nodes,
            "verified_leaf_hashes": verify == "full",
        }
        data.write_report("flow_checkpoint_read", report)
    return report


def read(
    cpdir: Path,
    name: str,
    data_path: Path,
    workers: int = 0,
    ray_address: str | None = None,
    verify_leaves: bool = True,
    trust_hashes: bool = False,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    in_memory: bool = False,
) -> dict[str, Any]:
    """`rechain flow checkpoint read`: verify, then publish the last trie's registers (RocksDB
    `flow_registers`, the `registers` and `register_hashes` tables) and the checkpoint's
    roots. A v6 checkpoint of one trie is streamed within `memory_budget` (without
    `ray_address` or `in_memory`); other checkpoints are loaded whole first.
    `trust_hashes` takes every stored hash as flow-go does (structure, CRCs and each root
    against its record still checked); `verify_leaves=False` trusts only the leaf hashes."""
    from rechain.pipeline.flow.publication import publish_forest

    t0 = time.perf_counter()
    m = _NAME.match(name)
    number = int(m.group(1)) if m else None
    threads = workers or os.cpu_count() or 1
    version = checkpoint_version(cpdir, name)
    if version == 6 and ray_address is None and not in_memory:
        mode = _verify_mode(verify_leaves, trust_hashes)
        streamed = _read_streaming(cpdir, name, data_path, number, threads, mode, memory_budget, t0)
        if streamed is not None:
            return streamed
    forest, info = load_forest(
        cpdir, name, threads, ray_address, verify_leaves, trust_hashes=trust_hashes
    )
    last = info["tries"][-1]
    if int(info["last_trie_registers"]) != int(last["reg_count"]):
        raise RechainError(
            f"{cpdir / name}: the last trie record says {last['reg_count']} registers but the "
            f"trie holds {info['last_trie_registers']}"
        )
    with DataDir(data_path) as data:
        claim(data, "flow")
        summary = publish_forest(
            data, forest, [], [], last_segment=number, memory_budget=memory_budget
        )
        tries = [dict(t) for t in info["tries"]]
        record = {
            "checkpoint": str(cpdir / name),
            "number": number,
            "version": info["version"],
            "tries": tries,
            "root": tries[-1]["root"],
            "reg_count": int(tries[-1]["reg_count"]),
            "registers_published": summary["register_rows"],
        }
        data.write({layout.CF_META: [(fs.META_FLOW_CHECKPOINT, record)]})
        kill_point("flow_checkpoint.read_recorded")
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
            "verified_leaf_hashes": verify_leaves and not trust_hashes,
            "mode": "in_memory",
        }
        data.write_report("flow_checkpoint_read", report)
    return report


def verify(
    cpdir: Path,
    name: str,
    workers: int = 0,
    verify_leaves: bool = True,
    trust_hashes: bool = False,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
) -> dict[str, Any]:
    """`rechain flow checkpoint verify`: every check of `read` (CRCs, structure, path order,
    the hashes recomputed, each root against its record) without a data folder: nothing is
    kept or written. A v6 checkpoint of one trie is streamed within `memory_budget`; others
    (several tries, versions 1/3/4/5) are loaded whole, as `read` loads them. Raises
    `RechainError` naming the file and offset of the first damage."""
    t0 = time.perf_counter()
    threads = workers or os.cpu_count() or 1
    version = checkpoint_version(cpdir, name)
    mode = _verify_mode(verify_leaves, trust_hashes)
    info: dict[str, Any] | None = None
    if version == 6:
        share = _stream_share(memory_budget, threads)
        try:
            info = _native.flow_checkpoint_verify(
                str(cpdir), name, threads=threads, verify=mode, batch_bytes=share
            ).as_dict()
            registers = int(info["registers"])
            how = "streaming"
        except _native.FlowCheckpointError as e:
            if getattr(e, "kind", "") != "shared_node":
                _raise(e)
    if info is None:
        forest, info = load_forest(
            cpdir, name, threads, verify_leaves=verify_leaves, trust_hashes=trust_hashes
        )
        del forest
        registers = int(info["last_trie_registers"])
        how = "in_memory"
    tries = [dict(t) for t in info["tries"]]
    if registers != int(tries[-1]["reg_count"]):
        raise RechainError(
            f"{cpdir / name}: the last trie record says {tries[-1]['reg_count']} registers but "
            f"the trie holds {registers}"
        )
    parts = [dict(p) for p in info["parts"]]
    return {
        "checkpoint": str(cpdir / name),
        "version": version,
        "tries": tries,
        "root": tries[-1]["root"],
        "reg_count": int(tries[-1]["reg_count"]),
        "mode": how,
        "verify": mode,
        "memory_budget": memory_budget,
        "parts": parts,
        "top_nodes": int(info["top_nodes"]),
        # Keccak-f permutations the recomputed hashes ran (parts and top nodes).
        "permutations": sum(int(p.get("permutations", 0)) for p in parts) + int(info["top_nodes"]),
        "total_s": time.perf_counter() - t0,
    }


def stats(
    cpdir: Path,
    name: str,
    data_path: Path,
    workers: int = 0,
    trust_hashes: bool = False,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
) -> dict[str, Any]:
    """`rechain flow checkpoint stats`: counts and sizes of checkpoint `name` (v6, one trie)
    per owner, per register kind, per depth and for the trie, gathered with the streamed read
    (every hash checked unless `trust_hashes`), published as the `flow_checkpoint_*` tables
    only if the whole checkpoint checked out. Returns the summary."""
    from rechain.schemas import tables
    from rechain.workers.memory import release_unused_memory

    t0 = time.perf_counter()
    threads = workers or os.cpu_count() or 1
    version = checkpoint_version(cpdir, name)
    if version != 6:
        raise RechainError(
            # Named at the version field (offset 2), as the readers name a version they refuse.
            f"{cpdir / name} offset 2: version {version}: stats are gathered from v6 "
            "checkpoints only"
        )
    share = _stream_share(memory_budget, threads)
    with DataDir(data_path) as data:
        claim(data, "flow")
        spill = data.path / ".checkpoint-stats-spill"
        shutil.rmtree(spill, ignore_errors=True)
        spill.mkdir()
        try:
            try:
                got = _native.flow_checkpoint_stats(
                    str(cpdir),
                    name,
                    str(spill),
                    threads=threads,
                    verify="none" if trust_hashes else "full",
                    batch_bytes=share,
                    owner_bytes=budget_share(memory_budget, "flow", "checkpoint.owners"),
                )
            except _native.FlowCheckpointError as e:
                if getattr(e, "kind", "") == "shared_node":
                    raise RechainError(
                        f"{cpdir / name}: holds several tries (sharing nodes); stats are "
                        "gathered from one-trie checkpoints only"
                    ) from e
                _raise(e)
            read_s = time.perf_counter() - t0
            kill_point("flow_checkpoint.stats_gathered")
            # The part threads' freed leaf batches and owner maps, back before the merge.
            release_unused_memory()
            trie = got.trie_stats.to_pylist()[0]
            record = got.tries[-1]
            if int(got.registers) != int(record.reg_count):
                got.owners.close()
                raise RechainError(
                    f"{cpdir / name}: the trie record says {record.reg_count} registers but "
                    f"the trie holds {got.registers}"
                )
            previous = data.meta_get(fs.META_FLOW_CHECKPOINT_STATS) or {}
            generation = int(previous.get("generation") or 0) + 1
            owners = 0

            def owner_batches() -> Iterator[pa.RecordBatch]:
                nonlocal owners
                for batch in got.owners:
                    owners += batch.num_rows
                    yield batch

            # Owners first (the long one), then the small tables, then the record naming the
            # generation: a rerun after a kill rewrites the same generation.
            t_pub = time.perf_counter()
            owners_table = tables.FLOW_CHECKPOINT_OWNERS
            data.stage_parquet_batches(owners_table.name, generation, owner_batches())
            for table, batch in (
                (tables.FLOW_CHECKPOINT_TRIES, got.trie_stats),
                (tables.FLOW_CHECKPOINT_DEPTHS, got.depths),
                (tables.FLOW_CHECKPOINT_REGISTER_KINDS, got.kinds),
            ):
                data.stage_parquet_batches(table.name, generation, iter([batch]))
            kinds = got.kinds.to_pylist()
            summary = {
                "checkpoint": str(cpdir / name),
                "generation": generation,
                "root": trie["root"],
                "reg_count": trie["reg_count"],
                "reg_size": trie["reg_size"],
                "registers": trie["registers"],
                "owners": owners,
                "key_bytes": trie["key_bytes"],
                "value_bytes": trie["value_bytes"],
                "nodes": trie["nodes"],
                "leaf_nodes": trie["leaf_nodes"],
                "interim_nodes": trie["interim_nodes"],
                "max_depth": trie["max_depth"],
                "kinds": {k["kind"]: k["registers"] for k in kinds},
            }
            data.write({layout.CF_META: [(fs.META_FLOW_CHECKPOINT_STATS, summary)]})
            kill_point("flow_checkpoint.stats_recorded")
            for t in fs.CHECKPOINT_STATS_TABLES:
                data.remove_other_generations(t, generation)
            data.publish_view()
            report = {
                **summary,
                "kinds": kinds,
                "memory_budget": memory_budget,
                "verified_hashes": not trust_hashes,
                "parts": [p.as_dict() for p in got.parts],
                "read_s": read_s,
                "publish_s": time.perf_counter() - t_pub,
                "total_s": time.perf_counter() - t0,
            }
            data.write_report("flow_checkpoint_stats", report)
        finally:
            shutil.rmtree(spill, ignore_errors=True)
    return report


def _print_stats(r: dict[str, Any]) -> None:
    mib = 1 << 20
    print(
        f"stats of {r['checkpoint']}: root {r['root']}\n"
        f"  registers {r['registers']:,} of {r['owners']:,} owner(s): keys "
        f"{r['key_bytes'] / mib:,.1f} MiB, values {r['value_bytes'] / mib:,.1f} MiB\n"
        f"  nodes {r['nodes']:,}: {r['leaf_nodes']:,} leaves, {r['interim_nodes']:,} interim; "
        f"max depth {r['max_depth']}"
    )
    for k in r["kinds"][:8]:
        print(
            f"  {k['kind']:<28} {k['registers']:>12,} registers "
            f"{k['value_bytes'] / mib:>10,.1f} MiB values"
        )
    if len(r["kinds"]) > 8:
        print(f"  ... {len(r['kinds']) - 8} more kind(s) in flow_checkpoint_register_kinds")
    print(f"  tables: {', '.join(fs.CHECKPOINT_STATS_TABLES)} ({r['total_s']:.1f} s)")


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


def _register_hashes_files(files: list[Path]) -> list[str | None]:
    """The `register_hashes` file written alongside each `registers` file (same generation and
    name, same row groups), where there is one."""
    out: list[str | None] = []
    for f in files:
        h = f.parent.parent.parent / fs.REGISTER_HASHES / f.parent.name / f.name
        out.append(str(h) if h.is_file() else None)
    return out


def write(
    data_path: Path,
    out: Path,
    root: str | None = None,
    number: int | None = None,
    threads: int | None = None,
) -> dict[str, Any]:
    """`rechain flow checkpoint write`: the data folder's current state as a one-trie v6
    checkpoint, streamed from the `registers` table (path order; its parts folded on `threads`
    threads by the Rust core, which reads the Parquet files itself)."""
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
        reg_size = summary.get("reg_size")
        kill_point("flow_checkpoint.writing")
        try:
            result = _native.flow_checkpoint_write_registers(
                [str(f) for f in files],
                _register_hashes_files(files),
                str(out),
                name,
                threads,
                None if reg_size is None else int(reg_size),
            )
        except _native.FlowCheckpointError as e:
            _raise(e)
        kill_point("flow_checkpoint.written")
    trie = result.tries[0]
    if trie.root != current:
        for p in out.glob(f"{name}*"):
            p.unlink()
        raise RechainError(
            f"{data_path}: registers hash to root {trie.root}, but the state's root is {current}"
        )
    return {
        "checkpoint": str(out / name),
        "root": trie.root,
        "reg_count": int(trie.reg_count),
        "reg_size": int(trie.reg_size),
        "registers_read": int(result.registers_read),
        "bytes": int(result.bytes),
        "part_nodes": list(result.part_nodes),
        "top_nodes": int(result.top_nodes),
        # Leaves whose compact hash came from `register_hashes` / whose chain was run.
        "cached_leaves": int(result.cached_leaves),
        "hashed_leaves": int(result.hashed_leaves),
        "total_s": time.perf_counter() - t0,
    }
