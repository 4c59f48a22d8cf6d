//! Header, body and receipt readers and the block rules on the real mainnet fork-boundary blocks
//! of `shared/data/ethereum/portal/` (portal-spec-tests). Expected values: that folder's README
//! and the spec's §4.4 table.

use rechain_native::eth::body::decode_body;
use rechain_native::eth::chain_config::MAINNET;
use rechain_native::eth::header::{
    decode_header, DecodedHeader, EMPTY_REQUESTS_HASH, EMPTY_ROOT_HASH,
};
use rechain_native::eth::receipt::{decode_slim_receipts, Receipt};
use rechain_native::eth::rules::{calc_base_fee, check_block, check_header};
use rechain_native::eth::{B256, U256};
use std::path::PathBuf;

fn portal_dir() -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/ethereum/portal")
}

fn h(s: &str) -> B256 {
    s.parse().unwrap()
}

fn unhex(s: &str) -> Vec<u8> {
    let s = s.trim().trim_start_matches("0x");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

struct Block {
    header: DecodedHeader,
    body: rechain_native::eth::body::Body,
    receipts: Vec<Receipt>,
}

/// `block-data-N.yaml`: three lines `header: 0x…`, `body: 0x…`, `receipts: 0x…`; the receipts
/// are slim (`[type, status, cumulativeGas, logs]`, no bloom), not the consensus form.
fn block(n: u64) -> Block {
    let text = std::fs::read_to_string(portal_dir().join(format!("block-data-{n}.yaml"))).unwrap();
    let field = |k: &str| {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("{k}:")))
            .unwrap();
        unhex(&line[k.len() + 1..])
    };
    Block {
        header: decode_header(&field("header")).unwrap(),
        body: decode_body(&field("body")).unwrap(),
        receipts: decode_slim_receipts(&field("receipts")).unwrap(),
    }
}

const BLOCKS: [u64; 5] = [15_537_393, 15_537_394, 17_034_870, 19_426_587, 22_431_084];

#[test]
fn eth_every_portal_block_file_is_read() {
    let mut on_disk: Vec<String> = std::fs::read_dir(portal_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("block-data-"))
        .collect();
    on_disk.sort();
    let want: Vec<String> = BLOCKS
        .iter()
        .map(|n| format!("block-data-{n}.yaml"))
        .collect();
    assert_eq!(on_disk, want);
}

#[test]
fn eth_portal_blocks_roots_and_fork_fields() {
    // (number, hash, header fields) from spec §4.4.
    let facts = [
        (
            15_537_393,
            "55b11b918355b1ef9c5db810302ebad0bf2544255b530cdce90674d5887bb286",
            16,
        ),
        (
            15_537_394,
            "56a9bb0302da44b8c0b3df540781424684c3af04d0b7a38d72842b762076a664",
            16,
        ),
        (
            17_034_870,
            "e22c56f211f03baadcc91e4eb9a24344e6848c5df4473988f893b58223f5216c",
            17,
        ),
        (
            19_426_587,
            "f8e2f40d98fe5862bc947c8c83d34799c50fb344d7445d020a8a946d891b62ee",
            20,
        ),
        (
            22_431_084,
            "50c8cab760b2948349c590461b166773c45d8f4858cccf5a43025ab2960152e8",
            21,
        ),
    ];
    for (n, hash, fields) in facts {
        let b = block(n);
        assert_eq!(b.header.header.number, n);
        assert_eq!(b.header.hash, h(hash), "block {n}");
        assert_eq!(b.header.fields, fields, "block {n}");
        assert_eq!(
            MAINNET.expected_fields(n, b.header.header.timestamp),
            fields,
            "block {n}"
        );
        // Transactions root, receipts root, withdrawals root, ommers hash, bloom and gas used,
        // recomputed from the body and receipts, equal the header's.
        assert_eq!(
            check_block(&MAINNET, &b.header, &b.body, Some(&b.receipts)),
            vec![],
            "block {n}"
        );
        assert_eq!(b.receipts.len(), b.body.transactions.len());
        assert!(!b.body.transactions.is_empty(), "block {n}");
        assert!(b.body.uncles.is_empty(), "block {n}");
    }
}

