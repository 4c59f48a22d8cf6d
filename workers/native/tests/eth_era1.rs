//! era1 readers and validators on the real era1 files of `shared/data/ethereum/era1/`; every
//! expected value comes from that folder's README or the spec (`ethereum-history.md` §4).

use rechain_native::eth::accumulator;
use rechain_native::eth::body::decode_body;
use rechain_native::eth::chain_config::{ChainConfig, MAINNET, SEPOLIA};
use rechain_native::eth::era1::{parse_name, Era1};
use rechain_native::eth::header::decode_header;
use rechain_native::eth::receipt::{decode_consensus_receipts, receipts_root};
use rechain_native::eth::rules::Rule;
use rechain_native::eth::validate::verify_era1;
use rechain_native::eth::{B256, U256};
use std::path::PathBuf;

fn era1_dir() -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/ethereum/era1")
}

fn h(s: &str) -> B256 {
    s.parse().unwrap()
}

struct Facts {
    file: &'static str,
    cfg: ChainConfig,
    first: u64,
    first_hash: &'static str,
    last_hash: &'static str,
    final_td: u128,
    txs: u64,
    accumulator: &'static str,
}

/// The README's table.
const FILES: [Facts; 3] = [
    Facts {
        file: "mainnet-00003-d8b8a40b.era1",
        cfg: MAINNET,
        first: 24_576,
        first_hash: "32aa8325e5b022078aa5858553ac97c8c0215606f82a59367c91aa73bfca3c79",
        last_hash: "14c8639dfc32812ed20839f5a11993cd59b22e5226cb2179640ba5c1f0c08f87",
        final_td: 24_713_480_918_711_655,
        txs: 0,
        accumulator: "d8b8a40b8cf6818e1bac871d882e772be0b28d1baaf72374946506d9e6fa7d75",
    },
    Facts {
        file: "sepolia-00000-643a00f7.era1",
        cfg: SEPOLIA,
        first: 0,
        first_hash: "25a5cc106eea7138acab33231d7160d69cb777ee0c2c553fcddf5138993e6dd9",
        last_hash: "8e3e7dc9ef199c05683417b4aa572f0b7a8bcfafca7edb6045baabc01aa4fb0c",
        final_td: 14_255_663_800,
        txs: 0,
        accumulator: "643a00f78fd6a304a29c80b2f2f946e9e57494597600262b378b2754d34dff41",
    },
    Facts {
        file: "sepolia-00021-b8814b14.era1",
        cfg: SEPOLIA,
        first: 172_032,
        first_hash: "eb20db3e285c22f189aae88e1044aed08997b35675cfb5db3e60fe8a0daee218",
        last_hash: "af105ff107f4d9b48bc205c3001ee33938b1b6f3b2ef04da0064ae63ecb1d80a",
        final_td: 74_457_974_918_680,
        txs: 93,
        accumulator: "b8814b146889489efd392d80c7ca4e418d39302e25323a55882ca8cc0ef013e3",
    },
];

#[test]
fn eth_every_era1_file_is_listed_here() {
    let mut on_disk: Vec<String> = std::fs::read_dir(era1_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".era1"))
        .collect();
    on_disk.sort();
    let mut known: Vec<String> = FILES.iter().map(|f| f.file.to_string()).collect();
    known.sort();
    assert_eq!(on_disk, known);
}

#[test]
fn eth_era1_files_match_readme_and_validate() {
    for f in &FILES {
        let era = Era1::open(era1_dir().join(f.file)).unwrap();
        assert_eq!((era.start(), era.count()), (f.first, 8192), "{}", f.file);
        assert_eq!(
            era.accumulator(),
            h(f.accumulator),
            "{}: stored record",
            f.file
        );
        let list = f.file.starts_with("mainnet").then(accumulator::mainnet);
        let report = verify_era1(&era, &f.cfg, Some(f.file), list);
        assert_eq!(report.violations, vec![], "{}", f.file);
        assert_eq!(report.first_hash, h(f.first_hash), "{}", f.file);
        assert_eq!(report.last_hash, h(f.last_hash), "{}", f.file);
        assert_eq!(report.final_td, U256::from(f.final_td), "{}", f.file);
        assert_eq!(report.transactions, f.txs, "{}", f.file);
        assert_eq!(
            report.accumulator,
            h(f.accumulator),
            "{}: recomputed",
            f.file
        );
        let name = parse_name(f.file).unwrap();
        assert_eq!(name.short_root[..], h(f.accumulator)[..4]);
    }
}

