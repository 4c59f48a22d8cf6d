//! Bitcoin Core's block index (`blocks/index`, LevelDB; spec bitcoin-blk.md §6, §3.3): the key
//! layout, Core's VARINT, the `CDiskBlockIndex` and `CBlockFileInfo` values, and the `nStatus`
//! bits. The one definition of these bytes in rechain; the LevelDB I/O is in Python
//! (`rechain.pipeline.btc_core_index`), which hands whole columns to the functions here.
//!
//! ```text
//! key 'b' | block hash (32, internal order)   value CDiskBlockIndex:
//!     VARINT version | VARINT nHeight | VARINT nStatus | VARINT nTx
//!     | VARINT nFile     (if HAVE_DATA or HAVE_UNDO)
//!     | VARINT nDataPos  (if HAVE_DATA; offset of the block, after magic and size)
//!     | VARINT nUndoPos  (if HAVE_UNDO)
//!     | header (80)
//! key 'f' | int32 LE file number              value CBlockFileInfo: 7 VARINTs
//!     nBlocks | nSize | nUndoSize | nHeightFirst | nHeightLast | nTimeFirst | nTimeLast
//! key 'l'                                     value int32 LE: last blk file in use
//! key 'R'                                     '1' while a reindex runs (absent otherwise)
//! key 'F' | CompactSize name                  flag '1' / '0' (e.g. prunedblockfiles)
//! ```
//!
//! VARINT (Core's `serialize.h`, not CompactSize): big-endian base-128, bit 7 set on every byte
//! but the last, and one subtracted from every non-final group so each value has one encoding.

use super::header::HEADER_LEN;
use super::network::Network;
use super::sha256::sha256d;
use std::fmt;

pub const KEY_BLOCK: u8 = b'b';
pub const KEY_FILE_INFO: u8 = b'f';
pub const KEY_LAST_FILE: u8 = b'l';
pub const KEY_REINDEXING: u8 = b'R';
pub const KEY_FLAG: u8 = b'F';

/// The version Core writes into every `CDiskBlockIndex` (`DUMMY_VERSION` since v28).
pub const DISK_INDEX_VERSION: u32 = 259_900;

// nStatus (spec §6.3): the low three bits are a validity level, the rest are flags.
pub const VALID_TREE: u32 = 2;
pub const VALID_TRANSACTIONS: u32 = 3;
pub const VALID_MASK: u32 = 7;
pub const HAVE_DATA: u32 = 8;
pub const HAVE_UNDO: u32 = 16;
pub const FAILED_VALID: u32 = 32;
pub const FAILED_CHILD: u32 = 64;
pub const OPT_WITNESS: u32 = 128;

/// Core's integer types behind the index fields, as bounds for VARINT decoding.
pub const INT_MAX: u64 = i32::MAX as u64;
pub const UINT_MAX: u64 = u32::MAX as u64;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IndexError {
    /// The value ended inside a VARINT or before the header.
    Truncated,
    /// A VARINT larger than its field's type (Core: "ReadVarInt(): size too large").
    VarIntTooLarge,
    /// Bytes left over between the last field and the 80-byte header.
    TrailingBytes(usize),
    /// The key is not 'b' followed by 32 bytes.
    BadKey(usize),
    /// The key's hash is not the double SHA-256 of the stored header.
    HashMismatch,
}

impl fmt::Display for IndexError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IndexError::Truncated => f.write_str("value truncated"),
            IndexError::VarIntTooLarge => f.write_str("VARINT too large for its field"),
            IndexError::TrailingBytes(n) => write!(f, "{n} unexpected bytes before the header"),
            IndexError::BadKey(n) => write!(f, "block key of {n} bytes, expected 33"),
            IndexError::HashMismatch => f.write_str("key is not the hash of the stored header"),
        }
    }
}

/// Core's VARINT writer lives with the other encoders (`encode::write_core_varint`).
pub fn write_varint(v: u64, out: &mut Vec<u8>) {
    super::encode::write_core_varint(out, v);
}

