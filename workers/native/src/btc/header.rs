//! The 80-byte block header (spec §4.2), its hash, compact targets and proof of work (§5.1).
//!
//! ```text
//! 0        4                36                68      72      76      80
//! | version | prev hash (32) | merkle root (32) | time  | bits  | nonce |
//! ```

use super::sha256::sha256d;
use primitive_types::U256;

pub const HEADER_LEN: usize = 80;

/// The reference the scanner is measured against: `n` headers hashed one after another by the
/// same `sha256d` the scanner uses, single thread, in seconds.
pub fn hash_headers_seconds(n: u64) -> f64 {
    let mut header = [7u8; HEADER_LEN];
    let t = std::time::Instant::now();
    let mut acc = 0u8;
    for i in 0..n {
        header[76..80].copy_from_slice(&(i as u32).to_le_bytes());
        acc ^= sha256d(&header)[0];
    }
    std::hint::black_box(acc);
    t.elapsed().as_secs_f64()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub version: i32,
    pub prev_hash: [u8; 32],
    pub merkle_root: [u8; 32],
    pub time: u32,
    pub bits: u32,
    pub nonce: u32,
}

impl Header {
    pub fn parse(b: &[u8; HEADER_LEN]) -> Header {
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        Header {
            version: u32_at(0) as i32,
            prev_hash: b[4..36].try_into().unwrap(),
            merkle_root: b[36..68].try_into().unwrap(),
            time: u32_at(68),
            bits: u32_at(72),
            nonce: u32_at(76),
        }
    }

    pub fn serialize(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..4].copy_from_slice(&self.version.to_le_bytes());
        b[4..36].copy_from_slice(&self.prev_hash);
        b[36..68].copy_from_slice(&self.merkle_root);
        b[68..72].copy_from_slice(&self.time.to_le_bytes());
        b[72..76].copy_from_slice(&self.bits.to_le_bytes());
        b[76..80].copy_from_slice(&self.nonce.to_le_bytes());
        b
    }
}

/// Result of decoding nBits the way Core's `arith_uint256::SetCompact` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompactTarget {
    pub target: U256,
    pub negative: bool,
    pub overflow: bool,
}

pub fn decode_compact(bits: u32) -> CompactTarget {
    let exponent = bits >> 24;
    let mut word = bits & 0x007f_ffff;
    let target = if exponent <= 3 {
        // Core shifts the mantissa first; the sign and overflow tests then see the shifted word.
        word >>= 8 * (3 - exponent);
        U256::from(word)
    } else if exponent - 3 >= 32 {
        U256::zero()
    } else {
        // Bits shifted past 256 are lost, as in Core.
        U256::from(word) << (8 * (exponent - 3) as usize)
    };
    let negative = word != 0 && (bits & 0x0080_0000) != 0;
    let overflow = word != 0
        && (exponent > 34 || (word > 0xff && exponent > 33) || (word > 0xffff && exponent > 32));
    CompactTarget {
        target,
        negative,
        overflow,
    }
}

/// The compact form of a non-negative target (Core's `arith_uint256::GetCompact`).
pub fn encode_compact(target: U256) -> u32 {
    let mut size = target.bits().div_ceil(8);
    let mut compact = if size <= 3 {
        (target.low_u64() << (8 * (3 - size))) as u32
    } else {
        (target >> (8 * (size - 3))).low_u64() as u32
    };
    // The 0x00800000 bit is the sign: a mantissa using it moves up a byte.
    if compact & 0x0080_0000 != 0 {
        compact >>= 8;
        size += 1;
    }
    compact | ((size as u32) << 24)
}

/// Why a header fails `CheckProofOfWork`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PowError {
    /// nBits negative, overflowing, zero or above the network's limit.
    BadDiffBits,
    /// Hash above the target.
    HighHash,
}

impl PowError {
    /// Core's reject reason: `CheckBlockHeader` says "high-hash" (proof of work failed) for
    /// both, as `CheckProofOfWork` does not tell them apart. (Core's "bad-diffbits" is the
    /// contextual check that nBits is the retarget's, `GetNextWorkRequired`.)
    pub fn reason(self) -> &'static str {
        match self {
            PowError::BadDiffBits | PowError::HighHash => "high-hash",
        }
    }
}

/// Hash (internal order) read as a little-endian 256-bit integer.
pub fn hash_to_u256(hash: &[u8; 32]) -> U256 {
    U256::from_little_endian(hash)
}

pub fn check_pow(hash: &[u8; 32], bits: u32, pow_limit: U256) -> Result<(), PowError> {
    let c = decode_compact(bits);
    if c.negative || c.overflow || c.target.is_zero() || c.target > pow_limit {
        return Err(PowError::BadDiffBits);
    }
    if hash_to_u256(hash) > c.target {
        return Err(PowError::HighHash);
    }
    Ok(())
}

/// `check_pow` for a stream of headers: the target of the last nBits seen is kept as big-endian
/// bytes, so most headers cost one byte-wise comparison instead of 256-bit arithmetic.
pub struct PowChecker {
    pow_limit: U256,
    bits: Option<u32>,
    target_be: Result<[u8; 32], PowError>,
}

impl PowChecker {
    pub fn new(pow_limit: U256) -> PowChecker {
        PowChecker {
            pow_limit,
            bits: None,
            target_be: Err(PowError::BadDiffBits),
        }
    }

