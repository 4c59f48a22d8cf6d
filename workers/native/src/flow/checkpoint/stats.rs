//! `rechain flow checkpoint stats`: what flow-go's `checkpoint-collect-stats` reports of a
//! trie (register counts and sizes per owner and per register kind, leaf and interim node
//! counts, depths), gathered from the streamed read ([`stream_into`]): every part's checked
//! leaves are folded into counts on its own thread, never held.
//!
//! Memory: one part's leaf batch per thread (as the streamed read), a few hundred counters per
//! thread (kinds, depths), and the per-owner counts, which grow with the number of accounts:
//! each thread's owner map is sorted and spilled to a run file when it passes its share of the
//! budget (reth's ETL collector does the same), and the runs are merged in owner order when
//! the table is written ([`OwnerMerge`]).
//!
//! Spill run file (temporary, this module's own): `RCOWNRUN` | version u8 (1), then per owner
//! in byte order: owner length u32 LE (`u32::MAX`: none) | owner | registers, key bytes,
//! value bytes, smallest value, largest value (u64 LE each).
//!
//! Register kinds follow flow-go's `checkpoint-collect-stats` (`getRegisterType`, flow-go
//! master): atree slabs (`$` + index), Cadence storage domains, the FVM's account registers,
//! the EVM's; anything else is `others`.

use super::error::{CheckpointError, CpResult};
use super::format::SUBTRIE_COUNT;
use super::stream::{stream_into, PartSink, StreamInfo, Walk};
use crate::flow::hash::{Hash, MAX_HEIGHT};
use crate::flow::node::Node;
use crate::flow::record::{KEY_PART_KEY, KEY_PART_OWNER};
pub use crate::flow::register_stats::{OwnerRow, Sizes, TrieStats, DEPTHS};
use crate::flow::OutputError;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path as FsPath, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

const RUN_MAGIC: &[u8; 8] = b"RCOWNRUN";
const RUN_VERSION: u8 = 1;
const NO_OWNER: u32 = u32::MAX;
/// Bytes an owner's entry costs beyond the owner itself: its table slot (box and counters, 56
/// bytes, in a table up to half empty), the boxed owner's allocation, and its place in the
/// sorted vector a spill builds beside the table. What a spill threshold is counted in.
const OWNER_ENTRY_OVERHEAD: usize = 240;
/// The kind of a register by its key (the key part of type 2), as flow-go's
/// `checkpoint-collect-stats` names them.
pub fn register_kind(key: &[u8]) -> &'static str {
    if key.first() == Some(&b'$') {
        return "atree slab";
    }
    match key {
        // Cadence storage domains (cadence `common.AllStorageDomains`).
        b"storage" => "domain storage",
        b"private" => "domain private",
        b"public" => "domain public",
        b"contract" => "domain contract",
        b"inbox" => "domain inbox",
        b"cap_con" => "domain cap_con",
        b"cap_tag" => "domain cap_tag",
        b"path_cap" => "domain path_cap",
        b"acc_cap" => "domain acc_cap",
        // The account storage register (Cadence's account storage map).
        b"stored" => "account",
        b"contract_names" => "contract names",
        b"a.s" => "account status",
        b"account_address_state" => "address generator state",
        b"AccountsStorageIDKey" => "account storage ID",
        b"CodesStorageIDKey" => "code storage ID",
        b"LatestBlock" => "latest block",
        b"LatestBlockProposal" => "latest block proposal",
        b"uuid" => "uuid generator state",
        b"apk_0" => "account public key 0",
        _ => {
            const PREFIXES: [(&[u8], &str); 7] = [
                (b"uuid_", "uuid generator state"),
                (b"public_key_", "legacy public key"),
                (b"pk_b", "batch public key"),
                (b"sn_", "sequence number"),
                (b"code.", "contract content"),
                (b"BlockHashListBucket", "block hash list bucket"),
                (b"BlockHashListMeta", "block hash list meta"),
            ];
            PREFIXES
                .iter()
                .find(|(p, _)| key.starts_with(p))
                .map_or("others", |(_, kind)| kind)
        }
    }
}

/// The kind of a register whose encoded key does not decode, or has no key part.
pub const UNREADABLE_KEY: &str = "unreadable key";

/// An owner's counts in a spill run: five u64 LE.
fn write_sizes(s: &Sizes, w: &mut impl Write) -> std::io::Result<()> {
    for v in [
        s.registers,
        s.key_bytes,
        s.value_bytes,
        s.min_value_bytes,
        s.max_value_bytes,
    ] {
        w.write_all(&v.to_le_bytes())?;
    }
    Ok(())
}

