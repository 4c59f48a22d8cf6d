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
//! Record (little endian): `u32 body length | u32 CRC-32C of body | body`, body =
//! `u8 kind | u16 height | hash[32]` then, for a leaf, `path[32] | u32 key length | key | value`,
//! for an interior node two child slots `u8 kind (0 none, 1 interior, 2 leaf) | u64 loc |
//! hash[32]`. The files are scratch: they live as long as the store (deleted when it is
//! dropped) and a killed run starts again from its checkpoint.

use super::hash::{Hash, Path};
use super::mtrie::{Node, Register};
use super::record::Payload;
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path as FsPath, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// Where a node was written: file number in the high bits, byte offset in the low ones.
pub type Loc = u64;
const OFFSET_BITS: u32 = 40;
const KIND_NONE: u8 = 0;
const KIND_INTERIOR: u8 = 1;
const KIND_LEAF: u8 = 2;
/// Bytes of a record before its body.
const HEADER: usize = 8;
/// What a cached node costs beyond its payload: the node, its register or two placeholders,
/// and the map entry.
const NODE_OVERHEAD: usize = 200;

/// A node store problem: the file and offset, and what went wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreError {
    pub file: PathBuf,
    pub offset: u64,
    pub message: String,
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "node store {} at offset {}: {}",
            self.file.display(),
            self.offset,
            self.message
        )
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

/// Counters of a store's traffic.
#[derive(Debug, Default)]
pub struct StoreStats {
    pub nodes_written: AtomicU64,
    pub bytes_written: AtomicU64,
    pub loads: AtomicU64,
    pub cache_hits: AtomicU64,
}

/// Two generations of loaded nodes: a lookup that finds a node in the old one moves it to the
/// new one, and when the new one reaches half the budget the old one is dropped. Nodes read
/// again within a generation stay (a trie's top levels, the paths a replay keeps writing).
struct Cache {
    young: HashMap<Loc, (Arc<Node>, usize)>,
    old: HashMap<Loc, (Arc<Node>, usize)>,
    young_bytes: usize,
    half: usize,
}

impl Cache {
    fn get(&mut self, loc: Loc) -> Option<Arc<Node>> {
        if let Some((n, _)) = self.young.get(&loc) {
            return Some(n.clone());
        }
        let (n, cost) = self.old.remove(&loc)?;
        self.insert(loc, n.clone(), cost);
        Some(n)
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
        self.young_bytes + self.old.values().map(|(_, c)| c).sum::<usize>()
    }

