//! Bitcoin's double SHA-256, one message at a time (`sha256d`) and many at once
//! (`Sha256dLanes`, `sha256d_64_pairs` for merkle levels): txids, wtxids and merkle nodes are
//! short independent messages, and each SHA-NI round waits on the one before it, so two
//! messages compressed together overlap their rounds. What that gains depends on the core's SHA
//! unit (on the compressions alone, `tests::compression_rates`: 1.1-1.25x on the Intel Xeon
//! measured, 1.7-2.0x on an AMD EPYC; three or four lanes gain nothing more there); the lanes also skip the per-message set-up of a `Digest`, and
//! read each message where it lies, assembling only the blocks that straddle its runs or
//! hold its padding.
//! Without SHA-NI the lanes fall back to the `sha2` crate's compression, block by block.

use sha2::{Digest, Sha256};
use std::cell::RefCell;

const INIT: [u32; 8] = [
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
];

/// Inlined where called: an address checksum's 21 bytes are then a constant length, and its
/// tail copy a few moves instead of a `memcpy` call per output.
#[inline]
pub fn sha256d(data: &[u8]) -> [u8; 32] {
    // Compressed in place, without a `Digest`: its buffering and set-up add a fifth to the two
    // compressions of a short message (an address checksum's 21 bytes: 102 against 122 ns).
    let mut s = INIT;
    let mut blocks = data.chunks_exact(64);
    for b in &mut blocks {
        compress1(&mut s, b.try_into().expect("64 bytes"));
    }
    let rest = blocks.remainder();
    let mut tail = [0u8; 128];
    tail[..rest.len()].copy_from_slice(rest);
    tail[rest.len()] = 0x80;
    // The length takes the last 8 bytes: a second block when the rest leaves no room for it.
    let n = if rest.len() < 56 { 64 } else { 128 };
    tail[n - 8..n].copy_from_slice(&(data.len() as u64 * 8).to_be_bytes());
    for b in tail[..n].chunks_exact(64) {
        compress1(&mut s, b.try_into().expect("64 bytes"));
    }
    let mut d = INIT;
    compress1(&mut d, &digest_block(&state_bytes(&s)));
    state_bytes(&d)
}

/// `sha256d` of the concatenation of `parts`.
pub fn sha256d_parts(parts: &[&[u8]]) -> [u8; 32] {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p);
    }
    Sha256::digest(h.finalize()).into()
}

fn state_bytes(state: &[u32; 8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    for (o, w) in out.chunks_exact_mut(4).zip(state) {
        o.copy_from_slice(&w.to_be_bytes());
    }
    out
}

/// The one padded block of a 32-byte message (the second hash of `sha256d`).
fn digest_block(digest: &[u8; 32]) -> [u8; 64] {
    let mut block = [0u8; 64];
    block[..32].copy_from_slice(digest);
    block[32] = 0x80;
    block[62] = 0x01; // 256 bits, big-endian
    block
}

fn compress1(state: &mut [u32; 8], block: &[u8; 64]) {
    #[cfg(target_arch = "x86_64")]
    if ni::available() {
        // SAFETY: the CPU has the SHA, SSE4.1 and SSSE3 extensions (checked above).
        return unsafe { ni::compress::<1>([state], [block]) };
    }
    sha2::compress256(state, &[(*block).into()]);
}

fn compress2(a: &mut [u32; 8], block_a: &[u8; 64], b: &mut [u32; 8], block_b: &[u8; 64]) {
    #[cfg(target_arch = "x86_64")]
    if ni::available() {
        // SAFETY: as in `compress1`.
        return unsafe { ni::compress::<2>([a, b], [block_a, block_b]) };
    }
    sha2::compress256(a, &[(*block_a).into()]);
    sha2::compress256(b, &[(*block_b).into()]);
}

/// A message given as up to three byte runs hashed as one (a segwit txid: version, the body
/// without witnesses, lock time), borrowed from the block being hashed.
#[derive(Clone, Copy)]
pub struct Parts<'a> {
    runs: [&'a [u8]; 3],
    n: usize,
}

impl<'a> Parts<'a> {
    pub fn one(message: &'a [u8]) -> Self {
        Parts {
            runs: [message, &[], &[]],
            n: 1,
        }
    }

    pub fn three(a: &'a [u8], b: &'a [u8], c: &'a [u8]) -> Self {
        Parts {
            runs: [a, b, c],
            n: 3,
        }
    }
}

/// Where a lane is in its message's padding.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pad {
    /// Message bytes are left.
    Data,
    /// The bytes are all taken; the 0x80 marker is next.
    Marker,
    /// The marker is in; the bit length is still to come.
    Length,
    /// The last block is out.
    Done,
}

