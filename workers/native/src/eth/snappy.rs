//! The two snappy flavours of Ethereum history (spec §1.6, §2.5, pitfall 1).
//!
//! * [`decode_raw`] / [`encode_raw`]: one raw snappy block — a geth freezer item of a
//!   compressed table.
//! * [`decode_framed`] / [`encode_framed`]: the framing format of e2store values (stream
//!   identifier, chunks with a masked CRC-32C of the uncompressed data). The chunk walk is
//!   written here so that a bad chunk yields a typed error with its offset
//!   ([`ErrorKind::SnappyCrc`] for a checksum mismatch); block decompression is `snap::raw`,
//!   the checksum the `crc32c` crate.
//!
//! Writers ([`encode_raw`], [`encode_framed`]) reproduce golang/snappy's output byte for byte,
//! because geth compresses with it and rechain's era1 and freezer writers must write the same
//! files. (`snap`'s encoder, a port of C++ snappy, gives the same bytes on every input tried —
//! see the tests — but C++ snappy has changed its choices between releases; these are pinned to
//! golang/snappy's, whose repository is archived.) What decides the bytes:
//!
//! * the block encoder: golang/snappy's `encodeBlock` (`encode_other.go`; its amd64/arm64
//!   assembly has the same semantics) — a hash table of `u16` positions sized 2^8..2^14 by the
//!   input length, hash `(u32le · 0x1e35a7bd) >> shift`, heuristic match skipping
//!   (`skip >> 5`), copies extended greedily, the table updated at `s−1` and `s` after each
//!   copy, matching stopped 15 bytes (`inputMargin`) before the end; inputs under 17 bytes are
//!   one literal; copies split at 64/60 bytes, 2-byte copies only for lengths 4..11 with offsets
//!   below 2048;
//! * the framing (`Writer.write` of a `NewBufferedWriter`, one `Write` and one `Flush` per
//!   e2store value, as geth's era1 builder does): stream identifier, then one chunk per
//!   65,536 input bytes, kept compressed only if it saves at least 1/8
//!   (`len(compressed) < n − n/8`, the compressed length counting the block's uvarint), else
//!   stored uncompressed; both with the masked CRC-32C of the chunk's input. An empty value
//!   writes nothing (not even the stream identifier).

use super::error::{Error, ErrorKind, Result};

const STREAM_ID: &[u8] = b"sNaPpY";
/// Largest uncompressed chunk the framing format allows.
const MAX_CHUNK: usize = 65_536;

/// `((crc >> 15) | (crc << 17)) + 0xa282ead8` over CRC-32C.
pub fn masked_crc32c(data: &[u8]) -> u32 {
    let crc = crc32c::crc32c(data);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// Inputs shorter than this are one literal (golang/snappy `minNonLiteralBlockSize`).
const MIN_NON_LITERAL_BLOCK: usize = 17;
/// Bytes at the end of a block never searched for matches (`inputMargin`).
const INPUT_MARGIN: usize = 15;
const MAX_TABLE_SIZE: usize = 1 << 14;

fn load32(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes(b[i..i + 4].try_into().unwrap())
}

fn load64(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[i..i + 8].try_into().unwrap())
}

fn hash(u: u32, shift: u32) -> usize {
    (u.wrapping_mul(0x1e35_a7bd) >> shift) as usize & (MAX_TABLE_SIZE - 1)
}

fn emit_literal(out: &mut Vec<u8>, lit: &[u8]) {
    let n = lit.len() - 1;
    if n < 60 {
        out.push((n as u8) << 2);
    } else if n < 256 {
        out.extend_from_slice(&[60 << 2, n as u8]);
    } else {
        out.extend_from_slice(&[61 << 2, n as u8, (n >> 8) as u8]);
    }
    out.extend_from_slice(lit);
}

fn emit_copy(out: &mut Vec<u8>, offset: usize, mut length: usize) {
    let (lo, hi) = (offset as u8, (offset >> 8) as u8);
    while length >= 68 {
        out.extend_from_slice(&[(63 << 2) | 2, lo, hi]);
        length -= 64;
    }
    if length > 64 {
        out.extend_from_slice(&[(59 << 2) | 2, lo, hi]);
        length -= 60;
    }
    if length >= 12 || offset >= 2048 {
        out.extend_from_slice(&[(((length - 1) as u8) << 2) | 2, lo, hi]);
    } else {
        out.extend_from_slice(&[(hi << 5) | (((length - 4) as u8) << 2) | 1, lo]);
    }
}

