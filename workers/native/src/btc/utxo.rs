//! The UTXO set as Core's chainstate orders it, and the `hash_serialized_3` digest
//! `gettxoutsetinfo` reports (Core's `kernel/coinstats.cpp`): coins visited in chainstate key
//! order (`'C'` | txid, internal order | VARINT(vout)), each serialized as outpoint (txid | vout
//! u32 LE) | u32 LE (height * 2 + coinbase) | value i64 LE | CompactSize script length | script,
//! all fed to one double-SHA256; and MuHash3072 (`gettxoutsetinfo muhash`), each coin's same
//! serialization one element of the set.
//!
//! RocksDB (`btc_utxo`) uses the chainstate key and rechain's value (`coin::coin_value`),
//! which holds Core's coin and the output's row in its block.

use super::coin::{coin_fields, COIN_HEAD, UTXO_KEY_PREFIX};
use super::encode::{read_core_varint, write_compact_size};
use super::error::StoreError;
use super::muhash::ParallelMuHash;
use sha2::{Digest, Sha256};

/// `hash_serialized_3` and MuHash3072 over coins pushed in key order (MuHash on worker
/// threads, see `ParallelMuHash`).
pub struct SetDigest {
    sha: Sha256,
    /// None: `hash_serialized_3` only (the MuHash comes from elsewhere, see `hash_only`).
    muhash: Option<ParallelMuHash>,
    ser: Vec<u8>,
    pub count: u64,
    pub total: u64,
}

/// The commitments of a set: (hash_serialized_3, MuHash3072), both in display order.
pub struct SetCommitments {
    pub hash_serialized_3: [u8; 32],
    pub muhash: [u8; 32],
}

impl Default for SetDigest {
    /// MuHash on a thread per core.
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        SetDigest {
            sha: Sha256::default(),
            muhash: Some(ParallelMuHash::new(cores)),
            ser: Vec::new(),
            count: 0,
            total: 0,
        }
    }
}

impl SetDigest {
    /// A digest of `hash_serialized_3`, count and total only: for parts whose MuHash was
    /// computed where they were made.
    pub fn hash_only() -> Self {
        SetDigest {
            sha: Sha256::default(),
            muhash: None,
            ser: Vec::new(),
            count: 0,
            total: 0,
        }
    }

    /// Adds one entry (key, stored value; see `coin::coin_value`).
    pub fn push(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        let bad = || StoreError::UtxoEntry { key: key.to_vec() };
        if key.len() < 34 || key[0] != UTXO_KEY_PREFIX {
            return Err(bad());
        }
        let (vout, used) = read_core_varint(&key[33..]).ok_or_else(bad)?;
        let coin = coin_fields(value).map_err(|_| bad())?;
        if 33 + used != key.len() || vout > u32::MAX as u64 {
            return Err(bad());
        }
        // Core's coin: code and amount as stored, then the script; the row is rechain's own.
        let code = u32::from_le_bytes(value[..4].try_into().unwrap());
        self.push_coin(
            &key[1..33],
            vout as u32,
            code,
            coin.value,
            &value[COIN_HEAD..],
        );
        Ok(())
    }

    /// Adds one coin: `code` is height * 2 + coinbase.
    pub fn push_coin(&mut self, txid: &[u8], vout: u32, code: u32, value: u64, script: &[u8]) {
        let ser = &mut self.ser;
        ser.clear();
        ser.extend_from_slice(txid);
        ser.extend_from_slice(&vout.to_le_bytes());
        ser.extend_from_slice(&code.to_le_bytes());
        ser.extend_from_slice(&value.to_le_bytes());
        write_compact_size(ser, script.len() as u64);
        ser.extend_from_slice(script);
        self.sha.update(&*ser);
        if let Some(m) = self.muhash.as_mut() {
            m.insert(ser);
        }
        self.count += 1;
        self.total += value;
    }

    /// What a part of a set (a key range) contributes: count, total and the MuHash
    /// accumulator's state (`MuHash3072::to_state`). `hash_serialized_3` hashes the whole set
    /// in order, so a part gives none.
    pub fn partial(self) -> (u64, u64, Vec<u8>) {
        let muhash = self.muhash.map(ParallelMuHash::finish).unwrap_or_default();
        (self.count, self.total, muhash.to_state())
    }

    /// Both commitments in Core's display order.
    pub fn commitments(self) -> SetCommitments {
        let mut muhash = self
            .muhash
            .map(ParallelMuHash::finish)
            .unwrap_or_default()
            .finish();
        muhash.reverse();
        let mut hash_serialized_3: [u8; 32] = Sha256::digest(self.sha.finalize()).into();
        hash_serialized_3.reverse();
        SetCommitments {
            hash_serialized_3,
            muhash,
        }
    }

    /// The digest in Core's display order.
    pub fn finish(self) -> [u8; 32] {
        let mut out: [u8; 32] = Sha256::digest(self.sha.finalize()).into();
        out.reverse();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::btc::coin::{coin_value, utxo_key};

    fn key_bytes(txid: &[u8; 32], vout: u32) -> Vec<u8> {
        utxo_key(txid, vout).to_vec()
    }

    #[test]
    fn digest_serializes_core_coins_without_the_row() {
        // Key order: vout 16512 encodes as 808000 and sorts before 16511 (ff7f).
        let coins = [
            (
                [1u8; 32],
                16_512u32,
                5u32,
                false,
                20u64,
                7u32,
                &[0x51u8][..],
            ),
            ([1u8; 32], 16_511, 5, false, 10, 6, &[0x51][..]),
            ([2u8; 32], 0, 7, true, 30, 0, &[][..]),
        ];
        let mut d = SetDigest::default();
        let mut ser = Vec::new();
        for (txid, vout, height, coinbase, value, row, script) in coins {
            let v = coin_value(height, coinbase, value, row, script);
            d.push(&key_bytes(&txid, vout), &v).unwrap();
            ser.extend_from_slice(&txid);
            ser.extend_from_slice(&vout.to_le_bytes());
            ser.extend_from_slice(&(height * 2 + coinbase as u32).to_le_bytes());
            ser.extend_from_slice(&value.to_le_bytes());
            ser.push(script.len() as u8);
            ser.extend_from_slice(script);
        }
        assert_eq!((d.count, d.total), (3, 60));
        let mut expect: [u8; 32] = Sha256::digest(Sha256::digest(&ser)).into();
        expect.reverse();
        assert_eq!(d.finish(), expect);
    }

    #[test]
    fn malformed_entries_are_errors() {
        let v = coin_value(1, false, 5, 0, &[]);
        let mut d = SetDigest::default();
        assert!(d.push(b"Cshort", &v).is_err());
        assert!(d
            .push(&key_bytes(&[3; 32], 1), &v[..COIN_HEAD - 1])
            .is_err());
        let mut key = key_bytes(&[3; 32], 1);
        key[0] = b'X';
        assert!(d.push(&key, &v).is_err());
        assert_eq!(d.count, 0);
    }
}