#[test]
fn eth_mainnet_epoch3_is_in_the_eip7643_list_and_frontier() {
    // README: the mainnet accumulator equals epoch 3 of portal's historical_hashes_accumulator.ssz;
    // spec §4.3 lists epoch 3 = d8b8a40b… from EIP-7643.
    let roots = accumulator::mainnet();
    let d8 = h("d8b8a40b8cf6818e1bac871d882e772be0b28d1baaf72374946506d9e6fa7d75");
    assert_eq!(roots.epoch(3), Some(d8));
    let portal =
        std::fs::read(era1_dir().join("../portal/historical_hashes_accumulator.ssz")).unwrap();
    let parsed = accumulator::HistoricalRoots::from_ssz(&portal).unwrap();
    assert_eq!(parsed.epochs.len(), 1897);
    assert_eq!(parsed.root(), accumulator::MAINNET_ACCUMULATOR_ROOT);
    assert_eq!(parsed.epoch(3), Some(d8));
    // Blocks 24,576.. are Frontier: 15 header fields, PoW difficulty, no base fee.
    let era = Era1::open(era1_dir().join("mainnet-00003-d8b8a40b.era1")).unwrap();
    for n in [24_576, 28_000, 32_767] {
        let hd = decode_header(&era.block(n).unwrap().header).unwrap();
        assert_eq!(hd.fields, 15);
        assert_eq!(hd.header.number, n);
        assert!(hd.header.difficulty > U256::ZERO && hd.header.base_fee_per_gas.is_none());
    }
}

#[test]
fn eth_sepolia_block_175229_roots() {
    // Spec §4.3: block 175,229 of sepolia-00021, two type-2 transactions, its tx and receipt
    // trie roots recompute to the header's.
    let era = Era1::open(era1_dir().join("sepolia-00021-b8814b14.era1")).unwrap();
    let b = era.block(175_229).unwrap();
    let hd = decode_header(&b.header).unwrap();
    assert_eq!(
        hd.hash,
        h("dd7b66d31f49da65e87b3031d7d62c4eb6ce45700706dd05a145f8caea5de5ca")
    );
    let body = decode_body(&b.body).unwrap();
    assert_eq!(
        body.transactions
            .iter()
            .map(|t| t.tx_type)
            .collect::<Vec<_>>(),
        vec![2, 2]
    );
    let tx_root = h("982f0ba70ad435900c47b2bcb061f67ae79621d73d27e3a40fae89c334a21de1");
    assert_eq!(hd.header.transactions_root, tx_root);
    assert_eq!(body.transactions_root(), tx_root);
    let rs = decode_consensus_receipts(&b.receipts).unwrap();
    assert_eq!(
        rs.iter().map(|r| r.tx_type).collect::<Vec<_>>(),
        vec![Some(2), Some(2)]
    );
    let r_root = h("75308898d571eafb5cd8cde8278bf5b3d13c5f6ec074926de3bb895b519264e1");
    assert_eq!(hd.header.receipts_root, r_root);
    assert_eq!(receipts_root(&rs), Some(r_root));
}

#[test]
fn eth_sepolia_genesis_td_is_its_difficulty() {
    // README: Sepolia genesis hash; spec §2.2: TD of block n includes block n (epoch 0 starts at 0).
    let era = Era1::open(era1_dir().join("sepolia-00000-643a00f7.era1")).unwrap();
    let b = era.block(0).unwrap();
    let g = decode_header(&b.header).unwrap();
    assert_eq!(
        g.hash,
        h("25a5cc106eea7138acab33231d7160d69cb777ee0c2c553fcddf5138993e6dd9")
    );
    assert_eq!(b.total_difficulty, g.header.difficulty);
    assert_eq!(b.body, vec![0xc2, 0xc0, 0xc0]);
    assert_eq!(b.receipts, vec![0xc0]);
}

