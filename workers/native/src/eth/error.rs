//! The one error type of the Ethereum readers: what went wrong ([`ErrorKind`]) and where
//! (file, byte offset, block or item number).

use std::fmt;
use std::path::PathBuf;

pub type Result<T> = std::result::Result<T, Error>;

/// A reader error with its location. Fields that do not apply are `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// File (or freezer table file) the bad bytes came from.
    pub file: Option<PathBuf>,
    /// Byte offset in that file (or in the buffer given) where the problem was found.
    pub offset: Option<u64>,
    /// Block number (era1 block, freezer item) concerned.
    pub block: Option<u64>,
    pub kind: ErrorKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorKind {
    /// The operating system refused a read.
    Io(String),
    /// The input ends before a structure does: `need` bytes from the offset, `have` available.
    Truncated {
        what: &'static str,
        need: u64,
        have: u64,
    },
    /// e2store record header with non-zero reserved bytes.
    ReservedNonZero,
    /// e2store value longer than geth's 50 MiB limit.
    ValueTooLarge(u64),
    /// Snappy framed stream: chunk CRC-32C (masked) differs from the one stored.
    SnappyCrc { stored: u32, computed: u32 },
    /// Snappy framed stream: malformed framing (rule in the string).
    SnappyFraming(String),
    /// Raw snappy block does not decode.
    Snappy(String),
    /// RLP that does not decode as the structure named.
    Rlp { what: &'static str, detail: String },
    /// An e2store/era1 layout rule is broken (rule in the string).
    Layout(String),
    /// A block number outside what the file or table holds.
    OutOfRange { number: u64, first: u64, end: u64 },
    /// Freezer index entries break geth's well-formedness rules.
    BadIndex(String),
    /// Freezer `.meta` file does not decode.
    BadMeta(String),
    /// A freezer index entry points past the end of its data file.
    IndexPastData { data_len: u64, end: u64 },
    /// A freezer table is missing or holds fewer items than the head needs.
    ShortTable {
        table: String,
        items: u64,
        need: u64,
    },
    /// No freezer found at the path given.
    NotAFreezer(String),
    /// Rows that do not fit their table (a column missing or of another type, a value out of
    /// range): the message is shown as it is.
    Rows(String),
}

impl Error {
    pub fn new(kind: ErrorKind) -> Self {
        Error {
            file: None,
            offset: None,
            block: None,
            kind,
        }
    }
    pub fn at(kind: ErrorKind, offset: u64) -> Self {
        Error {
            offset: Some(offset),
            ..Error::new(kind)
        }
    }
    pub fn rlp(what: &'static str, e: alloy_rlp::Error) -> Self {
        Error::new(ErrorKind::Rlp {
            what,
            detail: e.to_string(),
        })
    }
    pub fn io(path: impl Into<PathBuf>, e: std::io::Error) -> Self {
        Error::new(ErrorKind::Io(e.to_string())).in_file(path)
    }
    /// Attach a file unless one is set already.
    pub fn in_file(mut self, path: impl Into<PathBuf>) -> Self {
        if self.file.is_none() {
            self.file = Some(path.into());
        }
        self
    }
    /// Attach an offset unless one is set already.
    pub fn at_offset(mut self, offset: u64) -> Self {
        if self.offset.is_none() {
            self.offset = Some(offset);
        }
        self
    }
    /// Shift a buffer-relative offset by `base` (the buffer's position in its file).
    pub fn shifted(mut self, base: u64) -> Self {
        self.offset = Some(self.offset.unwrap_or(0) + base);
        self
    }
    pub fn for_block(mut self, number: u64) -> Self {
        if self.block.is_none() {
            self.block = Some(number);
        }
        self
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ErrorKind::Io(e) => write!(f, "i/o error: {e}"),
            ErrorKind::Truncated { what, need, have } => {
                write!(f, "truncated {what}: need {need} bytes, have {have}")
            }
            ErrorKind::ReservedNonZero => write!(f, "e2store reserved bytes are non-zero"),
            ErrorKind::ValueTooLarge(n) => write!(f, "e2store value of {n} bytes exceeds 50 MiB"),
            ErrorKind::SnappyCrc { stored, computed } => write!(
                f,
                "snappy chunk checksum mismatch: stored {stored:08x}, computed {computed:08x}"
            ),
            ErrorKind::SnappyFraming(s) => write!(f, "snappy framing: {s}"),
            ErrorKind::Snappy(s) => write!(f, "snappy block: {s}"),
            ErrorKind::Rlp { what, detail } => write!(f, "bad RLP for {what}: {detail}"),
            ErrorKind::Layout(s) => write!(f, "layout: {s}"),
            ErrorKind::OutOfRange { number, first, end } => {
                write!(f, "number {number} outside [{first}, {end})")
            }
            ErrorKind::BadIndex(s) => write!(f, "freezer index: {s}"),
            ErrorKind::BadMeta(s) => write!(f, "freezer meta: {s}"),
            ErrorKind::IndexPastData { data_len, end } => write!(
                f,
                "index points to byte {end} but the data file has {data_len} bytes"
            ),
            ErrorKind::ShortTable { table, items, need } => {
                write!(f, "table {table} holds {items} items, {need} needed")
            }
            ErrorKind::NotAFreezer(s) => write!(f, "not a freezer: {s}"),
            ErrorKind::Rows(s) => f.write_str(s),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(p) = &self.file {
            write!(f, "{}: ", p.display())?;
        }
        if let Some(o) = self.offset {
            write!(f, "offset {o}: ")?;
        }
        if let Some(b) = self.block {
            write!(f, "block {b}: ")?;
        }
        write!(f, "{}", self.kind)
    }
}

impl std::error::Error for Error {}
