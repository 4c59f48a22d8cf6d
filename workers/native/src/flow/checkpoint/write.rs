//! Writing tries held in memory as a v6 checkpoint byte-identical to flow-go's
//! `StoreCheckpointV6` ([`write_tries`]), and the staged files every writer here goes
//! through: `writing-<name>-<pid>` temporaries renamed into place, header last.

use super::error::{CheckpointError, CpResult};
use super::format::{
    encode_interior, encode_leaf, encode_trie_record, part_name, version_bytes, HEADER_LEN, IO_BUF,
    MAGIC_HEADER, MAGIC_SUBTRIE, MAGIC_TOPTRIE, SUBTRIE_COUNT, SUBTRIE_LEVEL, TOP_PART,
    TRIE_RECORD_LEN,
};
use crate::atomic::Landing;
use crate::flow::hash::{Hash, MAX_HEIGHT};
use crate::flow::mtrie::Trie;
use crate::flow::node::Node;
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;

/// A buffered file that keeps a running CRC-32C.
pub(super) struct CrcWriter {
    file: PathBuf,
    inner: BufWriter<File>,
    crc: u32,
    written: u64,
}

impl CrcWriter {
    pub(super) fn create(file: PathBuf) -> CpResult<CrcWriter> {
        let f =
            crate::atomic::create(&file).map_err(|e| CheckpointError::io(&e.path, 0, &e.source))?;
        Ok(CrcWriter {
            file,
            inner: BufWriter::with_capacity(IO_BUF, f),
            crc: 0,
            written: 0,
        })
    }

    pub(super) fn put(&mut self, data: &[u8]) -> CpResult<()> {
        self.inner
            .write_all(data)
            .map_err(|e| CheckpointError::io(&self.file, self.written, &e))?;
        self.crc = crc32c::crc32c_append(self.crc, data);
        self.written += data.len() as u64;
        Ok(())
    }

    /// Appends the CRC of everything written, flushes and starts the file's writeback (the
    /// fsync is `Staged::commit`'s, so a thread goes on while the disk catches up); returns
    /// the CRC.
    pub(super) fn finish(mut self) -> CpResult<u32> {
        let c = self.crc;
        self.inner
            .write_all(&c.to_be_bytes())
            .and_then(|_| self.inner.flush())
            .map_err(|e| CheckpointError::io(&self.file, self.written, &e))?;
        let f = self
            .inner
            .into_inner()
            .map_err(|e| CheckpointError::io(&self.file, self.written, e.error()))?;
        crate::writeback::start(&f);
        Ok(c)
    }
}

/// The files of a checkpoint being written: temporary names, landed by [`Staged::commit`].
pub(super) struct Staged {
    landing: Landing,
}

