//! Source walkers: the rules of `rules.rs` applied in chain order over a whole source (an
//! era1 file, a range of geth's freezer), headers read ahead and hashed in batches, each
//! decoded block handed to a sink (the importer) and every violation reported.

use super::accumulator::{epoch_root, HistoricalRoots, EPOCH_SIZE};
use super::body::{decode_body, Body};
use super::era1::{parse_name, Era1, Era1Block};
use super::ere::{
    accumulator_proof_root, decode_proof, parse_name as parse_ere_name, Component, Ere, EreBlock,
    PROOF_HISTORICAL_HASHES_ACCUMULATOR,
};
use super::freezer::Freezer;
use super::header::DecodedHeader;
use super::header::{decode_header_hashed, KeccakBatch};
use super::receipt::Receipt;
use super::receipt::{decode_consensus_receipts, decode_slim_receipts};
use super::receipt::{decode_storage_receipts, set_types};
use alloy_primitives::{B256, U256};

// The chain configurations and rules, for this file's walkers; `gen.rs` still names them
// through this module too (crate-only: callers outside use `chain_config` and `rules`).
pub(crate) use super::chain_config::*;
pub(crate) use super::rules::*;

/// Blocks a check reads ahead so that their headers are hashed together.
const HASH_WINDOW: usize = 64;

/// Items `first..end` of a source (an era1 file's blocks, a freezer's headers) read
/// [`HASH_WINDOW`] at a time, each that read with the `keccak256` of its header, hashed in one
/// batch ([`KeccakBatch`]: SIMD lanes where the CPU has them).
struct ReadAhead<T> {
    hasher: KeccakBatch,
    /// Items read and not yet taken, last first.
    window: Vec<(u64, super::Result<T>)>,
    /// Their headers' hashes, last first (none for an item that did not read).
    hashes: Vec<B256>,
    next: u64,
    end: u64,
}

impl<T> ReadAhead<T> {
    fn new(first: u64, end: u64) -> Self {
        ReadAhead {
            hasher: KeccakBatch::default(),
            window: Vec::with_capacity(HASH_WINDOW),
            hashes: Vec::with_capacity(HASH_WINDOW),
            next: first,
            end,
        }
    }

    /// The next item (its number, and it with its header's hash or the error reading it);
    /// `read` reads item `n`, `header` is its header's RLP.
    fn next(
        &mut self,
        read: impl Fn(u64) -> super::Result<T>,
        header: impl Fn(&T) -> &[u8],
    ) -> Option<(u64, super::Result<(T, B256)>)> {
        if self.window.is_empty() {
            let stop = (self.next + HASH_WINDOW as u64).min(self.end);
            self.window
                .extend((self.next..stop).rev().map(|n| (n, read(n))));
            self.next = stop;
            let raws: Vec<&[u8]> = (self.window.iter().rev())
                .filter_map(|(_, item)| item.as_ref().ok().map(&header))
                .collect();
            let digests = self.hasher.hash(&raws);
            self.hashes.clear();
            self.hashes
                .extend(digests.iter().rev().map(|h| B256::from(*h)));
        }
        let (n, item) = self.window.pop()?;
        Some((
            n,
            item.map(|t| (t, self.hashes.pop().expect("a hash per item read"))),
        ))
    }
}

/// A block as a verifier decoded and checked it, handed to its sink (the importer builds its
/// rows from it and adds the checks it alone makes, proof of work).
pub struct Checked<'a> {
    /// File offset of the block's first record (era1), or `None` (freezer item `number`).
    pub offset: Option<u64>,
    /// The header's bytes as read.
    pub raw_header: &'a [u8],
    pub header: &'a DecodedHeader,
    /// `None` when the body was pruned (freezer below its tail).
    pub body: Option<&'a Body>,
    /// Length of the payload of the body's RLP list as read (for the block's size).
    pub body_payload_len: usize,
    pub receipts: Option<&'a [Receipt]>,
    /// Total difficulty as stored (era1 record, freezer `diffs`), if any.
    pub td: Option<U256>,
}

