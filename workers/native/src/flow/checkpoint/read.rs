//! Reading a v6 checkpoint whole into tries ([`load_v6`]) or verifying one part
//! ([`verify_part`]): every CRC checked, the parts decoded on parallel threads, node hashes
//! recomputed in SIMD batches as [`Verify`] asks, the top part resolved against the parts.

use super::error::{CheckpointError, CpResult};
use super::format::{
    build_node, check_count, finish_part, open_part, open_top, part_name, path_under, read_header,
    read_node, read_top_node, read_trie_record, subtrie_position, Loaded, NodeFields, PartInfo,
    RawNode, TopPart, TrieRecord, Verify, MAGIC_SUBTRIE, SUBTRIE_COUNT, TOP_PART,
};
use crate::flow::hash::{
    compact_value_permutations, compact_values, default_hash, empty_root, hash_inters, Hash,
    LeafJob, Path, MAX_HEIGHT,
};
use crate::flow::mtrie::Trie;
use crate::flow::node::Node;
use std::path::Path as FsPath;
use std::sync::Arc;

/// Nodes resolved so far, addressable by global index.
struct NodeTable<'a> {
    /// Subtrie parts' nodes (local index j of part k is `parts[k][j - 1]`).
    parts: &'a [Vec<Arc<Node>>],
    /// A leaf path under each of them (see [`path_under`]), indexed alike.
    paths: &'a [Vec<Path>],
    /// Global index of each part's first node.
    starts: Vec<u64>,
    subtrie_total: u64,
    top: Vec<Arc<Node>>,
    top_paths: Vec<Path>,
}

impl NodeTable<'_> {
    /// (part, index in it) of a subtrie node, or None for a top node (or 0).
    fn place(&self, global: u64) -> Option<(usize, usize)> {
        if global == 0 || global > self.subtrie_total {
            return None;
        }
        let k = self.starts.partition_point(|&s| s <= global) - 1;
        Some((k, (global - self.starts[k]) as usize))
    }

    fn get(&self, global: u64) -> Option<&Arc<Node>> {
        if global == 0 {
            return None;
        }
        match self.place(global) {
            Some((k, j)) => self.parts[k].get(j),
            None => self.top.get((global - self.subtrie_total - 1) as usize),
        }
    }

    /// A leaf path under node `global` (which `get` found).
    fn path(&self, global: u64) -> Option<Path> {
        if global == 0 {
            return None;
        }
        match self.place(global) {
            Some((k, j)) => self.paths[k].get(j).copied(),
            None => self
                .top_paths
                .get((global - self.subtrie_total - 1) as usize)
                .copied(),
        }
    }
}

/// One subtrie part read: its nodes, a leaf path under each (see [`path_under`]), whether
/// a node of the part references each, and what it held.
type PartNodes = (Vec<Arc<Node>>, Vec<Path>, Vec<bool>, PartInfo);

