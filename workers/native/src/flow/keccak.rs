//! Keccak-f[1600] on four or eight independent states at once (one state per 64-bit lane of an
//! AVX2 or AVX-512 register), for the MTrie's compact-leaf hash chains: a leaf stored at height
//! h needs h chained `HashInterNode` permutations, and the chains of different leaves are
//! independent.
//!
//! One round body, generic over the lane type, serves every back end: plain `u64` (used by the
//! tests, against the `keccak` crate's permutation), `__m256i` (AVX2, four leaves) and `__m512i`
//! (AVX-512F, eight leaves; rotations are one `vprolq`, and LLVM fuses the chi step into
//! `vpternlogq`). [`Backend::detect`] picks the best one the CPU has at run time.

/// Round constants of Keccak-f[1600] (FIPS 202 §3.2.5).
const RC: [u64; 24] = [
    0x0000_0000_0000_0001,
    0x0000_0000_0000_8082,
    0x8000_0000_0000_808a,
    0x8000_0000_8000_8000,
    0x0000_0000_0000_808b,
    0x0000_0000_8000_0001,
    0x8000_0000_8000_8081,
    0x8000_0000_0000_8009,
    0x0000_0000_0000_008a,
    0x0000_0000_0000_0088,
    0x0000_0000_8000_8009,
    0x0000_0000_8000_000a,
    0x0000_0000_8000_808b,
    0x8000_0000_0000_008b,
    0x8000_0000_0000_8089,
    0x8000_0000_0000_8003,
    0x8000_0000_0000_8002,
    0x8000_0000_0000_0080,
    0x0000_0000_0000_800a,
    0x8000_0000_8000_000a,
    0x8000_0000_8000_8081,
    0x8000_0000_0000_8080,
    0x0000_0000_8000_0001,
    0x8000_0000_8000_8008,
];

/// The operations the round needs from one lane (or a vector of lanes).
pub(crate) trait Lane: Copy {
    fn xor(self, o: Self) -> Self;
    /// `!self & o`
    fn andnot(self, o: Self) -> Self;
    /// Rotate left by `N` (`M` = 64 - `N`: stable Rust cannot compute it from `N`).
    fn rotl<const N: i32, const M: i32>(self) -> Self;
    fn splat(x: u64) -> Self;
}

impl Lane for u64 {
    #[inline(always)]
    fn xor(self, o: u64) -> u64 {
        self ^ o
    }
    #[inline(always)]
    fn andnot(self, o: u64) -> u64 {
        !self & o
    }
    #[inline(always)]
    fn rotl<const N: i32, const M: i32>(self) -> u64 {
        self.rotate_left(N as u32)
    }
    #[inline(always)]
    fn splat(x: u64) -> u64 {
        x
    }
}

/// Keccak-f[1600] on `a` (lanes indexed `x + 5y`), each round written out (constant rotations
/// and indices, so the state stays in registers as far as they go).
#[inline(always)]
pub(crate) fn permute<L: Lane>(a: &mut [L; 25]) {
    for rc in RC {
        // theta
        // (No closures here: they would be compiled without the caller's SIMD features.)
        macro_rules! col {
            ($x:literal) => {
                a[$x]
                    .xor(a[$x + 5])
                    .xor(a[$x + 10])
                    .xor(a[$x + 15])
                    .xor(a[$x + 20])
            };
        }
        let c = [col!(0), col!(1), col!(2), col!(3), col!(4)];
        let d = [
            c[4].xor(c[1].rotl::<1, 63>()),
            c[0].xor(c[2].rotl::<1, 63>()),
            c[1].xor(c[3].rotl::<1, 63>()),
            c[2].xor(c[4].rotl::<1, 63>()),
            c[3].xor(c[0].rotl::<1, 63>()),
        ];
        // rho and pi: lane x + 5y, rotated by its offset, moves to y + 5 * ((2x + 3y) % 5).
        let mut b = [L::splat(0); 25];
        macro_rules! rho_pi {
            ($($src:literal => $dst:literal by $n:literal, $m:literal;)*) => {
                $( b[$dst] = a[$src].xor(d[$src % 5]).rotl::<$n, $m>(); )*
            };
        }
        b[0] = a[0].xor(d[0]);
        rho_pi! {
            1 => 10 by 1, 63;    2 => 20 by 62, 2;    3 => 5 by 28, 36;    4 => 15 by 27, 37;
            5 => 16 by 36, 28;   6 => 1 by 44, 20;    7 => 11 by 6, 58;    8 => 21 by 55, 9;
            9 => 6 by 20, 44;    10 => 7 by 3, 61;    11 => 17 by 10, 54;  12 => 2 by 43, 21;
            13 => 12 by 25, 39;  14 => 22 by 39, 25;  15 => 23 by 41, 23;  16 => 8 by 45, 19;
            17 => 18 by 15, 49;  18 => 3 by 21, 43;   19 => 13 by 8, 56;   20 => 14 by 18, 46;
            21 => 24 by 2, 62;   22 => 9 by 61, 3;    23 => 19 by 56, 8;   24 => 4 by 14, 50;
        }
        // chi, row by row
        for y in 0..5 {
            let r = 5 * y;
            let row = [b[r], b[r + 1], b[r + 2], b[r + 3], b[r + 4]];
            a[r] = row[0].xor(row[1].andnot(row[2]));
            a[r + 1] = row[1].xor(row[2].andnot(row[3]));
            a[r + 2] = row[2].xor(row[3].andnot(row[4]));
            a[r + 3] = row[3].xor(row[4].andnot(row[0]));
            a[r + 4] = row[4].xor(row[0].andnot(row[1]));
        }
        // iota
        a[0] = a[0].xor(L::splat(rc));
    }
}

