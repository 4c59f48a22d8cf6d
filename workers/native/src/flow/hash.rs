//! Hashing of Flow's MTrie (spec §4.1; flow-go `ledger/common/hash/hash.go`, `ledger/trie.go`).
//!
//! ```text
//! HashLeaf(path, value) = SHA3-256(path[32] || value)
//! HashInterNode(a, b)   = SHA3-256(a[32] || b[32])
//! D[0]   = SHA3-256("default:")        D[h] = HashInterNode(D[h-1], D[h-1])   (h = 1..=256)
//! empty trie root = D[256]
//! ComputeCompactValue(path, value, h): D[h] if value is empty, else HashLeaf(path, value)
//!   hashed up h levels, the sibling at level k-1 being D[k-1], on the side given by
//!   bit(path, 256 - k) (1 = the leaf is the right child).
//! ```
//!
//! SHA3-256 is FIPS 202 (domain byte 0x06, rate 136) over the Keccak-f[1600] permutation from
//! the `keccak` crate; the 64-byte interior hash, the hot path, is one permutation.

use super::keccak::{chains, digests_into, sponges, Backend, RATE};
use std::sync::OnceLock;

/// A 32-byte SHA3-256 digest: node hash, root hash (state commitment).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Hash(pub [u8; 32]);

impl Hash {
    pub fn to_hex(&self) -> String {
        super::to_hex(&self.0)
    }

    pub fn from_hex(s: &str) -> Option<Hash> {
        let v = super::from_hex(s)?;
        Some(Hash(v.try_into().ok()?))
    }
}

impl std::fmt::Debug for Hash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Hash({})", self.to_hex())
    }
}

/// A 32-byte register path. Bit `i` (0..256) is bit `7 - i % 8` of byte `i / 8` (MSB first);
/// bit 0 chooses the root's child, 0 = left.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
#[repr(transparent)] // a register's bytes are borrowed as its `Path` (`Register::path`)
pub struct Path(pub [u8; 32]);

impl Path {
    #[inline]
    pub fn bit(&self, i: usize) -> u8 {
        (self.0[i >> 3] >> (7 - (i & 7))) & 1
    }

    pub fn to_hex(&self) -> String {
        super::to_hex(&self.0)
    }

    pub fn from_hex(s: &str) -> Option<Path> {
        let v = super::from_hex(s)?;
        Some(Path(v.try_into().ok()?))
    }
}

impl std::fmt::Debug for Path {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Path({})", self.to_hex())
    }
}

#[inline]
fn absorb_block(state: &mut [u64; 25], block: &[u8]) {
    for (lane, chunk) in state.iter_mut().zip(block.chunks_exact(8)) {
        *lane ^= u64::from_le_bytes(chunk.try_into().expect("8-byte chunk"));
    }
    keccak::f1600(state);
}

#[inline]
fn squeeze(state: &[u64; 25]) -> Hash {
    let mut out = [0u8; 32];
    for (i, lane) in state.iter().take(4).enumerate() {
        out[8 * i..8 * i + 8].copy_from_slice(&lane.to_le_bytes());
    }
    Hash(out)
}

/// SHA3-256 of the concatenation of `parts`.
pub fn sha3_256_parts(parts: &[&[u8]]) -> Hash {
    let mut state = [0u64; 25];
    let mut block = [0u8; RATE];
    let mut fill = 0usize;
    for part in parts {
        let mut data = *part;
        while !data.is_empty() {
            let take = (RATE - fill).min(data.len());
            block[fill..fill + take].copy_from_slice(&data[..take]);
            fill += take;
            data = &data[take..];
            if fill == RATE {
                absorb_block(&mut state, &block);
                fill = 0;
            }
        }
    }
    block[fill..].fill(0);
    block[fill] ^= 0x06;
    block[RATE - 1] ^= 0x80;
    absorb_block(&mut state, &block);
    squeeze(&state)
}

pub fn sha3_256(data: &[u8]) -> Hash {
    sha3_256_parts(&[data])
}

