//! One unit of `rechain eth import`: the blocks of one era1 file, or a range of a geth freezer,
//! read, checked ([`super::validate`], plus ethash when asked) and turned into table rows
//! ([`super::tables`]). Pure: a unit's output depends only on its input bytes and options, so
//! a worker may run (or rerun) it anywhere. What needs the blocks before the unit (the parent
//! link of its first block, a TD not stored in the source) is left to the ordered committer,
//! with [`link_violations`] and [`rebase_total_difficulty`].
//!
//! Also the RocksDB index entries of a unit ([`index_entries`]): keys and values declared here.

use super::accumulator::{self, HistoricalRoots};
use super::chain_config::ChainConfig;
use super::era1::Era1;
use super::ere::Ere;
use super::ethash::{self, Cache};
use super::freezer::Freezer;
use super::header::{decode_header, DecodedHeader, KeccakBatch};
use super::rules::{check_header, check_pow, check_total_difficulty, Rule, Violation};
use super::tables::Rows;
use super::validate::{verify_era1_into, verify_ere_into, verify_freezer_into, Checked};
use super::{Error, B256, U256};
use alloy_primitives::hex;
use arrow_array::{
    Array, ArrayRef, BinaryArray, Decimal128Array, RecordBatch, StringArray, UInt64Array,
};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// What a unit reads.
#[derive(Debug, Clone)]
pub enum Source {
    /// One era1 file, whole.
    Era1(PathBuf),
    /// One Ere file, whole.
    Ere(PathBuf),
    /// Blocks `first..end` of the freezer at `dir` (the `ancient` folder or its `chain/`).
    Freezer { dir: PathBuf, first: u64, end: u64 },
}

#[derive(Debug, Clone)]
pub struct Options {
    pub cfg: ChainConfig,
    /// Check ethash proof of work of every pre-merge header.
    pub pow: bool,
    /// Rows are kept, and proof of work checked, for blocks `from..to` only (the other checks
    /// still cover the whole unit: an era1 file's accumulator needs all its blocks).
    pub from: u64,
    pub to: u64,
    /// Threads the unit's proof-of-work checks run on.
    pub pow_threads: usize,
    /// The EIP-7643 list era1 accumulators are compared with (mainnet), if any.
    pub list: Option<&'static HistoricalRoots>,
}

/// A unit's result.
pub struct Unit {
    /// The five tables' batches, in [`tables::TABLES`] order.
    pub batches: Vec<RecordBatch>,
    pub violations: Vec<Violation>,
    /// First and one-past-last block of the rows kept, and how many (gaps are blocks that did
    /// not decode).
    pub first: Option<u64>,
    pub end: u64,
    pub blocks: u64,
    /// Raw header and TD of the first and last block kept, for the links between units.
    pub first_header: Option<(Vec<u8>, Option<U256>)>,
    pub last_header: Option<(Vec<u8>, Option<U256>)>,
    /// The source holds no TD (a freezer without `diffs`): `total_difficulty` holds the sum of
    /// difficulties from the unit's first block, to be rebased on its parent's TD.
    pub td_relative: bool,
    /// era1, Ere with pre-merge blocks: the accumulator recomputed.
    pub accumulator: Option<B256>,
    pub transactions: u64,
    pub pow_checked: u64,
    /// Ere: block proofs read, and those checked against an accumulator root.
    pub proofs: u64,
    pub proofs_checked: u64,
    pub unrecovered_senders: u64,
    /// Bytes of the source read.
    pub bytes: u64,
}

/// The ethash caches of the last epochs verified in this process (one era1 file spans at most
/// two epochs; a cache of a recent epoch is ~100 MiB, so only a few are kept). Each is
/// generated once, outside the list's lock: a thread checking one epoch never waits for
/// another epoch's cache to be generated.
type EpochCache = Arc<OnceLock<Arc<Cache>>>;
static CACHES: Mutex<Vec<(u64, EpochCache)>> = Mutex::new(Vec::new());
const CACHES_KEPT: usize = 2;

