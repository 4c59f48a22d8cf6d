//! MuHash3072, the UTXO set commitment of `gettxoutsetinfo muhash` (Core's `crypto/muhash.cpp`):
//! each element is SHA-256'd, expanded by ChaCha20 to a 3072-bit number, and multiplied into a
//! numerator (insert) or a denominator (remove) modulo the prime 2^3072 - 1103717. The digest
//! is SHA-256 of numerator / denominator, 384 bytes little-endian. Order-free, so partial
//! products from any split of a set combine into the same digest.

use sha2::{Digest, Sha256};

const LIMBS: usize = 48;
pub const BYTE_SIZE: usize = LIMBS * 8;
/// p = 2^3072 - MAX_PRIME_DIFF.
const MAX_PRIME_DIFF: u64 = 1_103_717;

/// A residue modulo p, 48 little-endian 64-bit limbs, always fully reduced (< p).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Num3072([u64; LIMBS]);

impl Num3072 {
    pub const ONE: Num3072 = {
        let mut l = [0u64; LIMBS];
        l[0] = 1;
        Num3072(l)
    };

    /// From 384 little-endian bytes, reduced modulo p.
    pub fn from_bytes(bytes: &[u8; BYTE_SIZE]) -> Num3072 {
        let mut l = [0u64; LIMBS];
        for (i, limb) in l.iter_mut().enumerate() {
            *limb = u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap());
        }
        let mut n = Num3072(l);
        n.reduce_once();
        n
    }

    pub fn to_bytes(&self) -> [u8; BYTE_SIZE] {
        let mut out = [0u8; BYTE_SIZE];
        for (i, limb) in self.0.iter().enumerate() {
            out[i * 8..i * 8 + 8].copy_from_slice(&limb.to_le_bytes());
        }
        out
    }

    /// Subtracts p once when the value is at least p (adding MAX_PRIME_DIFF carries out of
    /// 3072 bits exactly then).
    fn reduce_once(&mut self) {
        let mut t = self.0;
        let mut carry = MAX_PRIME_DIFF as u128;
        for limb in t.iter_mut() {
            let s = *limb as u128 + carry;
            *limb = s as u64;
            carry = s >> 64;
        }
        if carry != 0 {
            self.0 = t;
        }
    }

    /// self * other mod p: a schoolbook product, then the high half folded down with
    /// 2^3072 = MAX_PRIME_DIFF (mod p).
    pub fn mul(&self, other: &Num3072) -> Num3072 {
        let (a, b) = (&self.0, &other.0);
        let mut wide = [0u64; 2 * LIMBS];
        for i in 0..LIMBS {
            let mut carry: u128 = 0;
            let ai = a[i] as u128;
            for j in 0..LIMBS {
                let t = ai * b[j] as u128 + wide[i + j] as u128 + carry;
                wide[i + j] = t as u64;
                carry = t >> 64;
            }
            wide[i + LIMBS] = carry as u64;
        }
        // low + high * MAX_PRIME_DIFF: at most 3072 + 21 bits.
        let mut r = [0u64; LIMBS];
        let mut carry: u128 = 0;
        for i in 0..LIMBS {
            let t = wide[i] as u128 + wide[i + LIMBS] as u128 * MAX_PRIME_DIFF as u128 + carry;
            r[i] = t as u64;
            carry = t >> 64;
        }
        // Fold the overflow word until none is left (twice at most).
        while carry != 0 {
            let mut c = carry * MAX_PRIME_DIFF as u128;
            for limb in r.iter_mut() {
                if c == 0 {
                    break;
                }
                let t = *limb as u128 + c;
                *limb = t as u64;
                c = t >> 64;
            }
            carry = c;
        }
        let mut n = Num3072(r);
        n.reduce_once();
        n
    }

    /// The inverse modulo the prime p: self^(p-2) (Fermat). Zero has none and stays zero.
    pub fn inverse(&self) -> Num3072 {
        // p - 2 = 2^3072 - 1103719: every bit set above the low word, which is -1103719.
        let mut exp = [u64::MAX; LIMBS];
        exp[0] = 0u64.wrapping_sub(MAX_PRIME_DIFF + 2);
        let mut acc = Num3072::ONE;
        for limb in exp.iter().rev() {
            for bit in (0..64).rev() {
                acc = acc.mul(&acc);
                if (limb >> bit) & 1 == 1 {
                    acc = acc.mul(self);
                }
            }
        }
        acc
    }
}

