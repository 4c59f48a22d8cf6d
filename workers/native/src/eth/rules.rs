//! Header and block rules that need no state (spec §3.2–3.5), as geth's importer applies them:
//! the formulas (difficulty of every fork with every bomb delay, EIP-1559 base fee,
//! EIP-4844/7918 excess blob gas) and the checks, each against a [`ChainConfig`]:
//!
//! * [`check_header`]: a header against its parent — parent link (hash of the bytes read),
//!   number, timestamp, extra-data size, gas limit bounds, gas used, base fee, fork fields present
//!   iff their fork is active, difficulty (PoW) or the PoS constants (difficulty 0, nonce 0,
//!   empty ommers) where the parent or the schedule ([`must_be_pos`]) makes the header proof of
//!   stake, DAO extra-data, blob gas.
//! * [`check_block`]: a header against its body and receipts — ommers hash, uncle count,
//!   transactions root, withdrawals root, blob gas used against the body's blobs, receipt count,
//!   receipts root, each receipt's stored bloom, logs bloom, cumulative gas rising, gas used.
//! * [`check_uncles`]: uncles not reused, not ancestors, parent within 7 generations, and each
//!   uncle header valid against its parent.
//! * [`check_total_difficulty`], [`check_hash`], [`check_pow`] (ethash, [`super::ethash`]).
//!
//! Each failed rule is a [`Violation`] (block number, [`Rule`], detail); nothing panics.
//! Not here: state/receipt execution, `requestsHash` (needs executed requests).

use super::body::Body;
use super::chain_config::{at, ChainConfig};
use super::header::{DecodedHeader, Header, EMPTY_OMMERS_HASH};
use super::receipt::{receipts_root, Receipt};
use alloy_primitives::{Bloom, B256, U256};

pub const GAS_PER_BLOB: u64 = 131_072;
pub const MAX_GAS_LIMIT: u64 = 0x7fff_ffff_ffff_ffff;
pub const MIN_GAS_LIMIT: u64 = 5000;
pub const MAX_EXTRA_DATA: usize = 32;
pub const MINIMUM_DIFFICULTY: u64 = 131_072;
pub const INITIAL_BASE_FEE: u64 = 1_000_000_000;
/// Extra data required in the ten blocks from the DAO fork.
pub const DAO_EXTRA_DATA: &[u8] = b"dao-hard-fork";

/// The rule a [`Violation`] breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Rule {
    Hash,
    ParentHash,
    Number,
    Timestamp,
    ExtraData,
    GasLimit,
    GasUsed,
    BaseFee,
    ForkFields,
    Difficulty,
    DaoExtraData,
    /// A header with difficulty whose parent is proof of stake (difficulty 0).
    PowAfterPos,
    /// A header with difficulty where the schedule wants proof of stake ([`must_be_pos`]) and
    /// the parent is proof of work (after a proof-of-stake parent it is [`Rule::PowAfterPos`]).
    PosDifficulty,
    PosNonce,
    PosOmmers,
    BlobGasUsed,
    ExcessBlobGas,
    OmmersHash,
    UncleCount,
    TransactionsRoot,
    WithdrawalsRoot,
    ReceiptCount,
    ReceiptsRoot,
    ReceiptBloom,
    /// A receipt's cumulative gas not above the one before it (every transaction uses gas).
    ReceiptCumulativeGas,
    LogsBloom,
    TotalDifficulty,
    /// A header, body or receipt list that does not decode (detail: the reader error).
    Decode,
    /// An era1 file's recomputed accumulator differs from its Accumulator record.
    AccumulatorRecord,
    /// ... from the first 4 bytes in its file name.
    AccumulatorName,
    /// ... from the EIP-7643 list entry of its epoch.
    AccumulatorList,
    /// An era1 file's first block is not `8192 · epoch` of its name.
    EpochStart,
    /// An uncle included before (in this block or the 7 before it).
    UncleDuplicate,
    /// An uncle that is one of the block's own ancestors.
    UncleIsAncestor,
    /// An uncle whose parent is not among the 7 ancestors, or is the block's own parent.
    UncleDangling,
    /// An uncle header breaking a header rule against its parent (detail names the rule).
    UncleHeader,
    /// Ethash: the hashimoto digest differs from the header's mixHash.
    PowMixHash,
    /// Ethash: the hashimoto result exceeds `2^256 / difficulty`.
    PowTarget,
    /// An Ere file name whose epoch or short hash is not its first block's epoch or its last
    /// block's hash.
    FileName,
    /// An Ere block proof that does not lead to its epoch's accumulator root.
    Proof,
}

