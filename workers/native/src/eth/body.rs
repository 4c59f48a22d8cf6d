//! Block bodies (spec §1.9): `rlp([transactions, uncles])`, plus `withdrawals` from Shanghai.
//!
//! A transaction element is either an RLP list (legacy) or an RLP byte string holding
//! `type || rlp(payload)` (EIP-2718 types 1, 2, 3, 4). Each transaction keeps the bytes that
//! the transaction trie and the hash commit to (list encoding, or `type || payload`), and is
//! decoded by alloy (`TxEnvelope`). Uncles are full headers ([`super::header`]); the ommers hash
//! is over the uncle list exactly as read. Withdrawals decode as `[index, validator, address,
//! amount_gwei]` and keep their encodings for the withdrawals root.

use super::error::{Error, Result};
use super::header::{decode_header, list_items, string_payload, DecodedHeader, EMPTY_OMMERS_HASH};
use alloy_consensus::TxEnvelope;
use alloy_eips::eip2718::Decodable2718;
use alloy_eips::eip4895::Withdrawal;
use alloy_primitives::{keccak256, B256};
use alloy_rlp::Decodable;

/// One transaction of a body.
#[derive(Debug, Clone, PartialEq)]
pub struct Transaction {
    /// The transaction's EIP-2718 encoding: the RLP list for legacy, `type || payload` otherwise.
    pub encoded: Vec<u8>,
    /// `keccak256(encoded)`.
    pub hash: B256,
    /// 0 legacy, 1 EIP-2930, 2 EIP-1559, 3 EIP-4844, 4 EIP-7702.
    pub tx_type: u8,
    pub envelope: TxEnvelope,
}

/// A decoded block body.
#[derive(Debug, Clone, PartialEq)]
pub struct Body {
    pub transactions: Vec<Transaction>,
    pub uncles: Vec<DecodedHeader>,
    /// RLP of each uncle header as read (for its proof of work).
    pub uncle_encodings: Vec<Vec<u8>>,
    /// `keccak256` of the uncle list's RLP as read (the header's `ommersHash`).
    pub uncles_hash: B256,
    /// `None` before Shanghai (two-element body).
    pub withdrawals: Option<Vec<Withdrawal>>,
    /// RLP encodings of the withdrawals, as read.
    pub withdrawal_encodings: Vec<Vec<u8>>,
}

impl Body {
    /// Transaction-trie root over the transactions' encodings.
    pub fn transactions_root(&self) -> B256 {
        alloy_trie::root::ordered_trie_root_encoded(
            &self
                .transactions
                .iter()
                .map(|t| &t.encoded[..])
                .collect::<Vec<_>>(),
        )
    }
    /// Withdrawals-trie root, `None` when the body has no withdrawals list.
    pub fn withdrawals_root(&self) -> Option<B256> {
        self.withdrawals.as_ref()?;
        Some(alloy_trie::root::ordered_trie_root_encoded(
            &self.withdrawal_encodings,
        ))
    }
}

/// Decode a body from exactly `raw`.
pub fn decode_body(raw: &[u8]) -> Result<Body> {
    let parts = list_items(raw).map_err(|e| Error::rlp("body", e))?;
    if parts.len() != 2 && parts.len() != 3 {
        return Err(Error::rlp(
            "body",
            alloy_rlp::Error::Custom("a body has 2 or 3 elements"),
        ));
    }
    let mut transactions = Vec::new();
    for item in list_items(parts[0]).map_err(|e| Error::rlp("body transactions", e))? {
        transactions.push(decode_transaction_element(item)?);
    }
    let mut uncles = Vec::new();
    let mut uncle_encodings = Vec::new();
    for item in list_items(parts[1]).map_err(|e| Error::rlp("body uncles", e))? {
        uncles.push(decode_header(item)?);
        uncle_encodings.push(item.to_vec());
    }
    let (withdrawals, withdrawal_encodings) = if parts.len() == 3 {
        let mut ws = Vec::new();
        let mut encs = Vec::new();
        for item in list_items(parts[2]).map_err(|e| Error::rlp("body withdrawals", e))? {
            let mut b = item;
            let w = Withdrawal::decode(&mut b).map_err(|e| Error::rlp("withdrawal", e))?;
            if !b.is_empty() {
                return Err(Error::rlp("withdrawal", alloy_rlp::Error::UnexpectedLength));
            }
            ws.push(w);
            encs.push(item.to_vec());
        }
        (Some(ws), encs)
    } else {
        (None, Vec::new())
    };
    Ok(Body {
        transactions,
        uncles,
        uncle_encodings,
        uncles_hash: uncles_hash(parts[1]),
        withdrawals,
        withdrawal_encodings,
    })
}

/// `keccak256` of an uncle list's RLP as read. The empty list (`c0`, nearly every block) has
/// the known hash [`EMPTY_OMMERS_HASH`], the hash of exactly those bytes (a test checks it).
fn uncles_hash(list: &[u8]) -> B256 {
    if list == [0xc0] {
        EMPTY_OMMERS_HASH
    } else {
        keccak256(list)
    }
}

/// Decode one element of a body's transaction list (list = legacy, string = typed).
pub fn decode_transaction_element(item: &[u8]) -> Result<Transaction> {
    let encoded = match item.first() {
        Some(b) if *b >= 0xc0 => item,
        _ => {
            let p = string_payload(item).map_err(|e| Error::rlp("typed transaction", e))?;
            if p.first().is_none_or(|t| *t >= 0x80) {
                return Err(Error::rlp(
                    "typed transaction",
                    alloy_rlp::Error::Custom("typed transaction without a type byte"),
                ));
            }
            p
        }
    };
    let envelope = TxEnvelope::decode_2718_exact(encoded).map_err(|e| {
        Error::new(super::error::ErrorKind::Rlp {
            what: "transaction",
            detail: e.to_string(),
        })
    })?;
    let tx_type = if encoded[0] >= 0xc0 { 0 } else { encoded[0] };
    Ok(Transaction {
        encoded: encoded.to_vec(),
        hash: keccak256(encoded),
        tx_type,
        envelope,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_uncle_list_hash_is_the_hash_of_its_bytes() {
        // rlp([[], []]): no transactions, no uncles.
        let body = decode_body(&[0xc2, 0xc0, 0xc0]).unwrap();
        assert_eq!(body.uncles_hash, keccak256([0xc0]));
        assert_eq!(uncles_hash(&[0xc0]), keccak256([0xc0]));
        // Anything else is hashed as read.
        assert_eq!(uncles_hash(&[0xc1, 0x80]), keccak256([0xc1, 0x80]));
    }
}
