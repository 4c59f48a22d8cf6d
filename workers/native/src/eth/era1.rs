//! era1 archives (spec §2.2–2.3, §2.7): `Version | (header, body, receipts, TD){count} |
//! other* | Accumulator | BlockIndex`.
//!
//! [`Era1::from_bytes`] checks the whole layout before anything is decoded: the Version record
//! first, records tiling the file, the BlockIndex last with `16 + 8·count` bytes and
//! `1 ≤ count ≤ 8192`, the Accumulator just before it, and every index offset landing on a
//! `CompressedHeader` followed by `CompressedBody`, `CompressedReceipts` and `TotalDifficulty`.
//! [`Era1::block`] then decompresses one block's framed-snappy values ([`super::snappy`]) and reads
//! its little-endian TD. Decoding the RLP is left to [`super::header`], [`super::body`] and
//! [`super::receipt`]; checking the chain to [`super::validate`].

use super::e2store::{self, Record, Records};
use super::error::{Error, ErrorKind, Result};
use super::snappy;
use alloy_primitives::{B256, U256};
use std::path::{Path, PathBuf};

/// Most blocks an era1 file may hold (`era.MaxSize`).
pub const MAX_BLOCKS: u64 = 8192;

/// The parts of an era1 file name: `<network>-<epoch:05>-<root[0..4] hex>.era1`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Era1Name {
    pub network: String,
    pub epoch: u64,
    /// First 4 bytes of the accumulator root.
    pub short_root: [u8; 4],
}

