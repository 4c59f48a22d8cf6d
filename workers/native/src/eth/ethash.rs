//! Ethash proof of work, hashimoto-light (spec §3.3.3), for pre-merge headers.
//!
//! Owns the cache and dataset sizes, the seed hash, cache generation (one [`Cache`] per 30,000-
//! block epoch; it is immutable and `Sync`, so one cache serves every thread verifying that
//! epoch), dataset items computed from the cache on demand, `hashimoto`, the seal hash of a
//! header (its first 13 RLP fields as read, plus `baseFee` on London-era PoW headers), and
//! [`verify_pow`]: `digest == mixHash` and `result ≤ 2^256 / difficulty`.
//! Keccak-512 is the `sha3` crate's; Keccak-256 alloy's.

use super::error::{Error, Result};
use super::header::{list_items, DecodedHeader};
use alloy_primitives::{keccak256, B256, U256, U512};
use sha3::{Digest, Keccak512};

pub const EPOCH_LENGTH: u64 = 30_000;
const HASH_BYTES: usize = 64;
const HASH_WORDS: usize = 16;
const MIX_BYTES: usize = 128;
const MIX_WORDS: usize = 32;
const CACHE_INIT: u64 = 1 << 24;
const CACHE_GROWTH: u64 = 1 << 17;
const DATASET_INIT: u64 = 1 << 30;
const DATASET_GROWTH: u64 = 1 << 23;
const CACHE_ROUNDS: usize = 3;
const DATASET_PARENTS: u32 = 256;
const ACCESSES: usize = 64;
const FNV_PRIME: u32 = 0x0100_0193;

fn is_prime(n: u64) -> bool {
    if n < 2 {
        return false;
    }
    let mut d = 2;
    while d * d <= n {
        if n.is_multiple_of(d) {
            return false;
        }
        d += 1;
    }
    true
}

/// Cache size in bytes for `epoch`.
pub fn cache_size(epoch: u64) -> u64 {
    let mut sz = CACHE_INIT + CACHE_GROWTH * epoch - HASH_BYTES as u64;
    while !is_prime(sz / HASH_BYTES as u64) {
        sz -= 2 * HASH_BYTES as u64;
    }
    sz
}

/// Full dataset size in bytes for `epoch`.
pub fn dataset_size(epoch: u64) -> u64 {
    let mut sz = DATASET_INIT + DATASET_GROWTH * epoch - MIX_BYTES as u64;
    while !is_prime(sz / MIX_BYTES as u64) {
        sz -= 2 * MIX_BYTES as u64;
    }
    sz
}

/// `keccak256` applied `epoch` times to 32 zero bytes.
pub fn seed_hash(epoch: u64) -> B256 {
    let mut s = B256::ZERO;
    for _ in 0..epoch {
        s = keccak256(s);
    }
    s
}

fn keccak512(data: &[u8]) -> [u8; 64] {
    let mut out = [0u8; 64];
    out.copy_from_slice(&Keccak512::digest(data));
    out
}

#[inline]
fn fnv(a: u32, b: u32) -> u32 {
    a.wrapping_mul(FNV_PRIME) ^ b
}

/// The verification cache of one epoch (u32 little-endian words).
#[derive(Debug, Clone)]
pub struct Cache {
    pub epoch: u64,
    words: Vec<u32>,
    rows: u32,
    dataset_size: u64,
}

impl Cache {
    /// Build the cache of `epoch` (about 1M Keccak-512 calls at epoch 0).
    pub fn new(epoch: u64) -> Cache {
        Cache::with_sizes(
            epoch,
            seed_hash(epoch),
            cache_size(epoch),
            dataset_size(epoch),
        )
    }

    /// Build a cache of explicit sizes (test vectors use tiny ones).
    pub fn with_sizes(epoch: u64, seed: B256, cache_bytes: u64, dataset_bytes: u64) -> Cache {
        let rows = (cache_bytes as usize) / HASH_BYTES;
        let mut c = vec![0u8; rows * HASH_BYTES];
        c[..64].copy_from_slice(&keccak512(&seed[..]));
        for r in 1..rows {
            let h = keccak512(&c[(r - 1) * 64..r * 64]);
            c[r * 64..(r + 1) * 64].copy_from_slice(&h);
        }
        let mut temp = [0u8; 64];
        for _ in 0..CACHE_ROUNDS {
            for j in 0..rows {
                let src = ((j + rows - 1) % rows) * 64;
                let dst = j * 64;
                let x =
                    (u32::from_le_bytes(c[dst..dst + 4].try_into().unwrap()) as usize % rows) * 64;
                for k in 0..64 {
                    temp[k] = c[src + k] ^ c[x + k];
                }
                let h = keccak512(&temp);
                c[dst..dst + 64].copy_from_slice(&h);
            }
        }
        let words = c
            .chunks_exact(4)
            .map(|w| u32::from_le_bytes(w.try_into().unwrap()))
            .collect();
        Cache {
            epoch,
            words,
            rows: rows as u32,
            dataset_size: dataset_bytes,
        }
    }

