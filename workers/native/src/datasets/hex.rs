//! Hash display: Bitcoin shows 32-byte hashes byte-reversed in lower-case hex.

const DIGITS: &[u8; 16] = b"0123456789abcdef";

pub fn display_hex_into(hash: &[u8], out: &mut String) {
    let mut buf = [0u8; 64];
    for (i, b) in hash.iter().rev().enumerate() {
        buf[2 * i] = DIGITS[(b >> 4) as usize];
        buf[2 * i + 1] = DIGITS[(b & 15) as usize];
    }
    out.push_str(std::str::from_utf8(&buf[..hash.len() * 2]).unwrap());
}

/// Hex in byte order (for big-endian numbers such as chainwork).
pub fn forward_hex_into(bytes: &[u8], out: &mut String) {
    let mut buf = [0u8; 64];
    for (i, b) in bytes.iter().take(32).enumerate() {
        buf[2 * i] = DIGITS[(b >> 4) as usize];
        buf[2 * i + 1] = DIGITS[(b & 15) as usize];
    }
    out.push_str(std::str::from_utf8(&buf[..bytes.len().min(32) * 2]).unwrap());
}

pub fn display_hex(hash: &[u8]) -> String {
    let mut s = String::with_capacity(64);
    display_hex_into(hash, &mut s);
    s
}

/// Parses display-order hex into internal byte order.
pub fn parse_display_hex(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 {
        return None;
    }
    let b = s.as_bytes();
    let mut out = [0u8; 32];
    for i in 0..32 {
        out[31 - i] = (nibble(b[2 * i])? << 4) | nibble(b[2 * i + 1])?;
    }
    Some(out)
}

fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
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
    }
}
