//! What `checkpoint stats` reports of a trie's registers, as plain values: counts and sizes
//! ([`Sizes`]), one trie's node counts and depths ([`TrieStats`]), an owner's row
//! ([`OwnerRow`]). Gathered by `checkpoint::stats`, written as tables by `batches`; neither
//! knows the other.

use super::hash::{Hash, MAX_HEIGHT};

/// Depths 0 (the root) to 256 (a leaf at height 0).
pub const DEPTHS: usize = MAX_HEIGHT as usize + 1;

/// Counts and sizes of a set of registers (key bytes: the encoded key, as flow-go's
/// `Payload.Size` counts it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    pub registers: u64,
    pub key_bytes: u64,
    pub value_bytes: u64,
    pub min_value_bytes: u64,
    pub max_value_bytes: u64,
}

impl Default for Sizes {
    fn default() -> Self {
        Sizes {
            registers: 0,
            key_bytes: 0,
            value_bytes: 0,
            min_value_bytes: u64::MAX,
            max_value_bytes: 0,
        }
    }
}

impl Sizes {
    pub(crate) fn add(&mut self, key: u64, value: u64) {
        self.registers += 1;
        self.key_bytes += key;
        self.value_bytes += value;
        self.min_value_bytes = self.min_value_bytes.min(value);
        self.max_value_bytes = self.max_value_bytes.max(value);
    }

    pub fn merge(&mut self, o: &Sizes) {
        self.registers += o.registers;
        self.key_bytes += o.key_bytes;
        self.value_bytes += o.value_bytes;
        self.min_value_bytes = self.min_value_bytes.min(o.min_value_bytes);
        self.max_value_bytes = self.max_value_bytes.max(o.max_value_bytes);
    }
}

/// One trie's node counts (flow-go's `LedgerStats`) and register totals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrieStats {
    pub root: Hash,
    /// The trie record's register count and size (flow-go's `AllocatedRegCount/Size`).
    pub reg_count: u64,
    pub reg_size: u64,
    pub leaf_nodes: u64,
    pub interim_nodes: u64,
    /// Leaves whose value is not empty.
    pub registers: u64,
    pub key_bytes: u64,
    pub value_bytes: u64,
    /// Depth of the deepest node (0: the root alone, or an empty trie).
    pub max_depth: u16,
    /// Leaves and interim nodes at each depth (index = depth).
    pub leaf_depths: Vec<u64>,
    pub interim_depths: Vec<u64>,
}

/// An owner (None: registers whose key has no owner part) and its counts, merged.
pub type OwnerRow = (Option<Box<[u8]>>, Sizes);
