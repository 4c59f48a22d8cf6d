"""Every Parquet table rechain publishes, and every dataset it stages for a later stage, declared
once: name, schema and Parquet layout.

A closed registry (``TABLES``; staged datasets in ``STAGED``): the writers take a table's schema
and layout from here (a Python writer as ``Table.pyarrow_options``), DuckDB output is cast to
the declared schema (``duckdb_select``), and a test checks that every published file's schema
equals its declaration. Schemas of tables whose rows the Rust core builds (``headers``, the Flow
tables) are declared there and read through it; the full-mode Bitcoin tables are declared here:
DuckDB writes ``blocks`` and ``outputs``, and the Rust core builds ``transactions`` and
``inputs`` rows by column name for the schema handed to it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, Literal

from rechain.schemas import flow as fs

if TYPE_CHECKING:  # pyarrow is loaded where a schema is asked for (a Flow replay never does)
    import pyarrow as pa

#: Rows per Parquet row group of the Bitcoin tables: small enough for height-range pruning
#: by statistics.
BTC_ROW_GROUP_ROWS = 131_072
#: Hive partition column of the full-mode Bitcoin tables (height // HEIGHT_RANGE_BLOCKS).
HEIGHT_RANGE = "height_range"
#: ``Table.dictionary_columns`` of a dataset whose every column is dictionary-encoded (where
#: Parquet can: not booleans).
ALL_COLUMNS = ("*",)
#: pyarrow's own rows per row group (``write_table`` without ``row_group_size``).
PYARROW_ROW_GROUP_ROWS = 1 << 20


@dataclass(frozen=True)
class Table:
    name: str
    #: The declared schema (a function: Rust-declared schemas load the native module).
    declared: Callable[[], pa.Schema]
    #: Hive partition column (not stored in the files), or None for flat parts.
    partition_by: str | None = None
    #: Columns dictionary-encoded in Parquet (``ALL_COLUMNS``: every column).
    dictionary_columns: tuple[str, ...] = ()
    #: Columns written without min/max statistics (by the Rust core, and by the Ethereum
    #: workers' pyarrow writer): random hashes and scripts, whose ranges prune nothing.
    unsorted_columns: tuple[str, ...] = ()
    #: Columns stored uncompressed whatever ``compression`` says (by the Rust core): random
    #: bytes (hashes, paths that are hashes), which zstd cannot shrink and spends as long on as
    #: on any other page.
    uncompressed_columns: tuple[str, ...] = ()
    #: Columns of hashes' hex written DELTA_LENGTH_BYTE_ARRAY (by the Rust core): the lengths
    #: are packed apart, so zstd sees only the digits. Plain encoding puts a 4-byte length
    #: before each value, which zstd takes for short matches and spends longer on than on
    #: the digits themselves.
    delta_length_columns: tuple[str, ...] = ()
    #: Rows per row group.
    row_group_rows: int = BTC_ROW_GROUP_ROWS
    #: A row group is also closed at this many encoded bytes where the writer can (None: the
    #: writer's memory budget decides).
    row_group_bytes: int | None = None
    compression: str = "zstd"
    #: The pages of a file written in Python (``pyarrow_options``): "rust", as the Rust core
    #: writes them (``workers/native/src/parquet_out.rs``: version 2 data pages, PLAIN where a
    #: column declares no encoding of its own, page indexes, list leaves named ``item``), for a
    #: table the Rust core writes too; "pyarrow", pyarrow's defaults for all but the fields above
    #: (version 1 data pages, no page indexes), for a dataset only pyarrow writes.
    pages: Literal["rust", "pyarrow"] = "rust"

    @property
    def schema(self) -> pa.Schema:
        return _schema(self.name)

    def native_layout(self, row_group_bytes: int | None = None) -> Any:
        """The declared layout as the Rust writers take it (``_native.ParquetLayout``), a row
        group closing early at ``row_group_bytes`` (default: the declared bytes)."""
        from rechain.workers import _native

        group_bytes = row_group_bytes or self.row_group_bytes
        assert group_bytes, f"{self.name}: no row-group bytes declared or given"
        assert self.dictionary_columns != ALL_COLUMNS, self.name
        return _native.ParquetLayout(
            compression=self.compression,
            row_group_rows=self.row_group_rows,
            row_group_bytes=group_bytes,
            dictionary=list(self.dictionary_columns),
            unsorted=list(self.unsorted_columns),
            uncompressed=list(self.uncompressed_columns),
            delta_length=list(self.delta_length_columns),
        )

    def pyarrow_options(self) -> dict[str, Any]:
        """The declared layout as ``pyarrow.parquet.write_table``'s options (also
        ``ParquetWriter``'s, but for ``row_group_size``, which its ``write`` takes), for a file
        of this dataset written in Python, with the pages ``pages`` says. (Rows per row group
        only: the Rust writer may also close one early at a number of bytes.)"""
        import pyarrow as pa

        fields = list(self.schema)
        if self.pages == "pyarrow":
            # Declared for the Rust writer only.
            assert not (self.delta_length_columns or self.uncompressed_columns), self.name
            every = self.dictionary_columns == ALL_COLUMNS
            return {
                "compression": self.compression,
                "row_group_size": self.row_group_rows,
                "use_dictionary": every or list(self.dictionary_columns) or False,
                "write_statistics": not self.unsorted_columns
                or [f.name for f in fields if f.name not in self.unsorted_columns],
            }
        assert self.dictionary_columns != ALL_COLUMNS, self.name
        # Nested columns (lists) keep pyarrow's encoding: PLAIN, unless declared dictionary.
        flat = [f.name for f in fields if not pa.types.is_nested(f.type)]
        compression: str | dict[str, str] = self.compression
        if self.uncompressed_columns:
            compression = {
                f.name: "none" if f.name in self.uncompressed_columns else self.compression
                for f in fields
            }
        return {
            "compression": compression,
            "row_group_size": self.row_group_rows,
            "use_dictionary": list(self.dictionary_columns) or False,
            "write_statistics": [f.name for f in fields if f.name not in self.unsorted_columns],
            "column_encoding": {
                c: "DELTA_LENGTH_BYTE_ARRAY" if c in self.delta_length_columns else "PLAIN"
                for c in flat
                if c not in self.dictionary_columns
            },
            "data_page_version": "2.0",
            "write_page_index": True,
            # A list's values as the leaf ``name.list.item``, as the Rust writer names it.
            "use_compliant_nested_type": False,
        }


def _bitcoin_native(name: str) -> Callable[[], pa.Schema]:
    def declared() -> pa.Schema:
        from rechain.schemas import bitcoin as ds

        return ds.schema(name)

    return declared


def _flow_native(name: str) -> Callable[[], pa.Schema]:
    def declared() -> pa.Schema:
        from rechain.workers import _native

        schema: pa.Schema = _native.flow_table_schema(name)
        return schema

    return declared


def _eth_native(name: str) -> Callable[[], pa.Schema]:
    def declared() -> pa.Schema:
        from rechain.workers import _native

        schema: pa.Schema = _native.eth_table_schema(name)
        return schema

    return declared


#: Column types of the tables declared here: Arrow's name, DuckDB's name.
_TYPES = {
    "string": "VARCHAR",
    "uint32": "UINTEGER",
    "uint64": "UBIGINT",
    "int32": "INTEGER",
    "int64": "BIGINT",
    "bool": "BOOLEAN",
    "list<string>": "VARCHAR[]",
}
_STR, _U32, _U64, _I32, _I64, _BOOL = "string", "uint32", "uint64", "int32", "int64", "bool"


def _arrow_type(name: str) -> pa.DataType:
    import pyarrow as pa

    if name == "list<string>":
        return pa.list_(pa.string())
    return pa.bool_() if name == "bool" else pa.type_for_alias(name)


def _fields(*cols: tuple[str, str]) -> Callable[[], pa.Schema]:
    for _, t in cols:
        assert t in _TYPES, t

    def declared() -> pa.Schema:
        import pyarrow as pa

        return pa.schema([pa.field(n, _arrow_type(t)) for n, t in cols])

    return declared


#: Bitcoin full mode: hashes are display-order lower-case hex, amounts satoshis.
BLOCKS = Table(
    "blocks",
    _fields(
        ("hash", _STR),
        ("height", _U32),
        ("in_best_chain", _BOOL),
        ("status", _STR),
        ("valid", _BOOL),
        ("invalid_reason", _STR),
        ("version", _I32),
        ("time", _U32),
        ("bits", _U32),
        ("prev_hash", _STR),
        ("merkle_root", _STR),
        ("size", _U32),
        ("stripped_size", _U32),
        ("weight", _U64),
        ("n_tx", _U64),
        ("n_inputs", _U64),
        ("n_outputs", _U64),
        ("output_value", _U64),
        ("fees", _I64),
        ("coinbase_height", _I64),
        ("file", _U32),
        ("offset", _U64),
    ),
    partition_by=HEIGHT_RANGE,
)
TRANSACTIONS = Table(
    "transactions",
    _fields(
        ("txid", _STR),
        ("wtxid", _STR),
        ("block_hash", _STR),
        ("height", _U32),
        ("in_best_chain", _BOOL),
        ("position", _U32),
        ("version", _I32),
        ("lock_time", _U32),
        ("size", _U32),
        ("vsize", _U32),
        ("weight", _U32),
        ("n_in", _U32),
        ("n_out", _U32),
        ("is_coinbase", _BOOL),
        ("has_witness", _BOOL),
        ("output_value", _U64),
        ("input_value", _U64),
        ("fee", _I64),
    ),
    partition_by=HEIGHT_RANGE,
    # A block's hash repeats on each of its rows: a dictionary stores it once per row group
    # and each row as a run of indexes, instead of 64 hex characters compressed every time.
    dictionary_columns=("block_hash",),
    unsorted_columns=("txid", "wtxid", "block_hash"),
    delta_length_columns=("txid", "wtxid"),
)
INPUTS = Table(
    "inputs",
    _fields(
        ("txid", _STR),
        ("vin", _U32),
        ("prev_txid", _STR),
        ("prev_vout", _U32),
        ("script_sig", _STR),
        ("sequence", _U32),
        ("witness_items", _U32),
        ("witness", "list<string>"),
        ("value", _U64),
        ("prev_script_pubkey", _STR),
        ("prev_script_type", _STR),
        ("prev_address", _STR),
        ("block_hash", _STR),
        ("tx_position", _U32),
        ("height", _U32),
        ("in_best_chain", _BOOL),
    ),
    partition_by=HEIGHT_RANGE,
    dictionary_columns=("block_hash", "prev_script_type"),
    unsorted_columns=(
        "txid",
        "prev_txid",
        "script_sig",
        "witness",
        "prev_script_pubkey",
        "prev_address",
        "block_hash",
    ),
    delta_length_columns=("txid", "prev_txid"),
)
OUTPUTS = Table(
    "outputs",
    _fields(
        ("txid", _STR),
        ("vout", _U32),
        ("value", _U64),
        ("script_type", _STR),
        ("address", _STR),
        ("script_pubkey", _STR),
        ("block_hash", _STR),
        ("tx_position", _U32),
        ("height", _U32),
        ("in_best_chain", _BOOL),
        ("spent", _BOOL),
    ),
    partition_by=HEIGHT_RANGE,
    dictionary_columns=("block_hash", "script_type"),
    unsorted_columns=("txid", "address", "script_pubkey", "block_hash"),
    delta_length_columns=("txid",),
)
#: Written by pyarrow (``DataDir.stage_parquet_parts``), from the linked tree's batches.
HEADERS = Table(
    "headers",
    _bitcoin_native("headers"),
    dictionary_columns=("status", "invalid_reason", "copy_status", "version", "bits"),
    pages="pyarrow",
)
#: Flow: a row group also closes at 1 MiB of encoded columns, which the writer holds until
#: then (register values are mostly incompressible: 65,536 of them could hold tens of MiB).
TRIE_UPDATES = Table(
    fs.TRIE_UPDATES,
    _flow_native(fs.TRIE_UPDATES),
    dictionary_columns=("op", "segment"),
    row_group_rows=65_536,
    row_group_bytes=1 << 20,
)
#: ``registers`` and ``register_hashes`` are written side by side with the same row groups.
#: ``path`` is a hash: stored as it is, with statistics (the rows are in path order); values
#: are in no order.
REGISTERS = Table(
    fs.REGISTERS,
    _flow_native(fs.REGISTERS),
    unsorted_columns=("value",),
    uncompressed_columns=("path",),
    row_group_rows=65_536,
    row_group_bytes=1 << 20,
)
#: Every column but ``height`` is a hash; only ``path`` is in order.
REGISTER_HASHES = Table(
    fs.REGISTER_HASHES,
    _flow_native(fs.REGISTER_HASHES),
    unsorted_columns=("leaf_hash", "node_hash"),
    uncompressed_columns=("path", "leaf_hash", "node_hash"),
    row_group_rows=REGISTERS.row_group_rows,
    row_group_bytes=REGISTERS.row_group_bytes,
)
#: ``rechain flow checkpoint stats``: small tables, one part each, published together, written by
#: pyarrow (``DataDir.stage_parquet_parts``) from the Rust core's batches.
FLOW_CHECKPOINT_TRIES = Table(
    fs.CHECKPOINT_TRIES, _flow_native(fs.CHECKPOINT_TRIES), pages="pyarrow"
)
FLOW_CHECKPOINT_DEPTHS = Table(
    fs.CHECKPOINT_DEPTHS, _flow_native(fs.CHECKPOINT_DEPTHS), pages="pyarrow"
)
FLOW_CHECKPOINT_REGISTER_KINDS = Table(
    fs.CHECKPOINT_REGISTER_KINDS, _flow_native(fs.CHECKPOINT_REGISTER_KINDS), pages="pyarrow"
)
#: One row per account: as many rows as a chain has accounts (tens of millions on mainnet).
FLOW_CHECKPOINT_OWNERS = Table(
    fs.CHECKPOINT_OWNERS,
    _flow_native(fs.CHECKPOINT_OWNERS),
    row_group_rows=65_536,
    pages="pyarrow",
)
FLOW_CHECKPOINT_STATS = (
    FLOW_CHECKPOINT_TRIES,
    FLOW_CHECKPOINT_DEPTHS,
    FLOW_CHECKPOINT_REGISTER_KINDS,
    FLOW_CHECKPOINT_OWNERS,
)

#: Ethereum history (schemas in workers/native/src/eth/tables.rs): one part per import unit
#: (an era1 file, a freezer range), in block order, written by pyarrow
#: (``workers/eth_import.write_part``).
# Hashes, addresses, blooms and byte strings: their min/max per row group prune nothing.
ETH_BLOCKS = Table(
    "eth_blocks",
    _eth_native("eth_blocks"),
    # Values many blocks share: the empty uncle list, the empty trie root and bloom of blocks
    # without transactions (most of mainnet's first two million), a pool's address and extra
    # data. A column chunk whose dictionary outgrows its page falls back to plain values.
    dictionary_columns=(
        "source",
        "ommers_hash",
        "miner",
        "transactions_root",
        "receipts_root",
        "logs_bloom",
        "extra_data",
    ),
    unsorted_columns=(
        "hash",
        "parent_hash",
        "ommers_hash",
        "miner",
        "state_root",
        "transactions_root",
        "receipts_root",
        "logs_bloom",
        "extra_data",
        "mix_hash",
        "nonce",
        "withdrawals_root",
        "parent_beacon_block_root",
        "requests_hash",
    ),
    pages="pyarrow",
)
ETH_TRANSACTIONS = Table(
    "eth_transactions",
    _eth_native("eth_transactions"),
    unsorted_columns=(
        "block_hash",
        "hash",
        "from_address",
        "to_address",
        "input",
        "contract_address",
    ),
    pages="pyarrow",
)
ETH_RECEIPTS = Table(
    "eth_receipts",
    _eth_native("eth_receipts"),
    unsorted_columns=("block_hash", "transaction_hash", "post_state", "contract_address"),
    pages="pyarrow",
)
ETH_LOGS = Table(
    "eth_logs",
    _eth_native("eth_logs"),
    unsorted_columns=(
        "block_hash",
        "transaction_hash",
        "address",
        "topic0",
        "topic1",
        "topic2",
        "topic3",
        "data",
    ),
    pages="pyarrow",
)
ETH_WITHDRAWALS = Table(
    "eth_withdrawals",
    _eth_native("eth_withdrawals"),
    unsorted_columns=("block_hash", "address"),
    pages="pyarrow",
)
ETH_TABLES = (ETH_BLOCKS, ETH_TRANSACTIONS, ETH_RECEIPTS, ETH_LOGS, ETH_WITHDRAWALS)

#: Every published table, by name: the closed set ``rechain query`` and ``verify`` see.
TABLES: dict[str, Table] = {
    t.name: t
    for t in (
        HEADERS,
        BLOCKS,
        TRANSACTIONS,
        INPUTS,
        OUTPUTS,
        TRIE_UPDATES,
        REGISTERS,
        REGISTER_HASHES,
        *FLOW_CHECKPOINT_STATS,
        *ETH_TABLES,
    )
}


#: ``btc dump-utxo --format parquet``: the UTXO set at a height, one row per coin in chainstate
#: key order (txid, then vout), written as ``part-NNNNN.parquet`` files to the folder the user
#: names, outside any data folder. Hashes and scripts are hex, amounts satoshis, as above.
UTXO = Table(
    "utxo",
    _fields(
        ("txid", _STR),
        ("vout", _U32),
        ("value", _U64),
        ("height", _U32),
        ("coinbase", _BOOL),
        ("script_pubkey", _STR),
        ("script_type", _STR),
        ("address", _STR),
    ),
    dictionary_columns=("script_type",),
    unsorted_columns=("script_pubkey", "address"),
    delta_length_columns=("txid",),
)
#: Tables a command exports to a folder of the user's choosing (not published in a data folder).
EXPORTS: dict[str, Table] = {t.name: t for t in (UTXO,)}


#: Staged datasets: files a stage writes under ``DATADIR/stage`` (or ``DATADIR/tmp``) for a later
#: stage to read, never published, declared here beside the tables so that every writer of one
#: (the Rust core's, pyarrow's, and an unwind's rewrite of a part it cuts) has the one layout. A
#: chain-state part stages its spends (below) and its rows of ``blocks``, ``transactions``,
#: ``inputs`` and ``outputs``, which the publish stage links or copies into those tables'
#: segments: declared as the tables.
#: The best-chain spends of a chain-state part, read back once by the publish stage: snappy, and
#: 1 Mi rows per row group (the Rust writer, ``ChainStateChunk.write_rows``, is given both).
BTC_SPENDS = Table(
    "btc_spends", _bitcoin_native("btc_spends"), compression="snappy", row_group_rows=1 << 20
)


def _body(name: str) -> Table:
    """A dataset of the Bitcoin body decode, staged as pyarrow writes it by default but
    uncompressed: scratch, read once (Parquet's dictionary encoding, on every column, still
    folds the repeated block hashes); encoding took ~40% less time than lz4 for ~5% more
    bytes."""
    return Table(
        name,
        _bitcoin_native(name),
        dictionary_columns=ALL_COLUMNS,
        row_group_rows=PYARROW_ROW_GROUP_ROWS,
        compression="none",
        pages="pyarrow",
    )


#: A body part (``pipeline/bitcoin/body_parts.py``, written by ``workers/btc_decode.py``): the
#: verdict rows of a unit's block copies and the txids of their transactions (the names of
#: ``schemas/bitcoin.BODY_SLIM``).
BODY_BLOCKS = _body("body_blocks")
BODY_TXIDS = _body("body_txids")
#: The rows of off-chain copies decoded again by the publish stage (``OffchainDecoder``, under
#: ``DATADIR/tmp/offchain``), for DuckDB to read into the tables (``schemas/bitcoin.BODY_STAGED``).
BODY_TRANSACTIONS = _body("body_transactions")
BODY_INPUTS = _body("body_inputs")
BODY_OUTPUTS = _body("body_outputs")
STAGED: dict[str, Table] = {
    t.name: t
    for t in (BTC_SPENDS, BODY_BLOCKS, BODY_TXIDS, BODY_TRANSACTIONS, BODY_INPUTS, BODY_OUTPUTS)
}


@cache
def _schema(name: str) -> pa.Schema:
    return (TABLES.get(name) or EXPORTS.get(name) or STAGED[name]).declared()


def _duckdb_type(t: pa.DataType) -> str:
    import pyarrow as pa

    if pa.types.is_list(t):
        return _duckdb_type(t.value_type) + "[]"
    return _TYPES[str(t)]


def duckdb_select(table: Table, sql: str) -> str:
    """``sql`` with its columns cast to the table's declared schema, in declared order (and
    the partition column after them), so a change to the query cannot change the files'
    schema unnoticed: a missing column fails the query."""
    cols = [f'"{f.name}"::{_duckdb_type(f.type)} AS "{f.name}"' for f in table.schema]
    if table.partition_by:
        cols.append(f'"{table.partition_by}"')
    return f"SELECT {', '.join(cols)} FROM ({sql})"
