//! geth freezer reader on geth's own tables (`shared/data/ethereum/geth-freezer-devchain/`,
//! blocks 0..5 of a dev chain) and on damaged or tail-pruned copies. Expected values come from
//! the files geth wrote (its `hashes` table, index sizes, `.meta`) and the spec's §1 vectors.

use rechain_native::eth::body::decode_body;
use rechain_native::eth::chain_config::ChainConfig;
use rechain_native::eth::freezer::{Freezer, Layout, Table};
use rechain_native::eth::header::decode_header;
use rechain_native::eth::receipt::decode_storage_receipts;
use rechain_native::eth::rules::{check_hash, check_total_difficulty, Rule};
use rechain_native::eth::validate::verify_freezer;
use rechain_native::eth::{keccak256, ErrorKind, U256};
use std::path::{Path, PathBuf};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/data/ethereum/geth-freezer-devchain")
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rechain-eth-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Copy the fixture into `dir` (files made writable so the copy can be damaged).
fn copy_fixture(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    for e in std::fs::read_dir(fixture()).unwrap() {
        let p = e.unwrap().path();
        let to = dir.join(p.file_name().unwrap());
        std::fs::write(&to, std::fs::read(&p).unwrap()).unwrap();
    }
}

fn check_devchain(f: &Freezer) {
    // Five 42-byte indexes = 7 entries = 6 items (blocks 0..5), .meta v1 with tail 0 (c20180).
    assert_eq!(f.head(), 6);
    assert_eq!(f.check_lengths().unwrap(), 6);
    for t in [
        &f.hashes,
        &f.headers,
        &f.bodies,
        &f.receipts,
        f.diffs.as_ref().unwrap(),
    ] {
        assert_eq!(t.items(), 6, "{}", t.name());
        assert_eq!(t.tail(), 0);
        let m = t.meta().unwrap();
        assert_eq!((m.version, m.virtual_tail, m.flush_offset), (1, 0, None));
    }
    assert!(f.headers.compressed() && f.bodies.compressed() && f.receipts.compressed());
    assert!(!f.hashes.compressed() && !f.diffs.as_ref().unwrap().compressed());
    let mut parent: Option<(rechain_native::eth::header::DecodedHeader, U256)> = None;
    for n in 0..6 {
        let hd = decode_header(&f.header(n).unwrap()).unwrap();
        // geth's ReadHeaderRLP rule: keccak256(headers[n]) == hashes[n].
        assert_eq!(check_hash(&hd, f.hash(n).unwrap()), None, "block {n}");
        assert_eq!(hd.header.number, n);
        // Bodies decompress to c3c0c0c0 ([txs, uncles, withdrawals], all empty), receipts to c0.
        assert_eq!(f.body(n).unwrap(), vec![0xc3, 0xc0, 0xc0, 0xc0]);
        let body = decode_body(&f.body(n).unwrap()).unwrap();
        assert!(body.transactions.is_empty() && body.withdrawals == Some(vec![]));
        assert_eq!(body.uncles_hash, hd.header.ommers_hash);
        assert_eq!(f.receipts(n).unwrap(), vec![0xc0]);
        assert!(decode_storage_receipts(&f.receipts(n).unwrap())
            .unwrap()
            .is_empty());
        // diffs items are the single byte 01: rlp(TD = 1).
        let td = f.total_difficulty(n).unwrap().unwrap();
        assert_eq!(td, U256::from(1));
        if let Some((p, ptd)) = &parent {
            assert_eq!(hd.header.parent_hash, p.hash, "block {n}");
            assert_eq!(check_total_difficulty(&hd, *ptd, td), None);
        }
        parent = Some((hd, td));
    }
    assert_eq!(keccak256(f.header(0).unwrap()), f.hash(0).unwrap());
    assert!(matches!(
        f.header(6).unwrap_err().kind,
        ErrorKind::OutOfRange {
            number: 6,
            first: 0,
            end: 6
        }
    ));
}

#[test]
fn eth_freezer_fixture_flat_layout() {
    let f = Freezer::open(fixture()).unwrap();
    assert_eq!(f.layout(), Layout::Legacy);
    check_devchain(&f);
}

