//! [`OutputError`]: writing one of flow's own outputs (a Parquet table, register SST files, a
//! spill run, a paged forest's node store), or reading a spill run back, failed. Its message
//! names the file; a caller that reads a checkpoint files it under the part being read.

use super::paging::StoreError;
use crate::parquet_out::WriteError;
use std::fmt;
use std::path::PathBuf;

#[derive(Debug)]
pub enum OutputError {
    /// A Parquet table (its message names the file).
    Table(WriteError),
    /// A file (or the folder of files) at `path`: `path: source`.
    File {
        path: PathBuf,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A file of ours at `path` whose bytes are not what we wrote: `path: what`.
    Corrupt { path: PathBuf, what: &'static str },
    /// The node store of a paged forest.
    Store(StoreError),
    /// A walk handed a sink something its contract rules out: `what`.
    Unexpected(&'static str),
}

impl OutputError {
    pub fn file(
        path: impl Into<PathBuf>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        OutputError::File {
            path: path.into(),
            source: source.into(),
        }
    }
}

impl fmt::Display for OutputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OutputError::Table(e) => write!(f, "{e}"),
            OutputError::File { path, source } => write!(f, "{}: {source}", path.display()),
            OutputError::Corrupt { path, what } => write!(f, "{}: {what}", path.display()),
            OutputError::Store(e) => write!(f, "{e}"),
            OutputError::Unexpected(what) => write!(f, "{what}"),
        }
    }
}

impl std::error::Error for OutputError {}

impl From<WriteError> for OutputError {
    fn from(e: WriteError) -> Self {
        OutputError::Table(e)
    }
}

impl From<StoreError> for OutputError {
    fn from(e: StoreError) -> Self {
        OutputError::Store(e)
    }
}
