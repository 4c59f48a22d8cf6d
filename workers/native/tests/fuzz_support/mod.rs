//! Stable-toolchain fuzzing: seed corpora built from real data, a structure-aware mutator and a
//! bounded loop that catches panics and keeps the failing input. `cargo fuzz` (nightly, with
//! coverage feedback) runs the same targets from `fuzz/`; this runs everywhere, including CI.

pub mod targets;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rechain_native::btc::network::Network;
use rechain_native::flow::gen::{generate, GenConfig};
use rechain_native::flow::hash::empty_root;
use rechain_native::flow::record::{encode_delete, encode_update, Payload, TrieUpdate};
use rechain_native::flow::wal::{crc32c, list_segments, Segment, PAGE_SIZE};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub fn native_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn shared_bitcoin() -> PathBuf {
    std::env::var_os("RECHAIN_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|| native_dir().join("../../../shared"))
        .join("data/bitcoin")
}

/// Inputs that once broke a target (`fuzz/regressions/<target>/`): replayed on every test run.
pub fn regressions(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = native_dir().join("fuzz/regressions").join(target);
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    (name, std::fs::read(e.path()).unwrap())
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

fn hex_key(s: &str) -> [u8; 8] {
    rechain_native::flow::from_hex(s)
        .unwrap()
        .try_into()
        .unwrap()
}

/// The damaged blk files of the shared corpus, each with the network and key the manifest
/// gives, in both body modes; plus the real blocks framed as one-record files.
fn scan_seeds() -> Vec<Vec<u8>> {
    let base = shared_bitcoin();
    let manifest: String = std::fs::read_to_string(base.join("corpus/manifest.json"))
        .expect("shared/data/bitcoin/corpus/manifest.json (set RECHAIN_SHARED)");
    let mut seeds = Vec::new();
    // A tiny manifest reader: each case has "file", "network" and "read_with_xor_key" in order.
    for case in manifest.split("\"file\": \"").skip(1) {
        let file = &case[..case.find('"').unwrap()];
        let net = field(case, "\"network\": \"").unwrap_or("regtest");
        let network = Network::from_name(net).unwrap_or(Network::Regtest);
        let key = field(case, "\"read_with_xor_key\": \"").map(hex_key);
        let bytes = std::fs::read(base.join("corpus").join(file)).unwrap();
        for check in [false, true] {
            seeds.push(targets::scan_input(network, key, check, &bytes));
        }
    }
    for (net, block) in real_blocks() {
        let mut file = net.magic().to_vec();
        file.extend_from_slice(&(block.len() as u32).to_le_bytes());
        file.extend_from_slice(&block);
        file.extend_from_slice(&[0u8; 100]);
        seeds.push(targets::scan_input(net, None, true, &file));
    }
    seeds
}

fn field<'a>(case: &'a str, prefix: &str) -> Option<&'a str> {
    let end_of_case = case.find("\"file\": \"").unwrap_or(case.len());
    let at = case[..end_of_case].find(prefix)? + prefix.len();
    let rest = &case[at..];
    Some(&rest[..rest.find('"')?])
}

