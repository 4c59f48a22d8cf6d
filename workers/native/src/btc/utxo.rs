//! The UTXO set as Core's chainstate orders it, and the `hash_serialized_3` digest
//! `gettxoutsetinfo` reports (Core's `kernel/coinstats.cpp`): coins visited in chainstate key
//! order (`'C'` | txid, internal order | VARINT(vout)), each serialized as outpoint (txid | vout
//! u32 LE) | u32 LE (height * 2 + coinbase) | value i64 LE | CompactSize script length | script,
//! all fed to one double-SHA256.
//!
//! RocksDB (`btc_utxo`) uses the chainstate key and a plain value: code u32 LE (height * 2 +
//! coinbase) | value u64 LE | script.

use super::encode::{write_compact_size, write_core_varint};
use sha2::{Digest, Sha256};

pub const UTXO_KEY_PREFIX: u8 = b'C';

#[derive(Default)]
struct Coin {
    key: Vec<u8>,
    vout: u32,
    code: u32,
    value: u64,
    script: Vec<u8>,
}

/// Streams coins sorted by txid (internal order) and finishes each txid's group in VARINT key
/// order, so callers may sort by (txid, vout) numerically.
#[derive(Default)]
pub struct UtxoSetHasher {
    sha: Sha256,
    txid: Option<[u8; 32]>,
    group: Vec<Coin>,
    pub count: u64,
    pub total: u64,
    pub keys: Vec<Vec<u8>>,
    pub values: Vec<Vec<u8>>,
}

impl UtxoSetHasher {
    pub fn push(
        &mut self,
        txid: [u8; 32],
        vout: u32,
        height: u32,
        coinbase: bool,
        value: u64,
        script: &[u8],
    ) {
        if self.txid != Some(txid) {
            self.flush_group();
            self.txid = Some(txid);
        }
        let mut key = Vec::with_capacity(38);
        key.push(UTXO_KEY_PREFIX);
        key.extend_from_slice(&txid);
        write_core_varint(&mut key, vout as u64);
        self.group.push(Coin {
            key,
            vout,
            code: height * 2 + coinbase as u32,
            value,
            script: script.to_vec(),
        });
    }

    fn flush_group(&mut self) {
        let Some(txid) = self.txid else { return };
        self.group.sort_by(|a, b| a.key.cmp(&b.key));
        let mut ser = Vec::new();
        for coin in self.group.drain(..) {
            ser.clear();
            ser.extend_from_slice(&txid);
            ser.extend_from_slice(&coin.vout.to_le_bytes());
            ser.extend_from_slice(&coin.code.to_le_bytes());
            ser.extend_from_slice(&coin.value.to_le_bytes());
            write_compact_size(&mut ser, coin.script.len() as u64);
            ser.extend_from_slice(&coin.script);
            self.sha.update(&ser);
            self.count += 1;
            self.total += coin.value;
            let mut value = Vec::with_capacity(12 + coin.script.len());
            value.extend_from_slice(&coin.code.to_le_bytes());
            value.extend_from_slice(&coin.value.to_le_bytes());
            value.extend_from_slice(&coin.script);
            self.keys.push(coin.key);
            self.values.push(value);
        }
    }

    /// Flushes the last group; returns the digest in Core's display order.
    pub fn finish(&mut self) -> [u8; 32] {
        self.flush_group();
        self.txid = None;
        let first = std::mem::take(&mut self.sha).finalize();
        let mut out: [u8; 32] = Sha256::digest(first).into();
        out.reverse();
        out
    }

    /// Entries finished so far (key order), handed over for writing.
    pub fn take_entries(&mut self) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
        (
            std::mem::take(&mut self.keys),
            std::mem::take(&mut self.values),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_follow_varint_key_order() {
        // vout 16511 encodes as ff7f and 16512 as 808000: chainstate order puts 16512 first.
        let mut h = UtxoSetHasher::default();
        h.push([1; 32], 16_511, 5, false, 10, &[0x51]);
        h.push([1; 32], 16_512, 5, false, 20, &[0x51]);
        h.push([2; 32], 0, 7, true, 30, &[]);
        let digest = h.finish();
        let (keys, values) = h.take_entries();
        assert_eq!(keys[0][33..], [0x80, 0x80, 0x00]);
        assert_eq!(keys[1][33..], [0xff, 0x7f]);
        assert_eq!(values[2][..4], 15u32.to_le_bytes());
        assert_eq!((h.count, h.total), (3, 60));
        // The digest is double SHA-256 over the three serialized coins, shown reversed.
        let mut ser = Vec::new();
        for (txid, vout, code, value, script) in [
            ([1u8; 32], 16_512u32, 10u32, 20u64, &[0x51u8][..]),
            ([1u8; 32], 16_511, 10, 10, &[0x51][..]),
            ([2u8; 32], 0, 15, 30, &[][..]),
        ] {
            ser.extend_from_slice(&txid);
            ser.extend_from_slice(&vout.to_le_bytes());
            ser.extend_from_slice(&code.to_le_bytes());
            ser.extend_from_slice(&value.to_le_bytes());
            ser.push(script.len() as u8);
            ser.extend_from_slice(script);
        }
        let mut expect: [u8; 32] = Sha256::digest(Sha256::digest(&ser)).into();
        expect.reverse();
        assert_eq!(digest, expect);
    }
}