impl Rule {
    /// The rule's name in reports and tables (`invalid_reason`, verdicts).
    pub fn name(self) -> &'static str {
        match self {
            Rule::Hash => "hash",
            Rule::ParentHash => "parent_hash",
            Rule::Number => "number",
            Rule::Timestamp => "timestamp",
            Rule::ExtraData => "extra_data",
            Rule::GasLimit => "gas_limit",
            Rule::GasUsed => "gas_used",
            Rule::BaseFee => "base_fee",
            Rule::ForkFields => "fork_fields",
            Rule::Difficulty => "difficulty",
            Rule::DaoExtraData => "dao_extra_data",
            Rule::PowAfterPos => "pow_after_pos",
            Rule::PosDifficulty => "pos_difficulty",
            Rule::PosNonce => "pos_nonce",
            Rule::PosOmmers => "pos_ommers",
            Rule::BlobGasUsed => "blob_gas_used",
            Rule::ExcessBlobGas => "excess_blob_gas",
            Rule::OmmersHash => "ommers_hash",
            Rule::UncleCount => "uncle_count",
            Rule::TransactionsRoot => "transactions_root",
            Rule::WithdrawalsRoot => "withdrawals_root",
            Rule::ReceiptCount => "receipt_count",
            Rule::ReceiptsRoot => "receipts_root",
            Rule::ReceiptBloom => "receipt_bloom",
            Rule::ReceiptCumulativeGas => "receipt_cumulative_gas",
            Rule::LogsBloom => "logs_bloom",
            Rule::TotalDifficulty => "total_difficulty",
            Rule::Decode => "decode",
            Rule::AccumulatorRecord => "accumulator_record",
            Rule::AccumulatorName => "accumulator_name",
            Rule::AccumulatorList => "accumulator_list",
            Rule::EpochStart => "epoch_start",
            Rule::UncleDuplicate => "uncle_duplicate",
            Rule::UncleIsAncestor => "uncle_is_ancestor",
            Rule::UncleDangling => "uncle_dangling",
            Rule::UncleHeader => "uncle_header",
            Rule::PowMixHash => "pow_mix_hash",
            Rule::PowTarget => "pow_target",
            Rule::FileName => "file_name",
            Rule::Proof => "proof",
        }
    }
}

/// One failed rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub block: u64,
    pub rule: Rule,
    pub detail: String,
}

/// `calcDifficulty` of geth's ethash for a child at `time` of `parent` (§3.3.1).
pub fn calc_difficulty(cfg: &ChainConfig, time: u64, parent: &Header) -> U256 {
    let next = parent.number + 1;
    let d = parent.difficulty;
    let adjust = d / U256::from(2048);
    let dt = time.saturating_sub(parent.timestamp);
    let min = U256::from(MINIMUM_DIFFICULTY);
    let apply = |x: i64| -> U256 {
        let delta = adjust.saturating_mul(U256::from(x.unsigned_abs()));
        let v = if x >= 0 {
            d.saturating_add(delta)
        } else {
            d.saturating_sub(delta)
        };
        v.max(min)
    };
    let bomb = |v: U256, period: u64| -> U256 {
        match period {
            0 | 1 => v,
            p if p - 2 < 256 => v.saturating_add(U256::from(1) << (p - 2) as usize),
            _ => U256::MAX,
        }
    };
    let delay = if at(cfg.gray_glacier, next) {
        Some(11_400_000)
    } else if at(cfg.arrow_glacier, next) {
        Some(10_700_000)
    } else if at(cfg.london, next) {
        Some(9_700_000)
    } else if at(cfg.muir_glacier, next) {
        Some(9_000_000)
    } else if at(cfg.constantinople, next) {
        Some(5_000_000)
    } else if at(cfg.byzantium, next) {
        Some(3_000_000)
    } else {
        None
    };
    if let Some(delay) = delay {
        let base: i64 = if parent.ommers_hash != EMPTY_OMMERS_HASH {
            2
        } else {
            1
        };
        let x = (base - (dt / 9).min(1000) as i64).max(-99);
        let fake = parent.number.saturating_sub(delay - 1);
        bomb(apply(x), fake / 100_000)
    } else if at(cfg.homestead, next) {
        let x = (1 - (dt / 10).min(1000) as i64).max(-99);
        bomb(apply(x), next / 100_000)
    } else {
        let v = if dt < 13 {
            d.saturating_add(adjust)
        } else {
            d - adjust
        };
        bomb(v.max(min), next / 100_000).max(min)
    }
}

