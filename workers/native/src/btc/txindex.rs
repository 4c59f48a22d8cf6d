//! The transaction index (`btc_txindex`) built whole: every staged transaction's txid ->
//! where the tables publish it ([`TxPlace`]). A txid held by several blocks (BIP30
//! duplicates, side branches) points at its best-chain copy, else its lowest, then the lowest
//! block hash. Entries are sorted by key in runs of bounded memory, spilled to files when there
//! is more than one, and merged into the SST writer: the index of a chain of any length is
//! built within the memory it is given.

use crate::sst::{SstError, SstFiles};
use rustc_hash::FxHashMap;
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

/// Where the tables hold a transaction: the value of its `btc_txindex` entry, told apart by
/// length. A copy on the best chain is found by its height, which also names the partition
/// its rows are in (8 bytes); any other copy by its block (40 bytes). Numbers are big-endian.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxPlace {
    /// On the best chain: height, then position in the block.
    Best { height: u32, position: u32 },
    /// Off it: the height range its rows are partitioned under (-1 for a block with no
    /// height), the block hash in display order, the position.
    Other {
        height_range: i32,
        block: [u8; 32],
        position: u32,
    },
}

pub const BEST_PLACE_BYTES: usize = 8;
pub const OTHER_PLACE_BYTES: usize = 40;

impl TxPlace {
    /// The place of the copy at `position` in `block`, whose rows the tables partition by
    /// height // `range_blocks` * `range_blocks` (`schemas/bitcoin.py`).
    pub fn of(block: &IndexBlock, range_blocks: u32, position: u32) -> TxPlace {
        let range = block
            .height
            .map_or(-1, |h| (h / range_blocks * range_blocks) as i32);
        TxPlace::new(block.best, block.height, range, block.hash, position)
    }

    /// The place of a copy at `position` in a block (display-order hash) at `height` whose
    /// rows are in partition `height_range`, on the best chain if `best`.
    pub fn new(
        best: Option<bool>,
        height: Option<u32>,
        height_range: i32,
        block: [u8; 32],
        position: u32,
    ) -> TxPlace {
        match (best, height) {
            (Some(true), Some(height)) => TxPlace::Best { height, position },
            _ => TxPlace::Other {
                height_range,
                block,
                position,
            },
        }
    }

    fn with_position(self, position: u32) -> TxPlace {
        match self {
            TxPlace::Best { height, .. } => TxPlace::Best { height, position },
            TxPlace::Other {
                height_range,
                block,
                ..
            } => TxPlace::Other {
                height_range,
                block,
                position,
            },
        }
    }

    /// Appends the entry's value to `out`.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        match self {
            TxPlace::Best { height, position } => {
                out.extend_from_slice(&height.to_be_bytes());
                out.extend_from_slice(&position.to_be_bytes());
            }
            TxPlace::Other {
                height_range,
                block,
                position,
            } => {
                out.extend_from_slice(&height_range.to_be_bytes());
                out.extend_from_slice(block);
                out.extend_from_slice(&position.to_be_bytes());
            }
        }
    }

    /// An entry's value read back; None for bytes of another length.
    pub fn decode(value: &[u8]) -> Option<TxPlace> {
        let word = |at: usize| -> [u8; 4] { value[at..at + 4].try_into().expect("4 bytes") };
        match value.len() {
            BEST_PLACE_BYTES => Some(TxPlace::Best {
                height: u32::from_be_bytes(word(0)),
                position: u32::from_be_bytes(word(4)),
            }),
            OTHER_PLACE_BYTES => Some(TxPlace::Other {
                height_range: i32::from_be_bytes(word(0)),
                block: value[4..36].try_into().expect("32 bytes"),
                position: u32::from_be_bytes(word(36)),
            }),
            _ => None,
        }
    }
}

/// A block that staged transactions may name: its display-order hash, height (None when it
/// is not connected) and whether it is on the best chain (None: unknown, ranked last).
#[derive(Debug, Clone)]
pub struct IndexBlock {
    pub hash: [u8; 32],
    pub height: Option<u32>,
    pub best: Option<bool>,
}

/// One transaction copy: its key (internal-order txid), its block's rank (lower wins) and
/// its position in the block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    key: [u8; 32],
    rank: u32,
    position: u32,
}

