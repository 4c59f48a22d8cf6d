//! The block tree (spec §5.3–5.4, §10 step 3–5): dedupe copies, link by previous hash, heights,
//! 256-bit chainwork, the best chain, side branches, orphans and invalid descendants.
//!
//! Linking happens once, after every shard is scanned, so arrival order never matters and no
//! block is re-read (the lesson of Core's reindex: most blocks arrive before their parent).

use super::header::block_work;
use super::scan::RecordStatus;
use primitive_types::U256;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Block hashes are already uniformly random: their first eight bytes are a fine hash, and far
/// cheaper than SipHash on a million keys.
#[derive(Default)]
struct BlockHashHasher(u64);

impl Hasher for BlockHashHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut word = [0u8; 8];
        let n = bytes.len().min(8);
        word[..n].copy_from_slice(&bytes[..n]);
        self.0 ^= u64::from_le_bytes(word);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

type HashIndex = HashMap<[u8; 32], u32, BuildHasherDefault<BlockHashHasher>>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum EntryState {
    /// On the best chain.
    Active = 0,
    /// Complete (data for it and all ancestors) but not on the best chain.
    ValidFork = 1,
    /// Header links to the root, but it or an ancestor has no intact body.
    HeadersOnly = 2,
    /// Intact, but its ancestry never reaches the root (parent never seen).
    Orphan = 3,
    /// No intact body and not linked: already reported as a skip.
    Unlinked = 4,
    /// Proof of work failed, or an ancestor is invalid.
    Invalid = 5,
}

impl EntryState {
    pub fn name(self) -> &'static str {
        match self {
            EntryState::Active => "active",
            EntryState::ValidFork => "valid-fork",
            EntryState::HeadersOnly => "headers-only",
            EntryState::Orphan => "orphan",
            EntryState::Unlinked => "unlinked",
            EntryState::Invalid => "invalid",
        }
    }
}

pub struct LinkInput<'a> {
    /// One row per record copy, in global scan order (file, then offset).
    pub hashes: &'a [[u8; 32]],
    pub prevs: &'a [[u8; 32]],
    pub bits: &'a [u32],
    pub status: &'a [RecordStatus],
    pub root: [u8; 32],
}

#[derive(Debug, Default)]
pub struct LinkOutput {
    /// Per distinct hash, in order of first appearance: the record chosen to represent it.
    pub record: Vec<u32>,
    pub copies: Vec<u32>,
    pub height: Vec<Option<u32>>,
    pub chainwork: Vec<U256>,
    pub state: Vec<EntryState>,
    pub invalid_reason: Vec<Option<&'static str>>,
    pub tip: Option<u32>,
    pub duplicates: u64,
}

