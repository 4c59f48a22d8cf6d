//! era1 writer (spec §2.2–2.3, §2.6), byte for byte what geth's era1 builder
//! (`internal/era/onedb/builder.go`) writes for the same blocks:
//!
//! ```text
//! era1        := Version | block-tuple{count} | Accumulator | BlockIndex
//! record      := type[2] | length:u32 LE | 00 00 | value
//! block-tuple := CompressedHeader(03 00, framed snappy of the header RLP)
//!              | CompressedBody(04 00, framed snappy of rlp([txs, uncles]))
//!              | CompressedReceipts(05 00, framed snappy of the consensus receipts RLP)
//!              | TotalDifficulty(06 00, u256 LE, 32 bytes)
//! Accumulator := 07 00 | hash_tree_root(List[(hash, TD), 8192])
//! BlockIndex  := 66 32 | first:u64 LE | offset[count]:i64 LE | count:u64 LE
//!                (offsets relative to the BlockIndex record's first byte, so negative)
//! ```
//!
//! The writer takes the RLP bytes as they are (headers hashed as given; receipts must already be
//! in the consensus form era1 holds — typed receipts as byte strings, with bloom) and frames each
//! value with [`snappy::encode_framed`], the golang/snappy stream geth produces (one `Write` and
//! one `Flush` per value). [`Era1Writer`] writes one archive to any `Write`; [`Era1DirWriter`]
//! cuts a chain into epoch files named `<network>-<epoch:05>-<root[0..4]>.era1`, each written to a
//! temporary file, synced and renamed once its accumulator (and so its name) is known.

use super::accumulator::{epoch_root, EPOCH_SIZE};
use super::e2store;
use super::error::{Error, ErrorKind, Result};
use super::header::decode_header;
use super::snappy;
use crate::atomic;
use alloy_primitives::{keccak256, B256, U256};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// One era1 archive being written to `out`.
pub struct Era1Writer<W: Write> {
    out: W,
    written: u64,
    first: Option<u64>,
    /// Absolute offsets of each block's CompressedHeader record.
    offsets: Vec<u64>,
    /// `(hash, TD)` per block, for the accumulator.
    records: Vec<(B256, U256)>,
}

fn layout(s: String) -> Error {
    Error::new(ErrorKind::Layout(s))
}

impl<W: Write> Era1Writer<W> {
    pub fn new(out: W) -> Self {
        Era1Writer {
            out,
            written: 0,
            first: None,
            offsets: Vec::new(),
            records: Vec::new(),
        }
    }

    fn record(&mut self, typ: [u8; 2], value: &[u8]) -> Result<()> {
        let mut h = [0u8; e2store::HEADER_LEN];
        h[..2].copy_from_slice(&typ);
        h[2..6].copy_from_slice(&(value.len() as u32).to_le_bytes());
        self.out
            .write_all(&h)
            .and_then(|_| self.out.write_all(value))
            .map_err(|e| Error::new(ErrorKind::Io(e.to_string())).at_offset(self.written))?;
        self.written += (h.len() + value.len()) as u64;
        Ok(())
    }

    /// Number of the first block, once one is added.
    pub fn first(&self) -> Option<u64> {
        self.first
    }
    pub fn count(&self) -> u64 {
        self.offsets.len() as u64
    }
    /// Bytes written so far.
    pub fn len_bytes(&self) -> u64 {
        self.written
    }

    /// Append a block: its header RLP (number and hash are taken from these bytes), body RLP,
    /// consensus-form receipts RLP and total difficulty (including this block).
    pub fn add_block(
        &mut self,
        header: &[u8],
        body: &[u8],
        receipts: &[u8],
        td: U256,
    ) -> Result<()> {
        let number = decode_header(header)?.header.number;
        self.add_block_numbered(number, keccak256(header), header, body, receipts, td)
    }

    /// [`Self::add_block`] with number and hash already known (geth's `AddRLP`).
    pub fn add_block_numbered(
        &mut self,
        number: u64,
        hash: B256,
        header: &[u8],
        body: &[u8],
        receipts: &[u8],
        td: U256,
    ) -> Result<()> {
        match self.first {
            None => {
                self.record(e2store::VERSION, &[])?;
                self.first = Some(number);
            }
            Some(first) => {
                if self.offsets.len() >= EPOCH_SIZE {
                    return Err(
                        layout(format!("an era1 file holds at most {EPOCH_SIZE} blocks"))
                            .for_block(number),
                    );
                }
                let want = first + self.offsets.len() as u64;
                if number != want {
                    return Err(layout(format!("block {number} added where {want} is next"))
                        .for_block(number));
                }
            }
        }
        self.offsets.push(self.written);
        self.records.push((hash, td));
        self.record(e2store::COMPRESSED_HEADER, &snappy::encode_framed(header))?;
        self.record(e2store::COMPRESSED_BODY, &snappy::encode_framed(body))?;
        self.record(
            e2store::COMPRESSED_RECEIPTS,
            &snappy::encode_framed(receipts),
        )?;
        self.record(e2store::TOTAL_DIFFICULTY, &td.to_le_bytes::<32>())
    }

