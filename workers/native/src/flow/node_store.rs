//! The paged node store: trie nodes written out of memory into append-only files of a scratch
//! folder, read back on demand through a cache of bounded bytes. A forest paged out this way
//! ([`super::mtrie::Forest::with_paging`]) holds only the nodes an update is working on, so a
//! replay can run on a state many times larger than its memory budget.
//!
//! A written node is addressed by its [`Loc`] (file number and byte offset) and stands in its
//! parent as a [`Node::Paged`] placeholder: its height, hash and kind, which is all a parent
//! needs to hash or prune, and where to load it from. A loaded interior node's children are
//! placeholders again, so loading never pulls in more than one node. Nodes are immutable, so a
//! location always means the same node: a checkpoint writer de-duplicates by location as flow-go
//! does by pointer.
//!
//! An update loads only the nodes on the paths it writes, and replaces each of them: a node
//! loaded by a replay is never loaded again, so caching what was loaded does not spare a replay
//! any read. What the next updates load is the top of the newest trie, rewritten by every
//! page-out at new locations. So a page-out hands the nodes it wrote for the newest trie to the
//! cache, nearest the root first ([`NodeStore::keep_top`]), and the next updates find them there.
//!
//! Record (little endian): `u32 body length | u32 CRC-32C of body | body`, body =
//! `u8 kind | u16 height | hash[32]` then, for a leaf, `path[32] | u32 key length | key | value`,
//! for an interior node two child slots `u8 kind (0 none, 1 interior, 2 leaf) | u64 loc |
//! hash[32]`. The files are scratch: they live as long as the store (deleted when it is
//! dropped) and a killed run starts again from its checkpoint.

use super::hash::{Hash, Path};
use super::node::{Node, NodeSource, Register};
use super::paging::{Loc, StoreError, StoreResult};
use super::record::PayloadRef;
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path as FsPath, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

const OFFSET_BITS: u32 = 40;
const KIND_NONE: u8 = 0;
const KIND_INTERIOR: u8 = 1;
const KIND_LEAF: u8 = 2;
/// Bytes of a record before its body.
const HEADER: usize = 8;
/// Bytes read at once for a record: an interior node's record is 125, a leaf's 111 plus its
/// key and value.
const FIRST_READ: usize = 512;
/// Heap bytes of an allocation of `size` bytes under glibc's malloc: an 8-byte chunk header,
/// chunks in 16-byte steps, 32 at the least (nothing for an empty box, which allocates none).
const fn heap_bytes(size: usize) -> usize {
    if size == 0 {
        return 0;
    }
    let chunk = (size + 8).div_ceil(16) * 16;
    if chunk < 32 {
        32
    } else {
        chunk
    }
}

/// An `Arc<T>`'s allocation: its two counts and the value.
const fn arc_bytes<T>() -> usize {
    heap_bytes(2 * std::mem::size_of::<usize>() + std::mem::size_of::<T>())
}

/// A cache map's entry: the pair and a control byte, in a table that doubles when 7/8 full,
/// so up to twice that per entry just after it grew.
const MAP_ENTRY: usize = 2 * (std::mem::size_of::<(Loc, (Arc<Node>, usize))>() + 1) * 8 / 7;

/// Heap bytes of a leaf in memory: the node and its register (path, key and value). What a
/// paged forest counts against its hold for each new leaf, and the cache for each loaded one.
pub fn leaf_heap_bytes(key_bytes: usize, value_bytes: usize) -> usize {
    arc_bytes::<Node>() + heap_bytes(Register::arc_bytes(key_bytes, value_bytes))
}

/// Heap bytes of an interior node in memory, its children apart.
pub const INTERIOR_HEAP_BYTES: usize = arc_bytes::<Node>();

/// What a loaded leaf costs in the cache: the leaf and the map entry.
fn leaf_cost(key_bytes: usize, value_bytes: usize) -> usize {
    leaf_heap_bytes(key_bytes, value_bytes) + MAP_ENTRY
}

/// What a loaded interior node with `children` children costs in the cache: the node, a
/// placeholder per child (loading never pulls in more than one node) and the map entry.
const fn interior_cost(children: usize) -> usize {
    (1 + children) * INTERIOR_HEAP_BYTES + MAP_ENTRY
}

