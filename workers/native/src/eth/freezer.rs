//! geth's freezer ("ancient" store), read-only (spec §1).
//!
//! Owns: finding the chain freezer in both layouts ([`resolve_chain_dir`]: `<ancient>/chain/`
//! from geth v1.10.22, the legacy flat `<ancient>/` before), the 6-byte index entries
//! (entry 0 = tail file and deleted-item count), the `.meta` file (absent, v1, v2 with flush
//! offset), the placement rule (an item never spans two data files), raw (`.ridx/.rdat`) and
//! snappy-block (`.cidx/.cdat`) tables, and the table head (minimum item count over the chain
//! tables, `diffs` ignored).
//!
//! Files are opened with `File::open` only: nothing is created, truncated, repaired or locked
//! (geth's read-write open would truncate; its `FLOCK` is left alone). Index bytes beyond a v2
//! `flushOffset` are ignored (they may reference unflushed data). Every inconsistency is an
//! [`Error`] naming the table file and item.

use super::error::{Error, ErrorKind, Result};
use super::snappy;
use alloy_primitives::{B256, U256};
use alloy_rlp::Decodable;
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Size of an index entry.
pub const INDEX_ENTRY_SIZE: u64 = 6;

/// Where the chain tables were found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `<ancient>/chain/` (geth ≥ v1.10.22).
    Chain,
    /// Tables directly in `<ancient>/` (geth < v1.10.22).
    Legacy,
}

/// geth's `resolveChainFreezerDir`: `<ancient>/chain` if it exists, else `<ancient>` itself if it
/// holds chain tables. (An empty or missing directory is not a freezer for a reader.)
pub fn resolve_chain_dir(ancient: &Path) -> Result<(PathBuf, Layout)> {
    let chain = ancient.join("chain");
    if chain.is_dir() {
        return Ok((chain, Layout::Chain));
    }
    let has_tables = ["headers.cidx", "headers.ridx", "hashes.ridx"]
        .iter()
        .any(|f| ancient.join(f).is_file());
    if has_tables {
        return Ok((ancient.to_path_buf(), Layout::Legacy));
    }
    Err(Error::new(ErrorKind::NotAFreezer(format!(
        "neither {}/chain/ nor chain tables in {}",
        ancient.display(),
        ancient.display()
    )))
    .in_file(ancient))
}

/// Decoded `<table>.meta`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    pub version: u16,
    /// Items logically deleted from the tail.
    pub virtual_tail: u64,
    /// v2: byte length of the index known to be flushed with its data.
    pub flush_offset: Option<u64>,
}

/// Decode the first RLP value of a `.meta` file (trailing bytes are ignored, as geth does).
pub fn decode_meta(bytes: &[u8]) -> Result<Meta> {
    let bad = |s: String| Error::new(ErrorKind::BadMeta(s));
    let mut buf = bytes;
    let h = alloy_rlp::Header::decode(&mut buf).map_err(|e| bad(e.to_string()))?;
    if !h.list || buf.len() < h.payload_length {
        return Err(bad("not an RLP list".into()));
    }
    let mut p = &buf[..h.payload_length];
    let version = u16::decode(&mut p).map_err(|e| bad(format!("version: {e}")))?;
    let virtual_tail = u64::decode(&mut p).map_err(|e| bad(format!("virtual tail: {e}")))?;
    let flush_offset = match version {
        1 => None,
        2 => Some(u64::decode(&mut p).map_err(|e| bad(format!("flush offset: {e}")))?),
        v => return Err(bad(format!("unknown version {v}"))),
    };
    if !p.is_empty() {
        return Err(bad(format!("version {version} with extra fields")));
    }
    Ok(Meta {
        version,
        virtual_tail,
        flush_offset,
    })
}

/// One index entry: data file number and end offset (entry 0: tail file, deleted items).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    pub filenum: u32,
    pub offset: u32,
}

impl IndexEntry {
    pub fn decode(b: &[u8]) -> IndexEntry {
        IndexEntry {
            filenum: u16::from_be_bytes([b[0], b[1]]) as u32,
            offset: u32::from_be_bytes([b[2], b[3], b[4], b[5]]),
        }
    }
}

/// One freezer table, its index in memory, data files opened on demand.
#[derive(Debug)]
pub struct Table {
    name: String,
    dir: PathBuf,
    compressed: bool,
    entries: Vec<IndexEntry>,
    meta: Option<Meta>,
    ignored_index_bytes: u64,
    files: Mutex<HashMap<u32, Arc<(File, u64)>>>,
    /// The bytes of the items after the last one read, when it was read in order.
    ahead: Mutex<Span>,
}