/// Where a verifier sends each block that decoded, with the violations list to add to.
pub type Sink<'s> = dyn FnMut(&Checked<'_>, &mut Vec<Violation>) + 's;

/// The checks that relate a block to the blocks before it, applied in chain order:
/// [`check_header`] and [`check_total_difficulty`] against the parent, [`check_block`] and
/// [`check_uncles`] with up to 7 ancestors. A block that did not decode breaks the walk
/// ([`ChainWalk::gap`]): the next block is not judged against a parent it cannot see.
pub struct ChainWalk<'c> {
    cfg: &'c ChainConfig,
    /// TD of the parent (the first ancestor) as stored, if any.
    parent_td: Option<U256>,
    /// The parent first, then older, up to [`UNCLE_GENERATIONS`]; empty after a gap.
    ancestors: std::collections::VecDeque<Ancestor>,
}

impl<'c> ChainWalk<'c> {
    pub fn new(cfg: &'c ChainConfig) -> Self {
        ChainWalk {
            cfg,
            parent_td: None,
            ancestors: Default::default(),
        }
    }

    /// Checks `block` (decoded from bytes at its place in the chain) and makes it the parent.
    pub fn block(&mut self, block: &Checked<'_>, out: &mut Vec<Violation>) {
        let h = block.header;
        if let Some(p) = self.ancestors.front() {
            out.extend(check_header(self.cfg, h, &p.header));
            if let (Some(ptd), Some(td)) = (self.parent_td, block.td) {
                out.extend(check_total_difficulty(h, ptd, td));
            }
        }
        let uncle_hashes = match block.body {
            Some(body) => {
                out.extend(check_block(self.cfg, h, body, block.receipts));
                // (check_uncles has nothing to judge in a block without uncles.)
                if !body.uncles.is_empty() {
                    out.extend(check_uncles(
                        self.cfg,
                        h,
                        body,
                        self.ancestors.make_contiguous(),
                    ));
                }
                body.uncles.iter().map(|u| u.hash).collect()
            }
            None => Vec::new(),
        };
        // The oldest ancestor drops out before the new one comes in: the deque never grows
        // past its capacity.
        self.ancestors.truncate(UNCLE_GENERATIONS - 1);
        self.ancestors.push_front(Ancestor {
            header: h.clone(),
            uncle_hashes,
        });
        self.parent_td = block.td;
    }

    /// A block that could not be read: the walk restarts after it.
    pub fn gap(&mut self) {
        self.parent_td = None;
        self.ancestors.clear();
    }
}

/// What [`verify_era1`] found in one era1 file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Era1Report {
    pub first_block: u64,
    pub blocks: u64,
    pub first_hash: B256,
    pub last_hash: B256,
    /// TD of the last block as stored.
    pub final_td: U256,
    pub transactions: u64,
    pub uncles: u64,
    /// Accumulator recomputed from the headers' hashes and the TD records.
    pub accumulator: B256,
    pub violations: Vec<Violation>,
}

/// Check an era1 file completely (spec §2.7, steps 2–5): every header, body and receipt list
/// decodes; the [`ChainWalk`] checks between neighbours in the file (the first block's TD is
/// taken as given); the accumulator recomputed and compared with the record, the file name
/// (when `name` is given) and the EIP-7643 list (when `list` is given). A block that does not
/// decode becomes a [`Rule::Decode`] violation and the blocks around it are still checked.
/// Proof of work is left to [`check_pow`], which needs one ethash cache per epoch.
pub fn verify_era1(
    era: &Era1,
    cfg: &ChainConfig,
    name: Option<&str>,
    list: Option<&HistoricalRoots>,
) -> Era1Report {
    verify_era1_into(era, cfg, name, list, &mut |_, _| {})
}

/// An era1 block's header RLP (a fn item: a closure cannot return a borrow of its argument).
fn era1_header(b: &Era1Block) -> &[u8] {
    &b.header
}