const ENTRY_BYTES: usize = 40;

impl Entry {
    /// By key, then rank. Keys are txids, so their first eight bytes almost always decide,
    /// compared as one word rather than by a call to memcmp (most of a build's sort).
    #[inline]
    fn order(&self, other: &Entry) -> Ordering {
        let word = |e: &Entry| u64::from_be_bytes(e.key[..8].try_into().expect("8 bytes"));
        word(self)
            .cmp(&word(other))
            .then_with(|| (self.key, self.rank).cmp(&(other.key, other.rank)))
    }

    fn encode(&self) -> [u8; ENTRY_BYTES] {
        let mut b = [0u8; ENTRY_BYTES];
        b[..32].copy_from_slice(&self.key);
        b[32..36].copy_from_slice(&self.rank.to_le_bytes());
        b[36..].copy_from_slice(&self.position.to_le_bytes());
        b
    }

    fn decode(b: &[u8; ENTRY_BYTES]) -> Entry {
        let mut key = [0u8; 32];
        key.copy_from_slice(&b[..32]);
        Entry {
            key,
            rank: u32::from_le_bytes(b[32..36].try_into().expect("4 bytes")),
            position: u32::from_le_bytes(b[36..].try_into().expect("4 bytes")),
        }
    }
}

/// Collects transaction copies, then writes the index as SST files: its keys cut into ranges
/// (by their first two bytes), each range sorted, spilled and written on a thread of its own.
pub struct TxIndexBuilder {
    /// By rank: the place of each block's first transaction.
    places: Vec<TxPlace>,
    rank_of: FxHashMap<[u8; 32], u32>,
    ranges: Vec<KeyRange>,
    /// Entries a range holds before it spills a sorted run.
    max_entries: usize,
    spill_dir: PathBuf,
    /// Copies whose block is not among the blocks given (not published, so not indexed).
    pub unknown_blocks: u64,
}

/// One range of keys: the entries held, and the sorted runs spilled to files.
struct KeyRange {
    entries: Vec<Entry>,
    runs: Vec<PathBuf>,
}

impl TxIndexBuilder {
    /// `memory`: bytes the sorted runs may hold; runs beyond one go to files in `spill_dir`.
    pub fn new(
        blocks: Vec<IndexBlock>,
        range_blocks: u32,
        memory: usize,
        spill_dir: &Path,
    ) -> TxIndexBuilder {
        TxIndexBuilder::with_ranges(blocks, range_blocks, memory, spill_dir, 1)
    }

    /// `new`, with the keys cut into `ranges` ranges (at most 256) that `finish` writes side
    /// by side; they share `memory`.
    pub fn with_ranges(
        blocks: Vec<IndexBlock>,
        range_blocks: u32,
        memory: usize,
        spill_dir: &Path,
        ranges: usize,
    ) -> TxIndexBuilder {
        let ranges = ranges.clamp(1, 256);
        let mut order: Vec<usize> = (0..blocks.len()).collect();
        // Best chain first, then by height (unconnected last), then by hash.
        order.sort_by_key(|&i| {
            let b = &blocks[i];
            let best = match b.best {
                Some(true) => 0u8,
                Some(false) => 1,
                None => 2,
            };
            (best, b.height.is_none(), b.height, b.hash)
        });
        let mut places = Vec::with_capacity(blocks.len());
        let mut rank_of = FxHashMap::default();
        rank_of.reserve(blocks.len());
        for (rank, &i) in order.iter().enumerate() {
            let b = &blocks[i];
            places.push(TxPlace::of(b, range_blocks, 0));
            rank_of.insert(b.hash, rank as u32);
        }
        let max_entries = (memory / ranges / ENTRY_BYTES).max(1 << 16);
        TxIndexBuilder {
            places,
            rank_of,
            // Sized once: growing by doubling would hold the old and new buffers at once.
            ranges: (0..ranges)
                .map(|_| KeyRange {
                    entries: Vec::with_capacity(max_entries),
                    runs: Vec::new(),
                })
                .collect(),
            max_entries,
            spill_dir: spill_dir.to_path_buf(),
            unknown_blocks: 0,
        }
    }