fn read_sizes(r: &mut impl Read) -> std::io::Result<Sizes> {
    let mut b = [0u8; 40];
    r.read_exact(&mut b)?;
    let v = |i: usize| u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().expect("8 bytes"));
    Ok(Sizes {
        registers: v(0),
        key_bytes: v(1),
        value_bytes: v(2),
        min_value_bytes: v(3),
        max_value_bytes: v(4),
    })
}

/// Where the owner maps spill: a folder the caller owns, run files numbered across threads.
pub struct Spill {
    dir: PathBuf,
    next: AtomicUsize,
}

impl Spill {
    pub fn new(dir: &FsPath) -> Spill {
        Spill {
            dir: dir.to_path_buf(),
            next: AtomicUsize::new(0),
        }
    }
}

/// One part's counts (its [`PartSink`]).
pub struct StatsSink {
    kinds: HashMap<&'static str, Sizes>,
    owners: HashMap<Box<[u8]>, Sizes>,
    no_owner: Sizes,
    owner_bytes: usize,
    owner_limit: usize,
    spill: Arc<Spill>,
    runs: Vec<PathBuf>,
    leaf_depths: Vec<u64>,
    interim_depths: Vec<u64>,
}

/// What a part's sink hands back.
pub struct PartStats {
    kinds: HashMap<&'static str, Sizes>,
    no_owner: Sizes,
    runs: Vec<PathBuf>,
    leaf_depths: Vec<u64>,
    interim_depths: Vec<u64>,
}

impl StatsSink {
    pub fn new(spill: Arc<Spill>, owner_limit: usize) -> StatsSink {
        StatsSink {
            kinds: HashMap::new(),
            owners: HashMap::new(),
            no_owner: Sizes::default(),
            owner_bytes: 0,
            owner_limit: owner_limit.max(1),
            spill,
            runs: Vec::new(),
            leaf_depths: vec![0; DEPTHS],
            interim_depths: vec![0; DEPTHS],
        }
    }

    /// Writes the owner map, sorted, as a run file and empties it.
    fn spill_owners(&mut self) -> Result<(), OutputError> {
        if self.owners.is_empty() {
            return Ok(());
        }
        let mut entries: Vec<(Box<[u8]>, Sizes)> = self.owners.drain().collect();
        self.owners.shrink_to_fit();
        entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let n = self.spill.next.fetch_add(1, Ordering::Relaxed);
        let path = self.spill.dir.join(format!("owners-{n:06}.run"));
        let at = |e: std::io::Error| OutputError::file(&path, e);
        let mut w = BufWriter::new(File::create(&path).map_err(at)?);
        w.write_all(RUN_MAGIC).map_err(at)?;
        w.write_all(&[RUN_VERSION]).map_err(at)?;
        for (owner, sizes) in &entries {
            w.write_all(&(owner.len() as u32).to_le_bytes())
                .map_err(at)?;
            w.write_all(owner).map_err(at)?;
            write_sizes(sizes, &mut w).map_err(at)?;
        }
        w.flush().map_err(at)?;
        self.runs.push(path);
        self.owner_bytes = 0;
        Ok(())
    }
}

impl PartSink for StatsSink {
    type Done = PartStats;

