//! Deterministic LedgerWAL generator: `updates` TrieUpdates of `registers_per_update` writes
//! each (new registers, overwrites, deletes as empty values, duplicates within an update),
//! written with [`WalWriter`] into segment files `00000000`, `00000001`, ... of a folder.
//!
//! The workload is the one of the Go oracle (`tests/flow_go/gen.go`), draw for draw, so the
//! same `(updates, registers_per_update, seed, segment_size)` gives byte-identical segments
//! from flow-go's writer and from this one:
//!
//! ```text
//! PRNG: splitmix64, state = seed
//! per update, for j in 0..K: r = next() % 100
//!   known non-empty && r < 25 -> overwrite: known[next() % |known|], value()
//!   known non-empty && r < 35 -> delete:    known[next() % |known|], empty value
//!   j > 0 && r < 38           -> duplicate: this update's entry next() % j, value()
//!   otherwise                 -> new: owner = bytes(8), key = bytes(1 + next() % 32),
//!                                path = SHA3-256("/0/" owner "/2/" key), added to known, value()
//! value(): a = next(), b = next(); n = 1 + a % 6000 if b % 64 == 0 else 1 + a % 256; bytes(n)
//! bytes(n): one next() per 8 bytes, little-endian, the last one truncated
//! ```

use super::hash::{sha3_256_parts, Hash, Path};
use super::mtrie::{Forest, DEFAULT_CAPACITY};
use super::record::{encode_update, Payload, TrieUpdate, KEY_PART_KEY, KEY_PART_OWNER};
use super::wal::{list_segments, segment_name};
use super::writer::WalWriter;
use super::{ErrorKind, FlowError};
use std::path::Path as FsPath;
use std::sync::Arc;

pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let x = self.next_u64().to_le_bytes();
            let take = (n - out.len()).min(8);
            out.extend_from_slice(&x[..take]);
        }
        out
    }

    fn value(&mut self) -> Vec<u8> {
        let a = self.next_u64();
        let b = self.next_u64();
        let n = if b.is_multiple_of(64) {
            1 + a % 6000
        } else {
            1 + a % 256
        };
        self.bytes(n as usize)
    }
}

/// Pathfinder version 1 (`pathfinder.KeyToPath`): SHA3-256 of the key's canonical form,
/// `"/" + decimal(type) + "/" + value` per part.
pub fn key_to_path(parts: &[(u16, &[u8])]) -> Path {
    let mut canon = Vec::new();
    for (typ, value) in parts {
        canon.push(b'/');
        canon.extend_from_slice(typ.to_string().as_bytes());
        canon.push(b'/');
        canon.extend_from_slice(value);
    }
    Path(sha3_256_parts(&[&canon]).0)
}

#[derive(Clone)]
struct Register {
    path: Path,
    key: Arc<[u8]>,
}

/// The generator's workload, one update at a time.
pub struct Workload {
    rng: SplitMix64,
    known: Vec<Register>,
}

impl Workload {
    pub fn new(seed: u64) -> Self {
        Workload {
            rng: SplitMix64::new(seed),
            known: Vec::new(),
        }
    }

    /// Paths and payloads of the next update (`k` writes).
    pub fn next_update(&mut self, k: usize) -> (Vec<Path>, Vec<Arc<Payload>>) {
        let mut regs: Vec<Register> = Vec::with_capacity(k);
        let mut payloads = Vec::with_capacity(k);
        for j in 0..k {
            let r = self.rng.next_u64() % 100;
            let n = self.known.len() as u64;
            let (reg, value) = if n > 0 && r < 25 {
                let reg = self.known[(self.rng.next_u64() % n) as usize].clone();
                (reg, self.rng.value())
            } else if n > 0 && r < 35 {
                (
                    self.known[(self.rng.next_u64() % n) as usize].clone(),
                    Vec::new(),
                )
            } else if j > 0 && r < 38 {
                let reg = regs[(self.rng.next_u64() % j as u64) as usize].clone();
                (reg, self.rng.value())
            } else {
                let owner = self.rng.bytes(8);
                let key_len = 1 + (self.rng.next_u64() % 32) as usize;
                let key = self.rng.bytes(key_len);
                let parts: [(u16, &[u8]); 2] = [(KEY_PART_OWNER, &owner), (KEY_PART_KEY, &key)];
                let reg = Register {
                    path: key_to_path(&parts),
                    key: super::record::encode_key(&parts).into(),
                };
                self.known.push(reg.clone());
                (reg, self.rng.value())
            };
            payloads.push(Arc::new(Payload::new(&*reg.key, value)));
            regs.push(reg);
        }
        (regs.into_iter().map(|r| r.path).collect(), payloads)
    }
}

/// What a generation run produced.
#[derive(Debug, Clone)]
pub struct GenSummary {
    pub empty_root: Hash,
    /// Root after each update, in order.
    pub roots: Vec<Hash>,
    pub final_root: Hash,
    pub registers: u64,
    pub reg_size: u64,
    pub segments: Vec<String>,
    pub bytes: u64,
}

#[derive(Debug, Clone)]
pub struct GenConfig {
    pub updates: u64,
    pub registers_per_update: usize,
    pub seed: u64,
    pub segment_size: usize,
}