fn real_blocks() -> Vec<(Network, Vec<u8>)> {
    let mut out: Vec<(String, Network, Vec<u8>)> = Vec::new();
    for e in std::fs::read_dir(shared_bitcoin())
        .unwrap()
        .filter_map(Result::ok)
    {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".raw") {
            let net = if name.starts_with("testnet") {
                Network::Testnet3
            } else {
                Network::Main
            };
            out.push((name, net, std::fs::read(e.path()).unwrap()));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out.into_iter().map(|(_, n, b)| (n, b)).collect()
}

/// Blocks: the real ones, and every record body found in the corpus files (damaged included).
fn block_seeds() -> Vec<Vec<u8>> {
    let mut seeds: Vec<Vec<u8>> = real_blocks().into_iter().map(|(_, b)| b).collect();
    // Small real-format blocks too, so mutations hit every field often: corpus records.
    for input in scan_seeds() {
        let file = &input[targets::SCAN_HEADER..];
        let key: [u8; 8] = if input[0] & 8 != 0 {
            input[1..9].try_into().unwrap()
        } else {
            [0; 8]
        };
        let plain: Vec<u8> = file
            .iter()
            .enumerate()
            .map(|(i, b)| b ^ key[i % 8])
            .collect();
        let mut at = 0;
        while at + 8 <= plain.len() && seeds.len() < 200 {
            let size = u32::from_le_bytes(plain[at + 4..at + 8].try_into().unwrap()) as usize;
            if !(80..=4_000_000).contains(&size) {
                break;
            }
            let end = (at + 8 + size).min(plain.len());
            if end - at < 200_000 {
                seeds.push(plain[at + 8..end].to_vec());
            }
            at = end;
        }
    }
    seeds.sort();
    seeds.dedup();
    seeds
}

/// Segments from the generator (the workload flow-go's writer reproduces byte for byte), cut
/// to the pages that hold records, plus one hand-made snappy-compressed record.
fn wal_seeds() -> Vec<Vec<u8>> {
    // Targets run on parallel test threads of one process: each call needs its own folder.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("rechain-fuzz-wal-{}-{call}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let cfg = GenConfig {
        updates: 120,
        registers_per_update: 5,
        seed: 7,
        segment_size: 4 * PAGE_SIZE,
    };
    generate(&cfg, &dir).expect("generate WAL seeds");
    let mut seeds: Vec<Vec<u8>> = list_segments(&dir)
        .unwrap()
        .into_iter()
        .map(|(_, p)| trim_zero_pages(std::fs::read(p).unwrap()))
        .collect();
    std::fs::remove_dir_all(&dir).unwrap();
    seeds.push(snappy_segment(&encode_delete(&empty_root())));
    seeds
}

fn trim_zero_pages(mut b: Vec<u8>) -> Vec<u8> {
    let used = b.iter().rposition(|&x| x != 0).map_or(0, |i| i + 1);
    b.truncate(used);
    b
}

/// One Full fragment whose payload is a literal-only snappy block of `record`.
pub fn snappy_segment(record: &[u8]) -> Vec<u8> {
    let mut block = Vec::new();
    let mut n = record.len();
    while n >= 0x80 {
        block.push((n as u8) | 0x80);
        n >>= 7;
    }
    block.push(n as u8);
    for chunk in record.chunks(60) {
        block.push(((chunk.len() - 1) as u8) << 2);
        block.extend_from_slice(chunk);
    }
    let mut seg = vec![1 | 8];
    seg.extend_from_slice(&(block.len() as u16).to_be_bytes());
    seg.extend_from_slice(&crc32c(&block).to_be_bytes());
    seg.extend_from_slice(&block);
    seg
}

fn record_seeds() -> Vec<Vec<u8>> {
    let mut seeds = Vec::new();
    for seg in wal_seeds() {
        let seg = Segment::from_bytes(0, seg);
        let mut r = seg.reader();
        while let Ok(Some(rec)) = r.next_record() {
            if seeds.len() < 60 {
                seeds.push(rec.data.into_owned());
            }
        }
    }
    let small = TrieUpdate {
        root: empty_root(),
        paths: vec![rechain_native::flow::hash::Path([7; 32])],
        payloads: vec![Arc::new(Payload::from_parts(
            &[(0, b"own"), (2, b"k")],
            b"v",
        ))],
    };
    seeds.push(encode_update(&small));
    seeds.push(encode_delete(&empty_root()));
    seeds
}

