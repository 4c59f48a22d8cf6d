//! Flow execution-state ledger: the LedgerWAL of a Flow execution node, byte-compatible with
//! flow-go v0.33.1 (`shared/specs/flow-ledger.md`).
//!
//! Layers, bottom up (each knows nothing of the ones above it; the Python bindings are in
//! `crate::py::flow` and `crate::py::flow_checkpoint`):
//!
//! | module     | does                                                                 | spec |
//! |------------|----------------------------------------------------------------------|------|
//! | `hash`     | SHA3-256, leaf/interior hashing, default hashes, compact leaf values | §4.1 |
//! | `wal`      | segment framing: 32 KiB pages, fragments, CRC-32C, snappy flag       | §2   |
//! | `record`   | record payloads: update (TrieUpdate) and delete, typed values        | §3   |
//! | `node`     | trie nodes and registers (in memory or paged out to a node store)    | §4.1 |
//! | `paging`   | a paged node's location and the node store's error (node ↔ store)   | —    |
//! | `mtrie`    | persistent MTrie and a forest of tries keyed by root hash           | §4   |
//! | `writer`   | segment writer producing onflow/wal's exact framing                  | §2.1 |
//! | `gen`      | deterministic WAL generator (same workload as `tests/flow_go`)       | —    |
//! | `register_stats` | register counts and sizes, a trie's node counts (stats values)   | —    |
//! | `output`   | [`OutputError`]: writing a table, SST files, a spill run or a node store | —    |
//! | `batches`  | Arrow record batches for the `trie_updates` and `registers` tables   | —    |
//! | `checkpoint` | checkpoint files: verified, streamed and legacy reads, flow-go-identical writes, the `registers` table → v6, stats | §5 |
//! | `replay`   | the replay state: forest, current root, update log, its publication  | —    |
//!
//! Every decoding error carries its segment number, the byte offset inside that segment and a
//! kind ([`FlowError`]); nothing here panics on hostile input.

pub mod batches;
pub mod checkpoint;
pub mod gen;
pub mod hash;
pub mod keccak;
pub mod mtrie;
pub mod node;
pub mod node_store;
pub mod output;
pub mod paging;
pub mod record;
pub mod register_sst;
pub mod register_stats;
pub mod replay;
pub mod wal;
pub mod writer;

use hash::Hash;
pub use output::OutputError;
use std::fmt;

