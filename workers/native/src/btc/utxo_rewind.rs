//! The UTXO set at a past height of the best chain, read without touching the live set: the
//! undo records (`btc_undo`) of the blocks above that height, tip first, fold into one net
//! change (what unwinding them would delete and put back), which merges in key order with the
//! live `btc_utxo` entries. Past a memory budget the net change spills to sorted run files;
//! a later run (a lower block) overrides an earlier one for the same key, as unwinding does.

use super::coin::Key;
use super::error::StoreError;
use super::undo::decode_undo;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

/// Per-entry bytes a held change costs beyond its value (key, map node, vector header).
const ENTRY_OVERHEAD: usize = 96;

fn io_error(path: &Path, e: std::io::Error) -> StoreError {
    StoreError::Spill(format!("{}: {e}", path.display()))
}

/// The net change of unwinding blocks from the tip down, built one undo record at a time.
pub struct Rewind {
    net: BTreeMap<Key, Option<Vec<u8>>>,
    held: usize,
    budget: usize,
    spill_dir: PathBuf,
    /// Sorted run files, oldest (highest blocks) first.
    runs: Vec<PathBuf>,
    /// Keys kept: `[lo, hi)` (a part of the set), or every key.
    range: Option<(Vec<u8>, Vec<u8>)>,
    pub blocks: u64,
}

impl Rewind {
    pub fn new(budget: usize, spill_dir: &Path) -> Self {
        Rewind {
            net: BTreeMap::new(),
            held: 0,
            budget: budget.max(1 << 12),
            spill_dir: spill_dir.to_path_buf(),
            runs: Vec::new(),
            range: None,
            blocks: 0,
        }
    }

    /// Keeps only the changes to keys in `[lo, hi)` (an empty `hi`: no upper bound).
    pub fn with_range(mut self, lo: Vec<u8>, hi: Vec<u8>) -> Self {
        self.range = Some((lo, hi));
        self
    }

    fn in_range(&self, key: &[u8]) -> bool {
        match &self.range {
            None => true,
            Some((lo, hi)) => key >= lo.as_slice() && (hi.is_empty() || key < hi.as_slice()),
        }
    }

    /// Folds in the undo record of the next block down; returns the block hash it names.
    pub fn apply_undo(&mut self, raw: &[u8]) -> Result<[u8; 32], StoreError> {
        let undo = decode_undo(raw)?;
        let hash = undo.hash;
        for (key, change) in undo.net_changes() {
            if !self.in_range(&key) {
                continue;
            }
            self.held += ENTRY_OVERHEAD + change.as_ref().map_or(0, Vec::len);
            self.net.insert(key, change);
        }
        self.blocks += 1;
        if self.held > self.budget {
            self.spill()?;
        }
        Ok(hash)
    }

    /// Writes the held changes as one sorted run and lets them go.
    fn spill(&mut self) -> Result<(), StoreError> {
        std::fs::create_dir_all(&self.spill_dir).map_err(|e| io_error(&self.spill_dir, e))?;
        let path = self
            .spill_dir
            .join(format!("rewind-{:05}.run", self.runs.len()));
        let file = File::create(&path).map_err(|e| io_error(&path, e))?;
        let mut w = BufWriter::with_capacity(1 << 20, file);
        let mut rec = Vec::new();
        for (key, change) in std::mem::take(&mut self.net) {
            encode_change(&mut rec, &key, change.as_deref());
            w.write_all(&rec).map_err(|e| io_error(&path, e))?;
        }
        w.flush().map_err(|e| io_error(&path, e))?;
        self.runs.push(path);
        self.held = 0;
        Ok(())
    }

    pub fn spilled_runs(&self) -> usize {
        self.runs.len()
    }

