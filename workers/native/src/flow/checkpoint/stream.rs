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
//! [`super::load`]; one without a trie record with kind `no_tries`. In a one-trie
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
//! [`super::stats`]).

use super::error::{CheckpointError, CpResult};
use super::format::{
    check_count, checkpoint_version, computed_hash, finish_part, open_part, open_top, part_name,
    path_under, read_header, read_node, read_top_node, read_trie_record, subtrie_position,
    PartInfo, RawNode, TopPart, TrieRecord, Verify, MAGIC_SUBTRIE, SUBTRIE_COUNT, SUBTRIE_LEVEL,
    TOP_PART, VERSION_V6,
};
use super::read::{first_interior_mismatch, InteriorCheck, LEAF_BATCH};
use crate::bounded::map_bounded;
use crate::flow::batches::{
    leaf_hashes_batch, leaf_hashes_batch_with, register_tables, registers_batch, RegisterLayouts,
};
use crate::flow::hash::{
    compact_values_from, default_hash, empty_root, hash_leaves, Hash, LeafJob, Path, MAX_HEIGHT,
};
use crate::flow::node::{Node, Register};
use crate::flow::register_sst::{RegisterSst, RegisterSstWriter};
use crate::flow::OutputError;
use crate::parquet_out::AlignedTables;
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
    pub layouts: RegisterLayouts,
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
pub(super) struct TopNode {
    pub(super) at: u64,
    pub(super) raw: RawNode,
}

/// The top part, read before the parts; its nodes are resolved after them.
pub(super) struct Top {
    pub(super) file: PathBuf,
    pub(super) nodes: Vec<TopNode>,
    pub(super) tries: Vec<TrieRecord>,
}

fn read_top_raw(dir: &FsPath, name: &str, expected_crc: u32, total: u64) -> CpResult<Top> {
    let TopPart {
        file,
        mut r,
        footer,
        top_count,
        trie_count,
    } = open_top(dir, name, expected_crc, total, || {
        // The parts are not read yet: their checksums say whether one's count is the damage.
        (0..SUBTRIE_COUNT).try_for_each(|i| part_checksum(&dir.join(part_name(name, i))))
    })?;
    let mut nodes = Vec::with_capacity(top_count as usize);
    for j in 1..=top_count {
        let (at, raw) = read_top_node(&mut r, total + j)?;
        nodes.push(TopNode { at, raw });
    }
    let tries = (0..trie_count)
        .map(|_| read_trie_record(&mut r))
        .collect::<CpResult<Vec<_>>>()?;
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
    fn leaves(
        &mut self,
        leaves: &[Arc<Node>],
        leaf_hashes: Option<&[Hash]>,
    ) -> Result<(), OutputError>;
    /// An interior node of the trie as read (children first, as stored): its height, stored
    /// hash, and which children it has (the subtrees completed just before it, right last).
    fn interior(
        &mut self,
        _height: u16,
        _hash: &Hash,
        _children: [bool; 2],
    ) -> Result<(), OutputError> {
        Ok(())
    }
    /// A leaf of the part's subtrie as read, before its hash is checked (in the order of
    /// [`Self::interior`]; the checked leaves come later through [`Self::leaves`]).
    fn leaf_read(&mut self, _leaf: &Arc<Node>) -> Result<(), OutputError> {
        Ok(())
    }
    fn finish(self) -> Result<Self::Done, OutputError>;
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

    fn leaves(
        &mut self,
        leaves: &[Arc<Node>],
        leaf_hashes: Option<&[Hash]>,
    ) -> Result<(), OutputError> {
        let regs: Vec<&Arc<Register>> = leaves.iter().filter_map(|l| l.register()).collect();
        if let Some(w) = self.sst.as_mut() {
            w.add(&regs)?;
        }
        let hashes = match leaf_hashes {
            Some(h) => leaf_hashes_batch_with(leaves, h),
            None => leaf_hashes_batch(leaves),
        };
        Ok(self.tables.write(&[registers_batch(&regs), hashes])?)
    }

    fn finish(self) -> Result<Self::Done, OutputError> {
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
                        self.permutations += crate::flow::hash::compact_value_permutations(
                            reg.value().len(),
                            *height,
                        );
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
            .map_err(|m| CheckpointError::new(&self.file, 0, "io", m.to_string()))?;
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
    check_count(&file, r.end, count, r.end - 4)?;
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
                    .map_err(|m| CheckpointError::new(&file, at, "io", m.to_string()))?;
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
                    .map_err(|m| CheckpointError::new(&file, at, "io", m.to_string()))?;
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
        .map_err(|m| CheckpointError::new(&file, 0, "io", m.to_string()))?;
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
/// [`load`]: super::load
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
        let io = |m: OutputError| CheckpointError::new(file, 0, "io", m.to_string());
        let tables = register_tables(&opts.registers[index], &opts.hashes[index], &opts.layouts)
            .map_err(io)?;
        let sst = opts
            .sst
            .as_ref()
            .map(|s| s.writer(&format!("{index:02}-")))
            .transpose()
            .map_err(io)?;
        Ok(RegisterFiles {
            tables: AlignedTables::new(tables, opts.layouts.groups),
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

    fn leaves(&mut self, _: &[Arc<Node>], _: Option<&[Hash]>) -> Result<(), OutputError> {
        Ok(())
    }

    fn finish(self) -> Result<(), OutputError> {
        Ok(())
    }
}

/// A checked stream: what [`stream_into`] returns, and the top part and each part's first
/// global node index (with one past the last), for a caller that rebuilds the top.
pub(super) struct Streamed<D> {
    pub(super) info: StreamInfo,
    pub(super) sinks: Vec<D>,
    pub(super) top: Top,
    pub(super) starts: Vec<u64>,
}

pub(super) fn stream_checked<S, F>(
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
        check_count(&f, r.end, count, r.end - 4)?;
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

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
