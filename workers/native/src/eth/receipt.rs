//! Receipts in the two forms found on disk (spec §1.9, §2.2, pitfall 3).
//!
//! * Consensus form (era1 `CompressedReceipts`, portal block data): a list whose elements are an
//!   RLP list `[statusOrPostState, cumulativeGasUsed, bloom, logs]` (legacy tx) or a byte string
//!   `type || rlp([status, cumulativeGasUsed, bloom, logs])`. The element content is the
//!   receipts-trie leaf, kept in [`Receipt::encoded`].
//! * Slim form (ere `CompressedSlimReceipts`, eth/69, portal-spec-tests `block-data-*.yaml`):
//!   `[txType, statusOrPostState, cumulativeGasUsed, logs]`, no bloom.
//! * Storage form (geth freezer `receipts` table): `[statusOrPostState, cumulativeGasUsed, logs]`,
//!   no bloom, no type. The pre-v1.9 legacy storage forms (6 or 7 fields) are detected by arity
//!   and refused with a clear error.
//!
//! All decode into [`Receipt`]; the bloom can be recomputed from the logs with
//! [`Receipt::logs_bloom`], and the consensus encoding (the receipts-trie leaf) rebuilt with alloy
//! once the transaction type is known ([`Receipt::consensus_encoding`], [`set_types`]).

use super::error::{Error, Result};
use super::gen::rlp_list;
use super::header::{list_items, string_payload};
use alloy_consensus::{Eip658Value, ReceiptEnvelope, ReceiptWithBloom, TxType};
use alloy_eips::eip2718::Encodable2718;
use alloy_primitives::{Address, Bloom, Bytes, Log, B256};
use alloy_rlp::Decodable;

/// One receipt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    /// Transaction type for the consensus form (0 legacy); `None` for the storage form.
    pub tx_type: Option<u8>,
    /// `Eip658(bool)` from Byzantium, `PostState(root)` before.
    pub status: Eip658Value,
    pub cumulative_gas_used: u64,
    /// Bloom stored with the receipt (consensus form only).
    pub bloom: Option<Bloom>,
    pub logs: Vec<Log>,
    /// Consensus form: the receipts-trie leaf (list encoding or `type || rlp(...)`), as read.
    pub encoded: Option<Vec<u8>>,
}

impl Receipt {
    /// The bloom of this receipt's logs, recomputed.
    pub fn logs_bloom(&self) -> Bloom {
        let mut b = Bloom::ZERO;
        for l in &self.logs {
            b.accrue_log(l);
        }
        b
    }
}

impl Receipt {
    /// The receipts-trie leaf: the bytes read (consensus form) or, for slim and storage
    /// receipts whose type is known, the consensus encoding rebuilt with the bloom of the logs.
    pub fn consensus_encoding(&self) -> Option<Vec<u8>> {
        if let Some(e) = &self.encoded {
            return Some(e.clone());
        }
        let ty = TxType::try_from(self.tx_type?).ok()?;
        let inner = alloy_consensus::Receipt {
            status: self.status,
            cumulative_gas_used: self.cumulative_gas_used,
            logs: self.logs.clone(),
        };
        let bloom = self.bloom.unwrap_or_else(|| self.logs_bloom());
        let env = ReceiptEnvelope::from_typed(ty, ReceiptWithBloom::new(inner, bloom));
        Some(env.encoded_2718())
    }
}

/// Give storage-form receipts the types of their block's transactions (freezer receipts carry
/// none; geth derives them from the body the same way).
pub fn set_types(receipts: &mut [Receipt], body: &super::body::Body) {
    for (r, t) in receipts.iter_mut().zip(&body.transactions) {
        r.tx_type = Some(t.tx_type);
    }
}

/// Receipts-trie root (the header's `receiptsRoot`); `None` if a receipt's type is unknown.
pub fn receipts_root(receipts: &[Receipt]) -> Option<B256> {
    let leaves: Option<Vec<Vec<u8>>> = receipts.iter().map(|r| r.consensus_encoding()).collect();
    Some(alloy_trie::root::ordered_trie_root_encoded(&leaves?))
}