/// One lane: a message read block by block where it lies (only a block that straddles runs or
/// holds the padding is assembled), how far it is compressed, and whose it is.
struct Lane<'a> {
    runs: Parts<'a>,
    run: usize,
    rest: &'a [u8],
    bits: u64,
    pad: Pad,
    state: [u32; 8],
    slot: usize,
}

impl<'a> Lane<'a> {
    fn idle() -> Self {
        Lane {
            runs: Parts::one(&[]),
            run: 0,
            rest: &[],
            bits: 0,
            pad: Pad::Done,
            state: INIT,
            slot: 0,
        }
    }

    fn load(&mut self, slot: usize, parts: Parts<'a>) {
        let len: usize = parts.runs[..parts.n].iter().map(|r| r.len()).sum();
        *self = Lane {
            runs: parts,
            run: 0,
            rest: parts.runs[0],
            bits: len as u64 * 8,
            pad: Pad::Data,
            state: INIT,
            slot,
        };
    }

    /// The next 64-byte block: in place when the current run holds all of it, else assembled
    /// in `buf`.
    fn next<'s>(&mut self, buf: &'s mut [u8; 64]) -> &'s [u8; 64]
    where
        'a: 's,
    {
        if let Some((block, rest)) = self.rest.split_first_chunk::<64>() {
            self.rest = rest;
            return block;
        }
        let mut n = 0;
        while self.pad == Pad::Data && n < 64 {
            if self.rest.is_empty() {
                self.run += 1;
                if self.run < self.runs.n {
                    self.rest = self.runs.runs[self.run];
                } else {
                    self.pad = Pad::Marker;
                }
                continue;
            }
            let take = self.rest.len().min(64 - n);
            buf[n..n + take].copy_from_slice(&self.rest[..take]);
            self.rest = &self.rest[take..];
            n += take;
        }
        if self.pad == Pad::Marker && n < 64 {
            buf[n] = 0x80;
            n += 1;
            self.pad = Pad::Length;
        }
        if self.pad == Pad::Length {
            buf[n..].fill(0);
            // The length takes the last 8 bytes: the next block when this one has no room.
            if n <= 56 {
                buf[56..].copy_from_slice(&self.bits.to_be_bytes());
                self.pad = Pad::Done;
            }
        }
        buf
    }

    fn done(&self) -> bool {
        self.pad == Pad::Done
    }
}

/// Double SHA-256 of many messages, two compressed at a time: each lane takes the next message
/// as soon as its own is hashed, so lanes never wait on each other's lengths. Messages are
/// read where they lie, not copied. Reusable; its buffer grows to the most messages and stays.
#[derive(Default)]
pub struct Sha256dLanes {
    /// (slot, first digest) of messages whose first hash is done.
    firsts: Vec<(usize, [u8; 32])>,
}