/// `CalcBaseFee(parent)`: the base fee a child of `parent` must carry (§3.3.2).
pub fn calc_base_fee(cfg: &ChainConfig, parent: &Header) -> u64 {
    if !cfg.is_london(parent.number) {
        return INITIAL_BASE_FEE;
    }
    let base = parent.base_fee_per_gas.unwrap_or(0) as u128;
    let target = (parent.gas_limit / 2) as u128;
    let used = parent.gas_used as u128;
    if target == 0 || used == target {
        return base as u64;
    }
    if used > target {
        let delta = (base * (used - target) / target / 8).max(1);
        (base + delta).min(u64::MAX as u128) as u64
    } else {
        let delta = base * (target - used) / target / 8;
        base.saturating_sub(delta) as u64
    }
}

/// `fake_exponential(factor, numerator, denominator)` of EIP-4844.
pub fn fake_exponential(factor: u64, numerator: u64, denominator: u64) -> U256 {
    let (num, den) = (U256::from(numerator), U256::from(denominator));
    let mut i = U256::from(1);
    let mut output = U256::ZERO;
    let mut acc = U256::from(factor) * den;
    while acc > U256::ZERO {
        output = output.saturating_add(acc);
        acc = acc.saturating_mul(num) / (den * i);
        i += U256::from(1);
    }
    output / den
}

/// `CalcExcessBlobGas(parent, time)` with the blob config active at the child's `time`.
pub fn calc_excess_blob_gas(cfg: &ChainConfig, parent: &Header, time: u64) -> u64 {
    let Some(bc) = cfg.blob_config(time) else {
        return 0;
    };
    let (pe, pu) = match (parent.excess_blob_gas, parent.blob_gas_used) {
        (Some(e), Some(u)) => (e, u),
        _ => (0, 0),
    };
    let excess = pe.saturating_add(pu);
    let target = bc.target * GAS_PER_BLOB;
    if excess < target {
        return 0;
    }
    if cfg.is_osaka(time) {
        let reserve = U256::from(8192u64) * U256::from(parent.base_fee_per_gas.unwrap_or(0));
        let blob_price = fake_exponential(1, pe, bc.update_fraction) * U256::from(GAS_PER_BLOB);
        if reserve > blob_price {
            let scaled = pu as u128 * (bc.max - bc.target) as u128 / bc.max as u128;
            return (pe as u128 + scaled).min(u64::MAX as u128) as u64;
        }
    }
    excess - target
}

struct Out<'a> {
    block: u64,
    v: &'a mut Vec<Violation>,
}

impl Out<'_> {
    fn fail(&mut self, rule: Rule, detail: String) {
        self.v.push(Violation {
            block: self.block,
            rule,
            detail,
        });
    }
    fn check(&mut self, ok: bool, rule: Rule, detail: impl FnOnce() -> String) {
        if !ok {
            self.fail(rule, detail());
        }
    }
}

fn gas_limit_bound(out: &mut Out<'_>, parent_limit: u64, limit: u64) {
    let diff = parent_limit.abs_diff(limit);
    out.check(diff < parent_limit / 1024, Rule::GasLimit, || {
        format!(
            "gas limit {limit} changes by {diff} from {parent_limit} (bound {})",
            parent_limit / 1024
        )
    });
    out.check(limit >= MIN_GAS_LIMIT, Rule::GasLimit, || {
        format!("gas limit {limit} below {MIN_GAS_LIMIT}")
    });
}