/// Which permutation code runs the 4-way chains.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// One state at a time through the `keccak` crate.
    Scalar,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

impl Backend {
    /// The fastest back end this CPU supports (checked once).
    pub fn detect() -> Backend {
        use std::sync::OnceLock;
        static B: OnceLock<Backend> = OnceLock::new();
        *B.get_or_init(|| {
            #[cfg(target_arch = "x86_64")]
            {
                if std::env::var_os("RECHAIN_KECCAK_SCALAR").is_some() {
                    return Backend::Scalar;
                }
                if is_x86_feature_detected!("avx512f") {
                    return Backend::Avx512;
                }
                if is_x86_feature_detected!("avx2") {
                    return Backend::Avx2;
                }
            }
            Backend::Scalar
        })
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod x86 {
    use super::Lane;
    use std::arch::x86_64::*;

    #[derive(Clone, Copy)]
    #[repr(transparent)]
    pub(crate) struct V(pub __m256i);

    // Safety of every `unsafe` here: these are only reached from functions compiled with
    // `target_feature(enable = "avx2")`, which callers enter after `Backend::detect`.
    impl Lane for V {
        #[inline(always)]
        fn xor(self, o: V) -> V {
            V(unsafe { _mm256_xor_si256(self.0, o.0) })
        }
        #[inline(always)]
        fn andnot(self, o: V) -> V {
            V(unsafe { _mm256_andnot_si256(self.0, o.0) })
        }
        #[inline(always)]
        fn rotl<const N: i32, const M: i32>(self) -> V {
            unsafe {
                V(_mm256_or_si256(
                    _mm256_slli_epi64::<N>(self.0),
                    _mm256_srli_epi64::<M>(self.0),
                ))
            }
        }
        #[inline(always)]
        fn splat(x: u64) -> V {
            V(unsafe { _mm256_set1_epi64x(x as i64) })
        }
    }

    /// Eight states, one per 64-bit lane of a 512-bit register (AVX-512F).
    #[derive(Clone, Copy)]
    #[repr(transparent)]
    pub(crate) struct V8(pub __m512i);

    // Safety: only reached from functions compiled with `target_feature(enable = "avx512f")`.
    impl Lane for V8 {
        #[inline(always)]
        fn xor(self, o: V8) -> V8 {
            V8(unsafe { _mm512_xor_si512(self.0, o.0) })
        }
        #[inline(always)]
        fn andnot(self, o: V8) -> V8 {
            V8(unsafe { _mm512_andnot_si512(self.0, o.0) })
        }
        #[inline(always)]
        fn rotl<const N: i32, const M: i32>(self) -> V8 {
            V8(unsafe { _mm512_rol_epi64::<N>(self.0) })
        }
        #[inline(always)]
        fn splat(x: u64) -> V8 {
            V8(unsafe { _mm512_set1_epi64(x as i64) })
        }
    }
}

/// The chains of eight leaves on AVX-512 (see `chains4_body`, of which this is the 8-lane
/// version: 512-bit registers, mask-register blends).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn chains8_avx512(
    start: &[[u64; 4]; 8],
    heights: &[u16; 8],
    paths: &[[u8; 32]; 8],
    defaults: &[[u64; 4]],
) -> [[u64; 4]; 8] {
    use std::arch::x86_64::*;
    use x86::V8;
    let mut result = *start;
    let mut out = [V8::splat(0); 4];
    for (i, o) in out.iter_mut().enumerate() {
        let mut lanes = [0u64; 8];
        for j in 0..8 {
            lanes[j] = start[j][i];
        }
        *o = V8(_mm512_loadu_si512(lanes.as_ptr().cast()));
    }
    let top = heights.iter().copied().max().unwrap_or(0) as usize;
    for h in 1..=top {
        // Bit 256 - h of the path (MSB first) is 1 when the leaf is the right child.
        let bit = 256 - h;
        let mut right: __mmask8 = 0;
        for (j, p) in paths.iter().enumerate() {
            right |= ((p[bit >> 3] >> (7 - (bit & 7))) & 1) << j;
        }
        let sibling = &defaults[h - 1];
        let mut s = [V8::splat(0); 25];
        for i in 0..4 {
            let d = _mm512_set1_epi64(sibling[i] as i64);
            // mask_blend takes the third operand where the mask is set.
            s[i] = V8(_mm512_mask_blend_epi64(right, out[i].0, d));
            s[4 + i] = V8(_mm512_mask_blend_epi64(right, d, out[i].0));
        }
        s[8] = V8::splat(0x06);
        s[16] = V8::splat(0x80 << 56);
        permute(&mut s);
        out.copy_from_slice(&s[..4]);
        if heights.iter().any(|&x| x as usize == h) {
            let mut words = [[0u64; 8]; 4];
            for (i, w) in words.iter_mut().enumerate() {
                _mm512_storeu_si512(w.as_mut_ptr().cast(), out[i].0);
            }
            for (j, r) in result.iter_mut().enumerate() {
                if heights[j] as usize == h {
                    for (i, w) in words.iter().enumerate() {
                        r[i] = w[j];
                    }
                }
            }
        }
    }
    result
}

/// One step of a compact-leaf chain for four leaves at once. `out[i]` holds word `i` of each
/// leaf's current hash (leaf `j` in lane `j`); `right` has all bits set in the lanes whose leaf
/// is the right child at this level; `sibling` is the default hash of the level below.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn chain_step(out: &mut [x86::V; 4], right: x86::V, sibling: &[u64; 4]) {
    use std::arch::x86_64::*;
    use x86::V;
    let mut s = [V::splat(0); 25];
    for i in 0..4 {
        let d = _mm256_set1_epi64x(sibling[i] as i64);
        // blendv takes the second operand where the mask is set.
        s[i] = V(_mm256_blendv_epi8(out[i].0, d, right.0));
        s[4 + i] = V(_mm256_blendv_epi8(d, out[i].0, right.0));
    }
    s[8] = V::splat(0x06);
    s[16] = V::splat(0x80 << 56);
    permute(&mut s);
    out.copy_from_slice(&s[..4]);
}

