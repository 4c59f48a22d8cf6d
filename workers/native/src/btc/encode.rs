//! Bounded byte cursor and Bitcoin's CompactSize (spec §4.1).
//!
//! Every read checks the remaining length first, so a hostile count or length can never read
//! past the record or make us allocate from an untrusted number.

use std::fmt;

/// `MAX_SIZE` from Core's serialize.h: upper bound of any CompactSize length.
pub const MAX_SIZE: u64 = 0x0200_0000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// A read ran past the declared record end or the end of the file.
    PastEnd,
    NonCanonicalCompactSize,
    SizeTooLarge,
    SuperfluousWitness,
    UnknownOptionalData,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Reasons use the wording Core logs, so a reader can grep Core's source for them.
        f.write_str(match self {
            DecodeError::PastEnd => "read past declared block end / EOF",
            DecodeError::NonCanonicalCompactSize => "non-canonical CompactSize",
            DecodeError::SizeTooLarge => "CompactSize size too large",
            DecodeError::SuperfluousWitness => "Superfluous witness record",
            DecodeError::UnknownOptionalData => "Unknown transaction optional data",
        })
    }
}

pub struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Cursor { data, pos: 0 }
    }

    pub fn pos(&self) -> usize {
        self.pos
    }

    pub fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.data.len() - self.pos < n {
            return Err(DecodeError::PastEnd);
        }
        let s = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    pub fn skip(&mut self, n: usize) -> Result<(), DecodeError> {
        self.take(n).map(|_| ())
    }

    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }

    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap()))
    }

    /// CompactSize with Core's canonical-encoding and MAX_SIZE checks.
    pub fn compact_size(&mut self) -> Result<u64, DecodeError> {
        let v = read_compact_size(&self.data[self.pos..])?;
        self.pos += v.1;
        Ok(v.0)
    }
}

/// Decodes a CompactSize at the start of `b`; returns (value, encoded length).
pub fn read_compact_size(b: &[u8]) -> Result<(u64, usize), DecodeError> {
    let first = *b.first().ok_or(DecodeError::PastEnd)?;
    let (value, len, min) = match first {
        0xfd => {
            let s = b.get(1..3).ok_or(DecodeError::PastEnd)?;
            (u16::from_le_bytes([s[0], s[1]]) as u64, 3, 0xfd)
        }
        0xfe => {
            let s = b.get(1..5).ok_or(DecodeError::PastEnd)?;
            (
                u32::from_le_bytes(s.try_into().unwrap()) as u64,
                5,
                0x1_0000,
            )
        }
        0xff => {
            let s = b.get(1..9).ok_or(DecodeError::PastEnd)?;
            (u64::from_le_bytes(s.try_into().unwrap()), 9, 0x1_0000_0000)
        }
        v => return Ok((v as u64, 1)),
    };
    if value < min {
        return Err(DecodeError::NonCanonicalCompactSize);
    }
    if value > MAX_SIZE {
        return Err(DecodeError::SizeTooLarge);
    }
    Ok((value, len))
}

pub fn write_compact_size(out: &mut Vec<u8>, v: u64) {
    if v < 0xfd {
        out.push(v as u8);
    } else if v <= 0xffff {
        out.push(0xfd);
        out.extend_from_slice(&(v as u16).to_le_bytes());
    } else if v <= 0xffff_ffff {
        out.push(0xfe);
        out.extend_from_slice(&(v as u32).to_le_bytes());
    } else {
        out.push(0xff);
        out.extend_from_slice(&v.to_le_bytes());
    }
}

/// Core's `VARINT` (spec §3.3): MSB-first base-128 with one subtracted from every non-final
/// group, used by the chainstate and block-index databases, never inside blocks.
pub fn write_core_varint(out: &mut Vec<u8>, n: u64) {
    let (buf, len) = core_varint(n);
    out.extend_from_slice(&buf[..len]);
}

/// `write_core_varint` into a stack buffer: (bytes, length used).
pub fn core_varint(mut n: u64) -> ([u8; 10], usize) {
    let mut tmp = [0u8; 10];
    // Nearly every vout is one byte; a chunk builds a key for each input and output twice.
    if n <= 0x7f {
        tmp[0] = n as u8;
        return (tmp, 1);
    }
    let mut len = 0;
    loop {
        tmp[len] = (n & 0x7f) as u8 | if len > 0 { 0x80 } else { 0 };
        if n <= 0x7f {
            break;
        }
        n = (n >> 7) - 1;
        len += 1;
    }
    tmp[..=len].reverse();
    (tmp, len + 1)
}

/// Reads a Core `VARINT` from the start of `b`: (value, bytes used), None if cut short or
/// over 64 bits.
pub fn read_core_varint(b: &[u8]) -> Option<(u64, usize)> {
    let mut n: u64 = 0;
    for (i, &byte) in b.iter().enumerate().take(10) {
        n = n.checked_mul(128)?.checked_add((byte & 0x7f) as u64)?;
        if byte & 0x80 == 0 {
            return Some((n, i + 1));
        }
        n = n.checked_add(1)?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(v: u64) -> Vec<u8> {
        let mut o = Vec::new();
        write_compact_size(&mut o, v);
        o
    }

    #[test]
    fn spec_vectors() {
        assert_eq!(enc(252), vec![0xfc]);
        assert_eq!(enc(253), vec![0xfd, 0xfd, 0x00]);
        assert_eq!(enc(65535), vec![0xfd, 0xff, 0xff]);
        assert_eq!(enc(65536), vec![0xfe, 0x00, 0x00, 0x01, 0x00]);
        assert_eq!(enc(1 << 32), vec![0xff, 0, 0, 0, 0, 1, 0, 0, 0]);
        for v in [0u64, 252, 253, 65535, 65536, MAX_SIZE] {
            assert_eq!(read_compact_size(&enc(v)).unwrap(), (v, enc(v).len()));
        }
    }

    #[test]
    fn non_canonical_rejected() {
        for b in [
            &[0xfd, 0x01, 0x00][..],
            &[0xfd, 0xfc, 0x00],
            &[0xfe, 0xff, 0xff, 0x00, 0x00],
            &[0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0],
        ] {
            assert_eq!(
                read_compact_size(b),
                Err(DecodeError::NonCanonicalCompactSize)
            );
        }
        assert_eq!(read_compact_size(&[0xfd, 0x01]), Err(DecodeError::PastEnd));
        assert_eq!(read_compact_size(&[]), Err(DecodeError::PastEnd));
        assert_eq!(
            read_compact_size(&[0xfe, 0x01, 0x00, 0x00, 0x02]),
            Err(DecodeError::SizeTooLarge)
        );
    }
}
