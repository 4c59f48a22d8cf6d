//! Pre-merge accumulators (spec §2.6, EIP-7643).
//!
//! * [`epoch_root`]: `hash_tree_root(List[HeaderRecord(block_hash, total_difficulty), 8192])`,
//!   the value of an era1 file's `Accumulator` record and the first 4 bytes of its name.
//! * [`HistoricalRoots`]: the SSZ `HistoricalHashesAccumulator` (EIP-7643) — the 1,897 mainnet
//!   epoch roots. rechain ships it ([`mainnet`], portal-spec-tests'
//!   `historical_hashes_accumulator.ssz`), and [`HistoricalRoots::root`] recomputes its
//!   `hash_tree_root`, which must equal EIP-7643's constant [`MAINNET_ACCUMULATOR_ROOT`].
//!
//! SSZ merkleization is the few lines below over `sha2` (no SSZ crate needed).

use super::error::{Error, ErrorKind, Result};
use alloy_primitives::{b256, B256, U256};
use sha2::{Digest, Sha256};
use std::sync::OnceLock;

/// Blocks per era1 epoch (`EpochRecord` limit).
pub const EPOCH_SIZE: usize = 8192;
/// Limit of `historical_epochs`.
pub const HISTORICAL_EPOCHS_LIMIT: usize = 2048;
/// EIP-7643: root of the finished mainnet accumulator, covering blocks 0..=15,537,393.
pub const MAINNET_ACCUMULATOR_ROOT: B256 =
    b256!("ec8e040fd6c557b41ca8ddd38f7e9d58a9281918dc92bdb72342a38fb085e701");

static MAINNET_SSZ: &[u8] = include_bytes!("mainnet_historical_hashes_accumulator.ssz");

fn sha(a: &[u8], b: &[u8]) -> B256 {
    let mut h = Sha256::new();
    h.update(a);
    h.update(b);
    B256::from_slice(&h.finalize())
}

/// Merkle root of `leaves` padded with zero chunks to `limit` (a power of two).
fn merkleize(leaves: &[B256], limit: usize) -> B256 {
    debug_assert!(limit.is_power_of_two() && leaves.len() <= limit);
    let depth = limit.trailing_zeros() as usize;
    let mut zero = B256::ZERO;
    let mut layer: Vec<B256> = leaves.to_vec();
    for _ in 0..depth {
        if !layer.len().is_multiple_of(2) {
            layer.push(zero);
        }
        layer = layer.chunks(2).map(|p| sha(&p[0][..], &p[1][..])).collect();
        zero = sha(&zero[..], &zero[..]);
    }
    layer.first().copied().unwrap_or(zero)
}

fn mix_in_length(root: B256, len: usize) -> B256 {
    sha(&root[..], &U256::from(len).to_le_bytes::<32>())
}

/// `hash_tree_root` of an `EpochRecord` of `(block hash, total difficulty)` pairs.
pub fn epoch_root(records: &[(B256, U256)]) -> Result<B256> {
    if records.len() > EPOCH_SIZE {
        return Err(Error::new(ErrorKind::Layout(format!(
            "epoch record of {} blocks exceeds {EPOCH_SIZE}",
            records.len()
        ))));
    }
    let leaves: Vec<B256> = records
        .iter()
        .map(|(h, td)| sha(&h[..], &td.to_le_bytes::<32>()))
        .collect();
    Ok(mix_in_length(merkleize(&leaves, EPOCH_SIZE), records.len()))
}

/// A decoded `HistoricalHashesAccumulator`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoricalRoots {
    /// Roots of the finished epochs, epoch 0 first.
    pub epochs: Vec<B256>,
    /// `(hash, TD)` records of the unfinished epoch (empty once finished).
    pub current_epoch: Vec<(B256, U256)>,
}

impl HistoricalRoots {
    /// Decode the SSZ container `[offset, offset, historical_epochs, current_epoch]`.
    pub fn from_ssz(b: &[u8]) -> Result<Self> {
        let bad = |s: String| Error::new(ErrorKind::Layout(s));
        if b.len() < 8 {
            return Err(Error::at(
                ErrorKind::Truncated {
                    what: "SSZ accumulator",
                    need: 8,
                    have: b.len() as u64,
                },
                0,
            ));
        }
        let o1 = u32::from_le_bytes(b[0..4].try_into().unwrap()) as usize;
        let o2 = u32::from_le_bytes(b[4..8].try_into().unwrap()) as usize;
        if o1 != 8 || o2 < o1 || o2 > b.len() {
            return Err(bad(format!(
                "bad SSZ offsets {o1}, {o2} for {} bytes",
                b.len()
            )));
        }
        let (e, c) = (&b[o1..o2], &b[o2..]);
        if !e.len().is_multiple_of(32) || e.len() / 32 > HISTORICAL_EPOCHS_LIMIT {
            return Err(bad(format!("historical_epochs of {} bytes", e.len())));
        }
        if !c.len().is_multiple_of(64) || c.len() / 64 > EPOCH_SIZE {
            return Err(bad(format!("current_epoch of {} bytes", c.len())));
        }
        Ok(HistoricalRoots {
            epochs: e.chunks(32).map(B256::from_slice).collect(),
            current_epoch: c
                .chunks(64)
                .map(|r| (B256::from_slice(&r[..32]), U256::from_le_slice(&r[32..])))
                .collect(),
        })
    }

    /// `hash_tree_root` of the container.
    pub fn root(&self) -> B256 {
        let epochs = mix_in_length(
            merkleize(&self.epochs, HISTORICAL_EPOCHS_LIMIT),
            self.epochs.len(),
        );
        // current_epoch never exceeds EPOCH_SIZE here (checked on decode).
        let current = epoch_root(&self.current_epoch).unwrap_or_default();
        sha(&epochs[..], &current[..])
    }

    /// Root of `epoch`, if the list has it.
    pub fn epoch(&self, epoch: u64) -> Option<B256> {
        self.epochs.get(usize::try_from(epoch).ok()?).copied()
    }
}

/// The mainnet accumulator rechain ships (1,897 epoch roots), decoded once.
pub fn mainnet() -> &'static HistoricalRoots {
    static ROOTS: OnceLock<HistoricalRoots> = OnceLock::new();
    ROOTS.get_or_init(|| {
        HistoricalRoots::from_ssz(MAINNET_SSZ).expect("the shipped accumulator decodes")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_list_has_eip7643_root() {
        let m = mainnet();
        assert_eq!(m.epochs.len(), 1897);
        assert!(m.current_epoch.is_empty());
        assert_eq!(m.root(), MAINNET_ACCUMULATOR_ROOT);
        // EIP-7643 table (spec §4.3).
        assert_eq!(
            m.epoch(0).unwrap(),
            b256!("5ec1ffb8c3b146f42606c74ced973dc16ec5a107c0345858c343fc94780b4218")
        );
        assert_eq!(
            m.epoch(122).unwrap(),
            b256!("cddbda3fd6f764602c06803ff083dbfc73f2bb396df17a31e5457329b9a0f38d")
        );
        assert_eq!(
            m.epoch(1896).unwrap(),
            b256!("e6ebe562c89bc8ecb94dc9b2889a27a816ec05d3d6bd1625acad72227071e721")
        );
    }
}
