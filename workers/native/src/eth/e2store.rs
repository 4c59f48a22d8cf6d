//! e2store records (spec §2.1): `type[2] | length:u32 LE | reserved:u16 = 0 | value[length]`.
//!
//! This module owns the record container only: it walks records, checks the reserved bytes,
//! the 50 MiB value limit and that a record fits the buffer. Record types are compared as the
//! two on-disk bytes (geth's `uint16` `0x3265` is `65 32` on disk). What the values mean belongs
//! to the format modules ([`super::era1`]).

use super::error::{Error, ErrorKind, Result};

/// Length of a record header.
pub const HEADER_LEN: usize = 8;
/// geth's `valueSizeLimit`.
pub const VALUE_SIZE_LIMIT: u64 = 50 * 1024 * 1024;

pub const VERSION: [u8; 2] = [0x65, 0x32];
pub const COMPRESSED_HEADER: [u8; 2] = [0x03, 0x00];
pub const COMPRESSED_BODY: [u8; 2] = [0x04, 0x00];
pub const COMPRESSED_RECEIPTS: [u8; 2] = [0x05, 0x00];
pub const TOTAL_DIFFICULTY: [u8; 2] = [0x06, 0x00];
pub const ACCUMULATOR: [u8; 2] = [0x07, 0x00];
pub const BLOCK_INDEX: [u8; 2] = [0x66, 0x32];
/// Ere: `[txType, statusOrPostState, cumulativeGasUsed, logs]` per receipt, framed snappy.
pub const COMPRESSED_SLIM_RECEIPTS: [u8; 2] = [0x0a, 0x00];
/// Ere: framed snappy of `rlp([proofType, ssz(proof)])`.
pub const PROOF: [u8; 2] = [0x0b, 0x00];
/// Ere: `start | offsets[count][components] | components | count`.
pub const DYNAMIC_BLOCK_INDEX: [u8; 2] = [0x67, 0x32];

/// One record, borrowed from the buffer it was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// Offset of the record's 8-byte header in the buffer.
    pub offset: u64,
    pub typ: [u8; 2],
    pub value: &'a [u8],
}

impl Record<'_> {
    /// Offset one past the record's last byte.
    pub fn end(&self) -> u64 {
        self.offset + HEADER_LEN as u64 + self.value.len() as u64
    }
    /// Vendor-specific types have the high bit of the first byte set.
    pub fn is_vendor(&self) -> bool {
        self.typ[0] & 0x80 != 0
    }
}

/// Read the record whose header starts at `offset`.
pub fn read_record(buf: &[u8], offset: u64) -> Result<Record<'_>> {
    let len = buf.len() as u64;
    if offset > len || len - offset < HEADER_LEN as u64 {
        return Err(Error::at(
            ErrorKind::Truncated {
                what: "e2store record header",
                need: HEADER_LEN as u64,
                have: len.saturating_sub(offset),
            },
            offset,
        ));
    }
    let o = offset as usize;
    let h = &buf[o..o + HEADER_LEN];
    let typ = [h[0], h[1]];
    let length = u32::from_le_bytes([h[2], h[3], h[4], h[5]]) as u64;
    if h[6] != 0 || h[7] != 0 {
        return Err(Error::at(ErrorKind::ReservedNonZero, offset));
    }
    if length > VALUE_SIZE_LIMIT {
        return Err(Error::at(ErrorKind::ValueTooLarge(length), offset));
    }
    let start = offset + HEADER_LEN as u64;
    if len - start < length {
        return Err(Error::at(
            ErrorKind::Truncated {
                what: "e2store record value",
                need: length,
                have: len - start,
            },
            offset,
        ));
    }
    Ok(Record {
        offset,
        typ,
        value: &buf[start as usize..(start + length) as usize],
    })
}

/// Iterator over consecutive records from an offset to the end of the buffer; stops after the
/// first error.
pub struct Records<'a> {
    buf: &'a [u8],
    pos: u64,
    failed: bool,
}

impl<'a> Records<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Records::from_offset(buf, 0)
    }
    pub fn from_offset(buf: &'a [u8], pos: u64) -> Self {
        Records {
            buf,
            pos,
            failed: false,
        }
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<Record<'a>>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.buf.len() as u64 {
            return None;
        }
        match read_record(self.buf, self.pos) {
            Ok(r) => {
                self.pos = r.end();
                Some(Ok(r))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_record_and_errors() {
        let buf = [
            0x65, 0x32, 0, 0, 0, 0, 0, 0, 0x03, 0x00, 2, 0, 0, 0, 0, 0, 0xaa, 0xbb,
        ];
        let recs: Vec<_> = Records::new(&buf).collect::<Result<_>>().unwrap();
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[0].typ, VERSION);
        assert_eq!(recs[1].value, &[0xaa, 0xbb]);
        let e = read_record(&buf[..17], 8).unwrap_err();
        assert!(matches!(
            e.kind,
            ErrorKind::Truncated {
                need: 2,
                have: 1,
                ..
            }
        ));
        let mut bad = buf;
        bad[7] = 1;
        assert_eq!(
            read_record(&bad, 0).unwrap_err().kind,
            ErrorKind::ReservedNonZero
        );
    }
}
