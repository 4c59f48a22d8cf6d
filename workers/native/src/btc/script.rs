//! Output scripts: the standard type Core's `Solver` assigns and the address a wallet shows for
//! it in the network's encoding (base58check for P2PKH/P2SH, bech32 for witness v0, bech32m for
//! v1+). P2PK and bare multisig have no address, as in Core since v23.

use super::columns::StrCol;
use super::network::Network;
use super::sha256::{sha256d, sha256d_short_checks};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ScriptType {
    P2pk = 0,
    P2pkh = 1,
    P2sh = 2,
    P2wpkh = 3,
    P2wsh = 4,
    P2tr = 5,
    Multisig = 6,
    OpReturn = 7,
    WitnessUnknown = 8,
    Nonstandard = 9,
}

impl ScriptType {
    pub const ALL: [ScriptType; 10] = [
        ScriptType::P2pk,
        ScriptType::P2pkh,
        ScriptType::P2sh,
        ScriptType::P2wpkh,
        ScriptType::P2wsh,
        ScriptType::P2tr,
        ScriptType::Multisig,
        ScriptType::OpReturn,
        ScriptType::WitnessUnknown,
        ScriptType::Nonstandard,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ScriptType::P2pk => "p2pk",
            ScriptType::P2pkh => "p2pkh",
            ScriptType::P2sh => "p2sh",
            ScriptType::P2wpkh => "p2wpkh",
            ScriptType::P2wsh => "p2wsh",
            ScriptType::P2tr => "p2tr",
            ScriptType::Multisig => "multisig",
            ScriptType::OpReturn => "op_return",
            ScriptType::WitnessUnknown => "witness_unknown",
            ScriptType::Nonstandard => "nonstandard",
        }
    }
}

const OP_0: u8 = 0x00;
const OP_PUSHDATA1: u8 = 0x4c;
const OP_PUSHDATA2: u8 = 0x4d;
const OP_PUSHDATA4: u8 = 0x4e;
const OP_1: u8 = 0x51;
const OP_16: u8 = 0x60;
const OP_RETURN: u8 = 0x6a;
const OP_DUP: u8 = 0x76;
const OP_EQUAL: u8 = 0x87;
const OP_EQUALVERIFY: u8 = 0x88;
const OP_HASH160: u8 = 0xa9;
const OP_CHECKSIG: u8 = 0xac;
const OP_CHECKMULTISIG: u8 = 0xae;
/// Core's MAX_SCRIPT_SIZE: longer output scripts can never be spent.
pub const MAX_SCRIPT_SIZE: usize = 10_000;

/// One script operation: (opcode, pushed data) or None when the script is malformed there.
fn next_op<'a>(s: &'a [u8], pos: &mut usize) -> Option<(u8, &'a [u8])> {
    let op = *s.get(*pos)?;
    *pos += 1;
    let len = match op {
        0x01..=0x4b => op as usize,
        OP_PUSHDATA1 => {
            let n = *s.get(*pos)? as usize;
            *pos += 1;
            n
        }
        OP_PUSHDATA2 => {
            let b = s.get(*pos..*pos + 2)?;
            *pos += 2;
            u16::from_le_bytes([b[0], b[1]]) as usize
        }
        OP_PUSHDATA4 => {
            let b = s.get(*pos..*pos + 4)?;
            *pos += 4;
            u32::from_le_bytes(b.try_into().unwrap()) as usize
        }
        _ => 0,
    };
    let data = s.get(*pos..pos.checked_add(len)?)?;
    *pos += len;
    Some((op, data))
}

/// Core's `IsPushOnly`: every operation is a push (opcodes up to OP_16) and parses.
fn is_push_only(s: &[u8]) -> bool {
    let mut pos = 0;
    while pos < s.len() {
        match next_op(s, &mut pos) {
            Some((op, _)) if op <= OP_16 => {}
            _ => return false,
        }
    }
    true
}

/// Core's `CPubKey::ValidSize`: the length the first byte announces.
fn valid_pubkey(k: &[u8]) -> bool {
    match k.first() {
        Some(2 | 3) => k.len() == 33,
        Some(4 | 6 | 7) => k.len() == 65,
        _ => false,
    }
}

