"""What each published table's rows and columns mean, for the README's table reference
(``schemas/readme_tables.py`` renders it; ``tests/test_readme.py`` checks that every column of
``schemas/tables.TABLES`` is described here and that the README's copy is current).

Types come from the registry itself; this module holds only the words: per table, what a row
is and the command that writes it, and per column its unit ("" where a unit makes no sense)
and a one-line meaning.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class TableDoc:
    #: The chain, as the README's sections name it: "Bitcoin", "Flow" or "Ethereum".
    chain: str
    #: What one row is.
    row: str
    #: The command (and mode) that publishes the table.
    written_by: str
    #: Column name -> (unit, meaning).
    columns: dict[str, tuple[str, str]]
    #: Further lines (partitioning, encodings), rendered under the columns.
    notes: tuple[str, ...] = field(default=())


HEX = "hex"
SAT = "satoshis"
UNIX = "Unix seconds"
BYTES = "bytes"
WEI = "wei"

_BTC_HASH = "lower-case hex, display (reversed) byte order"
_HEIGHT_RANGE = (
    "Hive-partitioned by `height_range` (height // 10,000 × 10,000; -1 for blocks not "
    "connected to genesis), a column queries see."
)
_BTC_PLACE = {
    "block_hash": (HEX, "hash of the block holding it, " + _BTC_HASH),
    "tx_position": ("", "position of its transaction in the block (0 = coinbase)"),
    "height": ("blocks", "height of its block"),
    "in_best_chain": ("", "its block is on the best chain"),
}

_FLOW_SIZES = {
    "registers": ("count", "registers with a value"),
    "key_bytes": (BYTES, "total size of their encoded keys"),
    "value_bytes": (BYTES, "total size of their values"),
    "min_value_bytes": (BYTES, "smallest value"),
    "max_value_bytes": (BYTES, "largest value"),
}

_ETH_TX_REF = {
    "block_number": ("", "number of its block"),
    "block_hash": (HEX, "hash of its block, 0x-prefixed"),
    "transaction_index": ("", "position of its transaction in the block"),
}

TABLE_DOCS: dict[str, TableDoc] = {
    "headers": TableDoc(
        "Bitcoin",
        "one distinct block hash found in the blk files (side branches, orphans and invalid "
        "headers included), sorted by height",
        "`btc reindex` (both modes)",
        {
            "hash": (HEX, "block hash, " + _BTC_HASH),
            "prev_hash": (HEX, "parent's hash, " + _BTC_HASH),
            "height": ("blocks", "height; null when not connected to genesis"),
            "in_best_chain": ("", "on the best chain"),
            "chainwork": (HEX, "cumulative work up to this block, 64 hex digits"),
            "status": (
                "",
                "`active`, `valid-fork`, `headers-only`, `orphan`, `unlinked` or `invalid`",
            ),
            "invalid_reason": ("", "why it is invalid (Core's reject reason); null otherwise"),
            "version": ("", "header nVersion"),
            "merkle_root": (HEX, "merkle root, " + _BTC_HASH),
            "time": (UNIX, "header timestamp"),
            "bits": ("", "compact difficulty target (nBits)"),
            "nonce": ("", "header nonce"),
            "n_tx": ("count", "transactions in the block; null in headers mode"),
            "size": (BYTES, "serialized block size"),
            "file": ("", "N of the blkN.dat file holding the chosen copy"),
            "offset": (BYTES, "offset of the record's magic in that file"),
            "data_pos": (BYTES, "offset of the block itself (Core's nDataPos)"),
            "copies": ("count", "records of this hash found in the files"),
            "copy_status": (
                "",
                "the chosen copy's check: `ok`, `body_error`, `invalid_body`, `invalid_block`, "
                "`invalid_header`",
            ),
            "body_checked": ("", "the body was framed and hashed (full mode, `--check-bodies`)"),
        },
    ),
    "blocks": TableDoc(
        "Bitcoin",
        "one block (the copy chosen for each hash), best chain and off it",
        "`btc reindex --mode full`",
        {
            "hash": (HEX, "block hash, " + _BTC_HASH),
            "height": ("blocks", "height"),
            "in_best_chain": ("", "on the best chain"),
            "status": ("", "as in `headers`"),
            "valid": ("", "passed the block and consensus checks"),
            "invalid_reason": ("", "Core's reject reason when not valid"),
            "version": ("", "header nVersion"),
            "time": (UNIX, "header timestamp"),
            "bits": ("", "compact difficulty target (nBits)"),
            "prev_hash": (HEX, "parent's hash"),
            "merkle_root": (HEX, "merkle root"),
            "size": (BYTES, "serialized size with witness"),
            "stripped_size": (BYTES, "size without witness data"),
            "weight": ("weight units", "BIP141 weight"),
            "n_tx": ("count", "transactions"),
            "n_inputs": ("count", "inputs of all its transactions"),
            "n_outputs": ("count", "outputs of all its transactions"),
            "output_value": (SAT, "sum of all outputs, coinbase included"),
            "fees": (SAT, "sum of its transactions' fees (best chain; null off it)"),
            "coinbase_height": ("blocks", "height in the coinbase (BIP34); null before it"),
            "file": ("", "N of the blkN.dat file"),
            "offset": (BYTES, "offset of the record's magic in that file"),
        },
        (_HEIGHT_RANGE,),
    ),
    "transactions": TableDoc(
        "Bitcoin",
        "one transaction of a block in `blocks`",
        "`btc reindex --mode full`",
        {
            "txid": (HEX, "transaction id, " + _BTC_HASH),
            "wtxid": (HEX, "witness transaction id"),
            "block_hash": _BTC_PLACE["block_hash"],
            "height": _BTC_PLACE["height"],
            "in_best_chain": _BTC_PLACE["in_best_chain"],
            "position": ("", "position in the block (0 = coinbase)"),
            "version": ("", "transaction version"),
            "lock_time": ("", "nLockTime (height or Unix seconds)"),
            "size": (BYTES, "serialized size with witness"),
            "vsize": ("vbytes", "virtual size, weight / 4 rounded up"),
            "weight": ("weight units", "BIP141 weight"),
            "n_in": ("count", "inputs"),
            "n_out": ("count", "outputs"),
            "is_coinbase": ("", "the block's coinbase"),
            "has_witness": ("", "carries witness data"),
            "output_value": (SAT, "sum of its outputs"),
            "input_value": (SAT, "sum of the outputs it spends"),
            "fee": (SAT, "input_value - output_value; null for coinbases and off the best chain"),
        },
        (_HEIGHT_RANGE,),
    ),
    "inputs": TableDoc(
        "Bitcoin",
        "one input of a transaction in `transactions`",
        "`btc reindex --mode full`",
        {
            "txid": (HEX, "the spending transaction"),
            "vin": ("", "position among its inputs"),
            "prev_txid": (HEX, "transaction of the spent output (zeros for a coinbase)"),
            "prev_vout": ("", "index of the spent output"),
            "script_sig": (HEX, "scriptSig"),
            "sequence": ("", "nSequence"),
            "witness_items": ("count", "witness stack items"),
            "witness": (HEX, "witness stack, one hex string per item"),
            "value": (SAT, "value of the spent output"),
            "prev_script_pubkey": (HEX, "scriptPubKey of the spent output (who was paid)"),
            "prev_script_type": ("", "its `script_type`, as in `outputs`"),
            "prev_address": ("", "its address, as in `outputs`; null for types without one"),
            **_BTC_PLACE,
        },
        (_HEIGHT_RANGE,),
    ),
    "outputs": TableDoc(
        "Bitcoin",
        "one output of a transaction in `transactions`",
        "`btc reindex --mode full`",
        {
            "txid": (HEX, "the transaction creating it"),
            "vout": ("", "position among its outputs"),
            "value": (SAT, "amount"),
            "script_type": (
                "",
                "Core's Solver type: `p2pk`, `p2pkh`, `p2sh`, `p2wpkh`, `p2wsh`, `p2tr`, "
                "`multisig`, `op_return`, `witness_unknown`, `nonstandard`",
            ),
            "address": ("", "base58check/bech32/bech32m address; null for types without one"),
            "script_pubkey": (HEX, "scriptPubKey"),
            **_BTC_PLACE,
            "spent": ("", "spent by the best chain"),
        },
        (_HEIGHT_RANGE,),
    ),
    "utxo": TableDoc(
        "Bitcoin",
        "one coin of the UTXO set at a height of the best chain, in chainstate key order",
        "`btc dump-utxo --format parquet` (to the folder `--out` names)",
        {
            "txid": (HEX, "the transaction that created it"),
            "vout": ("", "its output index"),
            "value": (SAT, "amount"),
            "height": ("", "height of the block that created it"),
            "coinbase": ("", "created by a coinbase (spendable 100 blocks later)"),
            "script_pubkey": (HEX, "scriptPubKey"),
            "script_type": ("", "as in `outputs`"),
            "address": ("", "as in `outputs`; null for types without one"),
        },
        ("Files `part-NNNNN.parquet` in key order; read them as `read_parquet('DIR/*.parquet')`.",),
    ),
    "trie_updates": TableDoc(
        "Flow",
        "one WAL record applied to the trie forest, in WAL order",
        "`flow replay`",
        {
            "seq": ("", "sequence number of the update"),
            "segment": ("", "WAL segment number"),
            "offset": (BYTES, "offset of the record in its segment"),
            "parent_root": (HEX, "root hash the update applies to"),
            "root": (HEX, "root hash after it"),
            "n_paths": ("count", "registers it writes"),
            "op": ("", "record kind: `update` or `delete`"),
        },
    ),
    "registers": TableDoc(
        "Flow",
        "one register of the last trie, in path order",
        "`flow replay`, `flow checkpoint read`",
        {
            "path": ("32 bytes", "trie path; binary, use `hex()`"),
            "owner": ("binary", "account address (empty for global registers); use `hex()`"),
            "key": ("binary", "register key"),
            "value_size": (BYTES, "size of the value"),
            "value": ("binary", "register value"),
            "encoded_key": ("binary", "flow-go's encoded key (owner and key parts)"),
        },
    ),
    "register_hashes": TableDoc(
        "Flow",
        "the hashes of one register's leaf, beside `registers` row for row",
        "`flow replay`, `flow checkpoint read`",
        {
            "path": ("32 bytes", "trie path"),
            "height": ("levels", "height of the compact leaf above the bottom of the trie"),
            "leaf_hash": ("32 bytes", "flow-go's HashLeaf(path, value)"),
            "node_hash": ("32 bytes", "the compact leaf node's hash"),
        },
    ),
    "flow_checkpoint_tries": TableDoc(
        "Flow",
        "one trie of a checkpoint",
        "`flow checkpoint stats`",
        {
            "root": (HEX, "root hash"),
            "reg_count": ("count", "register count recorded in the checkpoint"),
            "reg_size": (BYTES, "register size recorded in the checkpoint"),
            "nodes": ("count", "nodes"),
            "leaf_nodes": ("count", "leaf nodes"),
            "interim_nodes": ("count", "interim nodes"),
            "registers": _FLOW_SIZES["registers"],
            "key_bytes": _FLOW_SIZES["key_bytes"],
            "value_bytes": _FLOW_SIZES["value_bytes"],
            "max_depth": ("levels", "deepest leaf"),
        },
    ),
    "flow_checkpoint_depths": TableDoc(
        "Flow",
        "one depth of the checkpoint's trie (0 = root)",
        "`flow checkpoint stats`",
        {
            "depth": ("levels", "distance from the root"),
            "leaf_nodes": ("count", "leaf nodes at that depth"),
            "interim_nodes": ("count", "interim nodes at that depth"),
        },
    ),
    "flow_checkpoint_register_kinds": TableDoc(
        "Flow",
        "one register kind, as flow-go names them (`atree slab`, `account status`, ...)",
        "`flow checkpoint stats`",
        {"kind": ("", "register kind; `others` for keys flow-go does not name"), **_FLOW_SIZES},
    ),
    "flow_checkpoint_owners": TableDoc(
        "Flow",
        "one account (owner) of the checkpoint's registers",
        "`flow checkpoint stats`",
        {"owner": ("binary", "account address; use `hex()`"), **_FLOW_SIZES},
    ),
    "eth_blocks": TableDoc(
        "Ethereum",
        "one block header and its body's counts, checked",
        "`eth import`",
        {
            "number": ("", "block number"),
            "hash": (HEX, "block hash, 0x-prefixed"),
            "parent_hash": (HEX, "parent's hash"),
            "ommers_hash": (HEX, "hash of the uncle list"),
            "miner": (HEX, "fee recipient address"),
            "state_root": (HEX, "state trie root"),
            "transactions_root": (HEX, "transactions trie root"),
            "receipts_root": (HEX, "receipts trie root"),
            "logs_bloom": (HEX, "256-byte logs bloom"),
            "difficulty": ("", "difficulty (0 after the merge)"),
            "total_difficulty": ("", "total difficulty up to this block; null where unknown"),
            "gas_limit": ("gas", "gas limit"),
            "gas_used": ("gas", "gas used"),
            "timestamp": (UNIX, "block timestamp"),
            "extra_data": (HEX, "extra data"),
            "mix_hash": (HEX, "mix hash (prevRandao after the merge)"),
            "nonce": (HEX, "8-byte proof-of-work nonce"),
            "base_fee_per_gas": (WEI, "EIP-1559 base fee; null before London"),
            "withdrawals_root": (HEX, "withdrawals root; null before Shanghai"),
            "blob_gas_used": ("gas", "blob gas used; null before Cancun"),
            "excess_blob_gas": ("gas", "excess blob gas; null before Cancun"),
            "parent_beacon_block_root": (HEX, "beacon root; null before Cancun"),
            "requests_hash": (HEX, "EIP-7685 requests hash; null before Prague"),
            "n_transactions": ("count", "transactions"),
            "n_uncles": ("count", "uncles"),
            "n_withdrawals": ("count", "withdrawals; null before Shanghai"),
            "size": (BYTES, "block size as geth reports it"),
            "header_size": (BYTES, "RLP header size"),
            "body_pruned": ("", "the source holds no body for it"),
            "valid": ("", "passed every check"),
            "invalid_reason": ("", "the failed rule and detail; null when valid"),
            "source": ("", "era1 or Ere file, or freezer range, it was read from"),
            "offset": (BYTES, "offset of the block in its source; null where none"),
        },
        ("Amounts, difficulties and TD are DECIMAL(38,0); byte strings are 0x-prefixed hex.",),
    ),
    "eth_transactions": TableDoc(
        "Ethereum",
        "one transaction, with its receipt's outcome",
        "`eth import`",
        {
            **_ETH_TX_REF,
            "hash": (HEX, "transaction hash"),
            "type": ("", "0 legacy, 1 EIP-2930, 2 EIP-1559, 3 blob, 4 EIP-7702"),
            "from_address": (HEX, "sender, recovered from the signature"),
            "to_address": (HEX, "recipient; null for contract creation"),
            "value": (WEI, "value transferred"),
            "nonce": ("", "sender's nonce"),
            "gas": ("gas", "gas limit"),
            "gas_price": (WEI, "gas price (legacy and EIP-2930); null otherwise"),
            "max_fee_per_gas": (WEI, "EIP-1559 fee cap; null before type 2"),
            "max_priority_fee_per_gas": (WEI, "EIP-1559 tip cap; null before type 2"),
            "max_fee_per_blob_gas": (WEI, "blob fee cap; type 3 only"),
            "effective_gas_price": (WEI, "price paid per gas"),
            "chain_id": ("", "chain id; null for pre-EIP-155 legacy transactions"),
            "input": (HEX, "call data"),
            "n_access_list": ("count", "access-list entries"),
            "n_blob_hashes": ("count", "blob versioned hashes"),
            "n_authorizations": ("count", "EIP-7702 authorizations"),
            "size": (BYTES, "encoded size"),
            "gas_used": ("gas", "gas used (from the receipt); null where receipts are pruned"),
            "status": ("", "1 success, 0 failure (Byzantium on); null before or pruned"),
            "contract_address": (HEX, "contract created; null otherwise"),
            "n_logs": ("count", "logs emitted; null where receipts are pruned"),
        },
    ),
    "eth_receipts": TableDoc(
        "Ethereum",
        "one transaction receipt",
        "`eth import`",
        {
            **_ETH_TX_REF,
            "transaction_hash": (HEX, "its transaction"),
            "type": ("", "transaction type"),
            "status": ("", "1 success, 0 failure; null before Byzantium"),
            "post_state": (HEX, "post-state root before Byzantium; null after"),
            "cumulative_gas_used": ("gas", "gas used in the block up to and with it"),
            "gas_used": ("gas", "gas used by it"),
            "effective_gas_price": (WEI, "price paid per gas"),
            "contract_address": (HEX, "contract created; null otherwise"),
            "n_logs": ("count", "logs emitted"),
        },
    ),
    "eth_logs": TableDoc(
        "Ethereum",
        "one log (event) emitted by a transaction",
        "`eth import`",
        {
            **_ETH_TX_REF,
            "transaction_hash": (HEX, "its transaction"),
            "log_index": ("", "position among the block's logs"),
            "address": (HEX, "emitting contract"),
            "topic0": (HEX, "first topic (the event signature); null when none"),
            "topic1": (HEX, "second topic; null when none"),
            "topic2": (HEX, "third topic; null when none"),
            "topic3": (HEX, "fourth topic; null when none"),
            "n_topics": ("count", "topics"),
            "data": (HEX, "non-indexed data"),
        },
    ),
    "eth_withdrawals": TableDoc(
        "Ethereum",
        "one validator withdrawal (Shanghai on)",
        "`eth import`",
        {
            "block_number": _ETH_TX_REF["block_number"],
            "block_hash": _ETH_TX_REF["block_hash"],
            "position": ("", "position in the block's withdrawals"),
            "withdrawal_index": ("", "global withdrawal index"),
            "validator_index": ("", "validator"),
            "address": (HEX, "recipient"),
            "amount_gwei": ("gwei", "amount"),
        },
    ),
}