/// Whether the fork schedule makes a header proof of stake whatever its parent: from
/// `cfg.merge_block` on (where the network's history fixes it), and at or after Shanghai (every
/// network merged before Shanghai; rechain's generator switches there). Before that only the
/// header's difficulty (0) or its parent's tells (spec §3.4: geth's split rule).
pub fn must_be_pos(cfg: &ChainConfig, number: u64, time: u64) -> bool {
    at(cfg.merge_block, number) || cfg.is_shanghai(time)
}

/// Check `child` against `parent` (both decoded from the bytes read).
pub fn check_header(
    cfg: &ChainConfig,
    child: &DecodedHeader,
    parent: &DecodedHeader,
) -> Vec<Violation> {
    let mut v = Vec::new();
    let h = &child.header;
    let p = &parent.header;
    let mut out = Out {
        block: h.number,
        v: &mut v,
    };

    out.check(h.parent_hash == parent.hash, Rule::ParentHash, || {
        format!(
            "parent hash {} but the parent's bytes hash to {}",
            h.parent_hash, parent.hash
        )
    });
    out.check(
        p.number.checked_add(1) == Some(h.number),
        Rule::Number,
        || format!("number {} after parent {}", h.number, p.number),
    );
    out.check(h.timestamp > p.timestamp, Rule::Timestamp, || {
        format!(
            "timestamp {} not after parent's {}",
            h.timestamp, p.timestamp
        )
    });
    out.check(
        h.extra_data.len() <= MAX_EXTRA_DATA,
        Rule::ExtraData,
        || format!("{} bytes of extra data", h.extra_data.len()),
    );
    out.check(h.gas_limit <= MAX_GAS_LIMIT, Rule::GasLimit, || {
        format!("gas limit {} above 2^63-1", h.gas_limit)
    });
    out.check(h.gas_used <= h.gas_limit, Rule::GasUsed, || {
        format!("gas used {} above gas limit {}", h.gas_used, h.gas_limit)
    });

    // Fork fields: present iff the fork is active.
    let want = cfg.expected_fields(h.number, h.timestamp);
    let present = [
        h.base_fee_per_gas.is_some() == cfg.is_london(h.number),
        h.withdrawals_root.is_some() == cfg.is_shanghai(h.timestamp),
        h.blob_gas_used.is_some() == cfg.is_cancun(h.timestamp),
        h.excess_blob_gas.is_some() == cfg.is_cancun(h.timestamp),
        h.parent_beacon_block_root.is_some() == cfg.is_cancun(h.timestamp),
        h.requests_hash.is_some() == cfg.is_prague(h.timestamp),
        h.block_access_list_hash.is_none() && h.slot_number.is_none(),
    ];
    out.check(
        child.fields == want && present.iter().all(|x| *x),
        Rule::ForkFields,
        || {
            format!(
                "{} header fields, the fork schedule wants {want}",
                child.fields
            )
        },
    );

    // Gas limit and base fee.
    if cfg.is_london(h.number) {
        let parent_limit = if cfg.is_london(p.number) {
            p.gas_limit
        } else {
            p.gas_limit.saturating_mul(2)
        };
        gas_limit_bound(&mut out, parent_limit, h.gas_limit);
        if cfg.is_london(p.number) && p.base_fee_per_gas.is_none() {
            out.fail(Rule::BaseFee, "London parent without base fee".into());
        }
        let want = calc_base_fee(cfg, p);
        out.check(h.base_fee_per_gas == Some(want), Rule::BaseFee, || {
            format!("base fee {:?}, expected {want}", h.base_fee_per_gas)
        });
    } else {
        gas_limit_bound(&mut out, p.gas_limit, h.gas_limit);
    }

    let parent_pos = p.difficulty.is_zero();
    let scheduled_pos = must_be_pos(cfg, h.number, h.timestamp);
    if h.difficulty > U256::ZERO && !parent_pos && !scheduled_pos {
        // Proof of work (ethash) header.
        let want = calc_difficulty(cfg, h.timestamp, p);
        out.check(h.difficulty == want, Rule::Difficulty, || {
            format!("difficulty {}, expected {want}", h.difficulty)
        });
        if let Some(dao) = cfg.dao {
            if h.number >= dao && h.number < dao + 10 {
                out.check(
                    &h.extra_data[..] == DAO_EXTRA_DATA,
                    Rule::DaoExtraData,
                    || format!("extra data {} in the DAO fork range", h.extra_data),
                );
            }
        }
    } else {
        // Proof of stake header: by its zero difficulty, or its place (after a proof-of-stake
        // parent, or where the schedule wants proof of stake) whatever difficulty it carries.
        // Such a header has no difficulty formula: a difficulty is the one fault, reported once.
        if h.difficulty > U256::ZERO {
            if parent_pos {
                out.fail(
                    Rule::PowAfterPos,
                    format!(
                        "difficulty {} after a proof-of-stake parent (difficulty 0)",
                        h.difficulty
                    ),
                );
            } else {
                out.fail(
                    Rule::PosDifficulty,
                    format!(
                        "difficulty {} where the schedule wants proof of stake (block {}, \
                         time {}; merge block {:?}, Shanghai time {:?})",
                        h.difficulty, h.number, h.timestamp, cfg.merge_block, cfg.shanghai_time
                    ),
                );
            }
        }
        out.check(h.nonce.is_zero(), Rule::PosNonce, || {
            format!("nonce {}", h.nonce)
        });
        out.check(h.ommers_hash == EMPTY_OMMERS_HASH, Rule::PosOmmers, || {
            format!("ommers hash {}", h.ommers_hash)
        });
    }

    if cfg.is_cancun(h.timestamp) {
        if let (Some(used), Some(excess), Some(bc)) = (
            h.blob_gas_used,
            h.excess_blob_gas,
            cfg.blob_config(h.timestamp),
        ) {
            out.check(
                used.is_multiple_of(GAS_PER_BLOB) && used <= bc.max * GAS_PER_BLOB,
                Rule::BlobGasUsed,
                || {
                    format!(
                        "blob gas used {used} (max {} blobs of {GAS_PER_BLOB})",
                        bc.max
                    )
                },
            );
            let want = calc_excess_blob_gas(cfg, p, h.timestamp);
            out.check(excess == want, Rule::ExcessBlobGas, || {
                format!("excess blob gas {excess}, expected {want}")
            });
        }
    }
    v
}

