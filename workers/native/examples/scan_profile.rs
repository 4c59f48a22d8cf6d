//! Times the scanner and the Arrow build separately on one blk file, next to the sha256d limit
//! (`hash_headers_seconds`, the benchmark's reference) measured in the same run:
//! `cargo run --release --example scan_profile -- FILE NETWORK [XORHEX [REPS]]`.

use rechain_native::btc::network::Network;
use rechain_native::btc::scan::{ScanConfig, Scanner};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: scan_profile FILE NETWORK [XORHEX [REPS]]");
        std::process::exit(2);
    }
    let mut key = [0u8; 8];
    if let Some(hex) = args.get(3) {
        for (i, k) in key.iter_mut().enumerate() {
            *k = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
        }
    }
    let cfg = ScanConfig {
        network: Network::from_name(&args[2]).unwrap(),
        xor_key: key,
        check_bodies: false,
    };
    let path = std::path::Path::new(&args[1]);
    let reps: usize = args.get(4).map_or(1, |r| r.parse().unwrap());
    // Scan and limit alternate; the best of `reps` of each is reported (the machine is shared).
    let (mut best_scan, mut best_build, mut best_limit) = (f64::MAX, f64::MAX, f64::MAX);
    let mut n = 0.0;
    for _ in 0..reps {
        let t = Instant::now();
        let mut scanner = Scanner::open(&cfg, path).unwrap();
        let shard = scanner.scan(0, u64::MAX).unwrap();
        best_scan = best_scan.min(t.elapsed().as_secs_f64());
        let t = Instant::now();
        let batch = rechain_native::datasets::btc_records::build(0, shard.records);
        best_build = best_build.min(t.elapsed().as_secs_f64());
        n = batch.num_rows() as f64;
        drop(batch);
        let limit = rechain_native::btc::header::hash_headers_seconds(n as u64);
        best_limit = best_limit.min(limit / n * 1e9);
    }
    let (scan_ns, build_ns) = (best_scan / n * 1e9, best_build / n * 1e9);
    println!(
        "records {n} scan {scan_ns:.0} ns/rec, arrow {build_ns:.0} ns/rec, \
         sha256d limit {best_limit:.0} ns/header, ratio {:.3} (best of {reps})",
        best_limit / (scan_ns + build_ns)
    );
}
