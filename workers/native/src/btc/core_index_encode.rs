//! Encoding the linked block tree as Bitcoin Core's block index: `'b'` records for every
//! header linked to genesis (sorted by hash), `'f'` per blk file, and `'l'`, as LevelDB puts
//! in key order (layouts in `core_index.rs`). The caller hands the `headers` table's rows one
//! at a time ([`HeaderRow`]); nothing here knows the table's Arrow form.

use super::core_index::{
    self as ci, block_key, file_info_key, status_for, BlockFileInfo, DiskBlockIndex, HAVE_DATA,
    KEY_LAST_FILE, VALID_MASK, VALID_TRANSACTIONS,
};
use super::network::Network;
use crate::datasets::hex::parse_display_hex;
use std::collections::BTreeMap;
use std::fmt;

/// One linked row of the `headers` table (hashes as display hex).
pub struct HeaderRow<'a> {
    pub hash: &'a str,
    pub prev_hash: &'a str,
    pub merkle_root: &'a str,
    /// Whether the block's copy is whole (`copy_status == "ok"`).
    pub copy_ok: bool,
    pub body_checked: bool,
    pub height: u32,
    pub version: i32,
    pub time: u32,
    pub bits: u32,
    pub nonce: u32,
    pub file: u32,
    pub size: u32,
    pub data_pos: u64,
    pub n_tx: u64,
}

/// Byte strings one after another: value `i` is `data[ends[i - 1]..ends[i]]` (Arrow's binary
/// layout, so the binding wraps them without a copy).
#[derive(Default)]
pub struct Packed {
    pub data: Vec<u8>,
    /// Starts at 0; one more entry than values.
    pub offsets: Vec<i32>,
}

impl Packed {
    fn with_capacity(values: usize, bytes: usize) -> Packed {
        let mut offsets = Vec::with_capacity(values + 1);
        offsets.push(0);
        Packed {
            data: Vec::with_capacity(bytes),
            offsets,
        }
    }

    fn push(&mut self, v: &[u8]) {
        self.data.extend_from_slice(v);
        self.offsets.push(self.data.len() as i32);
    }
}

/// The puts (keys in LevelDB order) and what they hold.
pub struct EncodedIndex {
    pub keys: Packed,
    pub values: Packed,
    pub block_records: usize,
    pub with_data: u64,
    pub valid_transactions: u64,
    pub file_records: usize,
    pub last_file: u32,
}

/// A `headers` row Core's index cannot hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EncodeError {
    /// A block whose data position does not fit Core's u32.
    OffsetBeyondU32 { hash: String, pos: u64 },
    /// A hash that is not 64 hex digits.
    BadHash(String),
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EncodeError::OffsetBeyondU32 { hash, pos } => {
                write!(f, "block {hash} at offset {pos} beyond Core's u32")
            }
            EncodeError::BadHash(s) => write!(f, "bad hash {s}"),
        }
    }
}

impl std::error::Error for EncodeError {}

/// Encodes rows `0..n` (`row(i)`: None for a header not linked to genesis, which Core's index
/// does not hold).
pub fn encode_index<'a>(
    n: usize,
    row: impl Fn(usize) -> Option<HeaderRow<'a>>,
    net: Network,
) -> Result<EncodedIndex, EncodeError> {
    let parse = |s: &str| parse_display_hex(s).ok_or_else(|| EncodeError::BadHash(s.to_string()));
    // Values are encoded in table order (sequential column reads), then written in key
    // order: reading the columns in hash order would miss the cache on every row.
    let mut encoded: Vec<u8> = Vec::with_capacity(n * 92);
    let mut ends: Vec<usize> = Vec::with_capacity(n);
    let mut rows: Vec<([u8; 32], u32)> = Vec::with_capacity(n);
    let mut files: BTreeMap<u32, BlockFileInfo> = BTreeMap::new();
    let (mut with_data, mut with_txs) = (0u64, 0u64);
    for i in 0..n {
        let Some(r) = row(i) else {
            continue;
        };
        let hgt = r.height;
        let has_data = r.copy_ok;
        let status = status_for(has_data, r.body_checked, hgt, net);
        let txs_valid = status & VALID_MASK >= VALID_TRANSACTIONS;
        let pos = r.data_pos;
        if has_data && pos > u32::MAX as u64 {
            return Err(EncodeError::OffsetBeyondU32 {
                hash: r.hash.to_string(),
                pos,
            });
        }
        let mut header = [0u8; 80];
        header[0..4].copy_from_slice(&r.version.to_le_bytes());
        header[4..36].copy_from_slice(&parse(r.prev_hash)?);
        header[36..68].copy_from_slice(&parse(r.merkle_root)?);
        header[68..72].copy_from_slice(&r.time.to_le_bytes());
        header[72..76].copy_from_slice(&r.bits.to_le_bytes());
        header[76..80].copy_from_slice(&r.nonce.to_le_bytes());
        DiskBlockIndex {
            version: ci::DISK_INDEX_VERSION,
            height: hgt,
            status,
            // Core sets nTx only once the block's transactions were accepted.
            n_tx: if txs_valid {
                r.n_tx.min(u32::MAX as u64) as u32
            } else {
                0
            },
            file: has_data.then_some(r.file),
            data_pos: has_data.then_some(pos as u32),
            undo_pos: None,
            header,
        }
        .encode_into(&mut encoded);
        rows.push((parse(r.hash)?, ends.len() as u32));
        ends.push(encoded.len());
        if status & HAVE_DATA != 0 {
            with_data += 1;
            with_txs += txs_valid as u64;
            let info = files.entry(r.file).or_default();
            info.add_block(hgt, r.time as u64);
            let end = (pos + r.size as u64).min(u32::MAX as u64) as u32;
            info.n_size = info.n_size.max(end);
        }
    }
    rows.sort_unstable();
    let mut keys = Packed::with_capacity(rows.len() + 8, rows.len() * 33);
    let mut values = Packed::with_capacity(rows.len() + 8, encoded.len() + 64);
    for (h, k) in &rows {
        let k = *k as usize;
        let start = if k == 0 { 0 } else { ends[k - 1] };
        keys.push(&block_key(h));
        values.push(&encoded[start..ends[k]]);
    }
    let mut buf = Vec::with_capacity(64);
    // 'f' keys hold the file number little-endian: sort them bytewise as LevelDB does.
    let mut file_keys: Vec<([u8; 5], &BlockFileInfo)> =
        files.iter().map(|(f, i)| (file_info_key(*f), i)).collect();
    file_keys.sort_unstable_by_key(|(k, _)| *k);
    for (k, info) in &file_keys {
        buf.clear();
        info.encode_into(&mut buf);
        keys.push(k);
        values.push(&buf);
    }
    let last_file = files.keys().next_back().copied().unwrap_or(0);
    keys.push(&[KEY_LAST_FILE]);
    values.push(&(last_file as i32).to_le_bytes());
    Ok(EncodedIndex {
        keys,
        values,
        block_records: rows.len(),
        with_data,
        valid_transactions: with_txs,
        file_records: files.len(),
        last_file,
    })
}