/// ChaCha20's block function (RFC 8439), 32-byte key, nonce zero, block counter `counter`.
fn chacha20_block(key: &[u8; 32], counter: u32, out: &mut [u8]) {
    fn quarter(s: &mut [u32; 16], a: usize, b: usize, c: usize, d: usize) {
        s[a] = s[a].wrapping_add(s[b]);
        s[d] = (s[d] ^ s[a]).rotate_left(16);
        s[c] = s[c].wrapping_add(s[d]);
        s[b] = (s[b] ^ s[c]).rotate_left(12);
        s[a] = s[a].wrapping_add(s[b]);
        s[d] = (s[d] ^ s[a]).rotate_left(8);
        s[c] = s[c].wrapping_add(s[d]);
        s[b] = (s[b] ^ s[c]).rotate_left(7);
    }
    let mut init = [0u32; 16];
    init[..4].copy_from_slice(&[0x6170_7865, 0x3320_646e, 0x7962_2d32, 0x6b20_6574]);
    for i in 0..8 {
        init[4 + i] = u32::from_le_bytes(key[i * 4..i * 4 + 4].try_into().unwrap());
    }
    init[12] = counter;
    let mut s = init;
    for _ in 0..10 {
        quarter(&mut s, 0, 4, 8, 12);
        quarter(&mut s, 1, 5, 9, 13);
        quarter(&mut s, 2, 6, 10, 14);
        quarter(&mut s, 3, 7, 11, 15);
        quarter(&mut s, 0, 5, 10, 15);
        quarter(&mut s, 1, 6, 11, 12);
        quarter(&mut s, 2, 7, 8, 13);
        quarter(&mut s, 3, 4, 9, 14);
    }
    for i in 0..16 {
        out[i * 4..i * 4 + 4].copy_from_slice(&s[i].wrapping_add(init[i]).to_le_bytes());
    }
}

/// An element's number: ChaCha20 keyed by SHA-256(element), 384 bytes of keystream.
pub fn element(data: &[u8]) -> Num3072 {
    let key: [u8; 32] = Sha256::digest(data).into();
    let mut bytes = [0u8; BYTE_SIZE];
    for (i, block) in bytes.chunks_exact_mut(64).enumerate() {
        chacha20_block(&key, i as u32, block);
    }
    Num3072::from_bytes(&bytes)
}

/// A MuHash3072 accumulator: numerator / denominator.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct MuHash3072 {
    numerator: Num3072,
    denominator: Num3072,
}

impl Default for MuHash3072 {
    fn default() -> Self {
        MuHash3072 {
            numerator: Num3072::ONE,
            denominator: Num3072::ONE,
        }
    }
}

impl MuHash3072 {
    pub fn insert(&mut self, data: &[u8]) {
        self.numerator = self.numerator.mul(&element(data));
    }

    pub fn remove(&mut self, data: &[u8]) {
        self.denominator = self.denominator.mul(&element(data));
    }

    /// Adds every element of `other` (and removes what it removed).
    pub fn combine(&mut self, other: &MuHash3072) {
        self.numerator = self.numerator.mul(&other.numerator);
        self.denominator = self.denominator.mul(&other.denominator);
    }

    /// The accumulator as Core serializes it: numerator then denominator, 384 bytes each.
    pub fn to_state(&self) -> Vec<u8> {
        [self.numerator.to_bytes(), self.denominator.to_bytes()].concat()
    }

    /// An accumulator from `to_state`'s bytes (None unless 768 of them).
    pub fn from_state(b: &[u8]) -> Option<MuHash3072> {
        if b.len() != 2 * BYTE_SIZE {
            return None;
        }
        let half = |at: usize| Num3072::from_bytes(b[at..at + BYTE_SIZE].try_into().unwrap());
        Some(MuHash3072 {
            numerator: half(0),
            denominator: half(BYTE_SIZE),
        })
    }