/// Checkpoints of small forests (an empty trie; chains of updates with overwrites and
/// deletions, several tries sharing nodes) written by rechain's flow-go-identical writer.
/// `chain_state` seeds: generated regtest chains (signed spends of real, mature coins from
/// height 101 on, some segwit, some OP_RETURN), cut in a few places.
pub fn chain_state_seeds() -> Vec<Vec<u8>> {
    use rechain_native::btc::gen::{generate, GenConfig};
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut seeds = Vec::new();
    for (seed, blocks, txs) in [(1u64, 106u64, 3usize), (2, 115, 6)] {
        let dir = std::env::temp_dir().join(format!(
            "rechain-fuzz-chain-{}-{call}-{seed}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let cfg = GenConfig {
            network: Network::Regtest,
            blocks,
            seed,
            file_size: 1 << 30,
            xor: false,
            shuffle_window: 0,
            side_branches: 0,
            orphans: 0,
            tx_min: 1,
            tx_max: txs,
            reorg_depth: 0,
            reorg_back: false,
            bad_signature_height: 0,
            bad_signature_branch: false,
            all_script_kinds: false,
            bad_signature_kind: None,
        };
        generate(&cfg, &dir).expect("generate a seed chain");
        let file = std::fs::read(dir.join("blk00000.dat")).expect("the generated blk file");
        std::fs::remove_dir_all(&dir).unwrap();
        let mut chain = Vec::new();
        let mut at = 0;
        while at + 8 <= file.len() {
            let size = u32::from_le_bytes(file[at + 4..at + 8].try_into().unwrap()) as usize;
            if size == 0 {
                break;
            }
            chain.push(file[at + 8..at + 8 + size].to_vec());
            at += 8 + size;
        }
        assert_eq!(
            chain.len() as u64,
            blocks,
            "genesis, then every block in height order"
        );
        for split in [0u16, 50, 100, 102] {
            seeds.push(targets::chain_state_input(split, &chain));
        }
        // Near the rules: a spend repeated in its own block and three blocks later (a double
        // spend, in one chunk or across the cut), each block's transactions otherwise intact.
        let h = (101..chain.len() - 3)
            .find(|&h| block_txs(&chain[h]).len() >= 2)
            .expect("a block with a spend");
        let spend = block_txs(&chain[h])[1].clone();
        for (at, split) in [(h, 0u16), (h + 3, (h - 1) as u16), (h + 3, (h + 1) as u16)] {
            let mut twice = chain.clone();
            twice[at] = with_tx(&twice[at], &spend);
            seeds.push(targets::chain_state_input(split, &twice));
        }
    }
    seeds
}

/// A block's transactions, as bytes.
fn block_txs(block: &[u8]) -> Vec<Vec<u8>> {
    use rechain_native::btc::block::{parse_tx, BodyMode};
    use rechain_native::btc::encode::Cursor;
    let mut c = Cursor::new(block);
    c.skip(80).unwrap();
    let n = c.compact_size().unwrap();
    (0..n)
        .map(|_| {
            let start = c.pos();
            parse_tx(&mut c, block, BodyMode::FrameOnly).unwrap();
            block[start..c.pos()].to_vec()
        })
        .collect()
}

/// `block` with `tx` appended (fewer than 252 transactions: a one-byte count).
fn with_tx(block: &[u8], tx: &[u8]) -> Vec<u8> {
    let txs = block_txs(block);
    assert!(txs.len() < 0xfc);
    let mut out = block[..80].to_vec();
    out.push(txs.len() as u8 + 1);
    for t in txs.iter().chain([&tx.to_vec()]) {
        out.extend_from_slice(t);
    }
    out
}

/// `checkpoint_read` seeds: the seed forests' checkpoints (every trie of each), and flow-go's
/// single-file checkpoints (versions 1, 3, 4 and 5).
fn checkpoint_seeds() -> Vec<Vec<u8>> {
    let mut seeds = Vec::new();
    for tries in seed_forests() {
        let files = checkpoint_files(&tries);
        for (fix, trust) in [(true, false), (true, true), (false, false)] {
            seeds.push(targets::checkpoint_input(&files, fix, trust));
        }
    }
    let legacy = native_dir().join("../../tests/data/flow_checkpoints");
    for v in [1, 3, 4, 5] {
        let file = std::fs::read(legacy.join(format!("checkpoint.v{v}"))).expect("legacy file");
        for (fix, trust) in [(true, false), (true, true)] {
            seeds.push(targets::checkpoint_input(
                std::slice::from_ref(&file),
                fix,
                trust,
            ));
        }
    }
    seeds
}

/// `checkpoint_stream` seeds: the last trie of each seed forest alone (what a streamed read
/// takes), and every trie of the largest (which only the in-memory load reads).
pub fn checkpoint_stream_seeds() -> Vec<Vec<u8>> {
    let forests = seed_forests();
    let mut seeds = Vec::new();
    for tries in &forests {
        let files = checkpoint_files(&tries[tries.len() - 1..]);
        for (fix, trust) in [(true, false), (true, true), (false, false)] {
            seeds.push(targets::checkpoint_input(&files, fix, trust));
        }
    }
    let all = forests.last().expect("seed forests");
    seeds.push(targets::checkpoint_input(
        &checkpoint_files(all),
        true,
        false,
    ));
    seeds
}

/// `tries` written as a checkpoint by the v6 writer: the main file, then its 17 parts.
fn checkpoint_files(tries: &[rechain_native::flow::mtrie::Trie]) -> Vec<Vec<u8>> {
    use rechain_native::flow::checkpoint::{checkpoint_name, part_name, write_tries};
    // Targets build their seeds on parallel test threads of one process: a folder per call.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("rechain-cp-seed-{}-{call}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let name = checkpoint_name(1);
    write_tries(tries, &dir, &name, 1).expect("write seed checkpoint");
    let mut files = vec![std::fs::read(dir.join(&name)).unwrap()];
    for i in 0..targets::CHECKPOINT_FILES - 1 {
        files.push(std::fs::read(dir.join(part_name(&name, i))).unwrap());
    }
    std::fs::remove_dir_all(&dir).unwrap();
    files
}

/// Small forests grown by random updates (the empty trie first, then each update's trie).
fn seed_forests() -> Vec<Vec<rechain_native::flow::mtrie::Trie>> {
    use rechain_native::flow::hash::Path as TriePath;
    use rechain_native::flow::mtrie::{Forest, Trie};
    let mut forests = Vec::new();
    let mut rng = SmallRng::seed_from_u64(6);
    for (updates, per) in [(0usize, 0usize), (1, 1), (2, 3), (4, 12), (6, 40)] {
        let mut forest = Forest::new(16, 1);
        let mut root = empty_root();
        let mut tries = vec![Trie::empty()];
        let mut known: Vec<TriePath> = Vec::new();
        for _ in 0..updates {
            let mut paths = Vec::new();
            let mut payloads = Vec::new();
            for _ in 0..per {
                // A third of the writes hit an existing path, some of them deleting it.
                let path = if !known.is_empty() && rng.gen_range(0..3) == 0 {
                    known[rng.gen_range(0..known.len())]
                } else {
                    let p = TriePath(rng.gen());
                    known.push(p);
                    p
                };
                let value: Vec<u8> = if rng.gen_range(0..6) == 0 {
                    Vec::new()
                } else {
                    (0..rng.gen_range(1..24)).map(|_| rng.gen()).collect()
                };
                paths.push(path);
                payloads.push(Arc::new(Payload::from_parts(
                    &[(0, b"owner"), (2, b"key")],
                    &value,
                )));
            }
            let u = TrieUpdate {
                root,
                paths,
                payloads,
            };
            root = forest.update(&u).expect("seed update applies").root;
            tries.push(forest.get(&root).expect("new root").clone());
        }
        forests.push(tries);
    }
    forests
}

pub fn seeds(target: &str) -> Vec<Vec<u8>> {
    let mut s = match target {
        "blk_scan" => scan_seeds(),
        "block_decode" => block_seeds(),
        "wal_segment" => wal_seeds(),
        "wal_record" => record_seeds(),
        "checkpoint_read" => checkpoint_seeds(),
        "checkpoint_stream" => checkpoint_stream_seeds(),
        "chain_state" => chain_state_seeds(),
        other => panic!("unknown fuzz target {other}"),
    };
    s.extend(regressions(target).into_iter().map(|(_, b)| b));
    s
}

/// Writes each target's seeds into `dir/<target>/` (the cargo-fuzz corpus).
pub fn write_corpus(dir: &Path) {
    for t in targets::TARGETS {
        let d = dir.join(t);
        std::fs::create_dir_all(&d).unwrap();
        for (i, s) in seeds(t).iter().enumerate() {
            std::fs::write(d.join(format!("seed-{i:04}")), s).unwrap();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// mutation

const INTERESTING_U32: [u32; 12] = [
    0,
    1,
    0x7f,
    0x80,
    0xfd,
    0xff,
    0xffff,
    32_761,
    32_762,
    4_000_000,
    4_000_001,
    u32::MAX,
];

/// Applies 1-4 random edits: bit flips, byte sets, interesting integers (LE and BE), inserts,
/// deletes, duplicated ranges, splices from another seed, truncation. `keep` leading bytes
/// (a target's control header) are only bit-flipped.
pub fn mutate(rng: &mut SmallRng, input: &mut Vec<u8>, pool: &[Vec<u8>], max_len: usize) {
    for _ in 0..rng.gen_range(1..=4) {
        let len = input.len();
        match rng.gen_range(0..10) {
            0 if len > 0 => {
                let i = rng.gen_range(0..len);
                input[i] ^= 1 << rng.gen_range(0..8);
            }
            1 if len > 0 => {
                let i = rng.gen_range(0..len);
                input[i] = rng.gen();
            }
            2 | 3 if len >= 4 => {
                let v = INTERESTING_U32[rng.gen_range(0..INTERESTING_U32.len())];
                let width = [1usize, 2, 4][rng.gen_range(0..3)];
                let bytes = if rng.gen() {
                    v.to_le_bytes()
                } else {
                    v.to_be_bytes()
                };
                let i = rng.gen_range(0..=len - width);
                let src = if bytes[0] == 0 && width < 4 {
                    &bytes[4 - width..]
                } else {
                    &bytes[..width]
                };
                input[i..i + width].copy_from_slice(src);
            }
            4 if len < max_len => {
                let i = rng.gen_range(0..=len);
                let n = rng.gen_range(1..=16).min(max_len - len);
                let fill: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
                input.splice(i..i, fill);
            }
            5 if len > 1 => {
                let i = rng.gen_range(0..len);
                let n = rng.gen_range(1..=(len - i).min(64));
                input.drain(i..i + n);
            }
            6 if len > 1 && len < max_len => {
                let i = rng.gen_range(0..len);
                let n = rng.gen_range(1..=(len - i).min(256)).min(max_len - len);
                let chunk = input[i..i + n].to_vec();
                let at = rng.gen_range(0..=len);
                input.splice(at..at, chunk);
            }
            7 if !pool.is_empty() => {
                let other = &pool[rng.gen_range(0..pool.len())];
                if !other.is_empty() && len > 0 {
                    let a = rng.gen_range(0..other.len());
                    let n = rng.gen_range(1..=(other.len() - a).min(512));
                    let at = rng.gen_range(0..len);
                    let end = (at + n).min(len);
                    input.splice(at..end, other[a..a + n].iter().copied());
                    input.truncate(max_len);
                }
            }
            8 if len > 0 => {
                let n = rng.gen_range(0..len);
                input.truncate(n.max(len.saturating_sub(rng.gen_range(1..=64))));
            }
            _ if len > 0 => {
                // A run of zeros or 0xff (preallocated tails, page padding, huge lengths).
                let i = rng.gen_range(0..len);
                let n = rng.gen_range(1..=(len - i).min(128));
                let b = if rng.gen() { 0 } else { 0xff };
                input[i..i + n].fill(b);
            }
            _ => input.push(rng.gen()),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// the loop

pub struct Budget {
    pub max_execs: u64,
    pub max_time: Duration,
}

#[derive(Debug)]
pub struct Report {
    pub target: &'static str,
    pub execs: u64,
    pub seconds: f64,
    pub seeds: usize,
    pub rng_seed: u64,
    pub slowest_ms: f64,
}

/// Runs every seed as is, then mutated copies until the budget is spent. A panic saves the
/// input under `target/fuzz-crashes/` and fails with the invariant it broke.
pub fn fuzz(target: &'static str, budget: &Budget, rng_seed: u64) -> Report {
    let pool = seeds(target);
    assert!(!pool.is_empty(), "no seeds for {target}");
    let max_len = pool.iter().map(Vec::len).max().unwrap() + 4096;
    let mut rng = SmallRng::seed_from_u64(rng_seed);
    let t0 = Instant::now();
    let mut execs = 0u64;
    let mut slowest = Duration::ZERO;
    let prev_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let mut outcome = Ok(());
    let mut i = 0usize;
    while execs < budget.max_execs && (execs < pool.len() as u64 || t0.elapsed() < budget.max_time)
    {
        let input = if i < pool.len() {
            pool[i].clone()
        } else {
            let mut m = pool[rng.gen_range(0..pool.len())].clone();
            mutate(&mut rng, &mut m, &pool, max_len);
            m
        };
        i += 1;
        let t = Instant::now();
        let r = catch_unwind(AssertUnwindSafe(|| targets::run(target, &input)));
        slowest = slowest.max(t.elapsed());
        execs += 1;
        if let Err(p) = r {
            outcome = Err((input, panic_text(&p)));
            break;
        }
    }
    std::panic::set_hook(prev_hook);
    if let Err((input, msg)) = outcome {
        let dir = native_dir().join("target/fuzz-crashes");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{target}-{:016x}", fnv(&input)));
        std::fs::write(&path, &input).unwrap();
        panic!(
            "{target}: input {} breaks it after {execs} executions (rng seed {rng_seed}): {msg}",
            path.display()
        );
    }
    Report {
        target,
        execs,
        seconds: t0.elapsed().as_secs_f64(),
        seeds: pool.len(),
        rng_seed,
        slowest_ms: slowest.as_secs_f64() * 1e3,
    }
}

fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "non-string panic".into())
}

fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x100_0000_01b3)
    })
}
