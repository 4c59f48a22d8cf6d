//! Flow's MTrie: a persistent sparse Merkle trie of height 256 with compact leaves, and the
//! forest of tries keyed by root hash (spec §4; flow-go `ledger/complete/mtrie/node/node.go`,
//! `trie/trie.go`, `forest.go`, `trieCache.go`).
//!
//! Nodes are immutable and shared between tries through `Arc` (copy-on-write). The update is
//! flow-go's `update` step for step, so the shapes, the node sharing (where flow-go returns an
//! unchanged node this returns the same `Arc`) and the register counters, including their
//! asymmetries (§4.4), are the same as flow-go's:
//!
//! * a nil child stands for an empty subtree and hashes as `D[height]`;
//! * a leaf sits at the highest height where its subtree holds only it (its hash is
//!   `ComputeCompactValue`); after an update a child whose hash is `D[h]` is pruned, and a lone
//!   leaf child is lifted into its parent's place;
//! * within one update the last write to a path wins, at the position of the first
//!   (`Forest.NewTrie`), and the forest keeps the existing trie when a root hash is already there.

use super::hash::{
    compact_value, compact_value_permutations, compact_values, default_hash, empty_root,
    hash_inter, Hash, LeafJob, Path, MAX_HEIGHT,
};
pub use super::node::{Node, Register};
use super::node_store::{leaf_heap_bytes, NodeStore, NodeWriter, PageOut, INTERIOR_HEAP_BYTES};
use super::paging::{StoreError, StoreResult};
use super::record::{Payload, PayloadRef, TrieUpdate};
use super::ErrorKind;
use std::collections::{HashMap, VecDeque};
use std::ops::Deref;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A node of an update's result before hashing. The update first decides the new trie's
/// shape (flow-go's `update`), then hashes all new leaves in one batch, whose compact-value
/// chains (up to 256 permutations each) are independent and run on SIMD lanes and both
/// cores, and only then builds the hashed, immutable [`Node`]s bottom up. A large update does
/// this per subtrie, each on its own thread (see [`update`]).
enum Pending {
    /// An existing node, unchanged (shared with the parent trie).
    Done(Arc<Node>),
    /// A leaf whose compact value at `height` is still to be computed.
    Leaf { height: u16, reg: Arc<Register> },
    Interior {
        height: u16,
        left: Option<Box<Pending>>,
        right: Option<Box<Pending>>,
    },
}

impl Pending {
    /// `IsDefaultNode`. A new leaf hashes as `D[height]` exactly when its value is empty, and a
    /// new interior node has a non-default child, so only a hash collision with a default hash
    /// could make either default: that case, like flow-go, is not considered.
    fn is_default(n: &Option<Box<Pending>>) -> bool {
        match n.as_deref() {
            None => true,
            Some(Pending::Done(n)) => n.hash() == default_hash(n.height()),
            Some(Pending::Leaf { reg, .. }) => reg.value().is_empty(),
            Some(Pending::Interior { .. }) => false,
        }
    }

    /// `NewInterimCompactifiedNode`: prunes default children and lifts a lone leaf child (a
    /// paged-out one is loaded for its register).
    fn compactified(
        height: u16,
        left: Option<Box<Pending>>,
        right: Option<Box<Pending>>,
        stats: &UpdateStats,
    ) -> StoreResult<Option<Box<Pending>>> {
        let left = if Pending::is_default(&left) {
            None
        } else {
            left
        };
        let right = if Pending::is_default(&right) {
            None
        } else {
            right
        };
        let (lone, is_left) = match (left, right) {
            (None, None) => return Ok(None),
            (Some(l), None) => (l, true),
            (None, Some(r)) => (r, false),
            (left, right) => {
                return Ok(Some(Box::new(Pending::Interior {
                    height,
                    left,
                    right,
                })))
            }
        };
        let wrap = |lone: Pending| {
            let lone = Some(Box::new(lone));
            let (left, right) = if is_left { (lone, None) } else { (None, lone) };
            Some(Box::new(Pending::Interior {
                height,
                left,
                right,
            }))
        };
        Ok(match *lone {
            // A new leaf lifted one level is the same leaf one level higher (its chain is
            // hashed later, once, at its final height).
            Pending::Leaf { reg, .. } => Some(Box::new(Pending::Leaf { height, reg })),
            Pending::Done(n) if n.is_leaf() => {
                let r = n.resolve()?;
                let Node::Leaf {
                    reg,
                    hash,
                    height: h,
                } = &*r
                else {
                    return Err(kind_mismatch(&n));
                };
                let d = default_hash(*h);
                let hash = if is_left {
                    hash_inter(hash, &d)
                } else {
                    hash_inter(&d, hash)
                };
                // A new node; a loaded leaf's register is now the new trie's to hold too.
                let held = if Arc::ptr_eq(&r, &n) {
                    INTERIOR_HEAP_BYTES
                } else {
                    leaf_heap_bytes(reg.key().len(), reg.value().len())
                };
                stats
                    .new_node_bytes
                    .fetch_add(held as u64, Ordering::Relaxed);
                Some(Box::new(Pending::Done(Arc::new(Node::Leaf {
                    height,
                    reg: reg.clone(),
                    hash,
                }))))
            }
            lone => wrap(lone),
        })
    }

