//! The block tree (spec §5.3–5.4, §10 step 3–5): dedupe copies, link by previous hash, heights,
//! 256-bit chainwork, the best chain, side branches, orphans and invalid descendants, and
//! Core's contextual header checks (`ContextualCheckBlockHeader`: the retarget's nBits, the
//! median time past, BIP94's timewarp rule, retired versions) from the tree itself.
//!
//! Linking happens once, after every shard is scanned, so arrival order never matters and no
//! block is re-read (the lesson of Core's reindex: most blocks arrive before their parent).

use super::header::{block_work, decode_compact, encode_compact};
use super::locktime::{median_time_past, MEDIAN_TIME_SPAN};
use super::network::{Network, PowRules};
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
    /// Core's contextual header checks; None where the root is not the network's genesis
    /// (ancestors Core would read are missing) and in tests of the tree alone.
    pub context: Option<HeaderContext<'a>>,
}

/// What the contextual header checks read besides the tree: each record's time and version.
pub struct HeaderContext<'a> {
    pub network: Network,
    pub times: &'a [u32],
    pub versions: &'a [i32],
}

/// Core's reject reason for a retired header version (`bad-version(0x%08x)`): the versions a
/// chain can break the rule with are 0 to 3 and the negative ones, which share one text.
fn bad_version(version: i32) -> &'static str {
    match version {
        0 => "bad-version(0x00000000)",
        1 => "bad-version(0x00000001)",
        2 => "bad-version(0x00000002)",
        3 => "bad-version(0x00000003)",
        _ => "bad-version",
    }
}

/// Core's `CalculateNextWorkRequired`: the nBits of a period's first block from the bits the
/// last period is measured by and the seconds it took (clamped to a quarter and four times the
/// timespan aimed at), at most the limit.
pub fn retarget(rules: &PowRules, base_bits: u32, seconds: i64) -> u32 {
    let span = seconds.clamp(rules.timespan / 4, rules.timespan * 4);
    let target = decode_compact(base_bits)
        .target
        .checked_mul(U256::from(span as u64))
        .map_or(rules.pow_limit, |t| t / U256::from(rules.timespan as u64));
    encode_compact(target.min(rules.pow_limit))
}

