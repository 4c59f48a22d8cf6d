//! Profiling aid: full-decodes every record of one blk file (no XOR) N times, in units of
//! about UNIT_MB block bytes as the body pass cuts them (16 MiB under a 1 GiB budget), so the
//! columns are a unit's size as in a run and not a whole file's.
//! `cargo run --release --example decode_profile -- FILE [N] [UNIT_MB]`

use rechain_native::btc::decode::decode_file_records;
use rechain_native::btc::network::Network;

fn main() {
    let mut args = std::env::args().skip(1);
    let path = std::path::PathBuf::from(args.next().expect("blk file"));
    let n: usize = args.next().map_or(3, |s| s.parse().unwrap());
    let unit: u64 = args.next().map_or(16, |s| s.parse::<u64>().unwrap()) << 20;
    let raw = std::fs::read(&path).unwrap();
    let network = Network::from_magic(raw[..4].try_into().unwrap()).expect("a block magic");
    let magic = network.magic();
    let mut offsets = Vec::new();
    let mut pos = 0usize;
    while pos + 8 <= raw.len() && raw[pos..pos + 4] == magic {
        offsets.push(pos as u64);
        pos += 8 + u32::from_le_bytes(raw[pos + 4..pos + 8].try_into().unwrap()) as usize;
    }
    let mut units: Vec<&[u64]> = Vec::new();
    let mut start = 0;
    for j in 1..=offsets.len() {
        if j == offsets.len() || offsets[j] - offsets[start] >= unit {
            units.push(&offsets[start..j]);
            start = j;
        }
    }
    for _ in 0..n {
        let t = std::time::Instant::now();
        let (mut bytes, mut txs) = (0, 0);
        for u in &units {
            let cols = decode_file_records(&path, [0; 8], network, u).unwrap();
            bytes += cols.bytes;
            txs += cols.txs.txid.len();
        }
        let dt = t.elapsed().as_secs_f64();
        println!("{:.1} MB/s, {} txs", bytes as f64 / dt / 1e6, txs);
    }
}