    fn is_same(n: &Option<Box<Pending>>, old: &Option<Arc<Node>>) -> bool {
        match (n.as_deref(), old) {
            (None, None) => true,
            (Some(Pending::Done(a)), Some(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// The new leaves, left to right.
    /// Also adds to `bytes` the heap bytes the new trie will hold beyond its interior nodes:
    /// new leaves, and placeholders of paged children it keeps (they were a loaded node's,
    /// charged by the cache only while it holds that node).
    fn collect_leaves<'a>(&'a self, out: &mut Vec<LeafJob<'a>>, bytes: &mut u64) {
        match self {
            Pending::Done(_) => {}
            Pending::Leaf { height, reg } => {
                *bytes += leaf_heap_bytes(reg.key().len(), reg.value().len()) as u64;
                out.push(LeafJob {
                    path: reg.path(),
                    value: reg.value(),
                    height: *height,
                })
            }
            Pending::Interior { left, right, .. } => {
                for c in [left, right].into_iter().flatten() {
                    if let Pending::Done(n) = &**c {
                        if matches!(**n, Node::Paged { .. }) {
                            *bytes += INTERIOR_HEAP_BYTES as u64;
                        }
                    }
                    c.collect_leaves(out, bytes);
                }
            }
        }
    }

    /// The hashed node; `leaf_hashes` yields the new leaves' hashes in `collect_leaves` order.
    /// Adds one to `interior_nodes` per interior node hashed.
    fn build(
        self,
        leaf_hashes: &mut impl Iterator<Item = Hash>,
        interior_nodes: &mut u64,
    ) -> Arc<Node> {
        match self {
            Pending::Done(n) => n,
            Pending::Leaf { height, reg } => Arc::new(Node::Leaf {
                height,
                reg,
                hash: leaf_hashes.next().expect("one hash per new leaf"),
            }),
            Pending::Interior {
                height,
                left,
                right,
            } => {
                let left = left.map(|c| c.build(leaf_hashes, interior_nodes));
                let right = right.map(|c| c.build(leaf_hashes, interior_nodes));
                *interior_nodes += 1;
                Node::interior(height, left, right)
            }
        }
    }
}

/// A paged node whose record is not of the kind its parent says: the store is damaged.
fn kind_mismatch(n: &Node) -> StoreError {
    let (file, loc) = match n {
        Node::Paged { store, loc, .. } => (format!("{store:?}"), *loc),
        _ => (String::new(), 0),
    };
    StoreError {
        file: file.into(),
        offset: loc,
        message: "node record of another kind than its parent says".into(),
    }
}

/// Minimum number of new leaves before their hashing is shared with a second thread.
const PARALLEL_MIN_LEAVES: usize = 8;

/// What updates did, counted across threads: the hashing work and how often it was split.
#[derive(Debug, Default)]
pub struct UpdateStats {
    /// Keccak-f[1600] permutations run: the new leaves' compact-value chains (with their
    /// `HashLeaf` sponges) and one per new interior node.
    pub permutations: AtomicU64,
    /// Subtries updated and hashed on a thread of their own.
    pub parallel_subtries: AtomicU64,
    /// Heap bytes of the nodes updates created (what a paged forest holds in memory until it
    /// writes them out).
    pub new_node_bytes: AtomicU64,
}

/// Hashes the new leaves of `plan` (on up to `threads` threads) and builds the trie nodes.
fn finish(plan: Option<Box<Pending>>, threads: usize, stats: &UpdateStats) -> Option<Arc<Node>> {
    let plan = plan?;
    let hashes = {
        let mut jobs = Vec::new();
        let mut leaf_bytes = 0;
        plan.collect_leaves(&mut jobs, &mut leaf_bytes);
        let chains: u64 = jobs
            .iter()
            .map(|j| compact_value_permutations(j.value.len(), j.height))
            .sum();
        stats.permutations.fetch_add(chains, Ordering::Relaxed);
        stats
            .new_node_bytes
            .fetch_add(leaf_bytes, Ordering::Relaxed);
        let threads = threads.min(jobs.len() / (PARALLEL_MIN_LEAVES / 2)).max(1);
        if threads == 1 {
            compact_values(&jobs)
        } else {
            // Chunks in multiples of four (one SIMD group).
            let per = jobs.len().div_ceil(threads).div_ceil(4) * 4;
            std::thread::scope(|s| {
                let mut parts = jobs.chunks(per);
                let first = parts.next().unwrap_or(&[]);
                let handles: Vec<_> = parts.map(|c| s.spawn(move || compact_values(c))).collect();
                let mut out = compact_values(first);
                for h in handles {
                    match h.join() {
                        Ok(v) => out.extend(v),
                        Err(panic) => std::panic::resume_unwind(panic),
                    }
                }
                out
            })
        }
    };
    let mut it = hashes.into_iter();
    let mut interior_nodes = 0;
    let node = plan.build(&mut it, &mut interior_nodes);
    stats
        .permutations
        .fetch_add(interior_nodes, Ordering::Relaxed);
    stats.new_node_bytes.fetch_add(
        interior_nodes * INTERIOR_HEAP_BYTES as u64,
        Ordering::Relaxed,
    );
    Some(node)
}

/// `Payload.ValueEquals`: both empty, or equal values.
fn value_equals(a: PayloadRef<'_>, b: PayloadRef<'_>) -> bool {
    a.value == b.value
}

/// `computeAllocatedRegDeltas` (old and new values differ).
fn reg_deltas(old: PayloadRef<'_>, new: PayloadRef<'_>) -> (i64, i64) {
    let count = if new.is_empty() {
        -1
    } else if old.is_empty() {
        1
    } else {
        0
    };
    (count, new.size() as i64 - old.size() as i64)
}

/// `computeAllocatedRegDeltasFromHigherHeight`.
fn reg_deltas_from_higher(old: PayloadRef<'_>) -> (i64, i64) {
    (if old.is_empty() { 0 } else { -1 }, -(old.size() as i64))
}

type Item = Arc<Register>;

/// `splitByPath`: items with a 0 at `bit` first; returns the split point.
fn split_by_bit(items: &mut [Item], bit: usize) -> usize {
    let mut i = 0;
    for j in 0..items.len() {
        if items[j].path().bit(bit) == 0 {
            items.swap(i, j);
            i += 1;
        }
    }
    i
}

struct Updated {
    node: Option<Box<Pending>>,
    count: i64,
    size: i64,
}

impl Updated {
    fn unchanged(cur: Option<&Arc<Node>>) -> Updated {
        Updated {
            node: cur.map(|c| Box::new(Pending::Done(c.clone()))),
            count: 0,
            size: 0,
        }
    }

    fn leaf(height: u16, reg: Arc<Register>, count: i64, size: i64) -> Updated {
        Updated {
            node: Some(Box::new(Pending::Leaf { height, reg })),
            count,
            size,
        }
    }
}

/// Fewest items on each side of a node before its two subtries are updated and hashed on two
/// threads. flow-go splits at 16 (goroutines are cheap); a scoped thread costs tens of
/// microseconds, which a subtrie of 64 new leaves (about 15,000 permutations) repays many
/// times over, while a small update stays on one thread and shares only its leaf hashing.
pub const PARALLEL_MIN_ITEMS: usize = 64;

/// [`update`] of one subtrie, then its new leaves hashed and nodes built ([`finish`]) on the
/// calling thread's share of `threads`: a subtrie updated on its own thread comes back
/// finished, so its hashing runs there too, not later on the thread that joins it.
fn update_finished(
    height: u16,
    cur: Option<&Arc<Node>>,
    items: &mut [Item],
    compact: Option<&Arc<Node>>,
    threads: usize,
    stats: &UpdateStats,
) -> StoreResult<Updated> {
    let u = update(height, cur, items, compact, threads, stats)?;
    Ok(Updated {
        node: finish(u.node, threads, stats).map(|n| Box::new(Pending::Done(n))),
        ..u
    })
}

/// flow-go's `update` (prune = true), deciding the new trie's shape; hashing is left to
/// [`finish`], except in subtries split off on their own thread (`threads` > 1 and at least
/// [`PARALLEL_MIN_ITEMS`] items on both sides), which come back hashed. A finished subtrie
/// is an unchanged-or-new `Pending::Done` node, so the pruning and lifting above it treat it
/// as flow-go treats any hashed child (a lifted leaf extends its compact value by one level):
/// the result is the same trie, node for node, as the sequential update.
fn update(
    height: u16,
    cur: Option<&Arc<Node>>,
    items: &mut [Item],
    compact: Option<&Arc<Node>>,
    threads: usize,
    stats: &UpdateStats,
) -> StoreResult<Updated> {
    if items.is_empty() {
        if let Some(Node::Leaf { reg, .. }) = compact.map(|c| &**c) {
            return Ok(Updated::leaf(height, reg.clone(), 0, 0));
        }
        return Ok(Updated::unchanged(cur));
    }
    if items.len() == 1 && cur.is_none() && compact.is_none() {
        let reg = &items[0];
        let (count, size) = if reg.payload().is_empty() {
            (0, 0)
        } else {
            (1, reg.payload().size() as i64)
        };
        return Ok(Updated::leaf(height, reg.clone(), count, size));
    }
    // A paged-out node is loaded to be descended; an unchanged result is still the
    // placeholder (`original`), so nothing loaded is ever written out again.
    let original = cur;
    let loaded = cur.map(|c| c.resolve()).transpose()?;
    let cur = loaded.as_ref();

    let mut compact = compact;
    let (mut count, mut size) = (0i64, 0i64);
    let (old_left, old_right) = match cur.map(|c| &**c) {
        Some(Node::Interior { left, right, .. }) => (left.clone(), right.clone()),
        _ => (None, None),
    };
    if let Some(Node::Leaf { reg: old, .. }) = cur.map(|c| &**c) {
        match items.iter().position(|r| r.path() == old.path()) {
            Some(i) if items.len() == 1 => {
                let new = &items[i];
                if value_equals(old.payload(), new.payload()) {
                    return Ok(Updated::unchanged(original));
                }
                let (c, s) = reg_deltas(old.payload(), new.payload());
                return Ok(Updated::leaf(height, new.clone(), c, s));
            }
            Some(_) => (count, size) = reg_deltas_from_higher(old.payload()),
            None => compact = cur,
        }
    }

    if height == 0 {
        // Unreachable with distinct paths (two of them cannot share all 256 bits); kept total.
        let reg = &items[items.len() - 1];
        return Ok(Updated::leaf(0, reg.clone(), count, size));
    }
    let depth = (MAX_HEIGHT - height) as usize;
    let split = split_by_bit(items, depth);
    let (litems, ritems) = items.split_at_mut(split);
    let (lcompact, rcompact) = match compact.map(|c| &**c) {
        Some(Node::Leaf { reg, .. }) if reg.path().bit(depth) == 1 => (None, compact),
        Some(Node::Leaf { .. }) => (compact, None),
        _ => (None, None),
    };
    let (l, r) = if threads > 1
        && litems.len() >= PARALLEL_MIN_ITEMS
        && ritems.len() >= PARALLEL_MIN_ITEMS
    {
        stats.parallel_subtries.fetch_add(1, Ordering::Relaxed);
        let (lthreads, rthreads) = (threads / 2, threads - threads / 2);
        let (old_left, old_right) = (old_left.as_ref(), old_right.as_ref());
        let (l, r) = std::thread::scope(|s| {
            let left = s.spawn(move || {
                update_finished(height - 1, old_left, litems, lcompact, lthreads, stats)
            });
            let right = update_finished(height - 1, old_right, ritems, rcompact, rthreads, stats);
            match left.join() {
                Ok(left) => (left, right),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        });
        (l?, r?)
    } else {
        // One side too small to be worth a thread: both stay here, and the larger one may
        // still split further down with the whole budget.
        (
            update(
                height - 1,
                old_left.as_ref(),
                litems,
                lcompact,
                threads,
                stats,
            )?,
            update(
                height - 1,
                old_right.as_ref(),
                ritems,
                rcompact,
                threads,
                stats,
            )?,
        )
    };
    count += l.count + r.count;
    size += l.size + r.size;

    if matches!(cur.map(|c| &**c), Some(Node::Interior { .. }))
        && Pending::is_same(&l.node, &old_left)
        && Pending::is_same(&r.node, &old_right)
    {
        return Ok(Updated::unchanged(original));
    }
    Ok(Updated {
        node: Pending::compactified(height, l.node, r.node, stats)?,
        count,
        size,
    })
}

/// One trie: its root node (`None` = empty) and flow-go's register counters.
#[derive(Debug, Clone, Default)]
pub struct Trie {
    pub root: Option<Arc<Node>>,
    /// `AllocatedRegCount`.
    pub reg_count: u64,
    /// `AllocatedRegSize`.
    pub reg_size: u64,
}

impl Trie {
    pub fn empty() -> Trie {
        Trie::default()
    }

    pub fn root_hash(&self) -> Hash {
        self.root.as_ref().map_or_else(empty_root, |n| n.hash())
    }

    /// `NewTrieWithUpdatedRegisters(parent, paths, payloads, prune = true)` with paths already
    /// de-duplicated. `threads` > 1 updates and hashes large subtries on their own threads
    /// and shares the remaining new leaves' hashing between threads; the work is added to
    /// `stats`.
    pub fn with_updates(
        &self,
        items: &mut [Item],
        threads: usize,
        stats: &UpdateStats,
    ) -> StoreResult<Trie> {
        let u = update(MAX_HEIGHT, self.root.as_ref(), items, None, threads, stats)?;
        Ok(Trie {
            root: finish(u.node, threads, stats),
            reg_count: (self.reg_count as i64).wrapping_add(u.count) as u64,
            reg_size: (self.reg_size as i64).wrapping_add(u.size) as u64,
        })
    }

    /// Value stored at `path` (`None` if unallocated).
    pub fn get(&self, path: &Path) -> StoreResult<Option<Arc<Register>>> {
        let Some(mut n) = self.root.clone() else {
            return Ok(None);
        };
        let mut depth = 0usize;
        loop {
            n = n.resolve()?;
            let next = match &*n {
                Node::Leaf { reg, .. } => {
                    return Ok(
                        (*reg.path() == *path && !reg.payload().is_empty()).then(|| reg.clone())
                    );
                }
                Node::Interior { left, right, .. } => {
                    if path.bit(depth) == 0 {
                        left
                    } else {
                        right
                    }
                }
                Node::Paged { .. } => return Err(kind_mismatch(&n)),
            };
            let Some(next) = next.clone() else {
                return Ok(None);
            };
            n = next;
            depth += 1;
        }
    }

    /// Leaves in path order.
    pub fn leaves(&self) -> LeafCursor {
        LeafCursor {
            stack: self.root.iter().cloned().collect(),
        }
    }

    /// Recomputes every node hash from the leaves up and compares (`MTrie.IsAValidTrie`).
    pub fn verify_hashes(&self) -> StoreResult<bool> {
        fn check(n: &Arc<Node>) -> StoreResult<bool> {
            let n = n.resolve_once()?;
            Ok(match &*n {
                Node::Leaf { height, reg, hash } => {
                    compact_value(reg.path(), reg.value(), *height) == *hash
                }
                Node::Interior {
                    height,
                    left,
                    right,
                    hash,
                } => {
                    let d = default_hash(height - 1);
                    let hl = left.as_ref().map_or(d, |c| c.hash());
                    let hr = right.as_ref().map_or(d, |c| c.hash());
                    for c in [left, right].into_iter().flatten() {
                        if !check(c)? {
                            return Ok(false);
                        }
                    }
                    hash_inter(&hl, &hr) == *hash
                }
                Node::Paged { .. } => return Err(kind_mismatch(&n)),
            })
        }
        self.root.as_ref().map_or(Ok(true), check)
    }
}

/// Walks a trie's leaves left to right (path order), loading paged-out nodes as it reaches
/// them; owns its stack, so it outlives borrows.
pub struct LeafCursor {
    stack: Vec<Arc<Node>>,
}

impl LeafCursor {
    /// Up to `max` leaves with a non-empty value (allocated registers).
    pub fn next_chunk(&mut self, max: usize) -> StoreResult<Vec<Arc<Register>>> {
        let leaves = self.next_leaf_nodes(max)?;
        Ok(leaves
            .iter()
            .filter_map(|n| n.register().cloned())
            .collect())
    }

    /// Up to `max` leaf nodes with a non-empty value (the same leaves as [`Self::next_chunk`],
    /// with their height and stored hash).
    pub fn next_leaf_nodes(&mut self, max: usize) -> StoreResult<Vec<Arc<Node>>> {
        let mut out = Vec::with_capacity(max.min(1 << 16));
        while out.len() < max {
            let Some(n) = self.stack.pop() else { break };
            let n = n.resolve_once()?;
            match &*n {
                Node::Leaf { reg, .. } => {
                    if !reg.payload().is_empty() {
                        out.push(n.clone());
                    }
                }
                Node::Interior { left, right, .. } => {
                    self.stack.extend(right.iter().cloned());
                    self.stack.extend(left.iter().cloned());
                }
                Node::Paged { .. } => return Err(kind_mismatch(&n)),
            }
        }
        Ok(out)
    }
}

/// Outcome of applying one update to the forest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub root: Hash,
    /// Distinct paths written after de-duplication.
    pub paths: usize,
    /// `false` when the root hash was already in the forest (flow-go keeps the existing trie).
    pub added: bool,
}

/// `mtrie.Forest` with its `TrieCache`: at most `capacity` tries, the oldest added evicted first
/// (lookups do not refresh), starting with the empty trie.
pub struct Forest {
    capacity: usize,
    tries: HashMap<Hash, Trie>,
    order: VecDeque<Hash>,
    threads: usize,
    stats: UpdateStats,
    paging: Option<Paging>,
}

/// How a forest keeps its nodes out of memory: new nodes are written to the store once more
/// than `hold_bytes` of them are in memory, every trie's root becoming a placeholder.
struct Paging {
    store: Arc<NodeStore>,
    writer: NodeWriter,
    hold_bytes: u64,
    /// `stats.new_node_bytes` when the forest was last paged out.
    paged_at: u64,
}

impl Drop for Forest {
    fn drop(&mut self) {
        if let Some(p) = &self.paging {
            p.store.clear_cache();
        }
    }
}

/// flow-go's default `--mtrie-cache-size`.
pub const DEFAULT_CAPACITY: usize = 500;

impl Forest {
    /// A forest holding only the empty trie. `threads` bounds the parallelism of one update.
    pub fn new(capacity: usize, threads: usize) -> Forest {
        let mut f = Forest {
            capacity: capacity.max(1),
            tries: HashMap::new(),
            order: VecDeque::new(),
            threads: threads.max(1),
            stats: UpdateStats::default(),
            paging: None,
        };
        f.add(Trie::empty());
        f
    }

    /// Pages this forest's nodes out to `store` from now on: whenever updates have made more
    /// than `hold_bytes` of new nodes, they are written out (and the tries already here are
    /// written out at once).
    pub fn with_paging(mut self, store: Arc<NodeStore>, hold_bytes: u64) -> StoreResult<Forest> {
        let writer = store.writer()?;
        self.paging = Some(Paging {
            store,
            writer,
            hold_bytes: hold_bytes.max(1),
            paged_at: self.stats.new_node_bytes.load(Ordering::Relaxed),
        });
        self.page_out()?;
        Ok(self)
    }

    /// The node store of a paged forest.
    pub fn store(&self) -> Option<&Arc<NodeStore>> {
        self.paging.as_ref().map(|p| &p.store)
    }

    /// Writes every node in memory to the store (each shared node once) and makes every
    /// trie's root a placeholder; a no-op for a forest without paging. The newest trie goes
    /// first and the cache keeps the top of what was written for it: the next update most
    /// likely starts from it.
    pub fn page_out(&mut self) -> StoreResult<()> {
        let Some(paging) = self.paging.as_mut() else {
            return Ok(());
        };
        let mut pass = PageOut::default();
        for (i, root) in self.order.iter().rev().enumerate() {
            pass.keep = i == 0;
            let trie = self.tries.get_mut(root).expect("ordered roots are held");
            if let Some(n) = &trie.root {
                trie.root = Some(paging.writer.page_out(n, &mut pass)?);
            }
        }
        paging.writer.flush()?;
        paging.store.keep_top(&pass);
        paging.paged_at = self.stats.new_node_bytes.load(Ordering::Relaxed);
        Ok(())
    }

    pub fn len(&self) -> usize {
        self.tries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tries.is_empty()
    }

    pub fn get(&self, root: &Hash) -> Option<&Trie> {
        self.tries.get(root)
    }

    /// The most recently added trie (`MostRecentTouchedRootHash`).
    pub fn last_added(&self) -> Option<&Trie> {
        self.order.back().and_then(|h| self.tries.get(h))
    }

    /// The hashing work of every update so far, and how much of it ran split.
    pub fn stats(&self) -> &UpdateStats {
        &self.stats
    }

    /// Root hashes, oldest first.
    pub fn roots(&self) -> impl Iterator<Item = &Hash> {
        self.order.iter()
    }

    /// `AddTrie`: no-op when the root hash is present; evicts the oldest trie when full.
    pub fn add(&mut self, trie: Trie) -> bool {
        let root = trie.root_hash();
        if self.tries.contains_key(&root) {
            return false;
        }
        if self.order.len() >= self.capacity {
            if let Some(old) = self.order.pop_front() {
                self.tries.remove(&old);
            }
        }
        self.order.push_back(root);
        self.tries.insert(root, trie);
        true
    }

    /// `NewTrie`: the trie resulting from `u` on top of its parent, without adding it.
    pub fn new_trie(&self, u: &TrieUpdate) -> Result<(Trie, usize), ErrorKind> {
        let writes = u.paths.iter().copied().zip(u.payloads.iter().map(|p| &**p));
        self.trie_with(u.root, writes)
    }

    /// The trie of `writes` (path and payload, in record order) on top of the trie `root`.
    fn trie_with<P: Deref<Target = Payload>>(
        &self,
        root: Hash,
        writes: impl ExactSizeIterator<Item = (Path, P)>,
    ) -> Result<(Trie, usize), ErrorKind> {
        let parent = self
            .tries
            .get(&root)
            .ok_or(ErrorKind::UnknownParentRoot { root })?;
        if writes.len() == 0 {
            return Ok((parent.clone(), 0));
        }
        let n = writes.len();
        let mut items: Vec<Item> = Vec::with_capacity(n);
        let mut index: HashMap<Path, usize> = HashMap::with_capacity(n);
        for (path, payload) in writes {
            // The last write of a path wins; its payload is copied into the register the
            // leaves will share (and, when the record is owned, freed here).
            let reg = Register::new(path, payload.view());
            match index.get(&path) {
                Some(&i) => items[i] = reg,
                None => {
                    index.insert(path, items.len());
                    items.push(reg);
                }
            }
        }
        let distinct = items.len();
        let trie = parent
            .with_updates(&mut items, self.threads, &self.stats)
            .map_err(store_error)?;
        Ok((trie, distinct))
    }

    /// `Forest.Update`: apply `u` and add the result; returns the new root hash. A paged
    /// forest holding too many new nodes then writes them out.
    pub fn update(&mut self, u: &TrieUpdate) -> Result<Applied, ErrorKind> {
        let made = self.new_trie(u)?;
        self.adopt(made)
    }

    /// As [`Self::update`], taking the record: each payload is freed once its register is
    /// made, so a large update's payloads are not held twice while it is applied.
    pub fn update_owned(&mut self, u: TrieUpdate) -> Result<Applied, ErrorKind> {
        let writes = u.paths.into_iter().zip(u.payloads);
        let made = self.trie_with(u.root, writes)?;
        self.adopt(made)
    }

    fn adopt(&mut self, (trie, paths): (Trie, usize)) -> Result<Applied, ErrorKind> {
        let root = trie.root_hash();
        let added = self.add(trie);
        if let Some(p) = &self.paging {
            let held = self.stats.new_node_bytes.load(Ordering::Relaxed) - p.paged_at;
            if held > p.hold_bytes {
                self.page_out().map_err(store_error)?;
            }
        }
        Ok(Applied { root, paths, added })
    }
}

fn store_error(e: StoreError) -> ErrorKind {
    ErrorKind::Io {
        op: "node store",
        message: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::record::tests::{p1, p2, p3, path, payload};

    #[test]
    fn register_keeps_path_key_and_value_apart() {
        let big = vec![0xabu8; 70_000];
        let cases: [(&[u8], &[u8]); 4] = [(b"", b""), (b"k", b""), (b"", b"v"), (b"key", &big)];
        for (key, value) in cases {
            let reg = Register::new(p2(), PayloadRef { key, value });
            assert_eq!(*reg.path(), p2());
            assert_eq!((reg.key(), reg.value()), (key, value));
            assert_eq!(reg.payload(), PayloadRef { key, value });
            assert_eq!(reg.payload().size(), (key.len() + value.len()) as u64);
            assert_eq!(reg.payload().is_empty(), value.is_empty());
        }
    }

    fn h(s: &str) -> Hash {
        Hash::from_hex(s).unwrap()
    }

    fn upd(root: Hash, writes: Vec<(Path, Arc<Payload>)>) -> TrieUpdate {
        TrieUpdate {
            root,
            paths: writes.iter().map(|w| w.0).collect(),
            payloads: writes.into_iter().map(|w| w.1).collect(),
        }
    }

    /// xorshift64 from `seed`: the randomized tests' deterministic stream.
    fn xorshift(seed: u64) -> impl FnMut() -> u64 {
        let mut x = seed;
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    /// `n` random writes: about a third overwrite a path of `pool`, the rest are new paths
    /// (`cluster` may give one a shared prefix, from the draw it is handed); one in
    /// `delete_one_in` deletes, the others write 1 to `max_len` bytes.
    fn random_writes(
        next: &mut impl FnMut() -> u64,
        pool: &mut Vec<Path>,
        n: u64,
        delete_one_in: u64,
        max_len: u64,
        cluster: impl Fn(&mut [u8; 32], u64),
    ) -> Vec<(Path, Arc<Payload>)> {
        (0..n)
            .map(|_| {
                let p = if !pool.is_empty() && next().is_multiple_of(3) {
                    pool[(next() % pool.len() as u64) as usize]
                } else {
                    let mut b = [0u8; 32];
                    for c in b.iter_mut() {
                        *c = next() as u8;
                    }
                    cluster(&mut b, next());
                    pool.push(Path(b));
                    Path(b)
                };
                let v = if next().is_multiple_of(delete_one_in) {
                    vec![]
                } else {
                    vec![next() as u8; 1 + (next() % max_len) as usize]
                };
                (p, payload("o", "k", &v))
            })
            .collect()
    }

    fn q() -> Path {
        path("0100000000000000000000000000000000000000000000000000000000000000")
    }

    fn p4() -> Path {
        path("6000000000000000000000000000000000000000000000000000000000000000")
    }

    const U1: &str = "e31b266ccd2d953edd950c40e5548de9d9b34e1d9589ff37920a212a908a0c0e";
    const U3: &str = "7e583937806bd83c39d6c18c25780993a0f74ba29a5b6537679e45fcb105a545";
    const U4: &str = "b859be6139eb870894f1dbf7e83248a206f339f97898ceab22e29b3b7e51d355";
    const U5: &str = "b1f3bb0891acc0da65970811040480b3a61b3190f73b8817045274f3ad6877ff";
    const U7: &str = "02278eaf62b6932c7e5f8635f8e08e40932577ca7a0b5cd7575aac3e48e05fb2";
    const TA: &str = "ceeb7dee155d185d2d448a1a3a44d686827e103a1c1c7e8afd6b6206704bb000";
    const TB: &str = "0f14e49c62eb4cc35069982aef192e87c34def0ae019221e665d3a8cb0c16e47";

    fn counters(f: &Forest, root: &str) -> (u64, u64) {
        let t = f.get(&h(root)).unwrap();
        assert!(t.verify_hashes().unwrap());
        (t.reg_count, t.reg_size)
    }

    #[test]
    fn root_hashes_spec_6_2() {
        for threads in [1, 2, 4] {
            let mut f = Forest::new(DEFAULT_CAPACITY, threads);
            let e = empty_root();
            assert_eq!(
                counters(
                    &f,
                    "568f4ec740fe3b5de88034cb7b1fbddb41548b068f31aebc8ae9189e429c5749"
                ),
                (0, 0)
            );
            let r = f
                .update(&upd(e, vec![(p1(), payload("owner1", "key1", &[1, 2, 3]))]))
                .unwrap();
            assert_eq!(r.root, h(U1));
            assert_eq!(counters(&f, U1), (1, 27));
            let u3 = upd(
                e,
                vec![
                    (p1(), payload("owner1", "key1", &[1, 2, 3])),
                    (p2(), payload("owner2", "key2", b"hello")),
                    (p3(), payload("owner3", "key3", &[0xff])),
                ],
            );
            assert_eq!(f.update(&u3).unwrap().root, h(U3));
            assert_eq!(counters(&f, U3), (3, 81));
            // U4: duplicate path, the last write wins.
            let u4 = upd(
                h(U3),
                vec![
                    (p2(), payload("owner2", "key2", b"IGNORED")),
                    (p2(), payload("owner2", "key2", b"world!")),
                ],
            );
            let r4 = f.update(&u4).unwrap();
            assert_eq!((r4.root, r4.paths), (h(U4), 1));
            assert_eq!(counters(&f, U4), (3, 82));
            // U4': same result without the duplicate; the forest keeps the existing trie.
            let u4b = upd(h(U3), vec![(p2(), payload("owner2", "key2", b"world!"))]);
            let r = f.update(&u4b).unwrap();
            assert_eq!(r.root, h(U4));
            assert!(!r.added);
            // U5: single-path delete keeps len(encoded key) in RegSize.
            let u5 = upd(h(U4), vec![(p3(), payload("owner3", "key3", &[]))]);
            assert_eq!(f.update(&u5).unwrap().root, h(U5));
            assert_eq!(counters(&f, U5), (2, 81));
            // U6 built directly gives the same root and the honest size, but inside the forest the
            // U5 trie stays.
            let u6 = upd(
                e,
                vec![
                    (p2(), payload("owner2", "key2", b"world!")),
                    (p1(), payload("owner1", "key1", &[1, 2, 3])),
                ],
            );
            let (t6, _) = f.new_trie(&u6).unwrap();
            assert_eq!((t6.root_hash(), t6.reg_count, t6.reg_size), (h(U5), 2, 57));
            assert!(!f.update(&u6).unwrap().added);
            assert_eq!(counters(&f, U5), (2, 81));
            // U7: multi-path delete subtracts the full old size.
            let u7 = upd(
                h(U4),
                vec![
                    (p3(), payload("owner3", "key3", &[])),
                    (p4(), payload("owner4", "key4", &[0x44])),
                ],
            );
            assert_eq!(f.update(&u7).unwrap().root, h(U7));
            assert_eq!(counters(&f, U7), (3, 82));
            // tA, tB: a chain of interior nodes down to height 248.
            let ta = upd(
                e,
                vec![
                    (p1(), payload("owner1", "key1", &[1, 2, 3])),
                    (q(), payload("ownerq", "keyq", &[0xaa])),
                ],
            );
            assert_eq!(f.update(&ta).unwrap().root, h(TA));
            assert_eq!(counters(&f, TA), (2, 52));
            let tb = upd(h(TA), vec![(q(), payload("ownerq", "keyq", &[0xbb, 0xcc]))]);
            assert_eq!(f.update(&tb).unwrap().root, h(TB));
            assert_eq!(counters(&f, TB), (2, 53));
            // tB shares tA's p1 leaf object (checkpoint B relies on it).
            let leaf = |t: &Trie| {
                let mut n = t.root.clone().unwrap();
                for _ in 0..8 {
                    n = match &*n {
                        Node::Interior { left, .. } => left.clone().unwrap(),
                        Node::Leaf { .. } | Node::Paged { .. } => break,
                    };
                }
                n
            };
            let (la, lb) = (leaf(f.get(&h(TA)).unwrap()), leaf(f.get(&h(TB)).unwrap()));
            assert_eq!(la.height(), 248);
            assert!(Arc::ptr_eq(&la, &lb));
        }
    }

    #[test]
    fn unknown_parent_is_an_error() {
        let mut f = Forest::new(10, 1);
        let u = upd(h(U1), vec![(p1(), payload("o", "k", &[1]))]);
        assert_eq!(
            f.update(&u),
            Err(ErrorKind::UnknownParentRoot { root: h(U1) })
        );
    }

    #[test]
    fn zero_path_update_returns_parent() {
        let mut f = Forest::new(10, 1);
        let r = f.update(&upd(empty_root(), vec![])).unwrap();
        assert_eq!(r.root, empty_root());
        assert!(!r.added);
    }

    #[test]
    fn deleting_the_only_register_gives_the_empty_root() {
        let mut f = Forest::new(10, 1);
        let r = f
            .update(&upd(empty_root(), vec![(p1(), payload("o", "k", &[1]))]))
            .unwrap();
        let d = f
            .update(&upd(r.root, vec![(p1(), payload("o", "k", &[]))]))
            .unwrap();
        assert_eq!(d.root, empty_root());
        assert!(!d.added); // the empty trie is still cached
                           // A delete of an absent path on the empty trie: a leaf root with an empty value.
        let (t, _) = f
            .new_trie(&upd(empty_root(), vec![(p2(), payload("o", "k", &[]))]))
            .unwrap();
        assert_eq!(t.root_hash(), empty_root());
        assert!(matches!(t.root.as_deref(), Some(Node::Leaf { .. })));
        assert_eq!((t.reg_count, t.reg_size), (0, 0));
    }

    #[test]
    fn rewriting_the_same_value_shares_the_root() {
        let mut f = Forest::new(10, 1);
        let u3 = upd(
            empty_root(),
            vec![
                (p1(), payload("owner1", "key1", &[1, 2, 3])),
                (p2(), payload("owner2", "key2", b"hello")),
            ],
        );
        let r = f.update(&u3).unwrap();
        let (t, _) = f
            .new_trie(&upd(
                r.root,
                vec![(p2(), payload("owner2", "key2", b"hello"))],
            ))
            .unwrap();
        assert!(Arc::ptr_eq(
            t.root.as_ref().unwrap(),
            f.get(&r.root).unwrap().root.as_ref().unwrap()
        ));
    }

    #[test]
    fn fifo_eviction() {
        let mut f = Forest::new(3, 1);
        let mut root = empty_root();
        let mut roots = vec![root];
        for i in 0..4u8 {
            root = f
                .update(&upd(root, vec![(p1(), payload("o", "k", &[i + 1]))]))
                .unwrap()
                .root;
            roots.push(root);
        }
        assert_eq!(f.len(), 3);
        assert!(f.get(&roots[0]).is_none() && f.get(&roots[1]).is_none());
        assert_eq!(f.roots().copied().collect::<Vec<_>>(), roots[2..].to_vec());
        assert_eq!(f.last_added().unwrap().root_hash(), roots[4]);
    }

    /// A sparse Merkle tree computed naively (full depth) must agree with the compact trie
    /// after random batches of writes and deletes, single- and multi-threaded.
    #[test]
    fn matches_naive_sparse_merkle_root() {
        fn naive(regs: &mut [(Path, Vec<u8>)], depth: usize) -> Hash {
            if regs.is_empty() {
                return default_hash((256 - depth) as u16);
            }
            if regs.len() == 1 {
                let (p, v) = &regs[0];
                return compact_value(p, v, (256 - depth) as u16);
            }
            regs.sort_by_key(|r| r.0);
            let split = regs.partition_point(|r| r.0.bit(depth) == 0);
            let (l, r) = regs.split_at_mut(split);
            hash_inter(&naive(l, depth + 1), &naive(r, depth + 1))
        }
        let mut next = xorshift(42);
        for threads in [1, 2] {
            let mut f = Forest::new(4, threads);
            let mut model: HashMap<Path, Vec<u8>> = HashMap::new();
            let mut pool: Vec<Path> = Vec::new();
            let mut root = empty_root();
            for round in 0..24 {
                let n = 1 + next() % 40;
                // Clustered prefixes make deep shared prefixes likely.
                let writes = random_writes(&mut next, &mut pool, n, 4, 5, |b, draw| {
                    if draw % 2 == 0 {
                        b[..30].fill(round as u8 % 3);
                    }
                });
                for (p, pl) in &writes {
                    if pl.value.is_empty() {
                        model.remove(p);
                    } else {
                        model.insert(*p, pl.value.to_vec());
                    }
                }
                root = f.update(&upd(root, writes)).unwrap().root;
                if round % 4 != 3 {
                    continue;
                }
                let mut regs: Vec<(Path, Vec<u8>)> =
                    model.iter().map(|(p, v)| (*p, v.clone())).collect();
                assert_eq!(root, naive(&mut regs, 0), "round {round}");
                let t = f.get(&root).unwrap();
                assert!(t.verify_hashes().unwrap());
                let mut c = t.leaves();
                let listed = c.next_chunk(usize::MAX).unwrap();
                assert_eq!(listed.len(), model.len());
                assert!(listed.windows(2).all(|w| w[0].path().0 < w[1].path().0));
                for reg in &listed {
                    assert_eq!(reg.value(), model[reg.path()].as_slice());
                    assert_eq!(t.get(reg.path()).unwrap().unwrap().value(), reg.value());
                }
            }
        }
    }

    /// Large batches (writes, overwrites, deletes, clustered prefixes) give the same tries,
    /// counters and root hashes whether subtries are updated on one thread or split across
    /// two to four, and the split path is really taken.
    #[test]
    fn parallel_subtrie_updates_match_sequential() {
        let mut next = xorshift(7);
        let mut forests: Vec<Forest> = [1, 2, 3, 4].map(|t| Forest::new(4, t)).into();
        let mut pool: Vec<Path> = Vec::new();
        let mut root = empty_root();
        for round in 0..8 {
            let n = [150, 3000, 700, 2500, 64, 1800, 4000, 129][round];
            // Deep shared prefixes: long single-child chains under a split.
            let writes = random_writes(&mut next, &mut pool, n, 5, 300, |b, draw| {
                if draw % 8 == 0 {
                    b[1..28].fill(round as u8);
                }
            });
            let u = upd(root, writes);
            let applied: Vec<Applied> = forests.iter_mut().map(|f| f.update(&u).unwrap()).collect();
            root = applied[0].root;
            let seq = forests[0].get(&root).unwrap();
            assert!(seq.verify_hashes().unwrap());
            for (f, a) in forests.iter().zip(&applied).skip(1) {
                assert_eq!(a, &applied[0], "round {round}");
                let t = f.get(&root).unwrap();
                assert_eq!((t.reg_count, t.reg_size), (seq.reg_count, seq.reg_size));
                assert!(t.verify_hashes().unwrap());
            }
        }
        let split = |f: &Forest| f.stats().parallel_subtries.load(Ordering::Relaxed);
        assert_eq!(split(&forests[0]), 0);
        // Both halves of the root hold over PARALLEL_MIN_ITEMS in the large rounds; with four
        // threads the halves split again.
        assert!(split(&forests[1]) >= 5, "{}", split(&forests[1]));
        assert!(split(&forests[3]) > split(&forests[1]));
        // The same hashing work, however it was split (no subtrie here shrinks to one leaf,
        // whose lift above a split would cost one permutation that is not counted).
        let perms = |f: &Forest| f.stats().permutations.load(Ordering::Relaxed);
        assert!(perms(&forests[0]) > 0);
        assert!(forests.iter().all(|f| perms(f) == perms(&forests[0])));
    }

    fn scratch(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("rechain-paged-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    /// Leaves of a trie as (path, value, height, hash).
    fn leaf_rows(t: &Trie) -> Vec<(Path, Vec<u8>, u16, Hash)> {
        t.leaves()
            .next_leaf_nodes(usize::MAX)
            .unwrap()
            .iter()
            .map(|n| match &**n {
                Node::Leaf { height, reg, hash } => {
                    (*reg.path(), reg.value().to_vec(), *height, *hash)
                }
                _ => panic!("a cursor yields leaves"),
            })
            .collect()
    }

    /// A forest paged out to a node store (new nodes written out every few KiB, a cache of a
    /// few KiB) gives the in-memory forest's roots, counters, leaves and lookups after every
    /// update, forks included, on one and two threads; and a checkpoint written from it has
    /// the in-memory forest's bytes (flow-go's de-duplication of shared nodes holds through
    /// the store).
    #[test]
    fn paged_forest_matches_the_in_memory_one() {
        let dir = scratch("match");
        for threads in [1usize, 2] {
            let cache = 16 << 10;
            let store = NodeStore::create(&dir.join(format!("store{threads}")), cache).unwrap();
            let mut mem = Forest::new(6, threads);
            let mut paged = Forest::new(6, threads)
                .with_paging(store.clone(), 8 << 10)
                .unwrap();
            let mut next = xorshift(11 + threads as u64);
            let mut pool: Vec<Path> = Vec::new();
            let mut roots = vec![empty_root()];
            for round in 0..30 {
                let n = [1, 40, 300, 7, 2000, 130][round % 6];
                let writes = random_writes(&mut next, &mut pool, n, 4, 90, |b, draw| {
                    if draw % 5 == 0 {
                        b[..20].fill(0x5a);
                    }
                });
                // Every seventh update forks from an older trie still in the forest.
                let base = if round % 7 == 6 {
                    roots[roots.len() - 3]
                } else {
                    roots[roots.len() - 1]
                };
                let u = upd(base, writes);
                let a = mem.update(&u).unwrap();
                assert_eq!(paged.update(&u).unwrap(), a, "round {round}");
                roots.push(a.root);
                let (tm, tp) = (mem.get(&a.root).unwrap(), paged.get(&a.root).unwrap());
                assert_eq!((tp.reg_count, tp.reg_size), (tm.reg_count, tm.reg_size));
                let rows = leaf_rows(tm);
                assert_eq!(leaf_rows(tp), rows, "round {round}");
                for (p, v, _, _) in rows.iter().step_by(97) {
                    let got = tp.get(p).unwrap().expect("allocated register");
                    assert_eq!(got.value(), v.as_slice());
                }
                let absent = Path([0xee; 32]);
                assert_eq!(
                    tp.get(&absent).unwrap().is_none(),
                    tm.get(&absent).unwrap().is_none()
                );
            }
            let last = roots[roots.len() - 1];
            assert!(paged.get(&last).unwrap().verify_hashes().unwrap());
            let stats = &store.stats;
            assert!(stats.loads.load(Ordering::Relaxed) > 1000);
            assert!(stats.nodes_written.load(Ordering::Relaxed) > 10_000);
            assert!(store.cached_bytes() <= cache, "{}", store.cached_bytes());

            paged.page_out().unwrap();
            let tries = |f: &Forest| -> Vec<Trie> {
                f.roots().map(|r| f.get(r).unwrap().clone()).collect()
            };
            let name = "checkpoint.00000001";
            let (dm, dp) = (
                dir.join(format!("mem{threads}")),
                dir.join(format!("paged{threads}")),
            );
            std::fs::create_dir_all(&dm).unwrap();
            std::fs::create_dir_all(&dp).unwrap();
            let wm = crate::flow::checkpoint::write_tries(&tries(&mem), &dm, name, 2).unwrap();
            let wp = crate::flow::checkpoint::write_tries(&tries(&paged), &dp, name, 2).unwrap();
            assert_eq!(wp, wm);
            let mut files = 0;
            for e in std::fs::read_dir(&dm).unwrap() {
                let f = e.unwrap().file_name();
                let want = std::fs::read(dm.join(&f)).unwrap();
                assert_eq!(std::fs::read(dp.join(&f)).unwrap(), want, "{f:?}");
                files += 1;
            }
            assert_eq!(files, 18);

            // The store's folder goes with the forest and the last placeholder.
            let folder = dir.join(format!("store{threads}"));
            drop(paged);
            assert!(folder.exists());
            drop(store);
            assert!(!folder.exists());
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// After a page-out the cache holds the top of the newest trie as written, nearest the
    /// root first: updates on top of it find those nodes there instead of reading them from
    /// the files (every hit is a read a forest without that cache makes), give the in-memory
    /// forest's roots, and the cache stays within its budget across page-outs.
    #[test]
    fn updates_after_a_page_out_find_the_top_in_the_cache() {
        let dir = scratch("top");
        let cache = 64 << 10;
        let forest = |name: &str, cache: usize| {
            let store = NodeStore::create(&dir.join(name), cache).unwrap();
            // Paged out by hand, below.
            let f = Forest::new(6, 1)
                .with_paging(store.clone(), u64::MAX)
                .unwrap();
            (f, store)
        };
        let (mut cached, store) = forest("cached", cache);
        let (mut uncached, bare) = forest("uncached", 0);
        let mut mem = Forest::new(6, 1);
        let mut next = xorshift(21);
        let mut pool = Vec::new();
        let counts = |s: &NodeStore| {
            (
                s.stats.loads.load(Ordering::Relaxed),
                s.stats.cache_hits.load(Ordering::Relaxed),
            )
        };
        let mut root = empty_root();
        for round in 0..6 {
            let n = if round == 0 { 3000 } else { 60 };
            let u = upd(
                root,
                random_writes(&mut next, &mut pool, n, 9, 40, |_, _| {}),
            );
            let a = mem.update(&u).unwrap();
            let (before, bare_before) = (counts(&store), counts(&bare));
            assert_eq!(cached.update(&u).unwrap(), a, "round {round}");
            assert_eq!(uncached.update(&u).unwrap(), a, "round {round}");
            let (after, bare_after) = (counts(&store), counts(&bare));
            let (loads, hits) = (after.0 - before.0, after.1 - before.1);
            assert_eq!(bare_after.1, 0);
            assert_eq!(loads + hits, bare_after.0 - bare_before.0, "round {round}");
            if round > 0 {
                // The root and the levels under it, at least.
                assert!(hits >= 8, "round {round}: {hits} hits, {loads} loads");
            }
            assert!(store.cached_bytes() <= cache, "{}", store.cached_bytes());
            cached.page_out().unwrap();
            uncached.page_out().unwrap();
            root = a.root;
        }
        let t = cached.get(&root).unwrap();
        assert!(t.verify_hashes().unwrap());
        assert_eq!(leaf_rows(t), leaf_rows(mem.get(&root).unwrap()));
        drop((cached, uncached, store, bare));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A flipped byte in a node file is found by its record checksum when the node is loaded:
    /// the update fails with the file and offset, it does not panic or build a wrong trie.
    #[test]
    fn damaged_node_store_fails_the_update_with_file_and_offset() {
        let dir = scratch("damage");
        let store = NodeStore::create(&dir, 1 << 20).unwrap();
        let mut f = Forest::new(4, 1).with_paging(store.clone(), 1).unwrap();
        let mut next = xorshift(5);
        let mut pool = Vec::new();
        let writes = random_writes(&mut next, &mut pool, 200, 9, 40, |_, _| {});
        let root = f.update(&upd(empty_root(), writes)).unwrap().root;
        // The last record written is the new trie's root.
        let file = dir.join("nodes-000000.bin");
        let mut bytes = std::fs::read(&file).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0x10;
        std::fs::write(&file, bytes).unwrap();
        store.clear_cache();
        let writes = random_writes(&mut next, &mut pool, 10, 9, 40, |_, _| {});
        match f.update(&upd(root, writes)) {
            Err(ErrorKind::Io { op, message }) => {
                assert_eq!(op, "node store");
                assert!(message.contains("nodes-000000.bin"), "{message}");
                assert!(message.contains("checksum"), "{message}");
            }
            other => panic!("expected a node store error, got {other:?}"),
        }
        drop(f);
        drop(store);
        assert!(!dir.exists());
    }
}
