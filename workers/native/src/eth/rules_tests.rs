//! Every body, receipt and proof-of-stake rule fails on its own: the real mainnet blocks of
//! `shared/data/ethereum/portal/` (portal-spec-tests `block-data-*.yaml`: the last PoW block,
//! the first PoS, Shanghai, Cancun and Prague blocks), which pass unaltered, re-encoded with one
//! field changed. Each test asserts the exact rules reported.
//!
//! A header is changed in its decoded form and re-encoded (so its hash and field count follow);
//! a body is rebuilt from its RLP items with one item dropped, added or replaced, and decoded
//! again. Where a real parent is missing one is made for the child ([`made_parent`]); the real
//! child passes against it, so what fails after a change is that change.

use super::*;
use crate::eth::body::decode_body;
use crate::eth::chain_config::{DEVMERGE, MAINNET};
use crate::eth::header::{decode_header, list_items, EMPTY_ROOT_HASH};
use crate::eth::receipt::{decode_consensus_receipt, decode_slim_receipts};
use alloy_eips::eip4895::Withdrawal;
use alloy_primitives::{keccak256, Log};
use alloy_rlp::{Decodable, Encodable};
use std::path::PathBuf;

/// `../shared` beside the repository, or the folder named by `RECHAIN_SHARED`.
fn shared() -> PathBuf {
    std::env::var_os("RECHAIN_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared"))
}

fn unhex(s: &str) -> Vec<u8> {
    let s = s.trim().trim_start_matches("0x").as_bytes();
    assert!(s.len().is_multiple_of(2));
    let nib = |c: u8| (c as char).to_digit(16).expect("hex digit") as u8;
    s.chunks(2).map(|p| (nib(p[0]) << 4) | nib(p[1])).collect()
}

/// One real block: its body's RLP as read, and header, body and (slim) receipts decoded.
struct Block {
    raw_body: Vec<u8>,
    header: DecodedHeader,
    body: Body,
    receipts: Vec<Receipt>,
}