/// Counters of a store's traffic.
#[derive(Debug, Default)]
pub struct StoreStats {
    pub nodes_written: AtomicU64,
    pub bytes_written: AtomicU64,
    pub loads: AtomicU64,
    pub cache_hits: AtomicU64,
}

/// The cache: the top of the newest trie as page-outs wrote it (half the budget, highest nodes
/// kept), and two generations of loaded nodes (a quarter each, for lookups and forks that read
/// a node again): a lookup that finds a node in the old generation or the top moves it to the
/// new one, and when the new one is full the old one is dropped.
struct Cache {
    young: HashMap<Loc, (Arc<Node>, usize)>,
    old: HashMap<Loc, (Arc<Node>, usize)>,
    young_bytes: usize,
    /// Bytes of one generation.
    half: usize,
    top: HashMap<Loc, (Arc<Node>, usize)>,
    top_bytes: usize,
    top_cap: usize,
}

impl Cache {
    fn new(cache_bytes: usize) -> Cache {
        Cache {
            young: HashMap::new(),
            old: HashMap::new(),
            young_bytes: 0,
            half: (cache_bytes / 4).max(1),
            top: HashMap::new(),
            top_bytes: 0,
            top_cap: cache_bytes / 2,
        }
    }

    /// A node of the top found here is moved to the young generation: an update loads a node
    /// to replace it, so its place in the top goes to a node still in the newest trie.
    fn get(&mut self, loc: Loc) -> Option<Arc<Node>> {
        if let Some((n, _)) = self.young.get(&loc) {
            return Some(n.clone());
        }
        let (n, cost) = match self.old.remove(&loc) {
            Some(e) => e,
            None => {
                let e = self.top.remove(&loc)?;
                self.top_bytes -= e.1;
                e
            }
        };
        self.insert(loc, n.clone(), cost);
        Some(n)
    }

    /// A lookup that changes nothing, for a walk that reads each node once.
    fn peek(&self, loc: Loc) -> Option<Arc<Node>> {
        [&self.young, &self.old, &self.top]
            .into_iter()
            .find_map(|m| m.get(&loc).map(|(n, _)| n.clone()))
    }

    fn insert(&mut self, loc: Loc, n: Arc<Node>, cost: usize) {
        if self.young_bytes + cost > self.half {
            self.old = std::mem::take(&mut self.young);
            self.young_bytes = 0;
        }
        self.young_bytes += cost;
        self.young.insert(loc, (n, cost));
    }

    fn bytes(&self) -> usize {
        self.young_bytes + self.old.values().map(|(_, c)| c).sum::<usize>() + self.top_bytes
    }

    /// Drops every node and the maps' tables too.
    fn clear(&mut self) {
        self.young = HashMap::new();
        self.old = HashMap::new();
        self.young_bytes = 0;
        self.top = HashMap::new();
        self.top_bytes = 0;
    }
}

/// The store: its folder, the files written so far (read by position, from any thread) and
/// the cache of loaded nodes.
pub struct NodeStore {
    dir: PathBuf,
    files: RwLock<Vec<(PathBuf, Arc<File>)>>,
    cache: Mutex<Cache>,
    pub stats: StoreStats,
}

impl std::fmt::Debug for NodeStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NodeStore({})", self.dir.display())
    }
}

