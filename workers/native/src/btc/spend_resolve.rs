//! Spend resolution partitioned by txid, so that chunks of the chain state apply in parallel.
//!
//! Applying a chunk (`chain_state::Chunk::apply`) needs the coins its blocks spend as they
//! are when the chunk starts. Applied in height order, each chunk reads them from the set
//! the chunks before it left. Instead, every chunk can first emit its *events*, split into
//! partitions by txid (`Chunk::events`): each output it creates (with the coin) and each
//! outpoint it spends. One task per partition then folds that partition's events of all the
//! chunks in chain order (`resolve`) and tells each chunk, for every coin it needs, what the
//! chunks before it left there: a coin, nothing (spent, or never created in the range), or
//! *stored* (not touched by the range: the caller reads it from the set the range starts
//! on). With those coins each chunk applies on its own, on any worker, and gives exactly
//! what the sequential apply gives: the first chunk starts from the stored set, and a chunk
//! whose predecessors all applied cleanly sees the set they left, so its result, verdict
//! included, is the sequential one. Results after a failing chunk are discarded.
//!
//! Partitions are ranges of the txid's first two bytes (internal order), so each one is a
//! contiguous range of `btc_utxo` keys.
//!
//! ```text
//! events (one partition of one chunk):
//!   kind u8 (SPEND 0 | CREATE 1 | COINBASE 2) | height u32 LE | pos u32 LE
//!   | key len u8 | key | (CREATE, COINBASE:) value len u32 LE | value
//! resolved (one chunk, from one partition), keys ascending:
//!   key len u8 | key | state u8 (GONE 0 | COIN 1 | STORED 2) | (COIN:) value len u32 LE | value
//! ```

use super::chain_state::Chunk;
use super::coin::{coin_value, output_row, spendable, utxo_key, Key};
use super::error::StoreError;
use rustc_hash::FxHashMap as HashMap;

const SPEND: u8 = 0;
const CREATE: u8 = 1;
const COINBASE: u8 = 2;

const GONE: u8 = 0;
const COIN: u8 = 1;
const STORED: u8 = 2;

/// The partition (of `partitions`, at most 65,536) holding a `btc_utxo` key.
pub fn partition_of(key: &[u8], partitions: usize) -> usize {
    let top = u16::from_be_bytes([key[1], key[2]]) as usize;
    (top * partitions) >> 16
}

fn put_key(out: &mut Vec<u8>, key: &[u8]) {
    out.push(key.len() as u8);
    out.extend_from_slice(key);
}

fn put_value(out: &mut Vec<u8>, value: &[u8]) {
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    out.extend_from_slice(value);
}

/// A reader of the records above that reports a short or malformed buffer as an error.
struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], StoreError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.buf.len());
        let end = end.ok_or(StoreError::SpendRecordsShort { at: self.at })?;
        let b = &self.buf[self.at..end];
        self.at = end;
        Ok(b)
    }
    fn u8(&mut self) -> Result<u8, StoreError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, StoreError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap()))
    }
    fn key(&mut self) -> Result<Key, StoreError> {
        let n = self.u8()? as usize;
        Key::from_slice(self.take(n)?).ok_or(StoreError::SpendKey { len: n })
    }
    fn value(&mut self) -> Result<&'a [u8], StoreError> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    fn done(&self) -> bool {
        self.at == self.buf.len()
    }
}