/// What went wrong, without the location (see [`FlowError`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Reading or writing a file failed (retryable: the bytes may be fine).
    Io { op: &'static str, message: String },
    /// A `recPageTerm` byte was followed by non-zero bytes before the page boundary.
    NonZeroPadding,
    /// Fragment length field larger than a page can hold (32 761).
    FragmentTooLong { len: u16 },
    /// CRC-32C of the fragment payload differs from the stored one.
    Checksum { stored: u32, computed: u32 },
    /// Fragment type 5..=7.
    UnknownFragmentType { typ: u8 },
    /// Fragment type valid but out of sequence (e.g. a Middle with no pending First).
    UnexpectedFragment { typ: u8, pending: bool },
    /// A fragment header or payload runs past the (page-padded) end of the segment.
    FragmentPastSegmentEnd,
    /// The segment ends while a record is still open (its First/Middle fragments were read).
    TornRecord,
    /// The snappy block of a compressed record does not decode.
    Snappy { reason: &'static str },
    /// Record shorter than the 4 bytes flow-go requires.
    RecordTooShort { len: usize },
    /// First byte of a record is neither 1 (update) nor 2 (delete).
    UnknownOperation { op: u8 },
    /// TrieUpdate encoding version newer than 0.
    UnsupportedVersion { version: u16 },
    /// TrieUpdate entity type other than 11.
    UnexpectedEntityType { typ: u8 },
    /// A field does not fit in the bytes left; `at` is the position inside the record.
    Truncated { field: &'static str, at: usize },
    /// Root hash length field other than 32.
    BadHashLength { len: usize },
    /// Path size field other than 32 (with at least one path).
    BadPathLength { len: usize },
    /// The update's parent root is not in the forest.
    UnknownParentRoot { root: Hash },
    /// A root asked for (not an update's parent) is not in the forest.
    UnknownRoot { root: Hash },
    /// Segment numbers in a directory are not consecutive.
    SegmentGap { before: u64, after: u64 },
    /// Invalid argument or configuration (segment size, counts, ...).
    Config { reason: String },
}

impl ErrorKind {
    /// Stable snake_case name, used as the Python-facing error kind.
    pub fn name(&self) -> &'static str {
        match self {
            ErrorKind::Io { .. } => "io",
            ErrorKind::NonZeroPadding => "non_zero_padding",
            ErrorKind::FragmentTooLong { .. } => "fragment_too_long",
            ErrorKind::Checksum { .. } => "checksum",
            ErrorKind::UnknownFragmentType { .. } => "unknown_fragment_type",
            ErrorKind::UnexpectedFragment { .. } => "unexpected_fragment",
            ErrorKind::FragmentPastSegmentEnd => "fragment_past_segment_end",
            ErrorKind::TornRecord => "torn_record",
            ErrorKind::Snappy { .. } => "snappy",
            ErrorKind::RecordTooShort { .. } => "record_too_short",
            ErrorKind::UnknownOperation { .. } => "unknown_operation",
            ErrorKind::UnsupportedVersion { .. } => "unsupported_version",
            ErrorKind::UnexpectedEntityType { .. } => "unexpected_entity_type",
            ErrorKind::Truncated { .. } => "truncated",
            ErrorKind::BadHashLength { .. } => "bad_hash_length",
            ErrorKind::BadPathLength { .. } => "bad_path_length",
            ErrorKind::UnknownParentRoot { .. } => "unknown_parent_root",
            ErrorKind::UnknownRoot { .. } => "unknown_root",
            ErrorKind::SegmentGap { .. } => "segment_gap",
            ErrorKind::Config { .. } => "config",
        }
    }

    /// Only I/O failures are worth a retry; everything else is in the bytes and stays there.
    pub fn is_retryable(&self) -> bool {
        matches!(self, ErrorKind::Io { .. })
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorKind::Io { op, message } => write!(f, "{op}: {message}"),
            ErrorKind::NonZeroPadding => write!(f, "unexpected non-zero byte in padded page"),
            ErrorKind::FragmentTooLong { len } => write!(f, "invalid record size {len}"),
            ErrorKind::Checksum { stored, computed } => {
                write!(
                    f,
                    "unexpected checksum {computed:08x}, expected {stored:08x}"
                )
            }
            ErrorKind::UnknownFragmentType { typ } => write!(f, "unexpected record type {typ}"),
            ErrorKind::UnexpectedFragment { typ, pending } => write!(
                f,
                "unexpected fragment type {typ} ({} record pending)",
                if *pending { "a" } else { "no" }
            ),
            ErrorKind::FragmentPastSegmentEnd => write!(f, "fragment runs past the segment end"),
            ErrorKind::TornRecord => write!(f, "last record is torn"),
            ErrorKind::Snappy { reason } => write!(f, "bad snappy block: {reason}"),
            ErrorKind::RecordTooShort { len } => {
                write!(f, "data corrupted, record of {len} bytes is too short")
            }
            ErrorKind::UnknownOperation { op } => write!(f, "unknown operation type {op:#04x}"),
            ErrorKind::UnsupportedVersion { version } => {
                write!(f, "incompatible trie update encoding version {version} > 0")
            }
            ErrorKind::UnexpectedEntityType { typ } => {
                write!(f, "unexpected entity type {typ}, expected 11 (trie update)")
            }
            ErrorKind::Truncated { field, at } => {
                write!(f, "record truncated reading {field} at record byte {at}")
            }
            ErrorKind::BadHashLength { len } => write!(f, "root hash of {len} bytes, expected 32"),
            ErrorKind::BadPathLength { len } => write!(f, "path of {len} bytes, expected 32"),
            ErrorKind::UnknownParentRoot { root } => {
                write!(
                    f,
                    "trie with the given rootHash {} not found",
                    root.to_hex()
                )
            }
            ErrorKind::UnknownRoot { root } => {
                write!(f, "root {} is not in the forest", root.to_hex())
            }
            ErrorKind::SegmentGap { before, after } => {
                write!(f, "segments are not sequential: {before} + 1 != {after}")
            }
            ErrorKind::Config { reason } => write!(f, "{reason}"),
        }
    }
}

/// An error with its location: segment number and byte offset inside the segment (for record
/// errors, the offset of the record's first fragment header).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowError {
    pub segment: u64,
    pub offset: u64,
    pub kind: ErrorKind,
}

impl FlowError {
    pub fn new(segment: u64, offset: u64, kind: ErrorKind) -> Self {
        FlowError {
            segment,
            offset,
            kind,
        }
    }

    pub(crate) fn io(segment: u64, op: &'static str, e: &std::io::Error) -> Self {
        FlowError::new(
            segment,
            0,
            ErrorKind::Io {
                op,
                message: e.to_string(),
            },
        )
    }
}

