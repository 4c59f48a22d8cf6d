//! Damaged copies of the real era1 files and the spec's snappy vectors: every damage gives its
//! specific typed error (or verdict) with its location, never a panic.

use rechain_native::eth::chain_config::MAINNET;
use rechain_native::eth::e2store;
use rechain_native::eth::era1::Era1;
use rechain_native::eth::header::decode_header;
use rechain_native::eth::rules::Rule;
use rechain_native::eth::snappy::{decode_framed, decode_raw, masked_crc32c};
use rechain_native::eth::validate::verify_era1;
use rechain_native::eth::{keccak256, ErrorKind, B256};
use std::path::PathBuf;

const FILE: &str = "mainnet-00003-d8b8a40b.era1";

fn real() -> (PathBuf, Vec<u8>) {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/data/ethereum/era1")
        .join(FILE);
    let b = std::fs::read(&p).unwrap();
    (p, b)
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Spec §4.1: the 217-byte framed-snappy genesis header (ethereumjs snappy.spec.ts).
const GENESIS_FRAMED: &str = "ff060000734e6150705900cb0000ec6da9a6970410f90214a0007a010088a01dcc4de8dec75d7aab85b567b6ccd41ad312451b948a7413f0a142fd40d4934794004a4200f043a0d7f8974fb5ac78d9ac099b9ad5018bedc2ce0a72dad1827a1709da30580f0544a056e81f171bcc55a6ff8345e692c0f86e5b48e01b996cadc001622fb5e363b421a0567a210004b9014a7800fe0100fe0100fe0100b6010004850401f098808213888080a011bbe8db4e347b4e8c937c1c8370e4b5ed33adb3db69cbdb7a38e1e50b1b82fa82ea0120880000000000000042";

#[test]
fn eth_snappy_genesis_vectors() {
    let framed = unhex(GENESIS_FRAMED);
    assert_eq!(framed.len(), 217);
    let header = decode_framed(&framed).unwrap();
    assert_eq!(header.len(), 535);
    let g = decode_header(&header).unwrap();
    assert_eq!(
        g.hash,
        "d4e56740f876aef8c010b86a40d5f56745a118d0906a34e69aec8c0db1cb8fa3"
            .parse::<B256>()
            .unwrap()
    );
    assert_eq!(g.fields, 15);
    assert_eq!(g.header.gas_limit, 5000);
    assert_eq!(g.header.nonce.0, [0, 0, 0, 0, 0, 0, 0, 0x42]);
    // Bytes 18..217 are a raw snappy block (freezer-style) of the same header.
    assert_eq!(decode_raw(&framed[18..]).unwrap(), header);
    // Masked CRC bytes ec6da9a6 (CRC-32C 418a0213, masked a6a96dec).
    assert_eq!(crc32c::crc32c(&header), 0x418a_0213);
    assert_eq!(masked_crc32c(&header), 0xa6a9_6dec);
}

#[test]
fn eth_snappy_flipped_crc_and_data() {
    let framed = unhex(GENESIS_FRAMED);
    let mut bad = framed.clone();
    bad[14] ^= 0x01; // first CRC byte of the chunk at offset 10
    let e = decode_framed(&bad).unwrap_err();
    assert_eq!(e.offset, Some(10));
    assert!(
        matches!(
            e.kind,
            ErrorKind::SnappyCrc {
                stored: 0xa6a96ded,
                computed: 0xa6a96dec
            }
        ),
        "{e:?}"
    );
    // A flipped byte in the compressed data decodes to different bytes: CRC mismatch too.
    let mut bad = framed.clone();
    bad[216] ^= 0x01; // last byte of the nonce literal
    assert!(matches!(
        decode_framed(&bad).unwrap_err().kind,
        ErrorKind::SnappyCrc { .. }
    ));
    // Missing stream identifier, reserved chunk type, truncated chunk.
    assert!(matches!(
        decode_framed(&framed[10..]).unwrap_err().kind,
        ErrorKind::SnappyFraming(_)
    ));
    let mut bad = framed.clone();
    bad[10] = 0x05;
    assert!(matches!(
        decode_framed(&bad).unwrap_err().kind,
        ErrorKind::SnappyFraming(_)
    ));
    let e = decode_framed(&framed[..200]).unwrap_err();
    assert!(
        matches!(
            e.kind,
            ErrorKind::Truncated {
                need: 203,
                have: 186,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn eth_era1_truncated() {
    let (p, b) = real();
    for cut in [b.len() - 1, b.len() - 100, b.len() / 2, 9, 3] {
        let e = Era1::from_bytes(b[..cut].to_vec()).unwrap_err();
        assert!(
            matches!(e.kind, ErrorKind::Truncated { .. } | ErrorKind::Layout(_)),
            "cut {cut}: {e:?}"
        );
        assert!(e.offset.is_some());
    }
    // A cut inside the BlockIndex value is a truncated record at the index record's offset.
    let acc_end = b.len() - (24 + 8 * 8192);
    let e = Era1::from_bytes(b[..b.len() - 1].to_vec()).unwrap_err();
    assert_eq!(e.offset, Some(acc_end as u64));
    assert!(matches!(
        e.kind,
        ErrorKind::Truncated {
            what: "e2store record value",
            ..
        }
    ));
    // The file path is attached when opening a file.
    let dir = std::env::temp_dir().join(format!("rechain-eth-trunc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cut = dir.join(FILE);
    std::fs::write(&cut, &b[..b.len() - 1]).unwrap();
    assert_eq!(Era1::open(&cut).unwrap_err().file, Some(cut.clone()));
    std::fs::remove_dir_all(dir).unwrap();
    let _ = p;
}

#[test]
fn eth_era1_record_damage() {
    let (_, b) = real();
    let era = Era1::from_bytes(b.clone()).unwrap();
    let first = era.block(24_576).unwrap();
    let off = first.offset as usize;
    // Reserved bytes of the first CompressedHeader record.
    let mut bad = b.clone();
    bad[off + 6] = 1;
    let e = Era1::from_bytes(bad).unwrap_err();
    assert_eq!(
        (e.kind, e.offset),
        (ErrorKind::ReservedNonZero, Some(off as u64))
    );
    // Flipped CRC byte in block 24,576's header value: the file's layout is fine, the block
    // read fails with a CRC error at that chunk (value starts at off+8, chunk at +10).
    let mut bad = b.clone();
    bad[off + 8 + 14] ^= 0x01;
    let era = Era1::from_bytes(bad).unwrap();
    let e = era.block(24_576).unwrap_err();
    assert!(matches!(e.kind, ErrorKind::SnappyCrc { .. }), "{e:?}");
    assert_eq!((e.block, e.offset), (Some(24_576), Some(off as u64 + 18)));
    era.block(24_577).unwrap(); // the neighbours are still good
                                // verify_era1 reports it as a Decode verdict and still checks the rest of the file.
    let report = verify_era1(&era, &MAINNET, Some(FILE), None);
    let rules: Vec<_> = report
        .violations
        .iter()
        .map(|v| (v.block, v.rule))
        .collect();
    assert!(rules.contains(&(24_576, Rule::Decode)));
    assert!(rules.contains(&(24_576, Rule::AccumulatorRecord)));
    assert!(
        report.violations.iter().all(|v| v.block == 24_576),
        "{rules:?}"
    );
}

#[test]
fn eth_era1_index_damage() {
    let (_, b) = real();
    let idx = b.len() - (24 + 8 * 8192);
    // offset[0] moved by 8 bytes: no longer on a record.
    let mut bad = b.clone();
    let at = idx + 16;
    let o = i64::from_le_bytes(bad[at..at + 8].try_into().unwrap()) + 8;
    bad[at..at + 8].copy_from_slice(&o.to_le_bytes());
    let e = Era1::from_bytes(bad).unwrap_err();
    assert!(matches!(e.kind, ErrorKind::Layout(_)));
    assert_eq!((e.block, e.offset), (Some(24_576), Some(idx as u64)));
    // count says 8191 but the record holds 8192 offsets.
    let mut bad = b.clone();
    let n = bad.len();
    bad[n - 8..].copy_from_slice(&8191u64.to_le_bytes());
    assert!(matches!(
        Era1::from_bytes(bad).unwrap_err().kind,
        ErrorKind::Layout(_)
    ));
    // Not a Version record first.
    let mut bad = b.clone();
    bad[0] = 0x66;
    assert!(matches!(
        Era1::from_bytes(bad).unwrap_err().kind,
        ErrorKind::Layout(_)
    ));
}

#[test]
fn eth_era1_accumulator_damage() {
    let (_, b) = real();
    let era = Era1::from_bytes(b.clone()).unwrap();
    let acc = era.accumulator_offset() as usize;
    let mut bad = b.clone();
    bad[acc + 8] ^= 0xff; // first byte of the stored root
    let era = Era1::from_bytes(bad).unwrap();
    let report = verify_era1(
        &era,
        &MAINNET,
        Some(FILE),
        Some(rechain_native::eth::accumulator::mainnet()),
    );
    let rules: Vec<_> = report.violations.iter().map(|v| v.rule).collect();
    assert_eq!(rules, vec![Rule::AccumulatorRecord]);
    // The right data under the wrong name / epoch: name, epoch start and list checks fail.
    let era = Era1::from_bytes(b).unwrap();
    let report = verify_era1(
        &era,
        &MAINNET,
        Some("mainnet-00004-d8b8a40c.era1"),
        Some(rechain_native::eth::accumulator::mainnet()),
    );
    let rules: Vec<_> = report.violations.iter().map(|v| v.rule).collect();
    assert_eq!(
        rules,
        vec![
            Rule::AccumulatorName,
            Rule::EpochStart,
            Rule::AccumulatorList
        ]
    );
}

#[test]
fn eth_e2store_walk_of_real_file() {
    // Records tile the file: Version, 8192 × (header, body, receipts, TD), Accumulator, BlockIndex.
    let (_, b) = real();
    let recs: Vec<_> = e2store::Records::new(&b).collect::<Result<_, _>>().unwrap();
    assert_eq!(recs.len(), 1 + 4 * 8192 + 2);
    assert_eq!(recs[0].typ, e2store::VERSION);
    assert_eq!(recs[1].typ, e2store::COMPRESSED_HEADER);
    assert_eq!(recs[recs.len() - 2].typ, e2store::ACCUMULATOR);
    assert_eq!(recs.last().unwrap().value.len(), 16 + 8 * 8192);
    assert_eq!(recs.last().unwrap().end(), b.len() as u64);
    let _ = keccak256([0u8]);
}
