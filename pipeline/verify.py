"""``rechain verify``: checks that RocksDB, the Parquet tables and the manifest agree, and prints
a content digest that is equal for equal content (timings and other run details excluded).

Bitcoin: the block index against the headers table, the best chain from genesis to the tip with
its chainwork, and in full mode the UTXO set and table row counts. Flow: the registers in RocksDB
against the registers table row for row, the state root recomputed from those registers, the
root history against the trie_updates table, and every update's parent root known before it.
Ethereum: the header index (number → hash, hash → number, TD) against ``eth_blocks`` row for
row, parent links and TDs along each contiguous range, and every table's rows against the units
that committed them."""

from __future__ import annotations

import hashlib
import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from rechain.pipeline.stage_report import behind
from rechain.pipeline.store.datadir import DataDir
from rechain.pipeline.store.table_view import newest_generation, view_problems
from rechain.schemas import bitcoin as ds
from rechain.schemas import flow as fs
from rechain.schemas import rocksdb as layout
from rechain.workers import _native

#: Meta keys that describe a run rather than the content.
VOLATILE_META = {
    # What the folder is for (pipeline and mode): the tables and index are the content.
    layout.META_FOLDER,
    layout.META_BTC_RUN,
    layout.META_BTC_GENERATION,
    layout.META_BTC_FULL_GENERATION,
    # How the applied chain was cut into chunks (its figures are in btc_utxo and btc_full).
    layout.META_BTC_CHAIN_STATE,
    # How the tables were cut into segments (their rows are in parquet/full).
    layout.META_BTC_PUBLISHED,
    layout.META_BTC_TXINDEX,
    fs.META_FLOW_RUN,
    fs.META_FLOW_GENERATION,
    layout.META_ETH_RUN,
}
#: Meta key prefixes of the same kind: stage checkpoints, the applied chain's parts (how it was
#: cut into chunks, as ``META_BTC_CHAIN_STATE``) and the runs its scripts were checked in (the
#: figures are in ``META_BTC_SCRIPTS``).
VOLATILE_META_PREFIXES = (
    layout.META_STAGE_PREFIX,
    layout.META_BTC_CHAIN_PART_PREFIX,
    layout.META_BTC_SCRIPTS_RUN_PREFIX,
)
#: Meta keys whose JSON holds timings (keys ending in ``_s``) beside content.
TIMED_META = {fs.META_FLOW_SUMMARY, fs.META_FLOW_CHECKPOINT}
#: Registers compared and hashed per step of the Flow check.
FLOW_CHUNK = 65_536


def _work(bits: int) -> int:
    exponent, word = bits >> 24, bits & 0x007FFFFF
    target = word >> (8 * (3 - exponent)) if exponent <= 3 else word << (8 * (exponent - 3))
    if target == 0 or (word and bits & 0x00800000):
        return 0
    return (1 << 256) // (target + 1)


def headers_table(data: DataDir) -> pa.Table | None:
    base = data.parquet_dir(ds.HEADERS)
    gen = newest_generation(base) if base.exists() else None
    return pq.read_table(gen) if gen else None


#: Column families that record how a run was split up rather than what it found.
STAGING_COLUMN_FAMILIES = {layout.CF_BTC_BODIES}


def full_tables_digest(data: DataDir) -> str | None:
    """Row-level digest of the full-decode tables (``tables_digest``): equal content gives an
    equal digest however units were cut."""
    gen = data.meta_get(layout.META_BTC_FULL_GENERATION)
    tables = (ds.BLOCKS, ds.TRANSACTIONS, ds.INPUTS, ds.OUTPUTS)
    return None if gen is None else tables_digest(data, tables, int(gen))


def tables_digest(data: DataDir, tables: tuple[str, ...], generation: int) -> str:
    """Each table's columns (names and types), row count and the sum of a hash of each whole
    row, over one generation. A row's hash binds its columns together, so a value moved to
    another row (a ``spent`` flag on the neighbouring output, two fees swapped) changes the
    digest; the sum is independent of the order rows were written in and of how units were cut.
    """
    import duckdb

    h = hashlib.sha256()
    con = duckdb.connect(":memory:")
    try:
        for table in tables:
            folder = data.parquet_dir(table) / f"{generation:06d}"
            files = folder / "**" / "*.parquet"
            if not any(folder.rglob("*.parquet")):
                h.update(f"{table}:(0, None)".encode())
                continue
            rows = f"read_parquet('{files}', hive_partitioning = true)"
            columns = con.sql(f"DESCRIBE SELECT * FROM {rows}").fetchall()
            # ``hash(r)`` of the row alias hashes the row as one struct of all its columns.
            row = con.sql(f"SELECT count(*), sum(hash(r)::HUGEINT) FROM {rows} AS r").fetchall()[0]
            h.update(f"{table}:{[(c[0], c[1]) for c in columns]}:{row}".encode())
    finally:
        con.close()
    return h.hexdigest()