impl Chunk {
    /// The chunk's events, one buffer per partition: in each, every spendable output created
    /// (coinbase outputs marked) and every outpoint spent, in block and transaction order,
    /// a transaction's spends before its outputs. The same outputs and spends `apply` and
    /// `needed` consider.
    pub fn events(&self, partitions: usize) -> Vec<Vec<u8>> {
        let partitions = partitions.clamp(1, 1 << 16);
        let mut out = vec![Vec::new(); partitions];
        for (height, _, data, sp) in self.blocks() {
            for (t, tx) in sp.txs.iter().enumerate() {
                let head = |kind: u8, key: &Key| {
                    let mut rec = Vec::with_capacity(48);
                    rec.push(kind);
                    rec.extend_from_slice(&height.to_le_bytes());
                    rec.extend_from_slice(&(t as u32).to_le_bytes());
                    put_key(&mut rec, key);
                    rec
                };
                if t > 0 {
                    for inp in &sp.ins[tx.ins.0..tx.ins.1] {
                        let p = &data[inp.prev..inp.prev + 36];
                        let key =
                            utxo_key(&p[..32], u32::from_le_bytes(p[32..].try_into().unwrap()));
                        out[partition_of(&key, partitions)].extend(head(SPEND, &key));
                    }
                }
                for (vout, o) in sp.outs[tx.outs.0..tx.outs.1].iter().enumerate() {
                    let script = &data[o.script.0..o.script.1];
                    if !spendable(height, script) {
                        continue;
                    }
                    let key = utxo_key(&tx.txid, vout as u32);
                    let mut rec = head(if t == 0 { COINBASE } else { CREATE }, &key);
                    let row = output_row(tx, vout);
                    put_value(&mut rec, &coin_value(height, t == 0, o.value, row, script));
                    out[partition_of(&key, partitions)].extend(rec);
                }
            }
        }
        out
    }

    /// The values `apply` takes (one per `needed` key), from the `resolve` records of this
    /// chunk (one buffer per partition) and the stored values of the keys they left to the
    /// set (`stored`). A needed key that neither gives is an error.
    pub fn coins_from(
        &self,
        resolved: &[&[u8]],
        stored: &HashMap<Key, Option<Vec<u8>>>,
    ) -> Result<Vec<Option<Vec<u8>>>, StoreError> {
        let mut known: HashMap<Key, Option<&[u8]>> = HashMap::default();
        let mut from_set: Vec<Key> = Vec::new();
        for buf in resolved {
            let mut r = Reader { buf, at: 0 };
            while !r.done() {
                let key = r.key()?;
                match r.u8()? {
                    GONE => {
                        known.insert(key, None);
                    }
                    COIN => {
                        known.insert(key, Some(r.value()?));
                    }
                    STORED => from_set.push(key),
                    s => return Err(StoreError::ResolvedState(s)),
                }
            }
        }
        for key in from_set {
            let v = stored
                .get(&key)
                .ok_or_else(|| StoreError::NoStoredValue(key.to_vec()))?;
            known.insert(key, v.as_deref());
        }
        self.needed
            .iter()
            .map(|k| {
                known
                    .get(k)
                    .map(|v| v.map(<[u8]>::to_vec))
                    .ok_or_else(|| StoreError::NoResolvedCoin(k.to_vec()))
            })
            .collect()
    }
}

/// The keys a chunk's resolve records leave to the stored set (`STORED`), ascending.
pub fn stored_keys(resolved: &[u8]) -> Result<Vec<Key>, StoreError> {
    let mut r = Reader {
        buf: resolved,
        at: 0,
    };
    let mut keys = Vec::new();
    while !r.done() {
        let key = r.key()?;
        match r.u8()? {
            GONE => {}
            COIN => {
                r.value()?;
            }
            STORED => keys.push(key),
            s => return Err(StoreError::ResolvedState(s)),
        }
    }
    Ok(keys)
}

struct Event<'a> {
    key: Key,
    height: u32,
    pos: u32,
    kind: u8,
    chunk: u32,
    value: &'a [u8],
}

