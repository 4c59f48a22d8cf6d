//! Bitcoin Core's UTXO snapshot format (`dumptxoutset` writes it, `loadtxoutset` reads it;
//! `node/utxo_snapshot.h`, `coins.h`, `compressor.cpp`):
//!
//! ```text
//! metadata: 'u' 't' 'x' 'o' 0xff | version u16 LE (2) | network magic (4)
//!           | base block hash (internal, 32) | coin count u64 LE
//! coins, grouped by txid in chainstate key order:
//!           txid (32) | CompactSize(coins of this txid)
//!           | (CompactSize(vout) | VARINT(height * 2 + coinbase)
//!              | VARINT(CompressAmount(value)) | compressed script) * n
//! compressed script: 0x00 | hash160 (P2PKH), 0x01 | hash160 (P2SH),
//!           0x02/0x03 | x (P2PK, compressed key), 0x04/0x05 | x (P2PK, uncompressed key,
//!           the low bit the parity of y), else VARINT(len + 6) | script
//! ```

use super::decode::MAX_MONEY;
use super::encode::{read_core_varint, write_compact_size, write_core_varint};
use super::script::MAX_SCRIPT_SIZE;
use bitcoin::secp256k1::PublicKey;
use std::io::{Read, Write};

pub const SNAPSHOT_MAGIC: [u8; 5] = *b"utxo\xff";
pub const SNAPSHOT_VERSION: u16 = 2;
pub const METADATA_LEN: usize = 5 + 2 + 4 + 32 + 8;
/// Byte offset of the coin count in the metadata (patched when the file is finished).
const COUNT_OFFSET: u64 = (METADATA_LEN - 8) as u64;
/// Special script forms 0 to 5; a plain script's size is stored plus this.
const SPECIAL_SCRIPTS: u64 = 6;
const OP_RETURN: u8 = 0x6a;

/// The metadata at the head of a snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotMeta {
    pub network_magic: [u8; 4],
    /// Internal byte order.
    pub base_hash: [u8; 32],
    pub coins: u64,
}

impl SnapshotMeta {
    pub fn encode(&self) -> [u8; METADATA_LEN] {
        let mut out = [0u8; METADATA_LEN];
        out[..5].copy_from_slice(&SNAPSHOT_MAGIC);
        out[5..7].copy_from_slice(&SNAPSHOT_VERSION.to_le_bytes());
        out[7..11].copy_from_slice(&self.network_magic);
        out[11..43].copy_from_slice(&self.base_hash);
        out[43..].copy_from_slice(&self.coins.to_le_bytes());
        out
    }
}

/// A coin of a set with its outpoint, borrowed: what the snapshot writer and the `utxo` table
/// take.
#[derive(Clone, Copy, Debug)]
pub struct SetCoin<'a> {
    /// Internal order.
    pub txid: &'a [u8; 32],
    pub vout: u32,
    pub height: u32,
    pub coinbase: bool,
    pub value: u64,
    pub script: &'a [u8],
}

/// A coin as a snapshot carries it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotCoin {
    pub txid: [u8; 32],
    pub vout: u32,
    pub height: u32,
    pub coinbase: bool,
    pub value: u64,
    pub script: Vec<u8>,
}

/// Core's `CompressAmount`: trailing decimal zeros folded into the low digit.
pub fn compress_amount(mut n: u64) -> u64 {
    if n == 0 {
        return 0;
    }
    let mut e = 0;
    while n.is_multiple_of(10) && e < 9 {
        n /= 10;
        e += 1;
    }
    if e < 9 {
        let d = n % 10;
        n /= 10;
        1 + (n * 9 + d - 1) * 10 + e
    } else {
        1 + (n - 1) * 10 + 9
    }
}

/// Core's `DecompressAmount` (wrapping as Core's unsigned arithmetic does on hostile input).
pub fn decompress_amount(mut x: u64) -> u64 {
    if x == 0 {
        return 0;
    }
    x -= 1;
    let mut e = x % 10;
    x /= 10;
    let mut n = if e < 9 {
        let d = x % 9 + 1;
        x /= 9;
        x.wrapping_mul(10).wrapping_add(d)
    } else {
        x.wrapping_add(1)
    };
    while e > 0 {
        n = n.wrapping_mul(10);
        e -= 1;
    }
    n
}

