//! The transaction copies the txindex builder (`btc/txindex.rs`) reads: the staged `txids`
//! files of the body pass and the chain state's `transactions` rows, read from Parquet or
//! handed in as record batches, their hashes as raw bytes or display hex.

use crate::btc::txindex::TxIndexBuilder;
use crate::datasets::hex::parse_hex32;
use arrow_array::cast::AsArray;
use arrow_array::types::UInt32Type;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{ArrowError, DataType, Field, Schema};
use parquet::arrow::arrow_reader::{ArrowReaderOptions, ParquetRecordBatchReaderBuilder};
use parquet::arrow::ProjectionMask;
use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Transaction copies that could not be read.
#[derive(Debug)]
pub enum TxidsError {
    /// A raw hash of another length than 32 bytes.
    NotHash32,
    /// A hex hash that does not parse.
    HashHex(String),
    /// A dictionary-encoded column whose key points past its values.
    DictionaryKey,
    /// A hash column of a type that holds no hashes.
    HashType(DataType),
    /// The position column is not uint32.
    Positions,
    /// The three columns differ in length.
    Lengths,
    /// A column missing, or Arrow refused the columns.
    Arrow(ArrowError),
    /// The builder could not spill a sorted run.
    Io(std::io::Error),
    /// Any of the above, or a Parquet error, in the staged file `path`.
    At { path: PathBuf, detail: String },
}

impl fmt::Display for TxidsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TxidsError::NotHash32 => f.write_str("a hash that is not 32 bytes"),
            TxidsError::HashHex(v) => write!(f, "hash {v:?}"),
            TxidsError::DictionaryKey => f.write_str("a dictionary key past its values"),
            TxidsError::HashType(t) => write!(f, "hashes of type {t}"),
            TxidsError::Positions => f.write_str("positions are not uint32"),
            TxidsError::Lengths => f.write_str("columns of different lengths"),
            TxidsError::Arrow(e) => write!(f, "{e}"),
            TxidsError::Io(e) => write!(f, "{e}"),
            TxidsError::At { path, detail } => write!(f, "{}: {detail}", path.display()),
        }
    }
}

impl std::error::Error for TxidsError {}

/// The columns of a staged part that the index reads (a `txids` file or an older part's
/// `transactions`).
const COLUMNS: [&str; 3] = ["txid", "block_hash", "position"];

/// The 32-byte hashes (display order) of a column: raw bytes, as the body pass stages them, or
/// display hex, as the chain state's `transactions` rows hold them.
pub fn hashes_of(column: &ArrayRef) -> Result<Vec<[u8; 32]>, TxidsError> {
    let not_32 = || TxidsError::NotHash32;
    let raw = |values: Vec<&[u8]>| -> Result<Vec<[u8; 32]>, TxidsError> {
        values
            .into_iter()
            .map(|v| v.try_into().map_err(|_| not_32()))
            .collect()
    };
    let hex = |values: Vec<&str>| -> Result<Vec<[u8; 32]>, TxidsError> {
        values
            .into_iter()
            .map(|v| parse_hex32(v.as_bytes()).ok_or_else(|| TxidsError::HashHex(v.to_string())))
            .collect()
    };
    if let Some(d) = column.as_any_dictionary_opt() {
        // A block's hash repeats on each of its rows: each distinct one is read once.
        let values = hashes_of(d.values())?;
        return d
            .normalized_keys()
            .into_iter()
            .map(|k| values.get(k).copied().ok_or(TxidsError::DictionaryKey))
            .collect();
    }
    if let Some(a) = column.as_fixed_size_binary_opt() {
        raw(a.iter().map(Option::unwrap_or_default).collect())
    } else if let Some(a) = column.as_binary_opt::<i32>() {
        raw(a.iter().map(Option::unwrap_or_default).collect())
    } else if let Some(a) = column.as_binary_opt::<i64>() {
        raw(a.iter().map(Option::unwrap_or_default).collect())
    } else if let Some(a) = column.as_string_opt::<i32>() {
        hex(a.iter().map(Option::unwrap_or_default).collect())
    } else if let Some(a) = column.as_string_opt::<i64>() {
        hex(a.iter().map(Option::unwrap_or_default).collect())
    } else {
        Err(TxidsError::HashType(column.data_type().clone()))
    }
}