/// [`verify_era1`], handing each block that decoded to `sink` after its checks.
pub fn verify_era1_into(
    era: &Era1,
    cfg: &ChainConfig,
    name: Option<&str>,
    list: Option<&HistoricalRoots>,
    sink: &mut Sink<'_>,
) -> Era1Report {
    let mut violations = Vec::new();
    let mut records = Vec::with_capacity(era.count() as usize);
    let mut walk = ChainWalk::new(cfg);
    let (mut txs, mut uncles) = (0u64, 0u64);
    let (mut first_hash, mut last_hash, mut final_td) = (B256::ZERO, B256::ZERO, U256::ZERO);
    let mut ahead = ReadAhead::new(era.start(), era.end());
    while let Some((n, block)) = ahead.next(|n| era.block(n), era1_header) {
        let decoded = block.and_then(|(b, hash)| {
            let h = decode_header_hashed(&b.header, hash).map_err(|e| e.for_block(n))?;
            let body = decode_body(&b.body).map_err(|e| e.for_block(n))?;
            let rs = decode_consensus_receipts(&b.receipts).map_err(|e| e.for_block(n))?;
            Ok((b, h, body, rs))
        });
        let (b, h, body, rs) = match decoded {
            Ok(x) => x,
            Err(e) => {
                violations.push(Violation {
                    block: n,
                    rule: Rule::Decode,
                    detail: e.to_string(),
                });
                records.push((B256::ZERO, U256::ZERO));
                walk.gap();
                continue;
            }
        };
        let td = b.total_difficulty;
        if h.header.number != n {
            violations.push(Violation {
                block: n,
                rule: Rule::Number,
                detail: format!("header number {} at index position {n}", h.header.number),
            });
        }
        if h.header.difficulty.is_zero() {
            violations.push(Violation {
                block: n,
                rule: Rule::Difficulty,
                detail: "difficulty 0: era1 files hold pre-merge blocks only".into(),
            });
        }
        if n == 0 && td != h.header.difficulty {
            violations.push(Violation {
                block: 0,
                rule: Rule::TotalDifficulty,
                detail: format!("genesis TD {td} differs from its difficulty"),
            });
        }
        let checked = Checked {
            offset: Some(b.offset),
            raw_header: &b.header,
            header: &h,
            body: Some(&body),
            body_payload_len: super::header::list_payload_len(&b.body),
            receipts: Some(&rs),
            td: Some(td),
        };
        walk.block(&checked, &mut violations);
        sink(&checked, &mut violations);
        txs += body.transactions.len() as u64;
        uncles += body.uncles.len() as u64;
        if n == era.start() {
            first_hash = h.hash;
        }
        last_hash = h.hash;
        final_td = td;
        records.push((h.hash, td));
    }
    let accumulator = epoch_root(&records).unwrap_or_default();
    let first = era.start();
    let mut acc_fail = |rule: Rule, detail: String| {
        violations.push(Violation {
            block: first,
            rule,
            detail,
        });
    };
    if accumulator != era.accumulator() {
        acc_fail(
            Rule::AccumulatorRecord,
            format!("recomputed {accumulator}, record {}", era.accumulator()),
        );
    }
    if let Some(name) = name {
        match parse_name(name) {
            Some(parsed) => {
                if parsed.short_root[..] != accumulator[..4] {
                    acc_fail(
                        Rule::AccumulatorName,
                        format!("{name} does not start with {accumulator}"),
                    );
                }
                if parsed.epoch.checked_mul(EPOCH_SIZE as u64) != Some(first) {
                    acc_fail(
                        Rule::EpochStart,
                        format!("{name} but the first block is {first}"),
                    );
                }
                if let Some(list) = list {
                    match list.epoch(parsed.epoch) {
                        Some(r) if r == accumulator => {}
                        r => acc_fail(
                            Rule::AccumulatorList,
                            format!(
                                "epoch {} root in the list {r:?}, recomputed {accumulator}",
                                parsed.epoch
                            ),
                        ),
                    }
                }
            }
            None => acc_fail(
                Rule::AccumulatorName,
                format!("{name} is not an era1 file name"),
            ),
        }
    }
    Era1Report {
        first_block: first,
        blocks: era.count(),
        first_hash,
        last_hash,
        final_td,
        transactions: txs,
        uncles,
        accumulator,
        violations,
    }
}