    /// Adds one transaction copy: its txid and block hash in display order.
    pub fn add(&mut self, txid: &[u8; 32], block_hash: &[u8; 32], position: u32) -> io::Result<()> {
        let Some(&rank) = self.rank_of.get(block_hash) else {
            self.unknown_blocks += 1;
            return Ok(());
        };
        let mut key = *txid;
        key.reverse();
        let top = usize::from(key[0]) << 8 | usize::from(key[1]);
        let k = (top * self.ranges.len()) >> 16;
        let range = &mut self.ranges[k];
        range.entries.push(Entry {
            key,
            rank,
            position,
        });
        if range.entries.len() >= self.max_entries {
            range.spill(&self.spill_dir, k)?;
        }
        Ok(())
    }

    /// Writes the index as SST files named by `path(range, i)`, each closed once it holds
    /// its range's share of `sst_memory` bytes (see [`SstFiles`]), whatever the chain's
    /// length; the ranges are written on threads of their own. Returns the files, in key
    /// order, and the entries.
    pub fn finish(
        self,
        path: impl Fn(usize, usize) -> PathBuf + Sync,
        sst_memory: usize,
        compress: bool,
    ) -> Result<(Vec<PathBuf>, u64), SstError> {
        let share = (sst_memory / self.ranges.len()).max(1);
        let TxIndexBuilder {
            places,
            ranges,
            spill_dir,
            ..
        } = self;
        let (places, spill_dir, path) = (&places, &spill_dir, &path);
        let written: Vec<Result<(Vec<PathBuf>, u64), SstError>> = std::thread::scope(|scope| {
            let running: Vec<_> = ranges
                .into_iter()
                .enumerate()
                .map(|(k, range)| {
                    scope.spawn(move || {
                        let mut out = SstFiles::create(|i| path(k, i), share, compress)?;
                        range.finish_into(places, spill_dir, k, |key, v| out.add(key, v))?;
                        Ok(out.finish()?)
                    })
                })
                .collect();
            running
                .into_iter()
                .map(|h| h.join().expect("a tx index range panicked"))
                .collect()
        });
        let (mut files, mut entries) = (Vec::new(), 0);
        for range in written {
            let (f, n) = range?;
            files.extend(f);
            entries += n;
        }
        Ok((files, entries))
    }
}

impl KeyRange {
    fn spill(&mut self, spill_dir: &Path, k: usize) -> io::Result<()> {
        self.entries.sort_unstable_by(Entry::order);
        std::fs::create_dir_all(spill_dir)?;
        let path = spill_dir.join(format!("run-{k:03}-{:06}.bin", self.runs.len()));
        let mut out = BufWriter::with_capacity(1 << 20, File::create(&path)?);
        for e in &self.entries {
            out.write_all(&e.encode())?;
        }
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        self.runs.push(path);
        self.entries.clear();
        Ok(())
    }