/// Appends Core's compressed form of `script` (`ScriptCompression`).
pub fn write_compressed_script(out: &mut Vec<u8>, s: &[u8]) {
    match s.len() {
        25 if s[0] == 0x76 && s[1] == 0xa9 && s[2] == 20 && s[23] == 0x88 && s[24] == 0xac => {
            out.push(0x00);
            out.extend_from_slice(&s[3..23]);
        }
        23 if s[0] == 0xa9 && s[1] == 20 && s[22] == 0x87 => {
            out.push(0x01);
            out.extend_from_slice(&s[2..22]);
        }
        35 if s[0] == 33 && s[34] == 0xac && (s[1] == 0x02 || s[1] == 0x03) => {
            out.extend_from_slice(&s[1..34]);
        }
        // Only a key that is on the curve compresses (Core's CPubKey::IsFullyValid).
        67 if s[0] == 65
            && s[66] == 0xac
            && s[1] == 0x04
            && PublicKey::from_slice(&s[1..66]).is_ok() =>
        {
            out.push(0x04 | (s[65] & 1));
            out.extend_from_slice(&s[2..34]);
        }
        _ => {
            write_core_varint(out, s.len() as u64 + SPECIAL_SCRIPTS);
            out.extend_from_slice(s);
        }
    }
}

/// Appends one coin as `Coin::Serialize` writes it.
pub fn write_coin(out: &mut Vec<u8>, height: u32, coinbase: bool, value: u64, script: &[u8]) {
    write_core_varint(out, height as u64 * 2 + coinbase as u64);
    write_core_varint(out, compress_amount(value));
    write_compressed_script(out, script);
}

/// Streams coins, in chainstate key order, into a snapshot: one txid group buffered at a
/// time. The coin count is written when the file is finished.
pub struct SnapshotWriter<W: Write + std::io::Seek> {
    out: W,
    /// A part: coin groups only, no metadata (see `part`).
    is_part: bool,
    txid: Option<[u8; 32]>,
    group: Vec<u8>,
    group_coins: u64,
    pub coins: u64,
}

impl<W: Write + std::io::Seek> SnapshotWriter<W> {
    pub fn new(mut out: W, network_magic: [u8; 4], base_hash: [u8; 32]) -> std::io::Result<Self> {
        let meta = SnapshotMeta {
            network_magic,
            base_hash,
            coins: 0,
        };
        out.write_all(&meta.encode())?;
        Ok(SnapshotWriter {
            out,
            is_part: false,
            txid: None,
            group: Vec::new(),
            group_coins: 0,
            coins: 0,
        })
    }

    /// A part of a snapshot: the coin groups of a key range, which `assemble` puts after the
    /// metadata in range order (a txid's coins never straddle two ranges of txids).
    pub fn part(out: W) -> Self {
        SnapshotWriter {
            out,
            is_part: true,
            txid: None,
            group: Vec::new(),
            group_coins: 0,
            coins: 0,
        }
    }

    fn flush_group(&mut self) -> std::io::Result<()> {
        if let Some(txid) = self.txid {
            let mut head = Vec::with_capacity(41);
            head.extend_from_slice(&txid);
            write_compact_size(&mut head, self.group_coins);
            self.out.write_all(&head)?;
            self.out.write_all(&self.group)?;
        }
        self.group.clear();
        self.group_coins = 0;
        Ok(())
    }

    pub fn push(&mut self, c: SetCoin<'_>) -> std::io::Result<()> {
        if self.txid.as_ref() != Some(c.txid) {
            self.flush_group()?;
            self.txid = Some(*c.txid);
        }
        write_compact_size(&mut self.group, c.vout as u64);
        write_coin(&mut self.group, c.height, c.coinbase, c.value, c.script);
        self.group_coins += 1;
        self.coins += 1;
        Ok(())
    }

    /// Writes the last group and the coin count; returns the writer.
    pub fn finish(mut self) -> std::io::Result<W> {
        self.flush_group()?;
        if !self.is_part {
            self.out.seek(std::io::SeekFrom::Start(COUNT_OFFSET))?;
            self.out.write_all(&self.coins.to_le_bytes())?;
            self.out.seek(std::io::SeekFrom::End(0))?;
        }
        self.out.flush()?;
        Ok(self.out)
    }
}