/// Runs the chains of four leaves: `start[j]` (words of the leaf hash) hashed up `heights[j]`
/// levels; at each level `paths[j]` says on which side leaf `j` is.
/// `defaults[h]` is `D[h]` as words. Returns each leaf's hash words at its own height.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn chains4_body(
    start: &[[u64; 4]; 4],
    heights: &[u16; 4],
    paths: &[[u8; 32]; 4],
    defaults: &[[u64; 4]],
) -> [[u64; 4]; 4] {
    use std::arch::x86_64::*;
    use x86::V;
    let mut result = *start;
    let mut out = [V::splat(0); 4];
    for (i, o) in out.iter_mut().enumerate() {
        *o = V(_mm256_set_epi64x(
            start[3][i] as i64,
            start[2][i] as i64,
            start[1][i] as i64,
            start[0][i] as i64,
        ));
    }
    let top = heights.iter().copied().max().unwrap_or(0) as usize;
    for h in 1..=top {
        // Bit 256 - h of the path (MSB first) is 1 when the leaf is the right child.
        let bit = 256 - h;
        let m = |j: usize| -(((paths[j][bit >> 3] >> (7 - (bit & 7))) & 1) as i64);
        let right = V(_mm256_set_epi64x(m(3), m(2), m(1), m(0)));
        chain_step(&mut out, right, &defaults[h - 1]);
        if heights.iter().any(|&x| x as usize == h) {
            let mut words = [[0u64; 4]; 4];
            for (i, w) in words.iter_mut().enumerate() {
                _mm256_storeu_si256(w.as_mut_ptr().cast(), out[i].0);
            }
            for (j, r) in result.iter_mut().enumerate() {
                if heights[j] as usize == h {
                    for (i, w) in words.iter().enumerate() {
                        r[i] = w[j];
                    }
                }
            }
        }
    }
    result
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn chains4_avx2(
    start: &[[u64; 4]; 4],
    heights: &[u16; 4],
    paths: &[[u8; 32]; 4],
    defaults: &[[u64; 4]],
) -> [[u64; 4]; 4] {
    chains4_body(start, heights, paths, defaults)
}

impl Backend {
    /// Every back end this CPU can run, the scalar one first (for tests and profiles that
    /// compare them; [`Backend::detect`] picks the fastest).
    pub fn available() -> Vec<Backend> {
        let mut backends = vec![Backend::Scalar];
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx2") {
                backends.push(Backend::Avx2);
            }
            if is_x86_feature_detected!("avx512f") {
                backends.push(Backend::Avx512);
            }
        }
        backends
    }

    /// Leaves hashed together (SIMD lanes); 1 = one at a time.
    pub fn lanes(self) -> usize {
        match self {
            Backend::Scalar => 1,
            #[cfg(target_arch = "x86_64")]
            Backend::Avx2 => 4,
            #[cfg(target_arch = "x86_64")]
            Backend::Avx512 => 8,
        }
    }
}