/// Writes the WAL into `outdir` (which must not hold segments yet) and applies every update to a
/// forest to report the roots.
pub fn generate(cfg: &GenConfig, outdir: &FsPath) -> Result<GenSummary, FlowError> {
    let config = |reason: String| FlowError::new(0, 0, ErrorKind::Config { reason });
    if cfg.registers_per_update == 0 {
        return Err(config("registers_per_update must be at least 1".into()));
    }
    std::fs::create_dir_all(outdir).map_err(|e| FlowError::io(0, "create output directory", &e))?;
    if !list_segments(outdir)?.is_empty() {
        return Err(config(format!(
            "{} already holds WAL segments",
            outdir.display()
        )));
    }
    let mut writer = WalWriter::create(outdir, cfg.segment_size, false)?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut forest = Forest::new(DEFAULT_CAPACITY, threads);
    let mut workload = Workload::new(cfg.seed);
    let empty = super::hash::empty_root();
    let mut root = empty;
    let mut roots = Vec::with_capacity(cfg.updates.min(1 << 24) as usize);
    for i in 0..cfg.updates {
        let (paths, payloads) = workload.next_update(cfg.registers_per_update);
        let u = TrieUpdate {
            root,
            paths,
            payloads,
        };
        let loc = writer.log(&encode_update(&u))?;
        root = forest
            .update(&u)
            .map_err(|kind| FlowError::new(loc.segment, loc.offset, kind))?
            .root;
        roots.push(root);
        debug_assert!(i < cfg.updates);
    }
    let bytes = writer.bytes_written();
    let last = writer.segment();
    writer.close()?;
    let trie = forest.get(&root).cloned().unwrap_or_default();
    Ok(GenSummary {
        empty_root: empty,
        roots,
        final_root: root,
        registers: trie.reg_count,
        reg_size: trie.reg_size,
        segments: (0..=last).map(segment_name).collect(),
        bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::record::{decode, WalRecord};
    use crate::flow::wal::Segment;

    #[test]
    fn splitmix_reference_values() {
        // Reference outputs of splitmix64 seeded with 1234567 (Vigna's reference code).
        let mut r = SplitMix64::new(1_234_567);
        assert_eq!(r.next_u64(), 6_457_827_717_110_365_317);
        assert_eq!(r.next_u64(), 3_203_168_211_198_807_973);
        assert_eq!(r.next_u64(), 9_817_491_932_198_370_423);
    }

    #[test]
    fn key_to_path_spec_6_5() {
        let cases = [
            (
                "owner1",
                "key1",
                "a2383358dbf8da8ace240cbf4db7805580d28e1c579b84157fe2a10636b44141",
            ),
            (
                "owner2",
                "key2",
                "fc6b6ef96e34b1d07c4b987d32f1452cdecb58fcb28cabb65a0c7727db2b0c54",
            ),
            (
                "owner3",
                "key3",
                "1d4782d696fed15c2b6ca954a537e71c1f75963ae08e642e5e38d290f91fc7a8",
            ),
        ];
        for (o, k, want) in cases {
            let p = key_to_path(&[(0, o.as_bytes()), (2, k.as_bytes())]);
            assert_eq!(p.to_hex(), want);
        }
    }

    #[test]
    fn generated_wal_replays_to_the_reported_roots() {
        let dir = std::env::temp_dir().join(format!("rechain-flow-gen-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cfg = GenConfig {
            updates: 120,
            registers_per_update: 8,
            seed: 7,
            segment_size: 32 * 1024,
        };
        let s = generate(&cfg, &dir).unwrap();
        assert_eq!(s.roots.len(), 120);
        assert!(s.segments.len() >= 3, "{:?}", s.segments);
        let mut forest = Forest::new(DEFAULT_CAPACITY, 1);
        let mut roots = Vec::new();
        let (mut deletes, mut dups) = (0, 0);
        for (n, p) in list_segments(&dir).unwrap() {
            let seg = Segment::open(&p, n).unwrap();
            let mut r = seg.reader();
            while let Some(rec) = r.next_record().unwrap() {
                let WalRecord::Update(u) = decode(&rec.data).unwrap() else {
                    panic!("only updates are generated")
                };
                deletes += u.payloads.iter().filter(|p| p.is_empty()).count();
                let applied = forest.update(&u).unwrap();
                dups += u.paths.len() - applied.paths;
                roots.push(applied.root);
            }
        }
        assert_eq!(roots, s.roots);
        assert!(
            deletes > 100 && dups > 10,
            "deletes {deletes}, duplicates {dups}"
        );
        assert_eq!(forest.get(&s.final_root).unwrap().reg_count, s.registers);
        // Same seed, same bytes; another seed, other bytes.
        let again = dir.with_extension("again");
        let _ = std::fs::remove_dir_all(&again);
        let s2 = generate(&cfg, &again).unwrap();
        assert_eq!(s2.roots, s.roots);
        for name in &s.segments {
            assert_eq!(
                std::fs::read(dir.join(name)).unwrap(),
                std::fs::read(again.join(name)).unwrap()
            );
        }
        assert!(
            generate(&cfg, &again).is_err(),
            "refuses a folder with segments"
        );
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::remove_dir_all(&again).unwrap();
    }
}