/// Folds one partition's events of consecutive chunks (`events[c]`: chunk `c`'s buffer for
/// this partition, chunks in height order) and returns, per chunk, the resolve records of
/// the coins it needs from before it: every key whose first event in the chunk is a spend or
/// a coinbase output (`Chunk::needed`'s keys in this partition), with what the earlier chunks
/// left there.
pub fn resolve(events: &[&[u8]]) -> Result<Vec<Vec<u8>>, StoreError> {
    let mut all: Vec<Event<'_>> = Vec::new();
    for (c, buf) in events.iter().enumerate() {
        let mut r = Reader { buf, at: 0 };
        while !r.done() {
            let kind = r.u8()?;
            let height = r.u32()?;
            let pos = r.u32()?;
            let key = r.key()?;
            let value = match kind {
                SPEND => &[][..],
                CREATE | COINBASE => r.value()?,
                k => return Err(StoreError::EventKind(k)),
            };
            all.push(Event {
                key,
                height,
                pos,
                kind,
                chunk: c as u32,
                value,
            });
        }
    }
    // A transaction's spends come before its outputs (kind SPEND sorts first); the sort is
    // stable, so a chunk's events of one key and place keep their order.
    all.sort_by(|a, b| {
        (a.key, a.height, a.pos, a.kind.min(1)).cmp(&(b.key, b.height, b.pos, b.kind.min(1)))
    });
    let mut out = vec![Vec::new(); events.len()];
    let mut i = 0;
    while i < all.len() {
        let key = all[i].key;
        // What the events so far left at this key: unknown (the stored set's) until one.
        let mut state: Option<Option<&[u8]>> = None;
        let mut last_chunk = u32::MAX;
        while i < all.len() && all[i].key == key {
            let e = &all[i];
            if e.chunk != last_chunk {
                last_chunk = e.chunk;
                if e.kind != CREATE {
                    let rec = &mut out[e.chunk as usize];
                    put_key(rec, &key);
                    match state {
                        None => rec.push(STORED),
                        Some(None) => rec.push(GONE),
                        Some(Some(v)) => {
                            rec.push(COIN);
                            put_value(rec, v);
                        }
                    }
                }
            }
            state = Some(if e.kind == SPEND { None } else { Some(e.value) });
            i += 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::btc::chain_state::fixtures::{block, coinbase, tx, txid, COIN};
    use crate::btc::locktime::MedianTimes;
    use crate::btc::network::Network;

    /// Applies `blocks` (height, bytes) as chunks of `sizes` blocks: in order against one
    /// set, and each on its own from resolved coins; both must give the same results.
    /// Returns the blocks applied in order and the failure's reason.
    fn same_both_ways(
        blocks: &[(u32, Vec<u8>)],
        sizes: &[usize],
        partitions: usize,
    ) -> (u32, Option<&'static str>) {
        let mut chunks = Vec::new();
        let mut at = 0;
        for &n in sizes {
            let part: Vec<_> = blocks[at..at + n]
                .iter()
                .map(|(h, b)| (*h, [*h as u8; 32], b.clone()))
                .collect();
            chunks.push(Chunk::from_blocks(Network::Main, part));
            at += n;
        }
        // In order.
        let mut set: HashMap<Key, Vec<u8>> = HashMap::default();
        let mut sequential = Vec::new();
        for c in &chunks {
            let a = c
                .apply(
                    c.needed.iter().map(|k| set.get(k).cloned()).collect(),
                    MedianTimes(&[]),
                )
                .unwrap();
            for k in &a.deletes {
                set.remove(k);
            }
            for (k, v) in &a.puts {
                set.insert(*k, v.clone());
            }
            let failed = a.failure.is_some();
            sequential.push(a);
            if failed {
                break;
            }
        }
        // Resolved: every partition folded, then every chunk applied alone.
        let events: Vec<Vec<Vec<u8>>> = chunks.iter().map(|c| c.events(partitions)).collect();
        let mut per_chunk: Vec<Vec<Vec<u8>>> = vec![Vec::new(); chunks.len()];
        for p in 0..partitions {
            let bufs: Vec<&[u8]> = events.iter().map(|e| e[p].as_slice()).collect();
            for (c, rec) in resolve(&bufs).unwrap().into_iter().enumerate() {
                per_chunk[c].push(rec);
            }
        }
        for (idx, (c, a)) in chunks.iter().zip(&sequential).enumerate() {
            let recs: Vec<&[u8]> = per_chunk[idx].iter().map(|r| r.as_slice()).collect();
            // The range starts on an empty set: every stored key is absent.
            let stored: HashMap<Key, Option<Vec<u8>>> = recs
                .iter()
                .flat_map(|r| stored_keys(r).unwrap())
                .map(|k| (k, None))
                .collect();
            let b = c
                .apply(c.coins_from(&recs, &stored).unwrap(), MedianTimes(&[]))
                .unwrap();
            assert_eq!(a.failure, b.failure, "chunk {idx}");
            assert_eq!(a.puts, b.puts, "chunk {idx}");
            assert_eq!(a.deletes, b.deletes, "chunk {idx}");
            assert_eq!(a.undo, b.undo, "chunk {idx}");
            assert_eq!(a.spends.value, b.spends.value, "chunk {idx}");
            assert_eq!(a.spends.prev_height, b.spends.prev_height, "chunk {idx}");
            assert_eq!(
                (a.count_delta, a.amount_delta),
                (b.count_delta, b.amount_delta)
            );
        }
        let applied = sequential.iter().map(|a| a.blocks).sum();
        (
            applied,
            sequential
                .last()
                .and_then(|a| a.failure.map(|f| f.2.reason())),
        )
    }

    /// Blocks 1..=n: each a coinbase, and from height 101 on a spend of the coinbase 100
    /// blocks below with two outputs, one of which the next block spends.
    fn chain(n: u32) -> Vec<(u32, Vec<u8>)> {
        let mut blocks = Vec::new();
        let mut coinbases = Vec::new();
        let mut last_change: Option<[u8; 32]> = None;
        for h in 1..=n {
            let cb = coinbase(&[0x02, h as u8, (h >> 8) as u8], 50 * COIN);
            let mut txs = vec![cb.clone()];
            if h > 100 {
                let old: &Vec<u8> = &coinbases[(h - 101) as usize];
                let mut ins: Vec<([u8; 32], u32, &[u8])> = vec![(txid(old), 0, b"")];
                if let Some(prev) = last_change {
                    ins.push((prev, 1, b""));
                }
                let spend = tx(&ins, &[(10 * COIN, &[0x51]), (COIN, &[0x52])]);
                last_change = Some(txid(&spend));
                txs.push(spend);
            }
            coinbases.push(cb);
            let refs: Vec<&Vec<u8>> = txs.iter().collect();
            blocks.push((h, block(&refs)));
        }
        blocks
    }

    #[test]
    fn resolved_chunks_apply_as_in_order() {
        let blocks = chain(140);
        for partitions in [1, 3, 64] {
            for sizes in [&[140][..], &[100, 1, 1, 38], &[7; 20]] {
                assert_eq!(same_both_ways(&blocks, sizes, partitions), (140, None));
            }
        }
    }

    #[test]
    fn a_failure_is_the_sequential_verdict() {
        let mut blocks = chain(130);
        // Height 125 spends the change output height 110 created, already spent at 111.
        let (_, b110) = &blocks[109];
        let chunk = Chunk::from_blocks(Network::Main, vec![(110, [0; 32], b110.clone())]);
        let spend110 = chunk.blocks().next().unwrap().3.txs[1].txid;
        let cb = coinbase(&[0x02, 125, 0], 50 * COIN);
        let double = tx(&[(spend110, 1, b"")], &[(COIN, &[0x51])]);
        blocks[124] = (125, block(&[&cb, &double]));
        let verdict = (124, Some("bad-txns-inputs-missingorspent"));
        assert_eq!(same_both_ways(&blocks, &[10; 13], 4), verdict);
        assert_eq!(same_both_ways(&blocks, &[120, 10], 1), verdict);
    }

    #[test]
    fn a_repeated_coinbase_resolves_to_its_latest_copy() {
        let x = coinbase(b"\x01\x07", 50 * COIN);
        let blocks = vec![(1, block(&[&x])), (2, block(&[&x])), (3, block(&[&x]))];
        assert_eq!(same_both_ways(&blocks, &[1, 1, 1], 2), (3, None));
        assert_eq!(same_both_ways(&blocks, &[3], 2), (3, None));
    }

    #[test]
    fn malformed_records_are_errors() {
        assert!(resolve(&[&[1, 0, 0]]).is_err());
        assert!(resolve(&[&[9, 0, 0, 0, 0, 0, 0, 0, 0, 0]]).is_err());
        assert!(stored_keys(&[3, 1, 2, 3, 7]).is_err());
        assert_eq!(resolve(&[&[]]).unwrap(), vec![Vec::<u8>::new()]);
    }
}
