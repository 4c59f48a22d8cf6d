//! The streamed read's tests: against the in-memory load, paging in, damage named by file.

use super::*;
use crate::flow::checkpoint::page_in::page_in;
use crate::flow::checkpoint::{load, write_tries};
use crate::flow::mtrie::Forest;
use crate::flow::mtrie::Trie;
use crate::flow::node_store::NodeStore;
use crate::flow::record::tests::payload;
use crate::flow::record::TrieUpdate;
use crate::parquet_out::RowGroups;

fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rechain-cps-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(d.join("out")).unwrap();
    d
}

/// Two tries of one forest: 400 registers spread over every part (a few paths share
/// long prefixes), then 50 of them rewritten.
fn tries() -> Vec<Trie> {
    let mut f = Forest::new(10, 1);
    let mut writes = Vec::new();
    for i in 0u32..400 {
        let mut p = [0u8; 32];
        p[..4].copy_from_slice(&(i.wrapping_mul(2_654_435_761)).to_be_bytes());
        p[31] = i as u8;
        writes.push((
            crate::flow::hash::Path(p),
            payload("o", &format!("k{i}"), &i.to_be_bytes()),
        ));
    }
    let upd =
        |root, w: &[(crate::flow::hash::Path, Arc<crate::flow::record::Payload>)]| TrieUpdate {
            root,
            paths: w.iter().map(|x| x.0).collect(),
            payloads: w.iter().map(|x| x.1.clone()).collect(),
        };
    let first = f.update(&upd(empty_root(), &writes)).unwrap().root;
    let rewrite: Vec<_> = writes[..50]
        .iter()
        .map(|(p, _)| (*p, payload("o", "new", b"v")))
        .collect();
    let second = f.update(&upd(first, &rewrite)).unwrap().root;
    [first, second]
        .iter()
        .map(|r| f.get(r).unwrap().clone())
        .collect()
}

fn opts(dir: &FsPath, verify: Verify) -> StreamOptions {
    std::fs::create_dir_all(dir.join("sst")).unwrap();
    let files = |t: &str| {
        (0..SUBTRIE_COUNT)
            .map(|i| dir.join("out").join(format!("{t}-{i}")))
            .collect()
    };
    StreamOptions {
        threads: 2,
        verify,
        registers: files("r"),
        hashes: files("h"),
        layouts: RegisterLayouts::plain(RowGroups {
            rows: 64,
            bytes: 1 << 16,
        }),
        batch_bytes: 1 << 10,
        sst: Some(RegisterSst {
            dir: dir.join("sst"),
            max_held: 64,
            version: 1,
            compress: true,
        }),
    }
}

