//! Planning a reindex from a node's block index: decode every `'b'` record (on background
//! threads, while the reader goes on), turn the ones with block data into per-file record
//! starts (sorted, ready for the guided scan), and, once the files are linked, compare the
//! index's heights with the linked tree's.
//!
//! Byte layouts stay in `core_index`; this module only decides what to check where.

use super::core_index::{DiskBlockIndex, HAVE_DATA};
use crate::datasets::hex::{display_hex, parse_display_hex};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;

/// Bytes in front of `nDataPos` in a blk file: the record's magic and size fields.
pub const RECORD_PREFIX: u32 = 8;

/// What the decoded index says, in LevelDB (hash) order.
#[derive(Debug, Default)]
pub struct IndexPlan {
    /// Every decoded entry: internal hash and height.
    pub hashes: Vec<[u8; 32]>,
    pub heights: Vec<u32>,
    /// Whether the entry became a record start to check (in `files`).
    pub hinted: Vec<bool>,
    /// Records that did not decode: (shown key, reason).
    pub problems: Vec<(String, String)>,
    /// Entries with data that cannot be checked at all: (file, record offset, hash, reason).
    pub unplaceable: Vec<(u32, i64, String, String)>,
    /// Per present file (ascending): record starts (magic offsets) ascending, with hashes.
    pub files: Vec<FileHints>,
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct FileHints {
    pub file: u32,
    pub offsets: Vec<u64>,
    pub hashes: Vec<[u8; 32]>,
    /// The index's height of each block.
    pub heights: Vec<u32>,
}

impl IndexPlan {
    /// Entries that name block data (checkable or not).
    pub fn with_data(&self) -> usize {
        self.unplaceable.len() + self.files.iter().map(|f| f.offsets.len()).sum::<usize>()
    }
}

/// One chunk of records planned on its own (in key order): what `IndexPlan` holds, with the
/// record starts still as one list sorted by (file, offset).
#[derive(Debug, Default)]
struct Part {
    hashes: Vec<[u8; 32]>,
    heights: Vec<u32>,
    hinted: Vec<bool>,
    problems: Vec<(String, String)>,
    unplaceable: Vec<(u32, i64, String, String)>,
    /// ((file << 32) | record offset, hash, height), sorted by position.
    starts: Vec<(u64, [u8; 32], u32)>,
}

/// Where a record start sorts: file, then offset (`nDataPos` is 32 bits in Core).
fn position(file: u32, offset: u32) -> u64 {
    (file as u64) << 32 | offset as u64
}

/// Decodes records `key(i)`, `value(i)` for `i` in `0..n` (checking each header's hash against
/// its key) and plans them for `present` files.
fn plan_part<'a, K, V>(n: usize, key: K, value: V, present: &[u32]) -> Part
where
    K: Fn(usize) -> &'a [u8],
    V: Fn(usize) -> &'a [u8],
{
    let mut out = Part {
        hashes: Vec::with_capacity(n),
        heights: Vec::with_capacity(n),
        hinted: Vec::with_capacity(n),
        starts: Vec::with_capacity(n),
        ..Default::default()
    };
    for i in 0..n {
        let k = key(i);
        let (hash, v) = match DiskBlockIndex::decode_record(k, value(i)) {
            Ok(d) => d,
            Err(e) => {
                let shown = if k.len() == 33 {
                    display_hex(&k[1..])
                } else {
                    crate::datasets::hex::to_hex(k)
                };
                out.problems.push((shown, e.to_string()));
                continue;
            }
        };
        out.hashes.push(hash);
        out.heights.push(v.height);
        out.hinted.push(false);
        let (Some(file), Some(pos)) = (v.file, v.data_pos) else {
            continue;
        };
        if v.status & HAVE_DATA == 0 {
            continue;
        }
        let reason = if !present.contains(&file) {
            "file does not exist".to_string()
        } else if pos < RECORD_PREFIX {
            format!("data position {pos} is inside the first record's header")
        } else {
            out.starts
                .push((position(file, pos - RECORD_PREFIX), hash, v.height));
            *out.hinted.last_mut().expect("pushed above") = true;
            continue;
        };
        out.unplaceable.push((
            file,
            pos as i64 - RECORD_PREFIX as i64,
            display_hex(&hash),
            reason,
        ));
    }
    // Stable: two entries claiming one position stay in key order.
    out.starts.sort_by_key(|s| s.0);
    out
}

/// The plan from parts given in key order. The parts' sorted starts are merged straight into
/// per-file lists of their exact size (no concatenated copy to sort).
fn assemble(parts: Vec<Part>) -> IndexPlan {
    let n = parts.iter().map(|p| p.hashes.len()).sum();
    let mut out = IndexPlan {
        hashes: Vec::with_capacity(n),
        heights: Vec::with_capacity(n),
        hinted: Vec::with_capacity(n),
        ..Default::default()
    };
    let mut per_file: BTreeMap<u32, usize> = BTreeMap::new();
    for part in &parts {
        out.hashes.extend_from_slice(&part.hashes);
        out.heights.extend_from_slice(&part.heights);
        out.hinted.extend_from_slice(&part.hinted);
        for s in &part.starts {
            *per_file.entry((s.0 >> 32) as u32).or_default() += 1;
        }
    }
    out.files = per_file
        .iter()
        .map(|(&file, &count)| FileHints {
            file,
            offsets: Vec::with_capacity(count),
            hashes: Vec::with_capacity(count),
            heights: Vec::with_capacity(count),
        })
        .collect();
    // Smallest position first; equal positions by part, so key order is kept among them.
    let mut next: BinaryHeap<Reverse<(u64, usize)>> = parts
        .iter()
        .enumerate()
        .filter_map(|(p, part)| part.starts.first().map(|s| Reverse((s.0, p))))
        .collect();
    let mut taken = vec![0usize; parts.len()];
    let mut f = 0;
    while let Some(Reverse((at, p))) = next.pop() {
        let (_, hash, height) = parts[p].starts[taken[p]];
        while out.files[f].file != (at >> 32) as u32 {
            f += 1;
        }
        let hints = &mut out.files[f];
        hints.offsets.push(at & u32::MAX as u64);
        hints.hashes.push(hash);
        hints.heights.push(height);
        taken[p] += 1;
        if let Some(s) = parts[p].starts.get(taken[p]) {
            next.push(Reverse((s.0, p)));
        }
    }
    for part in parts {
        out.problems.extend(part.problems);
        out.unplaceable.extend(part.unplaceable);
    }
    out
}

/// Records copied out of the reader, keys and values each concatenated, with end offsets.
#[derive(Debug, Default)]
pub struct Chunk {
    keys: Vec<u8>,
    key_ends: Vec<usize>,
    values: Vec<u8>,
    value_ends: Vec<usize>,
}

impl Chunk {
    pub fn with_capacity(records: usize, bytes: usize) -> Chunk {
        Chunk {
            keys: Vec::with_capacity(records * 33),
            key_ends: Vec::with_capacity(records),
            values: Vec::with_capacity(bytes),
            value_ends: Vec::with_capacity(records),
        }
    }