fn cache_for(epoch: u64) -> Arc<Cache> {
    let slot = {
        let mut caches = CACHES.lock().unwrap_or_else(|e| e.into_inner());
        match caches.iter().find(|(e, _)| *e == epoch) {
            Some((_, slot)) => slot.clone(),
            None => {
                let slot = EpochCache::default();
                caches.push((epoch, slot.clone()));
                if caches.len() > CACHES_KEPT {
                    caches.remove(0);
                }
                slot
            }
        }
    };
    // Threads asking for the same epoch wait for its one generation.
    slot.get_or_init(|| Arc::new(Cache::new(epoch))).clone()
}

/// Reads, checks and converts one unit. `Err` only when the source cannot be opened at all
/// (an era1 file whose layout is broken, a freezer that is not one); anything wrong inside is a
/// violation and the blocks around it are kept.
pub fn run(source: &Source, opts: &Options) -> Result<Unit, Error> {
    let (label, bytes) = match source {
        Source::Era1(p) | Source::Ere(p) => (
            p.file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
            std::fs::metadata(p).map(|m| m.len()).unwrap_or(0),
        ),
        Source::Freezer { .. } => ("freezer".to_string(), 0),
    };
    let expected = match source {
        Source::Era1(_) | Source::Ere(_) => super::era1::MAX_BLOCKS,
        Source::Freezer { first, end, .. } => end.saturating_sub(*first),
    };
    let mut rows = Rows::with_capacity(label.clone(), expected as usize);
    let mut first_header = None;
    let mut last_header = None;
    let (mut first, mut end, mut blocks) = (None, 0, 0u64);
    let mut sealed: Vec<(Vec<u8>, DecodedHeader)> = Vec::new();
    let mut td_relative = false;
    let mut relative_td = U256::ZERO;
    let mut sink = |b: &Checked<'_>, _: &mut Vec<Violation>| {
        let h = &b.header.header;
        let n = h.number;
        if n < opts.from || n >= opts.to {
            return;
        }
        // Genesis carries no seal.
        if opts.pow && n > 0 && !h.difficulty.is_zero() {
            sealed.push((b.raw_header.to_vec(), b.header.clone()));
        }
        let td = match b.td {
            Some(td) => Some(td),
            None => {
                td_relative = true;
                relative_td = relative_td.saturating_add(h.difficulty);
                Some(relative_td)
            }
        };
        rows.push(
            b.header,
            b.body,
            b.body_payload_len,
            b.receipts,
            td,
            b.offset,
        );
        if first.is_none() {
            first = Some(n);
            first_header = Some((b.raw_header.to_vec(), td));
        }
        last_header = Some((b.raw_header.to_vec(), td));
        end = n + 1;
        blocks += 1;
    };
    let mut proofs = (0, 0);
    let (violations, accumulator, transactions) = match source {
        Source::Era1(path) => {
            let era = Era1::open(path)?;
            let r = verify_era1_into(&era, &opts.cfg, Some(&label), opts.list, &mut sink);
            (r.violations, Some(r.accumulator), r.transactions)
        }
        Source::Ere(path) => {
            let ere = Ere::open(path)?;
            let r = verify_ere_into(&ere, &opts.cfg, Some(&label), opts.list, &mut sink);
            proofs = (r.proofs, r.proofs_checked);
            (r.violations, r.accumulator, r.transactions)
        }
        Source::Freezer { dir, first, end } => {
            let f = Freezer::open(dir)?;
            let r = verify_freezer_into(&f, &opts.cfg, *first, *end, &mut sink);
            (r.violations, None, r.transactions)
        }
    };
    let mut violations = violations;
    let pow_checked = sealed.len() as u64;
    violations.extend(check_seals(&sealed, opts.pow_threads));
    let unrecovered_senders = rows.unrecovered_senders;
    let batches = rows.finish(&violations).map_err(|e| {
        Error::new(super::ErrorKind::Layout(format!(
            "{label}: building rows: {e}"
        )))
    })?;
    Ok(Unit {
        batches,
        violations,
        first,
        end,
        blocks,
        first_header,
        last_header,
        td_relative,
        accumulator,
        transactions,
        pow_checked,
        proofs: proofs.0,
        proofs_checked: proofs.1,
        unrecovered_senders,
        bytes,
    })
}

/// Headers a proof-of-work thread takes at a time.
const SEAL_CHUNK: usize = 32;