/// `block-data-N.yaml`: three lines `header: 0x…`, `body: 0x…`, `receipts: 0x…`. The receipts
/// are slim (`[type, status, cumulativeGas, logs]`): no stored bloom.
fn block(n: u64) -> Block {
    let path = shared().join(format!("data/ethereum/portal/block-data-{n}.yaml"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let field = |k: &str| {
        let prefix = format!("{k}:");
        let line = text.lines().find(|l| l.starts_with(&prefix)).unwrap();
        unhex(&line[prefix.len()..])
    };
    let raw_body = field("body");
    let b = Block {
        header: decode_header(&field("header")).unwrap(),
        body: decode_body(&raw_body).unwrap(),
        receipts: decode_slim_receipts(&field("receipts")).unwrap(),
        raw_body,
    };
    assert_eq!(b.header.header.number, n);
    b
}

fn rules(v: Vec<Violation>) -> Vec<Rule> {
    v.into_iter().map(|v| v.rule).collect()
}

fn block_rules(header: &DecodedHeader, body: &Body, rs: Option<&[Receipt]>) -> Vec<Rule> {
    rules(check_block(&MAINNET, header, body, rs))
}

/// `header` changed by `f` and re-encoded: hash and field count are those of the new bytes.
fn edit_header(header: &DecodedHeader, f: impl FnOnce(&mut Header)) -> DecodedHeader {
    let mut h = header.header.clone();
    f(&mut h);
    let mut raw = Vec::new();
    h.encode(&mut raw);
    decode_header(&raw).unwrap()
}

fn rlp_list(items: &[Vec<u8>]) -> Vec<u8> {
    let payload: Vec<u8> = items.concat();
    let mut out = Vec::new();
    alloy_rlp::Header {
        list: true,
        payload_length: payload.len(),
    }
    .encode(&mut out);
    out.extend_from_slice(&payload);
    out
}

/// A body's RLP items as read: transaction elements, uncle headers, withdrawals (Shanghai on).
#[derive(Clone)]
struct BodyItems {
    txs: Vec<Vec<u8>>,
    uncles: Vec<Vec<u8>>,
    withdrawals: Option<Vec<Vec<u8>>>,
}

impl BodyItems {
    fn of(raw: &[u8]) -> BodyItems {
        let parts = list_items(raw).unwrap();
        let items = |i: usize| -> Vec<Vec<u8>> {
            list_items(parts[i])
                .unwrap()
                .into_iter()
                .map(<[u8]>::to_vec)
                .collect()
        };
        BodyItems {
            txs: items(0),
            uncles: items(1),
            withdrawals: (parts.len() == 3).then(|| items(2)),
        }
    }
    /// The body these items encode to, decoded by the reader.
    fn body(&self) -> Body {
        let mut parts = vec![rlp_list(&self.txs), rlp_list(&self.uncles)];
        if let Some(w) = &self.withdrawals {
            parts.push(rlp_list(w));
        }
        decode_body(&rlp_list(&parts)).unwrap()
    }
}

/// Receipts in consensus form (stored bloom, the trie leaf as read), as era1 files hold them:
/// each one's consensus encoding (with its `bloom` when set, else the bloom of its logs) wrapped
/// as a list element and decoded by the reader.
fn consensus_form(rs: &[Receipt]) -> Vec<Receipt> {
    rs.iter()
        .map(|r| {
            let leaf = r.consensus_encoding().unwrap();
            let element = if leaf[0] >= 0xc0 {
                leaf
            } else {
                let mut e = Vec::new();
                alloy_rlp::Header {
                    list: false,
                    payload_length: leaf.len(),
                }
                .encode(&mut e);
                e.extend_from_slice(&leaf);
                e
            };
            decode_consensus_receipt(&element).unwrap()
        })
        .collect()
}

/// A parent made for `child`, and the child re-pointed at it: 12 s before, the child's gas limit
/// with half of it used and the child's base fee (so the base fee stays), `difficulty`, and blob
/// gas from which the child's excess blob gas follows. Returns `(parent, child)`.
fn made_parent(
    cfg: &ChainConfig,
    child: &DecodedHeader,
    difficulty: U256,
) -> (DecodedHeader, DecodedHeader) {
    let c = &child.header;
    let parent = edit_header(child, |p| {
        p.number -= 1;
        p.timestamp -= 12;
        p.difficulty = difficulty;
        p.gas_used = c.gas_limit / 2;
        if let (Some(excess), Some(bc)) = (c.excess_blob_gas, cfg.blob_config(c.timestamp)) {
            let target = bc.target * GAS_PER_BLOB;
            p.excess_blob_gas = Some(if excess == 0 { 0 } else { excess + target });
            p.blob_gas_used = Some(0);
        }
    });
    let child = edit_header(child, |h| h.parent_hash = parent.hash);
    (parent, child)
}

/// Gray Glacier's bomb on the child of block 15,537,392: fake block 15,537,392 − 11,399,999,
/// period 41, `2^39`.
const PARIS_BOMB: u64 = 1 << 39;

/// 15,537,393 (the last proof-of-work block) against a parent made for it whose difficulty
/// gives exactly its difficulty: 12 s gap and no uncles make EIP-100's factor 0, so the child's
/// difficulty is the parent's plus the bomb.
fn last_pow_with_parent(pow: &DecodedHeader) -> (DecodedHeader, DecodedHeader) {
    let d = pow.header.difficulty - U256::from(PARIS_BOMB);
    made_parent(&MAINNET, pow, d)
}

#[test]
fn portal_blocks_pass_every_rule_unaltered() {
    for n in [15_537_393, 15_537_394, 17_034_870, 19_426_587, 22_431_084] {
        let b = block(n);
        // The test helpers are faithful: the header and body re-encode to what was read.
        assert_eq!(edit_header(&b.header, |_| {}), b.header, "block {n}");
        assert_eq!(BodyItems::of(&b.raw_body).body(), b.body, "block {n}");
        // Body and receipts, slim and consensus form.
        let rs = Some(&b.receipts[..]);
        assert_eq!(block_rules(&b.header, &b.body, rs), vec![], "block {n}");
        let consensus = consensus_form(&b.receipts);
        assert!(consensus.iter().all(|r| r.bloom.is_some()));
        let rs = Some(&consensus[..]);
        assert_eq!(block_rules(&b.header, &b.body, rs), vec![], "block {n}");
        // The header against a parent made for it (PoS blocks: a PoS parent).
        if n != 15_537_393 {
            let (p, c) = made_parent(&MAINNET, &b.header, U256::ZERO);
            assert_eq!(check_header(&MAINNET, &c, &p), vec![], "block {n}");
        }
    }
    // The merge: the first PoS block against the real last PoW block.
    let (pow, pos) = (block(15_537_393).header, block(15_537_394).header);
    assert_eq!(check_header(&MAINNET, &pos, &pow), vec![]);
    // The last PoW block passes as proof of work (difficulty, bomb), not taken for PoS.
    let (p, c) = last_pow_with_parent(&pow);
    assert_eq!(check_header(&MAINNET, &c, &p), vec![]);
}

#[test]
fn ommers_hash_and_uncle_count() {
    let b = block(19_426_587);
    let uncle = edit_header(&block(15_537_393).header, |_| {});
    let mut raw_uncle = Vec::new();
    uncle.header.encode(&mut raw_uncle);
    let rs = Some(&b.receipts[..]);
    // One uncle: the header's ommers hash (the empty list's) no longer matches.
    let mut items = BodyItems::of(&b.raw_body);
    items.uncles.push(raw_uncle.clone());
    let body = items.body();
    assert_eq!(body.uncles.len(), 1);
    assert_eq!(block_rules(&b.header, &body, rs), vec![Rule::OmmersHash]);
    // Three uncles, and then a header committing to them: only the count fails.
    items.uncles = vec![raw_uncle; 3];
    let body = items.body();
    assert_eq!(
        block_rules(&b.header, &body, rs),
        vec![Rule::OmmersHash, Rule::UncleCount]
    );
    let h = edit_header(&b.header, |h| h.ommers_hash = body.uncles_hash);
    assert_eq!(block_rules(&h, &body, rs), vec![Rule::UncleCount]);
}

#[test]
fn transactions_root() {
    let b = block(19_426_587);
    let rs = Some(&b.receipts[..]);
    // Two transactions swapped: same count, same receipts.
    let mut items = BodyItems::of(&b.raw_body);
    items.txs.swap(0, 1);
    assert_eq!(
        block_rules(&b.header, &items.body(), rs),
        vec![Rule::TransactionsRoot]
    );
    // One dropped: the receipts then outnumber the transactions.
    let mut items = BodyItems::of(&b.raw_body);
    items.txs.pop();
    let body = items.body();
    assert_eq!(
        block_rules(&b.header, &body, None),
        vec![Rule::TransactionsRoot]
    );
    assert_eq!(
        block_rules(&b.header, &body, rs),
        vec![Rule::TransactionsRoot, Rule::ReceiptCount]
    );
}

#[test]
fn withdrawals_root() {
    let b = block(19_426_587);
    let rs = Some(&b.receipts[..]);
    // One withdrawal's amount raised by 1 gwei.
    let mut items = BodyItems::of(&b.raw_body);
    let w = &mut items.withdrawals.as_mut().unwrap()[0];
    let mut x = Withdrawal::decode(&mut &w[..]).unwrap();
    x.amount += 1;
    w.clear();
    x.encode(w);
    assert_eq!(
        block_rules(&b.header, &items.body(), rs),
        vec![Rule::WithdrawalsRoot]
    );
    // One withdrawal dropped.
    let mut items = BodyItems::of(&b.raw_body);
    items.withdrawals.as_mut().unwrap().pop();
    assert_eq!(
        block_rules(&b.header, &items.body(), rs),
        vec![Rule::WithdrawalsRoot]
    );
    // A Shanghai body without its withdrawals list.
    let mut items = BodyItems::of(&b.raw_body);
    items.withdrawals = None;
    assert_eq!(
        block_rules(&b.header, &items.body(), rs),
        vec![Rule::WithdrawalsRoot]
    );
    // A header committing to no withdrawals (the empty-trie root); a header without the
    // field is `fork_fields`'.
    let h = edit_header(&b.header, |h| h.withdrawals_root = Some(EMPTY_ROOT_HASH));
    assert_eq!(block_rules(&h, &b.body, rs), vec![Rule::WithdrawalsRoot]);
    // A pre-Shanghai body (the last PoW block) with a withdrawals list, even an empty one.
    let pow = block(15_537_393);
    let rs = Some(&pow.receipts[..]);
    for list in [vec![], BodyItems::of(&b.raw_body).withdrawals.unwrap()] {
        let mut items = BodyItems::of(&pow.raw_body);
        items.withdrawals = Some(list);
        assert_eq!(
            block_rules(&pow.header, &items.body(), rs),
            vec![Rule::WithdrawalsRoot]
        );
    }
}

#[test]
fn receipt_count() {
    let b = block(17_034_870);
    // The last receipt (the builder's payment to the proposer) has no logs, so dropping it
    // leaves the bloom alone; the header's root and gas used no longer match.
    let mut rs = b.receipts.clone();
    let last = rs.pop().unwrap();
    assert!(last.logs.is_empty());
    assert_eq!(
        block_rules(&b.header, &b.body, Some(&rs)),
        vec![Rule::ReceiptCount, Rule::ReceiptsRoot, Rule::GasUsed]
    );
    // A header committing to the short list: only the count fails.
    let h = edit_header(&b.header, |h| {
        h.receipts_root = receipts_root(&rs).unwrap();
        h.gas_used = rs.last().unwrap().cumulative_gas_used;
    });
    assert_eq!(
        block_rules(&h, &b.body, Some(&rs)),
        vec![Rule::ReceiptCount]
    );
}

#[test]
fn receipts_root_covers_log_data_status_and_type() {
    let b = block(15_537_393);
    assert_eq!(b.receipts.len(), 1);
    assert_eq!(b.receipts[0].logs.len(), 1);
    // A log's data: the bloom covers addresses and topics only, so only the root changes.
    let mut rs = b.receipts.clone();
    let l = &rs[0].logs[0];
    let mut data = l.data.data.to_vec();
    data.push(0);
    rs[0].logs[0] = Log::new_unchecked(l.address, l.topics().to_vec(), data.into());
    assert_eq!(
        block_rules(&b.header, &b.body, Some(&rs)),
        vec![Rule::ReceiptsRoot]
    );
    // The status (success → failure).
    let mut rs = b.receipts.clone();
    rs[0].status = alloy_consensus::Eip658Value::Eip658(false);
    assert_eq!(
        block_rules(&b.header, &b.body, Some(&rs)),
        vec![Rule::ReceiptsRoot]
    );
    // The type (an EIP-1559 receipt encoded as a legacy one).
    let mut rs = b.receipts.clone();
    assert_eq!(rs[0].tx_type, Some(2));
    rs[0].tx_type = Some(0);
    assert_eq!(
        block_rules(&b.header, &b.body, Some(&rs)),
        vec![Rule::ReceiptsRoot]
    );
}

#[test]
fn logs_bloom() {
    let b = block(15_537_393);
    // A log's first topic: its receipt's root and the block's bloom change.
    let mut rs = b.receipts.clone();
    rs[0].logs[0].data.topics_mut()[0].0[31] ^= 1;
    assert_eq!(
        block_rules(&b.header, &b.body, Some(&rs)),
        vec![Rule::ReceiptsRoot, Rule::LogsBloom]
    );
    // The header's bloom.
    let h = edit_header(&b.header, |h| h.logs_bloom = Bloom::repeat_byte(0xff));
    let rs = Some(&b.receipts[..]);
    assert_eq!(block_rules(&h, &b.body, rs), vec![Rule::LogsBloom]);
    let h = edit_header(&b.header, |h| h.logs_bloom = Bloom::ZERO);
    assert_eq!(block_rules(&h, &b.body, rs), vec![Rule::LogsBloom]);
}

#[test]
fn receipt_bloom() {
    let b = block(19_426_587);
    assert!(!b.receipts[0].logs.is_empty());
    // Consensus-form receipts where the first one stores an empty bloom: the receipts root
    // commits to the bloom stored, so it fails too; the block's bloom, recomputed from the
    // logs, does not.
    let mut slim = b.receipts.clone();
    slim[0].bloom = Some(Bloom::ZERO);
    let rs = consensus_form(&slim);
    assert_eq!(rs[0].bloom, Some(Bloom::ZERO));
    assert_eq!(
        block_rules(&b.header, &b.body, Some(&rs)),
        vec![Rule::ReceiptsRoot, Rule::ReceiptBloom]
    );
    // A header committing to those receipts: the stored bloom alone fails.
    let h = edit_header(&b.header, |h| h.receipts_root = receipts_root(&rs).unwrap());
    assert_eq!(
        block_rules(&h, &b.body, Some(&rs)),
        vec![Rule::ReceiptBloom]
    );
    // Slim receipts carry no bloom: nothing to compare (their root covers the logs' bloom).
    assert_eq!(block_rules(&b.header, &b.body, Some(&b.receipts)), vec![]);
}

#[test]
fn gas_used_against_receipts() {
    let b = block(19_426_587);
    let rs = Some(&b.receipts[..]);
    let h = edit_header(&b.header, |h| h.gas_used += 1);
    assert_eq!(block_rules(&h, &b.body, rs), vec![Rule::GasUsed]);
    let mut rs = b.receipts.clone();
    rs.last_mut().unwrap().cumulative_gas_used += 1;
    assert_eq!(
        block_rules(&b.header, &b.body, Some(&rs)),
        vec![Rule::ReceiptsRoot, Rule::GasUsed]
    );
}

#[test]
fn receipt_cumulative_gas() {
    assert_eq!(Rule::ReceiptCumulativeGas.name(), "receipt_cumulative_gas");
    let b = block(19_426_587);
    assert!(b.receipts.len() > 3);
    // Receipts 1 and 2 swap their cumulative gas: it falls at receipt 2.
    let mut rs = b.receipts.clone();
    let (g1, g2) = (rs[1].cumulative_gas_used, rs[2].cumulative_gas_used);
    assert!(g1 < g2);
    (rs[1].cumulative_gas_used, rs[2].cumulative_gas_used) = (g2, g1);
    let got = check_block(&MAINNET, &b.header, &b.body, Some(&rs));
    assert_eq!(
        rules(got.clone()),
        vec![Rule::ReceiptsRoot, Rule::ReceiptCumulativeGas]
    );
    assert!(got[1].detail.starts_with("receipt 2:"), "{}", got[1].detail);
    // A header committing to those receipts: the order alone fails.
    let h = edit_header(&b.header, |h| h.receipts_root = receipts_root(&rs).unwrap());
    assert_eq!(
        block_rules(&h, &b.body, Some(&rs)),
        vec![Rule::ReceiptCumulativeGas]
    );
    // A transaction that used no gas (receipt 2 repeats receipt 1's total).
    let mut rs = b.receipts.clone();
    rs[2].cumulative_gas_used = rs[1].cumulative_gas_used;
    let h = edit_header(&b.header, |h| h.receipts_root = receipts_root(&rs).unwrap());
    assert_eq!(
        block_rules(&h, &b.body, Some(&rs)),
        vec![Rule::ReceiptCumulativeGas]
    );
    // The first receipt using none.
    let mut rs = b.receipts.clone();
    rs[0].cumulative_gas_used = 0;
    let h = edit_header(&b.header, |h| h.receipts_root = receipts_root(&rs).unwrap());
    assert_eq!(
        block_rules(&h, &b.body, Some(&rs)),
        vec![Rule::ReceiptCumulativeGas]
    );
}

/// The block's transactions with blob hashes: (index, number of blobs).
fn blob_txs(body: &Body) -> Vec<(usize, usize)> {
    use alloy_consensus::Transaction as _;
    body.transactions
        .iter()
        .enumerate()
        .filter_map(|(i, t)| Some((i, t.envelope.blob_versioned_hashes()?.len())))
        .filter(|(_, n)| *n > 0)
        .collect()
}

#[test]
fn blob_gas_used_against_the_body() {
    // Prague's first block: 9 blobs (the maximum) in two type-3 transactions, 0x120000 gas.
    let b = block(22_431_084);
    let rs = Some(&b.receipts[..]);
    let blobs = blob_txs(&b.body);
    assert_eq!(blobs, vec![(0, 5), (13, 4)]);
    assert_eq!(b.header.header.blob_gas_used, Some(9 * GAS_PER_BLOB));
    // The header claims 8 blobs: within the header's bounds, so only the body shows it.
    let h = edit_header(&b.header, |h| h.blob_gas_used = Some(8 * GAS_PER_BLOB));
    assert_eq!(block_rules(&h, &b.body, rs), vec![Rule::BlobGasUsed]);
    let (p, c) = made_parent(&MAINNET, &h, U256::ZERO);
    assert_eq!(check_header(&MAINNET, &c, &p), vec![]);
    // The 4-blob transaction dropped from the body.
    let mut items = BodyItems::of(&b.raw_body);
    let blob_tx = items.txs.remove(13);
    assert_eq!(
        block_rules(&b.header, &items.body(), None),
        vec![Rule::TransactionsRoot, Rule::BlobGasUsed]
    );
    // Cancun's first block has no blobs: a header claiming one.
    let c = block(19_426_587);
    assert!(blob_txs(&c.body).is_empty());
    let h = edit_header(&c.header, |h| h.blob_gas_used = Some(GAS_PER_BLOB));
    assert_eq!(
        block_rules(&h, &c.body, Some(&c.receipts)),
        vec![Rule::BlobGasUsed]
    );
    // A blob transaction in a Cancun body that claims none, and in a pre-Cancun body (no
    // blob gas field at all).
    for n in [19_426_587, 17_034_870] {
        let x = block(n);
        let mut items = BodyItems::of(&x.raw_body);
        items.txs.push(blob_tx.clone());
        assert_eq!(
            block_rules(&x.header, &items.body(), None),
            vec![Rule::TransactionsRoot, Rule::BlobGasUsed],
            "block {n}"
        );
    }
}

#[test]
fn blob_gas_used_header_bound() {
    let b = block(22_431_084);
    // Ten blobs, one over Prague's maximum of 9: the header alone fails, and the body too.
    let h = edit_header(&b.header, |h| h.blob_gas_used = Some(10 * GAS_PER_BLOB));
    let (p, c) = made_parent(&MAINNET, &h, U256::ZERO);
    assert_eq!(
        rules(check_header(&MAINNET, &c, &p)),
        vec![Rule::BlobGasUsed]
    );
    assert_eq!(
        block_rules(&h, &b.body, Some(&b.receipts)),
        vec![Rule::BlobGasUsed]
    );
    // Not a multiple of a blob's gas.
    let h = edit_header(&b.header, |h| h.blob_gas_used = Some(9 * GAS_PER_BLOB - 1));
    let (p, c) = made_parent(&MAINNET, &h, U256::ZERO);
    assert_eq!(
        rules(check_header(&MAINNET, &c, &p)),
        vec![Rule::BlobGasUsed]
    );
}

#[test]
fn excess_blob_gas() {
    // Cancun's first block: excess 0 after a pre-Cancun parent; claiming one blob's worth.
    let b = block(19_426_587);
    assert_eq!(b.header.header.excess_blob_gas, Some(0));
    let (p, c) = made_parent(&MAINNET, &b.header, U256::ZERO);
    let c = edit_header(&c, |h| h.excess_blob_gas = Some(GAS_PER_BLOB));
    assert_eq!(
        rules(check_header(&MAINNET, &c, &p)),
        vec![Rule::ExcessBlobGas]
    );
    // Prague's first block: its excess off by one blob, and then its parent's blob gas used
    // raised by one blob (the child's excess no longer follows).
    let b = block(22_431_084);
    let (p, c) = made_parent(&MAINNET, &b.header, U256::ZERO);
    let x = edit_header(&c, |h| {
        h.excess_blob_gas = Some(h.excess_blob_gas.unwrap() + GAS_PER_BLOB)
    });
    assert_eq!(
        rules(check_header(&MAINNET, &x, &p)),
        vec![Rule::ExcessBlobGas]
    );
    let p = edit_header(&p, |h| h.blob_gas_used = Some(GAS_PER_BLOB));
    let c = edit_header(&c, |h| h.parent_hash = p.hash);
    assert_eq!(
        rules(check_header(&MAINNET, &c, &p)),
        vec![Rule::ExcessBlobGas]
    );
}

#[test]
fn pos_difficulty_by_the_schedule() {
    let (pow, pos) = (block(15_537_393).header, block(15_537_394).header);
    assert!(!must_be_pos(&MAINNET, 15_537_393, pow.header.timestamp));
    assert!(must_be_pos(&MAINNET, 15_537_394, pos.header.timestamp));
    // The first PoS block with difficulty 1 after the real last PoW block: the merge block
    // makes it proof of stake; the one fault is reported once (nonce and ommers are PoS's).
    let x = edit_header(&pos, |h| h.difficulty = U256::from(1));
    assert_ne!(x.hash, pos.hash);
    let got = check_header(&MAINNET, &x, &pow);
    assert_eq!(rules(got.clone()), vec![Rule::PosDifficulty]);
    assert!(
        got[0].detail.contains("merge block Some(15537394)"),
        "{}",
        got[0].detail
    );
    // Without a merge block (and before Shanghai) nothing says PoS: it is judged as PoW.
    let no_merge = ChainConfig {
        merge_block: None,
        ..MAINNET
    };
    assert_eq!(
        rules(check_header(&no_merge, &x, &pow)),
        vec![Rule::Difficulty]
    );
    // The real last PoW block stays proof of work, unless the schedule put the merge there:
    // then it is judged as PoS, its difficulty and its (ethash) nonce both wrong.
    let (p, c) = last_pow_with_parent(&pow);
    assert_eq!(check_header(&MAINNET, &c, &p), vec![]);
    let early = ChainConfig {
        merge_block: Some(15_537_393),
        ..MAINNET
    };
    assert_eq!(
        rules(check_header(&early, &c, &p)),
        vec![Rule::PosDifficulty, Rule::PosNonce]
    );

    // Shanghai's first block with difficulty after a PoW parent: Shanghai alone makes it PoS
    // (every network merged before it), with or without a merge block.
    let sh = block(17_034_870).header;
    let x = edit_header(&sh, |h| h.difficulty = U256::from(1));
    let (p, c) = made_parent(&MAINNET, &x, U256::from(1));
    for cfg in [MAINNET, no_merge] {
        assert_eq!(rules(check_header(&cfg, &c, &p)), vec![Rule::PosDifficulty]);
    }
    // devmerge (no merge block): PoS from its Shanghai time on.
    let t = DEVMERGE.shanghai_time.unwrap();
    assert!(must_be_pos(&DEVMERGE, 1, t) && !must_be_pos(&DEVMERGE, u64::MAX, t - 1));
}

#[test]
fn pow_after_pos_is_not_pos_difficulty() {
    // A PoS parent makes its child PoS whatever the schedule: PowAfterPos, and only it.
    let sh = block(17_034_870).header;
    let x = edit_header(&sh, |h| h.difficulty = U256::from(1));
    let (p, c) = made_parent(&MAINNET, &x, U256::ZERO);
    assert_eq!(
        rules(check_header(&MAINNET, &c, &p)),
        vec![Rule::PowAfterPos]
    );
    // A child of the real first PoS block with difficulty (before Shanghai).
    let pos = block(15_537_394).header;
    let child = edit_header(&pos, |h| {
        h.number += 1;
        h.timestamp += 12;
        h.parent_hash = pos.hash;
        h.base_fee_per_gas = Some(calc_base_fee(&MAINNET, &pos.header));
        h.difficulty = U256::from(1);
    });
    let no_merge = ChainConfig {
        merge_block: None,
        ..MAINNET
    };
    for cfg in [MAINNET, no_merge] {
        assert_eq!(
            rules(check_header(&cfg, &child, &pos)),
            vec![Rule::PowAfterPos]
        );
    }
    let ok = edit_header(&child, |h| h.difficulty = U256::ZERO);
    assert_eq!(check_header(&MAINNET, &ok, &pos), vec![]);
}

#[test]
fn pos_nonce_and_ommers() {
    let (pow, pos) = (block(15_537_393).header, block(15_537_394).header);
    let b = block(22_431_084).header;
    let (pb, cb) = made_parent(&MAINNET, &b, U256::ZERO);
    for (c, p) in [(&pos, &pow), (&cb, &pb)] {
        let x = edit_header(c, |h| h.nonce = [0, 0, 0, 0, 0, 0, 0, 1].into());
        assert_eq!(rules(check_header(&MAINNET, &x, p)), vec![Rule::PosNonce]);
        let x = edit_header(c, |h| h.ommers_hash = keccak256([0xc1, 0x80]));
        assert_eq!(rules(check_header(&MAINNET, &x, p)), vec![Rule::PosOmmers]);
    }
}

#[test]
fn fork_fields() {
    // Shanghai's first block without its withdrawals root (16 fields, the schedule wants 17):
    // the header fails its fork fields, the block its withdrawals.
    let b = block(17_034_870);
    let h = edit_header(&b.header, |h| h.withdrawals_root = None);
    assert_eq!(h.fields, 16);
    let (p, c) = made_parent(&MAINNET, &h, U256::ZERO);
    assert_eq!(
        rules(check_header(&MAINNET, &c, &p)),
        vec![Rule::ForkFields]
    );
    assert_eq!(
        block_rules(&h, &b.body, Some(&b.receipts)),
        vec![Rule::WithdrawalsRoot]
    );
    // Cancun's first block without its parent beacon block root (19 fields).
    let b = block(19_426_587).header;
    let h = edit_header(&b, |h| h.parent_beacon_block_root = None);
    assert_eq!(h.fields, 19);
    let (p, c) = made_parent(&MAINNET, &h, U256::ZERO);
    assert_eq!(
        rules(check_header(&MAINNET, &c, &p)),
        vec![Rule::ForkFields]
    );
    // Prague's first block without its requests hash (20 fields).
    let b = block(22_431_084).header;
    let h = edit_header(&b, |h| h.requests_hash = None);
    assert_eq!(h.fields, 20);
    let (p, c) = made_parent(&MAINNET, &h, U256::ZERO);
    assert_eq!(
        rules(check_header(&MAINNET, &c, &p)),
        vec![Rule::ForkFields]
    );
    // The first PoS block (Paris, before Shanghai) with a withdrawals root (17 fields).
    let (pow, pos) = (block(15_537_393).header, block(15_537_394).header);
    let x = edit_header(&pos, |h| h.withdrawals_root = Some(keccak256([0x80])));
    assert_eq!(x.fields, 17);
    assert_eq!(
        rules(check_header(&MAINNET, &x, &pow)),
        vec![Rule::ForkFields]
    );
}