fn small_int(op: u8) -> Option<usize> {
    (OP_1..=OP_16)
        .contains(&op)
        .then(|| (op - OP_1 + 1) as usize)
}

fn is_multisig(s: &[u8]) -> bool {
    if s.last() != Some(&OP_CHECKMULTISIG) {
        return false;
    }
    let mut pos = 0;
    let Some(required) = next_op(s, &mut pos).and_then(|(op, _)| small_int(op)) else {
        return false;
    };
    let mut keys = 0usize;
    loop {
        let Some((op, data)) = next_op(s, &mut pos) else {
            return false;
        };
        if let Some(n) = small_int(op) {
            // OP_n must be followed only by OP_CHECKMULTISIG.
            return n == keys && required <= n && pos == s.len() - 1;
        }
        if !valid_pubkey(data) || op > OP_PUSHDATA4 {
            return false;
        }
        keys += 1;
    }
}

/// Witness program (version, program) per BIP141: OP_0 or OP_1..OP_16, then one direct push of
/// 2 to 40 bytes making up the rest of the script.
fn witness_program(s: &[u8]) -> Option<(u8, &[u8])> {
    if s.len() < 4 || s.len() > 42 {
        return None;
    }
    let version = match s[0] {
        OP_0 => 0,
        op @ OP_1..=OP_16 => op - OP_1 + 1,
        _ => return None,
    };
    (s[1] as usize + 2 == s.len()).then(|| (version, &s[2..]))
}

pub fn classify(s: &[u8]) -> ScriptType {
    match s {
        [OP_DUP, OP_HASH160, 20, .., OP_EQUALVERIFY, OP_CHECKSIG] if s.len() == 25 => {
            return ScriptType::P2pkh
        }
        [OP_HASH160, 20, .., OP_EQUAL] if s.len() == 23 => return ScriptType::P2sh,
        _ => {}
    }
    if let Some((version, program)) = witness_program(s) {
        return match (version, program.len()) {
            (0, 20) => ScriptType::P2wpkh,
            (0, 32) => ScriptType::P2wsh,
            (0, _) => ScriptType::Nonstandard,
            (1, 32) => ScriptType::P2tr,
            _ => ScriptType::WitnessUnknown,
        };
    }
    if s.first() == Some(&OP_RETURN) && is_push_only(&s[1..]) {
        return ScriptType::OpReturn;
    }
    if let [len, key @ .., OP_CHECKSIG] = s {
        if *len as usize == key.len() && valid_pubkey(key) {
            return ScriptType::P2pk;
        }
    }
    if is_multisig(s) {
        return ScriptType::Multisig;
    }
    ScriptType::Nonstandard
}

const OP_CHECKSIGVERIFY: u8 = 0xad;
const OP_CHECKMULTISIGVERIFY: u8 = 0xaf;
/// Core's MAX_PUBKEYS_PER_MULTISIG: what an inexact count charges each CHECKMULTISIG.
const MAX_PUBKEYS_PER_MULTISIG: u32 = 20;

/// Core's `CScript::GetSigOpCount(false)` (the legacy count `CheckBlock` limits): one per
/// CHECKSIG(VERIFY), twenty per CHECKMULTISIG(VERIFY), counting stops where the script stops
/// parsing.
pub fn legacy_sigops(s: &[u8]) -> u32 {
    let mut pos = 0;
    let mut n = 0;
    while pos < s.len() {
        match next_op(s, &mut pos) {
            Some((OP_CHECKSIG | OP_CHECKSIGVERIFY, _)) => n += 1,
            Some((OP_CHECKMULTISIG | OP_CHECKMULTISIGVERIFY, _)) => n += MAX_PUBKEYS_PER_MULTISIG,
            Some(_) => {}
            None => break,
        }
    }
    n
}

/// Core's `IsUnspendable`: such outputs never enter the UTXO set.
pub fn is_unspendable(s: &[u8]) -> bool {
    s.first() == Some(&OP_RETURN) || s.len() > MAX_SCRIPT_SIZE
}

const BASE58: &[u8; 58] = b"123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz";

