//! Bitcoin errors: the consensus rules a block breaks ([`Reject`], Core's reject reasons), a
//! block's failure with the pass that found it ([`Failure`]), stored bytes that do not decode
//! ([`StoreError`]), block records that cannot be read where the index puts them
//! ([`ReadError`]) and the chain state's own errors ([`ChainStateError`]). (Building the
//! chain state's tables is `datasets::btc_chain_rows`'s, with its `RowsError`; writing them
//! is `parquet_out`'s.)
//!
//! Every message is the text Python has always received (the bindings raise these as
//! `BtcError`, `py/btc_error.rs`: an `OSError` and a `ValueError` whose `str` is
//! `to_string()`, with the kind and the block, file and offset as attributes), so none may
//! change.

use std::fmt;
use std::path::PathBuf;

/// A consensus rule a block breaks in the chain state, by Core's reject reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reject {
    /// The first transaction is not a coinbase (one input, the null outpoint).
    CbMissing,
    /// BIP34: the coinbase does not start with the block's height.
    CbHeight,
    /// An input spends a coin that is not in the set.
    InputsMissingOrSpent,
    /// An input spends a coinbase output younger than `COINBASE_MATURITY`.
    PrematureSpendOfCoinbase,
    /// A transaction's inputs are worth less than its outputs.
    InBelowOut,
    /// The coinbase pays more than the subsidy and the fees.
    CbAmount,
    /// A transaction's lock time is not reached (`IsFinalTx`), or, from BIP68 on, an input's
    /// relative lock is not (`SequenceLocks`).
    TxnsNonFinal,
}

impl Reject {
    /// Core's reject reason (`bad-cb-height`, ...), as Python and the tables carry it.
    pub fn reason(self) -> &'static str {
        match self {
            Reject::CbMissing => "bad-cb-missing",
            Reject::CbHeight => "bad-cb-height",
            Reject::InputsMissingOrSpent => "bad-txns-inputs-missingorspent",
            Reject::PrematureSpendOfCoinbase => "bad-txns-premature-spend-of-coinbase",
            Reject::InBelowOut => "bad-txns-in-belowout",
            Reject::CbAmount => "bad-cb-amount",
            Reject::TxnsNonFinal => "bad-txns-nonfinal",
        }
    }
}

impl fmt::Display for Reject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.reason())
    }
}

/// The pass that found a block bad.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureKind {
    /// Its header (proof of work, linking).
    Header,
    /// Its context-free body checks (framing, merkle root, transaction sanity, ...).
    Body,
    /// A consensus rule that needs the UTXO set ([`Reject`]).
    Block,
}

impl FailureKind {
    /// The name Python receives (`"header"`, `"body"`, `"block"`).
    pub fn name(self) -> &'static str {
        match self {
            FailureKind::Header => "header",
            FailureKind::Body => "body",
            FailureKind::Block => "block",
        }
    }
}

/// The first block of a run that failed: where, which pass found it, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub height: u32,
    /// Internal order.
    pub hash: [u8; 32],
    pub kind: FailureKind,
    /// Core's reject reason or the body check's message.
    pub reason: String,
}

/// Bytes rechain stored (or handed between its stages) that do not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// A `btc_utxo` value shorter than its head.
    CoinValue { len: usize },
    /// A `btc_utxo` (key, value) pair that is not a coin.
    UtxoEntry { key: Vec<u8> },
    /// A `btc_utxo` key longer than any.
    UtxoKey { len: usize },
    /// A `btc_undo` value that does not parse.
    Undo { len: usize },
    /// A `btc_undo` value of a version this build does not know (its first byte).
    UndoVersion(Option<u8>),
    /// A `btc_index` value of a version this build does not know (its first byte).
    IndexVersion(Option<u8>),
    /// A `btc_index` value of the wrong length.
    IndexLen { len: usize, expected: usize },
    /// Spend-resolution records (events or resolved coins) that end inside a record.
    SpendRecordsShort { at: usize },
    /// A spend-resolution key longer than any `btc_utxo` key.
    SpendKey { len: usize },
    /// A spend-resolution event of an unknown kind.
    EventKind(u8),
    /// A resolved coin of an unknown state.
    ResolvedState(u8),
    /// A key the resolution left to the stored set, with no stored value given (its bytes:
    /// this module names no `coin` type, which depends on it).
    NoStoredValue(Vec<u8>),
    /// A needed key the resolution gave nothing for (its bytes).
    NoResolvedCoin(Vec<u8>),
    /// A spill file (path and the OS error) that could not be written or read back.
    Spill(String),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::CoinValue { len } => write!(f, "UTXO value of {len} bytes"),
            StoreError::Spill(what) => write!(f, "spill file {what}"),
            StoreError::UtxoEntry { key } => write!(f, "malformed btc_utxo entry {key:02x?}"),
            StoreError::UtxoKey { len } => write!(f, "a btc_utxo key of {len} bytes"),
            StoreError::Undo { len } => write!(f, "undo record of {len} bytes is malformed"),
            StoreError::UndoVersion(v) => write!(f, "unknown undo record version {v:?}"),
            StoreError::IndexVersion(v) => write!(f, "unknown block-index value version {v:?}"),
            StoreError::IndexLen { len, expected } => {
                write!(f, "block-index value of {len} bytes, expected {expected}")
            }
            StoreError::SpendRecordsShort { at } => {
                write!(f, "spend records cut short at byte {at}")
            }
            StoreError::SpendKey { len } => write!(f, "a key of {len} bytes"),
            StoreError::EventKind(k) => write!(f, "event kind {k}"),
            StoreError::ResolvedState(s) => write!(f, "resolved state {s}"),
            // As `coin::Key`'s Debug shows a key.
            StoreError::NoStoredValue(k) => write!(f, "no stored value given for Key({k:02x?})"),
            StoreError::NoResolvedCoin(k) => {
                write!(f, "spend resolution gave no coin for Key({k:02x?})")
            }
        }
    }
}