    /// The cache bytes (little-endian words), for inspection.
    pub fn bytes(&self) -> Vec<u8> {
        self.words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    fn dataset_item(&self, index: u32) -> [u32; HASH_WORDS] {
        let row = (index % self.rows) as usize * HASH_WORDS;
        let mut mix = [0u8; 64];
        for i in 0..HASH_WORDS {
            let mut w = self.words[row + i];
            if i == 0 {
                w ^= index;
            }
            mix[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
        }
        let mix = keccak512(&mix);
        let mut m = [0u32; HASH_WORDS];
        for (i, w) in m.iter_mut().enumerate() {
            *w = u32::from_le_bytes(mix[i * 4..i * 4 + 4].try_into().unwrap());
        }
        for i in 0..DATASET_PARENTS {
            let parent =
                (fnv(index ^ i, m[i as usize % HASH_WORDS]) % self.rows) as usize * HASH_WORDS;
            for (k, w) in m.iter_mut().enumerate() {
                *w = fnv(*w, self.words[parent + k]);
            }
        }
        let mut out = [0u8; 64];
        for (i, w) in m.iter().enumerate() {
            out[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
        }
        let h = keccak512(&out);
        let mut r = [0u32; HASH_WORDS];
        for (i, w) in r.iter_mut().enumerate() {
            *w = u32::from_le_bytes(h[i * 4..i * 4 + 4].try_into().unwrap());
        }
        r
    }

    /// `hashimoto(sealHash, nonce)` → `(digest, result)`.
    pub fn hashimoto(&self, seal_hash: &B256, nonce: u64) -> (B256, B256) {
        let rows = (self.dataset_size / MIX_BYTES as u64) as u32;
        let mut seed_in = [0u8; 40];
        seed_in[..32].copy_from_slice(&seal_hash[..]);
        seed_in[32..].copy_from_slice(&nonce.to_le_bytes());
        let seed = keccak512(&seed_in);
        let head = u32::from_le_bytes(seed[..4].try_into().unwrap());
        let mut mix = [0u32; MIX_WORDS];
        for (i, w) in mix.iter_mut().enumerate() {
            let o = (i % 16) * 4;
            *w = u32::from_le_bytes(seed[o..o + 4].try_into().unwrap());
        }
        for i in 0..ACCESSES {
            let parent = fnv(i as u32 ^ head, mix[i % MIX_WORDS]) % rows;
            for j in 0..2 {
                let item = self.dataset_item(2 * parent + j as u32);
                for k in 0..HASH_WORDS {
                    let w = &mut mix[j * HASH_WORDS + k];
                    *w = fnv(*w, item[k]);
                }
            }
        }
        let mut digest = [0u8; 32];
        for k in 0..8 {
            let c = fnv(
                fnv(fnv(mix[4 * k], mix[4 * k + 1]), mix[4 * k + 2]),
                mix[4 * k + 3],
            );
            digest[k * 4..k * 4 + 4].copy_from_slice(&c.to_le_bytes());
        }
        let mut fin = [0u8; 96];
        fin[..64].copy_from_slice(&seed);
        fin[64..].copy_from_slice(&digest);
        (B256::from(digest), keccak256(fin))
    }
}

/// Seal hash: `keccak256(rlp([f0..f12]))`, with `baseFee` (field 15) appended for London-era
/// PoW headers — built from the header's field encodings as read.
pub fn seal_hash(raw_header: &[u8]) -> Result<B256> {
    let fields = list_items(raw_header).map_err(|e| Error::rlp("header", e))?;
    if fields.len() < 15 {
        return Err(Error::rlp(
            "header",
            alloy_rlp::Error::Custom("fewer than 15 fields"),
        ));
    }
    let mut payload: Vec<u8> = fields[..13].concat();
    if let Some(base_fee) = fields.get(15) {
        payload.extend_from_slice(base_fee);
    }
    let mut out = Vec::with_capacity(payload.len() + 9);
    alloy_rlp::Header {
        list: true,
        payload_length: payload.len(),
    }
    .encode(&mut out);
    out.extend(payload);
    Ok(keccak256(out))
}

/// Outcome of a proof-of-work check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PowCheck {
    pub digest: B256,
    pub result: B256,
    /// `digest == mixHash`.
    pub mix_ok: bool,
    /// `result ≤ 2^256 / difficulty`.
    pub target_ok: bool,
}

/// The ethash epoch of a block number.
pub fn epoch_of(number: u64) -> u64 {
    number / EPOCH_LENGTH
}

/// Verify the proof of work of `header` (decoded from `raw`) with the cache of its epoch.
pub fn verify_pow(cache: &Cache, raw: &[u8], header: &DecodedHeader) -> Result<PowCheck> {
    let h = &header.header;
    let nonce = u64::from_be_bytes(h.nonce.0);
    let (digest, result) = cache.hashimoto(&seal_hash(raw)?, nonce);
    let target_ok = if h.difficulty.is_zero() {
        false
    } else {
        let target = (U512::from(1u8) << 256) / U512::from(h.difficulty);
        U512::from(U256::from_be_bytes(result.0)) <= target
    };
    Ok(PowCheck {
        digest,
        result,
        mix_ok: digest == h.mix_hash,
        target_ok,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        // Spec §4.2: geth's tables start cacheSizes[0] = 16776896, datasetSizes[0] = 1073739904.
        assert_eq!(cache_size(0), 16_776_896);
        assert_eq!(dataset_size(0), 1_073_739_904);
        assert_eq!(seed_hash(0), B256::ZERO);
    }
}