def digest(data: DataDir) -> dict[str, str]:
    parts: dict[str, str] = {}
    for cf in layout.COLUMN_FAMILIES:
        if cf in STAGING_COLUMN_FAMILIES:
            continue
        h = hashlib.sha256()
        for key, value in data.items(cf):
            if cf == layout.CF_META and (
                key in VOLATILE_META or key.startswith(VOLATILE_META_PREFIXES)
            ):
                continue
            if cf == layout.CF_META and key in TIMED_META:
                value = json.dumps(_without_timings(json.loads(value)), sort_keys=True).encode()
            h.update(len(key).to_bytes(4, "big") + key + len(value).to_bytes(4, "big") + value)
        parts[cf] = h.hexdigest()
    table = headers_table(data)
    h = hashlib.sha256()
    if table is not None:
        for row in table.combine_chunks().to_batches():
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, row.schema) as w:
                w.write_batch(row)
            h.update(sink.getvalue().to_pybytes())
    parts["parquet/headers"] = h.hexdigest()
    full = full_tables_digest(data)
    if full is not None:
        parts["parquet/full"] = full
    flow_gen = data.meta_get(fs.META_FLOW_GENERATION)
    if flow_gen is not None:
        parts["parquet/flow"] = tables_digest(data, (fs.TRIE_UPDATES, fs.REGISTERS), int(flow_gen))
    if data.meta_get(layout.META_ETH_IMPORT) is not None:
        from rechain.pipeline.ethereum.units import GENERATION
        from rechain.schemas.tables import ETH_TABLES

        parts["parquet/eth"] = tables_digest(data, tuple(t.name for t in ETH_TABLES), GENERATION)
    parts["content"] = hashlib.sha256("".join(parts[k] for k in sorted(parts)).encode()).hexdigest()
    return parts


def _without_timings(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items() if not k.endswith("_s")}
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


def verify(data_path: Path) -> dict[str, Any]:
    problems: list[str] = []
    with DataDir(data_path, readonly=True) as data:
        btc = data.meta_get(layout.META_BTC_SUMMARY)
        flow = data.meta_get(fs.META_FLOW_SUMMARY)
        eth = data.meta_get(layout.META_ETH_IMPORT)
        result: dict[str, Any] = {}
        if btc is None and flow is None and eth is None:
            problems.append(
                "nothing to verify: no completed Bitcoin reindex (meta btc/summary), "
                "no Flow replay or checkpoint read (meta flow/summary) and no Ethereum import"
            )
        if eth is not None:
            result["eth_blocks"] = _check_eth(data, problems)
        if btc is not None:
            result["blocks_indexed"] = _check_bitcoin(data, btc, problems)
        if flow is not None:
            result["flow"] = _check_flow(data, flow, problems)
        problems.extend(behind(data))
        problems.extend(view_problems(data.path))
        return {"ok": not problems, "problems": problems, **result, "digest": digest(data)}


def _check_bitcoin(data: DataDir, summary: dict[str, Any], problems: list[str]) -> int:
    """The header pass's state and, after a full reindex, the full-decode state; returns the
    number of blocks in the index."""
    if data.meta_get(layout.META_BTC_DIRTY):
        problems.append("scanned data not yet linked (a run was interrupted; rerun reindex)")
    table = headers_table(data)
    index_count = sum(1 for _ in data.items(layout.CF_BTC_INDEX))
    if table is None:
        problems.append("Parquet table headers missing")
    else:
        if table.num_rows != index_count:
            problems.append(f"headers has {table.num_rows} rows, block index {index_count}")
        linked = table.filter(pa.compute.is_valid(table.column("height")))
        if linked.num_rows != summary["blocks_indexed"]:
            problems.append(
                f"{linked.num_rows} linked rows, manifest says {summary['blocks_indexed']}"
            )
        _check_best_chain(data, table, summary, problems)
    _check_full(data, problems)
    # The count ``btc status`` shows: blocks linked into the index (``index_count`` also
    # holds the orphans and the copies of failed blocks).
    return int(summary["blocks_indexed"])


