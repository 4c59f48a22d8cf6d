//! [`RegisterCheckpointBuilder`]: registers streamed in path order -> the v6 checkpoint of the
//! one trie holding them, built bottom-up with a stack (memory bounded by the batch size, not by
//! the trie size), its parts foldable on separate threads ([`PartFold`]).

use super::error::{CheckpointError, CpResult};
use super::format::{
    encode_interior, encode_leaf, encode_trie_record, version_bytes, MAGIC_SUBTRIE, MAGIC_TOPTRIE,
    SUBTRIE_COUNT, SUBTRIE_LEVEL, TOP_PART, TRIE_RECORD_LEN,
};
use super::write::{write_header, CrcWriter, Staged, WriteInfo};
use crate::flow::hash::{
    compact_values, default_hash, empty_root, hash_inters, hash_leaves, Hash, LeafJob, Path,
    MAX_HEIGHT,
};
use crate::flow::record::Payload;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;

#[derive(Debug, Clone, Copy)]
enum NodeRef {
    Part(usize, u64),
    Top(usize),
}

/// A node's hash, or its slot in the builder's batch of interior hashes not yet computed.
#[derive(Debug, Clone, Copy)]
enum NodeHash {
    Known(Hash),
    Slot(usize),
}

impl NodeHash {
    /// The hash, once `flush` has computed it.
    fn known(self) -> Hash {
        match self {
            NodeHash::Known(h) => h,
            NodeHash::Slot(_) => unreachable!("read before the builder's flush"),
        }
    }
}

/// A subtrie node the builder has numbered but not written yet (its bytes wait for the hash
/// of an interior node).
enum Queued {
    /// An encoded leaf, the builder's queued bytes up to `end`.
    Leaf { part: usize, end: usize },
    Interior {
        part: usize,
        height: u16,
        slot: usize,
        left: u64,
        right: u64,
    },
}

/// An unfinished subtree on the builder's stack.
#[derive(Debug, Clone, Copy)]
struct Pending {
    depth: usize,
    hash: NodeHash,
    /// Any path in the subtree (its first `depth` bits are the subtree's position).
    path: Path,
    at: NodeRef,
}

/// A node above depth 4, kept until the subtrie node count is known.
enum TopNode {
    Leaf(Vec<u8>),
    Interior {
        height: u16,
        hash: NodeHash,
        left: Option<NodeRef>,
        right: Option<NodeRef>,
    },
}

/// A register's hashes as the data folder keeps them (`register_hashes`): the builder takes
/// `node_hash` instead of running the leaf's hash chain when the leaf lands at `height` and
/// `HashLeaf(path, value)` equals `leaf_hash` (so the value it writes is the one hashed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CachedLeaf {
    pub height: u16,
    pub leaf_hash: Hash,
    pub node_hash: Hash,
}

/// A register whose leaf depth is known: path, payload, depth, cached hashes.
type ReadyLeaf = (Path, Arc<Payload>, usize, Option<CachedLeaf>);
/// The last register pushed: path, payload, prefix shared with its left neighbour, cache.
type LastLeaf = (Path, Arc<Payload>, Option<usize>, Option<CachedLeaf>);

fn common_prefix_bits(a: &Path, b: &Path) -> usize {
    for i in 0..32 {
        let x = a.0[i] ^ b.0[i];
        if x != 0 {
            return i * 8 + x.leading_zeros() as usize;
        }
    }
    256
}