    /// Write the Accumulator and BlockIndex records; returns the output and the accumulator.
    pub fn finish(mut self) -> Result<(W, B256)> {
        let Some(first) = self.first else {
            return Err(layout("an era1 file needs at least one block".into()));
        };
        let root = epoch_root(&self.records)?;
        self.record(e2store::ACCUMULATOR, &root[..])?;
        let base = self.written as i64;
        let count = self.offsets.len();
        let mut index = Vec::with_capacity(16 + 8 * count);
        index.extend_from_slice(&first.to_le_bytes());
        for o in &self.offsets {
            index.extend_from_slice(&(*o as i64 - base).to_le_bytes());
        }
        index.extend_from_slice(&(count as u64).to_le_bytes());
        self.record(e2store::BLOCK_INDEX, &index)?;
        self.out
            .flush()
            .map_err(|e| Error::new(ErrorKind::Io(e.to_string())))?;
        Ok((self.out, root))
    }
}

/// `<network>-<epoch:05>-<first 4 bytes of the accumulator, hex>.era1` (geth `onedb.Filename`).
pub fn era1_file_name(network: &str, epoch: u64, accumulator: &B256) -> String {
    format!(
        "{network}-{epoch:05}-{:02x}{:02x}{:02x}{:02x}.era1",
        accumulator[0], accumulator[1], accumulator[2], accumulator[3]
    )
}

/// One finished era1 file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenEra1 {
    pub path: PathBuf,
    pub epoch: u64,
    pub first_block: u64,
    pub blocks: u64,
    pub accumulator: B256,
    pub bytes: u64,
}

struct OpenFile {
    tmp: PathBuf,
    writer: Era1Writer<BufWriter<File>>,
}

/// Writes consecutive blocks into one era1 file per epoch of 8192 blocks in `dir`.
pub struct Era1DirWriter {
    dir: PathBuf,
    network: String,
    current: Option<OpenFile>,
    written: Vec<WrittenEra1>,
    /// Number the next block must have, once one is added.
    next: Option<u64>,
}

impl Era1DirWriter {
    /// Files go to `dir` (created if missing), named for `network` (e.g. `mainnet`).
    pub fn new(dir: impl AsRef<Path>, network: &str) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        if network.is_empty() || network.contains('/') {
            return Err(layout(format!("bad network name {network:?}")));
        }
        Ok(Era1DirWriter {
            dir,
            network: network.to_string(),
            current: None,
            written: Vec::new(),
            next: None,
        })
    }

    /// Files finished so far.
    pub fn written(&self) -> &[WrittenEra1] {
        &self.written
    }

    /// Append a block (see [`Era1Writer::add_block`]); a block whose number is a multiple of
    /// 8192 closes the current file and starts the next. The first block must start an epoch,
    /// the others follow it without gaps.
    pub fn add_block(
        &mut self,
        header: &[u8],
        body: &[u8],
        receipts: &[u8],
        td: U256,
    ) -> Result<()> {
        let number = decode_header(header)?.header.number;
        self.add_block_numbered(number, keccak256(header), header, body, receipts, td)
    }

    /// [`Self::add_block`] with number and hash already known.
    pub fn add_block_numbered(
        &mut self,
        number: u64,
        hash: B256,
        header: &[u8],
        body: &[u8],
        receipts: &[u8],
        td: U256,
    ) -> Result<()> {
        if let Some(next) = self.next.filter(|n| *n != number) {
            return Err(
                layout(format!("block {number} added where {next} is next")).for_block(number)
            );
        }
        let epoch_start = number.is_multiple_of(EPOCH_SIZE as u64);
        if self.current.is_some() && epoch_start {
            self.close_current()?;
        }
        if self.current.is_none() {
            if !epoch_start {
                return Err(layout(format!(
                    "an era1 file starts at a multiple of {EPOCH_SIZE}, not at block {number}"
                ))
                .for_block(number));
            }
            let tmp = self.dir.join(format!(
                ".{}-{:05}.era1.tmp",
                self.network,
                number / EPOCH_SIZE as u64
            ));
            let f = atomic::create(&tmp).map_err(atomic_err)?;
            self.current = Some(OpenFile {
                tmp,
                writer: Era1Writer::new(BufWriter::with_capacity(1 << 20, f)),
            });
        }
        let cur = self.current.as_mut().unwrap();
        cur.writer
            .add_block_numbered(number, hash, header, body, receipts, td)
            .map_err(|e| e.in_file(&cur.tmp))?;
        self.next = Some(number + 1);
        Ok(())
    }

    fn close_current(&mut self) -> Result<()> {
        let Some(OpenFile { tmp, writer }) = self.current.take() else {
            return Ok(());
        };
        let (first, blocks) = (writer.first().unwrap_or(0), writer.count());
        let (out, root) = writer.finish().map_err(|e| e.in_file(&tmp))?;
        let bytes = {
            let f = out
                .into_inner()
                .map_err(|e| Error::io(&tmp, e.into_error()))?;
            atomic::sync(&f, &tmp).map_err(atomic_err)?;
            f.metadata().map_err(|e| Error::io(&tmp, e))?.len()
        };
        let epoch = first / EPOCH_SIZE as u64;
        let path = self.dir.join(era1_file_name(&self.network, epoch, &root));
        atomic::rename(&tmp, &path).map_err(atomic_err)?;
        self.written.push(WrittenEra1 {
            path,
            epoch,
            first_block: first,
            blocks,
            accumulator: root,
            bytes,
        });
        Ok(())
    }

    /// Close the last file; returns every file written, in order.
    pub fn finish(mut self) -> Result<Vec<WrittenEra1>> {
        self.close_current()?;
        atomic::sync_dir(&self.dir);
        Ok(std::mem::take(&mut self.written))
    }
}

