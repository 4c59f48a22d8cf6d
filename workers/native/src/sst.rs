//! RocksDB external SST files (block-based table, `format_version` 2), written from sorted
//! key/value runs for `IngestExternalFile`: the bulk-load path of every column family that a
//! stage rebuilds whole (tx index, block index, Flow registers, Ethereum header index).
//!
//! What RocksDB's own `SstFileWriter` writes, minus what ingestion does not read:
//!
//! ```text
//! file       data block* | properties block | metaindex block | index block | footer (53)
//! block      entry* | restart offset u32 LE* | restart count u32 LE
//!            trailer: compression type u8 (0 none, 1 snappy) | masked crc32c u32 LE of the
//!            stored block bytes and the type byte
//! entry      shared varint32 | unshared varint32 | value length varint32 | key suffix | value
//! data key   internal key: user key | (sequence 0 << 8 | type 1 = value) u64 LE
//! index      one entry per data block: its last internal key -> block handle
//!            (offset varint64 | size varint64, size without the trailer)
//! metaindex  "fullfilter.rocksdb.BuiltinBloomFilter" -> filter block handle,
//!            "rocksdb.properties" -> properties block handle
//! filter     RocksDB's FastLocalBloom over the user keys: bits in 64-byte cache lines |
//!            metadata 0xff, 0 (this implementation), probes u8, 0, 0 (stored uncompressed)
//! properties sorted names -> varint64 numbers, fixed-width external-file fields, strings
//! footer     checksum type u8 (1 = crc32c) | metaindex handle | index handle | zero padding
//!            to 41 bytes | format version u32 LE | magic u64 LE
//! ```
//!
//! The reader that checks these files is RocksDB itself: `tests/test_sst.py` ingests them into
//! a real database and reads every entry back.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

/// `kBlockBasedTableMagicNumber`.
const MAGIC: u64 = 0x88e2_41b7_85f4_cff7;
/// Oldest format every RocksDB since 2015 reads and current ones still write; later versions
/// change the footer and index encodings, which buys ingestion nothing.
const FORMAT_VERSION: u32 = 2;
const CHECKSUM_CRC32C: u8 = 1;
const NO_COMPRESSION: u8 = 0;
const SNAPPY_COMPRESSION: u8 = 1;
/// Bytes buffered before a write to the file: large enough that writes cost nothing, small
/// beside a memory budget (files close at a share of it, see [`SstFiles`]).
const WRITE_BUFFER: usize = 256 << 10;
/// RocksDB's defaults: `block_size` and `block_restart_interval`.
const BLOCK_SIZE: usize = 4096;
const RESTART_INTERVAL: usize = 16;
const BLOCK_TRAILER: u64 = 5;
const FOOTER_LEN: usize = 53;
/// Sequence 0, type `kTypeValue`: what `SstFileWriter` stamps on every entry.
const VALUE_TRAILER: [u8; 8] = 1u64.to_le_bytes();
/// `TablePropertiesCollectorFactory::Context::kUnknownColumnFamily`: the file is not tied to
/// one column family, as `SstFileWriter` without a handle writes it.
const UNKNOWN_COLUMN_FAMILY: u64 = i32::MAX as u64;
/// `SstFileWriter`'s external-file layout: ingestion refuses files without it.
const EXTERNAL_FILE_VERSION: u32 = 2;
/// Where a reader whose column family has a Bloom filter policy (`pipeline/store.py`) finds
/// the filter: `fullfilter.` + `BuiltinFilterPolicy::CompatibilityName()`.
const FILTER_BLOCK_NAME: &[u8] = b"fullfilter.rocksdb.BuiltinBloomFilter";
/// The store's filter policy: 10 bits a key, about 1% false positives. Lookups of absent keys
/// (new txids checked against the tx index) then skip the data block read.
const FILTER_MILLIBITS_PER_KEY: u64 = 10_000;

#[derive(Debug)]
pub enum SstError {
    Io(io::Error),
    /// Keys must arrive strictly increasing (RocksDB cannot hold two entries of one key).
    Unsorted {
        entry: u64,
    },
}

