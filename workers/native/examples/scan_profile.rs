//! Times the scanner and the Arrow build separately on one blk file, next to the sha256d limit
//! (`hash_headers_seconds`, the benchmark's reference) measured in the same run:
//! `cargo run --release --example scan_profile -- FILE NETWORK [XORHEX]`.

use rechain_native::btc::network::Network;
use rechain_native::btc::scan::{ScanConfig, Scanner};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: scan_profile FILE NETWORK [XORHEX]");
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
    let t = Instant::now();
    let mut scanner = Scanner::open(&cfg, path).unwrap();
    let shard = scanner.scan(0, u64::MAX).unwrap();
    let scan_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let batch = rechain_native::datasets::btc_records::build(0, shard.records);
    let build_s = t.elapsed().as_secs_f64();
    let n = batch.num_rows() as f64;
    let limit_ns = rechain_native::btc::header::hash_headers_seconds(1_000_000) * 1e3;
    println!(
        "records {n} scan {scan_s:.3}s ({:.0} ns/rec) arrow {build_s:.3}s ({:.0} ns/rec) \
         sha256d limit {limit_ns:.0} ns/header, ratio {:.3}",
        scan_s / n * 1e9,
        build_s / n * 1e9,
        limit_ns / ((scan_s + build_s) / n * 1e9)
    );
}
