//! The Ethereum Parquet tables, declared once: `eth_blocks`, `eth_transactions`,
//! `eth_receipts`, `eth_logs`, `eth_withdrawals` (schemas and the rows of decoded blocks).
//!
//! Hashes, addresses and byte strings are `0x`-prefixed lower-case hex; amounts in wei (and
//! difficulties) are DECIMAL(38,0), which holds every amount the chain can carry (the whole
//! ether supply is under 10^27 wei); a value beyond 38 digits (only hostile input) is null.
//! Senders are recovered from the signatures (as cryo's `from_address`); the transaction
//! columns taken from receipts (`gas_used`, `status`) are null where the receipts were pruned.

use super::body::Body;
use super::header::DecodedHeader;
use super::receipt::Receipt;
use super::rules::Violation;
use alloy_consensus::transaction::SignerRecoverable;
use alloy_consensus::{Eip658Value, Transaction as _};
use alloy_primitives::{hex, U256};
use arrow_array::builder::{
    BooleanBuilder, Decimal128Builder, StringBuilder, UInt32Builder, UInt64Builder, UInt8Builder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

pub const BLOCKS: &str = "eth_blocks";
pub const TRANSACTIONS: &str = "eth_transactions";
pub const RECEIPTS: &str = "eth_receipts";
pub const LOGS: &str = "eth_logs";
pub const WITHDRAWALS: &str = "eth_withdrawals";
/// Every table, in the order [`Rows::finish`] returns them.
pub const TABLES: [&str; 5] = [BLOCKS, TRANSACTIONS, RECEIPTS, LOGS, WITHDRAWALS];

const WEI: DataType = DataType::Decimal128(38, 0);

fn field(name: &str, t: DataType, nullable: bool) -> Field {
    Field::new(name, t, nullable)
}

fn s(name: &str) -> Field {
    field(name, DataType::Utf8, false)
}
fn s_null(name: &str) -> Field {
    field(name, DataType::Utf8, true)
}
fn u64f(name: &str) -> Field {
    field(name, DataType::UInt64, false)
}
fn u64_null(name: &str) -> Field {
    field(name, DataType::UInt64, true)
}
fn u32f(name: &str) -> Field {
    field(name, DataType::UInt32, false)
}

/// The declared schema of table `name`.
pub fn schema(name: &str) -> Option<SchemaRef> {
    let fields = match name {
        BLOCKS => vec![
            u64f("number"),
            s("hash"),
            s("parent_hash"),
            s("ommers_hash"),
            s("miner"),
            s("state_root"),
            s("transactions_root"),
            s("receipts_root"),
            s("logs_bloom"),
            field("difficulty", WEI, false),
            field("total_difficulty", WEI, true),
            u64f("gas_limit"),
            u64f("gas_used"),
            u64f("timestamp"),
            s("extra_data"),
            s("mix_hash"),
            s("nonce"),
            u64_null("base_fee_per_gas"),
            s_null("withdrawals_root"),
            u64_null("blob_gas_used"),
            u64_null("excess_blob_gas"),
            s_null("parent_beacon_block_root"),
            s_null("requests_hash"),
            u32f("n_transactions"),
            u32f("n_uncles"),
            field("n_withdrawals", DataType::UInt32, true),
            u64f("size"),
            u32f("header_size"),
            field("body_pruned", DataType::Boolean, false),
            field("valid", DataType::Boolean, false),
            s_null("invalid_reason"),
            s("source"),
            u64_null("offset"),
        ],
        TRANSACTIONS => vec![
            u64f("block_number"),
            s("block_hash"),
            u32f("transaction_index"),
            s("hash"),
            field("type", DataType::UInt8, false),
            s_null("from_address"),
            s_null("to_address"),
            field("value", WEI, true),
            u64f("nonce"),
            u64f("gas"),
            field("gas_price", WEI, true),
            field("max_fee_per_gas", WEI, true),
            field("max_priority_fee_per_gas", WEI, true),
            field("max_fee_per_blob_gas", WEI, true),
            field("effective_gas_price", WEI, true),
            u64_null("chain_id"),
            s("input"),
            u32f("n_access_list"),
            u32f("n_blob_hashes"),
            u32f("n_authorizations"),
            u32f("size"),
            u64_null("gas_used"),
            field("status", DataType::UInt8, true),
            s_null("contract_address"),
            field("n_logs", DataType::UInt32, true),
        ],
        RECEIPTS => vec![
            u64f("block_number"),
            s("block_hash"),
            u32f("transaction_index"),
            s("transaction_hash"),
            field("type", DataType::UInt8, false),
            field("status", DataType::UInt8, true),
            s_null("post_state"),
            u64f("cumulative_gas_used"),
            u64f("gas_used"),
            field("effective_gas_price", WEI, true),
            s_null("contract_address"),
            u32f("n_logs"),
        ],
        LOGS => vec![
            u64f("block_number"),
            s("block_hash"),
            u32f("transaction_index"),
            s("transaction_hash"),
            u32f("log_index"),
            s("address"),
            s_null("topic0"),
            s_null("topic1"),
            s_null("topic2"),
            s_null("topic3"),
            field("n_topics", DataType::UInt8, false),
            s("data"),
        ],
        WITHDRAWALS => vec![
            u64f("block_number"),
            s("block_hash"),
            u32f("position"),
            u64f("withdrawal_index"),
            u64f("validator_index"),
            s("address"),
            u64f("amount_gwei"),
        ],
        _ => return None,
    };
    Some(Arc::new(Schema::new(fields)))
}

/// `0x` + lower-case hex of `bytes`.
pub fn hex0x(bytes: &[u8]) -> String {
    hex::encode_prefixed(bytes)
}

/// Appends `0x` + lower-case hex of `bytes` as the next value of `col`, encoded straight into
/// the column's buffer: no `String` per value (a block has a dozen hex columns). Values up to
/// a bloom's 256 bytes are encoded on the stack and appended at once.
fn put_hex(col: &mut StringBuilder, bytes: &[u8]) {
    const SHORT: usize = 256;
    if bytes.len() <= SHORT {
        let mut buf = [0u8; 2 + 2 * SHORT];
        let out = &mut buf[..2 + 2 * bytes.len()];
        let (prefix, digits) = out.split_at_mut(2);
        prefix.copy_from_slice(b"0x");
        // The output is exactly twice the input: encoding cannot fail, and the result is ASCII.
        let _ = hex::encode_to_slice(bytes, digits);
        col.append_value(std::str::from_utf8(out).unwrap_or_default());
        return;
    }
    const CHUNK: usize = 128;
    let mut buf = [0u8; 2 * CHUNK];
    // Writing into a string builder cannot fail.
    let _ = col.write_str("0x");
    for chunk in bytes.chunks(CHUNK) {
        let out = &mut buf[..2 * chunk.len()];
        if let Ok(s) = hex::encode_to_str(chunk, out) {
            let _ = col.write_str(s);
        }
    }
    col.append_value("");
}

fn put_hex_opt(col: &mut StringBuilder, bytes: Option<&[u8]>) {
    match bytes {
        Some(b) => put_hex(col, b),
        None => col.append_null(),
    }
}

const DECIMAL_MAX: u128 = 10u128.pow(38) - 1;

fn wei(v: U256) -> Option<i128> {
    u128::try_from(v)
        .ok()
        .filter(|x| *x <= DECIMAL_MAX)
        .map(|x| x as i128)
}

fn wei128(v: u128) -> Option<i128> {
    (v <= DECIMAL_MAX).then_some(v as i128)
}

fn decimals() -> Decimal128Builder {
    Decimal128Builder::new().with_data_type(WEI)
}

/// Bytes of an RLP list header for a payload of `len` bytes.
fn rlp_list_header_len(len: usize) -> usize {
    if len < 56 {
        1
    } else {
        1 + (usize::BITS as usize / 8 - len.leading_zeros() as usize / 8)
    }
}

struct BlockCols {
    number: UInt64Builder,
    hash: StringBuilder,
    parent_hash: StringBuilder,
    ommers_hash: StringBuilder,
    miner: StringBuilder,
    state_root: StringBuilder,
    transactions_root: StringBuilder,
    receipts_root: StringBuilder,
    logs_bloom: StringBuilder,
    difficulty: Decimal128Builder,
    total_difficulty: Decimal128Builder,
    gas_limit: UInt64Builder,
    gas_used: UInt64Builder,
    timestamp: UInt64Builder,
    extra_data: StringBuilder,
    mix_hash: StringBuilder,
    nonce: StringBuilder,
    base_fee: UInt64Builder,
    withdrawals_root: StringBuilder,
    blob_gas_used: UInt64Builder,
    excess_blob_gas: UInt64Builder,
    parent_beacon_block_root: StringBuilder,
    requests_hash: StringBuilder,
    n_transactions: UInt32Builder,
    n_uncles: UInt32Builder,
    n_withdrawals: UInt32Builder,
    size: UInt64Builder,
    header_size: UInt32Builder,
    body_pruned: BooleanBuilder,
    source: StringBuilder,
    offset: UInt64Builder,
    /// Block numbers in row order (for `valid`, filled at the end from the violations).
    numbers: Vec<u64>,
}

impl BlockCols {
    /// Columns sized for `n` blocks (a unit's count is known before its first row).
    fn with_capacity(n: usize) -> Self {
        // A hex column of `bytes`-byte values; a u64 column.
        let hexcol = |bytes: usize| StringBuilder::with_capacity(n, n * (2 + 2 * bytes));
        let u64col = || UInt64Builder::with_capacity(n);
        let u32col = || UInt32Builder::with_capacity(n);
        BlockCols {
            number: u64col(),
            hash: hexcol(32),
            parent_hash: hexcol(32),
            ommers_hash: hexcol(32),
            miner: hexcol(20),
            state_root: hexcol(32),
            transactions_root: hexcol(32),
            receipts_root: hexcol(32),
            logs_bloom: hexcol(256),
            difficulty: decimals(),
            total_difficulty: decimals(),
            gas_limit: u64col(),
            gas_used: u64col(),
            timestamp: u64col(),
            extra_data: hexcol(32),
            mix_hash: hexcol(32),
            nonce: hexcol(8),
            base_fee: u64col(),
            withdrawals_root: StringBuilder::new(),
            blob_gas_used: UInt64Builder::new(),
            excess_blob_gas: UInt64Builder::new(),
            parent_beacon_block_root: StringBuilder::new(),
            requests_hash: StringBuilder::new(),
            n_transactions: u32col(),
            n_uncles: u32col(),
            n_withdrawals: u32col(),
            size: u64col(),
            header_size: u32col(),
            body_pruned: BooleanBuilder::with_capacity(n),
            source: StringBuilder::with_capacity(n, n * 32),
            offset: u64col(),
            numbers: Vec::with_capacity(n),
        }
    }
}

#[derive(Default)]
struct TxCols {
    block_number: UInt64Builder,
    block_hash: StringBuilder,
    index: UInt32Builder,
    hash: StringBuilder,
    ty: UInt8Builder,
    from: StringBuilder,
    to: StringBuilder,
    value: Option<Decimal128Builder>,
    nonce: UInt64Builder,
    gas: UInt64Builder,
    gas_price: Option<Decimal128Builder>,
    max_fee: Option<Decimal128Builder>,
    max_priority_fee: Option<Decimal128Builder>,
    max_blob_fee: Option<Decimal128Builder>,
    effective_gas_price: Option<Decimal128Builder>,
    chain_id: UInt64Builder,
    input: StringBuilder,
    n_access_list: UInt32Builder,
    n_blob_hashes: UInt32Builder,
    n_authorizations: UInt32Builder,
    size: UInt32Builder,
    gas_used: UInt64Builder,
    status: UInt8Builder,
    contract_address: StringBuilder,
    n_logs: UInt32Builder,
}

#[derive(Default)]
struct ReceiptCols {
    block_number: UInt64Builder,
    block_hash: StringBuilder,
    index: UInt32Builder,
    tx_hash: StringBuilder,
    ty: UInt8Builder,
    status: UInt8Builder,
    post_state: StringBuilder,
    cumulative_gas_used: UInt64Builder,
    gas_used: UInt64Builder,
    effective_gas_price: Option<Decimal128Builder>,
    contract_address: StringBuilder,
    n_logs: UInt32Builder,
}

#[derive(Default)]
struct LogCols {
    block_number: UInt64Builder,
    block_hash: StringBuilder,
    tx_index: UInt32Builder,
    tx_hash: StringBuilder,
    log_index: UInt32Builder,
    address: StringBuilder,
    topics: [StringBuilder; 4],
    n_topics: UInt8Builder,
    data: StringBuilder,
}

#[derive(Default)]
struct WithdrawalCols {
    block_number: UInt64Builder,
    block_hash: StringBuilder,
    position: UInt32Builder,
    index: UInt64Builder,
    validator: UInt64Builder,
    address: StringBuilder,
    amount: UInt64Builder,
}

fn dec(b: &mut Option<Decimal128Builder>) -> &mut Decimal128Builder {
    b.get_or_insert_with(decimals)
}

fn finish_dec(b: &mut Option<Decimal128Builder>) -> ArrayRef {
    Arc::new(dec(b).finish())
}

/// Rows of the five tables for the blocks of one unit, appended in chain order.
pub struct Rows {
    source: String,
    blocks: BlockCols,
    txs: TxCols,
    receipts: ReceiptCols,
    logs: LogCols,
    withdrawals: WithdrawalCols,
    /// Transactions whose sender could not be recovered (null `from_address`).
    pub unrecovered_senders: u64,
    recover_buf: Vec<u8>,
}

impl Rows {
    /// `source`: the file (era1) or freezer the rows come from, as the tables show it.
    pub fn new(source: impl Into<String>) -> Self {
        Self::with_capacity(source, 0)
    }

    /// [`Rows::new`] with the block columns sized for `blocks` blocks (capped at one unit's
    /// 8,192: a hint, not a limit).
    pub fn with_capacity(source: impl Into<String>, blocks: usize) -> Self {
        Rows {
            source: source.into(),
            blocks: BlockCols::with_capacity(blocks.min(8192)),
            txs: TxCols::default(),
            receipts: ReceiptCols::default(),
            logs: LogCols::default(),
            withdrawals: WithdrawalCols::default(),
            unrecovered_senders: 0,
            recover_buf: Vec::new(),
        }
    }

    pub fn blocks(&self) -> usize {
        self.blocks.numbers.len()
    }

    /// Appends one block: its header, and, unless pruned, its body and receipts.
    pub fn push(
        &mut self,
        header: &DecodedHeader,
        body: Option<&Body>,
        body_payload_len: usize,
        receipts: Option<&[Receipt]>,
        td: Option<U256>,
        offset: Option<u64>,
    ) {
        let h = &header.header;
        let b = &mut self.blocks;
        let hash = hex0x(header.hash.as_slice());
        b.numbers.push(h.number);
        b.number.append_value(h.number);
        b.hash.append_value(&hash);
        put_hex(&mut b.parent_hash, h.parent_hash.as_slice());
        put_hex(&mut b.ommers_hash, h.ommers_hash.as_slice());
        put_hex(&mut b.miner, h.beneficiary.as_slice());
        put_hex(&mut b.state_root, h.state_root.as_slice());
        put_hex(&mut b.transactions_root, h.transactions_root.as_slice());
        put_hex(&mut b.receipts_root, h.receipts_root.as_slice());
        put_hex(&mut b.logs_bloom, h.logs_bloom.as_slice());
        b.difficulty.append_option(wei(h.difficulty));
        b.total_difficulty.append_option(td.and_then(wei));
        b.gas_limit.append_value(h.gas_limit);
        b.gas_used.append_value(h.gas_used);
        b.timestamp.append_value(h.timestamp);
        put_hex(&mut b.extra_data, &h.extra_data);
        put_hex(&mut b.mix_hash, h.mix_hash.as_slice());
        put_hex(&mut b.nonce, h.nonce.as_slice());
        b.base_fee.append_option(h.base_fee_per_gas);
        put_hex_opt(
            &mut b.withdrawals_root,
            h.withdrawals_root.as_ref().map(|r| r.as_slice()),
        );
        b.blob_gas_used.append_option(h.blob_gas_used);
        b.excess_blob_gas.append_option(h.excess_blob_gas);
        put_hex_opt(
            &mut b.parent_beacon_block_root,
            h.parent_beacon_block_root.as_ref().map(|r| r.as_slice()),
        );
        put_hex_opt(
            &mut b.requests_hash,
            h.requests_hash.as_ref().map(|r| r.as_slice()),
        );
        b.n_transactions
            .append_value(body.map_or(0, |x| x.transactions.len() as u32));
        b.n_uncles
            .append_value(body.map_or(0, |x| x.uncles.len() as u32));
        b.n_withdrawals.append_option(
            body.and_then(|x| x.withdrawals.as_ref())
                .map(|w| w.len() as u32),
        );
        // geth's Block.Size: the RLP of [header, transactions, uncles(, withdrawals)], whose
        // payload is the header's bytes followed by the body list's payload.
        let payload = header.size + body_payload_len;
        b.size
            .append_value((rlp_list_header_len(payload) + payload) as u64);
        b.header_size.append_value(header.size as u32);
        b.body_pruned.append_value(body.is_none());
        b.source.append_value(&self.source);
        b.offset.append_option(offset);
        let Some(body) = body else { return };
        self.push_transactions(header, &hash, body, receipts);
        if let Some(ws) = &body.withdrawals {
            let w = &mut self.withdrawals;
            for (i, x) in ws.iter().enumerate() {
                w.block_number.append_value(h.number);
                w.block_hash.append_value(&hash);
                w.position.append_value(i as u32);
                w.index.append_value(x.index);
                w.validator.append_value(x.validator_index);
                put_hex(&mut w.address, x.address.as_slice());
                w.amount.append_value(x.amount);
            }
        }
    }

    fn push_transactions(
        &mut self,
        header: &DecodedHeader,
        hash: &str,
        body: &Body,
        receipts: Option<&[Receipt]>,
    ) {
        let h = &header.header;
        let receipts = receipts.filter(|r| r.len() == body.transactions.len());
        let mut previous_cumulative = 0u64;
        let mut log_index = 0u32;
        for (i, tx) in body.transactions.iter().enumerate() {
            let env = &tx.envelope;
            let tx_hash = hex0x(tx.hash.as_slice());
            let from = env.recover_unchecked_with_buf(&mut self.recover_buf).ok();
            if from.is_none() {
                self.unrecovered_senders += 1;
            }
            let contract = match (env.is_create(), from) {
                (true, Some(f)) => Some(hex0x(f.create(env.nonce()).as_slice())),
                _ => None,
            };
            let effective = wei128(env.effective_gas_price(h.base_fee_per_gas));
            let t = &mut self.txs;
            t.block_number.append_value(h.number);
            t.block_hash.append_value(hash);
            t.index.append_value(i as u32);
            t.hash.append_value(&tx_hash);
            t.ty.append_value(tx.tx_type);
            put_hex_opt(&mut t.from, from.as_ref().map(|a| a.as_slice()));
            put_hex_opt(&mut t.to, env.to().as_ref().map(|a| a.as_slice()));
            dec(&mut t.value).append_option(wei(env.value()));
            t.nonce.append_value(env.nonce());
            t.gas.append_value(env.gas_limit());
            dec(&mut t.gas_price).append_option(env.gas_price().and_then(wei128));
            let dynamic = env.gas_price().is_none();
            dec(&mut t.max_fee).append_option(if dynamic {
                wei128(env.max_fee_per_gas())
            } else {
                None
            });
            dec(&mut t.max_priority_fee).append_option(
                env.max_priority_fee_per_gas()
                    .filter(|_| dynamic)
                    .and_then(wei128),
            );
            dec(&mut t.max_blob_fee).append_option(env.max_fee_per_blob_gas().and_then(wei128));
            dec(&mut t.effective_gas_price).append_option(effective);
            t.chain_id.append_option(env.chain_id());
            put_hex(&mut t.input, env.input());
            t.n_access_list
                .append_value(env.access_list().map_or(0, |l| l.len() as u32));
            t.n_blob_hashes
                .append_value(env.blob_versioned_hashes().map_or(0, |l| l.len() as u32));
            t.n_authorizations
                .append_value(env.authorization_list().map_or(0, |l| l.len() as u32));
            t.size.append_value(tx.encoded.len() as u32);
            let Some(r) = receipts.map(|rs| &rs[i]) else {
                t.gas_used.append_null();
                t.status.append_null();
                t.contract_address.append_option(contract);
                t.n_logs.append_null();
                continue;
            };
            let used = r.cumulative_gas_used.saturating_sub(previous_cumulative);
            previous_cumulative = r.cumulative_gas_used;
            let (status, post_state) = match r.status {
                Eip658Value::Eip658(ok) => (Some(ok as u8), None),
                Eip658Value::PostState(root) => (None, Some(hex0x(root.as_slice()))),
            };
            t.gas_used.append_value(used);
            t.status.append_option(status);
            t.contract_address.append_option(contract.clone());
            t.n_logs.append_value(r.logs.len() as u32);
            let rc = &mut self.receipts;
            rc.block_number.append_value(h.number);
            rc.block_hash.append_value(hash);
            rc.index.append_value(i as u32);
            rc.tx_hash.append_value(&tx_hash);
            rc.ty.append_value(tx.tx_type);
            rc.status.append_option(status);
            rc.post_state.append_option(post_state);
            rc.cumulative_gas_used.append_value(r.cumulative_gas_used);
            rc.gas_used.append_value(used);
            dec(&mut rc.effective_gas_price).append_option(effective);
            rc.contract_address.append_option(contract);
            rc.n_logs.append_value(r.logs.len() as u32);
            for log in &r.logs {
                let l = &mut self.logs;
                l.block_number.append_value(h.number);
                l.block_hash.append_value(hash);
                l.tx_index.append_value(i as u32);
                l.tx_hash.append_value(&tx_hash);
                l.log_index.append_value(log_index);
                log_index += 1;
                put_hex(&mut l.address, log.address.as_slice());
                let topics = log.data.topics();
                for (k, col) in l.topics.iter_mut().enumerate() {
                    put_hex_opt(col, topics.get(k).map(|t| t.as_slice()));
                }
                l.n_topics.append_value(topics.len().min(255) as u8);
                put_hex(&mut l.data, &log.data.data);
            }
        }
    }

    /// The five batches (in [`TABLES`] order); `valid` / `invalid_reason` of each block from
    /// the violations found in the unit (the first rule a block broke).
    pub fn finish(mut self, violations: &[Violation]) -> super::Result<Vec<RecordBatch>> {
        let mut first_rule: HashMap<u64, String> = HashMap::new();
        for v in violations {
            first_rule
                .entry(v.block)
                .or_insert_with(|| v.rule.name().to_string());
        }
        let b = &mut self.blocks;
        let mut valid = BooleanBuilder::with_capacity(b.numbers.len());
        let mut reason = StringBuilder::new();
        for n in &b.numbers {
            let r = first_rule.get(n);
            valid.append_value(r.is_none());
            reason.append_option(r);
        }
        let blocks: Vec<ArrayRef> = vec![
            Arc::new(b.number.finish()),
            Arc::new(b.hash.finish()),
            Arc::new(b.parent_hash.finish()),
            Arc::new(b.ommers_hash.finish()),
            Arc::new(b.miner.finish()),
            Arc::new(b.state_root.finish()),
            Arc::new(b.transactions_root.finish()),
            Arc::new(b.receipts_root.finish()),
            Arc::new(b.logs_bloom.finish()),
            Arc::new(b.difficulty.finish()),
            Arc::new(b.total_difficulty.finish()),
            Arc::new(b.gas_limit.finish()),
            Arc::new(b.gas_used.finish()),
            Arc::new(b.timestamp.finish()),
            Arc::new(b.extra_data.finish()),
            Arc::new(b.mix_hash.finish()),
            Arc::new(b.nonce.finish()),
            Arc::new(b.base_fee.finish()),
            Arc::new(b.withdrawals_root.finish()),
            Arc::new(b.blob_gas_used.finish()),
            Arc::new(b.excess_blob_gas.finish()),
            Arc::new(b.parent_beacon_block_root.finish()),
            Arc::new(b.requests_hash.finish()),
            Arc::new(b.n_transactions.finish()),
            Arc::new(b.n_uncles.finish()),
            Arc::new(b.n_withdrawals.finish()),
            Arc::new(b.size.finish()),
            Arc::new(b.header_size.finish()),
            Arc::new(b.body_pruned.finish()),
            Arc::new(valid.finish()),
            Arc::new(reason.finish()),
            Arc::new(b.source.finish()),
            Arc::new(b.offset.finish()),
        ];
        let t = &mut self.txs;
        let txs: Vec<ArrayRef> = vec![
            Arc::new(t.block_number.finish()),
            Arc::new(t.block_hash.finish()),
            Arc::new(t.index.finish()),
            Arc::new(t.hash.finish()),
            Arc::new(t.ty.finish()),
            Arc::new(t.from.finish()),
            Arc::new(t.to.finish()),
            finish_dec(&mut t.value),
            Arc::new(t.nonce.finish()),
            Arc::new(t.gas.finish()),
            finish_dec(&mut t.gas_price),
            finish_dec(&mut t.max_fee),
            finish_dec(&mut t.max_priority_fee),
            finish_dec(&mut t.max_blob_fee),
            finish_dec(&mut t.effective_gas_price),
            Arc::new(t.chain_id.finish()),
            Arc::new(t.input.finish()),
            Arc::new(t.n_access_list.finish()),
            Arc::new(t.n_blob_hashes.finish()),
            Arc::new(t.n_authorizations.finish()),
            Arc::new(t.size.finish()),
            Arc::new(t.gas_used.finish()),
            Arc::new(t.status.finish()),
            Arc::new(t.contract_address.finish()),
            Arc::new(t.n_logs.finish()),
        ];
        let r = &mut self.receipts;
        let receipts: Vec<ArrayRef> = vec![
            Arc::new(r.block_number.finish()),
            Arc::new(r.block_hash.finish()),
            Arc::new(r.index.finish()),
            Arc::new(r.tx_hash.finish()),
            Arc::new(r.ty.finish()),
            Arc::new(r.status.finish()),
            Arc::new(r.post_state.finish()),
            Arc::new(r.cumulative_gas_used.finish()),
            Arc::new(r.gas_used.finish()),
            finish_dec(&mut r.effective_gas_price),
            Arc::new(r.contract_address.finish()),
            Arc::new(r.n_logs.finish()),
        ];
        let l = &mut self.logs;
        let [t0, t1, t2, t3] = &mut l.topics;
        let logs: Vec<ArrayRef> = vec![
            Arc::new(l.block_number.finish()),
            Arc::new(l.block_hash.finish()),
            Arc::new(l.tx_index.finish()),
            Arc::new(l.tx_hash.finish()),
            Arc::new(l.log_index.finish()),
            Arc::new(l.address.finish()),
            Arc::new(t0.finish()),
            Arc::new(t1.finish()),
            Arc::new(t2.finish()),
            Arc::new(t3.finish()),
            Arc::new(l.n_topics.finish()),
            Arc::new(l.data.finish()),
        ];
        let w = &mut self.withdrawals;
        let withdrawals: Vec<ArrayRef> = vec![
            Arc::new(w.block_number.finish()),
            Arc::new(w.block_hash.finish()),
            Arc::new(w.position.finish()),
            Arc::new(w.index.finish()),
            Arc::new(w.validator.finish()),
            Arc::new(w.address.finish()),
            Arc::new(w.amount.finish()),
        ];
        [blocks, txs, receipts, logs, withdrawals]
            .into_iter()
            .zip(TABLES)
            .map(|(cols, name)| {
                RecordBatch::try_new(schema(name).expect("declared"), cols)
                    .map_err(|e| super::Error::new(super::ErrorKind::Rows(format!("{name}: {e}"))))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rlp_header_lengths() {
        assert_eq!(rlp_list_header_len(0), 1);
        assert_eq!(rlp_list_header_len(55), 1);
        assert_eq!(rlp_list_header_len(56), 2);
        assert_eq!(rlp_list_header_len(255), 2);
        assert_eq!(rlp_list_header_len(256), 3);
    }

    #[test]
    fn every_table_is_declared() {
        for t in TABLES {
            assert!(schema(t).is_some(), "{t}");
        }
        assert!(schema("eth_nothing").is_none());
    }
}