impl Sha256dLanes {
    /// `out[i]` = sha256d of `message(i)`, for every `i < n`.
    pub fn hash<'a, F>(&mut self, n: usize, mut message: F, out: &mut Vec<[u8; 32]>)
    where
        F: FnMut(usize) -> Parts<'a>,
    {
        out.clear();
        out.resize(n, [0u8; 32]);
        self.firsts.clear();
        let firsts = &mut self.firsts;
        let mut next = 0;
        let mut lanes = [Lane::idle(), Lane::idle()];
        let mut live = [false; 2];
        let (mut buf_a, mut buf_b) = ([0u8; 64], [0u8; 64]);
        loop {
            for (lane, live) in lanes.iter_mut().zip(live.iter_mut()) {
                if *live && lane.done() {
                    firsts.push((lane.slot, state_bytes(&lane.state)));
                    *live = false;
                }
                if !*live && next < n {
                    lane.load(next, message(next));
                    next += 1;
                    *live = true;
                }
            }
            let [a, b] = &mut lanes;
            match live {
                [true, true] => {
                    let (ba, bb) = (a.next(&mut buf_a), b.next(&mut buf_b));
                    compress2(&mut a.state, ba, &mut b.state, bb);
                }
                [true, false] | [false, true] => {
                    let lane = if live[0] { a } else { b };
                    let block = lane.next(&mut buf_a);
                    compress1(&mut lane.state, block);
                }
                [false, false] => break,
            }
        }
        // The second hash: one block each, two at a time.
        let mut pairs = firsts.chunks_exact(2);
        for pair in &mut pairs {
            let (mut sa, mut sb) = (INIT, INIT);
            compress2(
                &mut sa,
                &digest_block(&pair[0].1),
                &mut sb,
                &digest_block(&pair[1].1),
            );
            out[pair[0].0] = state_bytes(&sa);
            out[pair[1].0] = state_bytes(&sb);
        }
        for (slot, first) in pairs.remainder() {
            let mut s = INIT;
            compress1(&mut s, &digest_block(first));
            out[*slot] = state_bytes(&s);
        }
    }
}

/// The padding block of a 64-byte message (512 bits).
const PAD_64: [u8; 64] = {
    let mut block = [0u8; 64];
    block[0] = 0x80;
    block[62] = 0x02;
    block
};

fn sha256d_64_one(node: &[u8; 64]) -> [u8; 32] {
    let mut s = INIT;
    compress1(&mut s, node);
    compress1(&mut s, &PAD_64);
    let mut d = INIT;
    compress1(&mut d, &digest_block(&state_bytes(&s)));
    state_bytes(&d)
}

/// sha256d's second hash of two first hashes (their final states), compressed together.
fn second_hashes(a: &[u32; 8], b: &[u32; 8]) -> ([u32; 8], [u32; 8]) {
    let (mut a2, mut b2) = (INIT, INIT);
    compress2(
        &mut a2,
        &digest_block(&state_bytes(a)),
        &mut b2,
        &digest_block(&state_bytes(b)),
    );
    (a2, b2)
}

/// One merkle level: `out[i]` = sha256d(`level[2i]` | `level[2i + 1]`) for a level of even
/// length. Each pair is already a 64-byte block in place and its padding is a constant block,
/// so nothing is copied, and two nodes are hashed at a time.
pub fn sha256d_64_pairs(level: &[[u8; 32]], out: &mut Vec<[u8; 32]>) {
    out.clear();
    let nodes = level.as_flattened().chunks_exact(64);
    let nodes: Vec<&[u8; 64]> = nodes.map(|n| n.try_into().unwrap()).collect();
    let mut two = nodes.chunks_exact(2);
    for pair in &mut two {
        let (mut a, mut b) = (INIT, INIT);
        compress2(&mut a, pair[0], &mut b, pair[1]);
        compress2(&mut a, &PAD_64, &mut b, &PAD_64);
        let (a2, b2) = second_hashes(&a, &b);
        out.push(state_bytes(&a2));
        out.push(state_bytes(&b2));
    }
    out.extend(two.remainder().iter().map(|n| sha256d_64_one(n)));
}

/// The one padded block of a message shorter than 56 bytes.
fn short_block(message: &[u8]) -> [u8; 64] {
    let mut block = [0u8; 64];
    block[..message.len()].copy_from_slice(message);
    block[message.len()] = 0x80;
    block[56..].copy_from_slice(&(message.len() as u64 * 8).to_be_bytes());
    block
}