    fn clear(&mut self) {
        self.young.clear();
        self.old.clear();
        self.young_bytes = 0;
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
            cache: Mutex::new(Cache {
                young: HashMap::new(),
                old: HashMap::new(),
                young_bytes: 0,
                half: (cache_bytes / 2).max(1),
            }),
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

    /// The node written at `loc`, from the cache or its file (checked against its CRC).
    pub fn load(self: &Arc<Self>, loc: Loc) -> StoreResult<Arc<Node>> {
        if let Some(n) = self.cache.lock().expect("node cache lock").get(loc) {
            self.stats.cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(n);
        }
        self.stats.loads.fetch_add(1, Ordering::Relaxed);
        let (path, file) = {
            let files = self.files.read().expect("node store files lock");
            let Some((p, f)) = files.get((loc >> OFFSET_BITS) as usize) else {
                return Err(io_err(&self.dir, loc, "no such node file"));
            };
            (p.clone(), f.clone())
        };
        let offset = loc & ((1 << OFFSET_BITS) - 1);
        let mut head = [0u8; HEADER];
        file.read_exact_at(&mut head, offset)
            .map_err(|e| io_err(&path, offset, e))?;
        let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(head[4..].try_into().expect("4 bytes"));
        if len > 64 << 20 {
            return Err(io_err(&path, offset, format!("record length {len}")));
        }
        let mut body = vec![0u8; len];
        file.read_exact_at(&mut body, offset + HEADER as u64)
            .map_err(|e| io_err(&path, offset, e))?;
        if crc32c::crc32c(&body) != crc {
            return Err(io_err(&path, offset, "record checksum mismatch"));
        }
        let (node, cost) = self
            .decode(&body)
            .ok_or_else(|| io_err(&path, offset, "malformed record"))?;
        let node = Arc::new(node);
        self.cache
            .lock()
            .expect("node cache lock")
            .insert(loc, node.clone(), cost);
        Ok(node)
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
                let cost = NODE_OVERHEAD + key.len() + value.len();
                let reg = Register::new(path, Payload::new(key, value));
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
                    Some(Some(Arc::new(Node::Paged {
                        height: height.checked_sub(1)?,
                        leaf,
                        hash,
                        loc,
                        store: self.clone(),
                    })))
                };
                if rest.len() != 82 {
                    return None;
                }
                let left = child(&rest[..41])?;
                let right = child(&rest[41..])?;
                Some((
                    Node::Interior {
                        height,
                        left,
                        right,
                        hash,
                    },
                    NODE_OVERHEAD,
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

    fn placeholder(&self, height: u16, leaf: bool, hash: Hash, loc: Loc) -> Arc<Node> {
        Arc::new(Node::Paged {
            height,
            leaf,
            hash,
            loc,
            store: self.store.clone(),
        })
    }

    /// Writes a leaf; returns its placeholder.
    pub fn leaf(&mut self, height: u16, hash: Hash, reg: &Register) -> StoreResult<Arc<Node>> {
        self.start(KIND_LEAF, height, &hash);
        self.scratch.extend_from_slice(&reg.path.0);
        self.scratch
            .extend_from_slice(&(reg.payload.key.len() as u32).to_le_bytes());
        self.scratch.extend_from_slice(&reg.payload.key);
        self.scratch.extend_from_slice(&reg.payload.value);
        let loc = self.put()?;
        Ok(self.placeholder(height, true, hash, loc))
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
        self.start(KIND_INTERIOR, height, &hash);
        for c in [left, right] {
            match c.map(|c| &**c) {
                None => self.scratch.extend_from_slice(&[0u8; 41]),
                Some(Node::Paged {
                    leaf, hash, loc, ..
                }) => {
                    self.scratch
                        .push(if *leaf { KIND_LEAF } else { KIND_INTERIOR });
                    self.scratch.extend_from_slice(&loc.to_le_bytes());
                    self.scratch.extend_from_slice(&hash.0);
                }
                Some(_) => {
                    return Err(io_err(
                        &self.path,
                        self.offset,
                        "an interior node's children must be written first",
                    ))
                }
            }
        }
        let loc = self.put()?;
        Ok(self.placeholder(height, false, hash, loc))
    }

    /// Makes everything written so far loadable.
    pub fn flush(&mut self) -> StoreResult<()> {
        self.out
            .flush()
            .map_err(|e| io_err(&self.path, self.offset, e))
    }

    /// Writes every in-memory node under `n` (children first, each shared node once: `seen`
    /// maps the nodes of this pass by address) and returns `n`'s placeholder.
    pub fn page_out(
        &mut self,
        n: &Arc<Node>,
        seen: &mut HashMap<usize, Arc<Node>>,
    ) -> StoreResult<Arc<Node>> {
        if let Node::Paged { .. } = &**n {
            return Ok(n.clone());
        }
        let key = Arc::as_ptr(n) as usize;
        if let Some(p) = seen.get(&key) {
            return Ok(p.clone());
        }
        let placeholder = match &**n {
            Node::Leaf { height, reg, hash } => self.leaf(*height, *hash, reg)?,
            Node::Interior {
                height,
                left,
                right,
                hash,
            } => {
                let l = left.as_ref().map(|c| self.page_out(c, seen)).transpose()?;
                let r = right.as_ref().map(|c| self.page_out(c, seen)).transpose()?;
                self.interior(*height, *hash, l.as_ref(), r.as_ref())?
            }
            Node::Paged { .. } => unreachable!("returned above"),
        };
        seen.insert(key, placeholder.clone());
        Ok(placeholder)
    }
}