/// Streams registers (strictly increasing paths, non-empty values) into a one-trie v6
/// checkpoint. Each leaf's depth is fixed once the next path is known (one past the longest
/// prefix it shares with either neighbour); its compact hash is computed then, in parallel for
/// a batch, and the stack of pending subtrees is folded as far as the next path allows, so
/// every node is written as soon as it is complete.
pub struct RegisterCheckpointBuilder {
    /// None for a root-only builder (`root_only`), which hashes but writes nothing, and for a
    /// part's fold (`part_fold`), whose checkpoint another builder commits.
    staged: Option<Staged>,
    /// The temporary files written to, by part index (empty for a root-only builder).
    part_files: Vec<PathBuf>,
    write: bool,
    threads: usize,
    /// Subtrees are not folded above this depth: 0 for a whole trie, `SUBTRIE_LEVEL` for one
    /// part's fold, whose root the assembling builder takes.
    floor: usize,
    /// Parts whose files a part's fold wrote (this builder leaves them alone).
    external: [bool; SUBTRIE_COUNT],
    parts: Vec<Option<CrcWriter>>,
    part_counts: [u64; SUBTRIE_COUNT],
    current_part: usize,
    top: Vec<TopNode>,
    stack: Vec<Pending>,
    /// The last register pushed, waiting for its right neighbour; with the prefix it shares
    /// with its left neighbour.
    last: Option<LastLeaf>,
    reg_count: u64,
    cached_leaves: u64,
    hashed_leaves: u64,
    reg_size: u64,
    scratch: Vec<u8>,
    row: u64,
    /// The children of each interior node whose hash is not computed yet: `flush` hashes them
    /// level by level, many at a time on SIMD lanes, then writes the nodes queued behind them.
    inters: Vec<(NodeHash, NodeHash)>,
    queued: Vec<Queued>,
    queued_bytes: Vec<u8>,
}

impl RegisterCheckpointBuilder {
    pub fn new(dir: &FsPath, name: &str, threads: usize) -> CpResult<Self> {
        let staged = Staged::new(dir, name)?;
        Ok(Self::with_output(Some(staged), threads))
    }

    /// The fold of one part's registers (all of them, in path order, and no others) into that
    /// part's file of `whole`'s checkpoint: the parts' folds can run in parallel, as no node
    /// below depth 4 depends on another part, and `whole.assemble` then builds the top.
    pub(super) fn part_fold(whole: &RegisterCheckpointBuilder, part: usize) -> Self {
        let mut b = Self::with_output(None, 1);
        b.write = whole.write;
        b.part_files = whole.part_files.clone();
        b.floor = SUBTRIE_LEVEL;
        b.current_part = part;
        b
    }

    /// A builder that computes the trie's root, register count and size from sorted
    /// registers without writing a checkpoint (`rechain verify` recomputes roots with it).
    pub fn root_only(threads: usize) -> Self {
        Self::with_output(None, threads)
    }

    fn with_output(staged: Option<Staged>, threads: usize) -> Self {
        RegisterCheckpointBuilder {
            write: staged.is_some(),
            part_files: staged.as_ref().map_or_else(Vec::new, |s| {
                s.temps().iter().map(|t| t.0.clone()).collect()
            }),
            staged,
            threads: threads.max(1),
            floor: 0,
            external: [false; SUBTRIE_COUNT],
            parts: (0..SUBTRIE_COUNT).map(|_| None).collect(),
            part_counts: [0; SUBTRIE_COUNT],
            current_part: 0,
            top: Vec::new(),
            stack: Vec::new(),
            last: None,
            reg_count: 0,
            cached_leaves: 0,
            hashed_leaves: 0,
            reg_size: 0,
            scratch: Vec::with_capacity(4096),
            row: 0,
            inters: Vec::new(),
            queued: Vec::new(),
            queued_bytes: Vec::new(),
        }
    }

    fn file(&self) -> PathBuf {
        self.staged.as_ref().map_or_else(
            || {
                self.part_files
                    .get(self.current_part)
                    .cloned()
                    .unwrap_or_default()
            },
            |s| s.temps()[SUBTRIE_COUNT + 1].1.clone(),
        )
    }

    /// Adds registers; paths must be strictly increasing across all calls. Empty values
    /// (unallocated registers) are skipped.
    pub fn push(&mut self, regs: Vec<(Path, Arc<Payload>)>) -> CpResult<()> {
        self.push_cached(regs.into_iter().map(|(p, pl)| (p, pl, None)).collect())
    }