/// `out[i]` = the first four bytes of sha256d(`messages[i][..len]`), for messages of one block
/// (`len` < 56, as a base58check payload's 21 bytes): two at a time, without the lanes'
/// stepping, since each is one block and its digest's one block.
pub fn sha256d_short_checks<const N: usize>(
    messages: &[[u8; N]],
    len: usize,
    out: &mut Vec<[u8; 4]>,
) {
    assert!(len < 56 && len <= N, "one block per message");
    out.clear();
    let check = |s: &[u32; 8]| s[0].to_be_bytes();
    let mut two = messages.chunks_exact(2);
    for pair in &mut two {
        let (mut a, mut b) = (INIT, INIT);
        compress2(
            &mut a,
            &short_block(&pair[0][..len]),
            &mut b,
            &short_block(&pair[1][..len]),
        );
        let (a2, b2) = second_hashes(&a, &b);
        out.push(check(&a2));
        out.push(check(&b2));
    }
    for m in two.remainder() {
        out.push(sha256d(&m[..len])[..4].try_into().unwrap());
    }
}

thread_local! {
    static LANES: RefCell<Sha256dLanes> = RefCell::new(Sha256dLanes::default());
}

/// `Sha256dLanes::hash` on this thread's lanes: `out[i]` = sha256d of `message(i)`.
pub fn sha256d_each<'a, F>(n: usize, message: F, out: &mut Vec<[u8; 32]>)
where
    F: FnMut(usize) -> Parts<'a>,
{
    LANES.with_borrow_mut(|lanes| lanes.hash(n, message, out));
}