    /// The set's digest, internal byte order (Core's uint256; display reverses it).
    pub fn finish(&self) -> [u8; 32] {
        let value = self.numerator.mul(&self.denominator.inverse());
        Sha256::digest(value.to_bytes()).into()
    }
}

/// Elements a worker takes at a time.
const BATCH_ELEMENTS: usize = 1024;

/// MuHash3072 of elements inserted on this thread and hashed and multiplied on `threads`
/// others, a batch at a time: the product is order-free, so each worker keeps a partial one
/// and `finish` combines them. An element costs a few microseconds (a 3072-bit product), ten
/// times what reading and serializing a coin does.
pub struct ParallelMuHash {
    /// Length-prefixed (u32 LE) elements of the batch being filled.
    batch: Vec<u8>,
    in_batch: usize,
    tx: Option<std::sync::mpsc::SyncSender<Vec<u8>>>,
    workers: Vec<std::thread::JoinHandle<MuHash3072>>,
}

impl ParallelMuHash {
    pub fn new(threads: usize) -> Self {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(2 * threads.max(1));
        let rx = std::sync::Arc::new(std::sync::Mutex::new(rx));
        let workers = (0..threads.max(1))
            .map(|_| {
                let rx = rx.clone();
                std::thread::spawn(move || {
                    let mut acc = MuHash3072::default();
                    loop {
                        let batch = match rx.lock().expect("not poisoned").recv() {
                            Ok(b) => b,
                            Err(_) => return acc,
                        };
                        let mut at = 0;
                        while at < batch.len() {
                            let len = u32::from_le_bytes(batch[at..at + 4].try_into().unwrap());
                            let end = at + 4 + len as usize;
                            acc.insert(&batch[at + 4..end]);
                            at = end;
                        }
                    }
                })
            })
            .collect();
        ParallelMuHash {
            batch: Vec::new(),
            in_batch: 0,
            tx: Some(tx),
            workers,
        }
    }

    pub fn insert(&mut self, data: &[u8]) {
        self.batch
            .extend_from_slice(&(data.len() as u32).to_le_bytes());
        self.batch.extend_from_slice(data);
        self.in_batch += 1;
        if self.in_batch == BATCH_ELEMENTS {
            self.send();
        }
    }

    fn send(&mut self) {
        let batch = std::mem::take(&mut self.batch);
        self.in_batch = 0;
        if let Some(tx) = &self.tx {
            // A worker only stops when the channel closes, so the send cannot fail.
            tx.send(batch)
                .expect("MuHash workers run until the channel closes");
        }
    }

