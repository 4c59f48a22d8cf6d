//! A coin of the UTXO set as rechain stores it (`btc_utxo`): the key (Core's chainstate key,
//! held inline), the value (Core's coin and the output's row in its block) and which outputs
//! enter the set at all. The chain state, the undo records, the spend resolution and the set
//! digest all build on this module; it depends on none of them.
//!
//! ```text
//! btc_utxo  key:   'C' | txid (internal order) | VARINT(vout)
//!           value: code u32 LE (height * 2 + coinbase) | value u64 LE | row u32 LE | script
//! ```

use super::decode::TxSpan;
use super::encode::core_varint;
use super::error::StoreError;
use super::script::MAX_SCRIPT_SIZE;

/// First byte of every `btc_utxo` key (Core's chainstate `DB_COIN`).
pub const UTXO_KEY_PREFIX: u8 = b'C';

const OP_RETURN: u8 = 0x6a;

/// Longest `btc_utxo` key: prefix, txid and a 5-byte VARINT.
pub(crate) const MAX_KEY: usize = 38;

/// A `btc_utxo` key held inline. A chunk makes millions of them (every input and output, and
/// the copies its maps and undo records keep): one heap allocation each was most of the
/// allocator's share of a full reindex. Bytes past `len` stay zero, so equality and order
/// can compare whole words of the array (see their impls) and still be those of the key's
/// bytes; order is the bytes' order, as RocksDB sorts.
#[derive(Clone, Copy)]
pub struct Key {
    len: u8,
    bytes: [u8; MAX_KEY],
}

/// One word per key, for the chunk's maps (several probes per input and output): the txid's
/// first 8 bytes (a hash already, so spread evenly) with the VARINT(vout) bytes after it.
/// Equal keys have equal bytes, so equal words; the derived hash fed all 39 bytes (and the
/// slice's length) through the hasher on every probe.
impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let word = |at: usize| u64::from_le_bytes(self.bytes[at..at + 8].try_into().unwrap());
        state.write_u64(word(1) ^ word(30).rotate_left(32));
    }
}

impl Key {
    pub(crate) fn from_slice(b: &[u8]) -> Option<Key> {
        let mut bytes = [0u8; MAX_KEY];
        bytes.get_mut(..b.len())?.copy_from_slice(b);
        Some(Key {
            len: b.len() as u8,
            bytes,
        })
    }
}

impl std::ops::Deref for Key {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

impl AsRef<[u8]> for Key {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl Key {
    /// Bytes `at..at + 8` as a big-endian word: words compare as the bytes do.
    fn word(&self, at: usize) -> u64 {
        u64::from_be_bytes(self.bytes[at..at + 8].try_into().unwrap())
    }

    /// The words that cover every byte (the last overlaps the one before it).
    const WORDS: [usize; 5] = [0, 8, 16, 24, MAX_KEY - 8];
}

/// Equal bytes (the zero bytes past `len` included) and length, a word at a time: the
/// chunk's maps compare keys on every probe, and a derived comparison of the array was a
/// call to `bcmp`.
impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        let diff = Key::WORDS
            .iter()
            .fold(0, |d, &at| d | (self.word(at) ^ other.word(at)));
        diff == 0 && self.len == other.len
    }
}

impl Eq for Key {}

/// The bytes' order, a word at a time: the zero bytes past `len` compare as a shorter key's
/// end does (before any byte, equal to a zero byte), and the lengths break what is left of
/// a tie. Chunks sort millions of keys (undo records, net changes), and nearly every pair
/// differs in its first word, which a slice comparison reached only through `memcmp`.
impl Ord for Key {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        for at in Key::WORDS {
            match self.word(at).cmp(&other.word(at)) {
                std::cmp::Ordering::Equal => {}
                unequal => return unequal,
            }
        }
        self.len.cmp(&other.len)
    }
}

/// Indices `0..n` in the order of their keys, ties in index order. Sorted as (first word,
/// index) pairs, so most comparisons read neither the keys nor memory beyond the pairs.
pub(crate) fn key_order<'k>(n: usize, key: impl Fn(usize) -> &'k Key) -> Vec<u32> {
    let mut order: Vec<(u64, u32)> = (0..n).map(|i| (key(i).word(0), i as u32)).collect();
    order.sort_unstable_by(|a, b| {
        a.0.cmp(&b.0)
            .then_with(|| key(a.1 as usize).cmp(key(b.1 as usize)))
            .then(a.1.cmp(&b.1))
    });
    order.into_iter().map(|(_, i)| i).collect()
}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Key({:02x?})", &**self)
    }
}

/// A txid as a set member, hashed by its first 8 bytes (a hash already, so spread evenly).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Txid(pub(crate) [u8; 32]);

impl std::hash::Hash for Txid {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(u64::from_le_bytes(self.0[..8].try_into().unwrap()));
    }
}