    /// Calls `f(key, value)` for every coin of the rewound set, in key order: the live
    /// entries `live` yields in key order, with the net change applied.
    pub fn merge_with<L, F>(self, live: L, mut f: F) -> Result<(), StoreError>
    where
        L: Iterator<Item = Result<(Vec<u8>, Vec<u8>), StoreError>>,
        F: FnMut(&[u8], &[u8]) -> Result<(), StoreError>,
    {
        let mut changes = Changes::new(self.runs, self.net)?;
        let mut next_change = changes.next_change()?;
        let mut live = live.peekable();
        loop {
            let take_live = match (live.peek(), &next_change) {
                (None, None) => break,
                (Some(Err(_)), _) => return Err(live.next().unwrap().unwrap_err()),
                (Some(Ok((k, _))), Some((ck, _))) => k.as_slice() < &ck[..],
                (Some(Ok(_)), None) => true,
                (None, Some(_)) => false,
            };
            if take_live {
                let (k, v) = live.next().unwrap()?;
                f(&k, &v)?;
                continue;
            }
            let (ck, change) = next_change.take().unwrap();
            if let Some(Ok((k, _))) = live.peek() {
                if k.as_slice() == &ck[..] {
                    live.next();
                }
            }
            if let Some(v) = change {
                f(&ck, &v)?;
            }
            next_change = changes.next_change()?;
        }
        Ok(())
    }
}

fn encode_change(out: &mut Vec<u8>, key: &Key, value: Option<&[u8]>) {
    out.clear();
    out.push(key.len() as u8);
    out.extend_from_slice(key);
    match value {
        None => out.push(0),
        Some(v) => {
            out.push(1);
            out.extend_from_slice(&(v.len() as u32).to_le_bytes());
            out.extend_from_slice(v);
        }
    }
}

type Change = (Key, Option<Vec<u8>>);

/// One sorted source of changes: a run file or the changes still held.
enum Source {
    Run(BufReader<File>, PathBuf),
    Held(std::collections::btree_map::IntoIter<Key, Option<Vec<u8>>>),
}

impl Source {
    fn next(&mut self) -> Result<Option<Change>, StoreError> {
        match self {
            Source::Held(it) => Ok(it.next()),
            Source::Run(r, path) => {
                let bad = |e: std::io::Error| io_error(path, e);
                let mut len = [0u8; 1];
                if r.read(&mut len).map_err(bad)? == 0 {
                    return Ok(None);
                }
                let mut key = vec![0u8; len[0] as usize];
                r.read_exact(&mut key).map_err(bad)?;
                let key =
                    Key::from_slice(&key).ok_or(StoreError::UtxoEntry { key: key.clone() })?;
                let mut tag = [0u8; 1];
                r.read_exact(&mut tag).map_err(bad)?;
                if tag[0] == 0 {
                    return Ok(Some((key, None)));
                }
                let mut vl = [0u8; 4];
                r.read_exact(&mut vl).map_err(bad)?;
                let mut v = vec![0u8; u32::from_le_bytes(vl) as usize];
                r.read_exact(&mut v).map_err(bad)?;
                Ok(Some((key, Some(v))))
            }
        }
    }
}

/// The k-way merge of every source; for a key in several, the newest source's change wins.
struct Changes {
    sources: Vec<Source>,
    heads: Vec<Option<Change>>,
    /// (key, newest first) of each source's head.
    heap: BinaryHeap<Reverse<(Key, Reverse<usize>)>>,
}

impl Changes {
    fn new(runs: Vec<PathBuf>, held: BTreeMap<Key, Option<Vec<u8>>>) -> Result<Self, StoreError> {
        let mut sources = Vec::with_capacity(runs.len() + 1);
        for path in runs {
            let f = File::open(&path).map_err(|e| io_error(&path, e))?;
            sources.push(Source::Run(BufReader::with_capacity(1 << 20, f), path));
        }
        sources.push(Source::Held(held.into_iter()));
        let mut c = Changes {
            heads: (0..sources.len()).map(|_| None).collect(),
            sources,
            heap: BinaryHeap::new(),
        };
        for i in 0..c.sources.len() {
            c.advance(i)?;
        }
        Ok(c)
    }

    fn advance(&mut self, i: usize) -> Result<(), StoreError> {
        self.heads[i] = self.sources[i].next()?;
        if let Some((k, _)) = &self.heads[i] {
            self.heap.push(Reverse((*k, Reverse(i))));
        }
        Ok(())
    }

