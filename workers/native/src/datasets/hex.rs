//! Lower-case hex, the one encoder of the Rust core: Bitcoin shows 32-byte hashes byte-reversed
//! (display order); scripts, witness items and big-endian numbers are shown in byte order.
//! Every published table spells hashes and scripts this way, so the encoder runs on 16 bytes
//! at a time (SSE2, part of every x86-64) instead of pushing two digits per byte.

use std::mem::MaybeUninit;

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// Appends the hex of `bytes`, in byte order. The digits are written into the spare
/// capacity: zeroing it first was a `memset` call per value, most of them 64 bytes.
pub fn extend_hex(out: &mut Vec<u8>, bytes: &[u8]) {
    let n = 2 * bytes.len();
    out.reserve(n);
    let start = out.len();
    encode(bytes, &mut out.spare_capacity_mut()[..n]);
    // SAFETY: `encode` initialized the `n` bytes after the length.
    unsafe { out.set_len(start + n) };
}

/// Appends the hex of a hash of at most 32 bytes in display (byte-reversed) order.
pub fn extend_display_hex(out: &mut Vec<u8>, hash: &[u8]) {
    let (reversed, n) = reversed(hash);
    extend_hex(out, &reversed[..n]);
}

pub fn display_hex_into(hash: &[u8], out: &mut String) {
    let (reversed, n) = reversed(hash);
    forward_hex_into(&reversed[..n], out);
}

/// A 32-byte hash byte-reversed (internal to display order, and back), as four swapped words:
/// the compiler reverses an array copy on the stack, storing and reloading it in pieces, a
/// stall per hash where every row has two or three.
#[inline]
pub fn reversed32(h: &[u8; 32]) -> [u8; 32] {
    let word = |i: usize| {
        u64::from_le_bytes(h[8 * i..8 * i + 8].try_into().expect("8 bytes")).swap_bytes()
    };
    let mut out = [0u8; 32];
    for (i, chunk) in out.chunks_exact_mut(8).enumerate() {
        chunk.copy_from_slice(&word(3 - i).to_le_bytes());
    }
    out
}

/// The first 32 bytes of `hash` (all of a hash) byte-reversed, and how many they are.
fn reversed(hash: &[u8]) -> ([u8; 32], usize) {
    if let Ok(h) = <&[u8; 32]>::try_from(hash) {
        return (reversed32(h), 32);
    }
    let n = hash.len().min(32);
    let mut out = [0u8; 32];
    for (r, b) in out.iter_mut().zip(hash[..n].iter().rev()) {
        *r = *b;
    }
    (out, n)
}

/// Hex in byte order of at most 32 bytes (for big-endian numbers such as chainwork).
pub fn forward_hex_into(bytes: &[u8], out: &mut String) {
    let n = bytes.len().min(32);
    let mut buf = [0u8; 64];
    encode(&bytes[..n], uninit(&mut buf[..2 * n]));
    out.push_str(std::str::from_utf8(&buf[..2 * n]).expect("hex digits are ASCII"));
}

/// The hex of 32 bytes, in byte order.
pub fn hex32(bytes: &[u8; 32]) -> [u8; 64] {
    let mut out = [0u8; 64];
    encode(bytes, uninit(&mut out));
    out
}

/// Lower-case hex of any byte string.
pub fn to_hex(bytes: &[u8]) -> String {
    let mut out = Vec::with_capacity(2 * bytes.len());
    extend_hex(&mut out, bytes);
    String::from_utf8(out).expect("hex digits are ASCII")
}

/// An initialized buffer for `encode` to write into.
fn uninit(buf: &mut [u8]) -> &mut [MaybeUninit<u8>] {
    // SAFETY: same layout; `encode` writes only initialized bytes.
    unsafe { &mut *(buf as *mut [u8] as *mut [MaybeUninit<u8>]) }
}

/// Writes the hex of `src` into `dst` (exactly twice its length), every byte of it.
fn encode(src: &[u8], dst: &mut [MaybeUninit<u8>]) {
    assert_eq!(dst.len(), 2 * src.len());
    #[cfg(target_arch = "x86_64")]
    let done = {
        let whole = src.len() / 16 * 16;
        // SAFETY: SSE2 is part of the x86-64 baseline; the slices hold `whole` and
        // `2 * whole` bytes.
        unsafe { encode_sse2(&src[..whole], &mut dst[..2 * whole]) };
        whole
    };
    #[cfg(not(target_arch = "x86_64"))]
    let done = 0;
    for (pair, b) in dst[2 * done..].chunks_exact_mut(2).zip(&src[done..]) {
        pair[0].write(DIGITS[(b >> 4) as usize]);
        pair[1].write(DIGITS[(b & 15) as usize]);
    }
}