    /// [`Self::push`] with each register's cached hashes, where the data folder has them.
    pub fn push_cached(
        &mut self,
        regs: Vec<(Path, Arc<Payload>, Option<CachedLeaf>)>,
    ) -> CpResult<()> {
        // Every leaf whose depth is now known.
        let mut ready: Vec<ReadyLeaf> = Vec::with_capacity(regs.len());
        for (path, payload, cached) in regs {
            self.row += 1;
            if payload.value.is_empty() {
                continue;
            }
            if let Some((lp, lpay, lcp_left, lcached)) = self.last.take() {
                if path <= lp {
                    return Err(CheckpointError::new(
                        &self.file(),
                        0,
                        "unsorted_input",
                        format!(
                            "register {} (input row {}) is not after {} in path order",
                            path.to_hex(),
                            self.row - 1,
                            lp.to_hex()
                        ),
                    ));
                }
                let cp = common_prefix_bits(&lp, &path);
                let depth = lcp_left.map_or(cp, |l| l.max(cp)) + 1;
                ready.push((lp, lpay, depth, lcached));
                self.last = Some((path, payload, Some(cp), cached));
            } else {
                self.last = Some((path, payload, None, cached));
            }
        }
        self.fold_ready(ready)
    }

    fn fold_ready(&mut self, ready: Vec<ReadyLeaf>) -> CpResult<()> {
        let (hashes, cached) = leaf_hashes(&ready, self.threads);
        self.cached_leaves += cached;
        self.hashed_leaves += ready.len() as u64 - cached;
        // The boundary after leaf k is the prefix it shares with leaf k+1 (depth_{k+1} may be
        // larger, so recompute from the paths: the next leaf is ready[k+1] or self.last).
        for (k, ((path, payload, depth, _), hash)) in ready.iter().zip(hashes).enumerate() {
            let next = ready
                .get(k + 1)
                .map(|r| r.0)
                .or_else(|| self.last.as_ref().map(|l| l.0));
            self.reg_count += 1;
            self.reg_size += payload.size();
            let at = self.emit_leaf(*depth, &hash, path, payload)?;
            self.stack.push(Pending {
                depth: *depth,
                hash: NodeHash::Known(hash),
                path: *path,
                at,
            });
            let boundary = next.map(|n| common_prefix_bits(path, &n) as isize);
            self.reduce(boundary.unwrap_or(-1))?;
        }
        self.flush()
    }

    /// Computes the queued interior hashes (children before parents: by level, each level in
    /// one batch) and writes the queued nodes in order.
    fn flush(&mut self) -> CpResult<()> {
        let mut level: Vec<usize> = Vec::with_capacity(self.inters.len());
        let mut by_level: Vec<Vec<usize>> = Vec::new();
        for (i, (a, b)) in self.inters.iter().enumerate() {
            let of = |h: &NodeHash| match h {
                NodeHash::Known(_) => 0,
                NodeHash::Slot(s) => level[*s] + 1,
            };
            let l = of(a).max(of(b));
            level.push(l);
            if by_level.len() <= l {
                by_level.push(Vec::new());
            }
            by_level[l].push(i);
        }
        let mut hashes = vec![Hash::default(); self.inters.len()];
        for slots in &by_level {
            let resolve = |h: &NodeHash| match h {
                NodeHash::Known(h) => *h,
                NodeHash::Slot(s) => hashes[*s],
            };
            let pairs: Vec<(Hash, Hash)> = slots
                .iter()
                .map(|&i| (resolve(&self.inters[i].0), resolve(&self.inters[i].1)))
                .collect();
            for (&i, h) in slots.iter().zip(hash_inters(&pairs)) {
                hashes[i] = h;
            }
        }
        self.inters.clear();
        let known = |h: &mut NodeHash| {
            if let NodeHash::Slot(s) = *h {
                *h = NodeHash::Known(hashes[s]);
            }
        };
        self.stack.iter_mut().for_each(|p| known(&mut p.hash));
        for n in &mut self.top {
            if let TopNode::Interior { hash, .. } = n {
                known(hash);
            }
        }
        let queued = std::mem::take(&mut self.queued);
        let bytes = std::mem::take(&mut self.queued_bytes);
        let mut scratch = std::mem::take(&mut self.scratch);
        let mut start = 0;
        for q in &queued {
            match *q {
                Queued::Leaf { part, end } => {
                    self.part_writer(part)?.put(&bytes[start..end])?;
                    start = end;
                }
                Queued::Interior {
                    part,
                    height,
                    slot,
                    left,
                    right,
                } => {
                    encode_interior(&mut scratch, height, &hashes[slot], left, right);
                    self.part_writer(part)?.put(&scratch)?;
                }
            }
        }
        self.scratch = scratch;
        (self.queued, self.queued_bytes) = (queued, bytes);
        self.queued.clear();
        self.queued_bytes.clear();
        Ok(())
    }

