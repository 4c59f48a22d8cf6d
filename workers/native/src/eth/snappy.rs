//! The two snappy flavours of Ethereum history (spec §1.6, §2.5, pitfall 1).
//!
//! * [`decode_raw`]: one raw snappy block — a geth freezer item of a compressed table.
//! * [`decode_framed`]: the framing format of e2store values (stream identifier, chunks with a
//!   masked CRC-32C of the uncompressed data). The chunk walk is written here so that a bad chunk
//!   yields a typed error with its offset ([`ErrorKind::SnappyCrc`] for a checksum mismatch);
//!   block decompression is `snap::raw`, the checksum the `crc32c` crate.

use super::error::{Error, ErrorKind, Result};

const STREAM_ID: &[u8] = b"sNaPpY";
/// Largest uncompressed chunk the framing format allows.
const MAX_CHUNK: usize = 65_536;

/// `((crc >> 15) | (crc << 17)) + 0xa282ead8` over CRC-32C.
pub fn masked_crc32c(data: &[u8]) -> u32 {
    let crc = crc32c::crc32c(data);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// Decode one raw snappy block (no framing, no checksum).
pub fn decode_raw(data: &[u8]) -> Result<Vec<u8>> {
    snap::raw::Decoder::new()
        .decompress_vec(data)
        .map_err(|e| Error::new(ErrorKind::Snappy(e.to_string())))
}

/// Decode a snappy framed stream; error offsets are relative to `data`.
pub fn decode_framed(data: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(data.len() * 2);
    let mut pos = 0usize;
    let mut seen_id = false;
    let mut raw = snap::raw::Decoder::new();
    while pos < data.len() {
        if data.len() - pos < 4 {
            return Err(Error::at(
                ErrorKind::Truncated {
                    what: "snappy chunk header",
                    need: 4,
                    have: (data.len() - pos) as u64,
                },
                pos as u64,
            ));
        }
        let typ = data[pos];
        let len = u32::from_le_bytes([data[pos + 1], data[pos + 2], data[pos + 3], 0]) as usize;
        let body_at = pos + 4;
        if data.len() - body_at < len {
            return Err(Error::at(
                ErrorKind::Truncated {
                    what: "snappy chunk",
                    need: len as u64,
                    have: (data.len() - body_at) as u64,
                },
                pos as u64,
            ));
        }
        let body = &data[body_at..body_at + len];
        let framing = |s: String| Error::at(ErrorKind::SnappyFraming(s), pos as u64);
        if typ != 0xff && !seen_id {
            return Err(framing(
                "stream does not start with a stream identifier".into(),
            ));
        }
        match typ {
            0xff => {
                if body != STREAM_ID {
                    return Err(framing("bad stream identifier".into()));
                }
                seen_id = true;
            }
            0x00..=0x03 => {
                let checked = typ <= 0x01;
                let (crc, payload) = if checked {
                    if len < 4 {
                        return Err(framing(format!("chunk of {len} bytes has no checksum")));
                    }
                    (
                        Some(u32::from_le_bytes(body[..4].try_into().unwrap())),
                        &body[4..],
                    )
                } else {
                    (None, body)
                };
                let start = out.len();
                if typ & 1 == 0 {
                    let n = snap::raw::decompress_len(payload)
                        .map_err(|e| Error::at(ErrorKind::Snappy(e.to_string()), pos as u64))?;
                    if n > MAX_CHUNK {
                        return Err(framing(format!("chunk decompresses to {n} bytes")));
                    }
                    out.resize(start + n, 0);
                    raw.decompress(payload, &mut out[start..])
                        .map_err(|e| Error::at(ErrorKind::Snappy(e.to_string()), pos as u64))?;
                } else {
                    if payload.len() > MAX_CHUNK {
                        return Err(framing(format!(
                            "uncompressed chunk of {} bytes",
                            payload.len()
                        )));
                    }
                    out.extend_from_slice(payload);
                }
                if let Some(stored) = crc {
                    let computed = masked_crc32c(&out[start..]);
                    if computed != stored {
                        return Err(Error::at(
                            ErrorKind::SnappyCrc { stored, computed },
                            pos as u64,
                        ));
                    }
                }
            }
            0x04..=0x7f => {
                return Err(framing(format!(
                    "reserved unskippable chunk type {typ:#04x}"
                )))
            }
            _ => {} // 0x80..=0xfe: padding and skippable chunks
        }
        pos = body_at + len;
    }
    if !seen_id {
        return Err(Error::at(
            ErrorKind::SnappyFraming("empty stream".into()),
            0,
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn crc32c_check_value() {
        // Spec §4: crc32c("123456789") = e3069283.
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
    }
}