/// Removes the temporary files a killed writer of checkpoint `name` left behind (its `Drop`
/// never ran): `writing-<name>...-<pid>` whose process is gone. Only where `/proc` tells.
pub(super) fn remove_stale_temps(dir: &FsPath, name: &str) {
    if !FsPath::new("/proc/self").exists() {
        return;
    }
    let prefix = format!("writing-{name}");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let file = e.file_name();
        let Some(file) = file.to_str() else { continue };
        let pid = file
            .strip_prefix(&prefix)
            .and_then(|rest| rest.rsplit_once('-'))
            .and_then(|(_, pid)| pid.parse::<u32>().ok());
        if let Some(pid) = pid {
            if !FsPath::new(&format!("/proc/{pid}")).exists() {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

impl Staged {
    pub(super) fn new(dir: &FsPath, name: &str) -> CpResult<Staged> {
        std::fs::create_dir_all(dir).map_err(|e| CheckpointError::io(dir, 0, &e))?;
        remove_stale_temps(dir, name);
        let mut landing = Landing::new(dir);
        for i in 0..=SUBTRIE_COUNT + 1 {
            let target = if i <= SUBTRIE_COUNT {
                part_name(name, i)
            } else {
                name.to_string()
            };
            landing.stage(format!("writing-{target}-{}", std::process::id()), target);
        }
        Ok(Staged { landing })
    }

    /// (temporary path, final path) of the parts 0..=16, then the header.
    pub(super) fn temps(&self) -> &[(PathBuf, PathBuf)] {
        self.landing.files()
    }

    pub(super) fn temp(&self, i: usize) -> PathBuf {
        self.temps()[i].0.clone()
    }

    /// Syncs every file, then renames the parts and the header last (a reader looks for the
    /// header first). If a rename fails, the files already renamed are removed again
    /// (flow-go's `deleteCheckpointFiles`). Dropped before, it removes the temporaries.
    pub(super) fn commit(self) -> CpResult<()> {
        self.landing
            .land()
            .map_err(|e| CheckpointError::io(&e.path, 0, &e.source))
    }
}

pub(super) fn write_header(staged: &Staged, crcs: &[u32; SUBTRIE_COUNT + 1]) -> CpResult<()> {
    let mut w = CrcWriter::create(staged.temp(SUBTRIE_COUNT + 1))?;
    let mut buf = Vec::with_capacity(HEADER_LEN as usize);
    buf.extend_from_slice(&version_bytes(MAGIC_HEADER));
    buf.extend_from_slice(&(SUBTRIE_COUNT as u16).to_be_bytes());
    for c in crcs {
        buf.extend_from_slice(&c.to_be_bytes());
    }
    w.put(&buf)?;
    w.finish()?;
    Ok(())
}

/// Node identity (flow-go de-duplicates by pointer): see [`Node::identity`].
pub(super) type NodeKey = (bool, u64);

pub(super) fn node_key(n: &Arc<Node>) -> NodeKey {
    n.identity()
}

/// `getNodesAtLevel(root, 4)`: the 16 nodes at depth 4, breadth-first order, nil where the trie
/// is shallower. Paged-out nodes above depth 4 are loaded; those at depth 4 stay placeholders.
pub(super) fn nodes_at_level(root: &Option<Arc<Node>>) -> CpResult<Vec<Option<Arc<Node>>>> {
    let mut nodes = vec![root.clone()];
    for _ in 0..SUBTRIE_LEVEL {
        let mut next = Vec::with_capacity(nodes.len() * 2);
        for n in &nodes {
            let loaded = n
                .as_ref()
                .map(|n| n.resolve())
                .transpose()
                .map_err(CheckpointError::from)?;
            match loaded.as_deref() {
                Some(Node::Interior { left, right, .. }) => {
                    next.push(left.clone());
                    next.push(right.clone());
                }
                _ => {
                    next.push(None);
                    next.push(None);
                }
            }
        }
        nodes = next;
    }
    Ok(nodes)
}

/// `storeUniqueNodes`: the nodes under `root` not yet in `visited`, descendants first (left
/// subtree, right subtree, node), each encoded and written as it is reached (paged-out nodes
/// loaded one at a time). With `single_trie` no node has two parents, so a child's index is
/// forgotten once its parent is written: `visited` then holds one path's worth of nodes, not
/// the trie's, which is what lets a paged trie larger than memory be written.
pub(super) fn store_unique_nodes(
    root: &Arc<Node>,
    visited: &mut HashMap<NodeKey, u64>,
    counter: &mut u64,
    out: &mut CrcWriter,
    scratch: &mut Vec<u8>,
    single_trie: bool,
) -> CpResult<()> {
    if visited.contains_key(&node_key(root)) {
        return Ok(());
    }
    // (node as its parent holds it, the node loaded, children pushed)
    let mut stack: Vec<(Arc<Node>, Arc<Node>, bool)> = vec![(
        root.clone(),
        root.resolve().map_err(CheckpointError::from)?,
        false,
    )];
    while let Some((held, n, expanded)) = stack.pop() {
        match &*n {
            Node::Interior { left, right, .. } if !expanded => {
                stack.push((held.clone(), n.clone(), true));
                for c in [right, left].into_iter().flatten() {
                    if !visited.contains_key(&node_key(c)) {
                        stack.push((
                            c.clone(),
                            c.resolve().map_err(CheckpointError::from)?,
                            false,
                        ));
                    }
                }
            }
            Node::Interior {
                height,
                left,
                right,
                hash,
            } => {
                let idx = |c: &Option<Arc<Node>>| {
                    c.as_ref()
                        .map_or(0, |c| visited.get(&node_key(c)).copied().unwrap_or(0))
                };
                encode_interior(scratch, *height, hash, idx(left), idx(right));
                out.put(scratch)?;
                if single_trie {
                    for c in [left, right].into_iter().flatten() {
                        visited.remove(&node_key(c));
                    }
                }
                visited.insert(node_key(&held), *counter);
                *counter += 1;
            }
            Node::Leaf { height, reg, hash } => {
                if visited.contains_key(&node_key(&held)) {
                    continue;
                }
                encode_leaf(scratch, *height, hash, reg.path(), reg.payload());
                out.put(scratch)?;
                visited.insert(node_key(&held), *counter);
                *counter += 1;
            }
            Node::Paged { .. } => {
                return Err(CheckpointError::new(
                    &out.file,
                    0,
                    "io",
                    "node store record of the wrong kind",
                ))
            }
        }
    }
    Ok(())
}

/// What a writer produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteInfo {
    /// `(root hash, reg count, reg size)` per trie, in file order.
    pub tries: Vec<(Hash, u64, u64)>,
    pub part_nodes: Vec<u64>,
    pub top_nodes: u64,
    pub bytes: u64,
    /// Builder only: leaves whose compact hash came from the data folder's `register_hashes`
    /// (checked by `HashLeaf` and height) and leaves whose hash chain was run.
    pub cached_leaves: u64,
    pub hashed_leaves: u64,
}

/// Writes `tries` as checkpoint `name` in `dir`, byte-identical to flow-go's
/// `StoreCheckpointV6`: subtrie parts on up to `threads` threads, then the top part, then the
/// header; nothing is left under the final names if any step fails.
pub fn write_tries(
    tries: &[Trie],
    dir: &FsPath,
    name: &str,
    threads: usize,
) -> CpResult<WriteInfo> {
    if tries.len() > u16::MAX as usize {
        return Err(CheckpointError::new(
            &dir.join(name),
            0,
            "config",
            format!("{} tries do not fit the u16 trie count", tries.len()),
        ));
    }
    for t in tries {
        if let Some(r) = &t.root {
            if r.height() != MAX_HEIGHT {
                return Err(CheckpointError::new(
                    &dir.join(name),
                    0,
                    "bad_height",
                    format!("trie root of height {}, expected 256", r.height()),
                ));
            }
        }
    }
    let staged = Staged::new(dir, name)?;
    let single = tries.len() == 1;
    // subtrie_roots[i][t] = trie t's node at position i of depth 4.
    let mut subtrie_roots: Vec<Vec<Option<Arc<Node>>>> = vec![Vec::new(); SUBTRIE_COUNT];
    for t in tries {
        for (i, n) in nodes_at_level(&t.root)?.into_iter().enumerate() {
            subtrie_roots[i].push(n);
        }
    }
    type PartOut = CpResult<(u32, u64, Vec<(NodeKey, u64)>)>;
    let store_part = |i: usize| -> PartOut {
        let mut w = CrcWriter::create(staged.temp(i))?;
        w.put(&version_bytes(MAGIC_SUBTRIE))?;
        let mut visited: HashMap<NodeKey, u64> = HashMap::new();
        let mut counter = 1u64;
        let mut scratch = Vec::with_capacity(4096);
        let mut roots = Vec::new();
        for n in subtrie_roots[i].iter().flatten() {
            store_unique_nodes(n, &mut visited, &mut counter, &mut w, &mut scratch, single)?;
            roots.push((node_key(n), visited[&node_key(n)]));
        }
        let count = counter - 1;
        w.put(&count.to_be_bytes())?;
        Ok((w.finish()?, count, roots))
    };
    let threads = threads.clamp(1, SUBTRIE_COUNT);
    let mut results: Vec<Option<PartOut>> = (0..SUBTRIE_COUNT).map(|_| None).collect();
    std::thread::scope(|s| {
        let mut first = 0usize;
        for chunk in results.chunks_mut(SUBTRIE_COUNT.div_ceil(threads)) {
            let start = first;
            first += chunk.len();
            let store_part = &store_part;
            s.spawn(move || {
                for (k, slot) in chunk.iter_mut().enumerate() {
                    *slot = Some(store_part(start + k));
                }
            });
        }
    });
    let mut crcs = [0u32; SUBTRIE_COUNT + 1];
    let mut part_nodes = Vec::with_capacity(SUBTRIE_COUNT);
    let mut visited: HashMap<NodeKey, u64> = HashMap::new();
    let mut offset = 0u64;
    for (i, r) in results.into_iter().enumerate() {
        let (c, count, roots) = r.expect("every part was written")?;
        crcs[i] = c;
        part_nodes.push(count);
        for (ptr, local) in roots {
            visited.insert(ptr, local + offset);
        }
        offset += count;
    }
    // Top part: the nodes above depth 4, then the trie records.
    let mut w = CrcWriter::create(staged.temp(TOP_PART))?;
    w.put(&version_bytes(MAGIC_TOPTRIE))?;
    w.put(&offset.to_be_bytes())?;
    let mut counter = offset + 1;
    let mut scratch = Vec::with_capacity(4096);
    for t in tries {
        if let Some(root) = &t.root {
            store_unique_nodes(
                root,
                &mut visited,
                &mut counter,
                &mut w,
                &mut scratch,
                single,
            )?;
        }
    }
    let top_nodes = counter - offset - 1;
    let mut recs = Vec::with_capacity(tries.len() * TRIE_RECORD_LEN as usize);
    let mut infos = Vec::with_capacity(tries.len());
    for t in tries {
        let idx = t
            .root
            .as_ref()
            .map_or(0, |r| visited.get(&node_key(r)).copied().unwrap_or(0));
        encode_trie_record(&mut recs, idx, t.reg_count, t.reg_size, &t.root_hash());
        infos.push((t.root_hash(), t.reg_count, t.reg_size));
    }
    w.put(&recs)?;
    w.put(&top_nodes.to_be_bytes())?;
    w.put(&(tries.len() as u16).to_be_bytes())?;
    crcs[TOP_PART] = w.finish()?;
    write_header(&staged, &crcs)?;
    let bytes = staged
        .temps()
        .iter()
        .map(|(t, _)| std::fs::metadata(t).map_or(0, |m| m.len()))
        .sum();
    staged.commit()?;
    Ok(WriteInfo {
        tries: infos,
        part_nodes,
        top_nodes,
        bytes,
        cached_leaves: 0,
        hashed_leaves: 0,
    })
}

// ---------------------------------------------------------------------------------------------
// Building a checkpoint from registers in path order
