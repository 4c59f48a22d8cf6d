//! The checkpoint module's tests: flow-go's vectors, the writers against each other, damage.

use super::build::*;
use super::format::*;
use super::write::*;
use super::*;
use crate::flow::from_hex;
use crate::flow::hash::{empty_root, Hash, Path};
use crate::flow::mtrie::Forest;
use crate::flow::mtrie::Trie;
use crate::flow::node::Node;
use crate::flow::record::tests::{p1, p2, p3, path, payload};
use crate::flow::record::Payload;
use crate::flow::record::TrieUpdate;
use std::fs::File;
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;

// Spec §6.6, written by flow-go v0.33.1's StoreCheckpointV6SingleThread.
const A_MAIN: &str = concat!(
    "21370006001080bda53780bda53780bda53780bda53780bda53780bda53780bda53780bda53780bda53780bda53780bd",
    "a53780bda53780bda53780bda53780bda53780bda5372e86c9d4eff20459",
);
const A_TOP: &str = concat!(
    "213500060000000000000000000100e31b266ccd2d953edd950c40e5548de9d9b34e1d9589ff37920a212a908a0c0e00",
    "00000000000000000000000000000000000000000000000000000000000001000000230000001800020000000800006f",
    "776e6572310000000600026b657931000000030102030000feda7938883bbdfe820d66c344be3c713714c3fa5fae9349",
    "673f3b68898d8c9285000000000000000000000000000000000000000000000000000000000000000100000023000000",
    "1800020000000800006f776e6572310000000600026b657931000000030102030000feed4de5812109053383cbf8c13c",
    "516d296c66d7a9b817ac2d768f606529d9a50f4000000000000000000000000000000000000000000000000000000000",
    "000002000000210000001800020000000800006f776e6572330000000600026b65793300000001ff0100ffcea280ae63",
    "5e3c6e8629756b525d4a4031f638d3dcaf3efa674829c5fe1a6c02000000000000000200000000000000030000ff52c8",
    "ccbbe602a9bae3336e87fb67076e721a87e3f14c9c4fac0b213a1ad1491d800000000000000000000000000000000000",
    "0000000000000000000000000000000000250000001800020000000800006f776e6572320000000600026b6579320000",
    "000568656c6c6f0101007e583937806bd83c39d6c18c25780993a0f74ba29a5b6537679e45fcb105a545000000000000",
    "000400000000000000050000ff3f68ae3f9df50bf5d552e321afe368ff1e11696cac7d4be0c402567d11fc92b2800000",
    "0000000000000000000000000000000000000000000000000000000000000000260000001800020000000800006f776e",
    "6572320000000600026b65793200000006776f726c6421010100b859be6139eb870894f1dbf7e83248a206f339f97898",
    "ceab22e29b3b7e51d3550000000000000004000000000000000700000000000000010000000000000001000000000000",
    "001be31b266ccd2d953edd950c40e5548de9d9b34e1d9589ff37920a212a908a0c0e0000000000000006000000000000",
    "000300000000000000517e583937806bd83c39d6c18c25780993a0f74ba29a5b6537679e45fcb105a545000000000000",
    "000800000000000000030000000000000052b859be6139eb870894f1dbf7e83248a206f339f97898ceab22e29b3b7e51",
    "d355000000000000000800032e86c9d4",
);
const B_MAIN: &str = concat!(
    "21370006001023543dbd80bda53780bda53780bda53780bda53780bda53780bda53780bda53780bda53780bda53780bd",
    "a53780bda53780bda53780bda53780bda53780bda5374dcffb161f606b86",
);
const B_PART0: &str = concat!(
    "213600060000f8fdd81693ae852126e9b7eb1efffcaad3a99d35f32d1f50847bd942346abeab6e000000000000000000",
    "0000000000000000000000000000000000000000000001000000230000001800020000000800006f776e657231000000",
    "0600026b657931000000030102030000f81df29c1eda75502b783bb0f3edf44018b7530b4c97faec0ff3aad146be64b3",
    "240100000000000000000000000000000000000000000000000000000000000000000000210000001800020000000800",
    "006f776e6572710000000600026b65797100000001aa0100f9dec888135604e4af783ac8ee3f3ba185c2bfe27a0a9329",
    "f5f686133e436787b5000000000000000100000000000000020100faa22c4bc15120efd000ee9d3e1a8e818db9abfc5a",
    "c8cdb10c4b644b359e522dbe000000000000000300000000000000000100fb994658e595680bb3066604102e1aa58170",
    "e6df60c4959f029d5326c4b16426ae000000000000000400000000000000000100fc5e702fddba8e219dcf1c35270bf1",
    "755658d8339514b549696494801a23786eab000000000000000500000000000000000000f89b5a8be73d201a815b2a83",
    "e268df44181f9decb08b8b1afd39ad43d56ad5dd92010000000000000000000000000000000000000000000000000000",
    "0000000000000000220000001800020000000800006f776e6572710000000600026b65797100000002bbcc0100f9e4b9",
    "8294ca2fba802dc35caf0db89c09b67be4f439a6742bbd194cbf3b0e837d000000000000000100000000000000070100",
    "fa3ca3c1d15c02e8a9dc2cd90fe42db0d02d1af5757546ec3faeb2c19e87036cca000000000000000800000000000000",
    "000100fba857bee37c97aa300da5be1a58af4662b03fd5212ad3f7f0043d834641fd7d07000000000000000900000000",
    "000000000100fc9a3a4b88e021be69a8f55f0dde2cc66c43f83f3ddc612d5529595caaa642cbe1000000000000000a00",
    "00000000000000000000000000000b23543dbd",
);
const B_TOP: &str = concat!(
    "21350006000000000000000b0100fd97f61e7199f299077ba2816eb5ea2c50f682a2f72116ee85350efaf5b016f4b400",
    "0000000000000600000000000000000100fec48b570d40aeb7975cc0340fdf0161319d110122df45f34c58206acd3d6b",
    "3c64000000000000000c00000000000000000100ffdde00867f684f1953e0d0fa22a25152df21bbb1c6d8da4dabad233",
    "95e585094e000000000000000d0000000000000000010100ceeb7dee155d185d2d448a1a3a44d686827e103a1c1c7e8a",
    "fd6b6206704bb000000000000000000e00000000000000000100fd62eab6e19ac785addb1566ace8f8328e0576430e27",
    "54958d2a8810e5da8df942000000000000000b00000000000000000100fe724f2f1c307e4aa8455eea7d06474b2cfe94",
    "143f1a96fdcf0feddb88943f4877000000000000001000000000000000000100ff9fc9e28c92cc5ac19ca772d449be8a",
    "d595c2ce99bbad44bbd498f889898f03e7000000000000001100000000000000000101000f14e49c62eb4cc35069982a",
    "ef192e87c34def0ae019221e665d3a8cb0c16e4700000000000000120000000000000000000000000000000000000000",
    "000000000000000000000000568f4ec740fe3b5de88034cb7b1fbddb41548b068f31aebc8ae9189e429c574900000000",
    "0000000f00000000000000020000000000000034ceeb7dee155d185d2d448a1a3a44d686827e103a1c1c7e8afd6b6206",
    "704bb0000000000000000013000000000000000200000000000000350f14e49c62eb4cc35069982aef192e87c34def0a",
    "e019221e665d3a8cb0c16e47000000000000000800034dcffb16",
);
const EMPTY_PART: &str = "21360006000000000000000080bda537";

