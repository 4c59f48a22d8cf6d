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
        reorg_depth: 0,
        reorg_back: false,
        bad_signature_height: 0,
        bad_signature_branch: false,
        all_script_kinds: false,
        bad_signature_kind: None,
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

/// Core's legacy sigop count per script (CheckBlock's "bad-blk-sigops" input) equals
/// rust-bitcoin's `count_sigops_legacy` on every scriptSig and output of the real blocks.
#[test]
fn legacy_sigops_match_rust_bitcoin() {
    use rechain_native::btc::script::legacy_sigops;
    for prefix in ["mainnet_block_", "testnet_block_"] {
        let block: bitcoin::Block = deserialize(&real_block(prefix)).unwrap();
        let mut total = 0usize;
        for tx in &block.txdata {
            let scripts = tx.input.iter().map(|i| &i.script_sig);
            for s in scripts.chain(tx.output.iter().map(|o| &o.script_pubkey)) {
                assert_eq!(
                    legacy_sigops(s.as_bytes()) as usize,
                    s.count_sigops_legacy()
                );
                total += s.count_sigops_legacy();
            }
        }
        assert!(total > 0, "{prefix}: no sigops to compare");
    }
}

/// A real-format block (built and serialised by rust-bitcoin) whose legacy sigops reach Core's
/// MAX_BLOCK_SIGOPS_COST / 4 = 20,000 is valid; one sigop-heavier copy is "bad-blk-sigops".
#[test]
fn block_over_the_legacy_sigop_limit_is_invalid() {
    use bitcoin::block::{Header, Version};
    use bitcoin::{
        absolute::LockTime, transaction, Amount, BlockHash, CompactTarget, OutPoint, ScriptBuf,
        Sequence, Transaction, TxIn, TxMerkleNode, TxOut, Txid, Witness,
    };
    use rechain_native::btc::decode::BodyDecoder;
    let block_with = |multisigs: usize| {
        let tx = |prevout: OutPoint, script_sig: Vec<u8>, script_pubkey: Vec<u8>| Transaction {
            version: transaction::Version::ONE,
            lock_time: LockTime::ZERO,
            input: vec![TxIn {
                previous_output: prevout,
                script_sig: ScriptBuf::from_bytes(script_sig),
                sequence: Sequence::MAX,
                witness: Witness::new(),
            }],
            output: vec![TxOut {
                value: Amount::from_sat(50_000),
                script_pubkey: ScriptBuf::from_bytes(script_pubkey),
            }],
        };
        let coinbase = tx(OutPoint::null(), vec![0x01, 0x05, 0x00], vec![0x51]);
        // OP_CHECKMULTISIG counts 20 legacy sigops; OP_CHECKSIG in the coinbase output 1 more
        // would be too many, so the coinbase pays to OP_TRUE.
        let spend = tx(
            OutPoint::new(Txid::from_byte_array([7; 32]), 0),
            vec![],
            vec![0xae; multisigs],
        );
        let mut block = bitcoin::Block {
            header: Header {
                version: Version::from_consensus(4),
                prev_blockhash: BlockHash::from_byte_array([1; 32]),
                merkle_root: TxMerkleNode::all_zeros(),
                time: 1_700_000_000,
                bits: CompactTarget::from_consensus(0x207fffff),
                nonce: 0,
            },
            txdata: vec![coinbase, spend],
        };
        block.header.merkle_root = block.compute_merkle_root().unwrap();
        let sigops: usize = block
            .txdata
            .iter()
            .flat_map(|t| {
                let sigs = t.input.iter().map(|i| i.script_sig.count_sigops_legacy());
                sigs.chain(
                    t.output
                        .iter()
                        .map(|o| o.script_pubkey.count_sigops_legacy()),
                )
            })
            .sum();
        (bitcoin::consensus::serialize(&block), sigops)
    };
    for (multisigs, want_valid) in [(1000, true), (1001, false)] {
        let (raw, sigops) = block_with(multisigs);
        assert_eq!(
            sigops * 4 <= 80_000,
            want_valid,
            "rust-bitcoin's count: {sigops}"
        );
        let mut dec = BodyDecoder::new(Network::Regtest);
        dec.push_block(0, &raw);
        let reason = dec.cols.blocks.reason[0].clone();
        if want_valid {
            assert_eq!(reason, None);
            assert_eq!(dec.cols.txs.txid.len(), 2);
        } else {
            assert_eq!(reason.as_deref(), Some("bad-blk-sigops"));
            assert!(dec.cols.txs.txid.is_empty(), "no rows for an invalid block");
        }
    }
}
