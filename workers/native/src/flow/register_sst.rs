//! RocksDB's `flow_registers` entries (path → `store::encode_register_value`) written as SST
//! files straight from a walk of registers in path order: the replay's publication and the
//! streamed checkpoint read both build them this way, so the database only ingests them.

use super::node::Register;
use super::{ErrorKind, OutputError};
use crate::sst::SstFiles;
use crate::store::encode_register_value;
use arrow_array::builder::BinaryBuilder;
use arrow_array::{Array, BinaryArray};
use std::path::PathBuf;
use std::sync::Arc;

/// Where and how register SST files are written.
#[derive(Debug, Clone)]
pub struct RegisterSst {
    pub dir: PathBuf,
    /// A file closes once its filter's key hashes and index hold this many bytes.
    pub max_held: usize,
    /// The value layout version (`store::encode_register_value`).
    pub version: u8,
    /// Snappy data blocks (`SstWriter::create`).
    pub compress: bool,
}

type FileName = Box<dyn Fn(usize) -> PathBuf + Send>;

/// Registers in strictly increasing path order into SST files `<prefix>NNNNNN.sst`.
pub struct RegisterSstWriter {
    dir: PathBuf,
    version: u8,
    files: SstFiles<FileName>,
    value: Vec<u8>,
}

impl RegisterSst {
    /// A writer of files `<prefix>NNNNNN.sst` in `dir`: writers running at once take prefixes
    /// of their own, ordered as their path ranges are so the file names sort in key order.
    pub fn writer(&self, prefix: &str) -> Result<RegisterSstWriter, OutputError> {
        let (dir, prefix) = (self.dir.clone(), prefix.to_string());
        let name: FileName = Box::new(move |i| dir.join(format!("{prefix}{i:06}.sst")));
        let files = SstFiles::create(name, self.max_held, self.compress)
            .map_err(|e| OutputError::file(&self.dir, e))?;
        Ok(RegisterSstWriter {
            dir: self.dir.clone(),
            version: self.version,
            files,
            value: Vec::new(),
        })
    }
}

impl RegisterSstWriter {
    pub fn add(&mut self, registers: &[&Arc<Register>]) -> Result<(), OutputError> {
        for reg in registers {
            self.value.clear();
            let payload = reg.payload();
            encode_register_value(self.version, payload.key, payload.value, &mut self.value);
            self.files
                .add(&reg.path().0, &self.value)
                // `SstError` is a message, not an `std::error::Error`.
                .map_err(|e| OutputError::file(&self.dir, e.to_string()))?;
        }
        Ok(())
    }

    /// The files written, in key order (none when no register was added).
    pub fn finish(self) -> Result<Vec<PathBuf>, OutputError> {
        let dir = self.dir;
        Ok(self
            .files
            .finish()
            .map_err(|e| OutputError::file(&dir, e))?
            .0)
    }
}

/// Splits `flow_registers` values (`version u8 | key length u32 BE | encoded key | value`, as
/// [`RegisterSstWriter`] writes them) into their encoded keys and values; a value that is not
/// that layout (or of another version) is an error naming its row.
pub fn split_register_values(
    values: &BinaryArray,
    version: u8,
) -> Result<(BinaryArray, BinaryArray), ErrorKind> {
    let mut keys = BinaryBuilder::with_capacity(values.len(), 0);
    let mut vals = BinaryBuilder::with_capacity(values.len(), 0);
    for (row, v) in values.iter().enumerate() {
        let v = v.unwrap_or_default();
        let split = v
            .get(1..5)
            .map(|l| 5 + u32::from_be_bytes(l.try_into().expect("4 bytes")) as usize)
            .filter(|end| *end <= v.len() && v[0] == version);
        let Some(end) = split else {
            return Err(ErrorKind::Config {
                reason: format!("flow_registers value at row {row} is malformed"),
            });
        };
        keys.append_value(&v[5..end]);
        vals.append_value(&v[end..]);
    }
    Ok((keys.finish(), vals.finish()))
}