#[test]
fn eth_paris_boundary() {
    // Spec §4.4: 15,537,393 last PoW block (difficulty 11,055,787,484,078,698);
    // 15,537,394 first PoS block (difficulty 0, nonce 0, empty extraData), base fee
    // 48,811,794,595 = CalcBaseFee(parent).
    let pow = block(15_537_393);
    let pos = block(15_537_394);
    assert_eq!(
        pow.header.header.difficulty,
        U256::from(11_055_787_484_078_698u64)
    );
    assert!(pow.body.withdrawals.is_none());
    let p = &pos.header.header;
    assert_eq!(p.difficulty, U256::ZERO);
    assert!(p.nonce.is_zero());
    assert!(p.extra_data.is_empty());
    assert_eq!(p.parent_hash, pow.header.hash);
    assert_eq!(p.base_fee_per_gas, Some(48_811_794_595));
    assert_eq!(calc_base_fee(&MAINNET, &pow.header.header), 48_811_794_595);
    assert_eq!(check_header(&MAINNET, &pos.header, &pow.header), vec![]);
}

#[test]
fn eth_shanghai_cancun_prague_fields() {
    // Spec §4.4 / §3.2.
    let s = block(17_034_870);
    let sh = &s.header.header;
    assert_eq!(sh.timestamp, 1_681_338_479);
    assert_eq!(sh.base_fee_per_gas, Some(17_980_647_125));
    assert!(sh.withdrawals_root.is_some() && sh.blob_gas_used.is_none());
    // The body has the third (withdrawals) element; this first Shanghai block's list is empty
    // and the header commits to the empty-trie root.
    assert_eq!(s.body.withdrawals, Some(vec![]));
    assert_eq!(sh.withdrawals_root, Some(EMPTY_ROOT_HASH));
    assert_eq!(s.body.withdrawals_root(), sh.withdrawals_root);

    let c = block(19_426_587);
    let ch = &c.header.header;
    assert_eq!(ch.timestamp, 1_710_338_135);
    assert_eq!(ch.base_fee_per_gas, Some(61_952_457_264));
    assert_eq!((ch.blob_gas_used, ch.excess_blob_gas), (Some(0), Some(0)));
    assert!(ch.parent_beacon_block_root.is_some() && ch.requests_hash.is_none());

    let p = block(22_431_084);
    let ph = &p.header.header;
    assert_eq!(ph.timestamp, 1_746_612_311);
    assert_eq!(ph.requests_hash, Some(EMPTY_REQUESTS_HASH));
    assert_eq!(ph.blob_gas_used, Some(0x120000));
    // 0x120000 blob gas = 9 blobs of 131,072, carried by the block's type-3 transactions.
    use alloy_consensus::Transaction as _;
    let blobs: usize = p
        .body
        .transactions
        .iter()
        .filter(|t| t.tx_type == 3)
        .map(|t| t.envelope.blob_versioned_hashes().map_or(0, |v| v.len()))
        .sum();
    assert_eq!(blobs * 131_072, 0x120000);
}

#[test]
fn eth_tx_types_and_hashes() {
    // Every transaction decodes; types are within 0..=4; hash = keccak of the bytes read.
    for n in BLOCKS {
        let b = block(n);
        for t in &b.body.transactions {
            assert!(t.tx_type <= 4, "block {n}");
            assert_eq!(t.hash, rechain_native::eth::keccak256(&t.encoded));
            assert_eq!(
                *t.envelope.tx_hash(),
                t.hash,
                "block {n}: alloy's hash of its own encoding"
            );
        }
    }
}

#[test]
fn eth_type1_transaction_vector() {
    // No type-1 or type-4 transaction occurs in the real blocks above (types 0, 2, 3 do). An
    // EIP-2930 vector from ethereum/tests TransactionTests/ttEIP2930/accessListStorage32Bytes.json
    // (hash from its "result" section), wrapped as a body element (an RLP byte string).
    use rechain_native::eth::body::decode_transaction_element;
    let tx = unhex("0x01f89a018001826a4094095e7baea6a6c7c4c2dfeb977efac326af552d878080f838f794a95e7baea6a6c7c4c2dfeb977efac326af552d87e1a0ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff80a05cbd172231fc0735e0fb994dd5b1a4939170a260b36f0427a8a80866b063b948a07c230f7f578dd61785c93361b9871c0706ebfa6d06e3f4491dc9558c5202ed36");
    let mut element = Vec::new();
    alloy_rlp::Header {
        list: false,
        payload_length: tx.len(),
    }
    .encode(&mut element);
    element.extend_from_slice(&tx);
    let t = decode_transaction_element(&element).unwrap();
    assert_eq!(t.tx_type, 1);
    assert_eq!(t.encoded, tx);
    assert_eq!(
        t.hash,
        h("b4f8b14a7aaf85ec2f76be9fbe4155deae1f87b2da95af73be3c27ed8d4c8cb7")
    );
    // The bare typed encoding (no string wrapper) is not a valid body element.
    assert!(decode_transaction_element(&tx).is_err());
}