/// Reads one VARINT at `*pos`, rejecting values above `max` the way Core does for its type.
pub fn read_varint(b: &[u8], pos: &mut usize, max: u64) -> Result<u64, IndexError> {
    let mut n: u64 = 0;
    loop {
        let byte = *b.get(*pos).ok_or(IndexError::Truncated)?;
        *pos += 1;
        if n > (max >> 7) {
            return Err(IndexError::VarIntTooLarge);
        }
        n = (n << 7) | (byte & 0x7f) as u64;
        if byte & 0x80 == 0 {
            return if n > max {
                Err(IndexError::VarIntTooLarge)
            } else {
                Ok(n)
            };
        }
        if n == max {
            return Err(IndexError::VarIntTooLarge);
        }
        n += 1;
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskBlockIndex {
    pub version: u32,
    pub height: u32,
    pub status: u32,
    pub n_tx: u32,
    pub file: Option<u32>,
    pub data_pos: Option<u32>,
    pub undo_pos: Option<u32>,
    pub header: [u8; HEADER_LEN],
}

impl DiskBlockIndex {
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        write_varint(self.version as u64, out);
        write_varint(self.height as u64, out);
        write_varint(self.status as u64, out);
        write_varint(self.n_tx as u64, out);
        if self.status & (HAVE_DATA | HAVE_UNDO) != 0 {
            write_varint(self.file.unwrap_or(0) as u64, out);
        }
        if self.status & HAVE_DATA != 0 {
            write_varint(self.data_pos.unwrap_or(0) as u64, out);
        }
        if self.status & HAVE_UNDO != 0 {
            write_varint(self.undo_pos.unwrap_or(0) as u64, out);
        }
        out.extend_from_slice(&self.header);
    }

    pub fn decode(b: &[u8]) -> Result<DiskBlockIndex, IndexError> {
        let mut pos = 0;
        let version = read_varint(b, &mut pos, INT_MAX)? as u32;
        let height = read_varint(b, &mut pos, INT_MAX)? as u32;
        let status = read_varint(b, &mut pos, UINT_MAX)? as u32;
        let n_tx = read_varint(b, &mut pos, UINT_MAX)? as u32;
        let mut field = |present: bool, max: u64| -> Result<Option<u32>, IndexError> {
            Ok(if present {
                Some(read_varint(b, &mut pos, max)? as u32)
            } else {
                None
            })
        };
        let file = field(status & (HAVE_DATA | HAVE_UNDO) != 0, INT_MAX)?;
        let data_pos = field(status & HAVE_DATA != 0, UINT_MAX)?;
        let undo_pos = field(status & HAVE_UNDO != 0, UINT_MAX)?;
        let rest = b.len().checked_sub(pos).ok_or(IndexError::Truncated)?;
        if rest < HEADER_LEN {
            return Err(IndexError::Truncated);
        }
        if rest > HEADER_LEN {
            return Err(IndexError::TrailingBytes(rest - HEADER_LEN));
        }
        Ok(DiskBlockIndex {
            version,
            height,
            status,
            n_tx,
            file,
            data_pos,
            undo_pos,
            header: b[pos..].try_into().unwrap(),
        })
    }

    /// Decodes a `'b'` record and checks that its key is the hash of its header.
    pub fn decode_record(key: &[u8], value: &[u8]) -> Result<([u8; 32], Self), IndexError> {
        if key.len() != 33 || key[0] != KEY_BLOCK {
            return Err(IndexError::BadKey(key.len()));
        }
        let hash: [u8; 32] = key[1..].try_into().unwrap();
        let v = DiskBlockIndex::decode(value)?;
        if sha256d(&v.header) != hash {
            return Err(IndexError::HashMismatch);
        }
        Ok((hash, v))
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BlockFileInfo {
    pub n_blocks: u32,
    pub n_size: u32,
    pub n_undo_size: u32,
    pub height_first: u32,
    pub height_last: u32,
    pub time_first: u64,
    pub time_last: u64,
}

impl BlockFileInfo {
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        for v in [
            self.n_blocks as u64,
            self.n_size as u64,
            self.n_undo_size as u64,
            self.height_first as u64,
            self.height_last as u64,
            self.time_first,
            self.time_last,
        ] {
            write_varint(v, out);
        }
    }

    pub fn decode(b: &[u8]) -> Result<BlockFileInfo, IndexError> {
        let mut pos = 0;
        let mut next = |max: u64| read_varint(b, &mut pos, max);
        let info = BlockFileInfo {
            n_blocks: next(UINT_MAX)? as u32,
            n_size: next(UINT_MAX)? as u32,
            n_undo_size: next(UINT_MAX)? as u32,
            height_first: next(UINT_MAX)? as u32,
            height_last: next(UINT_MAX)? as u32,
            time_first: next(u64::MAX)?,
            time_last: next(u64::MAX)?,
        };
        if pos != b.len() {
            return Err(IndexError::TrailingBytes(b.len() - pos));
        }
        Ok(info)
    }

    /// Adds one stored block (Core's `AddBlock`: min/max of heights and times).
    pub fn add_block(&mut self, height: u32, time: u64) {
        if self.n_blocks == 0 || self.height_first > height {
            self.height_first = height;
        }
        if self.n_blocks == 0 || self.time_first > time {
            self.time_first = time;
        }
        self.n_blocks += 1;
        self.height_last = self.height_last.max(height);
        self.time_last = self.time_last.max(time);
    }
}

pub fn block_key(hash: &[u8; 32]) -> [u8; 33] {
    let mut k = [0u8; 33];
    k[0] = KEY_BLOCK;
    k[1..].copy_from_slice(hash);
    k
}

pub fn file_info_key(file: u32) -> [u8; 5] {
    let mut k = [KEY_FILE_INFO, 0, 0, 0, 0];
    k[1..].copy_from_slice(&(file as i32).to_le_bytes());
    k
}

/// First height at which segwit is enforced (Core's `SegwitHeight`), which decides
/// `OPT_WITNESS` for blocks whose transactions were received.
pub fn segwit_height(network: Network) -> u32 {
    match network {
        Network::Main => 481_824,
        Network::Testnet3 => 834_624,
        Network::Testnet4 | Network::Signet => 1,
        Network::Regtest => 0,
    }
}

/// What rechain checked about a block, in `nStatus` terms (spec §6.3). Headers that link to
/// genesis are `VALID_TREE`; a body that was framed and hashed (merkle root, mutation, witness
/// commitment) raises it to `VALID_TRANSACTIONS` with `nTx`, as Core's `ReceivedBlockTransactions`.
pub fn status_for(has_data: bool, body_checked: bool, height: u32, network: Network) -> u32 {
    let mut s = VALID_TREE;
    if has_data {
        s |= HAVE_DATA;
        if body_checked {
            s = (s & !VALID_MASK) | VALID_TRANSACTIONS;
            if height >= segwit_height(network) {
                s |= OPT_WITNESS;
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn varint_vectors_from_spec() {
        // Spec §3.3 table.
        let vectors: [(u64, &str); 12] = [
            (0, "00"),
            (127, "7f"),
            (128, "8000"),
            (255, "807f"),
            (256, "8100"),
            (16_383, "fe7f"),
            (16_384, "ff00"),
            (16_511, "ff7f"),
            (65_535, "82fe7f"),
            (1 << 32, "8efefeff00"),
            (259_900, "8eed3c"),
            (200_000, "8b9940"),
        ];
        for (v, want) in vectors {
            let mut out = Vec::new();
            write_varint(v, &mut out);
            assert_eq!(hex(&out), want, "encode {v}");
            let mut pos = 0;
            assert_eq!(
                read_varint(&out, &mut pos, u64::MAX),
                Ok(v),
                "decode {want}"
            );
            assert_eq!(pos, out.len());
        }
    }

    #[test]
    fn varint_rejects_overflow_and_truncation() {
        let mut big = Vec::new();
        write_varint(1 << 32, &mut big);
        assert_eq!(
            read_varint(&big, &mut 0, UINT_MAX),
            Err(IndexError::VarIntTooLarge)
        );
        let mut max = Vec::new();
        write_varint(UINT_MAX, &mut max);
        assert_eq!(read_varint(&max, &mut 0, UINT_MAX), Ok(UINT_MAX));
        assert_eq!(
            read_varint(&max, &mut 0, INT_MAX),
            Err(IndexError::VarIntTooLarge)
        );
        // A run of continuation bytes never ends: too large long before the data runs out.
        assert_eq!(
            read_varint(&[0xff; 12], &mut 0, u64::MAX),
            Err(IndexError::VarIntTooLarge)
        );
        assert_eq!(
            read_varint(&[0x80, 0x80], &mut 0, UINT_MAX),
            Err(IndexError::Truncated)
        );
        assert_eq!(
            read_varint(&[], &mut 0, UINT_MAX),
            Err(IndexError::Truncated)
        );
    }

    fn genesis_regtest() -> [u8; 80] {
        let net = Network::Regtest;
        let (time, nonce) = net.genesis_time_nonce();
        let mut h = [0u8; 80];
        h[0..4].copy_from_slice(&1i32.to_le_bytes());
        // Genesis merkle root (internal order), shared by all networks.
        let merkle = "3ba3edfd7a7b12b27ac72c3e67768f617fc81bc3888a51323a9fb8aa4b1e5e4a";
        for i in 0..32 {
            h[36 + i] = u8::from_str_radix(&merkle[2 * i..2 * i + 2], 16).unwrap();
        }
        h[68..72].copy_from_slice(&time.to_le_bytes());
        h[72..76].copy_from_slice(&net.genesis_bits().to_le_bytes());
        h[76..80].copy_from_slice(&nonce.to_le_bytes());
        h
    }

    #[test]
    fn disk_block_index_layout_and_round_trip() {
        let header = genesis_regtest();
        assert_eq!(sha256d(&header), Network::Regtest.genesis_hash());
        // The genesis record a node writes after reindex phase 1 (spec §6.2, §6.3, §8.2):
        // version 259900, height 0, status 11 (VALID_TRANSACTIONS | HAVE_DATA), 1 tx,
        // file 0, data at 8 (after the first record's magic and size).
        let v = DiskBlockIndex {
            version: DISK_INDEX_VERSION,
            height: 0,
            status: VALID_TRANSACTIONS | HAVE_DATA,
            n_tx: 1,
            file: Some(0),
            data_pos: Some(8),
            undo_pos: None,
            header,
        };
        let mut b = Vec::new();
        v.encode_into(&mut b);
        assert_eq!(hex(&b[..8]), "8eed3c000b010008");
        assert_eq!(&b[8..], &header[..]);
        let key = block_key(&sha256d(&header));
        assert_eq!(
            DiskBlockIndex::decode_record(&key, &b),
            Ok((key[1..].try_into().unwrap(), v.clone()))
        );
        // Height 100,000 with data and undo: every optional field present.
        let w = DiskBlockIndex {
            height: 100_000,
            status: 5 | HAVE_DATA | HAVE_UNDO | OPT_WITNESS,
            n_tx: 2_000,
            file: Some(3),
            data_pos: Some(1 << 27),
            undo_pos: Some(77),
            ..v.clone()
        };
        let mut c = Vec::new();
        w.encode_into(&mut c);
        assert_eq!(DiskBlockIndex::decode(&c), Ok(w));
        // Header-only entry: no file and no positions.
        let h = DiskBlockIndex {
            status: VALID_TREE,
            n_tx: 0,
            file: None,
            data_pos: None,
            ..v
        };
        let mut d = Vec::new();
        h.encode_into(&mut d);
        assert_eq!(d.len(), 3 + 1 + 1 + 1 + 80);
        assert_eq!(DiskBlockIndex::decode(&d), Ok(h));
    }

    #[test]
    fn damaged_values_are_errors() {
        let v = DiskBlockIndex {
            version: DISK_INDEX_VERSION,
            height: 5,
            status: VALID_TREE | HAVE_DATA,
            n_tx: 0,
            file: Some(0),
            data_pos: Some(1234),
            undo_pos: None,
            header: genesis_regtest(),
        };
        let mut b = Vec::new();
        v.encode_into(&mut b);
        for cut in [0, 2, 5, b.len() - 1] {
            assert_eq!(
                DiskBlockIndex::decode(&b[..cut]),
                Err(IndexError::Truncated),
                "cut {cut}"
            );
        }
        let mut extra = b.clone();
        extra.insert(9, 0); // after nDataPos (1234: two bytes at 7..9)
        assert_eq!(
            DiskBlockIndex::decode(&extra),
            Err(IndexError::TrailingBytes(1))
        );
        let mut huge = vec![0xff; 6];
        huge.extend_from_slice(&b);
        assert_eq!(
            DiskBlockIndex::decode(&huge),
            Err(IndexError::VarIntTooLarge)
        );
        let key = block_key(&[7; 32]);
        assert_eq!(
            DiskBlockIndex::decode_record(&key, &b),
            Err(IndexError::HashMismatch)
        );
        assert_eq!(
            DiskBlockIndex::decode_record(&key[..10], &b),
            Err(IndexError::BadKey(10))
        );
    }

    #[test]
    fn file_info_round_trip_and_key() {
        let mut f = BlockFileInfo::default();
        f.add_block(10, 1_700_000_100);
        f.add_block(7, 1_700_000_000);
        f.add_block(12, 1_700_000_050);
        f.n_size = 134_000_000;
        assert_eq!((f.n_blocks, f.height_first, f.height_last), (3, 7, 12));
        assert_eq!((f.time_first, f.time_last), (1_700_000_000, 1_700_000_100));
        let mut b = Vec::new();
        f.encode_into(&mut b);
        assert_eq!(BlockFileInfo::decode(&b), Ok(f));
        assert_eq!(BlockFileInfo::decode(&b[..3]), Err(IndexError::Truncated));
        assert_eq!(hex(&file_info_key(2)), "6602000000");
    }

    #[test]
    fn status_says_what_was_checked() {
        let n = Network::Main;
        assert_eq!(status_for(true, false, 700_000, n), 10);
        assert_eq!(status_for(false, false, 5, n), 2);
        assert_eq!(status_for(true, true, 100_000, n), 11);
        assert_eq!(status_for(true, true, 700_000, n), 139);
    }
}
