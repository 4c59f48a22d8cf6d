//! Each header rule fires on its own: real mainnet headers (the Paris pair of
//! `shared/data/ethereum/portal/`, which passes unaltered) changed in one field at a time, and the
//! spec's formulas on hand-computed inputs.

use rechain_native::eth::chain_config::MAINNET;
use rechain_native::eth::header::{decode_header, DecodedHeader};
use rechain_native::eth::rules::{
    calc_excess_blob_gas, check_header, fake_exponential, Rule, Violation,
};
use rechain_native::eth::{B256, U256};

fn header_of(n: u64) -> DecodedHeader {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!(
        "../../../shared/data/ethereum/portal/block-data-{n}.yaml"
    ));
    let text = std::fs::read_to_string(p).unwrap();
    let line = text.lines().find(|l| l.starts_with("header:")).unwrap();
    let hex = line["header:".len()..].trim().trim_start_matches("0x");
    let raw: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    decode_header(&raw).unwrap()
}

fn rules(v: Vec<Violation>) -> Vec<Rule> {
    v.into_iter().map(|v| v.rule).collect()
}

#[test]
fn eth_pos_rules() {
    let pow = header_of(15_537_393);
    let pos = header_of(15_537_394);
    assert_eq!(check_header(&MAINNET, &pos, &pow), vec![]);
    let mut x = pos.clone();
    x.header.nonce = [0, 0, 0, 0, 0, 0, 0, 1].into();
    assert_eq!(
        rules(check_header(&MAINNET, &x, &pow)),
        vec![Rule::PosNonce]
    );
    let mut x = pos.clone();
    x.header.ommers_hash = B256::repeat_byte(7);
    assert_eq!(
        rules(check_header(&MAINNET, &x, &pow)),
        vec![Rule::PosOmmers]
    );
    let mut x = pos.clone();
    x.header.base_fee_per_gas = Some(48_811_794_596);
    assert_eq!(rules(check_header(&MAINNET, &x, &pow)), vec![Rule::BaseFee]);
    let mut x = pos.clone();
    x.header.gas_used = x.header.gas_limit + 1;
    assert_eq!(rules(check_header(&MAINNET, &x, &pow)), vec![Rule::GasUsed]);
    let mut x = pos.clone();
    x.header.timestamp = pow.header.timestamp;
    assert_eq!(
        rules(check_header(&MAINNET, &x, &pow)),
        vec![Rule::Timestamp]
    );
    // A proof-of-work child of the proof-of-stake block.
    let mut child = pos.clone();
    child.header.number += 1;
    child.header.parent_hash = pos.hash;
    child.header.timestamp += 12;
    child.header.difficulty = U256::from(1);
    let got = rules(check_header(&MAINNET, &child, &pos));
    assert!(got.contains(&Rule::PowAfterPos), "{got:?}");
    // A London header without its base fee field.
    let mut x = pos.clone();
    x.header.base_fee_per_gas = None;
    x.fields = 15;
    assert!(rules(check_header(&MAINNET, &x, &pow)).contains(&Rule::ForkFields));
}

#[test]
fn eth_dao_extra_data() {
    // Spec §3.2: blocks 1,920,000..1,920,009 must carry "dao-hard-fork".
    let p = header_of(15_537_393);
    let mut parent = p.clone();
    let mut child = p.clone();
    parent.header.number = 1_919_999;
    child.header.number = 1_920_000;
    child.header.parent_hash = parent.hash;
    child.header.timestamp = parent.header.timestamp + 14;
    let got = rules(check_header(&MAINNET, &child, &parent));
    assert!(got.contains(&Rule::DaoExtraData), "{got:?}");
    child.header.extra_data = b"dao-hard-fork".to_vec().into();
    let got = rules(check_header(&MAINNET, &child, &parent));
    assert!(!got.contains(&Rule::DaoExtraData), "{got:?}");
    child.header.number = 1_920_010;
    parent.header.number = 1_920_009;
    child.header.extra_data = b"anything".to_vec().into();
    let got = rules(check_header(&MAINNET, &child, &parent));
    assert!(!got.contains(&Rule::DaoExtraData), "{got:?}");
}

#[test]
fn eth_blob_gas_rules() {
    // Spec §3.4 with Cancun's target 3 / max 6 blobs of 131,072 gas: parent excess 0 and
    // 6 blobs used → 6·131072 − 3·131072 = 393,216; below target → 0.
    let cancun = header_of(19_426_587);
    let mut parent = cancun.header.clone();
    parent.excess_blob_gas = Some(0);
    parent.blob_gas_used = Some(6 * 131_072);
    let t = cancun.header.timestamp + 12;
    assert_eq!(calc_excess_blob_gas(&MAINNET, &parent, t), 393_216);
    parent.blob_gas_used = Some(2 * 131_072);
    assert_eq!(calc_excess_blob_gas(&MAINNET, &parent, t), 0);
    // Prague (target 6 / max 9): excess 393,216 + 9 blobs − 6 blobs.
    let prague = header_of(22_431_084);
    parent.excess_blob_gas = Some(393_216);
    parent.blob_gas_used = Some(9 * 131_072);
    assert_eq!(
        calc_excess_blob_gas(&MAINNET, &parent, prague.header.timestamp),
        393_216 + 3 * 131_072
    );
    // EIP-4844: the blob base fee at excess 0 is fake_exponential(1, 0, fraction) = 1.
    assert_eq!(fake_exponential(1, 0, 3_338_477), U256::from(1));

    // The first Cancun block's header alone: blob gas over the maximum is reported.
    let mut p = cancun.clone();
    p.header.number -= 1;
    p.header.timestamp -= 12;
    let mut c = cancun.clone();
    c.header.parent_hash = p.hash;
    c.header.blob_gas_used = Some(7 * 131_072);
    let got = rules(check_header(&MAINNET, &c, &p));
    assert!(got.contains(&Rule::BlobGasUsed), "{got:?}");
    c.header.blob_gas_used = Some(131_071);
    let got = rules(check_header(&MAINNET, &c, &p));
    assert!(got.contains(&Rule::BlobGasUsed), "{got:?}");
}