#[cfg(target_arch = "x86_64")]
mod ni {
    //! SHA-256 compression on the SHA extensions, `N` independent blocks interleaved round by
    //! round (Intel's state layout: ABEF and CDGH words in two registers).
    use std::arch::x86_64::*;
    use std::sync::OnceLock;

    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
        0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
        0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
        0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
        0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
        0xc67178f2,
    ];

    pub(super) fn available() -> bool {
        static HAS: OnceLock<bool> = OnceLock::new();
        *HAS.get_or_init(|| {
            is_x86_feature_detected!("sha")
                && is_x86_feature_detected!("sse4.1")
                && is_x86_feature_detected!("ssse3")
        })
    }

    /// Compresses `blocks[i]` into `states[i]` for each of the `N` lanes.
    ///
    /// # Safety
    /// The CPU must have the SHA, SSE4.1 and SSSE3 extensions.
    #[target_feature(enable = "sha,sse2,ssse3,sse4.1")]
    pub(super) unsafe fn compress<const N: usize>(
        states: [&mut [u32; 8]; N],
        blocks: [&[u8; 64]; N],
    ) {
        let be_words = _mm_set_epi64x(0x0c0d0e0f08090a0b, 0x0405060700010203);
        let mut abef = [_mm_setzero_si128(); N];
        let mut cdgh = [_mm_setzero_si128(); N];
        let mut w = [[_mm_setzero_si128(); 4]; N];
        for l in 0..N {
            let abcd = _mm_loadu_si128(states[l].as_ptr().cast());
            let efgh = _mm_loadu_si128(states[l].as_ptr().add(4).cast());
            let cdab = _mm_shuffle_epi32(abcd, 0xB1);
            let hgfe = _mm_shuffle_epi32(efgh, 0x1B);
            abef[l] = _mm_alignr_epi8(cdab, hgfe, 8);
            cdgh[l] = _mm_blend_epi16(hgfe, cdab, 0xF0);
            for (q, word) in w[l].iter_mut().enumerate() {
                let raw = _mm_loadu_si128(blocks[l].as_ptr().add(16 * q).cast());
                *word = _mm_shuffle_epi8(raw, be_words);
            }
        }
        let (abef0, cdgh0) = (abef, cdgh);
        // Sixteen quads of four rounds, unrolled so every message word stays in a register;
        // from the fifth quad on, each quad's words come from the four before (sigma0 by
        // sha256msg1, sigma1 by sha256msg2).
        macro_rules! quads {
            ($($q:literal)*) => {$(
                let k = _mm_loadu_si128(K.as_ptr().add(4 * $q).cast());
                for l in 0..N {
                    let w = &mut w[l];
                    if $q >= 4 {
                        let s0 = _mm_sha256msg1_epu32(w[$q % 4], w[($q + 1) % 4]);
                        let w7 = _mm_alignr_epi8(w[($q + 3) % 4], w[($q + 2) % 4], 4);
                        w[$q % 4] = _mm_sha256msg2_epu32(_mm_add_epi32(s0, w7), w[($q + 3) % 4]);
                    }
                    let wk = _mm_add_epi32(w[$q % 4], k);
                    cdgh[l] = _mm_sha256rnds2_epu32(cdgh[l], abef[l], wk);
                    abef[l] = _mm_sha256rnds2_epu32(abef[l], cdgh[l], _mm_shuffle_epi32(wk, 0x0E));
                }
            )*};
        }
        quads!(0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15);
        for l in 0..N {
            let abef = _mm_add_epi32(abef[l], abef0[l]);
            let cdgh = _mm_add_epi32(cdgh[l], cdgh0[l]);
            let feba = _mm_shuffle_epi32(abef, 0x1B);
            let dchg = _mm_shuffle_epi32(cdgh, 0xB1);
            let abcd = _mm_blend_epi16(feba, dchg, 0xF0);
            let efgh = _mm_alignr_epi8(dchg, feba, 8);
            _mm_storeu_si128(states[l].as_mut_ptr().cast(), abcd);
            _mm_storeu_si128(states[l].as_mut_ptr().add(4).cast(), efgh);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(n: usize) -> Vec<Vec<u8>> {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        (0..n)
            .map(|i| {
                // Lengths around every padding edge (55, 56, 63, 64 bytes) and long ones.
                let len = match i % 7 {
                    0 => i % 130,
                    1 => 55 + i % 10,
                    2 => 119 + i % 3,
                    _ => (i * 37) % 1500,
                };
                (0..len)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x as u8
                    })
                    .collect()
            })
            .collect()
    }

    /// The sha2 crate as the oracle: every message alone, split into parts, in any lane.
    #[test]
    fn lanes_match_the_sha2_crate() {
        let msgs = messages(301);
        let mut lanes = Sha256dLanes::default();
        let mut out = Vec::new();
        lanes.hash(msgs.len(), |i| Parts::one(&msgs[i]), &mut out);
        for (m, got) in msgs.iter().zip(&out) {
            let want: [u8; 32] = Sha256::digest(Sha256::digest(m)).into();
            assert_eq!(*got, want, "message of {} bytes", m.len());
        }
        // The same messages in three parts (as a segwit txid is hashed) give the same digests.
        let mut split = Vec::new();
        lanes.hash(
            msgs.len(),
            |i| {
                let m = &msgs[i];
                let (a, rest) = m.split_at(m.len() / 3);
                let (b, c) = rest.split_at(rest.len() / 2);
                Parts::three(a, b, c)
            },
            &mut split,
        );
        assert_eq!(split, out);
        // Odd and even counts, and none.
        for n in [0, 1, 2, 3] {
            lanes.hash(n, |i| Parts::one(&msgs[i]), &mut split);
            assert_eq!(split, out[..n]);
        }
    }

    /// Every length across the one- and two-block paddings and past them.
    #[test]
    fn sha256d_matches_the_sha2_crate() {
        let data: Vec<u8> = (0..300u32).map(|i| (i * 7 + 3) as u8).collect();
        for n in 0..=data.len() {
            let want: [u8; 32] = Sha256::digest(Sha256::digest(&data[..n])).into();
            assert_eq!(sha256d(&data[..n]), want, "{n} bytes");
        }
    }

    #[test]
    fn merkle_pairs_match_the_sha2_crate() {
        let msgs = messages(40);
        let leaves: Vec<[u8; 32]> = msgs.iter().map(|m| Sha256::digest(m).into()).collect();
        let mut out = Vec::new();
        for n in [0, 2, 4, 6, 38] {
            sha256d_64_pairs(&leaves[..n], &mut out);
            let want: Vec<[u8; 32]> = leaves[..n]
                .chunks_exact(2)
                .map(|p| Sha256::digest(Sha256::digest([p[0], p[1]].concat())).into())
                .collect();
            assert_eq!(out, want, "{n} leaves");
        }
    }

    /// Every one-block length, odd and even counts of messages, against the sha2 crate.
    #[test]
    fn short_checks_match_the_sha2_crate() {
        let msgs = messages(41);
        let mut fixed = [[0u8; 60]; 41];
        for (f, m) in fixed.iter_mut().zip(&msgs) {
            for (i, x) in f.iter_mut().enumerate() {
                *x = m.get(i).copied().unwrap_or(i as u8 ^ 0x5a);
            }
        }
        let mut out = Vec::new();
        for len in 0..56 {
            for n in [0, 1, 2, 7, 41] {
                sha256d_short_checks(&fixed[..n], len, &mut out);
                let want: Vec<[u8; 4]> = fixed[..n]
                    .iter()
                    .map(|m| {
                        let d: [u8; 32] = Sha256::digest(Sha256::digest(&m[..len])).into();
                        d[..4].try_into().unwrap()
                    })
                    .collect();
                assert_eq!(out, want, "{n} messages of {len} bytes");
            }
        }
    }

    #[test]
    fn both_compressions_match_the_sha2_crate() {
        let msgs = messages(40);
        for pair in msgs.chunks_exact(2) {
            let block = |m: &[u8]| {
                let mut b = [0u8; 64];
                for (i, x) in b.iter_mut().enumerate() {
                    *x = m.get(i).copied().unwrap_or(i as u8);
                }
                b
            };
            let (ba, bb) = (block(&pair[0]), block(&pair[1]));
            let (mut a, mut b, mut a1) = (INIT, INIT, INIT);
            compress2(&mut a, &ba, &mut b, &bb);
            compress1(&mut a1, &ba);
            let (mut wa, mut wb) = (INIT, INIT);
            sha2::compress256(&mut wa, &[ba.into()]);
            sha2::compress256(&mut wb, &[bb.into()]);
            assert_eq!((a, b, a1), (wa, wb, wa));
        }
    }

    /// One lane and two on the same block chained `n` times end in the same state; with
    /// `--nocapture` it prints each one's MB/s (`cargo test --release
    /// sha256::tests::compression_rates -- --nocapture --test-threads=1`): what a second lane
    /// gains on this core.
    #[test]
    fn compression_rates() {
        let block = [7u8; 64];
        let n = 200_000;
        let mut one = INIT;
        let t = std::time::Instant::now();
        for _ in 0..n {
            compress1(&mut one, &block);
        }
        let one_s = t.elapsed().as_secs_f64();
        let (mut a, mut b) = (INIT, INIT);
        let t = std::time::Instant::now();
        for _ in 0..n {
            compress2(&mut a, &block, &mut b, &block);
        }
        let two_s = t.elapsed().as_secs_f64();
        assert_eq!((a, b), (one, one));
        println!(
            "compressions: one lane {:.0} MB/s, two lanes {:.0} MB/s",
            64.0 * n as f64 / one_s / 1e6,
            128.0 * n as f64 / two_s / 1e6
        );
    }

    /// Txid-sized messages through the lanes give `sha256d`'s digests; with `--nocapture` it
    /// prints both rates, the second of two passes (`cargo test --release
    /// sha256::tests::lanes_rate -- --nocapture --test-threads=1`).
    #[test]
    fn lanes_rate() {
        let msgs: Vec<Vec<u8>> = (0..20_000).map(|i| vec![i as u8; 180 + i % 200]).collect();
        let bytes: usize = msgs.iter().map(Vec::len).sum();
        let mut lanes = Sha256dLanes::default();
        let mut out = Vec::new();
        let (mut lanes_s, mut one_s) = (0.0, 0.0);
        for _ in 0..2 {
            let t = std::time::Instant::now();
            lanes.hash(msgs.len(), |i| Parts::one(&msgs[i]), &mut out);
            lanes_s = t.elapsed().as_secs_f64();
            let t = std::time::Instant::now();
            let one: Vec<[u8; 32]> = msgs.iter().map(|m| sha256d(m)).collect();
            one_s = t.elapsed().as_secs_f64();
            assert_eq!(one, out);
        }
        println!(
            "txid-sized messages: lanes {:.0} MB/s, one at a time {:.0} MB/s",
            bytes as f64 / lanes_s / 1e6,
            bytes as f64 / one_s / 1e6
        );
    }
}
