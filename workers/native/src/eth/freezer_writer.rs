//! geth chain freezer writer (spec §1): the tables a fresh geth writes when it freezes blocks
//! `0..n`, byte for byte where geth's output is deterministic.
//!
//! ```text
//! <table>.cidx / .ridx : entry{items + 1}, entry := filenum:u16 BE | end offset:u32 BE
//!                        entry 0 = (0, 0): no file and no item deleted from the tail
//! <table>.NNNN.cdat / .rdat : items back to back; an item never spans two files — one that
//!                        would pass `max_file_size` starts file NNNN+1 at offset 0
//! <table>.meta         : v1 rlp([1, virtualTail=0])            (geth v1.10.17 .. v1.14.x)
//!                        v2 rlp([2, virtualTail=0, flushOffset]) (geth v1.15.0 ..), flushOffset
//!                        = index length, as geth's sync leaves it after a clean shutdown
//! ```
//!
//! Tables: `hashes` (raw, 32 bytes), `headers`, `bodies`, `receipts` (storage form) compressed
//! item by item as golang/snappy's `Encode` does ([`snappy::encode_raw`]); per
//! [`FreezerVersion`] also `diffs` (raw `rlp(td)`) or `bals` (EIP-7928 access lists; empty items,
//! one `00` byte each, for blocks without one). geth's `FLOCK` is not written (it is geth's
//! lock, created by whoever opens the freezer). Data files are written through buffers and
//! synced, then the `.meta` files last, so a freezer cut short has no meta claiming its index.

use super::error::{Error, ErrorKind, Result};
use super::snappy;
use alloy_primitives::{B256, U256};
use alloy_rlp::Encodable;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// geth's `freezerTableSize`.
pub const MAX_FILE_SIZE: u64 = 2_000_000_000;

/// Which geth release's chain freezer to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FreezerVersion {
    /// geth v1.10.17 … v1.14.x: `.meta` version 1 and the `diffs` (total difficulty) table.
    /// The layout of `shared/data/ethereum/geth-freezer-devchain/`.
    V1_10,
    /// geth v1.15.0 … v1.17.3: `.meta` version 2 with the flush offset, no `diffs`.
    V1_15,
    /// geth v1.17.4 and later (current): as `V1_15` plus the `bals` table.
    V1_17,
}

impl FreezerVersion {
    pub fn by_name(name: &str) -> Option<Self> {
        match name {
            "v1.10" | "v1.14" | "diffs" => Some(FreezerVersion::V1_10),
            "v1.15" => Some(FreezerVersion::V1_15),
            "v1.17" | "current" => Some(FreezerVersion::V1_17),
            _ => None,
        }
    }
}

/// Options of [`FreezerWriter::create`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FreezerOptions {
    pub version: FreezerVersion,
    /// Largest data file (geth: [`MAX_FILE_SIZE`]; tests use small files).
    pub max_file_size: u64,
}

impl Default for FreezerOptions {
    fn default() -> Self {
        FreezerOptions {
            version: FreezerVersion::V1_17,
            max_file_size: MAX_FILE_SIZE,
        }
    }
}

struct TableWriter {
    name: &'static str,
    dir: PathBuf,
    compressed: bool,
    max_file_size: u64,
    index: BufWriter<File>,
    index_len: u64,
    head: BufWriter<File>,
    head_id: u32,
    head_bytes: u64,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |e| Error::io(path, e)
}

impl TableWriter {
    fn create(
        dir: &Path,
        name: &'static str,
        compressed: bool,
        max_file_size: u64,
    ) -> Result<Self> {
        let idx = dir.join(format!("{name}.{}idx", if compressed { 'c' } else { 'r' }));
        if idx.exists() {
            return Err(Error::new(ErrorKind::Layout(format!(
                "{} exists: the freezer writer only creates new tables",
                idx.display()
            )))
            .in_file(&idx));
        }
        let mut index = BufWriter::new(File::create(&idx).map_err(io_err(&idx))?);
        index.write_all(&[0u8; 6]).map_err(io_err(&idx))?;
        let head = open_data(&data_path(dir, name, compressed, 0))?;
        Ok(TableWriter {
            name,
            dir: dir.to_path_buf(),
            compressed,
            max_file_size,
            index,
            index_len: 6,
            head,
            head_id: 0,
            head_bytes: 0,
        })
    }

    fn ext(&self) -> char {
        if self.compressed {
            'c'
        } else {
            'r'
        }
    }
    fn index_path(&self) -> PathBuf {
        self.dir.join(format!("{}.{}idx", self.name, self.ext()))
    }
    fn data_path(&self, n: u32) -> PathBuf {
        data_path(&self.dir, self.name, self.compressed, n)
    }

    fn finish_head(&mut self) -> Result<()> {
        let p = self.data_path(self.head_id);
        self.head.flush().map_err(io_err(&p))?;
        self.head.get_ref().sync_all().map_err(io_err(&p))
    }