impl std::error::Error for StoreError {}

/// A best-chain block as the index places it: for naming it in an error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockAt {
    pub hash: [u8; 32],
    pub height: u32,
    pub path: PathBuf,
    /// Offset of the record's magic.
    pub offset: u64,
}

impl fmt::Display for BlockAt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "block {} (height {}) at {}:{}",
            crate::datasets::hex::display_hex(&self.hash),
            self.height,
            self.path.display(),
            self.offset
        )
    }
}

/// What is wrong with the record at a block's indexed place.
#[derive(Debug)]
pub enum RecordProblem {
    /// The record's head lies past the end of the file.
    PastEnd,
    /// No block magic where the index says the record starts.
    NoMagic,
    /// The record's declared size runs past the end of the file.
    RunsPastEnd,
    /// The record is another block (its header hashes to another hash).
    OtherBlock,
    /// Reading the file failed.
    Io(std::io::Error),
}

impl fmt::Display for RecordProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordProblem::PastEnd => f.write_str("record lies past the end of the file"),
            RecordProblem::NoMagic => {
                f.write_str("no block magic at the indexed offset (file changed?)")
            }
            RecordProblem::RunsPastEnd => f.write_str("block runs past the end of the file"),
            RecordProblem::OtherBlock => {
                f.write_str("the record there is another block (file changed?)")
            }
            RecordProblem::Io(e) => write!(f, "{e}"),
        }
    }
}

/// A best-chain block that cannot be read from its blk file.
#[derive(Debug)]
pub enum ReadError {
    /// The blk file does not open.
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The blk file's length cannot be read.
    Metadata(std::io::Error),
    /// The record at the block's indexed place is not the block.
    Record {
        block: BlockAt,
        problem: RecordProblem,
    },
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Open { path, source } => write!(f, "{}: {source}", path.display()),
            ReadError::Metadata(e) => write!(f, "{e}"),
            ReadError::Record { block, problem } => write!(f, "{block}: {problem}"),
        }
    }
}

impl std::error::Error for ReadError {}

/// Why the chain state could not load or apply a chunk at all (a block that breaks a rule is
/// not an error: it is the chunk's [`Failure`]).
#[derive(Debug)]
pub enum ChainStateError {
    Read(ReadError),
    Store(StoreError),
    /// `apply` was given another number of values than the chunk needs.
    ValueCount {
        given: usize,
        needed: usize,
    },
    /// A block without transactions reached the apply (the body checks refuse it).
    NoTransactions {
        hash: [u8; 32],
    },
    /// The block at `height` needs a median time past the best chain's list lacks (it ends
    /// below, or was made for another chain).
    MedianTimeMissing {
        height: u32,
    },
}

impl fmt::Display for ChainStateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChainStateError::Read(e) => write!(f, "{e}"),
            ChainStateError::Store(e) => write!(f, "{e}"),
            ChainStateError::ValueCount { given, needed } => {
                write!(f, "{given} values for {needed} needed coins")
            }
            ChainStateError::NoTransactions { hash } => write!(
                f,
                "block {} has no transactions",
                crate::datasets::hex::display_hex(hash)
            ),
            ChainStateError::MedianTimeMissing { height } => write!(
                f,
                "the best chain's median times past end below what the block at height \
                 {height} needs"
            ),
        }
    }
}

impl std::error::Error for ChainStateError {}

impl From<ReadError> for ChainStateError {
    fn from(e: ReadError) -> Self {
        ChainStateError::Read(e)
    }
}

impl From<StoreError> for ChainStateError {
    fn from(e: StoreError) -> Self {
        ChainStateError::Store(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::btc::coin::utxo_key;

    #[test]
    fn key_messages_show_the_key_as_its_debug_does() {
        let k = utxo_key(&[7u8; 32], 300);
        assert_eq!(
            StoreError::NoStoredValue(k.to_vec()).to_string(),
            format!("no stored value given for {k:?}")
        );
        assert_eq!(
            StoreError::NoResolvedCoin(k.to_vec()).to_string(),
            format!("spend resolution gave no coin for {k:?}")
        );
    }
}