/// What [`verify_ere`] found in one Ere file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EreReport {
    pub first_block: u64,
    pub blocks: u64,
    pub last_hash: B256,
    pub transactions: u64,
    /// Accumulator recomputed over the file's pre-merge blocks, if it has any.
    pub accumulator: Option<B256>,
    /// Block proofs read, and how many of them were checked against an accumulator root.
    pub proofs: u64,
    pub proofs_checked: u64,
    pub violations: Vec<Violation>,
}

/// An Ere block's header RLP.
fn ere_header(b: &EreBlock) -> &[u8] {
    &b.header
}

/// Check an Ere file completely: every header, body and slim receipt list decodes; the
/// [`ChainWalk`] checks between neighbours (the TDs where the file has them: after the merge
/// they stay at the final TD); a pre-merge block must have its TD; the accumulator over the
/// pre-merge blocks equals the record (and, for mainnet, the EIP-7643 list's root of the
/// epoch), and a file without pre-merge blocks has none; each historical-hashes-accumulator
/// proof leads to that root; the name carries the epoch of the first block and the last
/// block's hash. Proofs against beacon roots (types 1–3) are counted, not checked: no beacon
/// state is at hand.
pub fn verify_ere_into(
    ere: &Ere,
    cfg: &ChainConfig,
    name: Option<&str>,
    list: Option<&HistoricalRoots>,
    sink: &mut Sink<'_>,
) -> EreReport {
    let mut violations = Vec::new();
    let mut walk = ChainWalk::new(cfg);
    let mut pre_merge: Vec<(B256, U256)> = Vec::new();
    // Proofs of pre-merge blocks: (position in the epoch record list, block hash, proof).
    let mut acc_proofs: Vec<(u64, u64, B256, Vec<u8>)> = Vec::new();
    let mut report = EreReport {
        first_block: ere.start(),
        blocks: ere.count(),
        last_hash: B256::ZERO,
        transactions: 0,
        accumulator: None,
        proofs: 0,
        proofs_checked: 0,
        violations: Vec::new(),
    };
    let mut ahead = ReadAhead::new(ere.start(), ere.end());
    while let Some((n, block)) = ahead.next(|n| ere.block(n), ere_header) {
        let decoded = block.and_then(|(b, hash)| {
            let h = decode_header_hashed(&b.header, hash).map_err(|e| e.for_block(n))?;
            let body = decode_body(&b.body).map_err(|e| e.for_block(n))?;
            let rs = match &b.receipts {
                Some(raw) => Some(decode_slim_receipts(raw).map_err(|e| e.for_block(n))?),
                None => None,
            };
            let proof = match &b.proof {
                Some(raw) => Some(decode_proof(raw).map_err(|e| e.for_block(n))?),
                None => None,
            };
            Ok((b, h, body, rs, proof))
        });
        let (b, h, body, rs, proof) = match decoded {
            Ok(x) => x,
            Err(e) => {
                violations.push(Violation {
                    block: n,
                    rule: Rule::Decode,
                    detail: e.to_string(),
                });
                // Keeps the records' positions: the recomputed accumulator then differs.
                if ere.accumulator().is_some() {
                    pre_merge.push((B256::ZERO, U256::ZERO));
                }
                walk.gap();
                continue;
            }
        };
        if h.header.number != n {
            violations.push(Violation {
                block: n,
                rule: Rule::Number,
                detail: format!("header number {} at index position {n}", h.header.number),
            });
        }
        let td = b.total_difficulty;
        let pow = !h.header.difficulty.is_zero();
        if pow {
            match td {
                Some(td) => pre_merge.push((h.hash, td)),
                None => violations.push(Violation {
                    block: n,
                    rule: Rule::TotalDifficulty,
                    detail: "a pre-merge block in an Ere file without TD records".into(),
                }),
            }
        }
        if n == 0 && td.is_some_and(|t| t != h.header.difficulty) {
            violations.push(Violation {
                block: 0,
                rule: Rule::TotalDifficulty,
                detail: format!("genesis TD {td:?} differs from its difficulty"),
            });
        }
        if let Some(p) = proof {
            report.proofs += 1;
            if p.proof_type == PROOF_HISTORICAL_HASHES_ACCUMULATOR && pow {
                acc_proofs.push((n, n - ere.start(), h.hash, p.data));
            } else if p.proof_type == PROOF_HISTORICAL_HASHES_ACCUMULATOR {
                violations.push(Violation {
                    block: n,
                    rule: Rule::Proof,
                    detail: "an accumulator proof for a post-merge block".into(),
                });
            }
        }
        let checked = Checked {
            offset: Some(b.offset),
            raw_header: &b.header,
            header: &h,
            body: Some(&body),
            body_payload_len: super::header::list_payload_len(&b.body),
            receipts: rs.as_deref(),
            td,
        };
        walk.block(&checked, &mut violations);
        sink(&checked, &mut violations);
        report.transactions += body.transactions.len() as u64;
        report.last_hash = h.hash;
    }
    let first = ere.start();
    let mut fail = |block: u64, rule: Rule, detail: String| {
        violations.push(Violation {
            block,
            rule,
            detail,
        })
    };
    let epoch = first / EPOCH_SIZE as u64;
    if pre_merge.is_empty() {
        if let Some(acc) = ere.accumulator() {
            fail(
                first,
                Rule::AccumulatorRecord,
                format!("an Accumulator record {acc} in a file without pre-merge blocks"),
            );
        }
    } else {
        let root = epoch_root(&pre_merge).unwrap_or_default();
        report.accumulator = Some(root);
        match ere.accumulator() {
            Some(r) if r == root => {}
            r => fail(
                first,
                Rule::AccumulatorRecord,
                format!("recomputed {root}, record {r:?}"),
            ),
        }
        // The list holds whole epochs: a file cut elsewhere cannot be compared with it.
        let listed = list
            .filter(|_| first.is_multiple_of(EPOCH_SIZE as u64))
            .and_then(|l| l.epoch(epoch));
        if list.is_some() && first.is_multiple_of(EPOCH_SIZE as u64) && listed != Some(root) {
            fail(
                first,
                Rule::AccumulatorList,
                format!("epoch {epoch} root in the list {listed:?}, recomputed {root}"),
            );
        }
        // A proof leads to the public root where there is one, else to the file's record:
        // one block that does not decode leaves the other proofs checkable.
        let target = listed.or(ere.accumulator()).unwrap_or(root);
        for (n, pos, hash, data) in &acc_proofs {
            report.proofs_checked += 1;
            if accumulator_proof_root(hash, *pos, data) != Some(target) {
                fail(
                    *n,
                    Rule::Proof,
                    format!("the accumulator proof of {hash} does not lead to {target}"),
                );
            }
        }
    }
    if let Some(name) = name {
        match parse_ere_name(name) {
            Some(parsed) => {
                if parsed.short_hash[..] != report.last_hash[..4] {
                    fail(
                        first,
                        Rule::FileName,
                        format!("{name} but the last block's hash is {}", report.last_hash),
                    );
                }
                if parsed.epoch != epoch {
                    fail(
                        first,
                        Rule::EpochStart,
                        format!("{name} but the first block is {first}"),
                    );
                }
                let has = |c| ere.has(c);
                let named = |p: &str| parsed.profiles.iter().any(|x| x == p);
                if named("noproofs") == has(Component::Proof)
                    || named("noreceipts") == has(Component::Receipts)
                {
                    fail(
                        first,
                        Rule::FileName,
                        format!(
                            "{name}: profiles {:?} but the file has proofs {}, receipts {}",
                            parsed.profiles,
                            has(Component::Proof),
                            has(Component::Receipts)
                        ),
                    );
                }
            }
            None => fail(
                first,
                Rule::FileName,
                format!("{name} is not an Ere file name"),
            ),
        }
    }
    report.violations = violations;
    report
}