def _check_full(data: DataDir, problems: list[str]) -> None:
    """Full mode: the UTXO set in RocksDB and the published tables agree with the manifest."""
    full = data.meta_get(layout.META_BTC_FULL)
    if full is None:
        return
    count = total = 0
    for _, value in data.items(layout.CF_BTC_UTXO):
        count += 1
        total += int.from_bytes(value[4:12], "little")
    if (count, total) != (full["utxo_count"], full["total_amount"]):
        problems.append(
            f"UTXO set holds {count} outputs / {total} sat, manifest says "
            f"{full['utxo_count']} / {full['total_amount']}"
        )
    from rechain.pipeline.query import run_query

    for table, rows in full["tables"].items():
        (got,) = run_query(data.path, f'SELECT count(*) FROM "{table}"')[1][0]
        if got != rows:
            problems.append(f"table {table} has {got} rows, manifest says {rows}")


def _check_best_chain(
    data: DataDir, table: pa.Table, summary: dict[str, Any], problems: list[str]
) -> None:
    best = table.filter(table.column("in_best_chain")).sort_by("height")
    heights = best.column("height").to_pylist()
    if heights != list(range(len(heights))):
        problems.append("best chain heights are not contiguous from 0")
        return
    hashes = best.column("hash").to_pylist()
    prevs = best.column("prev_hash").to_pylist()
    bits = best.column("bits").to_pylist()
    works = best.column("chainwork").to_pylist()
    total = 0
    # The whole stored best chain, in height order (buckets sort by height).
    stored_chain = b"".join(v for _, v in data.items(layout.CF_BTC_BEST))
    if len(stored_chain) != 32 * len(hashes):
        problems.append(
            f"RocksDB best chain has {len(stored_chain) // 32} blocks, Parquet {len(hashes)}"
        )
        return
    for i, (h, p, b, w) in enumerate(zip(hashes, prevs, bits, works, strict=True)):
        if i and p != hashes[i - 1]:
            problems.append(f"best chain broken at height {i}")
            return
        total += _work(b)
        if int(w, 16) != total:
            problems.append(f"chainwork at height {i} is {w}, recomputed {total:064x}")
            return
        if _native.display_hash(stored_chain[32 * i : 32 * i + 32]) != h:
            problems.append(f"RocksDB best chain disagrees with Parquet at height {i}")
            return
    if hashes and (hashes[-1] != summary["tip_hash"] or works[-1] != summary["chainwork"]):
        problems.append("manifest tip differs from the best chain's last block")
    # Each height's median time past: the median of its block's time and the ten before.
    times = best.column("time").to_pylist()
    stored_mtp = b"".join(v for _, v in data.items(layout.CF_BTC_BEST_MTP))
    if len(stored_mtp) != 4 * len(times):
        problems.append(
            f"RocksDB has {len(stored_mtp) // 4} median times past, the best chain "
            f"{len(times)} blocks"
        )
        return
    for i, mtp in enumerate(struct.iter_unpack("<I", stored_mtp)):
        window = sorted(times[max(0, i - 10) : i + 1])
        if mtp[0] != window[len(window) // 2]:
            problems.append(f"median time past at height {i} is {mtp[0]}, recomputed otherwise")
            return


def _parquet_rows(data: DataDir, table: str, columns: list[str]) -> Iterator[pa.RecordBatch]:
    base = data.parquet_dir(table)
    gen = newest_generation(base) if base.exists() else None
    for f in sorted(gen.glob("*.parquet")) if gen else []:
        yield from pq.ParquetFile(f).iter_batches(batch_size=FLOW_CHUNK, columns=columns)


class _Rows:
    """Re-cuts a stream of record batches into slices of the lengths asked for."""

    def __init__(self, batches: Iterator[pa.RecordBatch]) -> None:
        self._batches = batches
        self._held: list[pa.RecordBatch] = []
        self._count = 0

    def take(self, n: int) -> pa.Table | None:
        while self._count < n:
            b = next(self._batches, None)
            if b is None:
                break
            self._held.append(b)
            self._count += b.num_rows
        if not self._held:
            return None
        t = pa.Table.from_batches(self._held)
        out, rest = t.slice(0, n), t.slice(n)
        self._held = rest.to_batches()
        self._count = rest.num_rows
        return out

    def exhausted(self) -> bool:
        return self.take(1) is None


def _register_chunks(data: DataDir) -> Iterator[pa.RecordBatch]:
    """RocksDB's current registers (path order) as path, encoded_key, value batches."""
    keys: list[bytes] = []
    values: list[bytes] = []

    def batch() -> pa.RecordBatch:
        enc, val = _native.flow_register_split(
            pa.array(values, pa.binary()), fs.REGISTER_VALUE_VERSION
        )
        return pa.record_batch(
            [pa.array(keys, pa.binary()), enc, val], names=["path", "encoded_key", "value"]
        )

    for key, value in data.items(layout.CF_FLOW_REGISTERS):
        keys.append(key)
        values.append(value)
        if len(keys) == FLOW_CHUNK:
            yield batch()
            keys.clear()
            values.clear()
    if keys:
        yield batch()


def _check_flow(data: DataDir, summary: dict[str, Any], problems: list[str]) -> dict[str, Any]:
    """The registers (RocksDB against Parquet, and the root they hash to) and the root history."""
    columns = ["path", "encoded_key", "value"]
    parquet = _Rows(_parquet_rows(data, fs.REGISTERS, columns))
    trie = _native.FlowCheckpointBuilder.root_only()
    rows = 0
    differs = False
    try:
        for chunk in _register_chunks(data):
            trie.push(chunk)
            theirs = parquet.take(chunk.num_rows)
            if not differs and (
                theirs is None
                or not pa.Table.from_batches([chunk]).equals(
                    theirs.select(columns).cast(pa.Table.from_batches([chunk]).schema)
                )
            ):
                problems.append(
                    f"registers table differs from RocksDB flow_registers in rows "
                    f"{rows}..{rows + chunk.num_rows - 1}"
                )
                differs = True
            rows += chunk.num_rows
        result = trie.finish().tries[0]
        root, reg_count = str(result.root), int(result.reg_count)
    except (ValueError, _native.FlowCheckpointError) as e:
        problems.append(f"flow_registers cannot be rehashed: {e}")
        return {"registers": rows}
    if not differs and not parquet.exhausted():
        problems.append(f"registers table has more rows than RocksDB's {rows}")
    if rows != summary["register_rows"]:
        problems.append(f"RocksDB holds {rows} registers, manifest says {summary['register_rows']}")
    if root != summary["root"] or reg_count != summary["registers"]:
        problems.append(
            f"registers hash to root {root} ({reg_count} registers), manifest says "
            f"{summary['root']} ({summary['registers']})"
        )
    _check_flow_roots(data, summary, problems)
    return {"registers": rows, "root_recomputed": root, "updates": summary["updates_applied"]}


def _check_flow_roots(data: DataDir, summary: dict[str, Any], problems: list[str]) -> None:
    """The root history in RocksDB against trie_updates, and each update's parent root known
    (the empty trie, a resumed checkpoint's tries, or an earlier update's result)."""
    from rechain.pipeline.query import connect

    roots = [(int.from_bytes(k, "big"), v.hex()) for k, v in data.items(layout.CF_FLOW_ROOTS)]
    con = connect(data.path)
    try:
        (updates, with_root) = con.sql("SELECT count(*), count(root) FROM trie_updates").fetchall()[
            0
        ]
        if updates != summary["updates_applied"]:
            problems.append(
                f"trie_updates has {updates} rows, manifest says {summary['updates_applied']}"
            )
        table_roots = con.sql(
            "SELECT seq, root FROM trie_updates WHERE root IS NOT NULL ORDER BY seq"
        ).fetchall()
        if [(int(s), r) for s, r in table_roots] != roots:
            problems.append(
                f"RocksDB flow_roots ({len(roots)} roots) disagrees with trie_updates "
                f"({with_root} roots)"
            )
        if roots and roots[-1][1] != summary["root"]:
            problems.append(f"last recorded root {roots[-1][1]} is not the state's root")
        known = [_native.flow_empty_root(), *summary.get("resumed_from", {}).get("roots", [])]
        read = data.meta_get(fs.META_FLOW_CHECKPOINT) or {}
        known += [t["root"] for t in read.get("tries", [])]
        con.execute("CREATE TEMP TABLE known AS SELECT unnest(?::VARCHAR[]) AS root", [known])
        orphans = con.sql(
            """
            WITH first AS (
                SELECT root, min(seq) AS seq FROM trie_updates
                WHERE root IS NOT NULL GROUP BY root
            )
            SELECT count(*), min(u.seq) FROM trie_updates u
            LEFT JOIN first f ON f.root = u.parent_root
            WHERE u.root IS NOT NULL
              AND (f.seq IS NULL OR f.seq >= u.seq)
              AND u.parent_root NOT IN (SELECT root FROM known)
            """
        ).fetchall()[0]
        if orphans[0]:
            problems.append(
                f"{orphans[0]} updates start from a root not known before them "
                f"(first at seq {orphans[1]})"
            )
    finally:
        con.close()


def _check_eth(data: DataDir, problems: list[str]) -> int:
    """The Ethereum header index against ``eth_blocks``, the links and TDs along the table, and
    each table's rows against the committed units; returns the blocks indexed."""
    import duckdb
    from rechain.pipeline.ethereum.units import committed_units, part_path
    from rechain.schemas.tables import ETH_TABLES

    units = committed_units(data)
    index = pa.table(
        {
            "number": pa.array(
                [int.from_bytes(k, "big") for k, _ in data.items(layout.CF_ETH_CANONICAL)],
                pa.uint64(),
            ),
            "hash": pa.array(
                ["0x" + v.hex() for _, v in data.items(layout.CF_ETH_CANONICAL)], pa.string()
            ),
        }
    )
    by_hash = {k: int.from_bytes(v, "big") for k, v in data.items(layout.CF_ETH_NUMBERS)}
    tds = {
        int.from_bytes(k, "big"): int.from_bytes(v, "big") for k, v in data.items(layout.CF_ETH_TD)
    }
    for t in ETH_TABLES:
        for key, u in units.items():
            if u.get("rows", {}).get(t.name) and not part_path(data, t.name, u["part"]).exists():
                problems.append(f"{t.name}: part of unit {key} missing")
    files = str(part_path(data, "eth_blocks", "*"))
    con = duckdb.connect(":memory:")
    try:
        con.register("idx", index)
        con.execute(
            f"CREATE VIEW blocks AS SELECT number, hash, parent_hash, difficulty, "
            f"total_difficulty, source FROM read_parquet('{files}')"
        )
        mismatched = con.sql(
            "SELECT count(*) FROM blocks b FULL JOIN idx i USING (number) "
            "WHERE b.hash IS DISTINCT FROM i.hash"
        ).fetchall()[0][0]
        if mismatched:
            problems.append(f"{mismatched} blocks differ between eth_canonical and eth_blocks")
        broken = con.sql(
            """
            SELECT count(*) FROM (
                SELECT number, parent_hash, difficulty, total_difficulty,
                       lag(number) OVER w AS pn, lag(hash) OVER w AS ph,
                       lag(total_difficulty) OVER w AS ptd
                FROM blocks WINDOW w AS (PARTITION BY source ORDER BY number)
            ) WHERE pn = number - 1 AND (parent_hash <> ph OR
                  (ptd IS NOT NULL AND total_difficulty IS NOT NULL
                   AND total_difficulty::HUGEINT <> ptd::HUGEINT + difficulty::HUGEINT))
            """
        ).fetchall()[0][0]
        # Within each unit (links between units are the `links` stage's verdicts).
        if broken:
            problems.append(f"{broken} blocks do not link to the block before them (hash or TD)")
        table_tds = dict(
            con.sql(
                "SELECT number, total_difficulty::HUGEINT FROM blocks "
                "WHERE total_difficulty IS NOT NULL"
            ).fetchall()
        )
        if {int(k): int(v) for k, v in table_tds.items()} != tds:
            problems.append(f"eth_td ({len(tds)} entries) differs from eth_blocks' TDs")
        for t in ETH_TABLES:
            want = sum(u.get("rows", {}).get(t.name, 0) for u in units.values())
            parts = part_path(data, t.name, "*")
            got = (
                con.sql(f"SELECT count(*) FROM read_parquet('{parts}')").fetchall()[0][0]
                if any(parts.parent.glob("*.parquet"))
                else 0
            )
            if got != want:
                problems.append(f"table {t.name} has {got} rows, the units committed {want}")
    finally:
        con.close()
    hashes = index.column("hash").to_pylist()
    numbers = index.column("number").to_pylist()
    if len(by_hash) != len(hashes) or any(
        by_hash.get(bytes.fromhex(h[2:])) != n for h, n in zip(hashes, numbers, strict=True)
    ):
        problems.append("eth_numbers (hash -> number) disagrees with eth_canonical")
    return len(hashes)