    fn next_change(&mut self) -> Result<Option<Change>, StoreError> {
        let Some(Reverse((key, _))) = self.heap.peek().copied() else {
            return Ok(None);
        };
        // Every source at this key: the highest index (the newest) wins.
        let mut winner: Option<Change> = None;
        let mut winner_at = 0;
        while let Some(Reverse((k, Reverse(i)))) = self.heap.peek().copied() {
            if k != key {
                break;
            }
            self.heap.pop();
            let head = self.heads[i].take();
            if winner.is_none() || i > winner_at {
                winner = head;
                winner_at = i;
            }
            self.advance(i)?;
        }
        Ok(winner)
    }
}

impl Drop for Changes {
    fn drop(&mut self) {
        for s in &self.sources {
            if let Source::Run(_, path) = s {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::btc::coin::{coin_value, utxo_key, Coin};
    use crate::btc::undo::{encode_undo, unwind};

    /// Undo records of `blocks` blocks over a small key space, tip first, with the live set
    /// they unwind from.
    type Entries = Vec<(Vec<u8>, Vec<u8>)>;

    fn history(blocks: u8) -> (Vec<Vec<u8>>, Entries) {
        let mut undos = Vec::new();
        for b in (0..blocks).rev() {
            let created: Vec<(Key, u64)> = (0..4u32)
                .map(|i| (utxo_key(&[b; 32], i), i as u64))
                .collect();
            let restored_coins: Vec<(Key, Coin)> = (0..3u32)
                .map(|i| {
                    let k = utxo_key(&[b.wrapping_sub(1); 32], i);
                    (
                        k,
                        Coin::Stored(coin_value(b as u32, false, 7, i, &[0x51, b])),
                    )
                })
                .collect();
            let created_refs: Vec<(&Key, u64)> = created.iter().map(|(k, v)| (k, *v)).collect();
            let restored_refs: Vec<(&Key, &Coin)> =
                restored_coins.iter().map(|(k, c)| (k, c)).collect();
            undos.push(encode_undo(&[b; 32], &created_refs, &restored_refs));
        }
        let live = (0..blocks)
            .flat_map(|b| {
                (3..5u32).map(move |i| {
                    (
                        utxo_key(&[b; 32], i).to_vec(),
                        coin_value(1, false, 1, i, &[b]),
                    )
                })
            })
            .collect::<BTreeMap<_, _>>()
            .into_iter()
            .collect();
        (undos, live)
    }

    fn rewound(budget: usize, undos: &[Vec<u8>], live: &[(Vec<u8>, Vec<u8>)]) -> (Entries, usize) {
        let dir =
            std::env::temp_dir().join(format!("rechain-rewind-{}-{budget}", std::process::id()));
        let mut r = Rewind::new(budget, &dir);
        r.budget = budget; // below the floor `new` keeps, so that the test spills
        for u in undos {
            r.apply_undo(u).unwrap();
        }
        let runs = r.spilled_runs();
        let mut out = Vec::new();
        r.merge_with(live.iter().cloned().map(Ok), |k, v| {
            out.push((k.to_vec(), v.to_vec()));
            Ok(())
        })
        .unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        (out, runs)
    }

    #[test]
    fn spilled_and_held_rewinds_equal_the_chain_states_unwind() {
        let (undos, live) = history(12);
        let (puts, deletes, _, _) = unwind(&undos).unwrap();
        let mut want: BTreeMap<Vec<u8>, Vec<u8>> = live.iter().cloned().collect();
        for k in deletes {
            want.remove(&k.to_vec());
        }
        for (k, v) in puts {
            want.insert(k.to_vec(), v);
        }
        let want: Vec<_> = want.into_iter().collect();
        let (held, runs) = rewound(1 << 30, &undos, &live);
        assert_eq!(runs, 0);
        assert_eq!(held, want);
        let (spilled, runs) = rewound(400, &undos, &live);
        assert!(runs > 3, "{runs}");
        assert_eq!(spilled, want);
    }
}