/// Parse an era1 file name (the final path component); `None` if it does not follow the scheme.
pub fn parse_name(name: &str) -> Option<Era1Name> {
    let stem = name.strip_suffix(".era1")?;
    let mut parts = stem.rsplitn(3, '-');
    let root = parts.next()?;
    let epoch = parts.next()?;
    let network = parts.next()?;
    if root.len() != 8 || epoch.len() < 5 || !epoch.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut short_root = [0u8; 4];
    for (i, b) in short_root.iter_mut().enumerate() {
        *b = u8::from_str_radix(root.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    if root.bytes().any(|c| c.is_ascii_uppercase()) {
        return None;
    }
    Some(Era1Name {
        network: network.to_string(),
        epoch: epoch.parse().ok()?,
        short_root,
    })
}

/// One block's records, decompressed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Era1Block {
    pub number: u64,
    /// File offset of the block's CompressedHeader record.
    pub offset: u64,
    /// Header RLP.
    pub header: Vec<u8>,
    /// Body RLP `[txs, uncles]`.
    pub body: Vec<u8>,
    /// Consensus-form receipts RLP.
    pub receipts: Vec<u8>,
    /// Total difficulty including this block.
    pub total_difficulty: U256,
}

/// An era1 file held in memory, its layout checked.
#[derive(Debug, Clone)]
pub struct Era1 {
    path: Option<PathBuf>,
    data: Vec<u8>,
    start: u64,
    /// Absolute offsets of each block's CompressedHeader record.
    header_offsets: Vec<u64>,
    accumulator: B256,
    accumulator_offset: u64,
    index_offset: u64,
}

impl Era1 {
    /// Read and check an era1 file.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let data = std::fs::read(path).map_err(|e| Error::io(path, e))?;
        let mut e = Era1::from_bytes(data).map_err(|e| e.in_file(path))?;
        e.path = Some(path.to_path_buf());
        Ok(e)
    }

    /// Check the layout of an era1 file given as bytes.
    pub fn from_bytes(data: Vec<u8>) -> Result<Self> {
        let layout = |s: String, off: u64| Error::at(ErrorKind::Layout(s), off);
        let records: Vec<Record<'_>> = Records::new(&data).collect::<Result<_>>()?;
        let first = records
            .first()
            .ok_or_else(|| layout("empty file".into(), 0))?;
        if first.typ != e2store::VERSION || !first.value.is_empty() {
            return Err(layout(
                "first record is not an empty Version record".into(),
                0,
            ));
        }
        let idx = records.last().unwrap();
        if idx.typ != e2store::BLOCK_INDEX {
            return Err(layout("last record is not a BlockIndex".into(), idx.offset));
        }
        let v = idx.value;
        if v.len() < 16 {
            return Err(layout(
                format!("BlockIndex of {} bytes", v.len()),
                idx.offset,
            ));
        }
        let count = u64::from_le_bytes(v[v.len() - 8..].try_into().unwrap());
        if count == 0 || count > MAX_BLOCKS || v.len() as u64 != 16 + 8 * count {
            return Err(layout(
                format!("BlockIndex of {} bytes with count {count}", v.len()),
                idx.offset,
            ));
        }
        let start = u64::from_le_bytes(v[..8].try_into().unwrap());
        if start.checked_add(count).is_none() {
            return Err(layout(
                format!("starting number {start} overflows"),
                idx.offset,
            ));
        }
        if records.len() < 3 {
            return Err(layout(
                "no Accumulator before the BlockIndex".into(),
                idx.offset,
            ));
        }
        let acc = &records[records.len() - 2];
        if acc.typ != e2store::ACCUMULATOR || acc.value.len() != 32 {
            return Err(layout(
                "the record before the BlockIndex is not a 32-byte Accumulator".into(),
                acc.offset,
            ));
        }
        // Records come in file order, so their offsets are sorted: a record is found by binary
        // search (a map of 30,000 records cost more than the search), unless it is where the
        // last block's tuple ends, as in every file written in block order.
        let position = |abs: u64, next: usize| match records.get(next) {
            Some(r) if r.offset == abs => Some(next),
            _ => records.binary_search_by_key(&abs, |r| r.offset).ok(),
        };
        let mut next = 0usize;
        let mut header_offsets = Vec::with_capacity(count as usize);
        for i in 0..count as usize {
            let rel = i64::from_le_bytes(v[8 + 8 * i..16 + 8 * i].try_into().unwrap());
            let abs = idx.offset as i128 + rel as i128;
            let number = start + i as u64;
            let bad = |s: String| layout(s, idx.offset).for_block(number);
            let Some(p) = u64::try_from(abs).ok().and_then(|a| position(a, next)) else {
                return Err(bad(format!(
                    "index offset {rel} does not point at a record"
                )));
            };
            let want = [
                e2store::COMPRESSED_HEADER,
                e2store::COMPRESSED_BODY,
                e2store::COMPRESSED_RECEIPTS,
                e2store::TOTAL_DIFFICULTY,
            ];
            for (k, t) in want.iter().enumerate() {
                match records.get(p + k) {
                    Some(r) if r.typ == *t => {}
                    _ => {
                        return Err(bad(format!(
                            "record {k} of the block tuple at offset {abs} is not {:02x}{:02x}",
                            t[0], t[1]
                        )))
                    }
                }
            }
            if records[p + 3].value.len() != 32 {
                return Err(bad("TotalDifficulty value is not 32 bytes".into()));
            }
            header_offsets.push(abs as u64);
            next = p + want.len();
        }
        let accumulator = B256::from_slice(acc.value);
        let (accumulator_offset, index_offset) = (acc.offset, idx.offset);
        drop(records);
        Ok(Era1 {
            path: None,
            data,
            start,
            header_offsets,
            accumulator,
            accumulator_offset,
            index_offset,
        })
    }

    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }
    /// Number of the first block.
    pub fn start(&self) -> u64 {
        self.start
    }
    pub fn count(&self) -> u64 {
        self.header_offsets.len() as u64
    }
    /// One past the last block.
    pub fn end(&self) -> u64 {
        self.start + self.count()
    }
    /// The stored Accumulator record.
    pub fn accumulator(&self) -> B256 {
        self.accumulator
    }
    pub fn accumulator_offset(&self) -> u64 {
        self.accumulator_offset
    }
    pub fn index_offset(&self) -> u64 {
        self.index_offset
    }
    pub fn len_bytes(&self) -> u64 {
        self.data.len() as u64
    }

    fn located(&self, e: Error, number: u64) -> Error {
        let e = e.for_block(number);
        match &self.path {
            Some(p) => e.in_file(p),
            None => e,
        }
    }

    /// Read block `number` (absolute block number).
    pub fn block(&self, number: u64) -> Result<Era1Block> {
        if number < self.start || number >= self.end() {
            return Err(self.located(
                Error::new(ErrorKind::OutOfRange {
                    number,
                    first: self.start,
                    end: self.end(),
                }),
                number,
            ));
        }
        let off = self.header_offsets[(number - self.start) as usize];
        self.read_tuple(off, number)
            .map_err(|e| self.located(e, number))
    }

    fn read_tuple(&self, off: u64, number: u64) -> Result<Era1Block> {
        let h = e2store::read_record(&self.data, off)?;
        let b = e2store::read_record(&self.data, h.end())?;
        let r = e2store::read_record(&self.data, b.end())?;
        let t = e2store::read_record(&self.data, r.end())?;
        let framed = |rec: &Record<'_>| {
            snappy::decode_framed(rec.value).map_err(|e| e.shifted(rec.offset + 8))
        };
        Ok(Era1Block {
            number,
            offset: off,
            header: framed(&h)?,
            body: framed(&b)?,
            receipts: framed(&r)?,
            total_difficulty: U256::from_le_slice(t.value),
        })
    }

    /// The header RLP of block `number` alone (its CompressedHeader record decompressed).
    pub fn header(&self, number: u64) -> Result<Vec<u8>> {
        if number < self.start || number >= self.end() {
            return Err(self.located(
                Error::new(ErrorKind::OutOfRange {
                    number,
                    first: self.start,
                    end: self.end(),
                }),
                number,
            ));
        }
        let off = self.header_offsets[(number - self.start) as usize];
        e2store::read_record(&self.data, off)
            .and_then(|h| snappy::decode_framed(h.value).map_err(|e| e.shifted(h.offset + 8)))
            .map_err(|e| self.located(e, number))
    }

    /// All blocks in order.
    pub fn blocks(&self) -> impl Iterator<Item = Result<Era1Block>> + '_ {
        (self.start..self.end()).map(move |n| self.block(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        let n = parse_name("mainnet-00003-d8b8a40b.era1").unwrap();
        assert_eq!(n.network, "mainnet");
        assert_eq!(n.epoch, 3);
        assert_eq!(n.short_root, [0xd8, 0xb8, 0xa4, 0x0b]);
        assert!(parse_name("mainnet-3-d8b8a40b.era1").is_none());
        assert!(parse_name("mainnet-00003-d8b8a40.era1").is_none());
    }
}