/// Decodes subtrie part `index` into its nodes (local indices), checking magic, version, the
/// CRC (against `expected_crc` from the header and against the contents), the descendants-first
/// order, each leaf's place (`path_under`) and the node hashes as `verify` asks.
fn read_subtrie_part(
    dir: &FsPath,
    name: &str,
    index: usize,
    expected_crc: u32,
    verify: Verify,
) -> CpResult<PartNodes> {
    let file = dir.join(part_name(name, index));
    let (mut r, footer) = open_part(&file, MAGIC_SUBTRIE, 8, expected_crc)?;
    let count = u64::from_be_bytes(footer[..8].try_into().expect("8 bytes"));
    check_count(&file, r.end, count, r.end - 4)?;
    let mut nodes: Vec<Arc<Node>> = Vec::with_capacity(count as usize);
    let mut paths: Vec<Path> = Vec::with_capacity(count as usize);
    let mut referenced = vec![false; count as usize];
    let mut leaves = 0u64;
    // Hashes are recomputed in batches on SIMD lanes (leaves' compact-value chains, see
    // `hash::compact_values`, and interior nodes, see `hash::hash_inters`): the nodes are
    // queued and checked before any later error is reported, so the first bad node in file
    // order is still the one reported.
    let mut queued: Vec<(u64, usize)> = Vec::new();
    let mut interior: Vec<InteriorCheck> = Vec::new();
    let mut permutations = 0u64;
    let mut read_all = |nodes: &mut Vec<Arc<Node>>,
                        paths: &mut Vec<Path>,
                        referenced: &mut Vec<bool>,
                        leaves: &mut u64,
                        queued: &mut Vec<(u64, usize)>,
                        interior: &mut Vec<InteriorCheck>,
                        permutations: &mut u64|
     -> CpResult<()> {
        for i in 1..=count {
            let (at, raw) = read_node(&mut r)?;
            let (left, right) = match &raw {
                RawNode::Interior { left, right, .. } => (*left, *right),
                RawNode::Leaf { .. } => {
                    *leaves += 1;
                    (0, 0)
                }
            };
            let is_leaf = matches!(raw, RawNode::Leaf { .. });
            *permutations += match (&raw, verify) {
                (_, Verify::None) => 0,
                (RawNode::Interior { .. }, _) => 1,
                (RawNode::Leaf { height, reg, .. }, Verify::Full) => {
                    compact_value_permutations(reg.value().len(), *height)
                }
                (RawNode::Leaf { .. }, Verify::Interior) => 0,
            };
            // `field`: where the child index lies (`NodeFields`).
            let child = |c: u64, field: u64| -> CpResult<Option<Arc<Node>>> {
                if c >= i {
                    return Err(CheckpointError::new(
                        &file,
                        field,
                        "bad_child_index",
                        format!(
                            "node {i} has child index {c}: does not satisfy descendants-first order"
                        ),
                    ));
                }
                Ok((c > 0).then(|| nodes[(c - 1) as usize].clone()))
            };
            let fields = NodeFields::v6(at);
            let (l, rt) = (child(left, fields.left)?, child(right, fields.right)?);
            for c in [left, right].into_iter().filter(|&c| c > 0) {
                referenced[(c - 1) as usize] = true;
            }
            let children = (l.as_ref().map(|n| n.hash()), rt.as_ref().map(|n| n.hash()));
            let node = build_node(&file, fields, raw, l, rt, Verify::None)?;
            let path = match &*node {
                Node::Leaf { reg, .. } => {
                    let position = subtrie_position(reg.path());
                    if position != index {
                        return Err(CheckpointError::new(
                            &file,
                            at,
                            "bad_path_order",
                            format!(
                                "leaf path {} lies under subtrie position {position}, not {index}",
                                reg.path().to_hex()
                            ),
                        ));
                    }
                    *reg.path()
                }
                _ => {
                    let under = |c: u64| (c > 0).then(|| paths[(c - 1) as usize]);
                    path_under(&file, at, node.height(), under(left), under(right))?
                }
            };
            paths.push(path);
            if is_leaf && verify == Verify::Full {
                queued.push((at, nodes.len()));
            } else if !is_leaf && verify != Verify::None {
                let d = default_hash(node.height().saturating_sub(1));
                let (lh, rh) = (children.0.unwrap_or(d), children.1.unwrap_or(d));
                interior.push((at, lh, rh, node.hash()));
            }
            nodes.push(node);
            if queued.len() >= LEAF_BATCH || interior.len() >= LEAF_BATCH {
                check_queued(&file, nodes, queued, interior)?;
            }
        }
        Ok(())
    };
    let read = read_all(
        &mut nodes,
        &mut paths,
        &mut referenced,
        &mut leaves,
        &mut queued,
        &mut interior,
        &mut permutations,
    );
    check_queued(&file, &nodes, &mut queued, &mut interior)?;
    read?;
    finish_part(&r, &footer, expected_crc)?;
    let bytes = r.end + 12;
    Ok((
        nodes,
        paths,
        referenced,
        PartInfo {
            index,
            nodes: count,
            leaves,
            bytes,
            permutations,
        },
    ))
}

/// Leaves whose hashes are recomputed together (bounds the queue, keeps SIMD groups full).
pub(super) const LEAF_BATCH: usize = 4096;

/// An interior node's hash check, queued to run with others on SIMD lanes: its offset, its
/// children's hashes (a default hash for a missing one) and its stored hash.
pub(super) type InteriorCheck = (u64, Hash, Hash, Hash);

/// The queued check of the first interior node (in queue order) whose stored hash is not
/// its children's; empties the queue.
pub(super) fn first_interior_mismatch(
    file: &FsPath,
    queued: &mut Vec<InteriorCheck>,
) -> Option<CheckpointError> {
    let pairs: Vec<(Hash, Hash)> = queued.iter().map(|c| (c.1, c.2)).collect();
    let found = queued
        .iter()
        .zip(hash_inters(&pairs))
        .find(|((.., stored), computed)| computed != stored)
        .map(|((at, .., stored), computed)| {
            CheckpointError::hash_mismatch(file, *at, *stored, computed)
        });
    queued.clear();
    found
}

/// Runs the queued leaf and interior checks: the first mismatch in file order is the error.
fn check_queued(
    file: &FsPath,
    nodes: &[Arc<Node>],
    leaves: &mut Vec<(u64, usize)>,
    interior: &mut Vec<InteriorCheck>,
) -> CpResult<()> {
    let inner = first_interior_mismatch(file, interior);
    match (inner, check_leaf_hashes(file, nodes, leaves)) {
        (Some(a), Err(b)) => Err(if a.offset < b.offset { a } else { b }),
        (Some(e), Ok(())) | (None, Err(e)) => Err(e),
        (None, Ok(())) => Ok(()),
    }
}