/// 58^5, the base of the limbs a base58 number is built in (five digits each, fits in a u32).
const B58_LIMB: u64 = 58u64.pow(5);
/// Limbs of 58^5 (most significant first) a 25-byte number has at most: 58^35 > 2^200.
const B58_LIMBS: usize = 7;

/// `B58_POWERS[i]` = 2^(32 * (6 - i)) in `B58_LIMBS` limbs of 58^5, most significant first: the
/// weight of the payload's u32 word `i` (the first word holds its first byte only).
static B58_POWERS: [[u64; B58_LIMBS]; 7] = {
    let mut table = [[0u64; B58_LIMBS]; 7];
    let mut i = 0;
    while i < 7 {
        // 2^(32 * (6 - i)) as u32 words, most significant first, divided by 58^5 repeatedly.
        let mut words = [0u64; 7];
        words[i] = 1;
        let mut j = B58_LIMBS;
        while j > 0 {
            j -= 1;
            let mut rem = 0u64;
            let mut w = 0;
            while w < 7 {
                let cur = (rem << 32) | words[w];
                words[w] = cur / B58_LIMB;
                rem = cur % B58_LIMB;
                w += 1;
            }
            table[i][j] = rem;
        }
        i += 1;
    }
    table
};

/// Base58 of a 25-byte version | hash160 | checksum payload. Each limb of 58^5 is a sum of
/// products of the payload's words by their weights (`B58_POWERS`): independent multiplies
/// instead of a long division whose every step waits on the one before. The sums fit in a u64:
/// six words below 2^32 times weights below 58^5, plus the one-byte first word, stay below
/// 1.7 * 10^19, and so do they with the carry of the limb after them (below 2^35).
fn base58_25(payload: &[u8; 25], out: &mut Vec<u8>) {
    let mut words = [0u64; 7];
    words[0] = payload[0] as u64;
    for (i, w) in words[1..].iter_mut().enumerate() {
        *w = u32::from_be_bytes(payload[1 + 4 * i..5 + 4 * i].try_into().unwrap()) as u64;
    }
    let mut limbs = [0u64; B58_LIMBS];
    for (w, powers) in words.iter().zip(&B58_POWERS) {
        for (l, p) in limbs.iter_mut().zip(powers) {
            *l += w * p;
        }
    }
    for j in (1..B58_LIMBS).rev() {
        limbs[j - 1] += limbs[j] / B58_LIMB;
        limbs[j] %= B58_LIMB;
    }
    let mut digits = [0u8; 5 * B58_LIMBS];
    for (limb, five) in limbs.iter().zip(digits.chunks_exact_mut(5)) {
        let mut v = *limb;
        for d in five.iter_mut().rev() {
            *d = (v % 58) as u8;
            v /= 58;
        }
    }
    for _ in payload.iter().take_while(|b| **b == 0) {
        out.push(b'1');
    }
    let first = digits.iter().position(|&d| d != 0).unwrap_or(digits.len());
    out.extend(digits[first..].iter().map(|&d| BASE58[d as usize]));
}

const BECH32_CHARSET: &[u8; 32] = b"qpzry9x8gf2tvdw0s3jn54khce6mua7l";
/// BIP173's checksum constant is 1; BIP350's bech32m (witness v1+) uses this one.
const BECH32M_CONST: u32 = 0x2bc8_30a3;

/// XOR of BIP173's generator words selected by the five bits shifted out of the checksum:
/// one table lookup per 5-bit value instead of five tests.
const BECH32_GEN_TABLE: [u32; 32] = {
    const GEN: [u32; 5] = [0x3b6a57b2, 0x26508e6d, 0x1ea119fa, 0x3d4233dd, 0x2a1462b3];
    let mut table = [0u32; 32];
    let mut top = 0;
    while top < 32 {
        let mut i = 0;
        while i < 5 {
            if (top >> i) & 1 != 0 {
                table[top] ^= GEN[i];
            }
            i += 1;
        }
        top += 1;
    }
    table
};

/// One step of the BCH checksum over 5-bit values (BIP173's polymod).
const fn bech32_step(chk: u32, value: u8) -> u32 {
    // `chk` has 30 bits: the mask only spares the bounds check.
    (((chk & 0x1ff_ffff) << 5) ^ value as u32) ^ BECH32_GEN_TABLE[(chk >> 25) as usize & 31]
}