impl fmt::Display for FlowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "segment {:08} offset {}: {}",
            self.segment, self.offset, self.kind
        )
    }
}

impl std::error::Error for FlowError {}

/// A segment's records, decoded up to the first problem.
#[derive(Debug)]
pub struct SegmentDecode {
    /// `(index inside the segment, offset of the first fragment, record)`, in order.
    pub records: Vec<(u32, u64, record::WalRecord)>,
    /// Where reading stopped: the end of the last good record (or of trailing padding).
    pub end: u64,
    /// The first framing or record error, if any. Records before it are in `records`.
    pub error: Option<FlowError>,
}

/// Reads one segment: framing, then every record's payload, stopping at the first error
/// (framing errors carry the fragment's offset, record errors the record's).
pub fn decode_segment(seg: &wal::Segment) -> SegmentDecode {
    let mut records = Vec::new();
    let (end, error) = visit_segment(seg, |index, offset, rec| {
        records.push((index, offset, rec));
        Ok(())
    });
    SegmentDecode {
        records,
        end,
        error,
    }
}

/// Decodes a segment's records one at a time and hands each to `visit` (index inside the
/// segment, offset of its first fragment, record), stopping at the first framing or record
/// error or at the first error `visit` returns (reported at that record's offset). Returns
/// where reading stopped (the end of the last record visited without error, or of trailing
/// padding) and the error, if any.
pub fn visit_segment(
    seg: &wal::Segment,
    mut visit: impl FnMut(u32, u64, record::WalRecord) -> Result<(), ErrorKind>,
) -> (u64, Option<FlowError>) {
    let mut reader = seg.reader();
    let (mut end, mut index) = (0u64, 0u32);
    loop {
        match reader.next_record() {
            Ok(Some(raw)) => {
                let offset = raw.offset;
                // The record's bytes are freed before it is visited: an update's apply is the
                // peak of a replay's memory.
                let rec = record::decode(&raw.data);
                drop(raw);
                match rec.and_then(|rec| visit(index, offset, rec)) {
                    Ok(()) => {
                        index += 1;
                        end = reader.position();
                    }
                    Err(kind) => return (end, Some(FlowError::new(seg.number, offset, kind))),
                }
            }
            Ok(None) => return (end.max(reader.position().min(seg.file_len)), None),
            Err(e) => return (end, Some(e)),
        }
    }
}

pub use crate::datasets::hex::to_hex;

/// Parses hex (either case) of any even length.
pub fn from_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip() {
        let b = [0u8, 1, 0xab, 0xff];
        assert_eq!(to_hex(&b), "0001abff");
        assert_eq!(from_hex("0001ABff").unwrap(), b);
        assert!(from_hex("abc").is_none());
        assert!(from_hex("zz").is_none());
    }

    #[test]
    fn decode_segment_stops_at_the_first_bad_record() {
        use record::{encode_delete, encode_update, TrieUpdate};
        let dir = std::env::temp_dir().join(format!("rechain-flow-dec-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut w = writer::WalWriter::create(&dir, wal::PAGE_SIZE * 4, false).unwrap();
        let u = TrieUpdate {
            root: hash::empty_root(),
            paths: vec![],
            payloads: vec![],
        };
        w.log(&encode_delete(&hash::empty_root())).unwrap();
        let bad = w.log(&encode_update(&u)).unwrap(); // zero paths: flow-go cannot decode it
        w.log(&encode_delete(&hash::empty_root())).unwrap();
        w.close().unwrap();
        let seg = wal::Segment::read(&dir.join("00000000"), 0).unwrap();
        let d = decode_segment(&seg);
        assert_eq!(d.records.len(), 1);
        assert_eq!(d.end, bad.offset);
        let e = d.error.unwrap();
        assert_eq!((e.segment, e.offset), (0, bad.offset));
        assert!(matches!(e.kind, ErrorKind::Truncated { .. }));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn error_display_names_location() {
        let e = FlowError::new(
            3,
            616,
            ErrorKind::Checksum {
                stored: 0x6491aebe,
                computed: 0x6c9bbb01,
            },
        );
        assert_eq!(
            e.to_string(),
            "segment 00000003 offset 616: unexpected checksum 6c9bbb01, expected 6491aebe"
        );
        assert_eq!(e.kind.name(), "checksum");
        assert!(!e.kind.is_retryable());
        let io = FlowError::io(1, "read", &std::io::Error::other("boom"));
        assert!(io.kind.is_retryable());
    }
}