    /// Folds the stack until its top subtree sits at depth `boundary + 1`.
    fn reduce(&mut self, boundary: isize) -> CpResult<()> {
        loop {
            let Some(top) = self.stack.last().copied() else {
                return Ok(());
            };
            if (top.depth as isize) <= boundary.max(self.floor as isize - 1) + 1 {
                return Ok(());
            }
            self.stack.pop();
            let sibling = self.stack.last().copied().filter(|s| s.depth == top.depth);
            let d = top.depth - 1;
            let height = (MAX_HEIGHT as usize - d) as u16;
            let child_default = default_hash(height - 1);
            let (left, right) = match sibling {
                Some(s) => {
                    self.stack.pop();
                    (Some(s), Some(top))
                }
                None if top.path.bit(d) == 1 => (None, Some(top)),
                None => (Some(top), None),
            };
            let child = |n: Option<Pending>| n.map_or(NodeHash::Known(child_default), |n| n.hash);
            self.inters.push((child(left), child(right)));
            let hash = NodeHash::Slot(self.inters.len() - 1);
            let at = self.emit_interior(d, height, hash, &top.path, left, right)?;
            self.stack.push(Pending {
                depth: d,
                hash,
                path: top.path,
                at,
            });
        }
    }

    fn part_writer(&mut self, part: usize) -> CpResult<&mut CrcWriter> {
        while self.current_part < part {
            self.close_part(self.current_part)?;
            self.current_part += 1;
        }
        if self.parts[part].is_none() {
            let temp = self.part_files[part].clone();
            let mut w = CrcWriter::create(temp)?;
            w.put(&version_bytes(MAGIC_SUBTRIE))?;
            self.parts[part] = Some(w);
        }
        Ok(self.parts[part].as_mut().expect("just opened"))
    }

    fn close_part(&mut self, part: usize) -> CpResult<()> {
        if self.external[part] {
            return Ok(());
        }
        let mut w = match self.parts[part].take() {
            Some(w) => w,
            None => {
                let temp = self.part_files[part].clone();
                let mut w = CrcWriter::create(temp)?;
                w.put(&version_bytes(MAGIC_SUBTRIE))?;
                w
            }
        };
        w.put(&self.part_counts[part].to_be_bytes())?;
        // The CRC is recomputed from the file when the header is written.
        w.finish()?;
        Ok(())
    }

    fn emit_leaf(
        &mut self,
        depth: usize,
        hash: &Hash,
        path: &Path,
        payload: &Payload,
    ) -> CpResult<NodeRef> {
        let height = (MAX_HEIGHT as usize - depth) as u16;
        let mut scratch = std::mem::take(&mut self.scratch);
        encode_leaf(&mut scratch, height, hash, path, payload.view());
        let r = if depth >= SUBTRIE_LEVEL {
            let part = (path.0[0] >> 4) as usize;
            if self.write {
                self.queued_bytes.extend_from_slice(&scratch);
                let end = self.queued_bytes.len();
                self.queued.push(Queued::Leaf { part, end });
            }
            self.part_counts[part] += 1;
            NodeRef::Part(part, self.part_counts[part])
        } else {
            self.top.push(TopNode::Leaf(scratch.clone()));
            NodeRef::Top(self.top.len() - 1)
        };
        self.scratch = scratch;
        Ok(r)
    }