/// Recomputes the compact hashes of the queued leaves (`(offset, index in nodes)`) and
/// compares them with the stored ones; empties the queue. Reports the first mismatch.
fn check_leaf_hashes(
    file: &FsPath,
    nodes: &[Arc<Node>],
    queued: &mut Vec<(u64, usize)>,
) -> CpResult<()> {
    let jobs: Vec<LeafJob> = queued
        .iter()
        .filter_map(|&(_, i)| match &*nodes[i] {
            Node::Leaf { height, reg, .. } => Some(LeafJob {
                path: reg.path(),
                value: reg.value(),
                height: *height,
            }),
            Node::Interior { .. } | Node::Paged { .. } => None,
        })
        .collect();
    let computed = compact_values(&jobs);
    for (&(at, i), computed) in queued.iter().zip(computed) {
        let stored = nodes[i].hash();
        if computed != stored {
            return Err(CheckpointError::hash_mismatch(file, at, stored, computed));
        }
    }
    queued.clear();
    Ok(())
}

/// Fully verifies one subtrie part (CRCs, order, every node hash recomputed); what a worker
/// runs. The header checksum list is read again here so the worker needs only the names.
pub fn verify_part(dir: &FsPath, name: &str, index: usize, verify: Verify) -> CpResult<PartInfo> {
    if index >= SUBTRIE_COUNT {
        return Err(CheckpointError::new(
            &dir.join(name),
            0,
            "config",
            format!("subtrie part index {index} out of range"),
        ));
    }
    let header = read_header(dir, name)?;
    read_subtrie_part(dir, name, index, header.part_crcs[index], verify).map(|(_, _, _, info)| info)
}

/// Allocated registers (leaves with a value) of a trie, counted by walking it.
pub fn count_registers(trie: &Trie) -> CpResult<u64> {
    let mut n = 0u64;
    let mut cursor = trie.leaves();
    loop {
        let chunk = cursor
            .next_leaf_nodes(LEAF_BATCH)
            .map_err(CheckpointError::from)?;
        if chunk.is_empty() {
            return Ok(n);
        }
        n += chunk.len() as u64;
    }
}

/// Loads a v6 checkpoint: header, the 16 subtrie parts on up to `threads` threads, then the top
/// part and the trie records. `verify_subtrie_hashes` = `None` when the parts were already
/// verified by [`verify_part`] (CRCs are checked again either way); top-level nodes are always
/// re-hashed, so every root hash is recomputed from its children and compared with its record.
pub(super) fn load_v6(
    dir: &FsPath,
    name: &str,
    threads: usize,
    verify_subtrie_hashes: Verify,
) -> CpResult<Loaded> {
    let header = read_header(dir, name)?;
    for i in 0..=SUBTRIE_COUNT {
        let f = dir.join(part_name(name, i));
        if !f.is_file() {
            return Err(CheckpointError::new(
                &f,
                0,
                "missing_file",
                "checkpoint part file is missing",
            ));
        }
    }
    let threads = threads.clamp(1, SUBTRIE_COUNT);
    type PartRead = CpResult<PartNodes>;
    let mut results: Vec<Option<PartRead>> = (0..SUBTRIE_COUNT).map(|_| None).collect();
    std::thread::scope(|s| {
        let chunks: Vec<_> = results
            .chunks_mut(SUBTRIE_COUNT.div_ceil(threads))
            .collect();
        let mut first = 0usize;
        for chunk in chunks {
            let start = first;
            first += chunk.len();
            let header = &header;
            s.spawn(move || {
                for (k, slot) in chunk.iter_mut().enumerate() {
                    let i = start + k;
                    *slot = Some(read_subtrie_part(
                        dir,
                        name,
                        i,
                        header.part_crcs[i],
                        verify_subtrie_hashes,
                    ));
                }
            });
        }
    });
    let mut parts = Vec::with_capacity(SUBTRIE_COUNT);
    let mut paths = Vec::with_capacity(SUBTRIE_COUNT);
    let mut referenced = Vec::new();
    let mut infos = Vec::with_capacity(SUBTRIE_COUNT);
    for r in results {
        let (nodes, part_paths, part_referenced, info) = r.expect("every part was read")?;
        parts.push(nodes);
        paths.push(part_paths);
        referenced.extend(part_referenced);
        infos.push(info);
    }
    let top = read_top(dir, name, &parts, &paths, header.part_crcs[TOP_PART])?;
    // flow-go writes only nodes a trie reaches: any other node is damage (which a read that
    // trusts the stored hashes would otherwise take).
    referenced.extend(std::iter::repeat_n(false, top.offsets.len()));
    for g in top.references {
        referenced[(g - 1) as usize] = true;
    }
    if let Some(j) = referenced.iter().position(|r| !r) {
        let global = j as u64 + 1;
        let mut first = 1u64;
        for (k, part) in parts.iter().enumerate() {
            if global < first + part.len() as u64 {
                let f = dir.join(part_name(name, k));
                let at = node_offset(&f, global - first, header.part_crcs[k])?;
                return Err(unreferenced(&f, at));
            }
            first += part.len() as u64;
        }
        let f = dir.join(part_name(name, TOP_PART));
        return Err(unreferenced(&f, top.offsets[(global - first) as usize]));
    }
    let (tries, top_nodes) = (top.tries, top.offsets.len() as u64);
    Ok(Loaded {
        tries,
        parts: infos,
        top_nodes,
    })
}