/// `HashInterNode(a, b)`: one Keccak permutation (64 bytes + padding fit in one block).
#[inline]
pub fn hash_inter(a: &Hash, b: &Hash) -> Hash {
    let mut state = [0u64; 25];
    for i in 0..4 {
        state[i] = u64::from_le_bytes(a.0[8 * i..8 * i + 8].try_into().expect("8 bytes"));
        state[4 + i] = u64::from_le_bytes(b.0[8 * i..8 * i + 8].try_into().expect("8 bytes"));
    }
    state[8] ^= 0x06;
    state[RATE / 8 - 1] ^= 0x80 << 56;
    keccak::f1600(&mut state);
    squeeze(&state)
}

/// `HashLeaf(path, value)`.
pub fn hash_leaf(path: &Path, value: &[u8]) -> Hash {
    sha3_256_parts(&[&path.0, value])
}

/// Maximum node height (a root): 256.
pub const MAX_HEIGHT: u16 = 256;

fn default_hashes() -> &'static [Hash; 257] {
    static TABLE: OnceLock<[Hash; 257]> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = [Hash::default(); 257];
        t[0] = sha3_256(b"default:");
        for h in 1..257 {
            t[h] = hash_inter(&t[h - 1], &t[h - 1]);
        }
        t
    })
}

/// `D[height]`, the hash of an empty subtree of that height. Heights above 256 saturate.
#[inline]
pub fn default_hash(height: u16) -> Hash {
    default_hashes()[(height as usize).min(256)]
}

/// Root hash of the empty trie, `D[256]`.
pub fn empty_root() -> Hash {
    default_hash(MAX_HEIGHT)
}

/// `ComputeCompactValue(path, value, height)`: hash of a leaf stored at `height`.
pub fn compact_value(path: &Path, value: &[u8], height: u16) -> Hash {
    if value.is_empty() {
        return default_hash(height);
    }
    let d = default_hashes();
    let mut out = hash_leaf(path, value);
    for h in 1..=(height.min(MAX_HEIGHT) as usize) {
        out = if path.bit(256 - h) == 1 {
            hash_inter(&d[h - 1], &out)
        } else {
            hash_inter(&out, &d[h - 1])
        };
    }
    out
}

/// One compact leaf hash to compute: `compact_value(path, value, height)`.
#[derive(Clone, Copy, Debug)]
pub struct LeafJob<'a> {
    pub path: &'a Path,
    pub value: &'a [u8],
    pub height: u16,
}

fn default_words() -> &'static [[u64; 4]; 257] {
    static TABLE: OnceLock<[[u64; 4]; 257]> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = [[0u64; 4]; 257];
        for (h, w) in t.iter_mut().enumerate() {
            *w = words(&default_hash(h as u16));
        }
        t
    })
}

#[inline]
fn words(h: &Hash) -> [u64; 4] {
    std::array::from_fn(|i| u64::from_le_bytes(h.0[8 * i..8 * i + 8].try_into().expect("8")))
}

#[inline]
fn from_words(w: &[u64; 4]) -> Hash {
    let mut out = [0u8; 32];
    for (i, x) in w.iter().enumerate() {
        out[8 * i..8 * i + 8].copy_from_slice(&x.to_le_bytes());
    }
    Hash(out)
}

/// `hash_inter(left, right)` of every pair, in order: one permutation each, four (AVX2) or
/// eight (AVX-512) at a time on SIMD lanes.
pub fn hash_inters(pairs: &[(Hash, Hash)]) -> Vec<Hash> {
    hash_inters_on(Backend::detect(), pairs)
}