    pub fn push(&mut self, key: &[u8], value: &[u8]) {
        self.keys.extend_from_slice(key);
        self.key_ends.push(self.keys.len());
        self.values.extend_from_slice(value);
        self.value_ends.push(self.values.len());
    }

    pub fn len(&self) -> usize {
        self.key_ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.key_ends.is_empty()
    }

    fn plan(&self, present: &[u32]) -> Part {
        plan_part(
            self.len(),
            |i| item(&self.keys, &self.key_ends, i),
            |i| item(&self.values, &self.value_ends, i),
            present,
        )
    }
}

/// Item `i` of concatenated bytes with end offsets.
fn item<'a>(data: &'a [u8], ends: &[usize], i: usize) -> &'a [u8] {
    let lo = if i == 0 { 0 } else { ends[i - 1] };
    &data[lo..ends[i]]
}

/// Plans while the records are still being read: chunks fed in key order are decoded and
/// planned on background threads (the reader keeps a core busy in LevelDB and the
/// interpreter), and `finish` merges the parts once the last chunk is in.
pub struct Planner {
    chunks: Option<mpsc::Sender<(usize, Chunk)>>,
    parts: mpsc::Receiver<(usize, Part)>,
    workers: Vec<JoinHandle<()>>,
    fed: usize,
}

