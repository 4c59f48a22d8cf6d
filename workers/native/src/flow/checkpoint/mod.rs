//! Flow checkpoint files (spec §5; flow-go `ledger/complete/wal/checkpointer.go`,
//! `checkpoint_v6_reader.go`, `checkpoint_v6_writer.go`, `mtrie/flattener/encoding.go`).
//!
//! ```text
//! checkpoint.NNNNNNNN      | 2137 | 0006 | 16 u16 | 17 x part CRC u32 | CRC u32 |   (78 bytes)
//! checkpoint.NNNNNNNN.0ii  | 2136 | 0006 | nodes (local indices) | count u64 | CRC u32 |
//! checkpoint.NNNNNNNN.016  | 2135 | 0006 | S u64 | top nodes (global) | tries | count u64 | T u16 | CRC |
//! leaf:     | 00 | height u16 | hash | path | P u32 | K u32 | key | V u32 | value |
//! interior: | 01 | height u16 | hash | left u64 | right u64 |
//! trie:     | root index u64 | reg count u64 | reg size u64 | root hash |
//! ```
//!
//! Modules, bottom up (each uses only those above it in this list):
//!
//! | module           | owns                                                                 |
//! |------------------|----------------------------------------------------------------------|
//! | `error`          | [`CheckpointError`]: file, offset, kind, message                     |
//! | `format`         | constants, names, header, part reader, the node/trie decoder+encoder |
//! | `read`           | v6 whole read into tries, one part's verification                    |
//! | `legacy`         | v1/v3/v4/v5 single-file checkpoints, read into the same tries        |
//! | `write`          | tries in memory → flow-go-identical v6 files; staged temporaries     |
//! | `build`          | registers in path order → the one trie's v6 checkpoint               |
//! | `from_registers` | a data folder's `registers` table → a v6 checkpoint, parts parallel  |
//! | `stream`         | v6 read in bounded memory, leaves handed to a [`stream::PartSink`]   |
//! | `page_in`        | a streamed read into a node store (a paged forest's trie)            |
//! | `stats`          | `checkpoint stats`: the streamed leaves folded into counts           |
//!
//! Every read checks every CRC and, unlike flow-go, recomputes node hashes (as [`Verify`]
//! asks) and compares each root with its trie record. Files are written as
//! `writing-<name>-<pid>` and renamed into place when all of them are complete (header last);
//! on any error the temporary files are removed.

mod build;
mod error;
mod format;
pub mod from_registers;
pub mod legacy;
pub mod page_in;
mod read;
pub mod stats;
pub mod stream;
mod write;

#[cfg(test)]
pub(crate) mod tests;

pub use build::{CachedLeaf, RegisterCheckpointBuilder};
pub use error::CheckpointError;
pub use format::{
    checkpoint_name, checkpoint_version, part_name, read_header, Header, Loaded, PartInfo, Verify,
    HEADER_LEN, MAGIC_HEADER, MAGIC_SUBTRIE, MAGIC_TOPTRIE, SUBTRIE_COUNT, SUBTRIE_LEVEL, TOP_PART,
    VERSION_V6,
};
pub use read::{count_registers, verify_part};
pub use write::{write_tries, WriteInfo};

use error::CpResult;
use std::path::Path as FsPath;

/// Loads checkpoint `name` of `dir`, any version flow-go v0.33.1 reads: v6 through
/// [`read`] (parts on up to `threads` threads, their hashes recomputed as
/// `verify_subtrie_hashes` asks; top-level nodes and roots always), v1/v3/v4/v5 through
/// [`legacy`] (every hash recomputed).
pub fn load(
    dir: &FsPath,
    name: &str,
    threads: usize,
    verify_subtrie_hashes: Verify,
) -> CpResult<Loaded> {
    let version = checkpoint_version(dir, name)?;
    if format::OLDER_VERSIONS.contains(&version) {
        return legacy::load(&dir.join(name), version);
    }
    read::load_v6(dir, name, threads, verify_subtrie_hashes)
}