    /// geth `freezerTableBatch.appendItem` + `commit`.
    fn append(&mut self, item: &[u8]) -> Result<()> {
        let compressed;
        let data = if self.compressed {
            compressed = snappy::encode_raw(item);
            &compressed[..]
        } else {
            item
        };
        let size = data.len() as u64;
        if self.head_bytes + size > self.max_file_size {
            self.finish_head()?;
            if self.head_id == u16::MAX as u32 {
                return Err(Error::new(ErrorKind::Layout(format!(
                    "table {} needs more than 65536 data files",
                    self.name
                ))));
            }
            self.head_id += 1;
            self.head = open_data(&self.data_path(self.head_id))?;
            self.head_bytes = 0;
        }
        let end = self.head_bytes + size;
        if end > u32::MAX as u64 {
            return Err(Error::new(ErrorKind::Layout(format!(
                "item of {size} bytes ends past 4 GiB in a data file of {}",
                self.name
            ))));
        }
        let p = self.data_path(self.head_id);
        self.head.write_all(data).map_err(io_err(&p))?;
        self.head_bytes = end;
        let mut entry = [0u8; 6];
        entry[..2].copy_from_slice(&(self.head_id as u16).to_be_bytes());
        entry[2..].copy_from_slice(&(end as u32).to_be_bytes());
        let ip = self.index_path();
        self.index.write_all(&entry).map_err(io_err(&ip))?;
        self.index_len += 6;
        Ok(())
    }

    fn finish(mut self, version: FreezerVersion) -> Result<()> {
        self.finish_head()?;
        let ip = self.index_path();
        self.index.flush().map_err(io_err(&ip))?;
        self.index.get_ref().sync_all().map_err(io_err(&ip))?;
        let mut meta = Vec::new();
        match version {
            FreezerVersion::V1_10 => {
                alloy_rlp::Header {
                    list: true,
                    payload_length: 1u16.length() + 0u64.length(),
                }
                .encode(&mut meta);
                1u16.encode(&mut meta);
                0u64.encode(&mut meta);
            }
            FreezerVersion::V1_15 | FreezerVersion::V1_17 => {
                alloy_rlp::Header {
                    list: true,
                    payload_length: 2u16.length() + 0u64.length() + self.index_len.length(),
                }
                .encode(&mut meta);
                2u16.encode(&mut meta);
                0u64.encode(&mut meta);
                self.index_len.encode(&mut meta);
            }
        }
        let mp = self.dir.join(format!("{}.meta", self.name));
        let mut f = File::create(&mp).map_err(io_err(&mp))?;
        f.write_all(&meta).map_err(io_err(&mp))?;
        f.sync_all().map_err(io_err(&mp))
    }
}

fn data_path(dir: &Path, name: &str, compressed: bool, n: u32) -> PathBuf {
    let ext = if compressed { 'c' } else { 'r' };
    dir.join(format!("{name}.{n:04}.{ext}dat"))
}

fn open_data(p: &Path) -> Result<BufWriter<File>> {
    Ok(BufWriter::with_capacity(
        1 << 20,
        File::create(p).map_err(io_err(p))?,
    ))
}

/// One frozen block as the chain tables store it.
#[derive(Debug, Clone, Copy)]
pub struct FreezerBlock<'a> {
    pub number: u64,
    pub hash: B256,
    /// Header RLP, exactly as hashed.
    pub header: &'a [u8],
    /// Body RLP.
    pub body: &'a [u8],
    /// Storage-form receipts RLP (`[status, cumulativeGas, logs]` per receipt).
    pub receipts: &'a [u8],
    /// Total difficulty including this block (the `diffs` table of [`FreezerVersion::V1_10`]).
    pub td: Option<U256>,
}

/// Writes a new chain freezer directory (the `chain/` folder of geth's `ancient/`).
pub struct FreezerWriter {
    dir: PathBuf,
    version: FreezerVersion,
    tables: Vec<TableWriter>,
    next: u64,
}

const HASHES: usize = 0;
const HEADERS: usize = 1;
const BODIES: usize = 2;
const RECEIPTS: usize = 3;
const EXTRA: usize = 4;