/// Check a header against its body and, when given, its receipts (consensus or slim form, or
/// storage form after [`super::receipt::set_types`]).
pub fn check_block(
    cfg: &ChainConfig,
    header: &DecodedHeader,
    body: &Body,
    receipts: Option<&[Receipt]>,
) -> Vec<Violation> {
    let mut v = Vec::new();
    let h = &header.header;
    let mut out = Out {
        block: h.number,
        v: &mut v,
    };
    out.check(body.uncles_hash == h.ommers_hash, Rule::OmmersHash, || {
        format!(
            "uncles hash to {}, header has {}",
            body.uncles_hash, h.ommers_hash
        )
    });
    out.check(body.uncles.len() <= 2, Rule::UncleCount, || {
        format!("{} uncles", body.uncles.len())
    });
    let tx_root = body.transactions_root();
    out.check(
        tx_root == h.transactions_root,
        Rule::TransactionsRoot,
        || {
            format!(
                "transactions root {tx_root}, header has {}",
                h.transactions_root
            )
        },
    );
    let want_w = cfg.is_shanghai(h.timestamp);
    match (body.withdrawals_root(), h.withdrawals_root) {
        (Some(r), Some(hr)) => out.check(r == hr, Rule::WithdrawalsRoot, || {
            format!("withdrawals root {r}, header has {hr}")
        }),
        (None, None) if !want_w => {}
        (b, hr) => out.fail(
            Rule::WithdrawalsRoot,
            format!("body withdrawals {:?}, header root {hr:?}", b.is_some()),
        ),
    }
    // geth's `ValidateBody`: the header's blob gas is GAS_PER_BLOB per versioned hash of the
    // body's (type-3) transactions; a header without the field allows no blobs.
    let blobs: u64 = body
        .transactions
        .iter()
        .map(|t| {
            use alloy_consensus::Transaction as _;
            t.envelope
                .blob_versioned_hashes()
                .map_or(0, |b| b.len() as u64)
        })
        .sum();
    let blob_gas = blobs as u128 * GAS_PER_BLOB as u128;
    out.check(
        blob_gas == h.blob_gas_used.unwrap_or(0) as u128,
        Rule::BlobGasUsed,
        || {
            format!(
                "{blobs} blobs in the body need {blob_gas} blob gas, header has {:?}",
                h.blob_gas_used
            )
        },
    );
    if let Some(rs) = receipts {
        out.check(
            rs.len() == body.transactions.len(),
            Rule::ReceiptCount,
            || {
                format!(
                    "{} receipts for {} transactions",
                    rs.len(),
                    body.transactions.len()
                )
            },
        );
        match receipts_root(rs) {
            Some(r) => out.check(r == h.receipts_root, Rule::ReceiptsRoot, || {
                format!("receipts root {r}, header has {}", h.receipts_root)
            }),
            None => out.fail(
                Rule::ReceiptsRoot,
                "receipts of unknown transaction type".into(),
            ),
        }
        let mut bloom = Bloom::ZERO;
        let mut before = 0u64;
        for (i, r) in rs.iter().enumerate() {
            // Every transaction uses gas (its 21,000 intrinsic, less a refund of at most half).
            out.check(
                r.cumulative_gas_used > before,
                Rule::ReceiptCumulativeGas,
                || {
                    format!(
                        "receipt {i}: cumulative gas {} not above the {before} before it",
                        r.cumulative_gas_used
                    )
                },
            );
            before = r.cumulative_gas_used;
            let b = r.logs_bloom();
            if let Some(stored) = r.bloom {
                out.check(stored == b, Rule::ReceiptBloom, || {
                    format!("receipt {i}: bloom differs from its logs")
                });
            }
            bloom |= b;
        }
        out.check(bloom == h.logs_bloom, Rule::LogsBloom, || {
            "logs bloom differs from the receipts' logs".into()
        });
        let used = rs.last().map(|r| r.cumulative_gas_used).unwrap_or(0);
        out.check(used == h.gas_used, Rule::GasUsed, || {
            format!("receipts use {used} gas, header says {}", h.gas_used)
        });
    }
    v
}