/// golang/snappy `encodeBlock` for `MIN_NON_LITERAL_BLOCK <= src.len() <= MAX_CHUNK`.
fn encode_block(out: &mut Vec<u8>, src: &[u8]) {
    let mut shift = 24u32;
    let mut size = 1usize << 8;
    while size < MAX_TABLE_SIZE && size < src.len() {
        shift -= 1;
        size *= 2;
    }
    let mut table = [0u16; MAX_TABLE_SIZE];
    let s_limit = src.len() - INPUT_MARGIN;
    let mut next_emit = 0usize;
    let mut s = 1usize;
    let mut next_hash = hash(load32(src, s), shift);
    'outer: loop {
        let mut skip = 32usize;
        let mut next_s = s;
        let mut candidate;
        loop {
            s = next_s;
            let step = skip >> 5;
            next_s = s + step;
            skip += step;
            if next_s > s_limit {
                break 'outer;
            }
            candidate = table[next_hash] as usize;
            table[next_hash] = s as u16;
            next_hash = hash(load32(src, next_s), shift);
            if load32(src, s) == load32(src, candidate) {
                break;
            }
        }
        emit_literal(out, &src[next_emit..s]);
        loop {
            let base = s;
            s += 4;
            let mut i = candidate + 4;
            while s < src.len() && src[i] == src[s] {
                i += 1;
                s += 1;
            }
            emit_copy(out, base - candidate, s - base);
            next_emit = s;
            if s >= s_limit {
                break 'outer;
            }
            let x = load64(src, s - 1);
            table[hash(x as u32, shift)] = (s - 1) as u16;
            let cur = hash((x >> 8) as u32, shift);
            candidate = table[cur] as usize;
            table[cur] = s as u16;
            if (x >> 8) as u32 != load32(src, candidate) {
                next_hash = hash((x >> 16) as u32, shift);
                s += 1;
                break;
            }
        }
    }
    if next_emit < src.len() {
        emit_literal(out, &src[next_emit..]);
    }
}