/// What is wrong with a snapshot, and where (byte offset in the file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotError {
    pub offset: u64,
    pub reason: String,
}

impl std::fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "at byte {}: {}", self.offset, self.reason)
    }
}

/// Reads a snapshot coin by coin from a stream, as `PopulateAndValidateSnapshot` does.
pub struct SnapshotReader<R: Read> {
    input: R,
    pub offset: u64,
    pub meta: SnapshotMeta,
    coins_left: u64,
    group_left: u64,
    txid: [u8; 32],
}

impl<R: Read> SnapshotReader<R> {
    pub fn new(input: R) -> Result<Self, SnapshotError> {
        let mut r = SnapshotReader {
            input,
            offset: 0,
            meta: SnapshotMeta {
                network_magic: [0; 4],
                base_hash: [0; 32],
                coins: 0,
            },
            coins_left: 0,
            group_left: 0,
            txid: [0; 32],
        };
        let mut head = [0u8; METADATA_LEN];
        r.read_exact(&mut head, "the metadata")?;
        if head[..5] != SNAPSHOT_MAGIC {
            return Err(r.error_at(0, "not a UTXO snapshot (bad magic bytes)"));
        }
        let version = u16::from_le_bytes([head[5], head[6]]);
        if version != SNAPSHOT_VERSION {
            return Err(r.error_at(
                5,
                format!("snapshot version {version}, not {SNAPSHOT_VERSION}"),
            ));
        }
        r.meta = SnapshotMeta {
            network_magic: head[7..11].try_into().unwrap(),
            base_hash: head[11..43].try_into().unwrap(),
            coins: u64::from_le_bytes(head[43..51].try_into().unwrap()),
        };
        r.coins_left = r.meta.coins;
        Ok(r)
    }

    /// A part's coin groups (`SnapshotWriter::part`), `coins` of them, offsets from its start.
    pub fn part(input: R, coins: u64) -> Self {
        SnapshotReader {
            input,
            offset: 0,
            meta: SnapshotMeta {
                network_magic: [0; 4],
                base_hash: [0; 32],
                coins,
            },
            coins_left: coins,
            group_left: 0,
            txid: [0; 32],
        }
    }

    /// The stream it read from.
    pub fn into_inner(self) -> R {
        self.input
    }

    fn error_at(&self, offset: u64, reason: impl Into<String>) -> SnapshotError {
        SnapshotError {
            offset,
            reason: reason.into(),
        }
    }

    fn read_exact(&mut self, buf: &mut [u8], what: &str) -> Result<(), SnapshotError> {
        let at = self.offset;
        self.input.read_exact(buf).map_err(|e| {
            let why = if e.kind() == std::io::ErrorKind::UnexpectedEof {
                "the file ends".to_string()
            } else {
                e.to_string()
            };
            self.error_at(at, format!("{why} inside {what}"))
        })?;
        self.offset += buf.len() as u64;
        Ok(())
    }

    fn byte(&mut self, what: &str) -> Result<u8, SnapshotError> {
        let mut b = [0u8; 1];
        self.read_exact(&mut b, what)?;
        Ok(b[0])
    }

    fn compact_size(&mut self, what: &str) -> Result<u64, SnapshotError> {
        let at = self.offset;
        let first = self.byte(what)?;
        let (n, min) = match first {
            0xfd => {
                let mut b = [0u8; 2];
                self.read_exact(&mut b, what)?;
                (u16::from_le_bytes(b) as u64, 0xfd)
            }
            0xfe => {
                let mut b = [0u8; 4];
                self.read_exact(&mut b, what)?;
                (u32::from_le_bytes(b) as u64, 0x1_0000)
            }
            0xff => {
                let mut b = [0u8; 8];
                self.read_exact(&mut b, what)?;
                (u64::from_le_bytes(b), 0x1_0000_0000)
            }
            n => return Ok(n as u64),
        };
        if n < min {
            return Err(self.error_at(at, format!("non-canonical CompactSize in {what}")));
        }
        Ok(n)
    }