    fn leaves(&mut self, leaves: &[Arc<Node>], _: Option<&[Hash]>) -> Result<(), OutputError> {
        for leaf in leaves {
            let Node::Leaf { height, reg, .. } = &**leaf else {
                continue;
            };
            self.leaf_depths[(MAX_HEIGHT - height) as usize] += 1;
            let p = reg.payload();
            let (k, v) = (p.key.len() as u64, p.value.len() as u64);
            let parts = p.key_parts();
            let part = |t: u16| {
                parts
                    .as_ref()
                    .and_then(|ps| ps.iter().find(|(pt, _)| *pt == t).map(|(_, v)| *v))
            };
            let kind = part(KEY_PART_KEY).map_or(UNREADABLE_KEY, register_kind);
            self.kinds.entry(kind).or_default().add(k, v);
            match part(KEY_PART_OWNER) {
                None => self.no_owner.add(k, v),
                Some(owner) => {
                    if let Some(s) = self.owners.get_mut(owner) {
                        s.add(k, v);
                    } else {
                        let mut s = Sizes::default();
                        s.add(k, v);
                        self.owners.insert(owner.into(), s);
                        self.owner_bytes += owner.len() + OWNER_ENTRY_OVERHEAD;
                        if self.owner_bytes >= self.owner_limit {
                            self.spill_owners()?;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn interior(
        &mut self,
        height: u16,
        _hash: &Hash,
        _children: [bool; 2],
    ) -> Result<(), OutputError> {
        self.interim_depths[(MAX_HEIGHT - height) as usize] += 1;
        Ok(())
    }

    fn finish(mut self) -> Result<PartStats, OutputError> {
        self.spill_owners()?;
        Ok(PartStats {
            kinds: self.kinds,
            no_owner: self.no_owner,
            runs: self.runs,
            leaf_depths: self.leaf_depths,
            interim_depths: self.interim_depths,
        })
    }
}

/// Everything `checkpoint stats` gathers but the owners, and the runs they are merged from.
pub struct CheckpointStats {
    pub info: StreamInfo,
    pub trie: TrieStats,
    /// Register kinds, most registers first (ties by name).
    pub kinds: Vec<(&'static str, Sizes)>,
    pub owners: OwnerMerge,
}

/// Gathers the stats of checkpoint `name` of `dir` (v6, one trie) with the streamed read,
/// the owner maps of each thread spilling into `spill_dir` past `owner_bytes` (all threads
/// together).
pub fn collect(
    dir: &FsPath,
    name: &str,
    walk: Walk,
    spill_dir: &FsPath,
    owner_bytes: usize,
) -> CpResult<CheckpointStats> {
    let spill = Arc::new(Spill::new(spill_dir));
    let threads = walk.threads.clamp(1, SUBTRIE_COUNT);
    let limit = owner_bytes / threads;
    let (info, parts) = stream_into(dir, name, walk, |_, _| {
        Ok(StatsSink::new(spill.clone(), limit))
    })?;
    let mut kinds: HashMap<&'static str, Sizes> = HashMap::new();
    let mut no_owner = Sizes::default();
    let mut runs = Vec::new();
    let mut leaf_depths = vec![0u64; DEPTHS];
    let mut interim_depths = vec![0u64; DEPTHS];
    for p in parts {
        for (k, s) in &p.kinds {
            kinds.entry(*k).or_default().merge(s);
        }
        no_owner.merge(&p.no_owner);
        runs.extend(p.runs);
        for d in 0..DEPTHS {
            leaf_depths[d] += p.leaf_depths[d];
            interim_depths[d] += p.interim_depths[d];
        }
    }
    for h in &info.top_interior_heights {
        interim_depths[(MAX_HEIGHT - h) as usize] += 1;
    }
    let (root, reg_count, reg_size) = *info
        .tries
        .last()
        .ok_or_else(|| CheckpointError::no_tries(&dir.join(name)))?;
    let mut total = Sizes::default();
    for s in kinds.values() {
        total.merge(s);
    }
    let max_depth = (0..DEPTHS)
        .rev()
        .find(|d| leaf_depths[*d] + interim_depths[*d] > 0)
        .unwrap_or(0) as u16;
    let trie = TrieStats {
        root,
        reg_count,
        reg_size,
        leaf_nodes: leaf_depths.iter().sum(),
        interim_nodes: interim_depths.iter().sum(),
        registers: info.registers,
        key_bytes: total.key_bytes,
        value_bytes: total.value_bytes,
        max_depth,
        leaf_depths,
        interim_depths,
    };
    let mut kinds: Vec<(&'static str, Sizes)> = kinds.into_iter().collect();
    kinds.sort_by(|a, b| b.1.registers.cmp(&a.1.registers).then(a.0.cmp(b.0)));
    let buffer = (owner_bytes / (2 * runs.len().max(1))).clamp(4 << 10, 256 << 10);
    let owners = OwnerMerge::open(runs, no_owner, buffer)
        .map_err(|m| CheckpointError::new(spill_dir, 0, "io", m.to_string()))?;
    Ok(CheckpointStats {
        info,
        trie,
        kinds,
        owners,
    })
}

/// An owner and its counts, as a run stores them.
type RunEntry = (Box<[u8]>, Sizes);
struct Run {
    path: PathBuf,
    r: BufReader<File>,
}

impl Run {
    fn next(&mut self) -> Result<Option<RunEntry>, OutputError> {
        let path = &self.path;
        let at = |e: std::io::Error| OutputError::file(path, e);
        let mut len = [0u8; 4];
        match self.r.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(at(e)),
        }
        let len = u32::from_le_bytes(len);
        if len == NO_OWNER {
            return Err(OutputError::Corrupt {
                path: self.path.clone(),
                what: "unexpected record",
            });
        }
        let mut owner = vec![0u8; len as usize];
        self.r.read_exact(&mut owner).map_err(at)?;
        let sizes = read_sizes(&mut self.r).map_err(at)?;
        Ok(Some((owner.into_boxed_slice(), sizes)))
    }
}

/// The owners' counts in owner byte order (registers without an owner part first), merged
/// from the spilled runs, which are removed when this is dropped.
pub struct OwnerMerge {
    runs: Vec<Run>,
    heads: Vec<Option<Sizes>>,
    heap: BinaryHeap<Reverse<(Box<[u8]>, usize)>>,
    no_owner: Option<Sizes>,
    paths: Vec<PathBuf>,
}

impl OwnerMerge {
    fn open(
        paths: Vec<PathBuf>,
        no_owner: Sizes,
        buffer: usize,
    ) -> Result<OwnerMerge, OutputError> {
        let mut m = OwnerMerge {
            runs: Vec::with_capacity(paths.len()),
            heads: vec![None; paths.len()],
            heap: BinaryHeap::with_capacity(paths.len()),
            no_owner: (no_owner.registers > 0).then_some(no_owner),
            paths: paths.clone(),
        };
        for (i, path) in paths.into_iter().enumerate() {
            let at = |e: std::io::Error| OutputError::file(&path, e);
            let mut r = BufReader::with_capacity(buffer, File::open(&path).map_err(at)?);
            let mut head = [0u8; 9];
            r.read_exact(&mut head).map_err(at)?;
            if &head[..8] != RUN_MAGIC || head[8] != RUN_VERSION {
                return Err(OutputError::Corrupt {
                    path,
                    what: "not an owner run file",
                });
            }
            m.runs.push(Run { path, r });
            m.refill(i)?;
        }
        Ok(m)
    }

    fn refill(&mut self, i: usize) -> Result<(), OutputError> {
        if let Some((owner, sizes)) = self.runs[i].next()? {
            self.heads[i] = Some(sizes);
            self.heap.push(Reverse((owner, i)));
        }
        Ok(())
    }

    /// The next owner and its counts.
    pub fn next_owner(&mut self) -> Result<Option<OwnerRow>, OutputError> {
        if let Some(s) = self.no_owner.take() {
            return Ok(Some((None, s)));
        }
        let Some(Reverse((owner, i))) = self.heap.pop() else {
            return Ok(None);
        };
        let mut acc = self.heads[i].take().expect("a head per heap entry");
        self.refill(i)?;
        while let Some(Reverse((next, _))) = self.heap.peek() {
            if *next != owner {
                break;
            }
            let Some(Reverse((_, j))) = self.heap.pop() else {
                break;
            };
            acc.merge(&self.heads[j].take().expect("a head per heap entry"));
            self.refill(j)?;
        }
        Ok(Some((Some(owner), acc)))
    }

    /// Up to `rows` owners.
    pub fn next_rows(&mut self, rows: usize) -> Result<Vec<OwnerRow>, OutputError> {
        let mut out = Vec::with_capacity(rows.min(1 << 16));
        while out.len() < rows {
            match self.next_owner()? {
                Some(o) => out.push(o),
                None => break,
            }
        }
        Ok(out)
    }
}

impl Drop for OwnerMerge {
    fn drop(&mut self) {
        for p in &self.paths {
            let _ = std::fs::remove_file(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::checkpoint::{load, write_tries, Verify};
    use crate::flow::hash::{empty_root, Path};
    use crate::flow::mtrie::{Forest, Trie};
    use crate::flow::record::tests::payload;
    use crate::flow::record::{Payload, TrieUpdate};
    use std::collections::BTreeMap;

    fn tmp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rechain-cpst-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("spill")).unwrap();
        d
    }

    const KEYS: [&str; 8] = [
        "a.s", "storage", "code.Foo", "sn_1", "x", "apk_0", "$", "uuid",
    ];

    /// 600 registers of 37 owners, keys of several kinds.
    fn trie() -> Trie {
        let mut f = Forest::new(10, 1);
        let mut paths = Vec::new();
        let mut payloads: Vec<Arc<Payload>> = Vec::new();
        for i in 0u32..600 {
            let mut p = [0u8; 32];
            p[..4].copy_from_slice(&(i.wrapping_mul(2_654_435_761)).to_be_bytes());
            p[31] = i as u8;
            paths.push(Path(p));
            let key = format!("{}{i}", KEYS[i as usize % KEYS.len()]);
            let key = if i % 8 == 1 { "storage".into() } else { key };
            payloads.push(payload(
                &format!("owner{}", i % 37),
                &key,
                &vec![7u8; 1 + (i as usize % 50)],
            ));
        }
        let u = TrieUpdate {
            root: empty_root(),
            paths,
            payloads,
        };
        let root = f.update(&u).unwrap().root;
        f.get(&root).unwrap().clone()
    }

    fn walk() -> Walk {
        Walk {
            threads: 3,
            verify: Verify::Full,
            batch_bytes: 1 << 10,
        }
    }

    /// Counts from the in-memory load (a whole trie walk), the oracle of the streamed ones.
    fn walk_counts(n: &Node, depth: usize, leaves: &mut [u64], interim: &mut [u64]) {
        match n {
            Node::Leaf { .. } => leaves[depth] += 1,
            Node::Interior { left, right, .. } => {
                interim[depth] += 1;
                for c in [left, right].into_iter().flatten() {
                    walk_counts(c, depth + 1, leaves, interim);
                }
            }
            Node::Paged { .. } => unreachable!("an in-memory load has no paged nodes"),
        }
    }

    #[test]
    fn kinds_follow_flow_go() {
        assert_eq!(
            register_kind(b"$\x00\x00\x00\x00\x00\x00\x00\x01"),
            "atree slab"
        );
        assert_eq!(register_kind(b"storage"), "domain storage");
        assert_eq!(register_kind(b"public"), "domain public");
        assert_eq!(register_kind(b"public_key_3"), "legacy public key");
        assert_eq!(register_kind(b"a.s"), "account status");
        assert_eq!(register_kind(b"uuid"), "uuid generator state");
        assert_eq!(register_kind(b"uuid_2"), "uuid generator state");
        assert_eq!(register_kind(b"uuidx"), "others");
        assert_eq!(register_kind(b"code.Foo"), "contract content");
        assert_eq!(register_kind(b"pk_b0"), "batch public key");
        assert_eq!(
            register_kind(b"BlockHashListBucket7"),
            "block hash list bucket"
        );
        assert_eq!(register_kind(b""), "others");
    }

    #[test]
    fn streamed_stats_equal_a_walk_of_the_loaded_trie() {
        let dir = tmp("same");
        let name = "checkpoint.00000001";
        write_tries(&[trie()], &dir, name, 1).unwrap();
        let loaded = load(&dir, name, 1, Verify::Full).unwrap();
        let t = &loaded.tries[0];
        let (mut leaves, mut interim) = (vec![0u64; DEPTHS], vec![0u64; DEPTHS]);
        if let Some(root) = &t.root {
            walk_counts(root, 0, &mut leaves, &mut interim);
        }
        let mut owners: BTreeMap<Vec<u8>, Sizes> = BTreeMap::new();
        let mut kinds: BTreeMap<&str, Sizes> = BTreeMap::new();
        for reg in t.leaves().next_chunk(usize::MAX).unwrap() {
            let p = reg.payload();
            let (k, v) = (p.key.len() as u64, p.value.len() as u64);
            let owner = p.key_part(KEY_PART_OWNER).unwrap().to_vec();
            owners.entry(owner).or_default().add(k, v);
            let kind = register_kind(p.key_part(KEY_PART_KEY).unwrap());
            kinds.entry(kind).or_default().add(k, v);
        }
        // A tiny owner budget: every part spills many runs.
        for owner_bytes in [1 << 20, 600] {
            let mut got = collect(&dir, name, walk(), &dir.join("spill"), owner_bytes).unwrap();
            assert_eq!(got.trie.root, t.root_hash());
            assert_eq!(got.trie.leaf_depths, leaves);
            assert_eq!(got.trie.interim_depths, interim);
            assert_eq!(got.trie.leaf_nodes, 600);
            assert_eq!(
                got.trie.max_depth as usize,
                (0..DEPTHS).rev().find(|d| leaves[*d] > 0).unwrap()
            );
            let want_kinds: BTreeMap<&str, Sizes> = got.kinds.iter().copied().collect();
            assert_eq!(want_kinds, kinds);
            let mut merged = BTreeMap::new();
            while let Some((o, s)) = got.owners.next_owner().unwrap() {
                assert!(
                    merged.insert(o.unwrap().to_vec(), s).is_none(),
                    "owner twice"
                );
            }
            assert_eq!(merged, owners);
            drop(got);
            assert_eq!(std::fs::read_dir(dir.join("spill")).unwrap().count(), 0);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_truncated_part_is_an_error_naming_it() {
        let dir = tmp("cut");
        let name = "checkpoint.00000001";
        write_tries(&[trie()], &dir, name, 1).unwrap();
        let part = dir.join(crate::flow::checkpoint::part_name(name, 5));
        let good = std::fs::read(&part).unwrap();
        std::fs::write(&part, &good[..good.len() / 2]).unwrap();
        let e = collect(&dir, name, walk(), &dir.join("spill"), 1 << 20)
            .err()
            .unwrap();
        assert!(e
            .file
            .ends_with(&crate::flow::checkpoint::part_name(name, 5)));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
