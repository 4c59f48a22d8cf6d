//! rust-bitcoin, an independent implementation, agrees with the scanner on every generated
//! header (hash, fields, proof of work) and on the real blocks' full decoding.

use bitcoin::consensus::deserialize;
use bitcoin::hashes::Hash;
use rechain_native::btc::gen::{generate, GenConfig};
use rechain_native::btc::network::Network;
use rechain_native::btc::scan::{RecordStatus, ScanConfig, Scanner};

#[test]
fn generated_chain_headers_match_rust_bitcoin() {
    let dir = std::env::temp_dir().join(format!("rechain-rb-{}", std::process::id()));
    let cfg = GenConfig {
        network: Network::Regtest,
        blocks: 3000,
        seed: 99,
        file_size: 200_000,
        xor: true,
        shuffle_window: 50,
        side_branches: 4,
        orphans: 3,
        tx_min: 1,
        tx_max: 6,
    };
    let summary = generate(&cfg, &dir.join("blocks")).unwrap();
    let scan_cfg = ScanConfig {
        network: Network::Regtest,
        xor_key: summary.xor_key,
        check_bodies: true,
    };
    let mut seen = 0;
    for file_no in 0..summary.files {
        let path = dir.join("blocks").join(format!("blk{file_no:05}.dat"));
        let mut scanner = Scanner::open(&scan_cfg, &path).unwrap();
        let shard = scanner.scan(0, u64::MAX).unwrap();
        let raw = std::fs::read(&path).unwrap();
        for i in 0..shard.records.len() {
            let r = shard.records.get(i);
            assert_eq!(r.status, RecordStatus::Ok, "{:?}", r.reason);
            let header: bitcoin::block::Header = deserialize(&r.header).unwrap();
            assert_eq!(header.block_hash().to_byte_array(), r.hash);
            assert!(header.validate_pow(header.target()).is_ok());
            // The whole block, de-obfuscated from the file, decodes and checks out in
            // rust-bitcoin too (merkle root and witness commitment).
            let start = r.magic_offset as usize + 8;
            let bytes: Vec<u8> = raw[start..start + r.declared_size as usize]
                .iter()
                .enumerate()
                .map(|(k, b)| b ^ summary.xor_key[(start + k) % 8])
                .collect();
            let block: bitcoin::Block = deserialize(&bytes).unwrap();
            assert!(block.check_merkle_root());
            assert!(block.check_witness_commitment());
            assert_eq!(block.txdata.len() as u64, r.n_tx.unwrap());
            seen += 1;
        }
    }
    assert_eq!(seen as u64, summary.records);
    std::fs::remove_dir_all(dir).unwrap();
}