    fn varint(&mut self, what: &str) -> Result<u64, SnapshotError> {
        let at = self.offset;
        let mut buf = Vec::with_capacity(10);
        loop {
            let b = self.byte(what)?;
            buf.push(b);
            if b & 0x80 == 0 || buf.len() == 10 {
                break;
            }
        }
        match read_core_varint(&buf) {
            Some((n, used)) if used == buf.len() => Ok(n),
            _ => Err(self.error_at(at, format!("VARINT too large in {what}"))),
        }
    }

    fn script(&mut self) -> Result<Vec<u8>, SnapshotError> {
        let at = self.offset;
        let size = self.varint("a script's size")?;
        let body = |n: usize, me: &mut Self| -> Result<Vec<u8>, SnapshotError> {
            let mut b = vec![0u8; n];
            me.read_exact(&mut b, "a compressed script")?;
            Ok(b)
        };
        Ok(match size {
            0 => [&[0x76, 0xa9, 20][..], &body(20, self)?, &[0x88, 0xac]].concat(),
            1 => [&[0xa9, 20][..], &body(20, self)?, &[0x87]].concat(),
            2 | 3 => [&[33, size as u8][..], &body(32, self)?, &[0xac]].concat(),
            4 | 5 => {
                let x = body(32, self)?;
                let mut compressed = [0u8; 33];
                compressed[0] = size as u8 - 2;
                compressed[1..].copy_from_slice(&x);
                let key = PublicKey::from_slice(&compressed).map_err(|_| {
                    self.error_at(at, "a compressed public key that is not on the curve")
                })?;
                [&[65u8][..], &key.serialize_uncompressed(), &[0xac]].concat()
            }
            n => {
                let n = n - SPECIAL_SCRIPTS;
                if n > MAX_SCRIPT_SIZE as u64 {
                    // Core reads such a script as OP_RETURN and skips its bytes.
                    let mut left = n;
                    let mut sink = [0u8; 4096];
                    while left > 0 {
                        let take = left.min(sink.len() as u64) as usize;
                        self.read_exact(&mut sink[..take], "an oversized script")?;
                        left -= take as u64;
                    }
                    vec![OP_RETURN]
                } else {
                    body(n as usize, self)?
                }
            }
        })
    }

