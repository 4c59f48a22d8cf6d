//! Times Flow's compact-leaf hashing (the MTrie update's hot path) per back end, and a whole
//! WAL replay in Rust only (decode + forest updates), without Python, Ray or storage.
//!
//!     cargo run --profile ci --example flow_hash_profile            # hashing back ends
//!     cargo run --profile ci --example flow_hash_profile WAL_DIR    # replay
use rechain_native::flow::hash::{compact_value, compact_values_on, LeafJob, Path};
use rechain_native::flow::keccak::Backend;
use rechain_native::flow::mtrie::{Forest, DEFAULT_CAPACITY};
use rechain_native::flow::record::WalRecord;
use rechain_native::flow::wal::{list_segments, Segment};
use std::time::Instant;

fn main() {
    match std::env::args().nth(1) {
        Some(dir) => replay(&dir),
        None => hashing(),
    }
}

fn hashing() {
    let n = 4096usize;
    let paths: Vec<Path> = (0..n)
        .map(|i| {
            let mut p = [0u8; 32];
            p[..8].copy_from_slice(&(i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15).to_le_bytes());
            Path(p)
        })
        .collect();
    let value = vec![7u8; 100];
    let jobs: Vec<LeafJob> = paths
        .iter()
        .map(|p| LeafJob {
            path: p,
            value: &value,
            height: 240,
        })
        .collect();
    let t = Instant::now();
    let one: Vec<_> = jobs
        .iter()
        .map(|j| compact_value(j.path, j.value, j.height))
        .collect();
    let base = t.elapsed().as_secs_f64();
    let perms = (n * 240) as f64;
    println!(
        "one by one (keccak crate): {:.1} ns/permutation",
        base * 1e9 / perms
    );
    for b in Backend::available() {
        let t = Instant::now();
        let got = compact_values_on(b, &jobs);
        let s = t.elapsed().as_secs_f64();
        assert_eq!(got, one);
        println!(
            "{b:?}: {:.1} ns/permutation ({:.2}x)",
            s * 1e9 / perms,
            base / s
        );
    }
}

fn replay(dir: &str) {
    {
        for threads in [1, 2] {
            let t = Instant::now();
            let mut f = Forest::new(DEFAULT_CAPACITY, threads);
            let (mut updates, mut decode) = (0u64, 0.0);
            for (no, path) in list_segments(std::path::Path::new(&dir)).expect("segments") {
                let t0 = Instant::now();
                let seg = Segment::read(&path, no).expect("read");
                let dec = rechain_native::flow::decode_segment(&seg);
                decode += t0.elapsed().as_secs_f64();
                for (_, _, rec) in &dec.records {
                    if let WalRecord::Update(u) = rec {
                        f.update(u).expect("update");
                        updates += 1;
                    }
                }
            }
            let s = t.elapsed().as_secs_f64();
            println!(
                "replay, {threads} thread(s): {updates} updates in {s:.2} s ({:.0}/s), decode {decode:.2} s, root {}",
                updates as f64 / s,
                f.last_added().expect("trie").root_hash().to_hex()
            );
        }
    }
}