/// Transaction copies: txids and block hashes (display order), positions.
#[derive(Default)]
pub struct Copies {
    txids: Vec<[u8; 32]>,
    blocks: Vec<[u8; 32]>,
    positions: Vec<u32>,
}

impl Copies {
    /// Appends `batch`'s copies (its three `COLUMNS`, in that order).
    pub fn extend(&mut self, batch: &RecordBatch) -> Result<(), TxidsError> {
        let positions = batch
            .column(2)
            .as_primitive_opt::<UInt32Type>()
            .ok_or(TxidsError::Positions)?;
        self.txids.extend(hashes_of(batch.column(0))?);
        self.blocks.extend(hashes_of(batch.column(1))?);
        self.positions.extend_from_slice(positions.values());
        if self.txids.len() != self.positions.len() || self.blocks.len() != self.positions.len() {
            return Err(TxidsError::Lengths);
        }
        Ok(())
    }

    pub fn add_to(&self, b: &mut TxIndexBuilder) -> Result<(), TxidsError> {
        for ((t, h), p) in self.txids.iter().zip(&self.blocks).zip(&self.positions) {
            b.add(t, h, *p).map_err(TxidsError::Io)?;
        }
        Ok(())
    }
}

/// `batch`'s three `COLUMNS`, in that order.
pub fn in_our_order(batch: &RecordBatch) -> Result<RecordBatch, TxidsError> {
    let schema = batch.schema();
    let cols = COLUMNS
        .iter()
        .map(|c| schema.index_of(c).map(|i| batch.column(i).clone()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(TxidsError::Arrow)?;
    RecordBatch::try_from_iter(COLUMNS.iter().zip(cols).map(|(n, c)| (*n, c)))
        .map_err(TxidsError::Arrow)
}

/// The copies one staged file holds (a body part's `txids`, or a chain part's
/// `transactions` rows, whose block hashes are read as the dictionary they are written as).
fn read_copies(path: &Path) -> Result<Copies, TxidsError> {
    let at = |e: &dyn std::fmt::Display| TxidsError::At {
        path: path.to_path_buf(),
        detail: e.to_string(),
    };
    let open = || File::open(path).map_err(|e| at(&e));
    let file_schema = ParquetRecordBatchReaderBuilder::try_new(open()?)
        .map_err(|e| at(&e))?
        .schema()
        .clone();
    let fields: Vec<Field> = file_schema
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            DataType::Utf8 if f.name() == "block_hash" => Field::new(
                f.name(),
                DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8)),
                f.is_nullable(),
            ),
            _ => f.as_ref().clone(),
        })
        .collect();
    let options = ArrowReaderOptions::new().with_schema(Arc::new(Schema::new(fields)));
    let builder = ParquetRecordBatchReaderBuilder::try_new_with_options(open()?, options)
        .map_err(|e| at(&e))?;
    let mask = ProjectionMask::columns(builder.parquet_schema(), COLUMNS);
    let reader = builder
        .with_projection(mask)
        .with_batch_size(65_536)
        .build()
        .map_err(|e| at(&e))?;
    let mut copies = Copies::default();
    for batch in reader {
        let batch = batch.map_err(|e| at(&e))?;
        // The projection keeps the file's column order: put the three in ours.
        copies
            .extend(&in_our_order(&batch).map_err(|e| at(&e))?)
            .map_err(|e| at(&e))?;
    }
    Ok(copies)
}

/// Adds the copies of `files` to `b`, reading `threads` files side by side (in order: at most
/// that many files' copies are held at once).
pub fn add_files(
    b: &mut TxIndexBuilder,
    files: &[PathBuf],
    threads: usize,
) -> Result<(), TxidsError> {
    for window in files.chunks(threads.max(1)) {
        let read: Vec<Result<Copies, TxidsError>> = std::thread::scope(|scope| {
            let running: Vec<_> = window
                .iter()
                .map(|f| scope.spawn(move || read_copies(f)))
                .collect();
            running
                .into_iter()
                .map(|h| h.join().expect("a staged file's reader panicked"))
                .collect()
        });
        for copies in read {
            copies?.add_to(b)?;
        }
    }
    Ok(())
}