/// Ethash proof of work of `sealed` headers on `threads` threads; violations in block order.
/// Threads take chunks of headers in turn, so a thread that stops to generate a cache leaves
/// no fixed share behind it; and the second epoch's cache is generated at the start, beside
/// the checks of the first.
fn check_seals(sealed: &[(Vec<u8>, DecodedHeader)], threads: usize) -> Vec<Violation> {
    if sealed.is_empty() {
        return Vec::new();
    }
    let chunks = sealed.len().div_ceil(SEAL_CHUNK);
    let taken = AtomicUsize::new(0);
    let mut epochs: Vec<u64> = sealed
        .iter()
        .map(|(_, h)| ethash::epoch_of(h.header.number))
        .collect();
    epochs.dedup();
    let mut found: Vec<(usize, Vec<Violation>)> = std::thread::scope(|scope| {
        // A unit of 8,192 blocks spans at most two epochs of 30,000.
        if let (true, Some(&second)) = (threads > 1, epochs.get(1)) {
            scope.spawn(move || cache_for(second));
        }
        let handles: Vec<_> = (0..threads.clamp(1, chunks))
            .map(|_| {
                let taken = &taken;
                scope.spawn(move || {
                    let mut found = Vec::new();
                    let mut cache: Option<(u64, Arc<Cache>)> = None;
                    loop {
                        let chunk = taken.fetch_add(1, Ordering::Relaxed);
                        if chunk >= chunks {
                            return found;
                        }
                        let mut v = Vec::new();
                        let headers = sealed.iter().skip(chunk * SEAL_CHUNK).take(SEAL_CHUNK);
                        for (raw, header) in headers {
                            let epoch = ethash::epoch_of(header.header.number);
                            if cache.as_ref().is_none_or(|(e, _)| *e != epoch) {
                                cache = Some((epoch, cache_for(epoch)));
                            }
                            let (_, epoch_cache) = cache.as_ref().expect("set above");
                            v.extend(check_pow(epoch_cache, raw, header));
                        }
                        if !v.is_empty() {
                            found.push((chunk, v));
                        }
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a proof-of-work thread panicked"))
            .collect()
    });
    found.sort_by_key(|(chunk, _)| *chunk);
    found.into_iter().flat_map(|(_, v)| v).collect()
}

/// The checks between the last block of one unit and the first of the next: [`check_header`]
/// and, when both TDs are known, [`check_total_difficulty`].
pub fn link_violations(
    cfg: &ChainConfig,
    parent: &[u8],
    parent_td: Option<U256>,
    child: &[u8],
    child_td: Option<U256>,
) -> Vec<Violation> {
    let (p, c) = match (decode_header(parent), decode_header(child)) {
        (Ok(p), Ok(c)) => (p, c),
        (Err(e), _) | (_, Err(e)) => {
            return vec![Violation {
                block: 0,
                rule: Rule::Decode,
                detail: e.to_string(),
            }]
        }
    };
    let mut v = check_header(cfg, &c, &p);
    if let (Some(ptd), Some(td)) = (parent_td, child_td) {
        v.extend(check_total_difficulty(&c, ptd, td));
    }
    v
}

/// An error in rows handed in (their message as it is).
fn rows_error(e: impl std::fmt::Display) -> Error {
    Error::new(super::ErrorKind::Rows(e.to_string()))
}

/// `eth_blocks` with `total_difficulty` rebased: each relative value plus `base` (the TD of the
/// unit's parent).
pub fn rebase_total_difficulty(blocks: &RecordBatch, base: U256) -> super::Result<RecordBatch> {
    let schema = blocks.schema();
    let i = schema.index_of("total_difficulty").map_err(rows_error)?;
    let col = blocks
        .column(i)
        .as_any()
        .downcast_ref::<Decimal128Array>()
        .ok_or_else(|| rows_error("total_difficulty is not a decimal column"))?;
    let rebased: Decimal128Array = col
        .iter()
        .map(|v| {
            let v = U256::from(u128::try_from(v?).ok()?);
            let sum = u128::try_from(v.checked_add(base)?).ok()?;
            (sum < 10u128.pow(38)).then_some(sum as i128)
        })
        .collect::<Decimal128Array>()
        .with_data_type(col.data_type().clone());
    let mut cols: Vec<ArrayRef> = blocks.columns().to_vec();
    cols[i] = Arc::new(rebased);
    RecordBatch::try_new(schema, cols).map_err(rows_error)
}

/// Key of `eth_canonical` and `eth_td`: the block number, big-endian (keys sort by number).
pub fn number_key(n: u64) -> [u8; 8] {
    n.to_be_bytes()
}

/// RocksDB entries of the blocks in an `eth_blocks` batch, each (keys, values) in key order
/// (ready for an SST file): `eth_numbers` (hash → number, 8 bytes big-endian), `eth_canonical`
/// (number → hash) and `eth_td` (number → TD, 32 bytes big-endian; blocks whose TD is unknown
/// have none).
pub struct IndexEntries {
    pub numbers: (BinaryArray, BinaryArray),
    pub canonical: (BinaryArray, BinaryArray),
    pub td: (BinaryArray, BinaryArray),
}

/// A block hash from its `0x` hex column value.
fn parse_hash(s: &str) -> Option<[u8; 32]> {
    hex::decode_to_array(s.strip_prefix("0x")?).ok()
}

fn binary<'a>(items: impl Iterator<Item = &'a [u8]>) -> BinaryArray {
    BinaryArray::from_iter_values(items)
}

/// One block's (number key, hash, TD) while the index is built.
type Entry = ([u8; 8], [u8; 32], Option<[u8; 32]>);

pub fn index_entries(blocks: &RecordBatch) -> super::Result<IndexEntries> {
    let col = |name: &str| {
        blocks
            .column_by_name(name)
            .ok_or_else(|| rows_error(format!("eth_blocks has no {name}")))
    };
    let numbers = col("number")?
        .as_any()
        .downcast_ref::<UInt64Array>()
        .ok_or_else(|| rows_error("number is not u64"))?;
    let hashes = col("hash")?
        .as_any()
        .downcast_ref::<StringArray>()
        .ok_or_else(|| rows_error("hash is not a string"))?;
    let tds = col("total_difficulty")?
        .as_any()
        .downcast_ref::<Decimal128Array>()
        .ok_or_else(|| rows_error("total_difficulty is not a decimal"))?;
    let mut by_number: Vec<Entry> = (0..blocks.num_rows())
        .map(|i| {
            let hash = parse_hash(hashes.value(i)).ok_or_else(|| rows_error("bad hash hex"))?;
            let td = tds
                .is_valid(i)
                .then(|| U256::from(tds.value(i) as u128).to_be_bytes::<32>());
            Ok((number_key(numbers.value(i)), hash, td))
        })
        .collect::<super::Result<_>>()?;
    by_number.sort_by_key(|e| e.0);
    let mut by_hash: Vec<(&[u8], &[u8])> =
        by_number.iter().map(|(n, h, _)| (&h[..], &n[..])).collect();
    by_hash.sort();
    let with_td: Vec<(&[u8], &[u8])> = by_number
        .iter()
        .filter_map(|(n, _, td)| td.as_ref().map(|t| (&n[..], &t[..])))
        .collect();
    Ok(IndexEntries {
        numbers: (
            binary(by_hash.iter().map(|e| e.0)),
            binary(by_hash.iter().map(|e| e.1)),
        ),
        canonical: (
            binary(by_number.iter().map(|e| &e.0[..])),
            binary(by_number.iter().map(|e| &e.1[..])),
        ),
        td: (
            binary(with_td.iter().map(|e| e.0)),
            binary(with_td.iter().map(|e| e.1)),
        ),
    })
}

/// The first and one-past-last block numbers an era1 file holds, and its accumulator, from its
/// layout alone (for planning).
pub fn era1_extent(path: &Path) -> Result<(u64, u64, B256), Error> {
    let era = Era1::open(path)?;
    Ok((era.start(), era.end(), era.accumulator()))
}

/// The least an import of an archive must do: open it and check its layout, decompress every
/// header and hash it. Returns the number of headers and the last hash (benchmarks measure the
/// import against this floor).
fn header_hashes(
    first: u64,
    end: u64,
    header: impl Fn(u64) -> Result<Vec<u8>, Error>,
) -> Result<(u64, B256), Error> {
    let headers = (first..end)
        .map(header)
        .collect::<Result<Vec<_>, Error>>()?;
    let raws: Vec<&[u8]> = headers.iter().map(Vec::as_slice).collect();
    let mut hasher = KeccakBatch::default();
    let last = hasher
        .hash(&raws)
        .last()
        .map_or(B256::ZERO, |h| B256::from(*h));
    Ok((end - first, last))
}

/// [`header_hashes`] of an era1 file.
pub fn era1_header_hashes(path: &Path) -> Result<(u64, B256), Error> {
    let era = Era1::open(path)?;
    header_hashes(era.start(), era.end(), |n| era.header(n))
}

/// The first and one-past-last block numbers an Ere file holds, from its index.
pub fn ere_extent(path: &Path) -> Result<(u64, u64), Error> {
    let ere = Ere::open(path)?;
    Ok((ere.start(), ere.end()))
}

/// [`header_hashes`] of an Ere file (its index and layout read first).
pub fn ere_header_hashes(path: &Path) -> Result<(u64, B256), Error> {
    let ere = Ere::open(path)?;
    header_hashes(ere.start(), ere.end(), |n| ere.header(n))
}

/// The accumulator list of `network`, where one is shipped (mainnet).
pub fn historical_roots(network: &str) -> Option<&'static HistoricalRoots> {
    (network == "mainnet").then(accumulator::mainnet)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eth::chain_config::MAINNET;

    fn data(rel: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/data/ethereum")
            .join(rel)
    }

    #[test]
    fn seals_checked_on_threads_report_in_block_order_across_two_epochs() {
        let era = Era1::open(data("era1/mainnet-00003-d8b8a40b.era1")).unwrap();
        // Blocks on both sides of the epoch boundary at 30,000; two seals broken, one in each
        // epoch (the nonce is the header's last 8 bytes).
        let sealed: Vec<(Vec<u8>, DecodedHeader)> = (29_950..30_050)
            .map(|n| {
                let mut raw = era.header(n).unwrap();
                if n == 29_960 || n == 30_040 {
                    let len = raw.len();
                    raw[len - 1] ^= 1;
                }
                let h = decode_header(&raw).unwrap();
                (raw, h)
            })
            .collect();
        let one = check_seals(&sealed, 1);
        let blocks: Vec<u64> = one.iter().map(|v| v.block).collect();
        assert_eq!(blocks, vec![29_960, 29_960, 30_040, 30_040]);
        for threads in [2, 3, 8] {
            assert_eq!(check_seals(&sealed, threads), one, "{threads} threads");
        }
    }

    #[test]
    fn sepolia_file_with_typed_transactions() {
        let path = data("era1/sepolia-00021-b8814b14.era1");
        if !path.exists() {
            return;
        }
        let cfg = ChainConfig::by_name("sepolia").unwrap();
        let opts = Options {
            cfg,
            pow: false,
            pow_threads: 1,
            from: 0,
            to: u64::MAX,
            list: None,
        };
        let u = run(&Source::Era1(path), &opts).unwrap();
        assert!(
            u.violations.is_empty(),
            "{:?}",
            &u.violations[..3.min(u.violations.len())]
        );
        assert_eq!(u.blocks, 8192);
        assert_eq!(u.first, Some(172_032));
        assert_eq!(u.transactions, 93);
        assert_eq!(u.batches[1].num_rows(), 93);
        assert_eq!(u.unrecovered_senders, 0);
        let idx = index_entries(&u.batches[0]).unwrap();
        assert_eq!(idx.canonical.0.len(), 8192);
        assert_eq!(
            crate::eth::tables::hex0x(idx.canonical.1.value(8191)),
            "0xaf105ff107f4d9b48bc205c3001ee33938b1b6f3b2ef04da0064ae63ecb1d80a"
        );
        assert_eq!(
            U256::from_be_slice(idx.td.1.value(8191)),
            U256::from(74_457_974_918_680u64)
        );
        let keys: Vec<&[u8]> = idx.numbers.0.iter().map(Option::unwrap).collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "hash keys sorted");
    }

    #[test]
    fn range_keeps_rows_inside_only() {
        let path = data("era1/mainnet-00003-d8b8a40b.era1");
        if !path.exists() {
            return;
        }
        let opts = Options {
            cfg: MAINNET,
            pow: false,
            pow_threads: 1,
            from: 25_000,
            to: 25_010,
            list: historical_roots("mainnet"),
        };
        let u = run(&Source::Era1(path), &opts).unwrap();
        assert!(u.violations.is_empty());
        assert_eq!((u.first, u.end, u.blocks), (Some(25_000), 25_010, 10));
        assert_eq!(u.batches[0].num_rows(), 10);
    }
}