/// Runs the chains of `backend.lanes()` leaves (see `chains4_body`): `start`, `heights`,
/// `paths` and `out` hold exactly that many entries. `false` for [`Backend::Scalar`] (the
/// caller hashes one by one).
pub(crate) fn chains(
    backend: Backend,
    start: &[[u64; 4]],
    heights: &[u16],
    paths: &[[u8; 32]],
    defaults: &[[u64; 4]],
    out: &mut [[u64; 4]],
) -> bool {
    match backend {
        Backend::Scalar => false,
        // Safety: `Backend::detect` only returns these when the CPU has the features.
        #[cfg(target_arch = "x86_64")]
        Backend::Avx2 => {
            let r = unsafe { chains4_avx2(arr(start), arr(heights), arr(paths), defaults) };
            out.copy_from_slice(&r);
            true
        }
        #[cfg(target_arch = "x86_64")]
        Backend::Avx512 => {
            let r = unsafe { chains8_avx512(arr(start), arr(heights), arr(paths), defaults) };
            out.copy_from_slice(&r);
            true
        }
    }
}

/// The sponges of `N` messages at once, one per lane: `msgs[j]` is lane `j`'s padded message
/// as little-endian words (`nblocks[j]` x 17, rate 136 bytes). Lanes may differ in length: a
/// lane's digest is taken after its own last block (it absorbs zeros after that, unused).
/// Returns each lane's digest words.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn sponge_body<L: Lane, const N: usize>(
    msgs: &[&[u64]; N],
    nblocks: &[usize; N],
    load: impl Fn([u64; N]) -> L,
    store: impl Fn(L) -> [u64; N],
) -> [[u64; 4]; N] {
    let mut s = [L::splat(0); 25];
    let mut out = [[0u64; 4]; N];
    let most = nblocks.iter().copied().max().unwrap_or(0);
    for b in 0..most {
        for (i, lane) in s.iter_mut().take(17).enumerate() {
            let words: [u64; N] = std::array::from_fn(|j| {
                if b < nblocks[j] {
                    msgs[j][17 * b + i]
                } else {
                    0
                }
            });
            *lane = lane.xor(load(words));
        }
        permute(&mut s);
        if nblocks.contains(&(b + 1)) {
            for i in 0..4 {
                let w = store(s[i]);
                for (j, o) in out.iter_mut().enumerate() {
                    if nblocks[j] == b + 1 {
                        o[i] = w[j];
                    }
                }
            }
        }
    }
    out
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn sponge8_avx512(msgs: &[&[u64]; 8], nblocks: &[usize; 8]) -> [[u64; 4]; 8] {
    use std::arch::x86_64::*;
    sponge_body(
        msgs,
        nblocks,
        |w: [u64; 8]| x86::V8(_mm512_loadu_si512(w.as_ptr().cast())),
        |v: x86::V8| {
            let mut w = [0u64; 8];
            _mm512_storeu_si512(w.as_mut_ptr().cast(), v.0);
            w
        },
    )
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn sponge4_avx2(msgs: &[&[u64]; 4], nblocks: &[usize; 4]) -> [[u64; 4]; 4] {
    use std::arch::x86_64::*;
    sponge_body(
        msgs,
        nblocks,
        |w: [u64; 4]| x86::V(_mm256_loadu_si256(w.as_ptr().cast())),
        |v: x86::V| {
            let mut w = [0u64; 4];
            _mm256_storeu_si256(w.as_mut_ptr().cast(), v.0);
            w
        },
    )
}

/// The sponges of `backend.lanes()` padded messages at once, `msgs[j]` of `nblocks[j]` blocks
/// (see `sponge_body`); `false` for [`Backend::Scalar`] (the caller hashes one by one).
pub(crate) fn sponges(
    backend: Backend,
    msgs: &[&[u64]],
    nblocks: &[usize],
    out: &mut [[u64; 4]],
) -> bool {
    debug_assert!(msgs.iter().zip(nblocks).all(|(m, n)| m.len() >= 17 * n));
    match backend {
        Backend::Scalar => false,
        // Safety: `Backend::detect` only returns these when the CPU has the features, and
        // every message holds `nblocks` blocks (checked by the slices' bounds).
        #[cfg(target_arch = "x86_64")]
        Backend::Avx2 => {
            let r = unsafe { sponge4_avx2(arr(msgs), arr(nblocks)) };
            out.copy_from_slice(&r);
            true
        }
        #[cfg(target_arch = "x86_64")]
        Backend::Avx512 => {
            let r = unsafe { sponge8_avx512(arr(msgs), arr(nblocks)) };
            out.copy_from_slice(&r);
            true
        }
    }
}

/// Bytes absorbed per Keccak-f[1600] permutation at a 256-bit capacity (Keccak-256, SHA3-256).
pub(crate) const RATE: usize = 136;

/// A 256-bit-capacity sponge digest of each message in `msgs`, in order, into `out`: Keccak-256
/// with `domain` 0x01 (Ethereum), SHA3-256 with 0x06. The messages go through the sponge four
/// (AVX2) or eight (AVX-512) at a time, sorted by length so that the lanes of one pass end
/// close together (a short last pass fills its spare lanes with an empty message); on a CPU
/// without either, one at a time through `scalar` (the caller's digest of the same function).
/// `padded` is scratch the caller keeps between calls.
pub fn digests_into(
    backend: Backend,
    domain: u8,
    msgs: &[&[u8]],
    scalar: impl Fn(&[u8]) -> [u8; 32],
    padded: &mut Vec<Vec<u64>>,
    out: &mut Vec<[u8; 32]>,
) {
    out.clear();
    out.resize(msgs.len(), [0; 32]);
    let lanes = backend.lanes();
    if lanes == 1 {
        for (o, m) in out.iter_mut().zip(msgs) {
            *o = scalar(m);
        }
        return;
    }
    let mut order: Vec<(usize, usize)> = msgs
        .iter()
        .enumerate()
        .map(|(i, m)| (m.len() / RATE + 1, i))
        .collect();
    order.sort_unstable();
    padded.resize_with(lanes, Vec::new);
    let mut words = [[0u64; 4]; 8];
    let mut nblocks = [1usize; 8];
    for g in order.chunks(lanes) {
        for (k, buf) in padded.iter_mut().enumerate() {
            let (blocks, msg) = g.get(k).map_or((1, &[][..]), |&(n, i)| (n, msgs[i]));
            nblocks[k] = blocks;
            pad_words(msg, blocks, domain, buf);
        }
        let views: Vec<&[u64]> = padded.iter().map(Vec::as_slice).collect();
        let done = sponges(backend, &views, &nblocks[..lanes], &mut words[..lanes]);
        debug_assert!(done, "a SIMD back end runs its sponges");
        for (w, &(_, i)) in words.iter().zip(g) {
            for (k, x) in w.iter().enumerate() {
                out[i][8 * k..8 * k + 8].copy_from_slice(&x.to_le_bytes());
            }
        }
    }
}

/// `msg` padded to `nblocks` rate blocks (`domain` after it, 0x80 in the last byte) as the
/// little-endian words the sponge absorbs.
fn pad_words(msg: &[u8], nblocks: usize, domain: u8, out: &mut Vec<u64>) {
    let total = nblocks * RATE;
    out.clear();
    out.reserve(total / 8);
    let whole = msg.len() / 8;
    out.extend(
        msg[..8 * whole]
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))),
    );
    let mut tail = [0u8; 8];
    tail[..msg.len() - 8 * whole].copy_from_slice(&msg[8 * whole..]);
    tail[msg.len() - 8 * whole] = domain;
    out.push(u64::from_le_bytes(tail));
    out.resize(total / 8, 0);
    *out.last_mut().expect("at least one block") ^= 0x80 << 56;
}