pub fn link(input: &LinkInput) -> LinkOutput {
    let n = input.hashes.len();
    let mut index: HashIndex = HashIndex::with_capacity_and_hasher(n, Default::default());
    let mut out = LinkOutput::default();
    // Dedupe: the first intact copy wins; a hash with none keeps its first copy.
    for i in 0..n {
        match index.get(&input.hashes[i]) {
            Some(&e) => {
                let e = e as usize;
                out.copies[e] += 1;
                out.duplicates += 1;
                let chosen = out.record[e] as usize;
                if input.status[chosen] != RecordStatus::Ok && input.status[i] == RecordStatus::Ok {
                    out.record[e] = i as u32;
                }
            }
            None => {
                index.insert(input.hashes[i], out.record.len() as u32);
                out.record.push(i as u32);
                out.copies.push(1);
            }
        }
    }
    let m = out.record.len();
    let rec = |e: usize| out.record[e] as usize;
    let has_data: Vec<bool> = (0..m)
        .map(|e| input.status[rec(e)] == RecordStatus::Ok)
        .collect();
    let bad_pow: Vec<bool> = (0..m)
        .map(|e| {
            matches!(
                input.status[rec(e)],
                RecordStatus::InvalidHeader | RecordStatus::InvalidBlock
            )
        })
        .collect();
    let parent: Vec<Option<u32>> = (0..m)
        .map(|e| index.get(&input.prevs[rec(e)]).copied())
        .collect();
    // Children in CSR form, kept in first-appearance order.
    let mut child_count = vec![0u32; m + 1];
    for p in parent.iter().flatten() {
        child_count[*p as usize + 1] += 1;
    }
    for i in 0..m {
        child_count[i + 1] += child_count[i];
    }
    let mut fill = child_count.clone();
    let mut children = vec![0u32; child_count[m] as usize];
    for (e, p) in parent.iter().enumerate() {
        if let Some(p) = p {
            children[fill[*p as usize] as usize] = e as u32;
            fill[*p as usize] += 1;
        }
    }
    let kids = |e: usize| &children[child_count[e] as usize..child_count[e + 1] as usize];

    out.height = vec![None; m];
    out.chainwork = vec![U256::zero(); m];
    out.invalid_reason = vec![None; m];
    let mut complete = vec![false; m];
    let mut link_ordinal = vec![0u32; m];

    // Invalid: bad proof of work, and everything that descends from it.
    let mut stack: Vec<u32> = Vec::new();
    for (e, &bad) in bad_pow.iter().enumerate() {
        if bad {
            out.invalid_reason[e] = Some(if input.status[rec(e)] == RecordStatus::InvalidHeader {
                "high-hash"
            } else {
                "bad-prevblk"
            });
            stack.push(e as u32);
        }
    }
    while let Some(e) = stack.pop() {
        for &c in kids(e as usize) {
            if out.invalid_reason[c as usize].is_none() {
                out.invalid_reason[c as usize] = Some("bad-prevblk");
                stack.push(c);
            }
        }
    }

    // Heights and chainwork from the root over valid headers.
    if let Some(&root) = index.get(&input.root) {
        let r = root as usize;
        if out.invalid_reason[r].is_none() {
            out.height[r] = Some(0);
            out.chainwork[r] = block_work(input.bits[rec(r)]);
            complete[r] = has_data[r];
            link_ordinal[r] = out.record[r];
            stack.push(root);
        }
    }
    // nBits changes once per retarget period: one 256-bit division per change, not per block.
    let mut work_of = (u32::MAX, U256::zero());
    while let Some(p) = stack.pop() {
        let p = p as usize;
        for &c in kids(p) {
            let c = c as usize;
            if out.invalid_reason[c].is_some() || out.height[c].is_some() {
                continue;
            }
            let bits = input.bits[rec(c)];
            if work_of.0 != bits {
                work_of = (bits, block_work(bits));
            }
            out.height[c] = Some(out.height[p].unwrap() + 1);
            out.chainwork[c] = out.chainwork[p].saturating_add(work_of.1);
            complete[c] = complete[p] && has_data[c];
            link_ordinal[c] = link_ordinal[p].max(out.record[c]);
            stack.push(c as u32);
        }
    }

    // Best tip: most work; ties to the block that became linkable first, then first seen.
    let mut tip: Option<usize> = None;
    for e in 0..m {
        if !complete[e] {
            continue;
        }
        tip = match tip {
            None => Some(e),
            Some(t) => {
                let better = out.chainwork[e] > out.chainwork[t]
                    || (out.chainwork[e] == out.chainwork[t]
                        && (link_ordinal[e], out.record[e]) < (link_ordinal[t], out.record[t]));
                Some(if better { e } else { t })
            }
        };
    }
    out.state = (0..m)
        .map(|e| {
            if out.invalid_reason[e].is_some() {
                EntryState::Invalid
            } else if complete[e] {
                EntryState::ValidFork
            } else if out.height[e].is_some() {
                EntryState::HeadersOnly
            } else if has_data[e] {
                EntryState::Orphan
            } else {
                EntryState::Unlinked
            }
        })
        .collect();
    let mut cur = tip;
    while let Some(e) = cur {
        out.state[e] = EntryState::Active;
        cur = if out.height[e] == Some(0) {
            None
        } else {
            parent[e].map(|p| p as usize)
        };
    }
    out.tip = tip.map(|t| t as u32);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(n: u8) -> [u8; 32] {
        [n; 32]
    }

    fn run(blocks: &[(u8, u8, RecordStatus)], root: u8) -> LinkOutput {
        let hashes: Vec<_> = blocks.iter().map(|b| h(b.0)).collect();
        let prevs: Vec<_> = blocks.iter().map(|b| h(b.1)).collect();
        let status: Vec<_> = blocks.iter().map(|b| b.2).collect();
        let bits = vec![0x207fffffu32; blocks.len()];
        link(&LinkInput {
            hashes: &hashes,
            prevs: &prevs,
            bits: &bits,
            status: &status,
            root: h(root),
        })
    }

    use RecordStatus::*;

    #[test]
    fn out_of_order_fork_tie_goes_to_first_linkable() {
        // 1 <- 2 <- 3, 2 <- 4 (fork at equal work seen later), 9's parent never appears.
        let o = run(
            &[
                (3, 2, Ok),
                (1, 0, Ok),
                (9, 8, Ok),
                (2, 1, Ok),
                (4, 2, Ok),
                (2, 1, Ok),
            ],
            1,
        );
        assert_eq!(o.duplicates, 1);
        let by = |x: u8| [3u8, 1, 9, 2, 4].iter().position(|&v| v == x).unwrap();
        assert_eq!(o.height[by(3)], Some(2));
        assert_eq!(o.height[by(4)], Some(2));
        assert_eq!(o.tip, Some(by(3) as u32));
        assert_eq!(o.state[by(3)], EntryState::Active);
        assert_eq!(o.state[by(4)], EntryState::ValidFork);
        assert_eq!(o.state[by(9)], EntryState::Orphan);
        assert_eq!(o.chainwork[by(3)], U256::from(6));
    }

    #[test]
    fn body_error_parent_makes_children_headers_only_until_good_copy() {
        let o = run(&[(1, 0, Ok), (2, 1, BodyError), (3, 2, Ok)], 1);
        assert_eq!(
            o.state,
            vec![
                EntryState::Active,
                EntryState::HeadersOnly,
                EntryState::HeadersOnly
            ]
        );
        let o = run(
            &[(1, 0, Ok), (2, 1, InvalidBody), (3, 2, Ok), (2, 1, Ok)],
            1,
        );
        assert_eq!(o.record[1], 3);
        assert_eq!(o.state, vec![EntryState::Active; 3]);
    }

    #[test]
    fn invalid_pow_poisons_descendants() {
        let o = run(&[(1, 0, Ok), (2, 1, InvalidHeader), (3, 2, Ok)], 1);
        assert_eq!(o.invalid_reason[1], Some("high-hash"));
        assert_eq!(o.invalid_reason[2], Some("bad-prevblk"));
        assert_eq!(o.tip, Some(0));
    }
}