impl Planner {
    /// A planner for the blk files numbered `present`, decoding on `threads` threads (1-16).
    pub fn new(present: Vec<u32>, threads: usize) -> Planner {
        let (chunk_tx, chunk_rx) = mpsc::channel::<(usize, Chunk)>();
        let (part_tx, part_rx) = mpsc::channel();
        let chunk_rx = Arc::new(Mutex::new(chunk_rx));
        let present = Arc::new(present);
        let workers = (0..threads.clamp(1, 16))
            .map(|_| {
                let (chunks, parts) = (Arc::clone(&chunk_rx), part_tx.clone());
                let present = Arc::clone(&present);
                std::thread::spawn(move || loop {
                    // The lock is held only to take the next chunk, never while decoding.
                    let next = chunks.lock().expect("planner queue").recv();
                    let Ok((seq, chunk)) = next else {
                        return; // the planner finished or was dropped
                    };
                    if parts.send((seq, chunk.plan(&present))).is_err() {
                        return;
                    }
                })
            })
            .collect();
        Planner {
            chunks: Some(chunk_tx),
            parts: part_rx,
            workers,
            fed: 0,
        }
    }

    /// Queues the next records (in key order).
    pub fn feed(&mut self, chunk: Chunk) {
        if chunk.is_empty() {
            return;
        }
        let queue = self.chunks.as_ref().expect("fed after finish");
        queue
            .send((self.fed, chunk))
            .expect("decode threads live until finish");
        self.fed += 1;
    }

    /// Waits for every chunk and merges the parts into the plan.
    pub fn finish(mut self) -> IndexPlan {
        self.chunks = None; // workers stop once the queue is drained
        let mut parts: Vec<(usize, Part)> = self.parts.iter().take(self.fed).collect();
        for w in self.workers.drain(..) {
            w.join().expect("decode thread");
        }
        parts.sort_unstable_by_key(|p| p.0);
        assemble(parts.into_iter().map(|p| p.1).collect())
    }
}

/// Plans `n` records (`key(i)`, `value(i)`) fed in chunks of `chunk` records to a planner
/// on `threads` threads (the planner without a reader).
#[cfg(test)]
pub fn plan<'a, K, V>(
    n: usize,
    key: K,
    value: V,
    present: &[u32],
    threads: usize,
    chunk: usize,
) -> IndexPlan
where
    K: Fn(usize) -> &'a [u8],
    V: Fn(usize) -> &'a [u8],
{
    let mut planner = Planner::new(present.to_vec(), threads);
    for lo in (0..n).step_by(chunk.max(1)) {
        let mut c = Chunk::default();
        for i in lo..(lo + chunk).min(n) {
            c.push(key(i), value(i));
        }
        planner.feed(c);
    }
    planner.finish()
}

/// Rows of the linked headers (file, record offset, height or None when not linked) that
/// sit at a confirmed record start of `hints` whose index height differs: (row, index height,
/// hash). The scan confirmed the hash at every start not in `missed`, so a position names
/// the same block as its hash, without parsing or sorting a million hashes.
pub fn position_disagreements(
    hints: &[FileHints],
    missed: &[(u32, u64)],
    linked: impl Iterator<Item = (Option<u32>, Option<u64>, Option<u32>)>,
) -> Vec<(u32, u32, [u8; 32])> {
    let mut out = Vec::new();
    for (row, (file, offset, height)) in linked.enumerate() {
        let (Some(file), Some(offset)) = (file, offset) else {
            continue;
        };
        let Ok(f) = hints.binary_search_by_key(&file, |h| h.file) else {
            continue;
        };
        let h = &hints[f];
        let Ok(i) = h.offsets.binary_search(&offset) else {
            continue;
        };
        if height != Some(h.heights[i]) && !missed.contains(&(file, offset)) {
            out.push((row as u32, h.heights[i], h.hashes[i]));
        }
    }
    out
}