#[test]
fn streams_to_the_roots_and_registers_of_the_in_memory_load() {
    let dir = tmp("same");
    let name = "checkpoint.00000001";
    let t = tries();
    write_tries(&t[1..], &dir, name, 1).unwrap();
    let loaded = load(&dir, name, 1, Verify::Full).unwrap();
    for verify in [Verify::Full, Verify::Interior, Verify::None] {
        let (got, ssts) = stream(&dir, name, &opts(&dir, verify)).unwrap();
        // Each part's files in key order, and the parts in path order: names sort so.
        let mut sorted = ssts.clone();
        sorted.sort();
        assert_eq!(ssts, sorted);
        assert!(
            ssts.len() > SUBTRIE_COUNT,
            "files close at max_held: {ssts:?}"
        );
        assert!(ssts.iter().all(|f| f.is_file()));
        std::fs::remove_dir_all(dir.join("sst")).unwrap();
        let want: Vec<_> = loaded
            .tries
            .iter()
            .map(|t| (t.root_hash(), t.reg_count, t.reg_size))
            .collect();
        assert_eq!(got.tries, want);
        assert_eq!((got.rows, got.registers), (400, 400));
        let shape = |ps: &[PartInfo]| -> Vec<(u64, u64, u64)> {
            ps.iter().map(|p| (p.nodes, p.leaves, p.bytes)).collect()
        };
        assert_eq!(shape(&got.parts), shape(&loaded.parts));
        assert!(got.parts.iter().filter(|p| p.leaves > 0).count() == SUBTRIE_COUNT);
        // Verifying alone finds the same, and runs the same hashes.
        let walk = Walk {
            threads: 2,
            verify,
            batch_bytes: 1 << 10,
        };
        let checked = super::verify(&dir, name, walk).unwrap();
        assert_eq!(checked.tries, got.tries);
        assert_eq!((checked.rows, checked.registers), (400, 400));
        let work = |ps: &[PartInfo]| -> Vec<(u64, u64)> {
            ps.iter().map(|p| (p.nodes, p.permutations)).collect()
        };
        assert_eq!(work(&checked.parts), work(&got.parts));
    }
    // Several tries share nodes: refused before any part is read, for the in-memory load.
    write_tries(&t, &dir, "checkpoint.00000002", 1).unwrap();
    let e = stream(&dir, "checkpoint.00000002", &opts(&dir, Verify::Full)).unwrap_err();
    assert_eq!(e.kind, "shared_node");
    let e = super::verify(
        &dir,
        "checkpoint.00000002",
        Walk {
            threads: 1,
            verify: Verify::Full,
            batch_bytes: 1 << 10,
        },
    )
    .unwrap_err();
    assert_eq!(e.kind, "shared_node");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A checkpoint paged into a node store while streamed: the trie has the in-memory
/// load's root, counters and leaves, takes updates to the in-memory forest's roots, and
/// written out again it is byte for byte the checkpoint it came from (flow-go's bytes).
/// A damaged checkpoint fails with its file and offset.
#[test]
fn pages_a_checkpoint_into_a_node_store() {
    let dir = tmp("pagein");
    let name = "checkpoint.00000001";
    let t = tries();
    write_tries(&t[1..], &dir, name, 1).unwrap();
    let loaded = load(&dir, name, 1, Verify::Full).unwrap();
    let want = &loaded.tries[0];
    let walk = Walk {
        threads: 2,
        verify: Verify::Full,
        batch_bytes: 1 << 10,
    };
    let store = NodeStore::create(&dir.join("store"), 4 << 10).unwrap();
    let (info, trie) = page_in(&dir, name, walk, &store).unwrap();
    assert!(matches!(trie.root.as_deref(), Some(Node::Paged { .. })));
    assert_eq!(
        info.tries,
        vec![(want.root_hash(), want.reg_count, want.reg_size)]
    );
    assert_eq!(
        (trie.root_hash(), trie.reg_count, trie.reg_size),
        (want.root_hash(), want.reg_count, want.reg_size)
    );
    let leaves = |t: &Trie| -> Vec<(u16, Hash, Vec<u8>)> {
        t.leaves()
            .next_leaf_nodes(usize::MAX)
            .unwrap()
            .iter()
            .map(|n| match &**n {
                Node::Leaf { height, hash, reg } => (*height, *hash, reg.value().to_vec()),
                _ => panic!("a cursor yields leaves"),
            })
            .collect()
    };
    assert_eq!(leaves(&trie), leaves(want));
    assert!(trie.verify_hashes().unwrap());
    let out = dir.join("again");
    std::fs::create_dir_all(&out).unwrap();
    write_tries(std::slice::from_ref(&trie), &out, name, 2).unwrap();
    for i in 0..=SUBTRIE_COUNT {
        let f = crate::flow::checkpoint::part_name(name, i);
        assert_eq!(
            std::fs::read(out.join(&f)).unwrap(),
            std::fs::read(dir.join(&f)).unwrap()
        );
    }
    assert_eq!(
        std::fs::read(out.join(name)).unwrap(),
        std::fs::read(dir.join(name)).unwrap()
    );

    // Updates on top of the paged trie give the in-memory forest's roots.
    let mut mem = Forest::new(4, 1);
    mem.add(want.clone());
    let mut paged = Forest::new(4, 2)
        .with_paging(store.clone(), 2 << 10)
        .unwrap();
    paged.add(trie);
    let mut root = want.root_hash();
    for round in 0u8..5 {
        let writes: Vec<_> = (0..60u32)
            .map(|i| {
                let mut p = [round; 32];
                p[..4].copy_from_slice(&(i.wrapping_mul(2_654_435_761)).to_be_bytes());
                (
                    crate::flow::hash::Path(p),
                    payload("o", "u", &[round, i as u8]),
                )
            })
            .collect();
        let u = TrieUpdate {
            root,
            paths: writes.iter().map(|w| w.0).collect(),
            payloads: writes.iter().map(|w| w.1.clone()).collect(),
        };
        let a = mem.update(&u).unwrap();
        assert_eq!(paged.update(&u).unwrap(), a);
        root = a.root;
    }
    assert_eq!(
        leaves(paged.get(&root).unwrap()),
        leaves(mem.get(&root).unwrap())
    );
    drop(paged);

    // A flipped byte in a part: the part's file and offset, as the other reads say.
    let part = dir.join(crate::flow::checkpoint::part_name(name, 3));
    let mut bytes = std::fs::read(&part).unwrap();
    bytes[40] ^= 1;
    std::fs::write(&part, bytes).unwrap();
    let store2 = NodeStore::create(&dir.join("store2"), 4 << 10).unwrap();
    let e = page_in(&dir, name, walk, &store2).unwrap_err();
    assert_eq!(e.file, part);
    drop((store, store2));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn every_flipped_byte_of_a_part_or_the_top_is_caught_with_its_file() {
    let dir = tmp("flip");
    let name = "checkpoint.00000001";
    write_tries(&tries()[1..], &dir, name, 1).unwrap();
    for fname in [part_name(name, 3), part_name(name, TOP_PART)] {
        let good = std::fs::read(dir.join(&fname)).unwrap();
        // Every 11th byte, and every byte of the head and of the footer (counts, CRC).
        let n = good.len();
        let spots = (0..n).filter(|at| at % 11 == 0 || *at < 8 || *at + 16 >= n);
        for at in spots {
            let mut bad = good.clone();
            bad[at] ^= 0x08;
            std::fs::write(dir.join(&fname), &bad).unwrap();
            let e = stream(&dir, name, &opts(&dir, Verify::Full)).unwrap_err();
            assert!(e.file.ends_with(&fname), "{fname}@{at}: {e}");
        }
        std::fs::write(dir.join(&fname), &good).unwrap();
        for cut in [0, 3, good.len() / 2, good.len() - 1] {
            std::fs::write(dir.join(&fname), &good[..cut]).unwrap();
            let e = stream(&dir, name, &opts(&dir, Verify::Full)).unwrap_err();
            assert!(e.file.ends_with(&fname), "{fname} cut {cut}: {e}");
        }
        std::fs::write(dir.join(&fname), &good).unwrap();
    }
    stream(&dir, name, &opts(&dir, Verify::Full)).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `file` of checkpoint `name` replaced by `bytes` with its CRC set right, and the
/// header's copy of it (part `index`), so only the change itself is damage.
fn rewrite_with_crcs(dir: &FsPath, name: &str, index: usize, mut bytes: Vec<u8>) {
    let body = bytes.len() - 4;
    let crc = crc32c::crc32c(&bytes[..body]).to_be_bytes();
    bytes[body..].copy_from_slice(&crc);
    std::fs::write(dir.join(part_name(name, index)), &bytes).unwrap();
    let mut head = std::fs::read(dir.join(name)).unwrap();
    head[6 + 4 * index..10 + 4 * index].copy_from_slice(&crc);
    let body = head.len() - 4;
    let crc = crc32c::crc32c(&head[..body]).to_be_bytes();
    head[body..].copy_from_slice(&crc);
    std::fs::write(dir.join(name), head).unwrap();
}

/// Found by fuzzing (`checkpoint_stream`): a read that trusts the hashes took a leaf
/// stored off its place in path order (its registers then broke the SST writer's order, an
/// I/O error); and a checkpoint without a trie record gave the paged read an empty trie.
#[test]
fn refuses_a_leaf_off_its_path_order_and_a_checkpoint_without_tries() {
    let dir = tmp("order");
    let name = "checkpoint.00000001";
    write_tries(&tries()[1..], &dir, name, 1).unwrap();
    let part = part_name(name, 3);
    let good = std::fs::read(dir.join(&part)).unwrap();
    // A part is stored children first: its first node (after magic and version) is a
    // leaf, whose path follows its type, height and hash.
    let path_at = 4 + 35;
    // Under another subtrie position: refused at the leaf itself. Past the leaf after it
    // (same position): the stream refuses the next leaf, out of order, before it reaches
    // the output; the in-memory load refuses the node above both, whose subtrees' paths
    // disagree. The first damage in file order wins: a full check finds the leaf's hash
    // (over its path) wrong first.
    for (label, byte) in [("other position", 0x70), ("after the next", 0x3f)] {
        let mut bad = good.clone();
        bad[path_at] = byte;
        rewrite_with_crcs(&dir, name, 3, bad);
        for verify in [Verify::None, Verify::Interior, Verify::Full] {
            let e = stream(&dir, name, &opts(&dir, verify)).unwrap_err();
            assert!(e.file.ends_with(&part), "{e}");
            let l = load(&dir, name, 1, verify).unwrap_err();
            assert_eq!(l.file, e.file);
            let (got, loaded) = ((e.kind, e.offset), (l.kind, l.offset));
            match (label, verify) {
                ("other position", _) => {
                    assert_eq!(
                        (got, loaded),
                        (("bad_path_order", 4), ("bad_path_order", 4))
                    )
                }
                (_, Verify::Full) => {
                    assert_eq!((got, loaded), (("hash_mismatch", 7), ("hash_mismatch", 7)))
                }
                _ => {
                    assert_eq!(got, ("bad_path_order", 106), "{e}");
                    assert!(l.kind == "bad_path_order" && l.offset > 106, "{l}");
                }
            }
        }
    }
    // A node that drops its right child: the subtree it held is referenced by no node.
    let mut bad = good.clone();
    let mut at = 4;
    let interior = loop {
        if bad[at] == 1 {
            break at;
        }
        let payload = u32::from_be_bytes(bad[at + 67..at + 71].try_into().unwrap());
        at += 71 + payload as usize;
    };
    bad[interior + 43..interior + 51].fill(0);
    rewrite_with_crcs(&dir, name, 3, bad);
    let e = stream(&dir, name, &opts(&dir, Verify::None)).unwrap_err();
    assert_eq!(e.kind, "bad_child_index", "{e}");
    let e = load(&dir, name, 1, Verify::None).unwrap_err();
    assert_eq!(e.kind, "unreferenced_node", "{e}");
    assert!(e.file.ends_with(&part) && e.offset < interior as u64, "{e}");
    rewrite_with_crcs(&dir, name, 3, good);
    stream(&dir, name, &opts(&dir, Verify::None)).unwrap();

    // No trie record: the top part's record cut out and its count set to 0.
    let top = std::fs::read(dir.join(part_name(name, TOP_PART))).unwrap();
    let record = 8 + 8 + 8 + 32;
    let footer = top.len() - 4 - 10;
    let mut cut = top[..footer - record].to_vec();
    cut.extend_from_slice(&top[footer..footer + 8]);
    cut.extend_from_slice(&0u16.to_be_bytes());
    cut.extend_from_slice(&[0; 4]);
    rewrite_with_crcs(&dir, name, TOP_PART, cut);
    // The in-memory load finds the trie's nodes unreferenced (the root, last in the top).
    let e = load(&dir, name, 1, Verify::None).unwrap_err();
    assert_eq!(e.kind, "unreferenced_node");
    assert!(e.file.ends_with(&part_name(name, TOP_PART)), "{e}");
    let e = stream(&dir, name, &opts(&dir, Verify::Full)).unwrap_err();
    assert_eq!((e.kind, e.offset), ("no_tries", 0));
    assert_eq!(e.file, dir.join(name).display().to_string());
    let walk = Walk {
        threads: 2,
        verify: Verify::None,
        batch_bytes: 1 << 10,
    };
    let store = NodeStore::create(&dir.join("store"), 4 << 10).unwrap();
    let e = page_in(&dir, name, walk, &store).unwrap_err();
    assert_eq!(e.kind, "no_tries");
    drop(store);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A child index out of descendants-first order is named at its own field (§5.2: the
/// left index at node + 35, the right at node + 43), by the streamed and the in-memory
/// read, in a subtrie part and in the top part.
#[test]
fn a_child_index_out_of_order_is_named_at_its_field() {
    let dir = tmp("child");
    let name = "checkpoint.00000001";
    write_tries(&tries()[1..], &dir, name, 1).unwrap();
    for (index, first) in [(3, 4), (TOP_PART, 12)] {
        let part = part_name(name, index);
        let good = std::fs::read(dir.join(&part)).unwrap();
        // The first interior node: leaves are `type | height | hash | path | P u32 | ...`.
        let mut at = first;
        while good[at] != 1 {
            let payload = u32::from_be_bytes(good[at + 67..at + 71].try_into().unwrap());
            at += 71 + payload as usize;
        }
        for field in [35, 43] {
            let mut bad = good.clone();
            bad[at + field..at + field + 8].copy_from_slice(&u64::MAX.to_be_bytes());
            rewrite_with_crcs(&dir, name, index, bad);
            let want = ("bad_child_index", (at + field) as u64);
            let e = stream(&dir, name, &opts(&dir, Verify::None)).unwrap_err();
            assert!(e.file.ends_with(&part), "{e}");
            assert_eq!((e.kind, e.offset), want, "stream {part}: {e}");
            let l = load(&dir, name, 1, Verify::None).unwrap_err();
            assert_eq!(l.file, e.file);
            assert_eq!((l.kind, l.offset), want, "load {part}: {l}");
        }
        rewrite_with_crcs(&dir, name, index, good);
    }
    stream(&dir, name, &opts(&dir, Verify::None)).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}