/// Decode a slim receipt list: `[[txType, statusOrPostState, cumulativeGasUsed, logs], …]`.
pub fn decode_slim_receipts(raw: &[u8]) -> Result<Vec<Receipt>> {
    let items = list_items(raw).map_err(|e| Error::rlp("slim receipts", e))?;
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let f = list_items(item).map_err(|e| Error::rlp("slim receipt", e))?;
        if f.len() != 4 {
            return Err(Error::rlp(
                "slim receipt",
                alloy_rlp::Error::Custom("a slim receipt has 4 fields"),
            ));
        }
        let ty: u8 = decode_exact(f[0], "receipt type")?;
        out.push(Receipt {
            tx_type: Some(ty),
            status: decode_exact(f[1], "receipt status")?,
            cumulative_gas_used: decode_exact(f[2], "receipt cumulative gas")?,
            bloom: None,
            logs: decode_logs(f[3])?,
            encoded: None,
        });
    }
    Ok(out)
}

/// The slim list (Ere) of storage-form receipts (freezer) given their transactions' types:
/// each `[status, cumulativeGas, logs]` becomes `[type, status, cumulativeGas, logs]`, the
/// fields' bytes kept as they are (geth's `SlimReceipt` writes the same encodings).
pub fn slim_from_storage(raw: &[u8], types: &[u8]) -> Result<Vec<u8>> {
    let items = list_items(raw).map_err(|e| Error::rlp("storage receipts", e))?;
    if items.len() != types.len() {
        return Err(Error::rlp(
            "storage receipts",
            alloy_rlp::Error::Custom("receipt count differs from the transactions'"),
        ));
    }
    let slim = items
        .iter()
        .zip(types)
        .map(|(item, ty)| {
            let f = list_items(item).map_err(|e| Error::rlp("storage receipt", e))?;
            if f.len() != 3 {
                return Err(Error::rlp(
                    "storage receipt",
                    alloy_rlp::Error::Custom("a storage receipt has 3 fields"),
                ));
            }
            Ok(slim_item(*ty, f[0], f[1], f[2]))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(rlp_list(&slim))
}

/// The slim list (Ere) of a consensus-form receipt list (era1): the type moves into the list
/// and the bloom goes.
pub fn slim_from_consensus(raw: &[u8]) -> Result<Vec<u8>> {
    let items = list_items(raw).map_err(|e| Error::rlp("receipts", e))?;
    let slim = items
        .iter()
        .map(|item| {
            let (ty, fields) = match item.first() {
                Some(b) if *b >= 0xc0 => (0u8, *item),
                _ => {
                    let p = string_payload(item).map_err(|e| Error::rlp("typed receipt", e))?;
                    match p.split_first() {
                        Some((t, rest)) if *t < 0x80 => (*t, rest),
                        _ => {
                            return Err(Error::rlp(
                                "typed receipt",
                                alloy_rlp::Error::Custom("typed receipt without a type byte"),
                            ))
                        }
                    }
                }
            };
            let f = list_items(fields).map_err(|e| Error::rlp("receipt", e))?;
            if f.len() != 4 {
                return Err(Error::rlp(
                    "receipt",
                    alloy_rlp::Error::Custom("a consensus receipt has 4 fields"),
                ));
            }
            Ok(slim_item(ty, f[0], f[1], f[3]))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(rlp_list(&slim))
}

/// `[type, status, cumulativeGas, logs]` from the fields' encodings.
fn slim_item(ty: u8, status: &[u8], cumulative_gas: &[u8], logs: &[u8]) -> Vec<u8> {
    let mut fields = Vec::with_capacity(1 + status.len() + cumulative_gas.len() + logs.len());
    alloy_rlp::Encodable::encode(&ty, &mut fields);
    fields.extend_from_slice(status);
    fields.extend_from_slice(cumulative_gas);
    fields.extend_from_slice(logs);
    let mut out = Vec::with_capacity(fields.len() + 9);
    alloy_rlp::Header {
        list: true,
        payload_length: fields.len(),
    }
    .encode(&mut out);
    out.extend_from_slice(&fields);
    out
}

/// Decode a consensus-form receipt list (era1, portal, devp2p).
pub fn decode_consensus_receipts(raw: &[u8]) -> Result<Vec<Receipt>> {
    let items = list_items(raw).map_err(|e| Error::rlp("receipts", e))?;
    items.into_iter().map(decode_consensus_receipt).collect()
}

/// Decode one element of a consensus-form receipt list.
pub fn decode_consensus_receipt(item: &[u8]) -> Result<Receipt> {
    let (tx_type, leaf, fields) = match item.first() {
        Some(b) if *b >= 0xc0 => (0u8, item, item),
        _ => {
            let p = string_payload(item).map_err(|e| Error::rlp("typed receipt", e))?;
            match p.first() {
                Some(t) if *t < 0x80 => (*t, p, &p[1..]),
                _ => {
                    return Err(Error::rlp(
                        "typed receipt",
                        alloy_rlp::Error::Custom("typed receipt without a type byte"),
                    ))
                }
            }
        }
    };
    let f = list_items(fields).map_err(|e| Error::rlp("receipt", e))?;
    if f.len() != 4 {
        return Err(Error::rlp(
            "receipt",
            alloy_rlp::Error::Custom("a consensus receipt has 4 fields"),
        ));
    }
    let mut bloom_buf = f[2];
    let bloom = Bloom::decode(&mut bloom_buf).map_err(|e| Error::rlp("receipt bloom", e))?;
    Ok(Receipt {
        tx_type: Some(tx_type),
        status: decode_exact(f[0], "receipt status")?,
        cumulative_gas_used: decode_exact(f[1], "receipt cumulative gas")?,
        bloom: Some(bloom),
        logs: decode_logs(f[3])?,
        encoded: Some(leaf.to_vec()),
    })
}

/// Decode a freezer (storage-form) receipt list.
pub fn decode_storage_receipts(raw: &[u8]) -> Result<Vec<Receipt>> {
    let items = list_items(raw).map_err(|e| Error::rlp("storage receipts", e))?;
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let f = list_items(item).map_err(|e| Error::rlp("storage receipt", e))?;
        match f.len() {
            3 => {}
            6 | 7 => return Err(Error::rlp(
                "storage receipt",
                alloy_rlp::Error::Custom(
                    "legacy (geth < v1.9) storage receipt; migrate with geth db freezer-migrate",
                ),
            )),
            _ => {
                return Err(Error::rlp(
                    "storage receipt",
                    alloy_rlp::Error::Custom("a storage receipt has 3 fields"),
                ))
            }
        }
        out.push(Receipt {
            tx_type: None,
            status: decode_exact(f[0], "receipt status")?,
            cumulative_gas_used: decode_exact(f[1], "receipt cumulative gas")?,
            bloom: None,
            logs: decode_logs(f[2])?,
            encoded: None,
        });
    }
    Ok(out)
}

fn decode_exact<T: Decodable>(item: &[u8], what: &'static str) -> Result<T> {
    let mut b = item;
    let v = T::decode(&mut b).map_err(|e| Error::rlp(what, e))?;
    if !b.is_empty() {
        return Err(Error::rlp(what, alloy_rlp::Error::UnexpectedLength));
    }
    Ok(v)
}

fn decode_logs(raw: &[u8]) -> Result<Vec<Log>> {
    let mut logs = Vec::new();
    for l in list_items(raw).map_err(|e| Error::rlp("logs", e))? {
        let f = list_items(l).map_err(|e| Error::rlp("log", e))?;
        if f.len() != 3 {
            return Err(Error::rlp(
                "log",
                alloy_rlp::Error::Custom("a log has 3 fields"),
            ));
        }
        let address: Address = decode_exact(f[0], "log address")?;
        let topics: Vec<B256> = decode_exact(f[1], "log topics")?;
        let data: Bytes = decode_exact(f[2], "log data")?;
        logs.push(Log::new_unchecked(address, topics, data));
    }
    Ok(logs)
}