    pub fn check(&mut self, hash: &[u8; 32], bits: u32) -> Result<(), PowError> {
        if self.bits != Some(bits) {
            self.bits = Some(bits);
            let c = decode_compact(bits);
            let unusable = c.negative || c.overflow || c.target.is_zero();
            self.target_be = if unusable || c.target > self.pow_limit {
                Err(PowError::BadDiffBits)
            } else {
                Ok(c.target.to_big_endian())
            };
        }
        let target = self.target_be?;
        // The hash is a little-endian integer: compare from its last byte down.
        for (i, t) in target.iter().enumerate() {
            let h = hash[31 - i];
            if h != *t {
                return if h < *t {
                    Ok(())
                } else {
                    Err(PowError::HighHash)
                };
            }
        }
        Ok(())
    }
}

/// Block proof: floor(2^256 / (target + 1)), 0 for unusable nBits (Core's `GetBlockProof`).
pub fn block_work(bits: u32) -> U256 {
    let c = decode_compact(bits);
    if c.negative || c.overflow || c.target.is_zero() {
        return U256::zero();
    }
    (!c.target / (c.target + U256::one())) + U256::one()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(s: &str) -> Vec<u8> {
        (0..s.len() / 2)
            .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn encode_compact_is_cores_get_compact() {
        for bits in [0x03123456u32, 0x04123456, 0x05009234, 0x20123456] {
            assert_eq!(encode_compact(decode_compact(bits).target), bits);
        }
        assert_eq!(encode_compact(U256::zero()), 0);
        assert_eq!(encode_compact(U256::from(0x12)), 0x01120000);
        assert_eq!(encode_compact(U256::from(0x1234)), 0x02123400);
        // 0x80 would set the sign bit: the mantissa moves up a byte.
        assert_eq!(encode_compact(U256::from(0x80)), 0x02008000);
        use crate::btc::network::Network;
        for n in crate::btc::network::ALL_NETWORKS {
            assert_eq!(encode_compact(n.pow_limit()), n.genesis_bits(), "{n:?}");
        }
        assert_eq!(encode_compact(Network::Main.pow_limit()), 0x1d00ffff);
    }

    #[test]
    fn compact_vectors_from_core() {
        for bits in [
            0x00123456u32,
            0x01003456,
            0x02000056,
            0x03000000,
            0x04000000,
        ] {
            assert!(decode_compact(bits).target.is_zero());
        }
        for bits in [
            0x00923456u32,
            0x01803456,
            0x02800056,
            0x03800000,
            0x04800000,
        ] {
            let c = decode_compact(bits);
            assert!(c.target.is_zero() && !c.negative);
        }
        assert_eq!(decode_compact(0x01123456).target, U256::from(0x12));
        let c = decode_compact(0x01fedcba);
        assert_eq!(c.target, U256::from(0x7e));
        assert!(c.negative);
        assert_eq!(decode_compact(0x02123456).target, U256::from(0x1234));
        assert_eq!(decode_compact(0x03123456).target, U256::from(0x123456));
        assert_eq!(decode_compact(0x04123456).target, U256::from(0x12345600u64));
        assert!(decode_compact(0x04923456).negative);
        assert_eq!(decode_compact(0x05009234).target, U256::from(0x92340000u64));
        assert_eq!(
            decode_compact(0x20123456).target,
            U256::from(0x123456) << 232
        );
        assert!(decode_compact(0xff123456).overflow);
    }

    #[test]
    fn work_vectors() {
        assert_eq!(block_work(0x1d00ffff), U256::from(0x1_0001_0001u64));
        assert_eq!(block_work(0x207fffff), U256::from(2));
        assert_eq!(block_work(0x1e0377ae), U256::from(4_838_420u64));
        assert_eq!(block_work(0x1a06d450), U256::from(0x257c3becdacc64u64));
    }

    #[test]
    fn mainnet_header_from_spec() {
        let raw = h("04e0ff3f5f3b2119529dc4013ff0f427a457bed706e7b5b8dec30900000000000000000022906797f7ab258c0f896c35b2d6725c0554f579af99754b241aec8c76727d4091a45561ebd00e17e3d6da41");
        let b: [u8; 80] = raw.clone().try_into().unwrap();
        let hdr = Header::parse(&b);
        assert_eq!(hdr.version, 0x3fffe004);
        assert_eq!(hdr.bits, 0x170ed0eb);
        assert_eq!(hdr.nonce, 1_104_860_899);
        assert_eq!(hdr.serialize().to_vec(), raw);
        let mut hash = sha256d(&b);
        assert!(check_pow(
            &hash,
            hdr.bits,
            crate::btc::network::Network::Main.pow_limit()
        )
        .is_ok());
        hash.reverse();
        assert_eq!(
            hash.to_vec(),
            h("000000000000000000000c835b2adcaedc20fdf6ee440009c249452c726dafae")
        );
        let mut checker = PowChecker::new(crate::btc::network::Network::Main.pow_limit());
        assert!(checker.check(&sha256d(&b), hdr.bits).is_ok());
        assert_eq!(
            checker.check(&sha256d(&b), 0x207fffff),
            Err(PowError::BadDiffBits)
        );
        let mut flipped = b;
        flipped[79] ^= 1;
        assert_eq!(
            checker.check(&sha256d(&flipped), hdr.bits),
            Err(PowError::HighHash)
        );
        // A flipped nonce bit breaks proof of work.
        let mut bad = b;
        bad[79] ^= 1;
        assert_eq!(
            check_pow(
                &sha256d(&bad),
                hdr.bits,
                crate::btc::network::Network::Main.pow_limit()
            ),
            Err(PowError::HighHash)
        );
        assert_eq!(
            check_pow(
                &sha256d(&b),
                0x207fffff,
                crate::btc::network::Network::Main.pow_limit()
            ),
            Err(PowError::BadDiffBits)
        );
    }
}