    /// Hands `sink` each txid's entry (key, value) of this range (`k`), in key order.
    fn finish_into<E: From<io::Error>>(
        mut self,
        places: &[TxPlace],
        spill_dir: &Path,
        k: usize,
        mut sink: impl FnMut(&[u8], &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut value = Vec::with_capacity(OTHER_PLACE_BYTES);
        let mut last: Option<[u8; 32]> = None;
        let mut put = |e: Entry| -> Result<(), E> {
            // Entries of a key come best first: the rest are other copies.
            if last == Some(e.key) {
                return Ok(());
            }
            last = Some(e.key);
            value.clear();
            places[e.rank as usize]
                .with_position(e.position)
                .encode_into(&mut value);
            sink(&e.key, &value)
        };
        if self.runs.is_empty() {
            self.entries.sort_unstable_by(Entry::order);
            for &e in &self.entries {
                put(e)?;
            }
            return Ok(());
        }
        if !self.entries.is_empty() {
            self.spill(spill_dir, k)?;
        }
        let mut readers = self
            .runs
            .iter()
            .map(|p| Ok(RunReader(BufReader::with_capacity(1 << 20, File::open(p)?))))
            .collect::<io::Result<Vec<_>>>()?;
        let mut heap = BinaryHeap::with_capacity(readers.len());
        for (i, r) in readers.iter_mut().enumerate() {
            if let Some(e) = r.next()? {
                heap.push(Head(e, i));
            }
        }
        while let Some(Head(e, i)) = heap.pop() {
            put(e)?;
            if let Some(next) = readers[i].next()? {
                heap.push(Head(next, i));
            }
        }
        for p in &self.runs {
            std::fs::remove_file(p)?;
        }
        Ok(())
    }
}

struct RunReader(BufReader<File>);

impl RunReader {
    fn next(&mut self) -> io::Result<Option<Entry>> {
        let mut b = [0u8; ENTRY_BYTES];
        match self.0.read_exact(&mut b) {
            Ok(()) => Ok(Some(Entry::decode(&b))),
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// A run's next entry in the merge: the heap pops the least (key, rank), then run order.
struct Head(Entry, usize);

impl PartialEq for Head {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Head {}
impl PartialOrd for Head {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Head {
    fn cmp(&self, other: &Self) -> Ordering {
        other.0.order(&self.0).then(other.1.cmp(&self.1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_read_back_as_written_and_other_lengths_are_refused() {
        let places = [
            TxPlace::Best {
                height: 0,
                position: 0,
            },
            TxPlace::Best {
                height: 850_000,
                position: u32::MAX,
            },
            TxPlace::Other {
                height_range: -1,
                block: [7; 32],
                position: 3,
            },
            TxPlace::Other {
                height_range: 840_000,
                block: std::array::from_fn(|i| i as u8),
                position: 1,
            },
        ];
        for place in places {
            let mut v = Vec::new();
            place.encode_into(&mut v);
            let want = match place {
                TxPlace::Best { .. } => BEST_PLACE_BYTES,
                TxPlace::Other { .. } => OTHER_PLACE_BYTES,
            };
            assert_eq!(v.len(), want);
            assert_eq!(TxPlace::decode(&v), Some(place));
        }
        let mut v = Vec::new();
        TxPlace::Best {
            height: 0x0102_0304,
            position: 5,
        }
        .encode_into(&mut v);
        assert_eq!(v, [1, 2, 3, 4, 0, 0, 0, 5], "big-endian");
        for len in [0, 7, 9, 39, 41, 75] {
            assert_eq!(TxPlace::decode(&vec![0; len]), None, "{len} bytes");
        }
    }

    #[test]
    fn entries_order_by_key_then_rank() {
        let entry = |first: u8, last: u8, rank: u32| {
            let mut key = [0u8; 32];
            key[0] = first;
            key[31] = last;
            Entry {
                key,
                rank,
                position: 0,
            }
        };
        // Keys that differ past the first word, and equal keys, fall back to the whole key
        // and the rank.
        let mut got = vec![
            entry(1, 0, 0),
            entry(0, 2, 0),
            entry(0, 1, 5),
            entry(0, 1, 3),
        ];
        got.sort_unstable_by(Entry::order);
        let want = vec![
            entry(0, 1, 3),
            entry(0, 1, 5),
            entry(0, 2, 0),
            entry(1, 0, 0),
        ];
        assert_eq!(got, want);
    }

    fn block(n: u8, height: Option<u32>, best: Option<bool>) -> IndexBlock {
        IndexBlock {
            hash: [n; 32],
            height,
            best,
        }
    }

    fn build(
        memory: usize,
        ranges: usize,
        copies: &[([u8; 32], u8, u32)],
        name: &str,
    ) -> Vec<(Vec<u8>, TxPlace)> {
        let dir =
            std::env::temp_dir().join(format!("rechain-txindex-{name}-{}", std::process::id()));
        let blocks = vec![
            block(1, Some(5), Some(true)),
            block(2, Some(12_345), Some(true)),
            block(3, Some(4), Some(false)),
            block(4, None, Some(false)),
            block(5, Some(4), Some(false)),
        ];
        let mut b = TxIndexBuilder::with_ranges(blocks, 10_000, memory, &dir, ranges);
        b.max_entries = memory;
        for (txid, blk, pos) in copies {
            b.add(txid, &[*blk; 32], *pos).unwrap();
        }
        assert_eq!(b.unknown_blocks, 1);
        let spilled = b.ranges.iter().any(|r| !r.runs.is_empty());
        let mut got = Vec::new();
        let TxIndexBuilder {
            places,
            ranges: built,
            ..
        } = b;
        for (k, range) in built.into_iter().enumerate() {
            range
                .finish_into(&places, &dir, k, |k, v| {
                    got.push((k.to_vec(), TxPlace::decode(v).unwrap()));
                    Ok::<(), io::Error>(())
                })
                .unwrap();
        }
        assert_eq!(spilled, memory < copies.len());
        if spilled {
            assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "runs removed");
            std::fs::remove_dir_all(&dir).unwrap();
        }
        got
    }

    #[test]
    fn each_txid_points_at_its_best_then_lowest_copy_in_memory_and_spilled() {
        let tx = |n: u8| {
            let mut t = [0u8; 32];
            t[0] = n; // display order: the first byte is the key's last
            t[31] = 100 - n;
            t
        };
        let copies = [
            (tx(1), 3, 7), // off-chain at 4 loses to the best chain at 12,345
            (tx(1), 2, 9),
            (tx(2), 4, 1), // unconnected loses to connected off-chain
            (tx(2), 5, 2), // same height off-chain: lower hash wins (block 3 < 5)
            (tx(2), 3, 3),
            (tx(3), 4, 0),
            (tx(4), 9, 0), // unknown block: not indexed
            (tx(5), 1, 4),
        ];
        for (memory, ranges) in [(1 << 20, 1), (2, 1), (1, 1), (1 << 20, 3), (1, 2)] {
            let got = build(memory, ranges, &copies, &format!("m{memory}-{ranges}"));
            let key = |n: u8| {
                let mut k = tx(n);
                k.reverse();
                k.to_vec()
            };
            let other = |height_range: i32, n: u8, position: u32| TxPlace::Other {
                height_range,
                block: [n; 32],
                position,
            };
            let mut want = vec![
                (
                    key(1),
                    TxPlace::Best {
                        height: 12_345,
                        position: 9,
                    },
                ),
                (key(2), other(0, 3, 3)),
                (key(3), other(-1, 4, 0)),
                (
                    key(5),
                    TxPlace::Best {
                        height: 5,
                        position: 4,
                    },
                ),
            ];
            want.sort_by(|a, b| a.0.cmp(&b.0));
            assert_eq!(got, want, "memory {memory}, {ranges} ranges");
        }
    }

    #[test]
    fn files_roll_over_at_the_memory_cap_and_an_empty_index_leaves_none() {
        let dir = std::env::temp_dir().join(format!("rechain-txindex-roll-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let name = |k: usize, i: usize| dir.join(format!("{k}-{i}.sst"));
        let blocks = || vec![block(1, Some(0), Some(true))];
        let mut b = TxIndexBuilder::new(blocks(), 10_000, 1 << 20, &dir);
        for n in 0..5u8 {
            b.add(&[n; 32], &[1; 32], u32::from(n)).unwrap();
        }
        // Two keys' filter hashes (8 bytes each) and an empty index block (8) a file.
        let (files, entries) = b.finish(name, 24, true).unwrap();
        assert_eq!((files.len(), entries), (3, 5));
        assert!(files.iter().all(|f| f.exists()));
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        // Two ranges: each writes its own files; together they list every key in order.
        let mut b = TxIndexBuilder::with_ranges(blocks(), 10_000, 1 << 20, &dir, 2);
        for n in 0..6u8 {
            b.add(&[n * 50; 32], &[1; 32], u32::from(n)).unwrap();
        }
        let (files, entries) = b.finish(name, 48, true).unwrap();
        assert_eq!(entries, 6);
        let mut sorted = files.clone();
        sorted.sort();
        assert_eq!(files, sorted, "files in key order");
        assert!(files.iter().any(|f| f.ends_with("0-0.sst")));
        assert!(files.iter().any(|f| f.ends_with("1-0.sst")));
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        let empty = TxIndexBuilder::new(blocks(), 10_000, 1 << 20, &dir);
        let (files, entries) = empty.finish(name, 24, true).unwrap();
        assert_eq!((files.len(), entries), (0, 0));
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
