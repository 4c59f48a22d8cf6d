//! Profiling aid: full-decodes every record of one blk file (no XOR) N times.
//! `cargo run --profile ci --example decode_profile -- FILE [N]`

use rechain_native::btc::decode::decode_file_records;
use rechain_native::btc::network::Network;

fn main() {
    let mut args = std::env::args().skip(1);
    let path = std::path::PathBuf::from(args.next().expect("blk file"));
    let n: usize = args.next().map_or(3, |s| s.parse().unwrap());
    let raw = std::fs::read(&path).unwrap();
    let network = Network::from_magic(raw[..4].try_into().unwrap()).expect("a block magic");
    let magic = network.magic();
    let mut offsets = Vec::new();
    let mut pos = 0usize;
    while pos + 8 <= raw.len() && raw[pos..pos + 4] == magic {
        offsets.push(pos as u64);
        pos += 8 + u32::from_le_bytes(raw[pos + 4..pos + 8].try_into().unwrap()) as usize;
    }
    for _ in 0..n {
        let t = std::time::Instant::now();
        let cols = decode_file_records(&path, [0; 8], network, &offsets).unwrap();
        let dt = t.elapsed().as_secs_f64();
        println!(
            "{:.1} MB/s, {} txs",
            cols.bytes as f64 / dt / 1e6,
            cols.txs.txid.len()
        );
    }
}