#[test]
fn eth_wrong_rules_are_reported() {
    // Real headers of mainnet epoch 3, altered after decoding: each rule fires by itself.
    use rechain_native::eth::rules::check_header;
    let era = Era1::open(era1_dir().join("mainnet-00003-d8b8a40b.era1")).unwrap();
    let p = decode_header(&era.block(30_000).unwrap().header).unwrap();
    let c = decode_header(&era.block(30_001).unwrap().header).unwrap();
    assert_eq!(check_header(&MAINNET, &c, &p), vec![]);
    let rules = |c: &rechain_native::eth::header::DecodedHeader| {
        check_header(&MAINNET, c, &p)
            .into_iter()
            .map(|v| (v.block, v.rule))
            .collect::<Vec<_>>()
    };
    let mut x = c.clone();
    x.header.difficulty += U256::from(1);
    assert_eq!(rules(&x), vec![(30_001, Rule::Difficulty)]);
    let mut x = c.clone();
    x.header.parent_hash = B256::ZERO;
    assert_eq!(rules(&x), vec![(30_001, Rule::ParentHash)]);
    let mut x = c.clone();
    x.header.extra_data = vec![0u8; 33].into();
    assert_eq!(rules(&x), vec![(30_001, Rule::ExtraData)]);
    let mut x = c.clone();
    x.header.gas_limit = p.header.gas_limit + p.header.gas_limit / 1024;
    assert_eq!(rules(&x), vec![(30_001, Rule::GasLimit)]);
    let mut x = c.clone();
    x.header.number += 1;
    assert!(rules(&x).contains(&(30_002, Rule::Number)));
    let mut x = c.clone();
    x.header.base_fee_per_gas = Some(7);
    x.fields = 16;
    assert_eq!(rules(&x), vec![(30_001, Rule::ForkFields)]);
}

/// geth's `eradb.convertReceipts`: a consensus receipt list → storage form (drop type and bloom).
fn to_storage_form(consensus: &[u8]) -> Vec<u8> {
    use alloy_rlp::Header;
    let payload = |b: &[u8]| -> Vec<u8> {
        let mut s = b;
        let h = Header::decode(&mut s).unwrap();
        s[..h.payload_length].to_vec()
    };
    let split = |mut b: &[u8]| -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        while !b.is_empty() {
            let start = b;
            let h = Header::decode(&mut b).unwrap();
            b = &b[h.payload_length..];
            out.push(start[..start.len() - b.len()].to_vec());
        }
        out
    };
    let list = |items: &[Vec<u8>]| -> Vec<u8> {
        let body: Vec<u8> = items.concat();
        let mut out = Vec::new();
        Header {
            list: true,
            payload_length: body.len(),
        }
        .encode(&mut out);
        out.extend(body);
        out
    };
    let mut receipts = Vec::new();
    for r in split(&payload(consensus)) {
        // Typed: a byte string holding type || rlp(list); legacy: the list itself.
        let inner = if r[0] >= 0xc0 {
            r.clone()
        } else {
            payload(&r)[1..].to_vec()
        };
        let f = split(&payload(&inner));
        assert_eq!(f.len(), 4);
        receipts.push(list(&[f[0].clone(), f[1].clone(), f[3].clone()]));
    }
    list(&receipts)
}

#[test]
fn eth_storage_form_receipts_rebuild_the_receipts_root() {
    // Freezer receipts have neither type nor bloom; typed from the body they must still give the
    // header's receiptsRoot (all 93 transactions of sepolia-00021).
    use rechain_native::eth::receipt::{decode_storage_receipts, set_types};
    let era = Era1::open(era1_dir().join("sepolia-00021-b8814b14.era1")).unwrap();
    let mut with_txs = 0;
    for b in era.blocks() {
        let b = b.unwrap();
        let body = decode_body(&b.body).unwrap();
        if body.transactions.is_empty() {
            continue;
        }
        with_txs += body.transactions.len();
        let hd = decode_header(&b.header).unwrap();
        let mut rs = decode_storage_receipts(&to_storage_form(&b.receipts)).unwrap();
        assert!(rs.iter().all(|r| r.tx_type.is_none() && r.bloom.is_none()));
        assert_eq!(receipts_root(&rs), None);
        set_types(&mut rs, &body);
        assert_eq!(
            receipts_root(&rs),
            Some(hd.header.receipts_root),
            "block {}",
            b.number
        );
    }
    assert_eq!(with_txs, 93);
}

