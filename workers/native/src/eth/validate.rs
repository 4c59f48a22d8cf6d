//! Header and block rules that need no state (spec §3.2–3.5), as geth's importer applies them.
//!
//! Owns the fork schedule ([`ChainConfig`], mainnet, Sepolia and rechain's `dev`), the formulas (difficulty of every
//! fork with every bomb delay, EIP-1559 base fee, EIP-4844/7918 excess blob gas) and the checks:
//!
//! * [`check_header`]: a header against its parent — parent link (hash of the bytes read),
//!   number, timestamp, extra-data size, gas limit bounds, gas used, base fee, fork fields present
//!   iff their fork is active, difficulty (PoW) or the PoS constants (difficulty 0, nonce 0,
//!   empty ommers), DAO extra-data, blob gas.
//! * [`check_block`]: a header against its body and receipts — ommers hash, uncle count,
//!   transactions root, withdrawals root, receipts root, logs bloom, gas used.
//! * [`check_uncles`]: uncles not reused, not ancestors, parent within 7 generations, and each
//!   uncle header valid against its parent.
//! * [`check_total_difficulty`], [`check_hash`], [`check_pow`] (ethash, [`super::ethash`]).
//!
//! Each failed rule is a [`Violation`] (block number, [`Rule`], detail); nothing panics.
//! Not here: state/receipt execution, `requestsHash` (needs executed requests).

use super::accumulator::{epoch_root, HistoricalRoots, EPOCH_SIZE};
use super::body::{decode_body, Body};
use super::era1::{parse_name, Era1, Era1Block};
use super::freezer::Freezer;
use super::header::{decode_header_hashed, KeccakBatch};
use super::header::{DecodedHeader, Header, EMPTY_OMMERS_HASH};
use super::receipt::decode_consensus_receipts;
use super::receipt::{decode_storage_receipts, set_types};
use super::receipt::{receipts_root, Receipt};
use alloy_primitives::{Bloom, B256, U256};

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

/// Block-number and timestamp fork activations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainConfig {
    pub homestead: Option<u64>,
    pub dao: Option<u64>,
    pub byzantium: Option<u64>,
    pub constantinople: Option<u64>,
    pub muir_glacier: Option<u64>,
    pub london: Option<u64>,
    pub arrow_glacier: Option<u64>,
    pub gray_glacier: Option<u64>,
    pub shanghai_time: Option<u64>,
    pub cancun_time: Option<u64>,
    pub prague_time: Option<u64>,
    pub osaka_time: Option<u64>,
    pub bpo1_time: Option<u64>,
    pub bpo2_time: Option<u64>,
}

/// `params/config.go: MainnetChainConfig` (spec §3.2).
pub const MAINNET: ChainConfig = ChainConfig {
    homestead: Some(1_150_000),
    dao: Some(1_920_000),
    byzantium: Some(4_370_000),
    constantinople: Some(7_280_000),
    muir_glacier: Some(9_200_000),
    london: Some(12_965_000),
    arrow_glacier: Some(13_773_000),
    gray_glacier: Some(15_050_000),
    shanghai_time: Some(1_681_338_455),
    cancun_time: Some(1_710_338_135),
    prague_time: Some(1_746_612_311),
    osaka_time: Some(1_764_798_551),
    bpo1_time: Some(1_765_290_071),
    bpo2_time: Some(1_767_747_671),
};

/// `params/config.go: SepoliaChainConfig`: every block fork through London at genesis, no
/// Arrow/Gray Glacier, no DAO. Time forks after Prague are left out (not in the spec).
pub const SEPOLIA: ChainConfig = ChainConfig {
    homestead: Some(0),
    dao: None,
    byzantium: Some(0),
    constantinople: Some(0),
    muir_glacier: Some(0),
    london: Some(0),
    arrow_glacier: None,
    gray_glacier: None,
    shanghai_time: Some(1_677_557_088),
    cancun_time: Some(1_706_655_072),
    prague_time: Some(1_741_159_776),
    osaka_time: None,
    bpo1_time: None,
    bpo2_time: None,
};

/// rechain's `dev` network (`eth::gen`): every pre-merge block fork at genesis (London's base
/// fee and typed transactions from block 0, the last bomb delay), no DAO, no time forks.
pub const DEV: ChainConfig = ChainConfig {
    homestead: Some(0),
    dao: None,
    byzantium: Some(0),
    constantinople: Some(0),
    muir_glacier: Some(0),
    london: Some(0),
    arrow_glacier: Some(0),
    gray_glacier: Some(0),
    shanghai_time: None,
    cancun_time: None,
    prague_time: None,
    osaka_time: None,
    bpo1_time: None,
    bpo2_time: None,
};

fn at(fork: Option<u64>, x: u64) -> bool {
    fork.is_some_and(|f| x >= f)
}

impl ChainConfig {
    pub fn by_name(name: &str) -> Option<ChainConfig> {
        match name {
            "mainnet" => Some(MAINNET),
            "sepolia" => Some(SEPOLIA),
            "dev" => Some(DEV),
            _ => None,
        }
    }
    pub fn is_london(&self, number: u64) -> bool {
        at(self.london, number)
    }
    pub fn is_shanghai(&self, time: u64) -> bool {
        at(self.shanghai_time, time)
    }
    pub fn is_cancun(&self, time: u64) -> bool {
        at(self.cancun_time, time)
    }
    pub fn is_prague(&self, time: u64) -> bool {
        at(self.prague_time, time)
    }
    pub fn is_osaka(&self, time: u64) -> bool {
        at(self.osaka_time, time)
    }

    /// Blob parameters active at `time`, `None` before Cancun.
    pub fn blob_config(&self, time: u64) -> Option<BlobConfig> {
        let c = if at(self.bpo2_time, time) {
            BlobConfig {
                target: 14,
                max: 21,
                update_fraction: 11_684_671,
            }
        } else if at(self.bpo1_time, time) {
            BlobConfig {
                target: 10,
                max: 15,
                update_fraction: 8_346_193,
            }
        } else if self.is_prague(time) {
            BlobConfig {
                target: 6,
                max: 9,
                update_fraction: 5_007_716,
            }
        } else if self.is_cancun(time) {
            BlobConfig {
                target: 3,
                max: 6,
                update_fraction: 3_338_477,
            }
        } else {
            return None;
        };
        Some(c)
    }

    /// Number of header fields a header with this number and time must have (15..=21).
    pub fn expected_fields(&self, number: u64, time: u64) -> usize {
        15 + self.is_london(number) as usize
            + self.is_shanghai(time) as usize
            + 3 * self.is_cancun(time) as usize
            + self.is_prague(time) as usize
    }
}

/// Blob schedule entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlobConfig {
    pub target: u64,
    pub max: u64,
    pub update_fraction: u64,
}

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
    PowAfterPos,
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

    if h.difficulty > U256::ZERO {
        // Proof of work (ethash) header.
        out.check(p.difficulty > U256::ZERO, Rule::PowAfterPos, || {
            "proof-of-work header after a proof-of-stake parent".into()
        });
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
        // Proof of stake header.
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
        for (i, r) in rs.iter().enumerate() {
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

#[cfg(test)]
mod tests {
    use super::*;

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
