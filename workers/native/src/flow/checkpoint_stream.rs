//! Streaming read of a v6 checkpoint (spec §5): every node hash recomputed and the last trie's
//! registers written to `registers` / `register_hashes` Parquet files while the parts are
//! read, in memory bounded by the trie depth and one output batch per part, whatever the
//! checkpoint's size.
//!
//! flow-go writes each subtrie part children first: a depth-first, left-then-right,
//! post-order walk of one subtrie per trie (`storeUniqueNodes`). For a single trie every
//! interior node's children are therefore the subtrees completed just before it (the right
//! one last), so a stack of pending `(index, hash, height)` — at most one entry per level —
//! is all the state the hashes need, and the leaves arrive in path order. The top part
//! (`.016`, a few nodes per trie) is read first, so its references into the parts are known,
//! and resolved last from the parts' roots. A checkpoint of several tries (which share nodes:
//! a later trie's nodes reference earlier ones anywhere in the part) is refused with kind
//! `shared_node` before any part is read; the caller reads those with
//! [`super::checkpoint::load`]; one without a trie record with kind `no_tries`. In a one-trie
//! checkpoint a node referencing anything but the subtrees just before it is damage, and so is
//! a leaf out of path order (`bad_path_order`, checked even when the hashes are trusted).
//!
//! Nothing here decides what is published: the files are written where the caller says (a
//! staging folder) and are only meaningful if this returns `Ok` (every CRC, node and root
//! checked).
//!
//! What happens to the checked leaves is the caller's: [`stream`] writes them to Parquet,
//! [`verify`] drops them, [`stream_into`] hands them (and each interior node's height) to any
//! [`PartSink`], one per part (`checkpoint stats` folds them into counts, see
//! [`super::checkpoint_stats`]).