impl Drop for NodeStore {
    fn drop(&mut self) {
        // Scratch: nothing else reads these files, and a store's nodes mean nothing to the next.
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn io_err(file: &FsPath, offset: u64, e: impl std::fmt::Display) -> StoreError {
    StoreError {
        file: file.to_path_buf(),
        offset,
        message: e.to_string(),
    }
}

impl NodeStore {
    /// A store in a new folder `dir` (created; must not exist or be empty), caching up to
    /// `cache_bytes` of loaded nodes.
    pub fn create(dir: &FsPath, cache_bytes: usize) -> StoreResult<Arc<NodeStore>> {
        std::fs::create_dir_all(dir).map_err(|e| io_err(dir, 0, e))?;
        let stale = std::fs::read_dir(dir)
            .map_err(|e| io_err(dir, 0, e))?
            .next()
            .is_some();
        if stale {
            return Err(io_err(dir, 0, "node store folder is not empty"));
        }
        Ok(Arc::new(NodeStore {
            dir: dir.to_path_buf(),
            files: RwLock::new(Vec::new()),
            cache: Mutex::new(Cache::new(cache_bytes)),
            stats: StoreStats::default(),
        }))
    }

    /// A writer appending to a new file of the store. Its nodes can be loaded once it is
    /// flushed ([`NodeWriter::flush`]).
    pub fn writer(self: &Arc<Self>) -> StoreResult<NodeWriter> {
        let mut files = self.files.write().expect("node store files lock");
        let number = files.len() as u64;
        if number >= 1 << (64 - OFFSET_BITS) {
            return Err(io_err(&self.dir, 0, "too many node files"));
        }
        let path = self.dir.join(format!("nodes-{number:06}.bin"));
        let file = File::options()
            .create_new(true)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| io_err(&path, 0, e))?;
        let read = file.try_clone().map_err(|e| io_err(&path, 0, e))?;
        files.push((path.clone(), Arc::new(read)));
        Ok(NodeWriter {
            store: self.clone(),
            path,
            out: BufWriter::with_capacity(1 << 20, file),
            base: number << OFFSET_BITS,
            offset: 0,
            scratch: Vec::new(),
        })
    }

    /// Bytes of loaded nodes the cache holds.
    pub fn cached_bytes(&self) -> usize {
        self.cache.lock().expect("node cache lock").bytes()
    }

    /// Drops every cached node. Cached nodes hold placeholders, which hold the store: the
    /// forest that owns the store calls this when it goes, so the store (and its folder) goes
    /// with the last placeholder.
    pub fn clear_cache(&self) {
        self.cache.lock().expect("node cache lock").clear();
    }

    /// Bytes written to the store's files.
    pub fn disk_bytes(&self) -> u64 {
        self.stats.bytes_written.load(Ordering::Relaxed)
    }

    /// The node written at `loc`, from the cache or its file (checked against its CRC); a node
    /// read from its file is cached.
    pub fn load(self: &Arc<Self>, loc: Loc) -> StoreResult<Arc<Node>> {
        if let Some(n) = self.cache.lock().expect("node cache lock").get(loc) {
            self.stats.cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(n);
        }
        let (node, cost) = self.read_record(loc)?;
        let node = Arc::new(node);
        self.cache
            .lock()
            .expect("node cache lock")
            .insert(loc, node.clone(), cost);
        Ok(node)
    }

    /// As [`Self::load`], for a walk that reads each node once: a node read from its file is
    /// not cached (it would only push out the nodes updates read again).
    pub fn load_once(self: &Arc<Self>, loc: Loc) -> StoreResult<Arc<Node>> {
        if let Some(n) = self.cache.lock().expect("node cache lock").peek(loc) {
            self.stats.cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(n);
        }
        Ok(Arc::new(self.read_record(loc)?.0))
    }

    /// The node at `loc` read from its file, and what it costs in the cache. One read covers
    /// most records (their body is a few hundred bytes); a longer one takes a second.
    fn read_record(self: &Arc<Self>, loc: Loc) -> StoreResult<(Node, usize)> {
        self.stats.loads.fetch_add(1, Ordering::Relaxed);
        let (path, file) = {
            let files = self.files.read().expect("node store files lock");
            let Some((p, f)) = files.get((loc >> OFFSET_BITS) as usize) else {
                return Err(io_err(&self.dir, loc, "no such node file"));
            };
            (p.clone(), f.clone())
        };
        let offset = loc & ((1 << OFFSET_BITS) - 1);
        let mut buf = [0u8; FIRST_READ];
        let mut got = 0;
        while got < HEADER {
            match file.read_at(&mut buf[got..], offset + got as u64) {
                Ok(0) => return Err(io_err(&path, offset, "record past the end of the file")),
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_err(&path, offset, e)),
            }
        }
        let len = u32::from_le_bytes(buf[..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(buf[4..HEADER].try_into().expect("4 bytes"));
        if len > 64 << 20 {
            return Err(io_err(&path, offset, format!("record length {len}")));
        }
        let long;
        let body = if HEADER + len <= got {
            &buf[HEADER..HEADER + len]
        } else {
            let mut v = vec![0u8; len];
            let have = got - HEADER;
            v[..have].copy_from_slice(&buf[HEADER..got]);
            file.read_exact_at(&mut v[have..], offset + got as u64)
                .map_err(|e| io_err(&path, offset, e))?;
            long = v;
            &long[..]
        };
        if crc32c::crc32c(body) != crc {
            return Err(io_err(&path, offset, "record checksum mismatch"));
        }
        self.decode(body)
            .ok_or_else(|| io_err(&path, offset, "malformed record"))
    }

    /// Offers the cache's top the nodes a page-out wrote for the newest trie: with the nodes
    /// already there, the highest are kept, up to the top's share of the budget. A kept node
    /// is held as a load would give it (an interior node's children as placeholders).
    pub fn keep_top(self: &Arc<Self>, pass: &PageOut) {
        enum Offered<'a> {
            Kept(Arc<Node>, usize),
            Written(&'a Arc<Node>),
        }
        let mut cache = self.cache.lock().expect("node cache lock");
        cache.top_bytes = 0;
        let mut offered: Vec<(u16, Loc, Offered)> = cache
            .top
            .drain()
            .map(|(loc, (n, cost))| (n.height(), loc, Offered::Kept(n, cost)))
            .chain(
                pass.kept
                    .iter()
                    .map(|(n, loc)| (n.height(), *loc, Offered::Written(n))),
            )
            .collect();
        offered.sort_unstable_by_key(|&(height, _, _)| std::cmp::Reverse(height));
        for (_, loc, o) in offered {
            let (node, cost) = match o {
                Offered::Kept(n, cost) => (n, cost),
                Offered::Written(n) => match pass.as_loaded(self, n) {
                    Some(loaded) => loaded,
                    None => continue,
                },
            };
            if cache.top_bytes + cost > cache.top_cap {
                break;
            }
            cache.top_bytes += cost;
            cache.top.insert(loc, (node, cost));
        }
    }

    fn decode(self: &Arc<Self>, body: &[u8]) -> Option<(Node, usize)> {
        let kind = *body.first()?;
        let height = u16::from_le_bytes(body.get(1..3)?.try_into().ok()?);
        let hash = Hash(body.get(3..35)?.try_into().ok()?);
        let rest = &body[35..];
        match kind {
            KIND_LEAF => {
                let path = Path(rest.get(..32)?.try_into().ok()?);
                let klen = u32::from_le_bytes(rest.get(32..36)?.try_into().ok()?) as usize;
                let key = rest.get(36..36usize.checked_add(klen)?)?;
                let value = &rest[36 + klen..];
                let cost = leaf_cost(key.len(), value.len());
                let reg = Register::new(path, PayloadRef { key, value });
                Some((Node::Leaf { height, reg, hash }, cost))
            }
            KIND_INTERIOR => {
                let child = |slot: &[u8]| -> Option<Option<Arc<Node>>> {
                    let loc = u64::from_le_bytes(slot.get(1..9)?.try_into().ok()?);
                    let hash = Hash(slot.get(9..41)?.try_into().ok()?);
                    let leaf = match slot[0] {
                        KIND_NONE => return Some(None),
                        KIND_INTERIOR => false,
                        KIND_LEAF => true,
                        _ => return None,
                    };
                    let h = height.checked_sub(1)?;
                    Some(Some(placeholder(self, h, leaf, hash, loc)))
                };
                if rest.len() != 82 {
                    return None;
                }
                let left = child(&rest[..41])?;
                let right = child(&rest[41..])?;
                let cost = interior_cost(left.is_some() as usize + right.is_some() as usize);
                Some((
                    Node::Interior {
                        height,
                        left,
                        right,
                        hash,
                    },
                    cost,
                ))
            }
            _ => None,
        }
    }
}

/// Appends nodes to one file of a store. Children must be written before their parent (they
/// are referenced by location).
pub struct NodeWriter {
    store: Arc<NodeStore>,
    path: PathBuf,
    out: BufWriter<File>,
    base: Loc,
    offset: u64,
    scratch: Vec<u8>,
}

impl NodeWriter {
    fn put(&mut self) -> StoreResult<Loc> {
        if self.offset >= 1 << OFFSET_BITS {
            return Err(io_err(&self.path, self.offset, "node file full"));
        }
        let loc = self.base | self.offset;
        let body = &self.scratch;
        let mut head = [0u8; HEADER];
        head[..4].copy_from_slice(&(body.len() as u32).to_le_bytes());
        head[4..].copy_from_slice(&crc32c::crc32c(body).to_le_bytes());
        self.out
            .write_all(&head)
            .and_then(|_| self.out.write_all(body))
            .map_err(|e| io_err(&self.path, self.offset, e))?;
        let n = (HEADER + body.len()) as u64;
        self.offset += n;
        let stats = &self.store.stats;
        stats.nodes_written.fetch_add(1, Ordering::Relaxed);
        stats.bytes_written.fetch_add(n, Ordering::Relaxed);
        Ok(loc)
    }

    fn start(&mut self, kind: u8, height: u16, hash: &Hash) {
        self.scratch.clear();
        self.scratch.push(kind);
        self.scratch.extend_from_slice(&height.to_le_bytes());
        self.scratch.extend_from_slice(&hash.0);
    }

    /// Writes a leaf; returns its location.
    fn put_leaf(&mut self, height: u16, hash: &Hash, reg: &Register) -> StoreResult<Loc> {
        self.start(KIND_LEAF, height, hash);
        self.scratch.extend_from_slice(&reg.path().0);
        self.scratch
            .extend_from_slice(&(reg.key().len() as u32).to_le_bytes());
        self.scratch.extend_from_slice(reg.key());
        self.scratch.extend_from_slice(reg.value());
        self.put()
    }

    /// Writes an interior node whose children are written already; returns its location.
    fn put_interior(
        &mut self,
        height: u16,
        hash: &Hash,
        children: [Option<Slot>; 2],
    ) -> StoreResult<Loc> {
        self.start(KIND_INTERIOR, height, hash);
        for c in children {
            match c {
                None => self.scratch.extend_from_slice(&[0u8; 41]),
                Some(Slot { leaf, loc, hash }) => {
                    self.scratch
                        .push(if leaf { KIND_LEAF } else { KIND_INTERIOR });
                    self.scratch.extend_from_slice(&loc.to_le_bytes());
                    self.scratch.extend_from_slice(&hash.0);
                }
            }
        }
        self.put()
    }

    /// Writes a leaf; returns its placeholder.
    pub fn leaf(&mut self, height: u16, hash: Hash, reg: &Register) -> StoreResult<Arc<Node>> {
        let loc = self.put_leaf(height, &hash, reg)?;
        Ok(placeholder(&self.store, height, true, hash, loc))
    }

    /// Writes an interior node whose children are placeholders of this store; returns its
    /// placeholder.
    pub fn interior(
        &mut self,
        height: u16,
        hash: Hash,
        left: Option<&Arc<Node>>,
        right: Option<&Arc<Node>>,
    ) -> StoreResult<Arc<Node>> {
        let slot = |c: Option<&Arc<Node>>| match c.map(|c| &**c) {
            None => Ok(None),
            Some(Node::Paged {
                leaf, hash, loc, ..
            }) => Ok(Some(Slot {
                leaf: *leaf,
                loc: *loc,
                hash: *hash,
            })),
            Some(_) => Err(io_err(
                &self.path,
                self.offset,
                "an interior node's children must be written first",
            )),
        };
        let children = [slot(left)?, slot(right)?];
        let loc = self.put_interior(height, &hash, children)?;
        Ok(placeholder(&self.store, height, false, hash, loc))
    }

    /// Makes everything written so far loadable.
    pub fn flush(&mut self) -> StoreResult<()> {
        self.out
            .flush()
            .map_err(|e| io_err(&self.path, self.offset, e))
    }

    /// Writes every in-memory node under `n` (children first, each shared node once: `pass`
    /// maps the nodes of this pass by address) and returns `n`'s placeholder.
    pub fn page_out(&mut self, n: &Arc<Node>, pass: &mut PageOut) -> StoreResult<Arc<Node>> {
        if let Node::Paged { .. } = &**n {
            return Ok(n.clone());
        }
        let loc = self.page_out_node(n, pass)?;
        Ok(placeholder(
            &self.store,
            n.height(),
            n.is_leaf(),
            n.hash(),
            loc,
        ))
    }

    /// [`Self::page_out`] of a node in memory; returns its location. Only locations are kept
    /// while a pass runs: a placeholder per node written would cost more than the nodes'
    /// records.
    fn page_out_node(&mut self, n: &Arc<Node>, pass: &mut PageOut) -> StoreResult<Loc> {
        let key = Arc::as_ptr(n) as usize;
        if let Some(loc) = pass.seen.get(&key) {
            return Ok(*loc);
        }
        let loc = match &**n {
            Node::Leaf { height, reg, hash } => self.put_leaf(*height, hash, reg)?,
            Node::Interior {
                height,
                left,
                right,
                hash,
            } => {
                let mut slot = |c: &Option<Arc<Node>>| -> StoreResult<Option<Slot>> {
                    let Some(c) = c else { return Ok(None) };
                    let loc = match &**c {
                        Node::Paged { loc, .. } => *loc,
                        _ => self.page_out_node(c, pass)?,
                    };
                    Ok(Some(Slot {
                        leaf: c.is_leaf(),
                        loc,
                        hash: c.hash(),
                    }))
                };
                let children = [slot(left)?, slot(right)?];
                self.put_interior(*height, hash, children)?
            }
            Node::Paged { loc, .. } => *loc,
        };
        pass.seen.insert(key, loc);
        if pass.keep {
            pass.kept.push((n.clone(), loc));
        }
        Ok(loc)
    }
}

impl NodeSource for NodeStore {
    fn load_node(self: Arc<Self>, loc: Loc) -> StoreResult<Arc<Node>> {
        self.load(loc)
    }

    fn load_node_once(self: Arc<Self>, loc: Loc) -> StoreResult<Arc<Node>> {
        self.load_once(loc)
    }
}

/// What a parent's record says of a child: its kind, location and hash.
#[derive(Clone, Copy)]
struct Slot {
    leaf: bool,
    loc: Loc,
    hash: Hash,
}

fn placeholder(store: &Arc<NodeStore>, height: u16, leaf: bool, hash: Hash, loc: Loc) -> Arc<Node> {
    Arc::new(Node::Paged {
        height,
        leaf,
        hash,
        loc,
        store: store.clone() as Arc<dyn NodeSource>,
    })
}

/// One page-out of a forest ([`NodeWriter::page_out`] per trie): the location of each node
/// written, by the node's address, so a node shared between tries is written once; and, while
/// `keep` is set, the nodes written with their locations, for [`NodeStore::keep_top`].
#[derive(Default)]
pub struct PageOut {
    seen: HashMap<usize, Loc>,
    pub keep: bool,
    kept: Vec<(Arc<Node>, Loc)>,
}

impl PageOut {
    /// Node `n` of this pass as a load from `store` gives it, and its cost in the cache.
    fn as_loaded(&self, store: &Arc<NodeStore>, n: &Arc<Node>) -> Option<(Arc<Node>, usize)> {
        match &**n {
            Node::Leaf { reg, .. } => {
                Some((n.clone(), leaf_cost(reg.key().len(), reg.value().len())))
            }
            Node::Interior {
                height,
                left,
                right,
                hash,
            } => {
                let paged = |c: &Option<Arc<Node>>| -> Option<Option<Arc<Node>>> {
                    let Some(c) = c else { return Some(None) };
                    if let Node::Paged { .. } = &**c {
                        return Some(Some(c.clone()));
                    }
                    let loc = *self.seen.get(&(Arc::as_ptr(c) as usize))?;
                    Some(Some(placeholder(
                        store,
                        c.height(),
                        c.is_leaf(),
                        c.hash(),
                        loc,
                    )))
                };
                let (left, right) = (paged(left)?, paged(right)?);
                let cost = interior_cost(left.is_some() as usize + right.is_some() as usize);
                let node = Node::Interior {
                    height: *height,
                    left,
                    right,
                    hash: *hash,
                };
                Some((Arc::new(node), cost))
            }
            Node::Paged { .. } => None,
        }
    }
}