/// Ethash proof of work of a PoW header (`raw` = its bytes as read) with the cache of its epoch
/// ([`super::ethash::Cache::new`]`(`[`super::ethash::epoch_of`]`(number))`).
pub fn check_pow(
    cache: &super::ethash::Cache,
    raw: &[u8],
    header: &DecodedHeader,
) -> Vec<Violation> {
    let n = header.header.number;
    match super::ethash::verify_pow(cache, raw, header) {
        Err(e) => vec![Violation {
            block: n,
            rule: Rule::Decode,
            detail: e.to_string(),
        }],
        Ok(p) => {
            let mut v = Vec::new();
            if !p.mix_ok {
                v.push(Violation {
                    block: n,
                    rule: Rule::PowMixHash,
                    detail: format!("digest {}, mixHash {}", p.digest, header.header.mix_hash),
                });
            }
            if !p.target_ok {
                v.push(Violation {
                    block: n,
                    rule: Rule::PowTarget,
                    detail: format!(
                        "result {} above 2^256/{}",
                        p.result, header.header.difficulty
                    ),
                });
            }
            v
        }
    }
}

/// One of the 7 blocks before the one being checked, with the hashes of its uncles.
#[derive(Debug, Clone)]
pub struct Ancestor {
    pub header: DecodedHeader,
    pub uncle_hashes: Vec<B256>,
}

/// How many ancestors [`check_uncles`] looks at (geth's ethash `VerifyUncles`).
pub const UNCLE_GENERATIONS: usize = 7;

