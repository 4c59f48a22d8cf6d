"""Bitcoin datasets: names, and the Arrow schemas the Rust core declares (the published
tables' schemas and Parquet layout are in ``rechain.schemas.tables``)."""

from __future__ import annotations

import pyarrow as pa
from rechain.workers import _native

#: Scan log: one row per accepted record copy, in file/offset order.
RECORDS = "btc_records"
#: Scan events: skipped or suspicious byte ranges with file, offset and reason.
EVENTS = "btc_events"
#: The linked block tree, one row per distinct hash (Parquet table ``headers``).
HEADERS = "headers"

#: Full decode (``--mode full``): the four batches the Rust decoder gives for a run of block
#: records, which the published tables take with chain context.
BODY_STAGED = {
    "blocks": "body_blocks",
    "transactions": "body_transactions",
    "inputs": "body_inputs",
    "outputs": "body_outputs",
}
BLOCKS, TRANSACTIONS, INPUTS, OUTPUTS = BODY_STAGED
#: What the body pass stages per unit (``pipeline/bitcoin/body_parts.py``): the copies' verdict rows
#: and each transaction's txid, block and position (for the tx index). The other rows are
#: written from the blocks themselves by the later stages.
BODY_SLIM = {"blocks": "body_blocks", "txids": "body_txids"}
#: What a body part held when it was staged before ``BODY_SLIM`` (its ``transactions``
#: file holds the ``txids`` columns; its ``inputs`` and ``outputs`` are no longer read).
BODY_STAGED_V1 = tuple(BODY_STAGED)
#: Full-decode tables are Hive-partitioned by ``height_range`` = height // this * this
#: (-1 for blocks not connected to the root).
HEIGHT_RANGE_BLOCKS = 10_000


def height_range(height: int) -> int:
    """The ``height_range`` partition of a connected block's rows."""
    return height // HEIGHT_RANGE_BLOCKS * HEIGHT_RANGE_BLOCKS


#: Events that are part of a healthy node's files rather than damage.
NORMAL_EVENT_KINDS = frozenset({"zero_tail"})


def schema(dataset: str) -> pa.Schema:
    """Arrow schema of a dataset, as the Rust core declares it."""
    return _native.empty_batch(dataset).schema


def empty(dataset: str) -> pa.RecordBatch:
    return _native.empty_batch(dataset)


#: How staged parts hold a hash: 32 raw bytes in display order (published as lower-case hex).
STAGED_HASH_TYPE = pa.binary(32)


def staged_hash_columns(dataset: str) -> list[str]:
    """Columns of a staged body dataset that hold hashes as raw bytes."""
    return [f.name for f in schema(dataset) if f.type == STAGED_HASH_TYPE]