fn unreferenced(file: &FsPath, at: u64) -> CheckpointError {
    CheckpointError::new(
        file,
        at,
        "unreferenced_node",
        "no node and no trie references this node",
    )
}

/// The offset of the `n`th node (from 0) of a subtrie part already read once.
fn node_offset(file: &FsPath, n: u64, crc: u32) -> CpResult<u64> {
    let (mut r, _) = open_part(file, MAGIC_SUBTRIE, 8, crc)?;
    for _ in 0..n {
        read_node(&mut r)?;
    }
    Ok(r.offset)
}

/// The top part read: its tries, each top node's offset, and the global index of every node
/// a top node or a trie record references.
struct TopRead {
    tries: Vec<Trie>,
    offsets: Vec<u64>,
    references: Vec<u64>,
}

fn read_top(
    dir: &FsPath,
    name: &str,
    parts: &[Vec<Arc<Node>>],
    paths: &[Vec<Path>],
    expected_crc: u32,
) -> CpResult<TopRead> {
    let mut starts = Vec::with_capacity(parts.len());
    let mut total = 0u64;
    for p in parts {
        starts.push(total + 1);
        total += p.len() as u64;
    }
    // The parts' checksums were checked as they were read.
    let TopPart {
        file,
        mut r,
        footer,
        top_count,
        trie_count,
    } = open_top(dir, name, expected_crc, total, || Ok(()))?;
    let mut table = NodeTable {
        parts,
        paths,
        starts,
        subtrie_total: total,
        top: Vec::with_capacity(top_count as usize),
        top_paths: Vec::with_capacity(top_count as usize),
    };
    let mut offsets = Vec::with_capacity(top_count as usize);
    let mut references = Vec::new();
    for j in 1..=top_count {
        let global = total + j;
        let (at, raw) = read_top_node(&mut r, global)?;
        let (left, right) = match &raw {
            RawNode::Interior { left, right, .. } => (*left, *right),
            RawNode::Leaf { .. } => (0, 0),
        };
        let fields = NodeFields::v6(at);
        let (l, rt) = (table.get(left).cloned(), table.get(right).cloned());
        references.extend([left, right].into_iter().filter(|&c| c > 0));
        offsets.push(at);
        let node = build_node(&file, fields, raw, l, rt, Verify::Full)?;
        let path = match &*node {
            Node::Leaf { reg, .. } => *reg.path(),
            _ => path_under(
                &file,
                at,
                node.height(),
                table.path(left),
                table.path(right),
            )?,
        };
        table.top.push(node);
        table.top_paths.push(path);
    }
    let mut tries = Vec::with_capacity(trie_count as usize);
    for _ in 0..trie_count {
        let TrieRecord {
            at,
            root_index,
            reg_count,
            reg_size,
            root_hash,
        } = read_trie_record(&mut r)?;
        if root_index > 0 {
            references.push(root_index);
        }
        let root = if root_index == 0 {
            None
        } else {
            Some(table.get(root_index).cloned().ok_or_else(|| {
                CheckpointError::new(
                    &file,
                    at,
                    "bad_child_index",
                    format!("trie root index {root_index} is not a stored node"),
                )
            })?)
        };
        let actual = root.as_ref().map_or_else(empty_root, |n| n.hash());
        if actual != root_hash {
            return Err(CheckpointError::new(
                &file,
                at + 24,
                "root_mismatch",
                format!(
                    "trie record root hash {} but its root node hashes to {}",
                    root_hash.to_hex(),
                    actual.to_hex()
                ),
            ));
        }
        if let Some(n) = &root {
            if n.height() != MAX_HEIGHT {
                return Err(CheckpointError::new(
                    &file,
                    at,
                    "bad_height",
                    format!("trie root node has height {}, expected 256", n.height()),
                ));
            }
        }
        tries.push(Trie {
            root,
            reg_count,
            reg_size,
        });
    }
    finish_part(&r, &footer, expected_crc)?;
    Ok(TopRead {
        tries,
        offsets,
        references,
    })
}