fn hexs(s: &str) -> Vec<u8> {
    from_hex(s).unwrap()
}

pub(crate) fn upd(root: Hash, writes: Vec<(Path, Arc<Payload>)>) -> TrieUpdate {
    TrieUpdate {
        root,
        paths: writes.iter().map(|w| w.0).collect(),
        payloads: writes.into_iter().map(|w| w.1).collect(),
    }
}

pub(crate) fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rechain-cp-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn q() -> Path {
    path("0100000000000000000000000000000000000000000000000000000000000000")
}

/// Fields on both sides of a buffer refill and a value longer than the reader's buffer
/// come back as written, with the CRC of every byte read and the offset after them; a
/// field past the end is refused without being read.
#[test]
fn part_reader_fields_across_refills_and_long_values() {
    let dir = tmp("reader");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("part");
    let long: Vec<u8> = (0..IO_BUF * 5 / 2)
        .map(|i| (i * 7 + i / 251) as u8)
        .collect();
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&0xbeefu16.to_be_bytes());
    bytes.resize(IO_BUF - 3, 9); // the next u64 straddles the first refill
    bytes.extend_from_slice(&0x0102030405060708u64.to_be_bytes());
    bytes.extend_from_slice(&long);
    bytes.extend_from_slice(&[0xab; 32]);
    bytes.extend_from_slice(&0xcafef00du32.to_be_bytes());
    std::fs::write(&file, &bytes).unwrap();
    let mut r = PartReader::new(&file, File::open(&file).unwrap(), 0, bytes.len() as u64);
    assert_eq!(r.u16("a").unwrap(), 0xbeef);
    assert_eq!(r.vec(IO_BUF - 5, "pad").unwrap(), vec![9; IO_BUF - 5]);
    assert_eq!(r.u64("b").unwrap(), 0x0102030405060708);
    assert_eq!(r.vec(long.len(), "long").unwrap(), long);
    assert_eq!(r.hash("c").unwrap(), [0xab; 32]);
    let before = r.offset;
    assert_eq!(r.u64("past the end").unwrap_err().kind, "truncated");
    assert_eq!(r.offset, before);
    assert_eq!(r.u32("d").unwrap(), 0xcafef00d);
    assert_eq!(r.offset, bytes.len() as u64);
    assert_eq!(r.crc(), crc(&bytes));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Tries U1, U3, U4 of §6.2, built in one forest (so U4 shares U3's untouched nodes).
fn tries_a() -> Vec<Trie> {
    let mut f = Forest::new(10, 1);
    let e = empty_root();
    let u1 = f
        .update(&upd(e, vec![(p1(), payload("owner1", "key1", &[1, 2, 3]))]))
        .unwrap()
        .root;
    let u3 = f
        .update(&upd(
            e,
            vec![
                (p1(), payload("owner1", "key1", &[1, 2, 3])),
                (p2(), payload("owner2", "key2", b"hello")),
                (p3(), payload("owner3", "key3", &[0xff])),
            ],
        ))
        .unwrap()
        .root;
    let u4 = f
        .update(&upd(
            u3,
            vec![
                (p2(), payload("owner2", "key2", b"IGNORED")),
                (p2(), payload("owner2", "key2", b"world!")),
            ],
        ))
        .unwrap()
        .root;
    [u1, u3, u4]
        .iter()
        .map(|r| f.get(r).unwrap().clone())
        .collect()
}

/// Tries E, tA, tB of §6.6 checkpoint B.
fn tries_b() -> Vec<Trie> {
    let mut f = Forest::new(10, 1);
    let e = empty_root();
    let ta = f
        .update(&upd(
            e,
            vec![
                (p1(), payload("owner1", "key1", &[1, 2, 3])),
                (q(), payload("ownerq", "keyq", &[0xaa])),
            ],
        ))
        .unwrap()
        .root;
    let tb = f
        .update(&upd(
            ta,
            vec![(q(), payload("ownerq", "keyq", &[0xbb, 0xcc]))],
        ))
        .unwrap()
        .root;
    [e, ta, tb]
        .iter()
        .map(|r| f.get(r).unwrap().clone())
        .collect()
}

fn file(dir: &FsPath, name: &str) -> Vec<u8> {
    std::fs::read(dir.join(name)).unwrap()
}

#[test]
fn writes_flow_go_vector_a_byte_for_byte() {
    let dir = tmp("a");
    let name = checkpoint_name(0);
    for threads in [1, 3] {
        let info = write_tries(&tries_a(), &dir, &name, threads).unwrap();
        assert_eq!(file(&dir, &name), hexs(A_MAIN));
        assert_eq!(file(&dir, &part_name(&name, TOP_PART)), hexs(A_TOP));
        for i in 0..SUBTRIE_COUNT {
            assert_eq!(file(&dir, &part_name(&name, i)), hexs(EMPTY_PART));
        }
        assert_eq!(info.top_nodes, 8);
        assert_eq!(info.bytes, 78 + 880 + 16 * 16);
    }
    // Only the 18 files: no temporaries left behind.
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 18);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn writes_flow_go_vector_b_byte_for_byte() {
    let dir = tmp("b");
    let name = checkpoint_name(7);
    write_tries(&tries_b(), &dir, &name, 2).unwrap();
    assert_eq!(file(&dir, &name), hexs(B_MAIN));
    assert_eq!(file(&dir, &part_name(&name, 0)), hexs(B_PART0));
    assert_eq!(file(&dir, &part_name(&name, TOP_PART)), hexs(B_TOP));
    for i in 1..SUBTRIE_COUNT {
        assert_eq!(file(&dir, &part_name(&name, i)), hexs(EMPTY_PART));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// flow-go's bytes (not ours) load back to the §6.2 roots and counters.
#[test]
fn reads_flow_go_vectors() {
    let dir = tmp("rb");
    let name = checkpoint_name(7);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(&name), hexs(B_MAIN)).unwrap();
    std::fs::write(dir.join(part_name(&name, 0)), hexs(B_PART0)).unwrap();
    std::fs::write(dir.join(part_name(&name, TOP_PART)), hexs(B_TOP)).unwrap();
    for i in 1..SUBTRIE_COUNT {
        std::fs::write(dir.join(part_name(&name, i)), hexs(EMPTY_PART)).unwrap();
    }
    for verify in [Verify::Full, Verify::Interior, Verify::None] {
        let l = load(&dir, &name, 4, verify).unwrap();
        let got: Vec<_> = l
            .tries
            .iter()
            .map(|t| (t.root_hash().to_hex(), t.reg_count, t.reg_size))
            .collect();
        assert_eq!(
            got,
            vec![
                (empty_root().to_hex(), 0, 0),
                (
                    "ceeb7dee155d185d2d448a1a3a44d686827e103a1c1c7e8afd6b6206704bb000".into(),
                    2,
                    52
                ),
                (
                    "0f14e49c62eb4cc35069982aef192e87c34def0ae019221e665d3a8cb0c16e47".into(),
                    2,
                    53
                ),
            ]
        );
        assert!(l.tries.iter().all(|t| t.verify_hashes().unwrap()));
        let counted: Vec<u64> = l
            .tries
            .iter()
            .map(|t| count_registers(t).unwrap())
            .collect();
        assert_eq!(counted, vec![0, 2, 2]);
        assert_eq!(l.parts[0].nodes, 11);
        assert_eq!(l.top_nodes, 8);
    }
    assert_eq!(verify_part(&dir, &name, 0, Verify::Full).unwrap().leaves, 3);
    std::fs::remove_dir_all(&dir).unwrap();
}

pub(crate) fn random_registers(n: usize, seed: u64) -> Vec<(Path, Arc<Payload>)> {
    let mut x = seed;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut regs: Vec<(Path, Arc<Payload>)> = (0..n)
        .map(|i| {
            let mut b = [0u8; 32];
            for c in b.iter_mut() {
                *c = next() as u8;
            }
            if i % 7 == 0 {
                b[..3].fill(0x11); // long shared prefixes: chains of interior nodes
            }
            let v = vec![next() as u8; 1 + (next() % 40) as usize];
            (Path(b), payload(&format!("o{i}"), "k", &v))
        })
        .collect();
    regs.sort_by_key(|r| r.0);
    regs.dedup_by_key(|r| r.0);
    regs
}

pub(crate) fn read_all(dir: &FsPath) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

/// The streaming builder writes the same bytes as writing the trie that one flow-go update
/// of the same registers builds, for tiny and larger register sets, batch sizes and threads.
#[test]
fn builder_matches_the_trie_writer() {
    for (n, batch, threads) in [
        (0usize, 1usize, 1usize),
        (1, 1, 1),
        (2, 1, 2),
        (3, 2, 1),
        (17, 5, 2),
        (300, 64, 2),
        (2000, 333, 3),
    ] {
        let regs = random_registers(n, 7 + n as u64);
        let mut f = Forest::new(4, 1);
        let root = f.update(&upd(empty_root(), regs.clone())).unwrap().root;
        let trie = f.get(&root).unwrap().clone();
        let (da, db) = (tmp("ba"), tmp("bb"));
        let name = checkpoint_name(3);
        write_tries(std::slice::from_ref(&trie), &da, &name, 2).unwrap();
        let mut b = RegisterCheckpointBuilder::new(&db, &name, threads).unwrap();
        for chunk in regs.chunks(batch) {
            b.push(chunk.to_vec()).unwrap();
        }
        let info = b.finish().unwrap();
        assert_eq!(
            info.tries,
            vec![(trie.root_hash(), trie.reg_count, trie.reg_size)]
        );
        assert_eq!(read_all(&da), read_all(&db), "n = {n}");
        let mut r = RegisterCheckpointBuilder::root_only(threads);
        for chunk in regs.chunks(batch) {
            r.push(chunk.to_vec()).unwrap();
        }
        assert_eq!(r.finish().unwrap().tries, info.tries, "root only, n = {n}");
        let l = load(&db, &name, 2, Verify::Full).unwrap();
        assert_eq!(l.tries[0].root_hash(), root);
        std::fs::remove_dir_all(&da).unwrap();
        std::fs::remove_dir_all(&db).unwrap();
    }
}

/// Cached leaf hashes (as `register_hashes` keeps them) give the same bytes without the
/// hash chains; a cache entry whose `HashLeaf` or height does not match is not used.
#[test]
fn builder_takes_matching_cached_leaf_hashes_only() {
    let regs = random_registers(700, 11);
    let mut f = Forest::new(4, 1);
    let root = f.update(&upd(empty_root(), regs.clone())).unwrap().root;
    let trie = f.get(&root).unwrap().clone();
    let leaves = trie.leaves().next_leaf_nodes(usize::MAX).unwrap();
    assert_eq!(leaves.len(), regs.len());
    let mut cache: Vec<Option<CachedLeaf>> = leaves
        .iter()
        .map(|n| match &**n {
            Node::Leaf { height, reg, hash } => Some(CachedLeaf {
                height: *height,
                leaf_hash: crate::flow::hash::hash_leaf(reg.path(), reg.value()),
                node_hash: *hash,
            }),
            Node::Interior { .. } | Node::Paged { .. } => None,
        })
        .collect();
    let name = checkpoint_name(2);
    let want = tmp("cache-want");
    write_tries(std::slice::from_ref(&trie), &want, &name, 1).unwrap();
    let build = |cache: &[Option<CachedLeaf>], tag: &str| {
        let dir = tmp(tag);
        let mut b = RegisterCheckpointBuilder::new(&dir, &name, 2).unwrap();
        let rows: Vec<_> = regs
            .iter()
            .zip(cache)
            .map(|((p, pl), c)| (*p, pl.clone(), *c))
            .collect();
        for chunk in rows.chunks(97) {
            b.push_cached(chunk.to_vec()).unwrap();
        }
        (dir, b.finish().unwrap())
    };
    let (dir, info) = build(&cache, "cache-all");
    assert_eq!((info.cached_leaves, info.hashed_leaves), (700, 0));
    assert_eq!(read_all(&dir), read_all(&want));
    std::fs::remove_dir_all(&dir).unwrap();
    // Wrong height, wrong HashLeaf (a changed value), no entry: those three are hashed.
    let bad = cache[5].unwrap().node_hash;
    cache[3].as_mut().unwrap().height += 1;
    cache[4].as_mut().unwrap().leaf_hash = Hash([7; 32]);
    cache[4].as_mut().unwrap().node_hash = bad;
    cache[6] = None;
    let (dir, info) = build(&cache, "cache-some");
    assert_eq!((info.cached_leaves, info.hashed_leaves), (697, 3));
    assert_eq!(read_all(&dir), read_all(&want));
    std::fs::remove_dir_all(&dir).unwrap();
    // A wrong node hash behind a right HashLeaf changes the root (the caller compares it).
    cache[7].as_mut().unwrap().node_hash = bad;
    let (dir, info) = build(&cache, "cache-wrong");
    assert_ne!(info.tries[0].0, root);
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&want).unwrap();
}

/// A killed writer's temporary files are removed by the next writer of that checkpoint;
/// a live process's and other checkpoints' are left alone.
#[test]
fn stale_temporary_files_of_a_dead_writer_are_removed() {
    let dir = tmp("stale");
    std::fs::create_dir_all(&dir).unwrap();
    let name = checkpoint_name(5);
    let dead = format!("writing-{}-4294967290", part_name(&name, 3));
    let live = format!("writing-{}-1", part_name(&name, 3)); // pid 1 always runs
    let other = format!("writing-{}-4294967290", checkpoint_name(6));
    for f in [&dead, &live, &other] {
        std::fs::write(dir.join(f), b"x").unwrap();
    }
    write_tries(&tries_b(), &dir, &name, 1).unwrap();
    assert!(!dir.join(&dead).exists());
    assert!(dir.join(&live).exists() && dir.join(&other).exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn builder_rejects_unsorted_input_and_leaves_nothing() {
    let dir = tmp("unsorted");
    let mut regs = random_registers(50, 3);
    regs.swap(10, 20);
    let mut b = RegisterCheckpointBuilder::new(&dir, &checkpoint_name(1), 1).unwrap();
    let e = b.push(regs).unwrap_err();
    assert_eq!(e.kind, "unsorted_input");
    drop(b);
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
    std::fs::remove_dir_all(&dir).unwrap();
}

fn written_b(tag: &str) -> (PathBuf, String) {
    let dir = tmp(tag);
    let name = checkpoint_name(7);
    write_tries(&tries_b(), &dir, &name, 1).unwrap();
    (dir, name)
}

#[test]
fn every_flipped_byte_is_caught_with_file_and_offset() {
    let (dir, name) = written_b("flip");
    for part in [0usize, TOP_PART, 99] {
        let fname = if part == 99 {
            name.clone()
        } else {
            part_name(&name, part)
        };
        let good = file(&dir, &fname);
        for at in 0..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 0x40;
            std::fs::write(dir.join(&fname), &bad).unwrap();
            let e = load(&dir, &name, 1, Verify::Full).unwrap_err();
            assert!(e.file.ends_with(&fname), "{fname}@{at}: {e}");
            assert!(!e.message.is_empty());
        }
        std::fs::write(dir.join(&fname), &good).unwrap();
    }
    load(&dir, &name, 1, Verify::Full).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn truncated_missing_and_wrong_version() {
    let (dir, name) = written_b("bad");
    let p0 = part_name(&name, 0);
    let good = file(&dir, &p0);
    for cut in [0, 3, 10, 100, good.len() - 1] {
        std::fs::write(dir.join(&p0), &good[..cut]).unwrap();
        let e = load(&dir, &name, 1, Verify::Full).unwrap_err();
        assert!(e.file.ends_with(&p0), "{e}");
        assert!(
            ["truncated", "checksum", "bad_magic", "unsupported_version"].contains(&e.kind),
            "{e}"
        );
    }
    std::fs::remove_file(dir.join(&p0)).unwrap();
    let e = load(&dir, &name, 1, Verify::Full).unwrap_err();
    assert_eq!((e.kind, e.offset), ("missing_file", 0));
    assert!(e.file.ends_with(&p0));
    std::fs::write(dir.join(&p0), &good).unwrap();
    // Trailing bytes after a part's CRC.
    let mut longer = good.clone();
    longer.extend_from_slice(&[0, 0]);
    std::fs::write(dir.join(&p0), &longer).unwrap();
    assert!(load(&dir, &name, 1, Verify::Full).is_err());
    std::fs::write(dir.join(&p0), &good).unwrap();
    // A v6 header relabelled as a single-file version is read as one and fails as one,
    // naming the version; an unknown version is refused.
    let main = file(&dir, &name);
    for v in [1u16, 3, 4, 5, 7] {
        let mut bad = main.clone();
        bad[2..4].copy_from_slice(&v.to_be_bytes());
        std::fs::write(dir.join(&name), &bad).unwrap();
        let e = load(&dir, &name, 1, Verify::Full).unwrap_err();
        assert!(e.file.ends_with(&name), "{e}");
        assert!(e.message.contains(&format!("version {v}")), "{e}");
        if v == 7 {
            assert_eq!((e.kind, e.offset), ("unsupported_version", 2));
        }
    }
    std::fs::write(dir.join(&name), &main).unwrap();
    load(&dir, &name, 1, Verify::Full).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A leaf value changed with every CRC fixed up loads in flow-go (§7.1); here the
/// recomputed hash catches it.
#[test]
fn tampered_value_with_fixed_checksums_is_caught() {
    let (dir, name) = written_b("tamper");
    let p0 = part_name(&name, 0);
    let mut bytes = file(&dir, &p0);
    // Node 1 is leaf p1 (value 010203): its last value byte sits just before node 2.
    let at = 4 + 71 + 4 + 24 + 4 + 2;
    assert_eq!(bytes[at], 3);
    bytes[at] = 9;
    let n = bytes.len();
    let c = crc(&bytes[..n - 4]);
    bytes[n - 4..].copy_from_slice(&c.to_be_bytes());
    std::fs::write(dir.join(&p0), &bytes).unwrap();
    let mut main = file(&dir, &name);
    main[6..10].copy_from_slice(&c.to_be_bytes());
    let mc = crc(&main[..74]);
    main[74..].copy_from_slice(&mc.to_be_bytes());
    std::fs::write(dir.join(&name), &main).unwrap();
    let e = load(&dir, &name, 1, Verify::Full).unwrap_err();
    assert_eq!((e.kind, e.offset), ("hash_mismatch", 4 + 3));
    assert_eq!(
        verify_part(&dir, &name, 0, Verify::Full).unwrap_err().kind,
        "hash_mismatch"
    );
    // Without re-hashing the parts the stored hashes are trusted, as flow-go does.
    assert!(load(&dir, &name, 1, Verify::None).is_ok());
    assert!(load(&dir, &name, 1, Verify::Interior).is_ok());
    std::fs::remove_dir_all(&dir).unwrap();
}
