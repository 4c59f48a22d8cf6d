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

fn real_block(prefix: &str) -> Vec<u8> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/bitcoin");
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.file_name().unwrap().to_str().unwrap().starts_with(prefix) {
            return std::fs::read(p).unwrap();
        }
    }
    panic!("fixture {prefix} missing");
}

fn display(h: &[u8; 32]) -> String {
    h.iter().rev().map(|b| format!("{b:02x}")).collect()
}

/// Every txid, wtxid, input, output value, script and address of a block, as rechain's full
/// decoder reports them, equals what rust-bitcoin reads from the same bytes.
fn full_decode_matches(raw: &[u8], network: Network, rb_network: bitcoin::Network) -> usize {
    use rechain_native::btc::decode::BodyDecoder;
    use rechain_native::btc::script::ScriptType;
    let block: bitcoin::Block = deserialize(raw).unwrap();
    let mut dec = BodyDecoder::new(network);
    dec.push_block(0, raw);
    let c = &dec.cols;
    assert_eq!(c.blocks.valid, vec![true], "{:?}", c.blocks.reason);
    assert_eq!(c.blocks.n_tx[0], Some(block.txdata.len() as u64));
    assert_eq!(c.blocks.weight[0], block.weight().to_wu());
    assert_eq!(c.txs.txid.len(), block.txdata.len());
    let (mut in_row, mut out_row) = (0usize, 0usize);
    let mut with_address = 0;
    for (i, tx) in block.txdata.iter().enumerate() {
        assert_eq!(c.txs.txid[i], tx.compute_txid().to_byte_array());
        assert_eq!(c.txs.wtxid[i], tx.compute_wtxid().to_byte_array());
        assert_eq!(c.txs.weight[i] as u64, tx.weight().to_wu());
        assert_eq!(c.txs.vsize[i] as usize, tx.vsize());
        assert_eq!(c.txs.size[i] as usize, tx.total_size());
        assert_eq!(c.txs.lock_time[i], tx.lock_time.to_consensus_u32());
        for inp in &tx.input {
            assert_eq!(
                c.inputs.prev_txid[in_row],
                inp.previous_output.txid.to_byte_array()
            );
            assert_eq!(c.inputs.prev_vout[in_row], inp.previous_output.vout);
            assert_eq!(c.inputs.sequence[in_row], inp.sequence.0);
            assert_eq!(c.inputs.witness_items[in_row] as usize, inp.witness.len());
            assert_eq!(c.inputs.script_sig.value(in_row), inp.script_sig.as_bytes());
            let first = c.inputs.witness_offsets[in_row] as usize;
            let items: Vec<&[u8]> = (first..c.inputs.witness_offsets[in_row + 1] as usize)
                .map(|k| c.inputs.witness.value(k))
                .collect();
            assert_eq!(items, inp.witness.iter().collect::<Vec<&[u8]>>());
            in_row += 1;
        }
        for out in &tx.output {
            let script = out.script_pubkey.as_bytes();
            assert_eq!(c.outputs.value[out_row], out.value.to_sat());
            assert_eq!(c.outputs.script_pubkey.value(out_row), script);
            let spk = &out.script_pubkey;
            let expected_kind = if spk.is_p2pkh() {
                ScriptType::P2pkh
            } else if spk.is_p2sh() {
                ScriptType::P2sh
            } else if spk.is_p2wpkh() {
                ScriptType::P2wpkh
            } else if spk.is_p2wsh() {
                ScriptType::P2wsh
            } else if spk.is_p2tr() {
                ScriptType::P2tr
            } else if spk.is_op_return() {
                ScriptType::OpReturn
            } else if spk.is_p2pk() {
                ScriptType::P2pk
            } else if spk.is_multisig() {
                ScriptType::Multisig
            } else if spk.is_witness_program() {
                ScriptType::WitnessUnknown
            } else {
                ScriptType::Nonstandard
            };
            let kind = c.outputs.script_type[out_row];
            // rust-bitcoin calls any OP_RETURN script op_return; Core requires push-only data.
            if !(expected_kind == ScriptType::OpReturn && kind == ScriptType::Nonstandard) {
                assert_eq!(kind, expected_kind, "output {out_row} script {spk:?}");
            }
            let a = &c.outputs.address;
            let ours = a.valid[out_row].then(|| {
                std::str::from_utf8(
                    &a.data[a.offsets[out_row] as usize..a.offsets[out_row + 1] as usize],
                )
                .unwrap()
                .to_string()
            });
            let theirs = bitcoin::Address::from_script(spk, rb_network)
                .ok()
                .map(|a| a.to_string());
            if kind != ScriptType::P2pk {
                assert_eq!(ours, theirs, "address of output {out_row}");
            }
            with_address += ours.is_some() as usize;
            out_row += 1;
        }
    }
    assert_eq!(in_row, c.inputs.tx.len());
    assert_eq!(out_row, c.outputs.tx.len());
    assert!(with_address > 0);
    let _ = display;
    block.txdata.len()
}

#[test]
fn real_blocks_full_decode_matches_rust_bitcoin() {
    assert_eq!(
        full_decode_matches(
            &real_block("mainnet_block_"),
            Network::Main,
            bitcoin::Network::Bitcoin
        ),
        2500
    );
    assert_eq!(
        full_decode_matches(
            &real_block("testnet_block_"),
            Network::Testnet3,
            bitcoin::Network::Testnet
        ),
        15
    );
}