    /// The product of every element inserted.
    pub fn finish(mut self) -> MuHash3072 {
        if self.in_batch > 0 {
            self.send();
        }
        self.tx = None;
        let mut acc = MuHash3072::default();
        for w in self.workers.drain(..) {
            acc.combine(&w.join().expect("a MuHash worker panicked"));
        }
        acc
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from_int(i: u8) -> MuHash3072 {
        let mut tmp = [0u8; 32];
        tmp[0] = i;
        let mut m = MuHash3072::default();
        m.insert(&tmp);
        m
    }

    fn display(h: [u8; 32]) -> String {
        h.iter().rev().map(|b| format!("{b:02x}")).collect()
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn chacha20_matches_rfc8439_keystream() {
        // RFC 8439 2.3.2 uses a nonce; with nonce zero and key zero, the first block is the
        // widely published all-zero ChaCha20 keystream.
        let mut out = [0u8; 64];
        chacha20_block(&[0u8; 32], 0, &mut out);
        assert_eq!(
            hex(&out[..32]),
            "76b8e0ada0f13d90405d6ae55386bd28bdd219b8a08ded1aa836efcc8b770dc7"
        );
    }

    #[test]
    fn core_muhash_vectors() {
        // Core's crypto_tests.cpp, muhash_tests.
        let mut acc = from_int(0);
        acc.combine(&from_int(1));
        let two = from_int(2);
        acc.denominator = acc.denominator.mul(&two.numerator);
        assert_eq!(
            display(acc.finish()),
            "10d312b100cbd32ada024a6646e40d3482fcff103668d2625f10002a607d5863"
        );
        let mut acc2 = from_int(0);
        let mut tmp = [0u8; 32];
        tmp[0] = 1;
        acc2.insert(&tmp);
        tmp[0] = 2;
        acc2.remove(&tmp);
        assert_eq!(acc2.finish(), acc.finish());
        // Its serialization check: numerator of FromInt(1) * FromInt(2), denominator one.
        let mut ser = from_int(1);
        ser.combine(&from_int(2));
        assert_eq!(
            hex(&ser.numerator.to_bytes()),
            "1fa093295ea30a6a3acdc7b3f770fa538eff537528e990e2910e40bbcfd7f6696b1256901929094694b56316de342f593303dd12ac43e06dce1be1ff8301c845\
             beb15468fff0ef002dbf80c29f26e6452bccc91b5cb9437ad410d2a67ea847887fa3c6a6553309946880fe20db2c73fe0641adbd4e86edfee0d9f8cd0ee12308\
             98873dc13ed8ddcaf045c80faa082774279007a2253f8922ee3ef361d378a6af3ddaf180b190ac97e556888c36b3d1fb1c85aab9ccd46e3deaeb7b7cf5db067a\
             7e9ff86b658cf3acd6662bbcce37232daa753c48b794356c020090c831a8304416e2aa7ad633c0ddb2f11be1be316a81be7f7e472071c042cb68faef549c221e\
             bff209273638b741aba5a81675c45a5fa92fea4ca821d7a324cb1e1a2ccd3b76c4228ec8066dad2a5df6e1bd0de45c7dd5de8070bdb46db6c554cf9aefc9b7b2\
             bbf9f75b1864d9f95005314593905c0109b71f703d49944ae94477b51dac10a816bb6d1c700bafabc8bd86fac8df24be519a2f2836b16392e18036cb13e48c5c"
        );
        assert_eq!(ser.denominator, Num3072::ONE);
        // Core's serialization of it is numerator then denominator.
        assert_eq!(MuHash3072::from_state(&ser.to_state()), Some(ser));
    }

    #[test]
    fn parallel_equals_sequential() {
        let mut seq = MuHash3072::default();
        let mut par = ParallelMuHash::new(3);
        for i in 0..5_000u32 {
            let e = i.to_le_bytes().repeat(1 + i as usize % 7);
            seq.insert(&e);
            par.insert(&e);
        }
        assert_eq!(par.finish().finish(), seq.finish());
        assert_eq!(
            ParallelMuHash::new(2).finish().finish(),
            MuHash3072::default().finish()
        );
    }

    #[test]
    fn order_free_and_inverse() {
        let mut a = MuHash3072::default();
        let mut b = MuHash3072::default();
        for i in 0..20u8 {
            a.insert(&[i]);
        }
        for i in (0..20u8).rev() {
            b.insert(&[i]);
        }
        assert_eq!(a.finish(), b.finish());
        for i in 0..20u8 {
            a.remove(&[i]);
        }
        assert_eq!(a.finish(), MuHash3072::default().finish());
        let x = element(b"x");
        assert_eq!(x.mul(&x.inverse()), Num3072::ONE);
    }

    #[test]
    fn reduction_of_values_at_and_above_the_prime() {
        // p itself reduces to zero, p + 1 to one, 2^3072 - 1 to MAX_PRIME_DIFF - 1.
        let mut p = [0xffu8; BYTE_SIZE];
        p[..8].copy_from_slice(&(0u64.wrapping_sub(MAX_PRIME_DIFF)).to_le_bytes());
        assert_eq!(Num3072::from_bytes(&p), Num3072([0; LIMBS]));
        let all = Num3072::from_bytes(&[0xff; BYTE_SIZE]);
        let mut want = [0u64; LIMBS];
        want[0] = MAX_PRIME_DIFF - 1;
        assert_eq!(all, Num3072(want));
        // (p - 1)^2 = 1 mod p.
        let mut pm1 = p;
        pm1[0] -= 1;
        let m = Num3072::from_bytes(&pm1);
        assert_eq!(m.mul(&m), Num3072::ONE);
    }
}