/// geth's `VerifyUncles`: at most 2 uncles; none included before within the last 7 blocks or
/// twice here; none an ancestor; each uncle's parent among the 7 ancestors but not the block's
/// parent; each uncle header valid against that parent ([`check_header`]).
/// `ancestors` = the block's parent first, then older, up to [`UNCLE_GENERATIONS`]. When fewer
/// than 7 are known (start of a file) an uncle whose parent is not among them is not judged.
pub fn check_uncles(
    cfg: &ChainConfig,
    block: &DecodedHeader,
    body: &Body,
    ancestors: &[Ancestor],
) -> Vec<Violation> {
    let n = block.header.number;
    let mut v = Vec::new();
    if body.uncles.is_empty() {
        return v;
    }
    let window = &ancestors[..ancestors.len().min(UNCLE_GENERATIONS)];
    let mut seen: Vec<B256> = window
        .iter()
        .flat_map(|a| a.uncle_hashes.iter().copied())
        .collect();
    seen.push(block.hash);
    let full_window = window.len() == UNCLE_GENERATIONS;
    for u in &body.uncles {
        let fail = |rule: Rule, detail: String| Violation {
            block: n,
            rule,
            detail,
        };
        if seen.contains(&u.hash) {
            v.push(fail(
                Rule::UncleDuplicate,
                format!("uncle {} included before", u.hash),
            ));
            continue;
        }
        seen.push(u.hash);
        if u.hash == block.hash || window.iter().any(|a| a.header.hash == u.hash) {
            v.push(fail(
                Rule::UncleIsAncestor,
                format!("uncle {} is an ancestor", u.hash),
            ));
            continue;
        }
        let parent = window
            .iter()
            .find(|a| a.header.hash == u.header.parent_hash);
        match parent {
            Some(_) if u.header.parent_hash == block.header.parent_hash => v.push(fail(
                Rule::UncleDangling,
                format!("uncle {} is a sibling (shares the block's parent)", u.hash),
            )),
            Some(p) => {
                for x in check_header(cfg, u, &p.header) {
                    v.push(fail(
                        Rule::UncleHeader,
                        format!("uncle {} ({:?}): {}", u.hash, x.rule, x.detail),
                    ));
                }
            }
            None if full_window => v.push(fail(
                Rule::UncleDangling,
                format!(
                    "uncle {}: parent {} not among 7 ancestors",
                    u.hash, u.header.parent_hash
                ),
            )),
            None => {}
        }
    }
    v
}

/// `td == parent_td + difficulty`.
pub fn check_total_difficulty(
    header: &DecodedHeader,
    parent_td: U256,
    td: U256,
) -> Option<Violation> {
    let want = parent_td.saturating_add(header.header.difficulty);
    (td != want).then(|| Violation {
        block: header.header.number,
        rule: Rule::TotalDifficulty,
        detail: format!("total difficulty {td}, expected {want}"),
    })
}

/// The hash of the header bytes read equals the hash recorded elsewhere (freezer `hashes`,
/// a canonical-hash list).
pub fn check_hash(header: &DecodedHeader, expected: B256) -> Option<Violation> {
    (header.hash != expected).then(|| Violation {
        block: header.header.number,
        rule: Rule::Hash,
        detail: format!("header bytes hash to {}, expected {expected}", header.hash),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eth::chain_config::MAINNET;

    #[test]
    fn difficulty_example_berlin() {
        // ethereum/tests DifficultyTests/dfExample "difficultyExample-0" (spec §4.4): Berlin,
        // parent difficulty 0x020157, parent ts 0, ts 1, parent has uncles, number 0x0186a0.
        let parent = Header {
            difficulty: U256::from(0x020157),
            timestamp: 0,
            number: 0x0186a0 - 1,
            ommers_hash: B256::repeat_byte(1),
            ..Default::default()
        };
        let cfg = ChainConfig {
            byzantium: Some(0),
            constantinople: Some(0),
            muir_glacier: Some(0),
            ..MAINNET
        };
        let cfg = ChainConfig {
            london: None,
            arrow_glacier: None,
            gray_glacier: None,
            ..cfg
        };
        assert_eq!(calc_difficulty(&cfg, 1, &parent), U256::from(0x0201d7));
    }

    #[test]
    fn frontier_block1_difficulty() {
        // Spec §4.2: 17179869184 - 17179869184//2048 = 17171480576 (gap >= 13).
        let genesis = Header {
            difficulty: U256::from(17_179_869_184u64),
            ..Default::default()
        };
        assert_eq!(
            calc_difficulty(&MAINNET, 1_438_269_988, &genesis),
            U256::from(17_171_480_576u64)
        );
    }
}

#[cfg(test)]
#[path = "rules_tests.rs"]
mod rules_tests;
