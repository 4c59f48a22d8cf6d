//! Ethash against go-ethereum's vectors (`consensus/ethash/algorithm_test.go`, copied in spec
//! §4.2), mainnet block 1 (spec §4.2), and every one of the 8,192 real PoW headers of
//! `shared/data/ethereum/era1/mainnet-00003-d8b8a40b.era1` and their uncles (ethash epochs 0
//! and 1).

use rechain_native::eth::body::decode_body;
use rechain_native::eth::chain_config::MAINNET;
use rechain_native::eth::era1::Era1;
use rechain_native::eth::ethash::{epoch_of, seal_hash, verify_pow, Cache};
use rechain_native::eth::header::decode_header;
use rechain_native::eth::rules::{check_header, check_pow, Rule, Violation};
use rechain_native::eth::{B256, U256};
use std::sync::atomic::{AtomicU64, Ordering};

fn h(s: &str) -> B256 {
    s.parse().unwrap()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn eth_ethash_small_vectors() {
    // 1024-byte cache for seed 0^32 begins 7ce2991c…; TestHashimoto: dataset 32 KiB.
    let cache = Cache::with_sizes(0, B256::ZERO, 1024, 32 * 1024);
    assert_eq!(
        cache.bytes()[..32],
        unhex("7ce2991c951f7bf4c4c1bb119887ee07871eb5339d7b97b8588e85c742de90e5")[..]
    );
    let (digest, result) = cache.hashimoto(
        &h("c9149cc0386e689d789a1c2f3d5d169a61a6218ed30e74414dc736e442ef3d1f"),
        0,
    );
    assert_eq!(
        digest,
        h("e4073cffaef931d37117cefd9afd27ea0f1cad6a981dd2605c4a1ac97c519800")
    );
    assert_eq!(
        result,
        h("d3539235ee2e6f8db665c0a72169f55b7f6c605712330b778ec3944f0eb5a557")
    );
}

/// Spec §4.2: mainnet block 1 (portal-spec-tests hive/success/1.yaml).
fn block1() -> Vec<u8> {
    let pre = "f90211a0d4e56740f876aef8c010b86a40d5f56745a118d0906a34e69aec8c0db1cb8fa3a01dcc4de8dec75d7aab85b567b6ccd41ad312451b948a7413f0a142fd40d493479405a56e2d52c817161883f50c441c3228cfe54d9fa0d67e4d450343046425ae4271474353857ab860dbc0a1dde64b41b5cd3a532bf3a056e81f171bcc55a6ff8345e692c0f86e5b48e01b996cadc001622fb5e363b421a056e81f171bcc55a6ff8345e692c0f86e5b48e01b996cadc001622fb5e363b421b90100";
    let post = "8503ff80000001821388808455ba422499476574682f76312e302e302f6c696e75782f676f312e342e32a0969b900de27b6ac6a67742365dd65f55a0526c41fd18e1b16f1a1215c2e66f5988539bd4979fef1ec4";
    let mut raw = unhex(pre);
    raw.extend(vec![0u8; 256]);
    raw.extend(unhex(post));
    assert_eq!(raw.len(), 532);
    raw
}

/// Spec §4.1: mainnet genesis (535 bytes).
fn genesis() -> Vec<u8> {
    let pre = "f90214a00000000000000000000000000000000000000000000000000000000000000000a01dcc4de8dec75d7aab85b567b6ccd41ad312451b948a7413f0a142fd40d49347940000000000000000000000000000000000000000a0d7f8974fb5ac78d9ac099b9ad5018bedc2ce0a72dad1827a1709da30580f0544a056e81f171bcc55a6ff8345e692c0f86e5b48e01b996cadc001622fb5e363b421a056e81f171bcc55a6ff8345e692c0f86e5b48e01b996cadc001622fb5e363b421b90100";
    let post = "850400000000808213888080a011bbe8db4e347b4e8c937c1c8370e4b5ed33adb3db69cbdb7a38e1e50b1b82faa00000000000000000000000000000000000000000000000000000000000000000880000000000000042";
    let mut raw = unhex(pre);
    raw.extend(vec![0u8; 256]);
    raw.extend(unhex(post));
    assert_eq!(raw.len(), 535);
    raw
}

#[test]
fn eth_mainnet_block1_pow_and_rules() {
    let g = decode_header(&genesis()).unwrap();
    assert_eq!(
        g.hash,
        h("d4e56740f876aef8c010b86a40d5f56745a118d0906a34e69aec8c0db1cb8fa3")
    );
    let raw = block1();
    let b1 = decode_header(&raw).unwrap();
    assert_eq!(b1.header.difficulty, U256::from(17_171_480_576u64));
    assert_eq!(b1.header.timestamp, 1_438_269_988);
    // Parent link, difficulty (Frontier, 17179869184 − 17179869184//2048), gas limit, extra data.
    assert_eq!(check_header(&MAINNET, &b1, &g), vec![]);
    assert_eq!(
        seal_hash(&raw).unwrap(),
        h("85913a3057ea8bec78cd916871ca73802e77724e014dda65add3405d02240eb7")
    );
    let cache = Cache::new(0);
    let pow = verify_pow(&cache, &raw, &b1).unwrap();
    assert_eq!(
        pow.digest,
        h("969b900de27b6ac6a67742365dd65f55a0526c41fd18e1b16f1a1215c2e66f59")
    );
    assert_eq!(
        pow.result,
        h("000000002bc095dd4de049873e6302c3f14a7f2e5b5a1f60cdf1f1798164d610")
    );
    assert!(pow.mix_ok && pow.target_ok);
    // A bad nonce fails both checks.
    let mut bad = b1.clone();
    bad.header.nonce = [0, 0, 0, 0, 0, 0, 0, 1].into();
    let mut raw_bad = raw.clone();
    let n = raw_bad.len();
    raw_bad[n - 8..].copy_from_slice(&[0, 0, 0, 0, 0, 0, 0, 1]);
    let pow = verify_pow(&cache, &raw_bad, &bad).unwrap();
    assert!(!pow.mix_ok && !pow.target_ok);
    let rules: Vec<_> = check_pow(&cache, &raw_bad, &bad)
        .into_iter()
        .map(|v| (v.block, v.rule))
        .collect();
    assert_eq!(rules, vec![(1, Rule::PowMixHash), (1, Rule::PowTarget)]);
}

#[test]
fn eth_mainnet_epoch3_every_header_has_valid_pow() {
    let era = Era1::open(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/data/ethereum/era1/mainnet-00003-d8b8a40b.era1"),
    )
    .unwrap();
    assert_eq!((epoch_of(era.start()), epoch_of(era.end() - 1)), (0, 1));
    // One cache per ethash epoch, built in parallel, shared by the verifying threads.
    let caches: Vec<Cache> = std::thread::scope(|s| {
        let hs: Vec<_> = [0, 1].map(|e| s.spawn(move || Cache::new(e))).into();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let uncles = AtomicU64::new(0);
    let uncles = &uncles;
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()) as u64;
    let bad: Vec<Violation> = std::thread::scope(|s| {
        let era = &era;
        let caches = &caches;
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let mut bad = Vec::new();
                    for n in (era.start() + t..era.end()).step_by(threads as usize) {
                        let b = era.block(n).unwrap();
                        // Uncles carried real proof of work too.
                        let body = decode_body(&b.body).unwrap();
                        for (u, raw_u) in body.uncles.iter().zip(&body.uncle_encodings) {
                            let cache = &caches[epoch_of(u.header.number) as usize];
                            bad.extend(check_pow(cache, raw_u, u));
                            uncles.fetch_add(1, Ordering::Relaxed);
                        }
                        let raw = b.header;
                        let hd = decode_header(&raw).unwrap();
                        bad.extend(check_pow(&caches[epoch_of(n) as usize], &raw, &hd));
                    }
                    bad
                })
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(bad, vec![]);
    assert!(uncles.load(Ordering::Relaxed) > 0);
}