/// What the checksum's top ten bits contribute over two steps. The polymod is linear over
/// GF(2), so two steps take one lookup: an address's checksum is a chain of lookups, each
/// waiting on the one before, and this halves it.
const BECH32_GEN_TABLE2: [u32; 1024] = {
    let mut table = [0u32; 1024];
    let mut top = 0;
    while top < 1024 {
        let first = BECH32_GEN_TABLE[top >> 5];
        table[top] =
            ((first & 0x1ff_ffff) << 5) ^ BECH32_GEN_TABLE[(top & 31) ^ (first >> 25) as usize];
        top += 1;
    }
    table
};

/// `bech32_step` of `a`, then of `b`.
const fn bech32_step2(chk: u32, a: u8, b: u8) -> u32 {
    ((chk & 0xf_ffff) << 10)
        ^ ((a as u32) << 5)
        ^ b as u32
        ^ BECH32_GEN_TABLE2[(chk >> 20) as usize & 1023]
}

/// The checksum state after the expanded human-readable part (high bits, 0, low bits).
const fn hrp_checksum(hrp: &[u8]) -> u32 {
    let mut chk = 1u32;
    let mut i = 0;
    while i < hrp.len() {
        chk = bech32_step(chk, hrp[i] >> 5);
        i += 1;
    }
    chk = bech32_step(chk, 0);
    i = 0;
    while i < hrp.len() {
        chk = bech32_step(chk, hrp[i] & 31);
        i += 1;
    }
    chk
}

/// The networks' parts, expanded once: every witness output of a chain starts from one.
const HRP_CHECKSUMS: [(&str, u32); 3] = [
    ("bc", hrp_checksum(b"bc")),
    ("tb", hrp_checksum(b"tb")),
    ("bcrt", hrp_checksum(b"bcrt")),
];

/// Segwit address of a witness program (version 0: bech32, 1..16: bech32m), built on the
/// stack and appended to `out` at once: no intermediate strings, since every witness output
/// of a chain gets one.
fn segwit_address(hrp: &str, version: u8, program: &[u8], out: &mut Vec<u8>) {
    let mut chk = HRP_CHECKSUMS
        .iter()
        .find(|(h, _)| *h == hrp)
        .map_or_else(|| hrp_checksum(hrp.as_bytes()), |&(_, c)| c);
    // BIP173 caps an address at 90 characters; a 40-byte program with a 4-letter part is 75.
    let mut buf = [0u8; 128];
    let mut n = hrp.len();
    buf[..n].copy_from_slice(hrp.as_bytes());
    buf[n] = b'1';
    buf[n + 1] = BECH32_CHARSET[version as usize & 31];
    n += 2;
    chk = bech32_step(chk, version);
    // The program regrouped from 8-bit to 5-bit values five bytes (eight values) at a time,
    // the last group zero-padded. The group's bits are assembled in a register: bytes copied
    // into a stack buffer and read back as one word stall on store forwarding.
    for group in program.chunks(5) {
        let bits = group
            .iter()
            .chain(std::iter::repeat(&0u8))
            .take(5)
            .fold(0u64, |acc, &b| (acc << 8) | b as u64);
        if group.len() == 5 {
            for pair in 0..4 {
                let a = ((bits >> (35 - 10 * pair)) & 31) as u8;
                let b = ((bits >> (30 - 10 * pair)) & 31) as u8;
                chk = bech32_step2(chk, a, b);
                buf[n] = BECH32_CHARSET[a as usize];
                buf[n + 1] = BECH32_CHARSET[b as usize];
                n += 2;
            }
        } else {
            for i in 0..(group.len() * 8).div_ceil(5) {
                let v = ((bits >> (35 - 5 * i)) & 31) as u8;
                chk = bech32_step(chk, v);
                buf[n] = BECH32_CHARSET[v as usize];
                n += 1;
            }
        }
    }
    // The checksum covers six zero values after the data.
    for _ in 0..3 {
        chk = bech32_step2(chk, 0, 0);
    }
    chk ^= if version == 0 { 1 } else { BECH32M_CONST };
    for i in 0..6 {
        buf[n + i] = BECH32_CHARSET[((chk >> (5 * (5 - i))) & 31) as usize];
    }
    out.extend_from_slice(&buf[..n + 6]);
}