/// `ContextualCheckBlockHeader` (but the clock: a reindex of the same files must end the same
/// whenever it runs, and Core does not keep "too new" as invalid either) for a header at
/// `height` whose parent is entry `p`. `up(e)` is an entry's parent (None at the genesis) and
/// `last_real_bits[e]` the nBits of the last block at or above `e` not mined under the
/// min-difficulty exception (Core's walk back, kept per entry).
#[allow(clippy::too_many_arguments)]
fn contextual_reason(
    ctx: &HeaderContext,
    rules: &PowRules,
    limit_bits: u32,
    record: usize,
    p: usize,
    height: u32,
    rec: impl Fn(usize) -> usize,
    up: impl Fn(usize) -> Option<usize>,
    bits: &[u32],
    last_real_bits: &[u32],
) -> Option<&'static str> {
    let time = |e: usize| ctx.times[rec(e)] as i64;
    let own_time = ctx.times[record] as i64;
    let interval = rules.interval();
    let expected = if !height.is_multiple_of(interval) {
        if !rules.allow_min_difficulty {
            bits[rec(p)]
        } else if own_time > time(p) + 2 * rules.spacing {
            limit_bits
        } else {
            last_real_bits[p]
        }
    } else if rules.no_retargeting {
        bits[rec(p)]
    } else {
        let mut first = p;
        for _ in 0..interval - 1 {
            first = up(first)?;
        }
        let base = bits[rec(if rules.bip94 { first } else { p })];
        retarget(rules, base, time(p) - time(first))
    };
    if bits[record] != expected {
        return Some("bad-diffbits");
    }
    let mut past = [0u32; MEDIAN_TIME_SPAN];
    let mut n = 0;
    let mut e = Some(p);
    while let Some(x) = e.filter(|_| n < MEDIAN_TIME_SPAN) {
        past[n] = ctx.times[rec(x)];
        n += 1;
        e = up(x);
    }
    if own_time <= i64::from(median_time_past(&mut past[..n])) {
        return Some("time-too-old");
    }
    if rules.bip94 && height.is_multiple_of(interval) && own_time < time(p) - 600 {
        return Some("time-timewarp-attack");
    }
    let n = ctx.network;
    let version = ctx.versions[record];
    if (version < 2 && u64::from(height) >= n.bip34_height())
        || (version < 3 && height >= n.bip66_height())
        || (version < 4 && height >= n.bip65_height())
    {
        return Some(bad_version(version));
    }
    None
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

    // Heights and chainwork from the root over valid headers, and the contextual checks.
    let rules = input.context.as_ref().map(|c| c.network.pow_rules());
    let limit_bits = rules.map_or(0, |r| encode_compact(r.pow_limit));
    let root_entry = index.get(&input.root).map(|&r| r as usize);
    let up = |e: usize| (Some(e) != root_entry).then(|| parent[e].map(|p| p as usize))?;
    let mut last_real_bits = vec![0u32; if rules.is_some() { m } else { 0 }];
    if let Some(r) = root_entry {
        if !last_real_bits.is_empty() {
            last_real_bits[r] = input.bits[rec(r)];
        }
    }
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
            let height = out.height[p].unwrap() + 1;
            if let (Some(ctx), Some(rules)) = (&input.context, &rules) {
                let reason = contextual_reason(
                    ctx,
                    rules,
                    limit_bits,
                    rec(c),
                    p,
                    height,
                    rec,
                    up,
                    input.bits,
                    &last_real_bits,
                );
                if let Some(reason) = reason {
                    // Invalid, and so is everything that descends from it.
                    out.invalid_reason[c] = Some(reason);
                    let mut below = vec![c as u32];
                    while let Some(x) = below.pop() {
                        for &k in kids(x as usize) {
                            if out.invalid_reason[k as usize].is_none() {
                                out.invalid_reason[k as usize] = Some("bad-prevblk");
                                below.push(k);
                            }
                        }
                    }
                    continue;
                }
                let own = input.bits[rec(c)];
                let min_difficulty = rules.allow_min_difficulty
                    && !height.is_multiple_of(rules.interval())
                    && own == limit_bits;
                last_real_bits[c] = if min_difficulty {
                    last_real_bits[p]
                } else {
                    own
                };
            }
            let bits = input.bits[rec(c)];
            if work_of.0 != bits {
                work_of = (bits, block_work(bits));
            }
            out.height[c] = Some(height);
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

    /// `link` of intact records with Core's contextual checks on `network`.
    fn link_intact(
        network: Network,
        root: [u8; 32],
        hashes: &[[u8; 32]],
        prevs: &[[u8; 32]],
        bits: &[u32],
        times: &[u32],
        versions: &[i32],
    ) -> LinkOutput {
        let status = vec![RecordStatus::Ok; hashes.len()];
        link(&LinkInput {
            hashes,
            prevs,
            bits,
            status: &status,
            root,
            context: Some(HeaderContext {
                network,
                times,
                versions,
            }),
        })
    }

    /// Core's pow_tests.cpp: `CalculateNextWorkRequired` on mainnet.
    #[test]
    fn retarget_matches_cores_vectors() {
        let rules = Network::Main.pow_rules();
        assert_eq!(rules.interval(), 2016);
        // (last block's bits, last time - first time, expected)
        for (bits, span, expected) in [
            (0x1d00ffff, 1262152739 - 1261130161, 0x1d00d86a),
            (0x1d00ffff, 1233061996 - 1231006505, 0x1d00ffff),
            (0x1c05a3f4, 1279297671 - 1279008237, 0x1c0168fd),
            (0x1c387f6f, 1269211443 - 1263163443, 0x1d00e1fd),
        ] {
            assert_eq!(retarget(&rules, bits, span), expected);
        }
        assert_eq!(Network::Regtest.pow_rules().interval(), 144);
    }

    /// A testnet4 period of 2,016 blocks at the limit, ten minutes apart: the next block must
    /// carry the retarget's bits (from the period's first block's, BIP94) and may not be more
    /// than ten minutes older than its parent (the timewarp rule); between retargets a block
    /// more than twenty minutes after its parent may use the limit's bits.
    #[test]
    fn retarget_and_timewarp_on_testnet4() {
        let net = Network::Testnet4;
        let rules = net.pow_rules();
        let limit = net.genesis_bits();
        let n = 2016u32;
        let id = |i: u32| {
            let mut x = [0u8; 32];
            x[..4].copy_from_slice(&i.to_le_bytes());
            x[31] = 1;
            x
        };
        let mut hashes: Vec<[u8; 32]> = (0..n).map(id).collect();
        let mut prevs: Vec<[u8; 32]> = (0..n).map(|i| id(i.wrapping_sub(1))).collect();
        let mut bits = vec![limit; n as usize];
        let mut times: Vec<u32> = (0..n).map(|i| 1_714_777_860 + 600 * i).collect();
        let last = times[n as usize - 1];
        let next = retarget(&rules, limit, i64::from(last - times[0]));
        assert_ne!(next, limit);
        // (bits, time, expected reason) of a block at height 2016.
        let cases = [
            (next, last + 600, None),
            (limit, last + 600, Some("bad-diffbits")),
            (next, last - 601, Some("time-timewarp-attack")),
        ];
        for (k, &(b, t, _)) in cases.iter().enumerate() {
            hashes.push(id(10_000 + k as u32));
            prevs.push(id(n - 1));
            bits.push(b);
            times.push(t);
        }
        // Block 2017 on the good one, 30 minutes later at the limit's bits: allowed.
        hashes.push(id(20_000));
        prevs.push(id(10_000));
        bits.push(limit);
        times.push(last + 600 + 1800);
        let versions = vec![4i32; hashes.len()];
        let out = link_intact(net, id(0), &hashes, &prevs, &bits, &times, &versions);
        for (k, &(_, _, reason)) in cases.iter().enumerate() {
            assert_eq!(out.invalid_reason[n as usize + k], reason, "case {k}");
        }
        assert_eq!(out.height[hashes.len() - 1], Some(2017));
    }

    /// A regtest chain 0..=29 (ten minutes apart, version 4) with one record broken per rule
    /// hanging off it, each with a child.
    #[test]
    fn contextual_header_checks_as_core() {
        let n = 30u8;
        let mut hashes: Vec<[u8; 32]> = (0..n).map(h).collect();
        let mut prevs: Vec<[u8; 32]> = (0..n).map(|i| h(i.saturating_sub(1))).collect();
        prevs[0] = [0xee; 32];
        let mut bits = vec![0x207fffffu32; n as usize];
        let mut times: Vec<u32> = (0..n as u32).map(|i| 1_600_000_000 + 600 * i).collect();
        let mut versions = vec![4i32; n as usize];
        let tip_time = times[29];
        // (hash, bits, time, version, expected reason)
        let broken = [
            (100u8, 0x207ffffe, tip_time + 600, 4, "bad-diffbits"),
            // The median of the last eleven is block 24's time.
            (101, 0x207fffff, times[24], 4, "time-too-old"),
            (
                102,
                0x207fffff,
                tip_time + 600,
                1,
                "bad-version(0x00000001)",
            ),
            (
                103,
                0x207fffff,
                tip_time + 600,
                3,
                "bad-version(0x00000003)",
            ),
            (104, 0x207fffff, times[24] + 1, 4, ""),
        ];
        for &(id, b, t, v, _) in &broken {
            hashes.extend([h(id), h(id + 50)]);
            prevs.extend([h(29), h(id)]);
            bits.extend([b, 0x207fffff]);
            times.extend([t, t + 600]);
            versions.extend([v, 4]);
        }
        let out = link_intact(
            Network::Regtest,
            h(0),
            &hashes,
            &prevs,
            &bits,
            &times,
            &versions,
        );
        for (i, &(_, _, _, _, reason)) in broken.iter().enumerate() {
            let (e, child) = (n as usize + 2 * i, n as usize + 2 * i + 1);
            if reason.is_empty() {
                assert_eq!(out.invalid_reason[e], None);
                assert_eq!(out.height[child], Some(31));
            } else {
                assert_eq!(out.invalid_reason[e], Some(reason));
                assert_eq!(out.invalid_reason[child], Some("bad-prevblk"));
                assert_eq!(out.state[child], EntryState::Invalid);
            }
        }
        assert_eq!(out.tip.map(|t| out.height[t as usize]), Some(Some(31)));
    }

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
            context: None,
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