    fn emit_interior(
        &mut self,
        depth: usize,
        height: u16,
        hash: NodeHash,
        path: &Path,
        left: Option<Pending>,
        right: Option<Pending>,
    ) -> CpResult<NodeRef> {
        if depth >= SUBTRIE_LEVEL {
            let part = (path.0[0] >> 4) as usize;
            let local = |p: Option<Pending>| match p.map(|p| p.at) {
                Some(NodeRef::Part(_, j)) => j,
                _ => 0,
            };
            if self.write {
                let NodeHash::Slot(slot) = hash else {
                    unreachable!("interior hashes are computed in batches");
                };
                self.queued.push(Queued::Interior {
                    part,
                    height,
                    slot,
                    left: local(left),
                    right: local(right),
                });
            }
            self.part_counts[part] += 1;
            Ok(NodeRef::Part(part, self.part_counts[part]))
        } else {
            self.top.push(TopNode::Interior {
                height,
                hash,
                left: left.map(|p| p.at),
                right: right.map(|p| p.at),
            });
            Ok(NodeRef::Top(self.top.len() - 1))
        }
    }

    /// Writes the remaining nodes, the top part and the header, and renames the files into
    /// place. Returns what was written.
    pub fn finish(self) -> CpResult<WriteInfo> {
        self.finish_with(None)
    }

    /// [`Self::finish`] with the trie record's register size given: flow-go's
    /// `AllocatedRegSize` is accumulated update by update, and a trie that went through many
    /// can differ from the sum over its registers, which is the default.
    pub fn finish_with(mut self, reg_size: Option<u64>) -> CpResult<WriteInfo> {
        if let Some((p, pl, lcp_left, cached)) = self.last.take() {
            let depth = lcp_left.map_or(0, |l| l + 1);
            self.fold_ready(vec![(p, pl, depth, cached)])?;
        }
        self.reduce(-1)?;
        self.flush()?;
        if let Some(s) = reg_size {
            self.reg_size = s;
        }
        if !self.write {
            let root = self.stack.pop().map_or_else(empty_root, |p| p.hash.known());
            return Ok(WriteInfo {
                tries: vec![(root, self.reg_count, self.reg_size)],
                part_nodes: self.part_counts.to_vec(),
                top_nodes: self.top.len() as u64,
                bytes: 0,
                cached_leaves: self.cached_leaves,
                hashed_leaves: self.hashed_leaves,
            });
        }
        for part in self.current_part..SUBTRIE_COUNT {
            self.close_part(part)?;
        }
        let staged = self.staged.take().expect("builder finished once");
        let mut starts = [0u64; SUBTRIE_COUNT];
        let mut total = 0u64;
        for (i, c) in self.part_counts.iter().enumerate() {
            starts[i] = total;
            total += c;
        }
        let global = |r: Option<NodeRef>| match r {
            None => 0,
            Some(NodeRef::Part(k, j)) => starts[k] + j,
            Some(NodeRef::Top(j)) => total + 1 + j as u64,
        };
        let mut w = CrcWriter::create(staged.temp(TOP_PART))?;
        w.put(&version_bytes(MAGIC_TOPTRIE))?;
        w.put(&total.to_be_bytes())?;
        let mut scratch = Vec::with_capacity(64);
        for n in &self.top {
            match n {
                TopNode::Leaf(bytes) => w.put(bytes)?,
                TopNode::Interior {
                    height,
                    hash,
                    left,
                    right,
                } => {
                    let h = hash.known();
                    encode_interior(&mut scratch, *height, &h, global(*left), global(*right));
                    w.put(&scratch)?;
                }
            }
        }
        let root = self.stack.pop();
        let (root_index, root_hash) = match root {
            Some(p) => (global(Some(p.at)), p.hash.known()),
            None => (0, empty_root()),
        };
        let mut rec = Vec::with_capacity(TRIE_RECORD_LEN as usize);
        encode_trie_record(
            &mut rec,
            root_index,
            self.reg_count,
            self.reg_size,
            &root_hash,
        );
        w.put(&rec)?;
        w.put(&(self.top.len() as u64).to_be_bytes())?;
        w.put(&1u16.to_be_bytes())?;
        let mut crcs = [0u32; SUBTRIE_COUNT + 1];
        crcs[TOP_PART] = w.finish()?;
        for (i, c) in crcs.iter_mut().enumerate().take(SUBTRIE_COUNT) {
            *c = trailing_crc(&staged.temp(i))?;
        }
        write_header(&staged, &crcs)?;
        let bytes = staged
            .temps()
            .iter()
            .map(|(t, _)| std::fs::metadata(t).map_or(0, |m| m.len()))
            .sum();
        staged.commit()?;
        Ok(WriteInfo {
            tries: vec![(root_hash, self.reg_count, self.reg_size)],
            part_nodes: self.part_counts.to_vec(),
            top_nodes: self.top.len() as u64,
            bytes,
            cached_leaves: self.cached_leaves,
            hashed_leaves: self.hashed_leaves,
        })
    }
}

