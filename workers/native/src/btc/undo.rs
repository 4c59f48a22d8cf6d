//! Per-block undo records (`btc_undo`), rechain's `rev*.dat`: their encoding, decoding, and
//! the net change that unwinds a run of blocks.
//!
//! ```text
//! btc_undo  key: height u32 big-endian
//!           value: UNDO_VERSION u8 | block hash (internal, 32)
//!                  | n_created u32 LE | (key len u8 | key | coin value u64 LE) * n_created
//!                  | n_restored u32 LE | (key len u8 | key | value len u32 LE | value) * n_restored
//! ```
//! Unwinding a block deletes the coins it created (as they are after the block) and puts back
//! the coins it spent or overwrote (as they were before it): the exact inverse of applying it.

use super::coin::{coin_fields, Coin, Key};
use super::error::StoreError;
use rustc_hash::FxHashMap as HashMap;

pub const UNDO_VERSION: u8 = 1;

/// The undo record of the block `hash`: `created` (key, coin value) and `restored` (key, coin
/// as the block found it), each sorted by key so that equal blocks on equal sets give equal
/// bytes.
pub(crate) fn encode_undo(
    hash: &[u8; 32],
    created: &[(&Key, u64)],
    restored: &[(&Key, &Coin)],
) -> Vec<u8> {
    let mut u = Vec::new();
    u.push(UNDO_VERSION);
    u.extend_from_slice(hash);
    u.extend_from_slice(&(created.len() as u32).to_le_bytes());
    for (k, value) in created {
        u.push(k.len() as u8);
        u.extend_from_slice(k);
        u.extend_from_slice(&value.to_le_bytes());
    }
    u.extend_from_slice(&(restored.len() as u32).to_le_bytes());
    for (k, v) in restored {
        u.push(k.len() as u8);
        u.extend_from_slice(k);
        u.extend_from_slice(&(v.encoded_len() as u32).to_le_bytes());
        v.push_value(&mut u);
    }
    u
}

/// A decoded undo record.
pub struct Undo {
    pub hash: [u8; 32],
    /// (key, coin value) of each coin the block created.
    pub created: Vec<(Key, u64)>,
    /// (key, stored value) of each coin the block spent or overwrote.
    pub restored: Vec<(Key, Vec<u8>)>,
}

impl Undo {
    /// What unwinding the block does to each key, in order: its created coins go, then the
    /// coins it spent or overwrote come back (a key in both ends restored).
    pub fn net_changes(self) -> impl Iterator<Item = (Key, Option<Vec<u8>>)> {
        let created = self.created.into_iter().map(|(k, _)| (k, None));
        created.chain(self.restored.into_iter().map(|(k, v)| (k, Some(v))))
    }
}

pub fn decode_undo(b: &[u8]) -> Result<Undo, StoreError> {
    let bad = || StoreError::Undo { len: b.len() };
    let mut at = 0usize;
    let mut take = |n: usize| -> Result<&[u8], StoreError> {
        let s = b.get(at..at + n).ok_or_else(bad)?;
        at += n;
        Ok(s)
    };
    if take(1)? != [UNDO_VERSION] {
        return Err(StoreError::UndoVersion(b.first().copied()));
    }
    let hash: [u8; 32] = take(32)?.try_into().unwrap();
    let n = u32::from_le_bytes(take(4)?.try_into().unwrap()) as usize;
    let mut created = Vec::with_capacity(n.min(1 << 16));
    for _ in 0..n {
        let kl = take(1)?[0] as usize;
        let k = Key::from_slice(take(kl)?).ok_or_else(bad)?;
        let v = u64::from_le_bytes(take(8)?.try_into().unwrap());
        created.push((k, v));
    }
    let n = u32::from_le_bytes(take(4)?.try_into().unwrap()) as usize;
    let mut restored = Vec::with_capacity(n.min(1 << 16));
    for _ in 0..n {
        let kl = take(1)?[0] as usize;
        let k = Key::from_slice(take(kl)?).ok_or_else(bad)?;
        let vl = u32::from_le_bytes(take(4)?.try_into().unwrap()) as usize;
        restored.push((k, take(vl)?.to_vec()));
    }
    if at != b.len() {
        return Err(bad());
    }
    Ok(Undo {
        hash,
        created,
        restored,
    })
}

/// The net change that unwinds the blocks whose undo records are given, highest first:
/// (puts, deletes, count delta, amount delta).
pub type Unwound = (Vec<(Key, Vec<u8>)>, Vec<Key>, i64, i128);

pub fn unwind(undos_descending: &[Vec<u8>]) -> Result<Unwound, StoreError> {
    let mut net: HashMap<Key, Option<Vec<u8>>> = HashMap::default();
    let (mut count, mut amount) = (0i64, 0i128);
    for raw in undos_descending {
        let u = decode_undo(raw)?;
        for (_, value) in &u.created {
            count -= 1;
            amount -= *value as i128;
        }
        for (_, v) in &u.restored {
            count += 1;
            amount += coin_fields(v)?.value as i128;
        }
        net.extend(u.net_changes());
    }
    let mut changes: Vec<_> = net.into_iter().collect();
    changes.sort_unstable_by_key(|c| c.0);
    let (mut puts, mut deletes) = (Vec::new(), Vec::new());
    for (k, v) in changes {
        match v {
            Some(v) => puts.push((k, v)),
            None => deletes.push(k),
        }
    }
    Ok((puts, deletes, count, amount))
}
