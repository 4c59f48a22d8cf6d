//! [`CheckpointError`]: every checkpoint problem, with the file and byte offset where it was
//! found and a stable snake_case kind (the Python exception's `.kind`).

use crate::flow::hash::Hash;
use crate::flow::paging::StoreError;
use std::fmt;
use std::path::Path as FsPath;

/// A checkpoint problem with the file and byte offset where it was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointError {
    pub file: String,
    pub offset: u64,
    /// Stable snake_case name of the problem.
    pub kind: &'static str,
    pub message: String,
}

impl CheckpointError {
    pub(crate) fn new(
        file: &FsPath,
        offset: u64,
        kind: &'static str,
        message: impl Into<String>,
    ) -> Self {
        CheckpointError {
            file: file.display().to_string(),
            offset,
            kind,
            message: message.into(),
        }
    }

    /// A node whose stored hash is not what its contents hash to (`at`: the node's start; the
    /// hash follows its 3-byte header).
    pub(crate) fn hash_mismatch(file: &FsPath, at: u64, stored: Hash, computed: Hash) -> Self {
        CheckpointError::new(
            file,
            at + 3,
            "hash_mismatch",
            format!(
                "stored node hash {} but its contents hash to {}",
                stored.to_hex(),
                computed.to_hex()
            ),
        )
    }

    /// A checkpoint without a trie record: nothing to read registers or roots from.
    pub(crate) fn no_tries(main_file: &FsPath) -> Self {
        CheckpointError::new(main_file, 0, "no_tries", "checkpoint holds no tries")
    }

    pub(crate) fn io(file: &FsPath, offset: u64, e: &std::io::Error) -> Self {
        let kind = if e.kind() == std::io::ErrorKind::NotFound {
            "missing_file"
        } else if e.kind() == std::io::ErrorKind::UnexpectedEof {
            "truncated"
        } else {
            "io"
        };
        CheckpointError::new(file, offset, kind, e.to_string())
    }

    pub fn is_retryable(&self) -> bool {
        self.kind == "io"
    }
}

impl fmt::Display for CheckpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} offset {}: {}", self.file, self.offset, self.message)
    }
}

impl std::error::Error for CheckpointError {}

pub(super) type CpResult<T> = Result<T, CheckpointError>;

/// A node store failure (its scratch files: the disk, not the checkpoint) while paging a
/// checkpoint in or writing one of a paged forest.
impl From<StoreError> for CheckpointError {
    fn from(e: StoreError) -> Self {
        CheckpointError::new(&e.file, e.offset, "io", e.message)
    }
}