#[test]
fn eth_freezer_fixture_chain_layout() {
    let d = scratch("chain-layout");
    copy_fixture(&d.join("chain"));
    let f = Freezer::open(&d).unwrap();
    assert_eq!(f.layout(), Layout::Chain);
    assert_eq!(f.dir(), d.join("chain"));
    check_devchain(&f);
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn eth_freezer_never_writes() {
    // The fixture is read-only on disk; opening and reading must not need write access and must
    // leave every file as it was (no repair, no FLOCK created).
    let d = scratch("readonly");
    copy_fixture(&d);
    let before: Vec<_> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let snapshot: Vec<Vec<u8>> = before.iter().map(|p| std::fs::read(p).unwrap()).collect();
    let mut idx = std::fs::read(d.join("headers.cidx")).unwrap();
    idx.extend_from_slice(&[0, 0]); // a torn index write geth would truncate
    std::fs::write(d.join("headers.cidx"), &idx).unwrap();
    assert!(matches!(
        Freezer::open(&d).unwrap_err().kind,
        ErrorKind::BadIndex(_)
    ));
    assert_eq!(
        std::fs::read(d.join("headers.cidx")).unwrap(),
        idx,
        "index left as found"
    );
    idx.truncate(idx.len() - 2);
    std::fs::write(d.join("headers.cidx"), &idx).unwrap();
    let f = Freezer::open(&d).unwrap();
    for n in 0..6 {
        f.header(n).unwrap();
    }
    let after: Vec<_> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(before.len(), after.len());
    for (p, b) in before.iter().zip(&snapshot) {
        assert_eq!(&std::fs::read(p).unwrap(), b);
    }
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn eth_freezer_short_table() {
    // receipts index missing its last entry: geth's read-only open refuses; we report the table.
    let d = scratch("short");
    copy_fixture(&d);
    let idx = std::fs::read(d.join("receipts.cidx")).unwrap();
    std::fs::write(d.join("receipts.cidx"), &idx[..idx.len() - 6]).unwrap();
    let f = Freezer::open(&d).unwrap();
    assert_eq!(f.head(), 5);
    let e = f.check_lengths().unwrap_err();
    assert_eq!(
        e.kind,
        ErrorKind::ShortTable {
            table: "receipts".into(),
            items: 5,
            need: 6
        }
    );
    assert_eq!(e.file, Some(d.join("receipts.cidx")));
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn eth_freezer_index_past_data() {
    // headers.0000.cdat cut short: the last entry (end 0x729 = 1833) points past the data.
    let d = scratch("past");
    copy_fixture(&d);
    let data = std::fs::read(d.join("headers.0000.cdat")).unwrap();
    assert_eq!(data.len(), 1833);
    std::fs::write(d.join("headers.0000.cdat"), &data[..1800]).unwrap();
    let f = Freezer::open(&d).unwrap();
    f.header(4).unwrap(); // good items around it are still readable
    let e = f.header(5).unwrap_err();
    assert_eq!(
        e.kind,
        ErrorKind::IndexPastData {
            data_len: 1800,
            end: 1833
        }
    );
    assert_eq!(e.block, Some(5));
    assert_eq!(e.offset, Some(36)); // entry 6 of the index
    assert_eq!(e.file, Some(d.join("headers.cidx")));
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn eth_freezer_flipped_header_byte_is_a_hash_mismatch() {
    // Raw snappy blocks carry no checksum: a flipped literal byte decodes, and the hashes table
    // catches it (geth's ReadHeaderRLP rule).
    let d = scratch("flip");
    copy_fixture(&d);
    let mut data = std::fs::read(d.join("headers.0000.cdat")).unwrap();
    let idx = std::fs::read(d.join("headers.cidx")).unwrap();
    let start1 = u32::from_be_bytes(idx[8..12].try_into().unwrap()) as usize; // item 1's start
                                                                              // Item 1: uvarint length (2 bytes), literal tag f0 b6, then f9 02 57 a0 + parent hash.
    assert_eq!(
        data[start1 + 2..start1 + 8],
        [0xf0, 0xb6, 0xf9, 0x02, 0x57, 0xa0]
    );
    data[start1 + 12] ^= 0x01; // a byte of the parent hash
    std::fs::write(d.join("headers.0000.cdat"), &data).unwrap();
    let f = Freezer::open(&d).unwrap();
    let hd = decode_header(&f.header(1).unwrap()).unwrap();
    let v = check_hash(&hd, f.hash(1).unwrap()).unwrap();
    assert_eq!((v.block, v.rule), (1, Rule::Hash));
    assert_ne!(hd.header.parent_hash, f.hash(0).unwrap());
    std::fs::remove_dir_all(d).unwrap();
}

#[test]
fn eth_freezer_bad_index_order() {
    let d = scratch("order");
    copy_fixture(&d);
    let mut idx = std::fs::read(d.join("bodies.cidx")).unwrap();
    idx[17] = 0x01; // entry 2 ends at 0x01, before entry 1 (0x06): not allowed in one file
    std::fs::write(d.join("bodies.cidx"), &idx).unwrap();
    let e = Freezer::open(&d).unwrap_err();
    assert!(matches!(e.kind, ErrorKind::BadIndex(_)), "{e}");
    assert_eq!(e.offset, Some(12));
    std::fs::remove_dir_all(d).unwrap();
}

/// Spec §1.12: raw table, max file size 40, six 20-byte items ff.., ee.., dd.., cc.., bb.., aa...
fn worked_example(dir: &Path) {
    let index = "000000000000 000000000014 000000000028 000100000014 000100000028 000200000014 000200000028";
    std::fs::write(dir.join("t.ridx"), unhex(index)).unwrap();
    for (f, a, b) in [(0, 0xff, 0xee), (1, 0xdd, 0xcc), (2, 0xbb, 0xaa)] {
        let mut d = vec![a; 20];
        d.extend(vec![b; 20]);
        std::fs::write(dir.join(format!("t.{f:04}.rdat")), d).unwrap();
    }
}

fn unhex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn eth_freezer_worked_example_and_tail() {
    let d = scratch("worked");
    worked_example(&d);
    let t = Table::open(&d, "t").unwrap().unwrap();
    assert!(t.meta().is_none()); // geth < v1.10.17: no .meta
    assert_eq!(t.items(), 6);
    for (n, b) in [0xffu8, 0xee, 0xdd, 0xcc, 0xbb, 0xaa].iter().enumerate() {
        // item 2 starts at (0, 40) and ends at (1, 20): read from the start of file 1.
        assert_eq!(t.retrieve(n as u64).unwrap(), vec![*b; 20], "item {n}");
    }
    // After truncateTail(4): files 0 and 1 deleted, index rewritten, meta v2 tail 4 flush 18.
    std::fs::remove_file(d.join("t.0000.rdat")).unwrap();
    std::fs::remove_file(d.join("t.0001.rdat")).unwrap();
    std::fs::write(
        d.join("t.ridx"),
        unhex("000200000004 000200000014 000200000028"),
    )
    .unwrap();
    std::fs::write(d.join("t.meta"), unhex("c3020412")).unwrap();
    let t = Table::open(&d, "t").unwrap().unwrap();
    assert_eq!((t.item_offset(), t.tail(), t.items()), (4, 4, 6));
    assert_eq!(t.retrieve(4).unwrap(), vec![0xbb; 20]);
    assert_eq!(t.retrieve(5).unwrap(), vec![0xaa; 20]);
    for n in 0..4 {
        assert_eq!(
            t.retrieve(n).unwrap_err().kind,
            ErrorKind::OutOfRange {
                number: n,
                first: 4,
                end: 6
            }
        );
    }
    // A virtual tail beyond the deleted items hides item 4 too (meta v1, tail 5: c20105).
    std::fs::write(d.join("t.meta"), unhex("c20105")).unwrap();
    let t = Table::open(&d, "t").unwrap().unwrap();
    assert_eq!(t.tail(), 5);
    assert!(matches!(
        t.retrieve(4).unwrap_err().kind,
        ErrorKind::OutOfRange { .. }
    ));
    assert_eq!(t.retrieve(5).unwrap(), vec![0xaa; 20]);
    // A v2 meta with flush offset 0 (as a fresh one before geth's first repair, spec c3028080;
    // here with tail 4: c3020480) still keeps the tail entry.
    std::fs::write(d.join("t.meta"), unhex("c3020480")).unwrap();
    std::fs::write(d.join("t.ridx"), unhex("000200000004")).unwrap();
    let t = Table::open(&d, "t").unwrap().unwrap();
    assert_eq!((t.items(), t.ignored_index_bytes()), (4, 0));
    std::fs::write(
        d.join("t.ridx"),
        unhex("000200000004 000200000014 000200000028"),
    )
    .unwrap();
    // Index bytes beyond a v2 flush offset (12 = two entries) are not trusted.
    std::fs::write(d.join("t.meta"), unhex("c302040c")).unwrap();
    let t = Table::open(&d, "t").unwrap().unwrap();
    assert_eq!((t.items(), t.ignored_index_bytes()), (5, 6));
    assert_eq!(t.retrieve(4).unwrap(), vec![0xbb; 20]);
    std::fs::remove_dir_all(d).unwrap();
}

/// geth `--dev` (`AllDevChainProtocolChanges`) of the release that wrote the fixture: `.meta`
/// version 1 and diffs mean v1.10.17..v1.14.x, whose dev chain has every block fork and
/// Shanghai/Cancun at 0 and no Prague (its headers have 20 fields).
const DEV: ChainConfig = ChainConfig {
    homestead: Some(0),
    dao: None,
    byzantium: Some(0),
    constantinople: Some(0),
    muir_glacier: Some(0),
    london: Some(0),
    arrow_glacier: Some(0),
    gray_glacier: Some(0),
    shanghai_time: Some(0),
    cancun_time: Some(0),
    prague_time: None,
    osaka_time: None,
    bpo1_time: None,
    bpo2_time: None,
    merge_block: None,
};

#[test]
fn eth_freezer_devchain_verifies() {
    // geth wrote and accepted these six blocks: every header rule, hash, link, body commitment
    // and TD passes.
    let f = Freezer::open(fixture()).unwrap();
    let r = verify_freezer(&f, &DEV, 0, u64::MAX);
    assert_eq!(r.violations, vec![]);
    assert_eq!(
        (r.first_block, r.end_block, r.transactions, r.pruned_bodies),
        (0, 6, 0, 0)
    );
    assert_eq!(r.last_hash, f.hash(5).unwrap());
    assert_eq!(r.final_td, Some(U256::from(1)));
}

#[test]
fn eth_freezer_damage_is_a_verdict() {
    // Header 1's bytes altered (as above) and headers.0000.cdat cut inside item 5: blocks 1 and 2
    // fail (hash, and 2's parent link), block 5 is a Decode verdict, the rest pass.
    let d = scratch("verdict");
    copy_fixture(&d);
    let mut data = std::fs::read(d.join("headers.0000.cdat")).unwrap();
    let idx = std::fs::read(d.join("headers.cidx")).unwrap();
    let start1 = u32::from_be_bytes(idx[8..12].try_into().unwrap()) as usize;
    data[start1 + 12] ^= 0x01;
    data.truncate(1800);
    std::fs::write(d.join("headers.0000.cdat"), &data).unwrap();
    let f = Freezer::open(&d).unwrap();
    let r = verify_freezer(&f, &DEV, 0, 6);
    let rules: Vec<_> = r.violations.iter().map(|v| (v.block, v.rule)).collect();
    assert!(rules.contains(&(1, Rule::Hash)), "{rules:?}");
    assert!(rules.contains(&(1, Rule::ParentHash)), "{rules:?}");
    assert!(rules.contains(&(2, Rule::ParentHash)), "{rules:?}");
    assert!(rules.contains(&(5, Rule::Decode)), "{rules:?}");
    assert!(
        rules.iter().all(|(b, _)| [1, 2, 5].contains(b)),
        "{rules:?}"
    );
    let five = r.violations.iter().find(|v| v.block == 5).unwrap();
    assert!(
        five.detail.contains("headers.cidx") && five.detail.contains("1833"),
        "{}",
        five.detail
    );
    std::fs::remove_dir_all(d).unwrap();
}
