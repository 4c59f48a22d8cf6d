//! The paged node store's cache charges each loaded node at least what loading it allocates,
//! so a cache of `cache_bytes` holds no more than that on the heap (the paged forest's share
//! of `--memory-budget`), and not so much more that the cache holds far fewer nodes than it
//! could. Measured with an allocator that counts this thread's live heap bytes, in glibc's
//! chunk sizes. Likewise the new nodes an update makes, which a paged forest holds until they
//! are more than its share of the budget.

use rechain_native::flow::hash::{empty_root, Hash, Path};
use rechain_native::flow::mtrie::{Forest, Node, Register};
use rechain_native::flow::node_store::NodeStore;
use rechain_native::flow::record::{Payload, PayloadRef, TrieUpdate};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::sync::Arc;

struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
}

/// glibc's chunk for a request of `size` bytes: an 8-byte header, 16-byte steps, 32 at least.
fn chunk(size: usize) -> isize {
    ((size + 8).div_ceil(16) * 16).max(32) as isize
}

fn count(delta: isize) {
    let _ = LIVE.try_with(|c| c.set(c.get() + delta));
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            count(chunk(layout.size()));
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        unsafe { System.dealloc(p, layout) };
        count(-chunk(layout.size()));
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let q = unsafe { System.realloc(p, layout, new_size) };
        if !q.is_null() {
            count(chunk(new_size) - chunk(layout.size()));
        }
        q
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn live() -> isize {
    LIVE.with(Cell::get)
}

fn loc_of(n: &Arc<Node>) -> u64 {
    match &**n {
        Node::Paged { loc, .. } => *loc,
        _ => panic!("a writer returns placeholders"),
    }
}

/// Charged at least what is on the heap, and not more than half as much again (the cache's
/// map entries are charged as if the table had just doubled).
fn assert_covers(what: &str, charged: isize, real: isize) {
    assert!(real > 0, "{what}: nothing allocated");
    assert!(
        charged >= real && 2 * charged <= 3 * real,
        "{what}: charged {charged} for {real} heap bytes"
    );
}

/// Loads every node at `locs` into a fresh cache large enough for all of them; returns the
/// live heap bytes the loads added and what the cache charged for them.
fn load_all(store: &Arc<NodeStore>, locs: &[u64]) -> (isize, isize) {
    store.clear_cache();
    let mut held: Vec<Arc<Node>> = Vec::with_capacity(locs.len());
    let before = live();
    for &loc in locs {
        held.push(store.load(loc).expect("load"));
    }
    let real = live() - before;
    (real, store.cached_bytes() as isize)
}

#[test]
fn cache_charges_cover_loaded_nodes() {
    let dir = std::env::temp_dir().join(format!("rechain-node-cost-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = NodeStore::create(&dir, 1 << 30).expect("store");
    let mut w = store.writer().expect("writer");
    let (mut leaves, mut pairs, mut singles) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..3000u32 {
        let mut path = [0u8; 32];
        path[..4].copy_from_slice(&i.to_be_bytes());
        // Flow's registers: keys of a few dozen bytes, values from empty to a few hundred.
        let key = vec![i as u8; 20 + (i % 50) as usize];
        let value = vec![7u8; (i as usize * 37) % 400];
        let reg = Register::new(
            Path(path),
            PayloadRef {
                key: &key,
                value: &value,
            },
        );
        leaves.push(w.leaf(3, Hash([i as u8; 32]), &reg).expect("leaf"));
    }
    for (i, two) in leaves.chunks(2).enumerate() {
        let h = Hash([i as u8 ^ 0x5a; 32]);
        pairs.push(
            w.interior(4, h, Some(&two[0]), Some(&two[1]))
                .expect("interior"),
        );
        singles.push(w.interior(4, h, Some(&two[0]), None).expect("interior"));
    }
    w.flush().expect("flush");
    for (what, nodes) in [
        ("leaves", &leaves),
        ("two children", &pairs),
        ("one child", &singles),
    ] {
        let locs: Vec<u64> = nodes.iter().map(loc_of).collect();
        let (real, charged) = load_all(&store, &locs);
        assert_covers(what, charged, real);
    }
    store.clear_cache();
    drop((leaves, pairs, singles, w));
    let _ = std::fs::remove_dir_all(&dir);
}

/// An update of `n` registers with `value_len`-byte values (keys as Flow's are: a few dozen
/// bytes), every `step`-th path of a fixed set.
fn update(root: Hash, n: u32, step: u32, value_len: usize) -> TrieUpdate {
    let (mut paths, mut payloads) = (Vec::new(), Vec::new());
    for i in (0..n).step_by(step as usize) {
        let mut path = [0u8; 32];
        path[..4].copy_from_slice(&i.wrapping_mul(2_654_435_761).to_be_bytes());
        paths.push(Path(path));
        let key = vec![i as u8; 20 + (i % 50) as usize];
        payloads.push(Arc::new(Payload::new(
            key,
            vec![value_len as u8; value_len],
        )));
    }
    TrieUpdate {
        root,
        paths,
        payloads,
    }
}

#[test]
fn hold_charges_cover_new_nodes() {
    let mut forest = Forest::new(10, 1);
    let mut root = empty_root();
    // A trie built from nothing, then updates that replace some of its leaves: new nodes
    // beside shared ones.
    for (step, value_len) in [(1, 300), (2, 10), (7, 0), (3, 900)] {
        let u = update(root, 4000, step, value_len);
        let charged_before = forest.stats().new_node_bytes.load(Ordering::Relaxed);
        let before = live();
        root = forest.update(&u).expect("update").root;
        let real = live() - before;
        let charged =
            (forest.stats().new_node_bytes.load(Ordering::Relaxed) - charged_before) as isize;
        assert_covers(&format!("step {step}"), charged, real);
    }
}