/// Rows of the linked headers (display hash, height or None when not linked to genesis)
/// whose block the index holds at another height: (row, index height). Both sides are sorted
/// by hash and merged, so a million rows take no hash table.
pub fn height_disagreements<'a>(
    index: &[([u8; 32], u32)],
    linked: impl Iterator<Item = (Option<&'a str>, Option<u32>)>,
) -> Vec<(u32, u32)> {
    let mut rows: Vec<([u8; 32], u32, Option<u32>)> = linked
        .enumerate()
        .filter_map(|(row, (hash, height))| Some((parse_display_hex(hash?)?, row as u32, height)))
        .collect();
    rows.sort_unstable_by_key(|r| r.0);
    let mut sorted_index: Vec<&([u8; 32], u32)> = index.iter().collect();
    if !sorted_index.is_sorted_by_key(|e| e.0) {
        sorted_index.sort_unstable_by_key(|e| e.0);
    }
    let mut out = Vec::new();
    let mut j = 0;
    for (hash, row, height) in rows {
        while j < sorted_index.len() && sorted_index[j].0 < hash {
            j += 1;
        }
        if let Some((h, want)) = sorted_index.get(j) {
            if *h == hash && height != Some(*want) {
                out.push((row, *want));
            }
        }
    }
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::btc::core_index::{block_key, DISK_INDEX_VERSION};
    use crate::btc::sha256::sha256d;

    fn record(nonce: u32, height: u32, data: Option<(u32, u32)>) -> (Vec<u8>, Vec<u8>, [u8; 32]) {
        let mut header = [0u8; 80];
        header[76..80].copy_from_slice(&nonce.to_le_bytes());
        let hash = sha256d(&header);
        let mut value = Vec::new();
        DiskBlockIndex {
            version: DISK_INDEX_VERSION,
            height,
            status: if data.is_some() { 2 | HAVE_DATA } else { 2 },
            n_tx: 0,
            file: data.map(|d| d.0),
            data_pos: data.map(|d| d.1),
            undo_pos: None,
            header,
        }
        .encode_into(&mut value);
        (block_key(&hash).to_vec(), value, hash)
    }

    #[test]
    fn plan_sorts_starts_per_file_and_reports_what_cannot_be_checked() {
        let recs = [
            record(1, 0, Some((0, 8))),
            record(2, 1, Some((1, 300))),
            record(3, 2, Some((0, 500))),
            record(4, 3, Some((0, 200))),
            record(5, 4, Some((7, 8))), // file 7 is absent
            record(6, 5, Some((1, 3))), // inside the first record's header
            record(7, 6, None),         // header only: nothing to check
        ];
        let mut keys: Vec<Vec<u8>> = recs.iter().map(|r| r.0.clone()).collect();
        let mut values: Vec<Vec<u8>> = recs.iter().map(|r| r.1.clone()).collect();
        keys.push(vec![b'b'; 33]);
        values.push(vec![0xff; 12]); // impossible VARINT
        for (threads, chunk) in [(1, 100), (3, 1), (8, 3), (2, 5)] {
            let p = plan(
                keys.len(),
                |i| &keys[i],
                |i| &values[i],
                &[0, 1],
                threads,
                chunk,
            );
            assert_eq!(p.hashes.len(), 7);
            assert_eq!(p.heights, vec![0, 1, 2, 3, 4, 5, 6], "key order is kept");
            assert_eq!(p.problems.len(), 1);
            assert_eq!(p.problems[0].1, "VARINT too large for its field");
            assert_eq!(p.files.len(), 2);
            assert_eq!(p.files[0].file, 0);
            assert_eq!(p.files[0].offsets, vec![0, 192, 492]);
            assert_eq!(p.files[0].hashes, vec![recs[0].2, recs[3].2, recs[2].2]);
            assert_eq!(p.files[0].heights, vec![0, 3, 2]);
            assert_eq!(p.files[1].offsets, vec![292]);
            assert_eq!(p.hinted, vec![true, true, true, true, false, false, false]);
            let reasons: Vec<(u32, i64, &str)> = p
                .unplaceable
                .iter()
                .map(|u| (u.0, u.1, u.3.as_str()))
                .collect();
            assert_eq!(
                reasons,
                vec![
                    (7, 0, "file does not exist"),
                    (1, -5, "data position 3 is inside the first record's header"),
                ]
            );
            assert_eq!(p.with_data(), 6);
        }
    }

    #[test]
    fn entries_claiming_one_position_stay_in_key_order_across_chunks() {
        // Six blocks, three claiming each of two positions in file 2.
        let data_pos = |n: u32| if n.is_multiple_of(2) { 1000 } else { 40 };
        let mut recs: Vec<_> = (10..16)
            .map(|n| (n, record(n, n, Some((2, data_pos(n))))))
            .collect();
        recs.sort_by(|a, b| a.1 .0.cmp(&b.1 .0)); // LevelDB hands records out in key order
        let keys: Vec<Vec<u8>> = recs.iter().map(|r| r.1 .0.clone()).collect();
        let values: Vec<Vec<u8>> = recs.iter().map(|r| r.1 .1.clone()).collect();
        let at = |pos: u32| recs.iter().filter(move |r| data_pos(r.0) == pos);
        let want: Vec<[u8; 32]> = at(40).chain(at(1000)).map(|r| r.1 .2).collect();
        for (threads, chunk) in [(1, 6), (4, 1), (2, 2)] {
            let p = plan(
                keys.len(),
                |i| &keys[i],
                |i| &values[i],
                &[2],
                threads,
                chunk,
            );
            assert_eq!(p.files.len(), 1);
            assert_eq!(p.files[0].offsets, vec![32, 32, 32, 992, 992, 992]);
            assert_eq!(p.files[0].hashes, want);
        }
    }

    #[test]
    fn position_check_compares_confirmed_starts_only() {
        let hints = vec![
            FileHints {
                file: 0,
                offsets: vec![0, 100, 200],
                hashes: vec![[1; 32], [2; 32], [3; 32]],
                heights: vec![0, 1, 2],
            },
            FileHints {
                file: 3,
                offsets: vec![50],
                hashes: vec![[4; 32]],
                heights: vec![7],
            },
        ];
        let linked = [
            (Some(0), Some(100), Some(1)), // agrees
            (Some(0), Some(200), Some(5)), // differs
            (Some(3), Some(50), None),     // not linked to genesis
            (Some(0), Some(150), Some(9)), // no indexed start here
            (Some(1), Some(0), Some(9)),   // file without hints
            (Some(0), Some(0), Some(4)),   // a missed start: another block is there
        ];
        let got = position_disagreements(&hints, &[(0, 0)], linked.into_iter());
        assert_eq!(got, vec![(1, 2, [3; 32]), (2, 7, [4; 32])]);
    }

    #[test]
    fn height_check_merges_by_hash() {
        let h = |b: u8| [b; 32];
        let index = vec![(h(1), 10), (h(2), 20), (h(3), 30)];
        let shown: Vec<String> = [h(3), h(9), h(2), h(1), h(1)]
            .iter()
            .map(|x| display_hex(x))
            .collect();
        let heights = [Some(30), Some(5), Some(21), None, Some(10)];
        let linked = shown
            .iter()
            .map(|s| Some(s.as_str()))
            .chain([None, Some("not hex")])
            .zip(heights.into_iter().chain([Some(1), Some(2)]));
        // Row 2 disagrees, row 3 is not linked; unknown and unparsable hashes are skipped.
        assert_eq!(height_disagreements(&index, linked), vec![(2, 20), (3, 10)]);
    }
}