/// Stored bytes of consecutive items `first..` read in one go: `data[i]` starts at offset
/// `start` of data file `filenum`.
#[derive(Debug, Default)]
struct Span {
    filenum: u32,
    start: u64,
    data: Vec<u8>,
    /// The item after the last one retrieved, for telling an in-order walk.
    next_item: u64,
}

/// An in-order walk reads up to this many items' bytes at once (one read instead of one per
/// item), but never more than `READ_AHEAD_BYTES` beyond the item asked for.
const READ_AHEAD_ITEMS: usize = 64;
const READ_AHEAD_BYTES: u64 = 1 << 20;

impl Table {
    /// Open table `name` in `dir`; `Ok(None)` if it has no index file.
    pub fn open(dir: &Path, name: &str) -> Result<Option<Table>> {
        let (idx_path, compressed) = {
            let c = dir.join(format!("{name}.cidx"));
            let r = dir.join(format!("{name}.ridx"));
            if c.is_file() {
                (c, true)
            } else if r.is_file() {
                (r, false)
            } else {
                return Ok(None);
            }
        };
        let meta_path = dir.join(format!("{name}.meta"));
        let meta = match std::fs::read(&meta_path) {
            Ok(b) => Some(decode_meta(&b).map_err(|e| e.in_file(&meta_path))?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(Error::io(&meta_path, e)),
        };
        let mut index = std::fs::read(&idx_path).map_err(|e| Error::io(&idx_path, e))?;
        let mut ignored = 0;
        if let Some(flush) = meta.and_then(|m| m.flush_offset) {
            // The tail entry is always valid (a fresh v2 meta says 0 until geth's first repair).
            let keep = flush.max(INDEX_ENTRY_SIZE);
            if (index.len() as u64) > keep {
                ignored = index.len() as u64 - keep;
                index.truncate(keep as usize);
            }
        }
        let bad = |s: String, off: u64| Error::at(ErrorKind::BadIndex(s), off).in_file(&idx_path);
        if !(index.len() as u64).is_multiple_of(INDEX_ENTRY_SIZE) {
            return Err(bad(
                format!(
                    "{} bytes is not a whole number of 6-byte entries",
                    index.len()
                ),
                index.len() as u64 / INDEX_ENTRY_SIZE * INDEX_ENTRY_SIZE,
            ));
        }
        if index.is_empty() {
            return Err(bad("empty index (no tail entry)".into(), 0));
        }
        let entries: Vec<IndexEntry> = index.chunks(6).map(IndexEntry::decode).collect();
        // geth checkIndex / checkIndexItems.
        if entries.len() > 1 {
            let (t, f1) = (entries[0].filenum, entries[1].filenum);
            if f1 != t && f1 != t + 1 {
                return Err(bad(format!("entry 1 in file {f1}, tail file is {t}"), 6));
            }
        }
        for k in 2..entries.len() {
            let (a, b) = (entries[k - 1], entries[k]);
            let ok = if b.filenum == a.filenum {
                b.offset >= a.offset
            } else {
                b.filenum == a.filenum + 1 && b.offset != 0
            };
            if !ok {
                return Err(bad(
                    format!(
                        "entry {k} ({}, {}) cannot follow ({}, {})",
                        b.filenum, b.offset, a.filenum, a.offset
                    ),
                    k as u64 * INDEX_ENTRY_SIZE,
                ));
            }
        }
        let t = Table {
            name: name.to_string(),
            dir: dir.to_path_buf(),
            compressed,
            entries,
            meta,
            ignored_index_bytes: ignored,
            files: Mutex::new(HashMap::new()),
            ahead: Mutex::new(Span::default()),
        };
        if let Some(m) = meta {
            if m.virtual_tail < t.item_offset() {
                return Err(Error::new(ErrorKind::BadMeta(format!(
                    "virtual tail {} below the {} items deleted",
                    m.virtual_tail,
                    t.item_offset()
                )))
                .in_file(meta_path));
            }
        }
        Ok(Some(t))
    }

    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn compressed(&self) -> bool {
        self.compressed
    }
    pub fn meta(&self) -> Option<Meta> {
        self.meta
    }
    /// Index entries as read (entry 0 first).
    pub fn entries(&self) -> &[IndexEntry] {
        &self.entries
    }
    /// Index bytes ignored because they lie beyond the v2 flush offset.
    pub fn ignored_index_bytes(&self) -> u64 {
        self.ignored_index_bytes
    }
    /// Items deleted from the tail (index entry 0's offset).
    pub fn item_offset(&self) -> u64 {
        self.entries[0].offset as u64
    }
    /// First readable item: `max(itemOffset, virtualTail)`.
    pub fn tail(&self) -> u64 {
        self.item_offset()
            .max(self.meta.map(|m| m.virtual_tail).unwrap_or(0))
    }
    /// Item count, deleted items included.
    pub fn items(&self) -> u64 {
        self.item_offset() + self.entries.len() as u64 - 1
    }

    fn index_path(&self) -> PathBuf {
        self.dir.join(format!(
            "{}.{}idx",
            self.name,
            if self.compressed { 'c' } else { 'r' }
        ))
    }

    /// Path of data file `n`.
    pub fn data_path(&self, n: u32) -> PathBuf {
        self.dir.join(format!(
            "{}.{:04}.{}dat",
            self.name,
            n,
            if self.compressed { 'c' } else { 'r' }
        ))
    }

    fn data_file(&self, n: u32) -> Result<Arc<(File, u64)>> {
        let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = files.get(&n) {
            return Ok(f.clone());
        }
        let path = self.data_path(n);
        let f = File::open(&path).map_err(|e| Error::io(&path, e))?;
        let len = f.metadata().map_err(|e| Error::io(&path, e))?.len();
        let f = Arc::new((f, len));
        files.insert(n, f.clone());
        Ok(f)
    }

    /// The stored bytes of item `n` (snappy-decoded for compressed tables).
    pub fn retrieve(&self, n: u64) -> Result<Vec<u8>> {
        let (tail, items) = (self.tail(), self.items());
        if n < tail || n >= items {
            return Err(Error::new(ErrorKind::OutOfRange {
                number: n,
                first: tail,
                end: items,
            })
            .in_file(self.index_path())
            .for_block(n));
        }
        let k = (n - self.item_offset()) as usize;
        let end = self.entries[k + 1];
        let mut start = if k == 0 {
            IndexEntry {
                filenum: end.filenum,
                offset: 0,
            }
        } else {
            self.entries[k]
        };
        if start.filenum != end.filenum {
            start = IndexEntry {
                filenum: end.filenum,
                offset: 0,
            };
        }
        let path = self.data_path(end.filenum);
        let f = self.data_file(end.filenum)?;
        let (file, data_len) = (&f.0, f.1);
        if end.offset as u64 > data_len {
            return Err(Error::at(
                ErrorKind::IndexPastData {
                    data_len,
                    end: end.offset as u64,
                },
                (k as u64 + 1) * INDEX_ENTRY_SIZE,
            )
            .in_file(self.index_path())
            .for_block(n));
        }
        let buf = self
            .read_item(k, n, start, end, file, data_len)
            .map_err(|e| {
                Error::io(&path, e)
                    .at_offset(start.offset as u64)
                    .for_block(n)
            })?;
        if self.compressed {
            snappy::decode_raw(&buf)
                .map_err(|e| e.in_file(path).at_offset(start.offset as u64).for_block(n))
        } else {
            Ok(buf)
        }
    }
}

impl Table {
    /// The stored bytes of item `n` (index position `k`, at `start..end` of its data file).
    /// Read in order, the items after it in the same file come along (up to
    /// `READ_AHEAD_ITEMS`, within `READ_AHEAD_BYTES` and the file's length) and the next
    /// items are served from them; read out of order, it is read alone.
    fn read_item(
        &self,
        k: usize,
        n: u64,
        start: IndexEntry,
        end: IndexEntry,
        file: &File,
        data_len: u64,
    ) -> std::io::Result<Vec<u8>> {
        let (lo, hi) = (start.offset as u64, end.offset as u64);
        let mut ahead = self.ahead.lock().unwrap_or_else(|p| p.into_inner());
        let in_order = ahead.next_item == n;
        ahead.next_item = n + 1;
        if in_order && ahead.filenum == end.filenum {
            let have = ahead.start..ahead.start + ahead.data.len() as u64;
            if have.contains(&lo) && hi <= have.end {
                let at = (lo - ahead.start) as usize;
                return Ok(ahead.data[at..at + (hi - lo) as usize].to_vec());
            }
        }
        let mut stop = hi;
        if in_order {
            // Later items of the same file, all within the file as it stands (an entry past
            // its end is reported when that item is read).
            let last = (k + READ_AHEAD_ITEMS).min(self.entries.len() - 1);
            for e in &self.entries[k + 1..=last] {
                let e_end = e.offset as u64;
                if e.filenum != end.filenum || e_end > data_len || e_end - lo > READ_AHEAD_BYTES {
                    break;
                }
                stop = e_end;
            }
        }
        let mut buf = vec![0u8; (stop - lo) as usize];
        if let Err(e) = file.read_exact_at(&mut buf, lo) {
            if stop == hi {
                return Err(e);
            }
            // A failure in the items after it is theirs to report: read this one alone.
            let mut item = vec![0u8; (hi - lo) as usize];
            file.read_exact_at(&mut item, lo)?;
            return Ok(item);
        }
        if stop == hi {
            return Ok(buf);
        }
        let item = buf[..(hi - lo) as usize].to_vec();
        *ahead = Span {
            filenum: end.filenum,
            start: lo,
            data: buf,
            next_item: n + 1,
        };
        Ok(item)
    }
}

/// The chain freezer: `hashes`, `headers`, `bodies`, `receipts` and, if present, `diffs`.
#[derive(Debug)]
pub struct Freezer {
    dir: PathBuf,
    layout: Layout,
    pub hashes: Table,
    pub headers: Table,
    pub bodies: Table,
    pub receipts: Table,
    /// Total difficulties (geth < v1.15.0); may be shorter than the others.
    pub diffs: Option<Table>,
}

impl Freezer {
    /// Open the chain freezer under `ancient` (`<datadir>/geth/chaindata/ancient`), or a
    /// directory that holds the chain tables itself.
    pub fn open(ancient: impl AsRef<Path>) -> Result<Self> {
        let (dir, layout) = resolve_chain_dir(ancient.as_ref())?;
        let need = |name: &str| -> Result<Table> {
            Table::open(&dir, name)?.ok_or_else(|| {
                Error::new(ErrorKind::ShortTable {
                    table: name.to_string(),
                    items: 0,
                    need: 1,
                })
                .in_file(dir.join(format!("{name}.*idx")))
            })
        };
        Ok(Freezer {
            hashes: need("hashes")?,
            headers: need("headers")?,
            bodies: need("bodies")?,
            receipts: need("receipts")?,
            diffs: Table::open(&dir, "diffs")?,
            dir,
            layout,
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
    pub fn layout(&self) -> Layout {
        self.layout
    }

    fn chain_tables(&self) -> [&Table; 4] {
        [&self.hashes, &self.headers, &self.bodies, &self.receipts]
    }

    /// Blocks `0..head` are frozen: the minimum item count of the chain tables.
    pub fn head(&self) -> u64 {
        self.chain_tables()
            .iter()
            .map(|t| t.items())
            .min()
            .unwrap_or(0)
    }

    /// geth's read-only check: all chain tables hold the same number of items. The error names
    /// the first table shorter than the longest.
    pub fn check_lengths(&self) -> Result<u64> {
        let max = self
            .chain_tables()
            .iter()
            .map(|t| t.items())
            .max()
            .unwrap_or(0);
        for t in self.chain_tables() {
            if t.items() < max {
                return Err(Error::new(ErrorKind::ShortTable {
                    table: t.name().to_string(),
                    items: t.items(),
                    need: max,
                })
                .in_file(t.index_path()));
            }
        }
        Ok(max)
    }

    /// Canonical hash of block `n` (the `hashes` table).
    pub fn hash(&self, n: u64) -> Result<B256> {
        let b = self.hashes.retrieve(n)?;
        if b.len() != 32 {
            return Err(
                Error::new(ErrorKind::Layout(format!("hash item of {} bytes", b.len())))
                    .in_file(self.hashes.index_path())
                    .for_block(n),
            );
        }
        Ok(B256::from_slice(&b))
    }
    /// Header RLP of block `n`.
    pub fn header(&self, n: u64) -> Result<Vec<u8>> {
        self.headers.retrieve(n)
    }
    /// Body RLP of block `n`.
    pub fn body(&self, n: u64) -> Result<Vec<u8>> {
        self.bodies.retrieve(n)
    }
    /// Storage-form receipts RLP of block `n`.
    pub fn receipts(&self, n: u64) -> Result<Vec<u8>> {
        self.receipts.retrieve(n)
    }
    /// Total difficulty of block `n` from `diffs`, `None` if the table is absent or ends earlier.
    pub fn total_difficulty(&self, n: u64) -> Result<Option<U256>> {
        let Some(d) = &self.diffs else {
            return Ok(None);
        };
        if n >= d.items() {
            return Ok(None);
        }
        let raw = d.retrieve(n)?;
        let mut b = &raw[..];
        let td = U256::decode(&mut b).map_err(|e| {
            Error::rlp("total difficulty", e)
                .in_file(d.index_path())
                .for_block(n)
        })?;
        Ok(Some(td))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_vectors() {
        // Spec §1.7 [computed] examples.
        let m = decode_meta(&[0xc3, 0x02, 0x80, 0x80]).unwrap();
        assert_eq!((m.version, m.virtual_tail, m.flush_offset), (2, 0, Some(0)));
        let m = decode_meta(&[0xc3, 0x02, 0x04, 0x12, 0xff]).unwrap();
        assert_eq!(
            (m.version, m.virtual_tail, m.flush_offset),
            (2, 4, Some(18))
        );
        let m = decode_meta(&[0xc2, 0x01, 0x64]).unwrap();
        assert_eq!((m.version, m.virtual_tail, m.flush_offset), (1, 100, None));
        assert!(matches!(
            decode_meta(&[0xc2, 0x03, 0x64]).unwrap_err().kind,
            ErrorKind::BadMeta(_)
        ));
    }

    /// A raw table of `items` in `dir`, a new data file every `per_file` items.
    fn write_table(dir: &Path, items: &[Vec<u8>], per_file: usize) {
        std::fs::create_dir_all(dir).unwrap();
        let mut index = vec![0u8; 6]; // the tail entry: file 0, no item deleted
        let (mut filenum, mut files) = (0u16, vec![Vec::new()]);
        for (i, item) in items.iter().enumerate() {
            if i > 0 && i % per_file == 0 {
                files.push(Vec::new());
                filenum += 1;
            }
            let data = files.last_mut().unwrap();
            data.extend_from_slice(item);
            index.extend_from_slice(&filenum.to_be_bytes());
            index.extend_from_slice(&(data.len() as u32).to_be_bytes());
        }
        std::fs::write(dir.join("t.ridx"), index).unwrap();
        for (n, data) in files.iter().enumerate() {
            std::fs::write(dir.join(format!("t.{n:04}.rdat")), data).unwrap();
        }
    }

    #[test]
    fn items_read_ahead_equal_items_read_alone() {
        let dir = std::env::temp_dir().join(format!("rechain-freezer-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let items: Vec<Vec<u8>> = (0..200u32)
            .map(|i| (0..i * 37 % 900).map(|b| (b ^ i) as u8).collect())
            .collect();
        write_table(&dir, &items, 80);
        let t = Table::open(&dir, "t").unwrap().unwrap();
        // The first item read in order brings the next 63 along.
        t.retrieve(0).unwrap();
        let ahead: usize = items[..READ_AHEAD_ITEMS].iter().map(Vec::len).sum();
        assert_eq!(t.ahead.lock().unwrap().data.len(), ahead);
        // In order (read ahead, across the data files' ends), backwards (each alone), and in
        // order again after jumps.
        let walks: [Vec<u64>; 3] = [
            (0..200).collect(),
            (0..200).rev().collect(),
            (50..120).chain(10..20).chain(150..200).collect(),
        ];
        for walk in walks {
            for n in walk {
                assert_eq!(t.retrieve(n).unwrap(), items[n as usize], "item {n}");
            }
        }
        // The last data file cut short: the items it still holds read, the first one past
        // its end is reported as that item's, whatever was read ahead before it.
        let last = dir.join("t.0002.rdat");
        let len = std::fs::metadata(&last).unwrap().len();
        let f = std::fs::OpenOptions::new().write(true).open(&last).unwrap();
        f.set_len(len - 700).unwrap();
        let t = Table::open(&dir, "t").unwrap().unwrap();
        let mut first_bad = None;
        for n in 150..200 {
            match t.retrieve(n) {
                Ok(got) => assert_eq!(got, items[n as usize], "item {n}"),
                Err(e) => {
                    assert!(matches!(e.kind, ErrorKind::IndexPastData { .. }), "{e}");
                    first_bad.get_or_insert(n);
                }
            }
        }
        let cut: u64 = items[..200].iter().map(|i| i.len() as u64).sum::<u64>()
            - items[..160].iter().map(|i| i.len() as u64).sum::<u64>()
            - 700;
        let mut end = 0;
        let first_past = (160..200u64)
            .find(|&n| {
                end += items[n as usize].len() as u64;
                end > cut
            })
            .unwrap();
        assert_eq!(first_bad, Some(first_past));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn index_entry_vectors() {
        // Spec §4.5.
        let e = IndexEntry::decode(&[0x00, 0x02, 0x00, 0x00, 0x00, 0x14]);
        assert_eq!((e.filenum, e.offset), (2, 20));
    }
}