/// `btc_utxo` key of an outpoint: 'C' | txid (internal order) | VARINT(vout).
pub fn utxo_key(txid: &[u8], vout: u32) -> Key {
    let mut key = Key {
        len: 0,
        bytes: [0u8; MAX_KEY],
    };
    key.bytes[0] = UTXO_KEY_PREFIX;
    key.bytes[1..33].copy_from_slice(txid);
    let (varint, n) = core_varint(vout as u64);
    key.bytes[33..33 + n].copy_from_slice(&varint[..n]);
    key.len = (33 + n) as u8;
    key
}

/// Bytes of a `btc_utxo` value before its script.
pub const COIN_HEAD: usize = 16;

/// `btc_utxo` value: code u32 LE (height * 2 + coinbase) | value u64 LE | row u32 LE | script.
/// `row` is the output's place among its block's outputs (the block's `outputs` rows), so a
/// spend names the row whose `spent` flag it sets without its txid.
pub fn coin_value(height: u32, coinbase: bool, value: u64, row: u32, script: &[u8]) -> Vec<u8> {
    let head = CoinHead {
        height,
        coinbase,
        value,
        row,
    };
    let mut v = Vec::with_capacity(COIN_HEAD + script.len());
    push_coin_value(&mut v, &head, script);
    v
}

/// Appends the `btc_utxo` value of `head` and `script` to `out` (see [`coin_value`]).
pub(crate) fn push_coin_value(out: &mut Vec<u8>, head: &CoinHead, script: &[u8]) {
    out.extend_from_slice(&(head.height * 2 + head.coinbase as u32).to_le_bytes());
    out.extend_from_slice(&head.value.to_le_bytes());
    out.extend_from_slice(&head.row.to_le_bytes());
    out.extend_from_slice(script);
}

/// The row of output `vout` of `tx` among its block's outputs: its index in the block's
/// `outs`, the order in which `btc_chain_rows::outputs` writes the block's `outputs` rows.
pub(crate) fn output_row(tx: &TxSpan, vout: usize) -> u32 {
    (tx.outs.0 + vout) as u32
}

/// The fields of a `btc_utxo` value before its script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoinHead {
    pub height: u32,
    pub coinbase: bool,
    pub value: u64,
    pub row: u32,
}

/// The head of a `btc_utxo` value (its script is `&v[COIN_HEAD..]`).
pub fn coin_fields(v: &[u8]) -> Result<CoinHead, StoreError> {
    if v.len() < COIN_HEAD {
        return Err(StoreError::CoinValue { len: v.len() });
    }
    let word = |at: usize| u32::from_le_bytes(v[at..at + 4].try_into().unwrap());
    Ok(CoinHead {
        height: word(0) / 2,
        coinbase: word(0) & 1 == 1,
        value: u64::from_le_bytes(v[4..12].try_into().unwrap()),
        row: word(12),
    })
}

pub(crate) fn spendable(height: u32, script: &[u8]) -> bool {
    // The genesis coinbase is not in the set; nor are provably unspendable scripts (Core's
    // IsUnspendable: OP_RETURN first, or longer than MAX_SCRIPT_SIZE).
    height > 0 && script.len() <= MAX_SCRIPT_SIZE && script.first() != Some(&OP_RETURN)
}

/// A coin as a chunk holds it while it applies: the value the set stored, or the fields and
/// script (borrowed from its block) of one a block of the chunk made. A made coin is encoded
/// only if the chunk leaves it in the set or an undo record restores it: most coins a chunk
/// makes, it also spends, and a heap value each was a malloc, a copy and a free per output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Coin<'a> {
    Stored(Vec<u8>),
    Made { head: CoinHead, script: &'a [u8] },
}

impl Coin<'_> {
    pub(crate) fn head(&self) -> Result<CoinHead, StoreError> {
        match self {
            Coin::Stored(v) => coin_fields(v),
            Coin::Made { head, .. } => Ok(*head),
        }
    }

    /// The coin's scriptPubKey.
    pub(crate) fn script(&self) -> &[u8] {
        match self {
            Coin::Stored(v) => v.get(COIN_HEAD..).unwrap_or_default(),
            Coin::Made { script, .. } => script,
        }
    }

    pub(crate) fn encoded_len(&self) -> usize {
        match self {
            Coin::Stored(v) => v.len(),
            Coin::Made { script, .. } => COIN_HEAD + script.len(),
        }
    }

    /// Appends the coin's `btc_utxo` value to `out`.
    pub(crate) fn push_value(&self, out: &mut Vec<u8>) {
        match self {
            Coin::Stored(v) => out.extend_from_slice(v),
            Coin::Made { head, script } => push_coin_value(out, head, script),
        }
    }

    pub(crate) fn into_value(self) -> Vec<u8> {
        match self {
            Coin::Stored(v) => v,
            made => {
                let mut v = Vec::with_capacity(made.encoded_len());
                made.push_value(&mut v);
                v
            }
        }
    }
}