/// One raw snappy block as golang/snappy's `Encode` writes it (a geth freezer item).
pub fn encode_raw(src: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(32 + src.len() + src.len() / 6);
    let mut n = src.len() as u64;
    while n >= 0x80 {
        out.push(n as u8 | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
    for p in src.chunks(MAX_CHUNK) {
        if p.len() < MIN_NON_LITERAL_BLOCK {
            emit_literal(&mut out, p);
        } else {
            encode_block(&mut out, p);
        }
    }
    out
}

/// A framed stream as golang/snappy's buffered `Writer` writes one value with one `Write`
/// and one `Flush` (an e2store value of geth's era1 builder).
pub fn encode_framed(src: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(src.len() + src.len() / 6 + 64);
    if src.is_empty() {
        return out;
    }
    out.extend_from_slice(&[0xff, 6, 0, 0]);
    out.extend_from_slice(STREAM_ID);
    for p in src.chunks(MAX_CHUNK) {
        let crc = masked_crc32c(p);
        let compressed = encode_raw(p);
        let (typ, body): (u8, &[u8]) = if compressed.len() >= p.len() - p.len() / 8 {
            (0x01, p)
        } else {
            (0x00, &compressed)
        };
        let len = 4 + body.len();
        out.extend_from_slice(&[typ, len as u8, (len >> 8) as u8, (len >> 16) as u8]);
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(body);
    }
    out
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
    use super::*;

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len() / 2)
            .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
            .collect()
    }

    /// Mainnet genesis header (spec §4.1).
    fn genesis_header() -> Vec<u8> {
        let mut h = unhex(concat!(
            "f90214a00000000000000000000000000000000000000000000000000000000000000000a01dcc4de8",
            "dec75d7aab85b567b6ccd41ad312451b948a7413f0a142fd40d49347940000000000000000000000000",
            "000000000000000a0d7f8974fb5ac78d9ac099b9ad5018bedc2ce0a72dad1827a1709da30580f0544a0",
            "56e81f171bcc55a6ff8345e692c0f86e5b48e01b996cadc001622fb5e363b421a056e81f171bcc55a6",
            "ff8345e692c0f86e5b48e01b996cadc001622fb5e363b421b90100"
        ));
        h.extend_from_slice(&[0u8; 256]);
        h.extend_from_slice(&unhex(concat!(
            "850400000000808213888080a011bbe8db4e347b4e8c937c1c8370e4b5ed33adb3db69cbdb7a38e1e5",
            "0b1b82faa00000000000000000000000000000000000000000000000000000000000000000880000000",
            "000000042"
        )));
        h
    }

    #[test]
    fn framed_genesis_vector() {
        // Spec §4.1: the 217-byte value of the real mainnet epoch-0 era1 file.
        let want = unhex(concat!(
            "ff060000734e6150705900cb0000ec6da9a6970410f90214a0007a010088a01dcc4de8dec75d7aab85",
            "b567b6ccd41ad312451b948a7413f0a142fd40d4934794004a4200f043a0d7f8974fb5ac78d9ac099b",
            "9ad5018bedc2ce0a72dad1827a1709da30580f0544a056e81f171bcc55a6ff8345e692c0f86e5b48e0",
            "1b996cadc001622fb5e363b421a0567a210004b9014a7800fe0100fe0100fe0100b6010004850401f0",
            "98808213888080a011bbe8db4e347b4e8c937c1c8370e4b5ed33adb3db69cbdb7a38e1e50b1b82fa82",
            "ea0120880000000000000042"
        ));
        let header = genesis_header();
        assert_eq!(header.len(), 535);
        assert_eq!(encode_framed(&header), want);
        assert_eq!(encode_raw(&header), want[18..]);
        // Small values are stored uncompressed (spec §2.4: body c2c0c0, receipts c0).
        assert_eq!(
            encode_framed(&[0xc2, 0xc0, 0xc0]),
            unhex("ff060000734e6150705901070000f8322cdcc2c0c0")
        );
        assert_eq!(
            encode_framed(&[0xc0]),
            unhex("ff060000734e6150705901050000b80eae8dc0")
        );
        assert!(encode_framed(&[]).is_empty());
    }

    #[test]
    fn encoders_round_trip() {
        // Long, repetitive, incompressible and multi-chunk inputs decode back to themselves.
        let mut x = 0x1234_5678u32;
        let mut noise = Vec::new();
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            noise.push(x as u8);
        }
        let mut text = Vec::new();
        for i in 0..30_000u32 {
            text.extend_from_slice(format!("block {} tx {} ", i % 97, i % 13).as_bytes());
        }
        for input in [
            &noise[..],
            &text[..],
            &noise[..20],
            &text[..65_536],
            &[7u8; 70_000][..],
        ] {
            assert_eq!(decode_raw(&encode_raw(input)).unwrap(), input);
            assert_eq!(decode_framed(&encode_framed(input)).unwrap(), input);
        }
        // 200,000 noisy bytes: four chunks, all stored uncompressed.
        let f = encode_framed(&noise);
        assert_eq!(f[10], 0x01);
        assert_eq!(f.len(), 10 + 4 * 8 + noise.len());
    }

    /// `snap` (a port of C++ snappy) happens to make golang/snappy's choices too: on every value
    /// of the three real era1 files and on these inputs (0..300 kB, random and repetitive) its
    /// raw and framed output equal ours. Ours stays the reference — it pins golang/snappy's
    /// algorithm — and `snap` is the independent oracle.
    #[test]
    fn encoders_agree_with_snap() {
        use rand::{Rng, SeedableRng};
        use std::io::Write;
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        for _ in 0..400 {
            let len = if rng.gen_bool(0.1) {
                rng.gen_range(0..300_000)
            } else {
                rng.gen_range(0..5_000)
            };
            let alphabet = rng.gen_range(1..=256u32);
            let mut v: Vec<u8> = Vec::with_capacity(len);
            while v.len() < len {
                if v.len() > 8 && rng.gen_bool(0.3) {
                    let start = rng.gen_range(0..v.len());
                    let n = rng
                        .gen_range(1..100)
                        .min(v.len() - start)
                        .min(len - v.len());
                    v.extend_from_within(start..start + n);
                } else {
                    v.push(rng.gen_range(0..alphabet) as u8);
                }
            }
            let ours = encode_raw(&v);
            assert_eq!(ours, snap::raw::Encoder::new().compress_vec(&v).unwrap());
            assert_eq!(decode_raw(&ours).unwrap(), v);
            let mut w = snap::write::FrameEncoder::new(Vec::new());
            w.write_all(&v).unwrap();
            assert_eq!(
                w.into_inner().unwrap(),
                encode_framed(&v),
                "{} bytes",
                v.len()
            );
        }
    }

    #[test]
    fn crc32c_check_value() {
        // Spec §4: crc32c("123456789") = e3069283.
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
    }
}