/// 16 bytes at a time: nibbles split and interleaved, then each nibble n becomes
/// `'0' + n`, plus `'a' - '0' - 10` where n > 9.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse2")]
unsafe fn encode_sse2(src: &[u8], dst: &mut [MaybeUninit<u8>]) {
    use std::arch::x86_64::*;
    let low = _mm_set1_epi8(0x0f);
    let nine = _mm_set1_epi8(9);
    let zero = _mm_set1_epi8(b'0' as i8);
    let gap = _mm_set1_epi8((b'a' - b'0' - 10) as i8);
    let digits = |n: __m128i| {
        let letters = _mm_and_si128(_mm_cmpgt_epi8(n, nine), gap);
        _mm_add_epi8(_mm_add_epi8(n, zero), letters)
    };
    for (chunk, out) in src.chunks_exact(16).zip(dst.chunks_exact_mut(32)) {
        let v = _mm_loadu_si128(chunk.as_ptr().cast());
        let hi = _mm_and_si128(_mm_srli_epi16(v, 4), low);
        let lo = _mm_and_si128(v, low);
        let first = digits(_mm_unpacklo_epi8(hi, lo));
        let second = digits(_mm_unpackhi_epi8(hi, lo));
        _mm_storeu_si128(out.as_mut_ptr().cast(), first);
        _mm_storeu_si128(out.as_mut_ptr().add(16).cast(), second);
    }
}

pub fn display_hex(hash: &[u8]) -> String {
    let mut s = String::with_capacity(64);
    display_hex_into(hash, &mut s);
    s
}

/// Parses display-order hex into internal byte order.
pub fn parse_display_hex(s: &str) -> Option<[u8; 32]> {
    parse_hex32(s.as_bytes()).map(|h| reversed32(&h))
}

/// Each byte's value as a hex digit, or `NOT_HEX`.
const NIBBLES: [u8; 256] = {
    let mut t = [NOT_HEX; 256];
    let mut c = 0;
    while c < 10 {
        t[b'0' as usize + c] = c as u8;
        c += 1;
    }
    let mut c = 0;
    while c < 6 {
        t[b'a' as usize + c] = 10 + c as u8;
        t[b'A' as usize + c] = 10 + c as u8;
        c += 1;
    }
    t
};
const NOT_HEX: u8 = 0xff;

/// The 32 bytes 64 hex digits spell, in the digits' order (a table lookup per digit and one
/// check at the end: the tx index parses millions of them).
pub fn parse_hex32(b: &[u8]) -> Option<[u8; 32]> {
    let digits: &[u8; 64] = b.try_into().ok()?;
    let mut out = [0u8; 32];
    let mut bad = 0u8;
    for (o, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        let (hi, lo) = (NIBBLES[pair[0] as usize], NIBBLES[pair[1] as usize]);
        bad |= hi | lo;
        *o = (hi << 4) | lo;
    }
    (bad & 0xf0 == 0).then_some(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_trip() {
        let s = "000000000019d6689c085ae165831e934ff763ae46a2a6c172b3f1b60a8ce26f";
        let b = super::parse_display_hex(s).unwrap();
        assert_eq!(b[0], 0x6f);
        assert_eq!(super::display_hex(&b), s);
        assert!(super::parse_display_hex("zz").is_none());
        // Any byte that is not a hex digit, anywhere, and upper case is read too.
        for at in [0, 1, 33, 63] {
            for bad in [b'g', b'G', b'/', b':', b'`', b'@', b' ', 0xff] {
                let mut t = s.as_bytes().to_vec();
                t[at] = bad;
                assert!(super::parse_hex32(&t).is_none(), "{at} {bad}");
            }
        }
        assert_eq!(super::parse_display_hex(&s.to_uppercase()), Some(b));
        assert!(super::parse_hex32(&s.as_bytes()[1..]).is_none());
    }

    #[test]
    fn vector_and_scalar_paths_agree_with_the_digit_table() {
        let bytes: Vec<u8> = (0..=255u8).chain((0..77).map(|i| i * 13)).collect();
        for len in 0..bytes.len() {
            let src = &bytes[bytes.len() - len..];
            let want: String = src.iter().map(|b| format!("{b:02x}")).collect();
            assert_eq!(super::to_hex(src), want);
            let mut out = b"x".to_vec();
            super::extend_hex(&mut out, src);
            assert_eq!(&out[1..], want.as_bytes());
        }
        let hash: Vec<u8> = (0..32u8).map(|i| i.wrapping_mul(37)).collect();
        let mut shown = String::from("0x");
        super::display_hex_into(&hash, &mut shown);
        let want: String = hash.iter().rev().map(|b| format!("{b:02x}")).collect();
        assert_eq!(shown, format!("0x{want}"));
        let hash: [u8; 32] = hash.try_into().unwrap();
        let mut want = hash;
        want.reverse();
        assert_eq!(super::reversed32(&hash), want);
        assert_eq!(super::reversed32(&want), hash);
    }
}