/// A failed step of landing an era1 file, as the error of the file it names.
fn atomic_err(e: atomic::AtomicError) -> Error {
    Error::io(e.path, e.source)
}

impl Drop for Era1DirWriter {
    fn drop(&mut self) {
        // An unfinished file never gets its final name.
        if let Some(cur) = self.current.take() {
            let _ = std::fs::remove_file(cur.tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eth::era1::Era1;

    fn era1_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/ethereum/era1")
    }

    /// Re-write every block of each real era1 file from the bytes our reader returns; the
    /// result must equal the file geth wrote.
    #[test]
    fn rewrites_real_files_byte_identically() {
        let mut names: Vec<PathBuf> = std::fs::read_dir(era1_dir())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "era1"))
            .collect();
        names.sort();
        assert_eq!(names.len(), 3);
        for path in names {
            let real = std::fs::read(&path).unwrap();
            let era = Era1::from_bytes(real.clone()).unwrap();
            let mut w = Era1Writer::new(Vec::with_capacity(real.len()));
            for b in era.blocks() {
                let b = b.unwrap();
                w.add_block(&b.header, &b.body, &b.receipts, b.total_difficulty)
                    .unwrap();
            }
            let (out, root) = w.finish().unwrap();
            assert_eq!(root, era.accumulator());
            let name = path.file_name().unwrap().to_str().unwrap();
            let parsed = crate::eth::era1::parse_name(name).unwrap();
            assert_eq!(era1_file_name(&parsed.network, parsed.epoch, &root), name);
            if let Some(at) = out.iter().zip(&real).position(|(a, b)| a != b) {
                panic!("{name}: first difference at byte {at}");
            }
            assert_eq!(out.len(), real.len(), "{name}");
        }
    }

    #[test]
    fn dir_writer_cuts_epochs_and_refuses_gaps() {
        let real = std::fs::read(era1_dir().join("sepolia-00000-643a00f7.era1")).unwrap();
        let era = Era1::from_bytes(real.clone()).unwrap();
        let dir = std::env::temp_dir().join(format!("rechain-era1w-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut w = Era1DirWriter::new(&dir, "sepolia").unwrap();
        let b1 = era.block(1).unwrap();
        let e = w
            .add_block(&b1.header, &b1.body, &b1.receipts, b1.total_difficulty)
            .unwrap_err();
        assert!(matches!(e.kind, ErrorKind::Layout(_)), "{e}");
        for b in era.blocks() {
            let b = b.unwrap();
            w.add_block(&b.header, &b.body, &b.receipts, b.total_difficulty)
                .unwrap();
        }
        // Block 0 again would start epoch 0 anew: refused, the file stays.
        let b0 = era.block(0).unwrap();
        let e = w
            .add_block(&b0.header, &b0.body, &b0.receipts, b0.total_difficulty)
            .unwrap_err();
        assert_eq!(e.block, Some(0));
        let files = w.finish().unwrap();
        assert_eq!(files.len(), 1);
        assert_eq!(files[0].path, dir.join("sepolia-00000-643a00f7.era1"));
        assert_eq!((files[0].first_block, files[0].blocks), (0, 8192));
        assert_eq!(std::fs::read(&files[0].path).unwrap(), real);
        // Nothing else left behind (no temporary file).
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        let mut w = Era1Writer::new(Vec::new());
        w.add_block(&b0.header, &b0.body, &b0.receipts, b0.total_difficulty)
            .unwrap();
        let e = w
            .add_block(&b0.header, &b0.body, &b0.receipts, b0.total_difficulty)
            .unwrap_err();
        assert_eq!(e.block, Some(0));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