/// The base58check payload of a P2PKH or P2SH script (version and hash160; the checksum's four
/// bytes still zero), `None` for every other kind.
fn base58_payload(s: &[u8], kind: ScriptType, network: Network) -> Option<[u8; 25]> {
    let (pkh_version, sh_version, _) = network.address_params();
    let (version, hash) = match kind {
        ScriptType::P2pkh => (pkh_version, &s[3..23]),
        ScriptType::P2sh => (sh_version, &s[2..22]),
        _ => return None,
    };
    let mut payload = [0u8; 25];
    payload[0] = version;
    payload[1..21].copy_from_slice(hash);
    Some(payload)
}

/// Appends the segwit address of a witness-program script; false for every other kind.
fn segwit_into(s: &[u8], kind: ScriptType, network: Network, out: &mut Vec<u8>) -> bool {
    match kind {
        ScriptType::P2wpkh | ScriptType::P2wsh | ScriptType::P2tr | ScriptType::WitnessUnknown => {
            let (version, program) = witness_program(s).expect("classified as a witness program");
            segwit_address(network.address_params().2, version, program, out);
            true
        }
        _ => false,
    }
}

/// Appends the address of `s` (already classified as `kind`) to `out` as ASCII; false (and
/// nothing appended) when it has none.
pub fn address_into(s: &[u8], kind: ScriptType, network: Network, out: &mut Vec<u8>) -> bool {
    match base58_payload(s, kind, network) {
        Some(mut payload) => {
            let check = sha256d(&payload[..21]);
            payload[21..].copy_from_slice(&check[..4]);
            base58_25(&payload, out);
            true
        }
        None => segwit_into(s, kind, network, out),
    }
}

/// Addresses of many output scripts at once, as `address_into` writes each: the base58
/// checksums of the lot are hashed first, two at a time, where one address's double hash alone
/// is a chain of two compressions, each waiting on the one before. Reusable scratch.
#[derive(Default)]
pub struct AddressBatch {
    payloads: Vec<[u8; 25]>,
    checks: Vec<[u8; 4]>,
}