/// [`hash_inters`] on a given back end (the tests compare them).
pub fn hash_inters_on(backend: Backend, pairs: &[(Hash, Hash)]) -> Vec<Hash> {
    let lanes = backend.lanes();
    let mut out = Vec::with_capacity(pairs.len());
    let whole = if lanes == 1 {
        0
    } else {
        pairs.len() - pairs.len() % lanes
    };
    let mut msgs = vec![[0u64; RATE / 8]; lanes];
    let mut result = vec![[0u64; 4]; lanes];
    for g in pairs[..whole].chunks_exact(lanes) {
        for (m, (a, b)) in msgs.iter_mut().zip(g) {
            m[..4].copy_from_slice(&words(a));
            m[4..8].copy_from_slice(&words(b));
            m[8] = 0x06;
            m[RATE / 8 - 1] = 0x80 << 56;
        }
        let refs: Vec<&[u64]> = msgs.iter().map(|m| &m[..]).collect();
        if sponges(backend, &refs, &[1; 8][..lanes], &mut result) {
            out.extend(result.iter().map(from_words));
        } else {
            out.extend(g.iter().map(|(a, b)| hash_inter(a, b)));
        }
    }
    out.extend(pairs[whole..].iter().map(|(a, b)| hash_inter(a, b)));
    out
}

/// `HashLeaf(path, value)` of every pair, in order, four (AVX2) or eight (AVX-512) at a time
/// on SIMD lanes (see [`digests_into`]).
pub fn hash_leaves(leaves: &[(&Path, &[u8])]) -> Vec<Hash> {
    hash_leaves_on(Backend::detect(), leaves)
}

/// [`hash_leaves`] on a given back end (the tests compare them).
pub fn hash_leaves_on(backend: Backend, leaves: &[(&Path, &[u8])]) -> Vec<Hash> {
    // `HashLeaf` is SHA3-256 of the path followed by the value.
    let mut joined = Vec::with_capacity(leaves.iter().map(|(_, v)| 32 + v.len()).sum());
    let mut ends = Vec::with_capacity(leaves.len());
    for (p, v) in leaves {
        joined.extend_from_slice(&p.0);
        joined.extend_from_slice(v);
        ends.push(joined.len());
    }
    let mut start = 0;
    let msgs: Vec<&[u8]> = ends
        .iter()
        .map(|&end| {
            let m = &joined[start..end];
            start = end;
            m
        })
        .collect();
    let mut out = Vec::with_capacity(leaves.len());
    let scalar = |m: &[u8]| sha3_256(m).0;
    digests_into(backend, 0x06, &msgs, scalar, &mut Vec::new(), &mut out);
    out.into_iter().map(Hash).collect()
}

