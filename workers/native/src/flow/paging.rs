//! What a paged-out trie node ([`super::node::Node::Paged`]) and the node store that holds it
//! ([`super::node_store`]) share: a node's location and the store's error. Both depend on
//! this module, so `node` needs nothing of `node_store` (the store is reached through the
//! [`super::node::NodeSource`] trait it implements).

use std::path::PathBuf;

/// Where a node was written: file number in the high bits, byte offset in the low ones.
pub type Loc = u64;

/// A node store problem: the file and offset, and what went wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreError {
    pub file: PathBuf,
    pub offset: u64,
    pub message: String,
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "node store {} at offset {}: {}",
            self.file.display(),
            self.offset,
            self.message
        )
    }
}

pub type StoreResult<T> = Result<T, StoreError>;
