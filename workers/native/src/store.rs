//! RocksDB key and value layouts (the Bitcoin block index, Flow registers): the one definition
//! of these bytes.
//! Column-family names live in `rechain.schemas.rocksdb`; these functions make and read what
//! goes in them. Every value starts with a version byte.
//!
//! ```text
//! btc_index  key: block hash, internal order (32)
//!            value v1: version u8 | state u8 | height u32 (u32::MAX = none) | file u32 |
//!                      magic_offset u64 | declared_size u32 | n_tx u32 (u32::MAX = none) |
//!                      copies u32 | in_best_chain u8 | chainwork (32, big-endian) | header (80)
//! btc_best   key: bucket u32 big-endian = height / BEST_CHAIN_BUCKET (sorts numerically)
//!            value: the hashes (internal order, 32 bytes each) of heights bucket * BEST_CHAIN_BUCKET
//!                   onwards, at most BEST_CHAIN_BUCKET of them (only the last bucket is short)
//! flow_registers  key: register path (32)
//!            value: version u8 (`schemas/flow.py` REGISTER_VALUE_VERSION) | key length u32 BE |
//!                   encoded key | value
//! ```
//!
//! The best chain is bucketed because one key per height made a million tiny SST entries (and a
//! million Python calls) for what every reader wants as a contiguous run of hashes.

use crate::btc::error::StoreError;

/// Appends a `flow_registers` value to `out`.
pub fn encode_register_value(version: u8, encoded_key: &[u8], value: &[u8], out: &mut Vec<u8>) {
    out.reserve(5 + encoded_key.len() + value.len());
    out.push(version);
    out.extend_from_slice(&(encoded_key.len() as u32).to_be_bytes());
    out.extend_from_slice(encoded_key);
    out.extend_from_slice(value);
}

pub const INDEX_VALUE_VERSION: u8 = 1;
pub const INDEX_VALUE_LEN: usize = 1 + 1 + 4 + 4 + 8 + 4 + 4 + 4 + 1 + 32 + 80;
pub const NONE_U32: u32 = u32::MAX;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexValue {
    pub state: u8,
    pub height: Option<u32>,
    pub file: u32,
    pub magic_offset: u64,
    pub declared_size: u32,
    pub n_tx: Option<u32>,
    pub copies: u32,
    pub in_best_chain: bool,
    pub chainwork: [u8; 32],
    pub header: [u8; 80],
}

impl IndexValue {
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.push(INDEX_VALUE_VERSION);
        out.push(self.state);
        out.extend_from_slice(&self.height.unwrap_or(NONE_U32).to_le_bytes());
        out.extend_from_slice(&self.file.to_le_bytes());
        out.extend_from_slice(&self.magic_offset.to_le_bytes());
        out.extend_from_slice(&self.declared_size.to_le_bytes());
        out.extend_from_slice(&self.n_tx.unwrap_or(NONE_U32).to_le_bytes());
        out.extend_from_slice(&self.copies.to_le_bytes());
        out.push(self.in_best_chain as u8);
        out.extend_from_slice(&self.chainwork);
        out.extend_from_slice(&self.header);
    }

    pub fn decode(b: &[u8]) -> Result<IndexValue, StoreError> {
        if b.first() != Some(&INDEX_VALUE_VERSION) {
            return Err(StoreError::IndexVersion(b.first().copied()));
        }
        if b.len() != INDEX_VALUE_LEN {
            return Err(StoreError::IndexLen {
                len: b.len(),
                expected: INDEX_VALUE_LEN,
            });
        }
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        let opt = |v: u32| (v != NONE_U32).then_some(v);
        Ok(IndexValue {
            state: b[1],
            height: opt(u32_at(2)),
            file: u32_at(6),
            magic_offset: u64::from_le_bytes(b[10..18].try_into().unwrap()),
            declared_size: u32_at(18),
            n_tx: opt(u32_at(22)),
            copies: u32_at(26),
            in_best_chain: b[30] != 0,
            chainwork: b[31..63].try_into().unwrap(),
            header: b[63..143].try_into().unwrap(),
        })
    }
}

/// Heights per `btc_best` value.
pub const BEST_CHAIN_BUCKET: u32 = 1024;

/// The `btc_best` key of the bucket holding `height`.
pub fn best_chain_key(height: u32) -> [u8; 4] {
    (height / BEST_CHAIN_BUCKET).to_be_bytes()
}

/// Where `height`'s hash sits inside its bucket's value.
pub fn best_chain_slot(height: u32) -> std::ops::Range<usize> {
    let i = (height % BEST_CHAIN_BUCKET) as usize * 32;
    i..i + 32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_value_round_trip() {
        let v = IndexValue {
            state: 2,
            height: Some(7),
            file: 3,
            magic_offset: 1 << 33,
            declared_size: 285,
            n_tx: None,
            copies: 2,
            in_best_chain: true,
            chainwork: [9; 32],
            header: [4; 80],
        };
        let mut b = Vec::new();
        v.encode_into(&mut b);
        assert_eq!(b.len(), INDEX_VALUE_LEN);
        assert_eq!(IndexValue::decode(&b).unwrap(), v);
        assert!(IndexValue::decode(&b[..10]).is_err());
        b[0] = 99;
        assert!(IndexValue::decode(&b).is_err());
    }

    #[test]
    fn best_chain_buckets_sort_by_height() {
        assert_eq!(best_chain_key(0), [0, 0, 0, 0]);
        assert_eq!(best_chain_key(BEST_CHAIN_BUCKET - 1), [0, 0, 0, 0]);
        assert_eq!(best_chain_key(BEST_CHAIN_BUCKET), [0, 0, 0, 1]);
        assert!(best_chain_key(300 * BEST_CHAIN_BUCKET) > best_chain_key(255 * BEST_CHAIN_BUCKET));
        assert_eq!(best_chain_slot(BEST_CHAIN_BUCKET + 2), 64..96);
    }
}