use super::batches::{leaf_hashes_batch, leaf_hashes_batch_with, register_tables, registers_batch};
use super::checkpoint::{
    checkpoint_version, computed_hash, finish_part, first_interior_mismatch, open_part, part_name,
    path_under, read_header, read_node, subtrie_position, CheckpointError, CpResult, InteriorCheck,
    NodeFields, PartInfo, RawNode, Verify, LEAF_BATCH, MAGIC_SUBTRIE, MAGIC_TOPTRIE, SUBTRIE_COUNT,
    SUBTRIE_LEVEL, TOP_PART, TRIE_RECORD_LEN, VERSION_V6,
};
use super::hash::{
    compact_values_from, default_hash, empty_root, hash_leaves, Hash, LeafJob, Path, MAX_HEIGHT,
};
use super::mtrie::{Node, Register, Trie};
use super::node_store::{NodeStore, NodeWriter, StoreError};
use super::register_sst::{RegisterSst, RegisterSstWriter};
use crate::bounded::map_bounded;
use crate::parquet_out::{AlignedTables, RowGroups};
use std::collections::HashMap;
use std::path::{Path as FsPath, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Pending subtrees a single trie's walk can leave on the stack: one per level below the
/// subtrie root, and the root.
const MAX_PENDING: usize = MAX_HEIGHT as usize + 2;

/// The offset of a buffered leaf that is not this part's (its hash is checked elsewhere).
const CHECKED_ELSEWHERE: u64 = u64::MAX;

/// Where and how to stream.
#[derive(Debug, Clone)]
pub struct StreamOptions {
    pub threads: usize,
    /// Hashes to recompute: `Full` (default), `Interior` (trust leaf hashes), `None` (trust
    /// every stored hash, as flow-go does; structure, CRCs and order still checked).
    pub verify: Verify,
    /// One `registers` and one `register_hashes` file per subtrie part (16 each, path order).
    pub registers: Vec<PathBuf>,
    pub hashes: Vec<PathBuf>,
    pub groups: RowGroups,
    /// Bytes of register payloads a part buffers before writing them out.
    pub batch_bytes: usize,
    /// RocksDB's `flow_registers` entries as SST files too, each part's own (prefix `NN-`).
    pub sst: Option<RegisterSst>,
}

/// What a streamed read found.
#[derive(Debug, Clone, Default)]
pub struct StreamInfo {
    /// `(root, reg_count, reg_size)` per trie record.
    pub tries: Vec<(Hash, u64, u64)>,
    pub parts: Vec<PartInfo>,
    pub top_nodes: u64,
    /// Rows written to each table, and how many of them hold a value.
    pub rows: u64,
    pub registers: u64,
    /// Heights of the top part's interior nodes (the trie's first levels; its top-part
    /// leaves go to the parts' sinks, in path order).
    pub top_interior_heights: Vec<u16>,
}

/// A completed subtree waiting for its parent.
#[derive(Debug, Clone, Copy)]
struct Pending {
    index: u64,
    hash: Hash,
    height: u16,
    /// A leaf path under it (see [`path_under`]).
    path: Path,
}

/// A top-part node as stored (children as global indices).
struct TopNode {
    at: u64,
    raw: RawNode,
}

struct TrieRecord {
    at: u64,
    root_index: u64,
    reg_count: u64,
    reg_size: u64,
    root_hash: Hash,
}

/// The top part, read before the parts; its nodes are resolved after them.
struct Top {
    file: PathBuf,
    nodes: Vec<TopNode>,
    tries: Vec<TrieRecord>,
}

fn read_top_raw(dir: &FsPath, name: &str, expected_crc: u32, total: u64) -> CpResult<Top> {
    let file = dir.join(part_name(name, TOP_PART));
    let (mut r, footer) = open_part(&file, MAGIC_TOPTRIE, 10, expected_crc)?;
    let top_count = u64::from_be_bytes(footer[..8].try_into().expect("8 bytes"));
    let trie_count = u16::from_be_bytes([footer[8], footer[9]]) as u64;
    let stored_total = r.u64("subtrie node count")?;
    if stored_total != total {
        // A part's count may be the damaged one: its checksum says which.
        for i in 0..SUBTRIE_COUNT {
            part_checksum(&dir.join(part_name(name, i)))?;
        }
        return Err(CheckpointError::new(
            &file,
            4,
            "bad_count",
            format!(
                "mismatch subtrie node count: top part says {stored_total}, parts hold {total}"
            ),
        ));
    }
    let room = r.end.saturating_sub(r.offset);
    if trie_count * TRIE_RECORD_LEN > room {
        return Err(CheckpointError::new(
            &file,
            r.end,
            "bad_count",
            format!("{trie_count} trie records cannot fit in {room} bytes"),
        ));
    }
    super::checkpoint::check_count(&file, r.end, top_count, room - trie_count * TRIE_RECORD_LEN)?;
    let mut nodes = Vec::with_capacity(top_count as usize);
    for j in 1..=top_count {
        let (at, raw) = read_node(&mut r)?;
        if let RawNode::Interior { left, right, .. } = &raw {
            let fields = NodeFields::v6(at);
            for (c, field) in [(*left, fields.left), (*right, fields.right)] {
                if c >= total + j {
                    return Err(CheckpointError::new(
                        &file,
                        field,
                        "bad_child_index",
                        format!(
                            "node {} has child index {c}: does not satisfy descendants-first order",
                            total + j
                        ),
                    ));
                }
            }
        }
        nodes.push(TopNode { at, raw });
    }
    let mut tries = Vec::with_capacity(trie_count as usize);
    for _ in 0..trie_count {
        let at = r.offset;
        tries.push(TrieRecord {
            at,
            root_index: r.u64("trie root index")?,
            reg_count: r.u64("trie register count")?,
            reg_size: r.u64("trie register size")?,
            root_hash: Hash(r.hash("trie root hash")?),
        });
    }
    finish_part(&r, &footer, expected_crc)?;
    Ok(Top { file, nodes, tries })
}

/// Checks a part's trailing CRC-32C against its contents (read once, sequentially).
fn part_checksum(file: &FsPath) -> CpResult<()> {
    use std::io::Read;
    let mut f = std::fs::File::open(file).map_err(|e| CheckpointError::io(file, 0, &e))?;
    let len = f
        .metadata()
        .map_err(|e| CheckpointError::io(file, 0, &e))?
        .len();
    let body = len.saturating_sub(4);
    let mut crc = 0u32;
    let mut buf = vec![0u8; 1 << 16];
    let mut left = body;
    while left > 0 {
        let n = (left as usize).min(buf.len());
        f.read_exact(&mut buf[..n])
            .map_err(|e| CheckpointError::io(file, body - left, &e))?;
        crc = crc32c::crc32c_append(crc, &buf[..n]);
        left -= n as u64;
    }
    let mut stored = [0u8; 4];
    f.read_exact(&mut stored)
        .map_err(|e| CheckpointError::io(file, body, &e))?;
    if u32::from_be_bytes(stored) != crc {
        return Err(CheckpointError::new(
            file,
            body,
            "checksum",
            format!(
                "invalid checksum: stored {:08x}, computed {crc:08x}",
                u32::from_be_bytes(stored)
            ),
        ));
    }
    Ok(())
}

/// Where the last trie's registers come from at each of the 16 subtrie positions: the local
/// root index of a part's subtrie, or a leaf of the top part covering that position (written
/// into the first position's file, so the files stay in path order).
#[derive(Default, Clone)]
struct Slot {
    part_root: Option<u64>,
    top_leaf: Option<usize>,
}

/// Walks the last trie's top levels: which part node or top leaf sits at each position.
fn last_trie_slots(top: &Top, starts: &[u64], total: u64) -> CpResult<Vec<Slot>> {
    let mut slots = vec![Slot::default(); SUBTRIE_COUNT];
    let Some(rec) = top.tries.last() else {
        return Ok(slots);
    };
    // (global index, level, position at that level)
    let mut todo = vec![(rec.root_index, 0usize, 0usize, rec.at)];
    while let Some((g, level, pos, at)) = todo.pop() {
        if g == 0 {
            continue;
        }
        if g <= total {
            if level != SUBTRIE_LEVEL {
                return Err(CheckpointError::new(
                    &top.file,
                    at,
                    "bad_child_index",
                    format!("subtrie node {g} referenced at level {level}, not {SUBTRIE_LEVEL}"),
                ));
            }
            let (lo, hi) = (starts[pos], starts[pos + 1]);
            if g < lo || g >= hi {
                return Err(CheckpointError::new(
                    &top.file,
                    at,
                    "bad_child_index",
                    format!("node {g} at subtrie position {pos} is not in part {pos}"),
                ));
            }
            slots[pos].part_root = Some(g - lo + 1);
            continue;
        }
        let j = (g - total - 1) as usize;
        let node = top.nodes.get(j).ok_or_else(|| {
            CheckpointError::new(
                &top.file,
                at,
                "bad_child_index",
                format!("node index {g} is not a stored node"),
            )
        })?;
        match &node.raw {
            RawNode::Leaf { .. } => {
                slots[pos << (SUBTRIE_LEVEL - level)].top_leaf = Some(j);
            }
            RawNode::Interior { left, right, .. } => {
                if level >= SUBTRIE_LEVEL {
                    return Err(CheckpointError::new(
                        &top.file,
                        node.at,
                        "bad_node",
                        format!("top-part interior node {g} below level {SUBTRIE_LEVEL}"),
                    ));
                }
                todo.push((*left, level + 1, 2 * pos, node.at + 35));
                todo.push((*right, level + 1, 2 * pos + 1, node.at + 43));
            }
        }
    }
    Ok(slots)
}

/// Where the checked leaves of one part go, in path order, and what it sees of the part's
/// interior nodes. One sink per part, on that part's thread.
pub trait PartSink {
    /// What the sink hands back once its part is complete.
    type Done: Send;
    /// Whether [`Self::leaves`] is given each leaf's `HashLeaf(path, value)`.
    const LEAF_HASHES: bool = false;
    /// Leaves (every one a `Node::Leaf`) whose hashes checked out, in path order, with their
    /// `HashLeaf` values if the sink asks for them (computed once for the check and the sink).
    fn leaves(&mut self, leaves: &[Arc<Node>], leaf_hashes: Option<&[Hash]>) -> Result<(), String>;
    /// An interior node of the trie as read (children first, as stored): its height, stored
    /// hash, and which children it has (the subtrees completed just before it, right last).
    fn interior(&mut self, _height: u16, _hash: &Hash, _children: [bool; 2]) -> Result<(), String> {
        Ok(())
    }
    /// A leaf of the part's subtrie as read, before its hash is checked (in the order of
    /// [`Self::interior`]; the checked leaves come later through [`Self::leaves`]).
    fn leaf_read(&mut self, _leaf: &Arc<Node>) -> Result<(), String> {
        Ok(())
    }
    fn finish(self) -> Result<Self::Done, String>;
}

/// The `registers` and `register_hashes` files of one part, and its register SST files
/// ([`stream`]'s sink).
struct RegisterFiles {
    tables: AlignedTables,
    sst: Option<RegisterSstWriter>,
}

impl PartSink for RegisterFiles {
    type Done = (u64, Vec<PathBuf>);
    const LEAF_HASHES: bool = true;

    fn leaves(&mut self, leaves: &[Arc<Node>], leaf_hashes: Option<&[Hash]>) -> Result<(), String> {
        let regs: Vec<&Arc<Register>> = leaves.iter().filter_map(|l| l.register()).collect();
        if let Some(w) = self.sst.as_mut() {
            w.add(&regs)?;
        }
        let hashes = match leaf_hashes {
            Some(h) => leaf_hashes_batch_with(leaves, h),
            None => leaf_hashes_batch(leaves),
        };
        self.tables.write(&[registers_batch(&regs), hashes])
    }

    fn finish(self) -> Result<Self::Done, String> {
        let rows = self.tables.finish()?;
        let files = match self.sst {
            Some(w) => w.finish()?,
            None => Vec::new(),
        };
        Ok((rows, files))
    }
}

/// Output of one part: leaves buffered, then checked (hash chains on SIMD lanes) and handed
/// to the sink.
struct PartOut<S> {
    file: PathBuf,
    sink: S,
    batch: Vec<(u64, Arc<Node>)>,
    /// Interior nodes to check, checked on SIMD lanes with the leaves: (offset, left child's
    /// hash, right child's hash, stored hash).
    interior: Vec<InteriorCheck>,
    bytes: usize,
    check_leaves: bool,
    rows: u64,
    registers: u64,
    permutations: u64,
}

impl<S: PartSink> PartOut<S> {
    fn push(&mut self, at: u64, leaf: Arc<Node>, limit: usize) -> CpResult<()> {
        if let Node::Leaf { reg, .. } = &*leaf {
            self.bytes += reg.key().len() + reg.value().len() + 100;
        }
        self.batch.push((at, leaf));
        if self.batch.len() >= LEAF_BATCH || self.bytes >= limit {
            self.flush()?;
        }
        Ok(())
    }

    fn push_interior(&mut self, at: u64, children: (Hash, Hash), stored: Hash) -> CpResult<()> {
        self.interior.push((at, children.0, children.1, stored));
        if self.interior.len() >= LEAF_BATCH {
            self.flush()?;
        }
        Ok(())
    }

    /// Checks the buffered nodes' stored hashes (the first mismatch in file order is the
    /// error), then writes the leaves.
    fn flush(&mut self) -> CpResult<()> {
        let mut first = first_interior_mismatch(&self.file, &mut self.interior);
        if self.batch.is_empty() {
            return first.map_or(Ok(()), Err);
        }
        // Every buffered node is a leaf (see `push`).
        let leaf_hashes = (self.check_leaves || S::LEAF_HASHES).then(|| {
            let pairs: Vec<(&Path, &[u8])> = self
                .batch
                .iter()
                .filter_map(|(_, n)| n.register())
                .map(|r| (r.path(), r.value()))
                .collect();
            hash_leaves(&pairs)
        });
        if let (true, Some(starts)) = (self.check_leaves, &leaf_hashes) {
            let jobs: Vec<LeafJob> = self
                .batch
                .iter()
                .filter_map(|(_, n)| match &**n {
                    Node::Leaf { height, reg, .. } => {
                        self.permutations +=
                            super::hash::compact_value_permutations(reg.value().len(), *height);
                        Some(LeafJob {
                            path: reg.path(),
                            value: reg.value(),
                            height: *height,
                        })
                    }
                    Node::Interior { .. } | Node::Paged { .. } => None,
                })
                .collect();
            // A top-part leaf is checked with the top part.
            let leaf = self
                .batch
                .iter()
                .zip(compact_values_from(&jobs, starts))
                .find(|((at, n), computed)| *computed != n.hash() && *at != CHECKED_ELSEWHERE)
                .map(|((at, n), computed)| {
                    CheckpointError::hash_mismatch(&self.file, *at, n.hash(), computed)
                });
            if let Some(e) = leaf {
                if first.as_ref().is_none_or(|f| e.offset < f.offset) {
                    first = Some(e);
                }
            }
        }
        if let Some(e) = first {
            return Err(e);
        }
        let leaves: Vec<Arc<Node>> = self.batch.drain(..).map(|(_, n)| n).collect();
        self.registers += leaves
            .iter()
            .filter_map(|l| l.register())
            .filter(|r| !r.value().is_empty())
            .count() as u64;
        self.rows += leaves.len() as u64;
        self.sink
            .leaves(&leaves, leaf_hashes.as_deref())
            .map_err(|m| CheckpointError::new(&self.file, 0, "io", m))?;
        self.bytes = 0;
        Ok(())
    }
}

fn leaf_node(raw: RawNode) -> Arc<Node> {
    match raw {
        RawNode::Leaf { height, hash, reg } => Arc::new(Node::Leaf { height, reg, hash }),
        RawNode::Interior { .. } => unreachable!("only leaves are written out"),
    }
}

/// What one part's stream leaves for the top part: its subtrie root, and its sink's result.
struct PartDone<D> {
    info: PartInfo,
    root: Option<Pending>,
    rows: u64,
    registers: u64,
    sink: D,
}

/// How to walk the parts: threads, hashes to recompute, leaf bytes a part buffers.
#[derive(Debug, Clone, Copy)]
pub struct Walk {
    pub threads: usize,
    pub verify: Verify,
    pub batch_bytes: usize,
}

/// Streams subtrie part `index`: hashes with the pending stack, leaves out through `sink`.
#[allow(clippy::too_many_arguments)]
fn stream_part<S: PartSink>(
    dir: &FsPath,
    name: &str,
    index: usize,
    expected_crc: u32,
    walk_opts: Walk,
    sink: S,
    top_leaf: Option<Arc<Node>>,
    stop: &AtomicBool,
) -> CpResult<PartDone<S::Done>> {
    let file = dir.join(part_name(name, index));
    let (mut r, footer) = open_part(&file, MAGIC_SUBTRIE, 8, expected_crc)?;
    let count = u64::from_be_bytes(footer[..8].try_into().expect("8 bytes"));
    super::checkpoint::check_count(&file, r.end, count, r.end - 4)?;
    let mut out = PartOut {
        file: file.clone(),
        sink,
        batch: Vec::new(),
        interior: Vec::new(),
        bytes: 0,
        check_leaves: walk_opts.verify == Verify::Full,
        rows: 0,
        registers: 0,
        permutations: 0,
    };
    let limit = walk_opts.batch_bytes.max(1);
    let check_interior = walk_opts.verify != Verify::None;
    let mut stack: Vec<Pending> = Vec::with_capacity(MAX_PENDING);
    let (mut leaves, mut interior_perms) = (0u64, 0u64);
    let mut last_path: Option<Path> = None;
    let mut walk = |out: &mut PartOut<S>| -> CpResult<()> {
        for i in 1..=count {
            if i % 65_536 == 0 && stop.load(Ordering::Relaxed) {
                return Err(CheckpointError::new(
                    &file,
                    r.offset,
                    "cancelled",
                    "another part failed",
                ));
            }
            let (at, raw) = read_node(&mut r)?;
            let (height, stored) = match &raw {
                RawNode::Leaf { height, hash, .. } | RawNode::Interior { height, hash, .. } => {
                    (*height, *hash)
                }
            };
            if height > MAX_HEIGHT {
                return Err(CheckpointError::new(
                    &file,
                    at + 1,
                    "bad_height",
                    format!("node height {height} > {MAX_HEIGHT}"),
                ));
            }
            let path = if let RawNode::Interior { left, right, .. } = raw {
                let mut child = |c: u64, field: u64| -> CpResult<Option<Pending>> {
                    if c == 0 {
                        return Ok(None);
                    }
                    if c >= i {
                        return Err(CheckpointError::new(
                            &file,
                            at + field,
                            "bad_child_index",
                            format!(
                                "node {i} has child index {c}: does not satisfy descendants-first order"
                            ),
                        ));
                    }
                    match stack.last() {
                        Some(p) if p.index == c => Ok(stack.pop()),
                        // One trie shares no nodes: anything else is damage.
                        _ => Err(CheckpointError::new(
                            &file,
                            at + field,
                            "bad_child_index",
                            format!(
                                "node {i} has child {c}, not the subtree completed just before it"
                            ),
                        )),
                    }
                };
                // The right subtree was completed last.
                let rc = child(right, 43)?;
                let lc = child(left, 35)?;
                if lc.is_none() && rc.is_none() {
                    return Err(CheckpointError::new(
                        &file,
                        at,
                        "bad_node",
                        "interior node without children",
                    ));
                }
                for c in [lc, rc].into_iter().flatten() {
                    if c.height + 1 != height {
                        return Err(CheckpointError::new(
                            &file,
                            at + 1,
                            "bad_height",
                            format!("node of height {height} has a child of height {}", c.height),
                        ));
                    }
                }
                out.sink
                    .interior(height, &stored, [lc.is_some(), rc.is_some()])
                    .map_err(|m| CheckpointError::new(&file, at, "io", m))?;
                if check_interior {
                    interior_perms += 1;
                    let d = default_hash(height - 1);
                    let children = (lc.map_or(d, |c| c.hash), rc.map_or(d, |c| c.hash));
                    out.push_interior(at, children, stored)?;
                }
                path_under(&file, at, height, lc.map(|c| c.path), rc.map(|c| c.path))?
            } else {
                leaves += 1;
                let leaf = leaf_node(raw);
                let path = match leaf.register() {
                    Some(reg) => *reg.path(),
                    None => unreachable!("a leaf read from a part holds its register"),
                };
                // Each leaf lies where its path leads: under its part's position, after the
                // leaf before it (checked here, before the sink takes it: the registers it
                // writes are keys in path order), and on the side of each node above it that
                // its path takes (`path_under`, as the node is read). Hashes check this too; a
                // read that trusts them still must.
                let position = subtrie_position(&path);
                let misplaced = if position != index {
                    Some(format!(
                        "lies under subtrie position {position}, not {index}"
                    ))
                } else if last_path.is_some_and(|p| path <= p) {
                    Some("is not after the part's leaf before it".to_string())
                } else {
                    None
                };
                if let Some(why) = misplaced {
                    return Err(CheckpointError::new(
                        &file,
                        at,
                        "bad_path_order",
                        format!("leaf path {} {why}", path.to_hex()),
                    ));
                }
                last_path = Some(path);
                out.sink
                    .leaf_read(&leaf)
                    .map_err(|m| CheckpointError::new(&file, at, "io", m))?;
                out.push(at, leaf, limit)?;
                path
            };
            stack.push(Pending {
                index: i,
                hash: stored,
                height,
                path,
            });
            if stack.len() > MAX_PENDING {
                return Err(CheckpointError::new(
                    &file,
                    at,
                    "unreferenced_node",
                    format!("more than {MAX_PENDING} nodes read without a parent"),
                ));
            }
        }
        Ok(())
    };
    if let Some(leaf) = top_leaf {
        // The part is empty for this trie: the top leaf's register is its position's row.
        out.push(CHECKED_ELSEWHERE, leaf, limit)?;
    }
    if let Err(e) = walk(&mut out) {
        // Hash checks still buffered cover nodes before it: the first damage in file order wins.
        return Err(match out.flush() {
            Err(earlier) if e.kind != "cancelled" && earlier.offset < e.offset => earlier,
            _ => e,
        });
    }
    out.flush()?;
    finish_part(&r, &footer, expected_crc)?;
    if stack.len() > 1 {
        return Err(CheckpointError::new(
            &file,
            r.end,
            "unreferenced_node",
            format!(
                "{} subtrees end the part without a parent (one expected)",
                stack.len()
            ),
        ));
    }
    let sink = out
        .sink
        .finish()
        .map_err(|m| CheckpointError::new(&file, 0, "io", m))?;
    Ok(PartDone {
        info: PartInfo {
            index,
            nodes: count,
            leaves,
            bytes: r.end + 12,
            permutations: out.permutations + interior_perms,
        },
        root: stack.pop(),
        rows: out.rows,
        registers: out.registers,
        sink,
    })
}

/// Resolves the top nodes from the parts' roots and checks every trie record. Every top
/// node's hash is recomputed whatever the read trusts (a few nodes), as [`load`] does, so a
/// trusting read refuses the same damage there as the in-memory one.
///
/// [`load`]: super::checkpoint::load
fn resolve_top(
    top: &Top,
    roots: &HashMap<u64, Pending>,
    total: u64,
) -> CpResult<Vec<(Hash, u64, u64)>> {
    let mut resolved: Vec<Pending> = Vec::with_capacity(top.nodes.len());
    let get = |resolved: &Vec<Pending>, g: u64, at: u64| -> CpResult<Option<Pending>> {
        if g == 0 {
            return Ok(None);
        }
        let found = if g <= total {
            roots.get(&g).copied()
        } else {
            resolved.get((g - total - 1) as usize).copied()
        };
        found.map(Some).ok_or_else(|| {
            CheckpointError::new(
                &top.file,
                at,
                "bad_child_index",
                format!("node index {g} is not a subtrie root or an earlier top node"),
            )
        })
    };
    for (j, n) in top.nodes.iter().enumerate() {
        let g = total + 1 + j as u64;
        let (height, stored) = match &n.raw {
            RawNode::Leaf { height, hash, .. } | RawNode::Interior { height, hash, .. } => {
                (*height, *hash)
            }
        };
        if height > MAX_HEIGHT || height == 0 && matches!(n.raw, RawNode::Interior { .. }) {
            return Err(CheckpointError::new(
                &top.file,
                n.at + 1,
                "bad_height",
                format!("node height {height}"),
            ));
        }
        let (children, l, r) = match &n.raw {
            RawNode::Interior { left, right, .. } => {
                let (l, r) = (
                    get(&resolved, *left, n.at + 35)?,
                    get(&resolved, *right, n.at + 43)?,
                );
                if l.is_none() && r.is_none() {
                    return Err(CheckpointError::new(
                        &top.file,
                        n.at,
                        "bad_node",
                        "interior node without children",
                    ));
                }
                for c in [l, r].into_iter().flatten() {
                    if c.height + 1 != height {
                        return Err(CheckpointError::new(
                            &top.file,
                            n.at + 1,
                            "bad_height",
                            format!("node of height {height} has a child of height {}", c.height),
                        ));
                    }
                }
                (Some((l, r)), l.map(|c| c.hash), r.map(|c| c.hash))
            }
            RawNode::Leaf { .. } => (None, None, None),
        };
        let path = match (children, &n.raw) {
            (Some((l, r)), _) => path_under(
                &top.file,
                n.at,
                height,
                l.map(|c| c.path),
                r.map(|c| c.path),
            )?,
            (None, RawNode::Leaf { reg, .. }) => *reg.path(),
            (None, RawNode::Interior { .. }) => unreachable!("an interior node has children"),
        };
        let computed = computed_hash(height, &n.raw, l, r);
        if computed != stored {
            return Err(CheckpointError::hash_mismatch(
                &top.file, n.at, stored, computed,
            ));
        }
        resolved.push(Pending {
            index: g,
            hash: stored,
            height,
            path,
        });
    }
    let mut tries = Vec::with_capacity(top.tries.len());
    for t in &top.tries {
        let root = get(&resolved, t.root_index, t.at)?;
        let actual = root.map_or_else(empty_root, |p| p.hash);
        if actual != t.root_hash {
            return Err(CheckpointError::new(
                &top.file,
                t.at + 24,
                "root_mismatch",
                format!(
                    "trie record root hash {} but its root node hashes to {}",
                    t.root_hash.to_hex(),
                    actual.to_hex()
                ),
            ));
        }
        if let Some(p) = root.filter(|p| p.height != MAX_HEIGHT) {
            return Err(CheckpointError::new(
                &top.file,
                t.at,
                "bad_height",
                format!("trie root node has height {}, expected 256", p.height),
            ));
        }
        tries.push((t.root_hash, t.reg_count, t.reg_size));
    }
    Ok(tries)
}

/// Streams checkpoint `name` of `dir` (v6, one trie; see the module docs) into the files of
/// `opts`, on `opts.threads` threads. Returns what was read and the register SST files, in
/// key order (none without `opts.sst`).
pub fn stream(
    dir: &FsPath,
    name: &str,
    opts: &StreamOptions,
) -> CpResult<(StreamInfo, Vec<PathBuf>)> {
    if opts.registers.len() != SUBTRIE_COUNT || opts.hashes.len() != SUBTRIE_COUNT {
        return Err(CheckpointError::new(
            &dir.join(name),
            0,
            "config",
            "one output file per subtrie part expected",
        ));
    }
    let walk = Walk {
        threads: opts.threads,
        verify: opts.verify,
        batch_bytes: opts.batch_bytes,
    };
    let (info, done) = stream_into(dir, name, walk, |index, file| {
        let io = |m: String| CheckpointError::new(file, 0, "io", m);
        let tables = register_tables(&opts.registers[index], &opts.hashes[index]).map_err(io)?;
        let sst = opts
            .sst
            .as_ref()
            .map(|s| s.writer(&format!("{index:02}-")))
            .transpose()
            .map_err(io)?;
        Ok(RegisterFiles {
            tables: AlignedTables::new(tables, opts.groups),
            sst,
        })
    })?;
    debug_assert_eq!(done.iter().map(|d| d.0).sum::<u64>(), info.rows);
    let files = done.into_iter().flat_map(|d| d.1).collect();
    Ok((info, files))
}

/// Streams checkpoint `name` of `dir` (v6, one trie) on `walk.threads` threads, every part's
/// checked leaves into the sink `make_sink(part index, part file)` gives it. Returns what was
/// read and each part's `PartSink::Done`, in part order (only if every CRC, node and root
/// checked out).
pub fn stream_into<S, F>(
    dir: &FsPath,
    name: &str,
    walk: Walk,
    make_sink: F,
) -> CpResult<(StreamInfo, Vec<S::Done>)>
where
    S: PartSink,
    F: Fn(usize, &FsPath) -> CpResult<S> + Sync,
{
    stream_checked(dir, name, walk, make_sink).map(|s| (s.info, s.sinks))
}

/// Verifies checkpoint `name` of `dir` (v6, one trie) on `walk.threads` threads without
/// keeping or writing anything of it: the checks of [`stream`] (CRCs, structure, path order,
/// the hashes `walk.verify` recomputes, every root against its record), in memory bounded by
/// the trie depth and `walk.batch_bytes` of leaves per part.
pub fn verify(dir: &FsPath, name: &str, walk: Walk) -> CpResult<StreamInfo> {
    stream_into(dir, name, walk, |_, _| Ok(Discard)).map(|(info, _)| info)
}

/// A sink that drops the checked leaves ([`verify`]'s).
struct Discard;

impl PartSink for Discard {
    type Done = ();

    fn leaves(&mut self, _: &[Arc<Node>], _: Option<&[Hash]>) -> Result<(), String> {
        Ok(())
    }

    fn finish(self) -> Result<(), String> {
        Ok(())
    }
}

/// A checked stream: what [`stream_into`] returns, and the top part and each part's first
/// global node index (with one past the last), for a caller that rebuilds the top.
struct Streamed<D> {
    info: StreamInfo,
    sinks: Vec<D>,
    top: Top,
    starts: Vec<u64>,
}

fn stream_checked<S, F>(
    dir: &FsPath,
    name: &str,
    walk: Walk,
    make_sink: F,
) -> CpResult<Streamed<S::Done>>
where
    S: PartSink,
    F: Fn(usize, &FsPath) -> CpResult<S> + Sync,
{
    let version = checkpoint_version(dir, name)?;
    if version != VERSION_V6 {
        return Err(CheckpointError::new(
            &dir.join(name),
            2,
            "unsupported_version",
            format!("version {version} has no subtrie parts to stream: read it in memory"),
        ));
    }
    let header = read_header(dir, name)?;
    // Each part's node count (footer; its CRC against the header's), for the global indices.
    let mut starts = Vec::with_capacity(SUBTRIE_COUNT + 1);
    let mut total = 0u64;
    for i in 0..SUBTRIE_COUNT {
        let f = dir.join(part_name(name, i));
        let (r, footer) = open_part(&f, MAGIC_SUBTRIE, 8, header.part_crcs[i])?;
        let count = u64::from_be_bytes(footer[..8].try_into().expect("8 bytes"));
        super::checkpoint::check_count(&f, r.end, count, r.end - 4)?;
        starts.push(total + 1);
        total += count;
    }
    starts.push(total + 1);
    let top = read_top_raw(dir, name, header.part_crcs[TOP_PART], total)?;
    if top.tries.is_empty() {
        return Err(CheckpointError::no_tries(&dir.join(name)));
    }
    if top.tries.len() > 1 {
        return Err(CheckpointError::new(
            &top.file,
            top.tries[0].at,
            "shared_node",
            format!(
                "{} tries (they share nodes): read it in memory",
                top.tries.len()
            ),
        ));
    }
    let slots = last_trie_slots(&top, &starts, total)?;
    let stop = AtomicBool::new(false);
    let results = map_bounded(SUBTRIE_COUNT, walk.threads, |i| {
        let top_leaf = slots[i].top_leaf.map(|j| {
            let n = &top.nodes[j];
            let leaf = match &n.raw {
                RawNode::Leaf { height, hash, reg } => Arc::new(Node::Leaf {
                    height: *height,
                    reg: reg.clone(),
                    hash: *hash,
                }),
                RawNode::Interior { .. } => unreachable!("slots hold leaves"),
            };
            leaf
        });
        let file = dir.join(part_name(name, i));
        let r = make_sink(i, &file).and_then(|sink| {
            stream_part(
                dir,
                name,
                i,
                header.part_crcs[i],
                walk,
                sink,
                top_leaf,
                &stop,
            )
        });
        if r.is_err() {
            stop.store(true, Ordering::Relaxed);
        }
        r
    });
    let mut info = StreamInfo::default();
    let mut sinks = Vec::with_capacity(SUBTRIE_COUNT);
    let mut roots = HashMap::new();
    let mut first_err: Option<CheckpointError> = None;
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Ok(done) => {
                if let Some(p) = done.root {
                    roots.insert(starts[i] + p.index - 1, p);
                }
                if let (Some(want), got) = (slots[i].part_root, done.root.map(|p| p.index)) {
                    if got != Some(want) {
                        return Err(CheckpointError::new(
                            &top.file,
                            0,
                            "bad_child_index",
                            format!(
                                "the trie's subtrie {i} is node {want} of its part, not its root"
                            ),
                        ));
                    }
                }
                info.rows += done.rows;
                info.registers += done.registers;
                info.parts.push(done.info);
                sinks.push(done.sink);
            }
            // A part stopped because another failed says nothing of its own.
            Err(e) if e.kind == "cancelled" => {}
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    // Every part root must hang under the trie (a single trie has no other use for it).
    for (i, slot) in slots.iter().enumerate() {
        if slot.part_root.is_none() && info.parts[i].nodes > 0 {
            return Err(CheckpointError::new(
                &dir.join(part_name(name, i)),
                0,
                "unreferenced_node",
                "part holds nodes the trie does not reference",
            ));
        }
    }
    info.tries = resolve_top(&top, &roots, total)?;
    info.top_nodes = top.nodes.len() as u64;
    info.top_interior_heights = top
        .nodes
        .iter()
        .filter_map(|n| match n.raw {
            RawNode::Interior { height, .. } => Some(height),
            RawNode::Leaf { .. } => None,
        })
        .collect();
    Ok(Streamed {
        info,
        sinks,
        top,
        starts,
    })
}

/// Builds a one-trie checkpoint's trie into `store` while it is streamed and checked: each
/// part's nodes are written to a node file of their own as they are read (on the part's
/// thread), then the top part's nodes above them. Returns what was read and the trie, whose
/// root is a placeholder: memory stays at one node path per part, whatever the checkpoint's
/// size. Nothing of the store is referenced unless every CRC, node and root checked out.
pub fn page_in(
    dir: &FsPath,
    name: &str,
    walk: Walk,
    store: &Arc<NodeStore>,
) -> CpResult<(StreamInfo, Trie)> {
    let s = stream_checked(dir, name, walk, |_, file| PagingSink::new(store, file))?;
    let store_err = |e: StoreError| CheckpointError::new(&e.file, e.offset, "io", e.message);
    // A part's subtrie root is its last node.
    let mut placed: HashMap<u64, Arc<Node>> = HashMap::new();
    for (i, root) in s.sinks.into_iter().enumerate() {
        if let Some(root) = root {
            placed.insert(s.starts[i + 1] - 1, root);
        }
    }
    let total = s.starts[SUBTRIE_COUNT] - 1;
    let mut w = store.writer().map_err(store_err)?;
    let mut top: Vec<Arc<Node>> = Vec::with_capacity(s.top.nodes.len());
    let child = |top: &Vec<Arc<Node>>, g: u64, at: u64| -> CpResult<Option<Arc<Node>>> {
        if g == 0 {
            return Ok(None);
        }
        let found = if g <= total {
            placed.get(&g).cloned()
        } else {
            top.get((g - total - 1) as usize).cloned()
        };
        found.map(Some).ok_or_else(|| {
            CheckpointError::new(
                &s.top.file,
                at,
                "bad_child_index",
                format!("node index {g}"),
            )
        })
    };
    for n in &s.top.nodes {
        let placeholder = match &n.raw {
            RawNode::Leaf { height, hash, reg } => {
                w.leaf(*height, *hash, reg).map_err(store_err)?
            }
            RawNode::Interior {
                height,
                hash,
                left,
                right,
            } => {
                let l = child(&top, *left, n.at + 35)?;
                let r = child(&top, *right, n.at + 43)?;
                w.interior(*height, *hash, l.as_ref(), r.as_ref())
                    .map_err(store_err)?
            }
        };
        top.push(placeholder);
    }
    w.flush().map_err(store_err)?;
    let record = s
        .top
        .tries
        .last()
        .ok_or_else(|| CheckpointError::no_tries(&dir.join(name)))?;
    let trie = Trie {
        root: child(&top, record.root_index, record.at)?,
        reg_count: record.reg_count,
        reg_size: record.reg_size,
    };
    Ok((s.info, trie))
}

/// [`page_in`]'s sink: writes the part's nodes to a node file as they are read, keeping the
/// placeholders of the completed subtrees not yet under a parent (at most one per level).
struct PagingSink {
    writer: NodeWriter,
    file: PathBuf,
    stack: Vec<Arc<Node>>,
}

impl PagingSink {
    fn new(store: &Arc<NodeStore>, file: &FsPath) -> CpResult<Self> {
        let writer = store
            .writer()
            .map_err(|e| CheckpointError::new(&e.file, e.offset, "io", e.message))?;
        Ok(PagingSink {
            writer,
            file: file.to_path_buf(),
            stack: Vec::new(),
        })
    }
}

impl PartSink for PagingSink {
    type Done = Option<Arc<Node>>;

    fn leaves(&mut self, _leaves: &[Arc<Node>], _: Option<&[Hash]>) -> Result<(), String> {
        Ok(())
    }

    fn leaf_read(&mut self, leaf: &Arc<Node>) -> Result<(), String> {
        let Node::Leaf { height, reg, hash } = &**leaf else {
            return Err("a leaf expected".into());
        };
        let p = self
            .writer
            .leaf(*height, *hash, reg)
            .map_err(|e| e.to_string())?;
        self.stack.push(p);
        Ok(())
    }

    fn interior(&mut self, height: u16, hash: &Hash, children: [bool; 2]) -> Result<(), String> {
        // The walk checked that the children are the subtrees just completed, right on top.
        let mut pop = |present: bool| -> Result<Option<Arc<Node>>, String> {
            if !present {
                return Ok(None);
            }
            self.stack.pop().map(Some).ok_or_else(|| {
                format!("{}: interior node without its subtree", self.file.display())
            })
        };
        let r = pop(children[1])?;
        let l = pop(children[0])?;
        let p = self
            .writer
            .interior(height, *hash, l.as_ref(), r.as_ref())
            .map_err(|e| e.to_string())?;
        self.stack.push(p);
        Ok(())
    }

    fn finish(mut self) -> Result<Self::Done, String> {
        self.writer.flush().map_err(|e| e.to_string())?;
        Ok(self.stack.pop())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::checkpoint::{load, write_tries};
    use crate::flow::mtrie::Forest;
    use crate::flow::record::tests::payload;
    use crate::flow::record::TrieUpdate;

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
            groups: RowGroups {
                rows: 64,
                bytes: 1 << 16,
            },
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
}