#[cfg(target_arch = "x86_64")]
fn arr<T, const N: usize>(s: &[T]) -> &[T; N] {
    s.try_into().expect("one entry per SIMD lane")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn xorshift(x: &mut u64) -> u64 {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x
    }

    #[test]
    fn generic_round_matches_keccak_crate() {
        let mut seed = 7u64;
        for _ in 0..50 {
            let mut a = [0u64; 25];
            a.iter_mut().for_each(|l| *l = xorshift(&mut seed));
            let mut b = a;
            permute(&mut a);
            keccak::f1600(&mut b);
            assert_eq!(a, b);
        }
        // FIPS 202 Keccak-f[1600] on the all-zero state, first lane of the result.
        let mut z = [0u64; 25];
        permute(&mut z);
        assert_eq!(z[0], 0xf1258f7940e1dde7);
    }

    /// Batches of messages of every length around the block boundaries, several of each (so
    /// the SIMD lanes fill) and single ones (lanes of different lengths side by side), on every
    /// back end this CPU has:
    /// each digest equals alloy's Keccak-256 (domain 0x01) and the `sha3` of Flow's hashing
    /// module (0x06), and the order of the input is kept.
    #[test]
    fn digests_match_one_at_a_time() {
        let backends = Backend::available();
        let mut seed = 11u64;
        let mut msgs: Vec<Vec<u8>> = Vec::new();
        for len in
            (0..3 * RATE + 2).filter(|l| l % 17 == 0 || l % RATE <= 1 || l % RATE >= RATE - 2)
        {
            for _ in 0..=(len % 11) {
                msgs.push((0..len).map(|_| xorshift(&mut seed) as u8).collect());
            }
        }
        // Interleaved lengths: the batch sorts by blocks and must put each digest back.
        let n = msgs.len();
        msgs.swap(0, n - 1);
        let views: Vec<&[u8]> = msgs.iter().map(Vec::as_slice).collect();
        let keccak = |m: &[u8]| alloy_primitives::keccak256(m).0;
        let sha3 = |m: &[u8]| crate::flow::hash::sha3_256(m).0;
        for backend in backends {
            let (mut padded, mut out) = (Vec::new(), Vec::new());
            digests_into(backend, 0x01, &views, keccak, &mut padded, &mut out);
            for (m, d) in views.iter().zip(&out) {
                assert_eq!(*d, keccak(m), "{backend:?} keccak of {} bytes", m.len());
            }
            // A scalar stand-in that always fails proves the lanes did all the work: messages
            // of different lengths side by side, and a last pass short of lanes.
            if backend != Backend::Scalar {
                for n in [views.len(), backend.lanes() + 1, 1] {
                    digests_into(
                        backend,
                        0x01,
                        &views[..n],
                        |_| [0; 32],
                        &mut padded,
                        &mut out,
                    );
                    for (m, d) in views.iter().zip(&out) {
                        assert_eq!(*d, keccak(m), "{backend:?} lanes, {} bytes", m.len());
                    }
                }
            }
            digests_into(backend, 0x06, &views, sha3, &mut padded, &mut out);
            for (m, d) in views.iter().zip(&out) {
                assert_eq!(*d, sha3(m), "{backend:?} sha3 of {} bytes", m.len());
            }
        }
    }
}
