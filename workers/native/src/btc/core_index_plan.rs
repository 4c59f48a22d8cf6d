//! Planning a reindex from a node's block index: decode every `'b'` record (in parallel), turn
//! the ones with block data into per-file record starts (sorted, ready for the guided scan),
//! and, once the files are linked, compare the index's heights with the linked tree's.
//!
//! Byte layouts stay in `core_index`; this module only decides what to check where.

use super::core_index::{DiskBlockIndex, HAVE_DATA};
use crate::datasets::hex::{display_hex, parse_display_hex};
use std::ops::Range;

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

type Decoded = (Vec<([u8; 32], DiskBlockIndex)>, Vec<(String, String)>);

fn decode_range<'a, K, V>(key: &K, value: &V, r: Range<usize>) -> Decoded
where
    K: Fn(usize) -> &'a [u8],
    V: Fn(usize) -> &'a [u8],
{
    let mut ok = Vec::with_capacity(r.len());
    let mut problems = Vec::new();
    for i in r {
        let k = key(i);
        match DiskBlockIndex::decode_record(k, value(i)) {
            Ok(d) => ok.push(d),
            Err(e) => {
                let shown = if k.len() == 33 {
                    display_hex(&k[1..])
                } else {
                    k.iter().map(|b| format!("{b:02x}")).collect()
                };
                problems.push((shown, e.to_string()));
            }
        }
    }
    (ok, problems)
}

/// Decodes `n` records (`key(i)`, `value(i)`) on up to `threads` threads (each checks its
/// records' header hashes), keeping their order, and plans the checks for `present` files.
pub fn plan<'a, K, V>(n: usize, key: K, value: V, present: &[u32], threads: usize) -> IndexPlan
where
    K: Fn(usize) -> &'a [u8] + Sync,
    V: Fn(usize) -> &'a [u8] + Sync,
{
    let threads = threads.clamp(1, 16).min(n.max(1));
    let per = n.div_ceil(threads);
    let parts: Vec<Decoded> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (key, value) = (&key, &value);
                let r = (t * per).min(n)..((t + 1) * per).min(n);
                s.spawn(move || decode_range(key, value, r))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("decode thread"))
            .collect()
    });
    let mut out = IndexPlan {
        hashes: Vec::with_capacity(n),
        heights: Vec::with_capacity(n),
        hinted: Vec::with_capacity(n),
        ..Default::default()
    };
    let mut starts: Vec<(u32, u64, [u8; 32], u32)> = Vec::with_capacity(n);
    for (ok, problems) in parts {
        out.problems.extend(problems);
        for (hash, v) in ok {
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
                starts.push((file, (pos - RECORD_PREFIX) as u64, hash, v.height));
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
    }
    starts.sort_unstable();
    for (file, offset, hash, height) in starts {
        if out.files.last().is_none_or(|f| f.file != file) {
            out.files.push(FileHints {
                file,
                ..Default::default()
            });
        }
        let f = out.files.last_mut().expect("pushed above");
        f.offsets.push(offset);
        f.hashes.push(hash);
        f.heights.push(height);
    }
    out
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
    use crate::btc::header::sha256d;

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
        for threads in [1, 3, 8] {
            let p = plan(keys.len(), |i| &keys[i], |i| &values[i], &[0, 1], threads);
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