impl FreezerWriter {
    /// Create the tables in `dir` (made if missing; existing tables are refused).
    pub fn create(dir: impl AsRef<Path>, opts: FreezerOptions) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        let max = opts.max_file_size.max(1);
        let mut tables = vec![
            TableWriter::create(&dir, "hashes", false, max)?,
            TableWriter::create(&dir, "headers", true, max)?,
            TableWriter::create(&dir, "bodies", true, max)?,
            TableWriter::create(&dir, "receipts", true, max)?,
        ];
        match opts.version {
            FreezerVersion::V1_10 => tables.push(TableWriter::create(&dir, "diffs", false, max)?),
            FreezerVersion::V1_15 => {}
            FreezerVersion::V1_17 => tables.push(TableWriter::create(&dir, "bals", true, max)?),
        }
        Ok(FreezerWriter {
            dir,
            version: opts.version,
            tables,
            next: 0,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
    /// Blocks written so far (the next block number).
    pub fn items(&self) -> u64 {
        self.next
    }

    /// Append the next block (numbers start at 0 and are consecutive).
    pub fn append(&mut self, b: &FreezerBlock<'_>) -> Result<()> {
        if b.number != self.next {
            return Err(Error::new(ErrorKind::Layout(format!(
                "block {} appended where {} is next",
                b.number, self.next
            )))
            .for_block(b.number));
        }
        let located = |e: Error| e.for_block(b.number);
        self.tables[HASHES].append(&b.hash[..]).map_err(located)?;
        self.tables[HEADERS].append(b.header).map_err(located)?;
        self.tables[BODIES].append(b.body).map_err(located)?;
        self.tables[RECEIPTS].append(b.receipts).map_err(located)?;
        match self.version {
            FreezerVersion::V1_10 => {
                let td = b.td.ok_or_else(|| {
                    Error::new(ErrorKind::Layout(
                        "the v1.10 freezer layout stores total difficulty; none given".into(),
                    ))
                    .for_block(b.number)
                })?;
                let mut enc = Vec::with_capacity(33);
                td.encode(&mut enc);
                self.tables[EXTRA].append(&enc).map_err(located)?;
            }
            FreezerVersion::V1_15 => {}
            FreezerVersion::V1_17 => self.tables[EXTRA].append(&[]).map_err(located)?,
        }
        self.next += 1;
        Ok(())
    }

    /// Flush and sync every table, then write the `.meta` files. Returns the item count.
    pub fn finish(self) -> Result<u64> {
        for t in self.tables {
            t.finish(self.version)?;
        }
        if let Ok(d) = File::open(&self.dir) {
            let _ = d.sync_all();
        }
        Ok(self.next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eth::freezer::Freezer;

    fn fixture() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/data/ethereum/geth-freezer-devchain")
    }

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rechain-fzw-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn listing(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    }

    fn copy_blocks(src: &Freezer, dst: &mut FreezerWriter) {
        for n in 0..src.head() {
            let (header, body, receipts) = (
                src.header(n).unwrap(),
                src.body(n).unwrap(),
                src.receipts(n).unwrap(),
            );
            dst.append(&FreezerBlock {
                number: n,
                hash: src.hash(n).unwrap(),
                header: &header,
                body: &body,
                receipts: &receipts,
                td: src.total_difficulty(n).unwrap(),
            })
            .unwrap();
        }
    }

    /// Blocks 0..5 of geth's own dev-chain freezer, re-written in its layout (v1.10..v1.14:
    /// meta v1, diffs): every file, index, data and meta, equals geth's.
    #[test]
    fn rewrites_geth_fixture_byte_identically() {
        let src = Freezer::open(fixture()).unwrap();
        let d = scratch("fixture");
        let mut w = FreezerWriter::create(
            &d,
            FreezerOptions {
                version: FreezerVersion::V1_10,
                max_file_size: MAX_FILE_SIZE,
            },
        )
        .unwrap();
        copy_blocks(&src, &mut w);
        assert_eq!(w.finish().unwrap(), 6);
        assert_eq!(listing(&d), listing(&fixture()));
        for name in listing(&d) {
            assert_eq!(
                std::fs::read(d.join(&name)).unwrap(),
                std::fs::read(fixture().join(&name)).unwrap(),
                "{name}"
            );
        }
        std::fs::remove_dir_all(d).unwrap();
    }

    /// The current layout with tiny data files: items move to the next file rather than span
    /// two, metas are v2 with the index length, and our reader reads everything back.
    #[test]
    fn current_layout_small_files_read_back() {
        let src = Freezer::open(fixture()).unwrap();
        let d = scratch("small");
        let mut w = FreezerWriter::create(
            d.join("chain"),
            FreezerOptions {
                version: FreezerVersion::V1_17,
                max_file_size: 500,
            },
        )
        .unwrap();
        copy_blocks(&src, &mut w);
        w.finish().unwrap();
        let f = Freezer::open(&d).unwrap();
        assert_eq!(f.layout(), crate::eth::freezer::Layout::Chain);
        assert_eq!(f.check_lengths().unwrap(), 6);
        assert!(f.diffs.is_none());
        // headers: ~300 bytes each compressed → one item per 500-byte file.
        let files = listing(&d.join("chain"));
        assert!(
            files.contains(&"headers.0005.cdat".to_string()),
            "{files:?}"
        );
        assert!(files.contains(&"bals.cidx".to_string()));
        for n in 0..6 {
            assert_eq!(f.header(n).unwrap(), src.header(n).unwrap());
            assert_eq!(f.body(n).unwrap(), src.body(n).unwrap());
            assert_eq!(f.receipts(n).unwrap(), src.receipts(n).unwrap());
            assert_eq!(f.hash(n).unwrap(), src.hash(n).unwrap());
        }
        let m = f.headers.meta().unwrap();
        assert_eq!(
            (m.version, m.virtual_tail, m.flush_offset),
            (2, 0, Some(42))
        );
        assert_eq!(
            std::fs::read(d.join("chain/bals.0000.cdat")).unwrap(),
            vec![0u8; 6]
        );
        // Existing tables are never overwritten.
        assert!(FreezerWriter::create(d.join("chain"), FreezerOptions::default()).is_err());
        std::fs::remove_dir_all(d).unwrap();
    }
}