/// `compact_value` of every job, in order. The chains (up to 256 permutations each) are
/// independent, so they run four (AVX2) or eight (AVX-512) at a time on SIMD lanes.
pub fn compact_values(jobs: &[LeafJob<'_>]) -> Vec<Hash> {
    compact_values_on(Backend::detect(), jobs)
}

/// [`compact_values`] on a given back end (the tests compare them).
pub fn compact_values_on(backend: Backend, jobs: &[LeafJob<'_>]) -> Vec<Hash> {
    let mut starts = hash_leaves_on(
        backend,
        &jobs
            .iter()
            .filter(|j| !j.value.is_empty())
            .map(|j| (j.path, j.value))
            .collect::<Vec<_>>(),
    )
    .into_iter();
    let leaf_hashes: Vec<Hash> = jobs
        .iter()
        .map(|j| {
            if j.value.is_empty() {
                Hash::default()
            } else {
                starts.next().expect("one HashLeaf per non-empty value")
            }
        })
        .collect();
    compact_values_from_on(backend, jobs, &leaf_hashes)
}

/// [`compact_values`] of jobs whose `HashLeaf(path, value)` is already known: `leaf_hashes[i]`
/// is job `i`'s (not read for an empty value).
pub fn compact_values_from(jobs: &[LeafJob<'_>], leaf_hashes: &[Hash]) -> Vec<Hash> {
    compact_values_from_on(Backend::detect(), jobs, leaf_hashes)
}

fn compact_values_from_on(
    backend: Backend,
    jobs: &[LeafJob<'_>],
    leaf_hashes: &[Hash],
) -> Vec<Hash> {
    assert_eq!(jobs.len(), leaf_hashes.len(), "one HashLeaf per job");
    let mut out: Vec<Hash> = Vec::with_capacity(jobs.len());
    // Chains still to run: (height, job index), longest first so that a group of four
    // wastes few steps on lanes that are already done.
    let mut pending: Vec<(u16, usize)> = Vec::new();
    for (i, (j, start)) in jobs.iter().zip(leaf_hashes).enumerate() {
        if j.value.is_empty() {
            out.push(default_hash(j.height));
        } else {
            out.push(*start);
            if j.height > 0 {
                pending.push((j.height.min(MAX_HEIGHT), i));
            }
        }
    }
    pending.sort_unstable_by(|a, b| b.cmp(a));
    let defaults = default_words();
    let lanes = backend.lanes();
    let mut result = vec![[0u64; 4]; lanes];
    for g in pending.chunks(lanes) {
        // A short last group repeats its first chain in the idle lanes.
        let pick = |k: usize| g[if k < g.len() { k } else { 0 }];
        let start: Vec<[u64; 4]> = (0..lanes).map(|k| words(&out[pick(k).1])).collect();
        let heights: Vec<u16> = (0..lanes).map(|k| pick(k).0).collect();
        let paths: Vec<[u8; 32]> = (0..lanes).map(|k| jobs[pick(k).1].path.0).collect();
        if chains(backend, &start, &heights, &paths, defaults, &mut result) {
            for (k, &(_, i)) in g.iter().enumerate() {
                out[i] = from_words(&result[k]);
            }
        } else {
            for &(_, i) in g {
                out[i] = compact_value(jobs[i].path, jobs[i].value, jobs[i].height);
            }
        }
    }
    out
}

/// Keccak-f[1600] permutations `compact_value(path, value, height)` costs: the sponge blocks of
/// `HashLeaf` (32-byte path + value + padding, 136-byte rate) and one per level; none for an
/// empty value (a default hash, from the table).
pub fn compact_value_permutations(value_len: usize, height: u16) -> u64 {
    if value_len == 0 {
        return 0;
    }
    ((32 + value_len) / RATE + 1) as u64 + u64::from(height.min(MAX_HEIGHT))
}

/// What [`chain_throughput`] measured: the multi-lane compact-leaf chains, one stream per
/// thread, all threads at once.
#[derive(Debug, Clone, Copy)]
pub struct Throughput {
    pub backend: Backend,
    pub threads: usize,
    pub permutations: u64,
    pub seconds: f64,
}

impl Throughput {
    pub fn per_second(&self) -> f64 {
        self.permutations as f64 / self.seconds.max(1e-9)
    }
}

/// Runs height-256 compact-leaf chains (the checkpoint verifier's hot loop, same code) on
/// `threads` threads, `permutations_per_thread` each, and times the whole: this machine's
/// multi-lane keccak rate, the floor under any reader that recomputes every hash.
pub fn chain_throughput(threads: usize, permutations_per_thread: u64) -> Throughput {
    let backend = Backend::detect();
    let lanes = backend.lanes();
    let threads = threads.max(1);
    let groups = permutations_per_thread.div_ceil(256 * lanes as u64).max(1);
    let t0 = std::time::Instant::now();
    let done: u64 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    let defaults = default_words();
                    let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ t as u64;
                    let mut start: Vec<[u64; 4]> = vec![[0; 4]; lanes];
                    let mut paths: Vec<[u8; 32]> = vec![[0; 32]; lanes];
                    let heights = vec![MAX_HEIGHT; lanes];
                    let mut out = vec![[0u64; 4]; lanes];
                    for (k, p) in paths.iter_mut().enumerate() {
                        for (i, b) in p.iter_mut().enumerate() {
                            seed = seed.rotate_left(9) ^ (k * 31 + i) as u64;
                            *b = seed as u8;
                        }
                    }
                    let mut n = 0u64;
                    for g in 0..groups {
                        // Each group starts from the last one's output (no work to skip).
                        for (k, s) in start.iter_mut().enumerate() {
                            s[0] ^= g ^ k as u64;
                        }
                        if !chains(backend, &start, &heights, &paths, defaults, &mut out) {
                            let mut h = from_words(&start[0]);
                            for level in 1..=MAX_HEIGHT as usize {
                                h = hash_inter(&h, &default_hash(level as u16 - 1));
                            }
                            out[0] = words(&h);
                        }
                        start.copy_from_slice(&out);
                        n += 256 * lanes as u64;
                    }
                    std::hint::black_box(&start);
                    n
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("hash thread"))
            .sum()
    });
    Throughput {
        backend,
        threads,
        permutations: done,
        seconds: t0.elapsed().as_secs_f64(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(s: &str) -> Hash {
        Hash::from_hex(s).unwrap()
    }

    fn p(s: &str) -> Path {
        Path::from_hex(s).unwrap()
    }

    /// Every keccak back end this CPU can run (the scalar one always).
    fn backends_here() -> Vec<Backend> {
        let mut backends = Backend::available();
        backends.push(Backend::detect());
        backends
    }
    #[test]
    fn sha3_known_answers() {
        assert_eq!(
            sha3_256(b""),
            h("a7ffc6f8bf1ed76651c14756a061d662f580ff4de43b49fa82d80a4b80f8434a")
        );
        assert_eq!(
            sha3_256(b"abc"),
            h("3a985da74fe225b2045c172d6bd390bd855f086e3e9d525b46bfe24511431532")
        );
        // Inputs around the rate boundary must agree with the one-shot split across parts.
        for n in [135usize, 136, 137, 271, 272, 273, 1000] {
            let data: Vec<u8> = (0..n).map(|i| (i * 7) as u8).collect();
            let (a, b) = data.split_at(n / 3);
            assert_eq!(sha3_256(&data), sha3_256_parts(&[a, b]), "n = {n}");
        }
        // 200 x 0xa3, the FIPS 202 example message of 1600 bits.
        assert_eq!(
            sha3_256(&[0xa3; 200]),
            h("79f38adec5c20307a98ef76e8324afbfd46cfd81b22e3973c65fa1bd9de31787")
        );
    }

    #[test]
    fn inter_node_matches_generic_sponge() {
        let a = sha3_256(b"a");
        let b = sha3_256(b"b");
        assert_eq!(hash_inter(&a, &b), sha3_256_parts(&[&a.0, &b.0]));
    }

    #[test]
    fn default_hashes_spec_6_1() {
        assert_eq!(
            default_hash(0),
            h("18373b4b038cbbf37456c33941a7e346e752acd8fafa896933d4859002b62619")
        );
        assert_eq!(
            default_hash(1),
            h("106e17c0ad77b4566cfd3f169ab5015d2c745c2d439e2e40ff507e2b38024bb8")
        );
        assert_eq!(
            empty_root(),
            h("568f4ec740fe3b5de88034cb7b1fbddb41548b068f31aebc8ae9189e429c5749")
        );
    }

    #[test]
    fn leaf_hash_spec_6_1() {
        let p1 = p("0000000000000000000000000000000000000000000000000000000000000001");
        assert_eq!(
            hash_leaf(&p1, &[1, 2, 3]),
            h("16ebcf9c8205130a002f80685e1da1bde2bc036823c15b3a07161095462565cc")
        );
        // A trie holding only p1 is the compact leaf at height 256 (vector U1).
        assert_eq!(
            compact_value(&p1, &[1, 2, 3], 256),
            h("e31b266ccd2d953edd950c40e5548de9d9b34e1d9589ff37920a212a908a0c0e")
        );
        assert_eq!(compact_value(&p1, &[], 17), default_hash(17));
        assert_eq!(
            compact_value(&p1, &[1, 2, 3], 0),
            hash_leaf(&p1, &[1, 2, 3])
        );
    }

    #[test]
    fn batched_compact_values_match_one_by_one() {
        let mut x = 99u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut paths = Vec::new();
        let mut values = Vec::new();
        let mut heights = Vec::new();
        for i in 0..23 {
            let mut p = [0u8; 32];
            p.iter_mut().for_each(|b| *b = next() as u8);
            paths.push(Path(p));
            // Empty values, height 0, 256 and lengths across the sponge rate.
            values.push(if i % 7 == 3 {
                vec![]
            } else {
                vec![i as u8; (next() % 300) as usize]
            });
            heights.push(match i % 5 {
                0 => 0,
                1 => 256,
                _ => (next() % 257) as u16,
            });
        }
        let jobs: Vec<LeafJob> = (0..paths.len())
            .map(|i| LeafJob {
                path: &paths[i],
                value: &values[i],
                height: heights[i],
            })
            .collect();
        let want: Vec<Hash> = jobs
            .iter()
            .map(|j| compact_value(j.path, j.value, j.height))
            .collect();
        for b in backends_here() {
            for n in 0..jobs.len() {
                assert_eq!(
                    compact_values_on(b, &jobs[..n]),
                    want[..n],
                    "{b:?}, {n} jobs"
                );
            }
        }
        // The spec vector U1 through the batch path.
        let p1 = p("0000000000000000000000000000000000000000000000000000000000000001");
        let v = [1u8, 2, 3];
        let four = [LeafJob {
            path: &p1,
            value: &v,
            height: 256,
        }; 4];
        assert!(compact_values(&four)
            .iter()
            .all(|x| *x == h("e31b266ccd2d953edd950c40e5548de9d9b34e1d9589ff37920a212a908a0c0e")));
    }

    #[test]
    fn batched_interior_hashes_match_one_by_one() {
        let pairs: Vec<(Hash, Hash)> = (0..37u8)
            .map(|i| (Hash([i; 32]), Hash([i.wrapping_mul(7) ^ 0x5a; 32])))
            .collect();
        let want: Vec<Hash> = pairs.iter().map(|(a, b)| hash_inter(a, b)).collect();
        for b in backends_here() {
            for n in [0, 1, 3, 4, 5, 8, 9, pairs.len()] {
                assert_eq!(
                    hash_inters_on(b, &pairs[..n]),
                    want[..n],
                    "{b:?}, {n} pairs"
                );
            }
        }
    }

    #[test]
    fn batched_leaf_hashes_match_one_by_one() {
        let mut x = 5u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        // Lengths around the block boundaries (103/104 bytes of value fill one block's 135/136
        // bytes with the path), several of each so that full SIMD groups form.
        let mut leaves = Vec::new();
        for i in 0..90usize {
            let mut p = [0u8; 32];
            p.iter_mut().for_each(|b| *b = next() as u8);
            let len = [0, 1, 103, 104, 105, 239, 240, 300][i % 8] + (i / 40);
            leaves.push((Path(p), vec![(i * 13) as u8; len]));
        }
        let pairs: Vec<(&Path, &[u8])> = leaves.iter().map(|(p, v)| (p, v.as_slice())).collect();
        let want: Vec<Hash> = pairs.iter().map(|(p, v)| hash_leaf(p, v)).collect();
        for b in backends_here() {
            for n in [0, 1, 7, 8, 9, 33, pairs.len()] {
                assert_eq!(
                    hash_leaves_on(b, &pairs[..n]),
                    want[..n],
                    "{b:?}, {n} leaves"
                );
            }
        }
        // The spec vector through the batch path.
        let p1 = p("0000000000000000000000000000000000000000000000000000000000000001");
        let eight = [(&p1, &[1u8, 2, 3][..]); 8];
        assert!(hash_leaves(&eight)
            .iter()
            .all(|x| *x == h("16ebcf9c8205130a002f80685e1da1bde2bc036823c15b3a07161095462565cc")));
    }

    #[test]
    fn path_bits_msb_first() {
        let x = p("8000000000000000000000000000000000000000000000000000000000000001");
        assert_eq!(x.bit(0), 1);
        assert_eq!(x.bit(1), 0);
        assert_eq!(x.bit(255), 1);
        assert_eq!(x.bit(254), 0);
    }
}