/// What one part's fold leaves for the assembling builder.
pub(super) struct PartFold {
    part: usize,
    nodes: u64,
    /// The part's subtree at depth 4, its nodes written to the part's file.
    root: Option<Pending>,
    /// The part's only register: its depth (below 4, or 4 alone in its file) depends on the
    /// neighbouring parts, so the assembling builder places it.
    lone: Option<(Path, Arc<Payload>, Option<CachedLeaf>)>,
    reg_count: u64,
    reg_size: u64,
    cached_leaves: u64,
    hashed_leaves: u64,
}

impl PartFold {
    fn path(&self) -> Option<Path> {
        self.root
            .map(|r| r.path)
            .or(self.lone.as_ref().map(|l| l.0))
    }
}

impl RegisterCheckpointBuilder {
    /// Completes a part's fold (see [`Self::part_fold`]): its file is finished and synced.
    pub(super) fn finish_part(mut self) -> CpResult<PartFold> {
        let part = self.current_part;
        let lone = match self.last.take() {
            Some((path, payload, None, cached)) => Some((path, payload, cached)),
            Some((path, payload, Some(left), cached)) => {
                self.fold_ready(vec![(path, payload, left + 1, cached)])?;
                None
            }
            None => None,
        };
        self.reduce(-1)?;
        self.flush()?;
        let root = self.stack.pop();
        if self.stack.pop().is_some() || root.is_some_and(|r| r.depth != SUBTRIE_LEVEL) {
            return Err(CheckpointError::new(
                &self.file(),
                0,
                "unsorted_input",
                format!("part {part}: registers of another part were given to its fold"),
            ));
        }
        if root.is_some() && self.write {
            self.close_part(part)?;
        }
        Ok(PartFold {
            part,
            nodes: self.part_counts[part],
            root,
            lone,
            reg_count: self.reg_count,
            reg_size: self.reg_size,
            cached_leaves: self.cached_leaves,
            hashed_leaves: self.hashed_leaves,
        })
    }