impl std::fmt::Display for SstError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SstError::Io(e) => write!(f, "{e}"),
            SstError::Unsorted { entry } => write!(
                f,
                "entry {entry}: keys must be strictly increasing (a key equal to or below the one before it)"
            ),
        }
    }
}

impl From<io::Error> for SstError {
    fn from(e: io::Error) -> Self {
        SstError::Io(e)
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Prefix-compressed entries with a restart point every `interval` entries.
struct BlockBuilder {
    buf: Vec<u8>,
    restarts: Vec<u32>,
    since_restart: usize,
    interval: usize,
    last_key: Vec<u8>,
}

impl BlockBuilder {
    fn new(interval: usize) -> Self {
        BlockBuilder {
            buf: Vec::with_capacity(BLOCK_SIZE * 2),
            restarts: vec![0],
            since_restart: 0,
            interval,
            last_key: Vec::new(),
        }
    }

    fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    fn size(&self) -> usize {
        self.buf.len() + 4 * self.restarts.len() + 4
    }

    /// `key` is given in two pieces so an internal key needs no temporary buffer.
    fn add(&mut self, key: &[u8], key_tail: &[u8], value: &[u8]) {
        let shared = if self.since_restart == self.interval {
            self.restarts.push(self.buf.len() as u32);
            self.since_restart = 0;
            0
        } else {
            let full = key.iter().chain(key_tail);
            full.zip(&self.last_key).take_while(|(a, b)| a == b).count()
        };
        let key_len = key.len() + key_tail.len();
        put_varint(&mut self.buf, shared as u64);
        put_varint(&mut self.buf, (key_len - shared) as u64);
        put_varint(&mut self.buf, value.len() as u64);
        if shared < key.len() {
            self.buf.extend_from_slice(&key[shared..]);
            self.buf.extend_from_slice(key_tail);
        } else {
            self.buf.extend_from_slice(&key_tail[shared - key.len()..]);
        }
        self.buf.extend_from_slice(value);
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        self.last_key.extend_from_slice(key_tail);
        self.since_restart += 1;
    }

    /// The block's bytes; the builder starts over empty.
    fn finish(&mut self) -> Vec<u8> {
        let mut out = std::mem::take(&mut self.buf);
        for r in &self.restarts {
            out.extend_from_slice(&r.to_le_bytes());
        }
        out.extend_from_slice(&(self.restarts.len() as u32).to_le_bytes());
        self.buf = Vec::with_capacity(BLOCK_SIZE * 2);
        self.restarts = vec![0];
        self.since_restart = 0;
        self.last_key.clear();
        out
    }
}

/// Offset and size (without trailer) of a block in the file.
#[derive(Clone, Copy)]
struct BlockHandle {
    offset: u64,
    size: u64,
}

impl BlockHandle {
    fn encode(&self, out: &mut Vec<u8>) {
        put_varint(out, self.offset);
        put_varint(out, self.size);
    }
}

/// Streams strictly increasing keys into one SST file.
pub struct SstWriter {
    path: PathBuf,
    file: BufWriter<File>,
    offset: u64,
    compress: bool,
    data: BlockBuilder,
    index: BlockBuilder,
    compressed: Vec<u8>,
    last_user_key: Vec<u8>,
    entries: u64,
    raw_key_bytes: u64,
    raw_value_bytes: u64,
    data_blocks: u64,
    /// The hash of every user key, for the filter written at the end (RocksDB's builder keeps
    /// the same 8 bytes a key); `None` once a key too long to hash came.
    key_hashes: Option<Vec<u64>>,
}

impl SstWriter {
    /// `compress`: Snappy data blocks, each kept only when it shrinks by an eighth (RocksDB's
    /// rule); off for values that are mostly hashes.
    pub fn create(path: &Path, compress: bool) -> io::Result<Self> {
        Ok(SstWriter {
            path: path.to_path_buf(),
            file: BufWriter::with_capacity(WRITE_BUFFER, File::create(path)?),
            offset: 0,
            compress,
            data: BlockBuilder::new(RESTART_INTERVAL),
            index: BlockBuilder::new(1),
            compressed: Vec::new(),
            last_user_key: Vec::new(),
            entries: 0,
            raw_key_bytes: 0,
            raw_value_bytes: 0,
            data_blocks: 0,
            key_hashes: Some(Vec::new()),
        })
    }

    pub fn entries(&self) -> u64 {
        self.entries
    }

    /// Bytes held until the file closes, which grow with its entries: the keys' hashes for
    /// the filter (8 a key, as RocksDB's builder keeps) and the index block.
    pub fn held_bytes(&self) -> usize {
        self.key_hashes.as_ref().map_or(0, |h| 8 * h.len()) + self.index.size()
    }

    pub fn add(&mut self, key: &[u8], value: &[u8]) -> Result<(), SstError> {
        if self.entries > 0 && key <= self.last_user_key.as_slice() {
            return Err(SstError::Unsorted {
                entry: self.entries,
            });
        }
        self.data.add(key, &VALUE_TRAILER, value);
        if let Some(hashes) = &mut self.key_hashes {
            match xxph3_64(key) {
                Some(h) => hashes.push(h),
                None => self.key_hashes = None,
            }
        }
        self.last_user_key.clear();
        self.last_user_key.extend_from_slice(key);
        self.entries += 1;
        self.raw_key_bytes += (key.len() + VALUE_TRAILER.len()) as u64;
        self.raw_value_bytes += value.len() as u64;
        if self.data.size() >= BLOCK_SIZE {
            self.flush_data_block()?;
        }
        Ok(())
    }

    fn flush_data_block(&mut self) -> io::Result<()> {
        // The block's last key separates it from the next one (RocksDB would shorten it).
        let separator = std::mem::take(&mut self.data.last_key);
        let block = self.data.finish();
        let handle = self.write_block(&block, self.compress)?;
        let mut value = Vec::with_capacity(20);
        handle.encode(&mut value);
        self.index.add(&separator, &[], &value);
        self.data_blocks += 1;
        Ok(())
    }

    fn write_block(&mut self, raw: &[u8], compress: bool) -> io::Result<BlockHandle> {
        let mut kind = NO_COMPRESSION;
        if compress {
            let max = snap::raw::max_compress_len(raw.len());
            self.compressed.resize(max, 0);
            let n = snap::raw::Encoder::new()
                .compress(raw, &mut self.compressed)
                .map_err(io::Error::other)?;
            self.compressed.truncate(n);
            if n < raw.len() - raw.len() / 8 {
                kind = SNAPPY_COMPRESSION;
            }
        }
        let stored: &[u8] = if kind == SNAPPY_COMPRESSION {
            &self.compressed
        } else {
            raw
        };
        let crc = crc32c::crc32c_append(crc32c::crc32c(stored), &[kind]);
        let handle = BlockHandle {
            offset: self.offset,
            size: stored.len() as u64,
        };
        self.file.write_all(stored)?;
        self.file.write_all(&[kind])?;
        self.file.write_all(&mask_crc(crc).to_le_bytes())?;
        self.offset += stored.len() as u64 + BLOCK_TRAILER;
        Ok(handle)
    }

    /// Writes the meta blocks and footer. A file with no entries is removed (RocksDB refuses
    /// to ingest one); returns the entry count.
    pub fn finish(mut self) -> io::Result<u64> {
        if self.entries == 0 {
            drop(self.file);
            std::fs::remove_file(&self.path)?;
            return Ok(0);
        }
        if !self.data.is_empty() {
            self.flush_data_block()?;
        }
        let data_size = self.offset;
        let index = self.index.finish();
        let filter = self.key_hashes.take().map(|hashes| bloom_filter(&hashes));
        let filter_handle = match &filter {
            Some(block) => Some(self.write_block(block, false)?),
            None => None,
        };
        let properties = self.properties(
            data_size,
            index.len() as u64 + BLOCK_TRAILER,
            filter.as_ref().map(|f| f.len() as u64),
        );
        let properties_handle = self.write_block(&properties, false)?;
        // Meta block names in byte order: "fullfilter..." sorts before "rocksdb...".
        let mut metaindex = BlockBuilder::new(1);
        let mut handle = Vec::new();
        if let Some(filter_handle) = filter_handle {
            filter_handle.encode(&mut handle);
            metaindex.add(FILTER_BLOCK_NAME, &[], &handle);
        }
        handle.clear();
        properties_handle.encode(&mut handle);
        metaindex.add(b"rocksdb.properties", &[], &handle);
        let metaindex_handle = self.write_block(&metaindex.finish(), false)?;
        let index_handle = self.write_block(&index, false)?;
        let mut footer = Vec::with_capacity(FOOTER_LEN);
        footer.push(CHECKSUM_CRC32C);
        metaindex_handle.encode(&mut footer);
        index_handle.encode(&mut footer);
        footer.resize(FOOTER_LEN - 12, 0);
        footer.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        footer.extend_from_slice(&MAGIC.to_le_bytes());
        self.file.write_all(&footer)?;
        self.file.flush()?;
        // Ingestion syncs the file: most of it is written by then.
        crate::writeback::start(self.file.get_ref());
        Ok(self.entries)
    }

    fn properties(&self, data_size: u64, index_size: u64, filter_size: Option<u64>) -> Vec<u8> {
        let number = |v: u64| {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            out
        };
        let compression: &[u8] = if self.compress {
            b"Snappy"
        } else {
            b"NoCompression"
        };
        let mut props: Vec<(&[u8], Vec<u8>)> = vec![
            (
                b"rocksdb.block.based.table.index.type",
                0u32.to_le_bytes().to_vec(), // binary search
            ),
            (b"rocksdb.column.family.id", number(UNKNOWN_COLUMN_FAMILY)),
            (
                b"rocksdb.comparator",
                b"leveldb.BytewiseComparator".to_vec(),
            ),
            (b"rocksdb.compression", compression.to_vec()),
            (b"rocksdb.data.size", number(data_size)),
            (
                b"rocksdb.external_sst_file.global_seqno",
                0u64.to_le_bytes().to_vec(),
            ),
            (
                b"rocksdb.external_sst_file.version",
                EXTERNAL_FILE_VERSION.to_le_bytes().to_vec(),
            ),
            (b"rocksdb.format.version", number(FORMAT_VERSION as u64)),
            (b"rocksdb.index.key.is.user.key", number(0)),
            (b"rocksdb.index.size", number(index_size)),
            (b"rocksdb.index.value.is.delta.encoded", number(0)),
            (b"rocksdb.num.data.blocks", number(self.data_blocks)),
            (b"rocksdb.num.entries", number(self.entries)),
            (b"rocksdb.raw.key.size", number(self.raw_key_bytes)),
            (b"rocksdb.raw.value.size", number(self.raw_value_bytes)),
        ];
        if let Some(size) = filter_size {
            let policy = &FILTER_BLOCK_NAME[b"fullfilter.".len()..];
            props.push((b"rocksdb.filter.policy", policy.to_vec()));
            props.push((b"rocksdb.filter.size", number(size)));
        }
        props.sort_by(|a, b| a.0.cmp(b.0));
        let mut block = BlockBuilder::new(usize::MAX);
        for (name, value) in &props {
            block.add(name, &[], value);
        }
        block.finish()
    }
}

/// XXPH3's default secret (the same bytes as XXH3's `kSecret`).
#[rustfmt::skip]
const XXPH3_SECRET: [u8; 192] = [
    0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,
    0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f,
    0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,
    0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c,
    0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3,
    0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8,
    0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d,
    0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64,
    0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb,
    0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e,
    0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce,
    0x45, 0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e,
];
const PRIME32_1: u64 = 0x9e37_79b1;
const PRIME64_1: u64 = 0x9e37_79b1_85eb_ca87;
const PRIME64_2: u64 = 0xc2b2_ae3d_27d4_eb4f;
const PRIME64_3: u64 = 0x1656_67b1_9e37_79f9;
/// Keys longer than this take XXPH3's long-input path, which is not ported: a file with such
/// a key gets no filter (RocksDB then reads its data blocks, as it did before filters).
const XXPH3_MIDSIZE_MAX: usize = 240;

fn read64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

fn read32(b: &[u8], at: usize) -> u64 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as u64
}

fn mul128_fold64(a: u64, b: u64) -> u64 {
    let p = a as u128 * b as u128;
    (p as u64) ^ ((p >> 64) as u64)
}

/// XXPH3's avalanche; XXH3's final release changed its multiplier, so the `xxh3` crates give
/// other hashes.
fn xxph3_avalanche(mut h: u64) -> u64 {
    h ^= h >> 37;
    h = h.wrapping_mul(PRIME64_3);
    h ^ (h >> 32)
}

fn xxph3_mix16(input: &[u8], at: usize, secret_at: usize) -> u64 {
    mul128_fold64(
        read64(input, at) ^ read64(&XXPH3_SECRET, secret_at),
        read64(input, at + 8) ^ read64(&XXPH3_SECRET, secret_at + 8),
    )
}

/// RocksDB's `GetSliceHash64`: XXPH3 (the XXH3 preview RocksDB vendors, `util/xxph3.h`), seed
/// 0, with RocksDB's change for the empty key; `None` past `XXPH3_MIDSIZE_MAX` bytes.
fn xxph3_64(input: &[u8]) -> Option<u64> {
    let s = &XXPH3_SECRET;
    let len = input.len();
    let h = match len {
        0 => mul128_fold64(read64(s, 0), PRIME64_2),
        1..=3 => {
            let combined = input[0] as u64
                | (input[len >> 1] as u64) << 8
                | (input[len - 1] as u64) << 16
                | (len as u64) << 24;
            xxph3_avalanche((combined ^ read32(s, 0)).wrapping_mul(PRIME64_1))
        }
        4..=8 => {
            let keyed = (read32(input, 0) | read32(input, len - 4) << 32) ^ read64(s, 0);
            let mix = (len as u64).wrapping_add((keyed ^ (keyed >> 51)).wrapping_mul(PRIME32_1));
            xxph3_avalanche((mix ^ (mix >> 47)).wrapping_mul(PRIME64_2))
        }
        9..=16 => {
            let lo = read64(input, 0) ^ read64(s, 0);
            let hi = read64(input, len - 8) ^ read64(s, 8);
            xxph3_avalanche(
                (len as u64)
                    .wrapping_add(lo.wrapping_add(hi))
                    .wrapping_add(mul128_fold64(lo, hi)),
            )
        }
        17..=128 => {
            let mut acc = (len as u64).wrapping_mul(PRIME64_1);
            // Pairs from both ends inwards: (0, len-16), (16, len-32), (32, len-48), (48, len-64).
            for i in 0..(len - 1) / 32 + 1 {
                acc = acc
                    .wrapping_add(xxph3_mix16(input, 16 * i, 32 * i))
                    .wrapping_add(xxph3_mix16(input, len - 16 * (i + 1), 32 * i + 16));
            }
            xxph3_avalanche(acc)
        }
        129..=XXPH3_MIDSIZE_MAX => {
            let mut acc = (len as u64).wrapping_mul(PRIME64_1);
            for i in 0..8 {
                acc = acc.wrapping_add(xxph3_mix16(input, 16 * i, 16 * i));
            }
            acc = xxph3_avalanche(acc);
            for i in 8..len / 16 {
                acc = acc.wrapping_add(xxph3_mix16(input, 16 * i, 16 * (i - 8) + 3));
            }
            acc = acc.wrapping_add(xxph3_mix16(input, len - 16, 136 - 17));
            xxph3_avalanche(acc)
        }
        _ => return None,
    };
    Some(h)
}

/// RocksDB's `FastLocalBloomImpl::ChooseNumProbes` for the store's bits per key.
fn bloom_probes(millibits_per_key: u64) -> u32 {
    match millibits_per_key {
        0..=2080 => 1,
        2081..=3580 => 2,
        3581..=5100 => 3,
        5101..=6640 => 4,
        6641..=8300 => 5,
        8301..=10070 => 6,
        10071..=11720 => 7,
        11721..=14001 => 8,
        _ => 9, // the store asks for 10 bits a key; larger settings are not used
    }
}

/// A full filter block as RocksDB's `FastLocalBloomBitsBuilder` builds it: the 64-bit key hash's
/// low half picks a 64-byte cache line, its high half drives the probes within it.
fn bloom_filter(hashes: &[u64]) -> Vec<u8> {
    let raw = (hashes.len() as u64 * FILTER_MILLIBITS_PER_KEY).div_ceil(8000);
    let len = (raw.min(0xffff_ffc0) as usize + 63) & !63;
    let probes = bloom_probes(FILTER_MILLIBITS_PER_KEY);
    let mut out = vec![0u8; len + 5];
    let lines = (len >> 6) as u64;
    for &h in hashes {
        let line = (((h as u32 as u64) * lines) >> 32) as usize * 64;
        let mut probe = (h >> 32) as u32;
        for _ in 0..probes {
            let bit = (probe >> (32 - 9)) as usize;
            out[line + (bit >> 3)] |= 1 << (bit & 7);
            probe = probe.wrapping_mul(0x9e37_79b9);
        }
    }
    out[len] = 0xff; // a newer Bloom implementation...
    out[len + 1] = 0; // ...FastLocalBloom, 64-byte lines
    out[len + 2] = probes as u8;
    out
}

/// LevelDB's checksum mask: a CRC stored next to data that itself holds CRCs stays useful.
fn mask_crc(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// Strictly increasing keys streamed into SST files named `path(0)`, `path(1)`, ...: a file
/// closes once it holds `max_held` bytes ([`SstWriter::held_bytes`]), so memory stays bounded
/// whatever the number of keys. The files never overlap, so RocksDB ingests them together
/// into its last level.
pub struct SstFiles<F: Fn(usize) -> PathBuf> {
    path: F,
    max_held: usize,
    compress: bool,
    files: Vec<PathBuf>,
    writer: SstWriter,
    entries: u64,
}

impl<F: Fn(usize) -> PathBuf> SstFiles<F> {
    pub fn create(path: F, max_held: usize, compress: bool) -> io::Result<Self> {
        let first = path(0);
        let writer = SstWriter::create(&first, compress)?;
        Ok(SstFiles {
            path,
            max_held: max_held.max(1),
            compress,
            files: vec![first],
            writer,
            entries: 0,
        })
    }

    pub fn add(&mut self, key: &[u8], value: &[u8]) -> Result<(), SstError> {
        // Checked here too: a file just opened knows nothing of the one before.
        if self.entries > 0 && key <= self.writer.last_user_key.as_slice() {
            return Err(SstError::Unsorted {
                entry: self.entries,
            });
        }
        if self.writer.entries() > 0 && self.writer.held_bytes() >= self.max_held {
            let next = (self.path)(self.files.len());
            let full =
                std::mem::replace(&mut self.writer, SstWriter::create(&next, self.compress)?);
            full.finish()?;
            self.files.push(next);
        }
        self.writer.add(key, value)?;
        self.entries += 1;
        Ok(())
    }

    /// The files written, in key order (none for no entries), and the entries.
    pub fn finish(mut self) -> io::Result<(Vec<PathBuf>, u64)> {
        if self.writer.finish()? == 0 {
            self.files.pop(); // removed: nothing in it
        }
        Ok((self.files, self.entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_close_at_the_held_bytes_and_keep_key_order() {
        let dir = std::env::temp_dir().join(format!("rechain-sst-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let name = |i: usize| dir.join(format!("f-{i:03}.sst"));
        let mut out = SstFiles::create(name, 8 << 10, false).unwrap();
        let mut most_held = 0;
        for i in 0..10_000u32 {
            out.add(&i.to_be_bytes(), &[7; 40]).unwrap();
            most_held = most_held.max(out.writer.held_bytes());
        }
        assert!(
            out.add(&5u32.to_be_bytes(), b"").is_err(),
            "keys must increase"
        );
        // Also at the first key of a new file.
        let mut fresh = SstFiles::create(|i| dir.join(format!("g-{i}.sst")), 1, false).unwrap();
        fresh.add(b"b", b"").unwrap();
        fresh.add(b"c", b"").unwrap();
        assert!(
            fresh.add(b"a", b"").is_err(),
            "keys must increase across files"
        );
        let (two, two_entries) = fresh.finish().unwrap();
        assert_eq!((two.len(), two_entries), (2, 2), "{two:?}");
        assert!(two.iter().all(|f| f.exists()));
        let (files, entries) = out.finish().unwrap();
        assert_eq!(entries, 10_000);
        // 8 bytes of filter a key and the index: a file closes after about a thousand keys.
        assert!((8..=12).contains(&files.len()), "{} files", files.len());
        assert!(most_held < (8 << 10) + 64, "held {most_held}");
        for (i, f) in files.iter().enumerate() {
            assert_eq!(f, &dir.join(format!("f-{i:03}.sst")));
            assert!(f.metadata().unwrap().len() > 0);
        }
        let (none, zero) = SstFiles::create(|i| dir.join(format!("e-{i}.sst")), 1, true)
            .unwrap()
            .finish()
            .unwrap();
        assert!(none.is_empty() && zero == 0);
        assert!(!dir.join("e-0.sst").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn block_entries_share_prefixes_between_restarts() {
        let mut b = BlockBuilder::new(2);
        b.add(b"abc", &[], b"1");
        b.add(b"abd", &[], b"2");
        b.add(b"abe", &[], b"3");
        let block = b.finish();
        #[rustfmt::skip]
        let expected: Vec<u8> = [
            &[0, 3, 1][..], b"abc", b"1",
            &[2, 1, 1], b"d", b"2",
            &[0, 3, 1], b"abe", b"3",
            &0u32.to_le_bytes(), &12u32.to_le_bytes(), &2u32.to_le_bytes(),
        ]
        .concat();
        assert_eq!(block, expected);
    }

    #[test]
    fn key_tail_is_part_of_the_shared_prefix() {
        let mut b = BlockBuilder::new(16);
        b.add(b"k", &[9, 9], b"");
        b.add(b"k", &[9, 8], b"");
        let block = b.finish();
        assert_eq!(&block[..9], &[0, 3, 0, b'k', 9, 9, 2, 1, 0]);
        assert_eq!(block[9], 8);
    }

    #[test]
    fn masked_crc_of_the_check_string() {
        // crc32c("123456789") = 0xe3069283 (the CRC-32C check value); LevelDB's mask rotates
        // it right by 15 and adds 0xa282ead8.
        let crc = crc32c::crc32c(b"123456789");
        assert_eq!(crc, 0xe306_9283);
        assert_eq!(mask_crc(crc), 0xc78a_b0e5);
    }

    #[test]
    fn unsorted_keys_are_refused_and_empty_files_removed() {
        let dir = std::env::temp_dir().join(format!("rechain-sst-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.sst");
        let mut w = SstWriter::create(&path, false).unwrap();
        w.add(b"b", b"1").unwrap();
        assert!(matches!(
            w.add(b"b", b"2"),
            Err(SstError::Unsorted { entry: 1 })
        ));
        assert!(matches!(
            w.add(b"a", b"2"),
            Err(SstError::Unsorted { entry: 1 })
        ));
        assert_eq!(w.finish().unwrap(), 1);
        let empty = dir.join("b.sst");
        assert_eq!(
            SstWriter::create(&empty, true).unwrap().finish().unwrap(),
            0
        );
        assert!(!empty.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