impl AddressBatch {
    /// Appends one value to `col` per script of `scripts` (each with its kind): its address,
    /// or a null when it has none.
    pub fn push_all<'a, I>(&mut self, scripts: I, network: Network, col: &mut StrCol)
    where
        I: Iterator<Item = (&'a [u8], ScriptType)> + Clone,
    {
        self.payloads.clear();
        self.payloads.extend(
            scripts
                .clone()
                .filter_map(|(s, kind)| base58_payload(s, kind, network)),
        );
        sha256d_short_checks(&self.payloads, 21, &mut self.checks);
        let mut checked = self.payloads.iter_mut().zip(&self.checks);
        for (s, kind) in scripts {
            col.push_with(|out| match kind {
                ScriptType::P2pkh | ScriptType::P2sh => {
                    let (payload, check) = checked.next().expect("a payload per base58 kind");
                    payload[21..].copy_from_slice(check);
                    base58_25(payload, out);
                    true
                }
                _ => segwit_into(s, kind, network, out),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len() / 2)
            .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
            .collect()
    }

    fn addr(s: &str, net: Network) -> (ScriptType, Option<String>) {
        let b = hex(s);
        let k = classify(&b);
        let mut out = Vec::new();
        let has = address_into(&b, k, net, &mut out);
        (k, has.then(|| String::from_utf8(out).unwrap()))
    }

    #[test]
    fn well_known_addresses() {
        // Satoshi's genesis output (P2PK) has no address in Core's encoding.
        let (k, a) = addr("4104678afdb0fe5548271967f1a67130b7105cd6a828e03909a67962e0ea1f61deb649f6bc3f4cef38c4f35504e51ec112de5c384df7ba0b8d578a4c702b6bf11d5fac", Network::Main);
        assert_eq!((k, a), (ScriptType::P2pk, None));
        // BIP173 / BIP350 vectors.
        assert_eq!(
            addr(
                "0014751e76e8199196d454941c45d1b3a323f1433bd6",
                Network::Main
            ),
            (
                ScriptType::P2wpkh,
                Some("bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kv8f3t4".into())
            )
        );
        assert_eq!(
            addr(
                "5120a60869f0dbcf1dc659c9cecbaf8050135ea9e8cdc487053f1dc6880949dc684c",
                Network::Main
            ),
            (
                ScriptType::P2tr,
                Some("bc1p5cyxnuxmeuwuvkwfem96lqzszd02n6xdcjrs20cac6yqjjwudpxqkedrcr".into())
            )
        );
        // Hash160 of zero bytes -> the well-known 1111... style is version-specific; check P2PKH.
        assert_eq!(
            addr(
                "76a91462e907b15cbf27d5425399ebf6f0fb50ebb88f1888ac",
                Network::Main
            ),
            (
                ScriptType::P2pkh,
                Some("1A1zP1eP5QGefi2DMPTfTL5SLmv7DivfNa".into())
            )
        );
        assert_eq!(
            addr(
                "0014751e76e8199196d454941c45d1b3a323f1433bd6",
                Network::Regtest
            )
            .1
            .unwrap(),
            "bcrt1qw508d6qejxtdg4y5r3zarvary0c5xw7kygt080"
        );
    }

    #[test]
    fn base58_matches_the_bs58_crate() {
        let mut x: u64 = 1;
        for version in [0u8, 5, 0x6f, 0xc4] {
            for round in 0..500 {
                let mut hash = [0u8; 20];
                for (i, b) in hash.iter_mut().enumerate() {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    *b = if round % 7 == 0 && i < 3 {
                        0
                    } else {
                        (x >> 33) as u8
                    };
                }
                let mut payload = [0u8; 21];
                payload[0] = version;
                payload[1..].copy_from_slice(&hash);
                let want = bs58::encode(payload).with_check().into_string();
                let mut script = vec![0x76, 0xa9, 0x14];
                script.extend_from_slice(&hash);
                script.extend_from_slice(&[0x88, 0xac]);
                let mut got = Vec::new();
                let net = if version == 0 {
                    Network::Main
                } else {
                    Network::Regtest
                };
                if version == 0 || version == 0x6f {
                    assert!(address_into(&script, ScriptType::P2pkh, net, &mut got));
                    assert_eq!(String::from_utf8(got).unwrap(), want);
                }
            }
        }
    }

    /// The batch writes what `address_into` (checked against bs58 and bech32 above) writes for
    /// each script of a mix of every kind, nulls where there is no address, in order.
    #[test]
    fn address_batch_matches_one_at_a_time() {
        let mut x: u64 = 7;
        let mut byte = || {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) as u8
        };
        let mut scripts: Vec<Vec<u8>> = Vec::new();
        for i in 0..203 {
            let h: Vec<u8> = (0..32).map(|_| byte()).collect();
            scripts.push(match i % 6 {
                0 => [&[0x76, 0xa9, 0x14][..], &h[..20], &[0x88, 0xac]].concat(),
                1 => [&[0xa9, 0x14][..], &h[..20], &[0x87]].concat(),
                2 => [&[0x00, 0x14][..], &h[..20]].concat(),
                3 => [&[0x51, 0x20][..], &h].concat(),
                4 => [&[0x6a, 0x04][..], &h[..4]].concat(),
                _ => [&[0x76, 0xa9, 0x14][..], &h[..20], &[0x88, 0xac]].concat(),
            });
        }
        for net in [Network::Main, Network::Regtest] {
            for n in [0, 1, 2, 5, scripts.len()] {
                let kinds: Vec<ScriptType> = scripts[..n].iter().map(|s| classify(s)).collect();
                let mut batch = StrCol::default();
                AddressBatch::default().push_all(
                    scripts[..n]
                        .iter()
                        .map(|s| s.as_slice())
                        .zip(kinds.iter().copied()),
                    net,
                    &mut batch,
                );
                let mut one = StrCol::default();
                for (s, &k) in scripts[..n].iter().zip(&kinds) {
                    one.push_with(|out| address_into(s, k, net, out));
                }
                assert_eq!(
                    (batch.data, batch.offsets, batch.valid),
                    (one.data, one.offsets, one.valid)
                );
            }
        }
    }

    /// Our bech32/bech32m writer against the bech32 crate (BIP173/BIP350 reference behaviour)
    /// for every witness version and program length a script can carry.
    #[test]
    fn segwit_addresses_match_the_bech32_crate() {
        use bech32::{hrp::Hrp, segwit, Fe32};
        let mut x: u64 = 7;
        for hrp in ["bc", "tb", "bcrt"] {
            let (mut scripts, mut wants) = (Vec::new(), Vec::new());
            for version in 0u8..=16 {
                for len in 2..=40usize {
                    if version == 0 && len != 20 && len != 32 {
                        continue; // not a valid v0 program; such scripts are nonstandard
                    }
                    let program: Vec<u8> = (0..len)
                        .map(|_| {
                            x = x
                                .wrapping_mul(6364136223846793005)
                                .wrapping_add(1442695040888963407);
                            (x >> 33) as u8
                        })
                        .collect();
                    let want = segwit::encode(
                        Hrp::parse(hrp).unwrap(),
                        Fe32::try_from(version).unwrap(),
                        &program,
                    )
                    .unwrap();
                    let mut got = Vec::new();
                    segwit_address(hrp, version, &program, &mut got);
                    assert_eq!(
                        String::from_utf8(got).unwrap(),
                        want,
                        "v{version} len {len}"
                    );
                    let op = if version == 0 { 0 } else { 0x50 + version };
                    scripts.push([&[op, len as u8][..], &program].concat());
                    wants.push(want);
                }
            }
            // The same addresses written by a batch.
            let network = match hrp {
                "bc" => Network::Main,
                "tb" => Network::Testnet3,
                _ => Network::Regtest,
            };
            let mut col = StrCol::default();
            AddressBatch::default().push_all(
                scripts.iter().map(|s| (s.as_slice(), classify(s))),
                network,
                &mut col,
            );
            assert_eq!(col.valid.len(), wants.len());
            for (i, want) in wants.iter().enumerate() {
                let (a, b) = (col.offsets[i] as usize, col.offsets[i + 1] as usize);
                assert_eq!(std::str::from_utf8(&col.data[a..b]).unwrap(), want);
            }
        }
    }

    #[test]
    fn legacy_sigop_counts() {
        assert_eq!(
            legacy_sigops(&hex("76a914000000000000000000000000000000000000000088ac")),
            1
        );
        assert_eq!(legacy_sigops(&hex("acadaeaf")), 42);
        // The bytes 0xac inside a push are data, not CHECKSIG.
        assert_eq!(legacy_sigops(&hex("02acacac")), 1);
        // A push running past the end stops the count (what was counted stays).
        assert_eq!(legacy_sigops(&hex("ac4c05ac")), 1);
        assert_eq!(legacy_sigops(&[]), 0);
    }

    #[test]
    fn types() {
        assert_eq!(classify(&hex("6a")), ScriptType::OpReturn);
        assert_eq!(classify(&hex("6a0401020304")), ScriptType::OpReturn);
        assert_eq!(classify(&hex("6a04010203")), ScriptType::Nonstandard);
        assert_eq!(classify(&hex("6aac")), ScriptType::Nonstandard);
        let k = "02".to_string() + &"11".repeat(32);
        assert_eq!(
            classify(&hex(&format!("5121{k}21{k}52ae"))),
            ScriptType::Multisig
        );
        assert_eq!(
            classify(&hex(&format!("5221{k}51ae"))),
            ScriptType::Nonstandard
        );
        assert_eq!(classify(&hex("51024e73")), ScriptType::WitnessUnknown);
        assert_eq!(
            classify(&hex("0015000000000000000000000000000000000000000000")),
            ScriptType::Nonstandard
        );
        assert_eq!(classify(&[]), ScriptType::Nonstandard);
        assert!(is_unspendable(&hex("6a")));
        assert!(!is_unspendable(&hex("51")));
    }
}