    /// Takes the parts' folds (any order; nothing pushed to this builder) and folds the top of
    /// the trie from them, in the order and with the nodes a sequential fold gives; `finish`
    /// then writes the top part and the header.
    pub(super) fn assemble(&mut self, mut folds: Vec<PartFold>) -> CpResult<()> {
        folds.sort_by_key(|f| f.part);
        folds.retain(|f| f.root.is_some() || f.lone.is_some());
        for f in &folds {
            if f.root.is_some() {
                self.external[f.part] = true;
                self.part_counts[f.part] = f.nodes;
            }
            self.reg_count += f.reg_count;
            self.reg_size += f.reg_size;
            self.cached_leaves += f.cached_leaves;
            self.hashed_leaves += f.hashed_leaves;
        }
        let paths: Vec<Path> = folds.iter().filter_map(PartFold::path).collect();
        for (i, f) in folds.into_iter().enumerate() {
            let path = paths[i];
            let next = paths.get(i + 1);
            if let Some(root) = f.root {
                self.stack.push(root);
            } else if let Some((_, payload, cached)) = f.lone {
                let shared = [i.checked_sub(1).map(|j| &paths[j]), next];
                let depth = shared
                    .iter()
                    .flatten()
                    .map(|n| common_prefix_bits(&path, n) + 1)
                    .max()
                    .unwrap_or(0);
                let ready = [(path, payload, depth, cached)];
                let (hashes, cached) = leaf_hashes(&ready, 1);
                self.cached_leaves += cached;
                self.hashed_leaves += 1 - cached;
                self.reg_count += 1;
                self.reg_size += ready[0].1.size();
                let at = self.emit_leaf(depth, &hashes[0], &path, &ready[0].1)?;
                self.stack.push(Pending {
                    depth,
                    hash: NodeHash::Known(hashes[0]),
                    path,
                    at,
                });
            }
            self.reduce(next.map_or(-1, |n| common_prefix_bits(&path, n) as isize))?;
        }
        self.flush()
    }
}

fn trailing_crc(file: &FsPath) -> CpResult<u32> {
    let mut f = File::open(file).map_err(|e| CheckpointError::io(file, 0, &e))?;
    let mut b = [0u8; 4];
    f.seek(SeekFrom::End(-4))
        .and_then(|_| f.read_exact(&mut b))
        .map_err(|e| CheckpointError::io(file, 0, &e))?;
    Ok(u32::from_be_bytes(b))
}

/// Compact leaf hashes of ready leaves, split over `threads` threads; with how many came from
/// the cache (one `HashLeaf` each) instead of a hash chain.
fn leaf_hashes(ready: &[ReadyLeaf], threads: usize) -> (Vec<Hash>, u64) {
    fn run(chunk: &[ReadyLeaf]) -> (Vec<Hash>, u64) {
        let mut out = vec![Hash::default(); chunk.len()];
        let mut misses: Vec<usize> = Vec::new();
        // Entries at the leaf's height, whose HashLeaf is then checked (on SIMD lanes).
        let mut candidates: Vec<(usize, CachedLeaf)> = Vec::new();
        for (i, (_, _, depth, cached)) in chunk.iter().enumerate() {
            match cached {
                Some(c) if c.height == (256 - depth) as u16 => candidates.push((i, *c)),
                _ => misses.push(i),
            }
        }
        let pairs: Vec<(&Path, &[u8])> = candidates
            .iter()
            .map(|&(i, _)| (&chunk[i].0, &chunk[i].1.value[..]))
            .collect();
        for (&(i, c), leaf) in candidates.iter().zip(hash_leaves(&pairs)) {
            if leaf == c.leaf_hash {
                out[i] = c.node_hash;
            } else {
                misses.push(i);
            }
        }
        let jobs: Vec<LeafJob> = misses
            .iter()
            .map(|&i| LeafJob {
                path: &chunk[i].0,
                value: &chunk[i].1.value,
                height: (256 - chunk[i].2) as u16,
            })
            .collect();
        for (&i, h) in misses.iter().zip(compact_values(&jobs)) {
            out[i] = h;
        }
        (out, (chunk.len() - misses.len()) as u64)
    }
    if threads <= 1 || ready.len() < 64 {
        return run(ready);
    }
    // Chunks in multiples of eight (one SIMD group).
    let chunk = ready.len().div_ceil(threads).div_ceil(8) * 8;
    std::thread::scope(|s| {
        let handles: Vec<_> = ready
            .chunks(chunk)
            .map(|c| s.spawn(move || run(c)))
            .collect();
        let mut out = Vec::with_capacity(ready.len());
        let mut cached = 0;
        for h in handles {
            match h.join() {
                Ok((v, c)) => {
                    out.extend(v);
                    cached += c;
                }
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        (out, cached)
    })
}