    /// The next coin, or None after the last one the metadata counts (bytes left over after
    /// it are an error, as in Core).
    pub fn next_coin(&mut self) -> Result<Option<SnapshotCoin>, SnapshotError> {
        if self.coins_left == 0 {
            let mut extra = [0u8; 1];
            return match self.input.read(&mut extra) {
                Ok(0) => Ok(None),
                Ok(_) => Err(self.error_at(
                    self.offset,
                    format!(
                        "bytes left over after the {} coins the metadata counts",
                        self.meta.coins
                    ),
                )),
                Err(e) => Err(self.error_at(self.offset, e.to_string())),
            };
        }
        if self.group_left == 0 {
            let mut txid = [0u8; 32];
            self.read_exact(&mut txid, "a txid")?;
            self.txid = txid;
            let at = self.offset;
            let n = self.compact_size("a txid's coin count")?;
            if n > self.coins_left {
                return Err(self.error_at(
                    at,
                    format!(
                        "{n} coins for one txid but {} left of the metadata's count",
                        self.coins_left
                    ),
                ));
            }
            if n == 0 {
                return Err(self.error_at(at, "a txid with no coins"));
            }
            self.group_left = n;
        }
        let at = self.offset;
        let vout = self.compact_size("an output index")?;
        if vout >= u32::MAX as u64 {
            return Err(self.error_at(at, format!("output index {vout} out of range")));
        }
        let at = self.offset;
        let code = self.varint("a coin's height")?;
        if code > u32::MAX as u64 {
            return Err(self.error_at(at, "a coin's height out of range"));
        }
        let at = self.offset;
        let value = decompress_amount(self.varint("a coin's amount")?);
        if value > MAX_MONEY {
            return Err(self.error_at(at, format!("amount {value} out of range")));
        }
        let script = self.script()?;
        self.group_left -= 1;
        self.coins_left -= 1;
        Ok(Some(SnapshotCoin {
            txid: self.txid,
            vout: vout as u32,
            height: (code >> 1) as u32,
            coinbase: code & 1 == 1,
            value,
            script,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    #[test]
    fn amounts_round_trip_as_core_compresses_them() {
        // Core's compress_tests.cpp.
        assert_eq!(compress_amount(0), 0x0);
        assert_eq!(compress_amount(1), 0x1);
        assert_eq!(compress_amount(1_000_000), 0x7);
        assert_eq!(compress_amount(100_000_000), 0x9);
        assert_eq!(compress_amount(5_000_000_000), 0x32);
        assert_eq!(compress_amount(MAX_MONEY), 0x1406f40);
        for n in [0, 1, 9, 10, 12_345, 100_000_000, 4_999_999_999, MAX_MONEY] {
            assert_eq!(decompress_amount(compress_amount(n)), n);
        }
    }

    fn round_trip(script: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let mut out = Cursor::new(Vec::new());
        let mut w = SnapshotWriter::new(&mut out, [1, 2, 3, 4], [7; 32]).unwrap();
        let coin = SetCoin {
            txid: &[9; 32],
            vout: 3,
            height: 100,
            coinbase: true,
            value: 50,
            script,
        };
        w.push(coin).unwrap();
        w.finish().unwrap();
        let bytes = out.into_inner();
        let mut r = SnapshotReader::new(Cursor::new(bytes.clone())).unwrap();
        let coin = r.next_coin().unwrap().unwrap();
        assert_eq!(r.next_coin().unwrap(), None);
        assert_eq!(
            (coin.vout, coin.height, coin.coinbase, coin.value),
            (3, 100, true, 50)
        );
        (bytes, coin.script)
    }

    #[test]
    fn scripts_compress_as_core_does() {
        let mut p2pkh = vec![0x76, 0xa9, 20];
        p2pkh.extend([0x11; 20]);
        p2pkh.extend([0x88, 0xac]);
        let (bytes, back) = round_trip(&p2pkh);
        assert_eq!(back, p2pkh);
        // metadata | txid | 1 coin | vout 3 | code 201 | amount | 0x00 | hash160
        assert_eq!(bytes.len(), METADATA_LEN + 32 + 1 + 1 + 2 + 1 + 21);
        // The generator point, uncompressed: y is even, so the form is 0x04.
        let g = bitcoin::secp256k1::constants::GENERATOR_X;
        let key = PublicKey::from_slice(&[&[0x02][..], &g].concat()).unwrap();
        let p2pk = [&[65u8][..], &key.serialize_uncompressed(), &[0xac]].concat();
        let (bytes, back) = round_trip(&p2pk);
        assert_eq!(back, p2pk);
        assert_eq!(bytes[METADATA_LEN + 32 + 1 + 1 + 2 + 1], 0x04);
        // An uncompressed key off the curve stays a plain script.
        let mut off = p2pk.clone();
        off[40] ^= 1;
        let (bytes, back) = round_trip(&off);
        assert_eq!(back, off);
        assert_eq!(bytes[METADATA_LEN + 32 + 1 + 1 + 2 + 1], 67 + 6);
    }

    #[test]
    fn damaged_snapshots_are_errors_with_offsets() {
        let (bytes, _) = round_trip(&[0x51]);
        for cut in [0, 10, METADATA_LEN, METADATA_LEN + 20, bytes.len() - 1] {
            let mut r = match SnapshotReader::new(Cursor::new(bytes[..cut].to_vec())) {
                Ok(r) => r,
                Err(e) => {
                    assert!(e.reason.contains("ends"), "{e}");
                    continue;
                }
            };
            let e = r.next_coin().unwrap_err();
            assert!(e.reason.contains("ends") && e.offset <= cut as u64, "{e}");
        }
        let mut extra = bytes.clone();
        extra.push(0);
        let mut r = SnapshotReader::new(Cursor::new(extra)).unwrap();
        r.next_coin().unwrap();
        assert!(r.next_coin().unwrap_err().reason.contains("left over"));
        let mut bad = bytes.clone();
        bad[0] = b'x';
        assert!(SnapshotReader::new(Cursor::new(bad))
            .err()
            .unwrap()
            .reason
            .contains("magic"));
    }
}