#[test]
fn eth_random_damage_never_panics() {
    // Deterministic pseudo-random byte flips over the whole Sepolia epoch-21 file: every outcome
    // is Ok or a typed error / verdict.
    let clean = std::fs::read(era1_dir().join("sepolia-00021-b8814b14.era1")).unwrap();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..200 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let mut bad = clean.clone();
        let at = (x % bad.len() as u64) as usize;
        bad[at] ^= 1 << (x >> 61);
        if let Ok(era) = Era1::from_bytes(bad) {
            let n = era.start() + (x >> 20) % era.count();
            if let Ok(b) = era.block(n) {
                let _ = decode_header(&b.header);
                let _ = decode_body(&b.body);
                let _ = decode_consensus_receipts(&b.receipts);
            }
        }
    }
    // Every truncation of one block's records decodes or errs.
    let era = Era1::from_bytes(clean).unwrap();
    let b = era.block(175_229).unwrap();
    for cut in 0..b.body.len() {
        let _ = decode_body(&b.body[..cut]);
    }
    for cut in 0..b.receipts.len() {
        let _ = decode_consensus_receipts(&b.receipts[..cut]);
    }
    for cut in 0..b.header.len() {
        assert!(decode_header(&b.header[..cut]).is_err());
    }
}

#[test]
fn eth_uncle_rules() {
    // verify_era1 above checks every uncle of mainnet epoch 3 (none reused, parents within 7
    // generations, headers valid). Here the rules fire one by one on a real uncle.
    use rechain_native::eth::rules::{check_uncles, Ancestor, UNCLE_GENERATIONS};
    let era = Era1::open(era1_dir().join("mainnet-00003-d8b8a40b.era1")).unwrap();
    let mut ancestors: Vec<Ancestor> = Vec::new();
    let mut found = None;
    for b in era.blocks() {
        let b = b.unwrap();
        let h = decode_header(&b.header).unwrap();
        let body = decode_body(&b.body).unwrap();
        if !body.uncles.is_empty() && ancestors.len() == UNCLE_GENERATIONS {
            found = Some((h, body, ancestors.clone()));
            break;
        }
        ancestors.insert(
            0,
            Ancestor {
                header: h,
                uncle_hashes: body.uncles.iter().map(|u| u.hash).collect(),
            },
        );
        ancestors.truncate(UNCLE_GENERATIONS);
    }
    let (h, body, ancestors) = found.expect("epoch 3 has uncles");
    let rules = |body: &rechain_native::eth::body::Body, a: &[Ancestor]| {
        check_uncles(&MAINNET, &h, body, a)
            .into_iter()
            .map(|v| v.rule)
            .collect::<Vec<_>>()
    };
    assert_eq!(rules(&body, &ancestors), vec![]);
    let uncle = body.uncles[0].clone();
    // Included before by an ancestor.
    let mut a = ancestors.clone();
    a[3].uncle_hashes.push(uncle.hash);
    assert_eq!(rules(&body, &a)[0], Rule::UncleDuplicate);
    // Twice in this block.
    let mut twice = body.clone();
    twice.uncles = vec![uncle.clone(), uncle.clone()];
    assert_eq!(rules(&twice, &ancestors), vec![Rule::UncleDuplicate]);
    // An ancestor as uncle.
    let mut anc = body.clone();
    anc.uncles = vec![ancestors[2].header.clone()];
    assert_eq!(rules(&anc, &ancestors), vec![Rule::UncleIsAncestor]);
    // Parent outside the 7-block window (window full, parent removed).
    let mut a = ancestors.clone();
    let i = a
        .iter()
        .position(|x| x.header.hash == uncle.header.parent_hash)
        .unwrap();
    a[i].header.hash = B256::repeat_byte(0xab);
    assert_eq!(rules(&body, &a), vec![Rule::UncleDangling]);
    // A bad uncle header (difficulty off by one).
    let mut bad = body.clone();
    bad.uncles[0].header.difficulty += U256::from(1);
    assert_eq!(rules(&bad, &ancestors), vec![Rule::UncleHeader]);
}
