//! Fuzzing on the stable toolchain: every target runs its seed corpus and then mutated inputs.
//! By default a fixed RNG seed and a small budget (a few seconds in all, part of `cargo test`);
//! `FUZZ_SECONDS=N` runs each target for N seconds with a fresh seed (`make fuzz` without
//! nightly). Inputs that once failed live in `fuzz/regressions/<target>/` and replay here.

mod fuzz_support;

use fuzz_support::{fuzz, regressions, targets, Budget};
use std::time::Duration;

fn budget(default_execs: u64) -> (Budget, u64) {
    match std::env::var("FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
    {
        Some(secs) => {
            let seed = std::env::var("FUZZ_RNG_SEED")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| {
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .unwrap()
                        .as_nanos() as u64
                });
            let b = Budget {
                max_execs: u64::MAX,
                max_time: Duration::from_secs_f64(secs),
            };
            (b, seed)
        }
        None => {
            let b = Budget {
                max_execs: default_execs,
                max_time: Duration::from_secs(6),
            };
            (b, 0x5eed)
        }
    }
}

fn run(target: &'static str, default_execs: u64) {
    let (b, seed) = budget(default_execs);
    let r = fuzz(target, &b, seed);
    eprintln!(
        "fuzz {:<13} {:>9} execs {:>8.1} s {:>10.0} execs/s  seeds {:>3}  slowest {:.1} ms  \
         rng seed {}  crashes 0",
        r.target,
        r.execs,
        r.seconds,
        r.execs as f64 / r.seconds.max(1e-9),
        r.seeds,
        r.slowest_ms,
        r.rng_seed
    );
    assert!(
        r.execs >= r.seeds as u64,
        "the seed corpus did not run in full"
    );
}

#[test]
fn fuzz_blk_scan() {
    run("blk_scan", 1500);
}

#[test]
fn fuzz_block_decode() {
    run("block_decode", 5000);
}

#[test]
fn fuzz_wal_segment() {
    run("wal_segment", 20_000);
}

#[test]
fn fuzz_wal_record() {
    run("wal_record", 20_000);
}

#[test]
fn fuzz_checkpoint_read() {
    // The seeds are real checkpoints: each loads, so mutations start from the decoder's paths.
    for seed in fuzz_support::seeds("checkpoint_read") {
        assert!(
            targets::checkpoint_input_loads(&seed),
            "a seed checkpoint does not load"
        );
    }
    run("checkpoint_read", 600);
}

#[test]
fn fuzz_checkpoint_stream() {
    // Each single-trie seed streams, so mutations start from the streamed read's paths.
    let seeds = fuzz_support::checkpoint_stream_seeds();
    let streamed = seeds
        .iter()
        .filter(|s| targets::checkpoint_input_streams(s))
        .count();
    assert_eq!(
        streamed,
        seeds.len() - 1,
        "a single-trie seed does not stream"
    );
    run("checkpoint_stream", 300);
}

#[test]
fn fuzz_chain_state() {
    // Each seed is compared in full: it frames and applies past its first spends (the
    // double-spending ones then stop at the repeated spend), as one chunk and as two.
    let seeds = fuzz_support::chain_state_seeds();
    let applied: Vec<Option<u32>> = seeds
        .iter()
        .map(|s| targets::chain_state_compared(s))
        .collect();
    assert!(
        applied.iter().all(|b| b.is_some_and(|b| b > 100)),
        "a seed chain does not apply: {applied:?}"
    );
    assert!(
        applied.iter().any(|b| b.is_some_and(|b| b < 106)),
        "no seed stops at a double spend: {applied:?}"
    );
    run("chain_state", 300);
}

/// Every saved crash input passes its target now.
#[test]
fn fuzz_regressions_pass() {
    for t in targets::TARGETS {
        for (name, input) in regressions(t) {
            let r = std::panic::catch_unwind(|| targets::run(t, &input));
            assert!(r.is_ok(), "regression {t}/{name} fails again");
        }
    }
}

/// `FUZZ_CORPUS_DIR=dir cargo test --test fuzz write_seed_corpus -- --ignored` writes the seed
/// corpora for cargo-fuzz.
#[test]
#[ignore]
fn write_seed_corpus() {
    let dir = std::env::var("FUZZ_CORPUS_DIR").expect("FUZZ_CORPUS_DIR");
    fuzz_support::write_corpus(std::path::Path::new(&dir));
}