/// What [`verify_freezer`] found in a range of a geth freezer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FreezerReport {
    pub first_block: u64,
    /// One past the last block checked.
    pub end_block: u64,
    pub last_hash: B256,
    pub transactions: u64,
    /// TD of the last block from `diffs`, if the table reaches it.
    pub final_td: Option<U256>,
    /// Blocks whose body and receipts were pruned (below the `bodies`/`receipts` tail).
    pub pruned_bodies: u64,
    pub violations: Vec<Violation>,
}

/// Check blocks `from..to` of a freezer (`to` is capped at the head): the header's hash against
/// the `hashes` table (geth's `ReadHeaderRLP` rule), the [`ChainWalk`] checks, with the storage
/// receipts typed from the body, where bodies and receipts are not pruned; TD from `diffs` where
/// present. Items that do not read or decode become [`Rule::Decode`] violations carrying the
/// table file and item.
pub fn verify_freezer(f: &Freezer, cfg: &ChainConfig, from: u64, to: u64) -> FreezerReport {
    verify_freezer_into(f, cfg, from, to, &mut |_, _| {})
}

/// [`verify_freezer`], handing each block whose header decoded to `sink` after its checks.
pub fn verify_freezer_into(
    f: &Freezer,
    cfg: &ChainConfig,
    from: u64,
    to: u64,
    sink: &mut Sink<'_>,
) -> FreezerReport {
    let end = to.min(f.head());
    let mut violations = Vec::new();
    let mut walk = ChainWalk::new(cfg);
    let mut report = FreezerReport {
        first_block: from,
        end_block: end,
        last_hash: B256::ZERO,
        transactions: 0,
        final_td: None,
        pruned_bodies: 0,
        violations: Vec::new(),
    };
    let body_tail = f.bodies.tail().max(f.receipts.tail());
    let decode_fail = |n: u64, e: super::Error| Violation {
        block: n,
        rule: Rule::Decode,
        detail: e.to_string(),
    };
    let mut ahead = ReadAhead::new(from, end);
    while let Some((n, item)) = ahead.next(|n| f.header(n), Vec::as_slice) {
        let read = item.and_then(|(raw, hash)| {
            let h = decode_header_hashed(&raw, hash).map_err(|e| e.for_block(n))?;
            Ok((raw, h))
        });
        let (raw, h) = match read {
            Ok(x) => x,
            Err(e) => {
                violations.push(decode_fail(n, e));
                walk.gap();
                continue;
            }
        };
        match f.hash(n) {
            Ok(want) => violations.extend(check_hash(&h, want)),
            Err(e) => violations.push(decode_fail(n, e)),
        }
        if h.header.number != n {
            violations.push(Violation {
                block: n,
                rule: Rule::Number,
                detail: format!("header number {} in freezer item {n}", h.header.number),
            });
        }
        let td = match f.total_difficulty(n) {
            Ok(td) => td,
            Err(e) => {
                violations.push(decode_fail(n, e));
                None
            }
        };
        let mut body_payload_len = 0;
        let contents = if n >= body_tail {
            let read = f.body(n).and_then(|b| {
                body_payload_len = super::header::list_payload_len(&b);
                let body = decode_body(&b).map_err(|e| e.for_block(n))?;
                let raw = f.receipts(n)?;
                let mut rs = decode_storage_receipts(&raw).map_err(|e| e.for_block(n))?;
                set_types(&mut rs, &body);
                Ok((body, rs))
            });
            match read {
                Ok(x) => Some(x),
                Err(e) => {
                    violations.push(decode_fail(n, e));
                    None
                }
            }
        } else {
            report.pruned_bodies += 1;
            None
        };
        let checked = Checked {
            offset: None,
            raw_header: &raw,
            header: &h,
            body: contents.as_ref().map(|(b, _)| b),
            body_payload_len,
            receipts: contents.as_ref().map(|(_, r)| &r[..]),
            td,
        };
        walk.block(&checked, &mut violations);
        sink(&checked, &mut violations);
        if let Some((body, _)) = &contents {
            report.transactions += body.transactions.len() as u64;
        }
        report.last_hash = h.hash;
        report.final_td = td;
    }
    report.violations = violations;
    report
}
