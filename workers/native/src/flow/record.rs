//! LedgerWAL record payloads (spec §3; flow-go `ledger/complete/wal/encoding.go`,
//! `ledger/trie_encoder.go`). All integers big-endian.
//!
//! ```text
//! update: | op=1 u8 | version=0 u16 | type=11 u8 | hash len=32 u16 | parent root [32] |
//!         | N u32 | path size=32 u16 | paths [32 * N] | N x ( payload len u32 | payload ) |
//! payload (version 0): | K u32 | encoded key [K] | V u64 | value [V] |
//! encoded key:         | parts u16 | per part: ( len u32 = 2 + n | type u16 | value [n] ) |
//! delete: | op=2 u8 | hash len u16 | root hash [len = 32] |
//! ```
//!
//! As in flow-go, bytes after the last payload, or after a payload's value inside its
//! length-prefixed slot, are ignored, and the encoded key is kept as is (its parts are only
//! decoded on demand, [`PayloadRef::key_parts`]). Every length is checked against the bytes left
//! before it is used, so allocations never exceed the record's size.

use super::hash::{Hash, Path};
use super::ErrorKind;
use std::sync::Arc;

pub const OP_UPDATE: u8 = 1;
pub const OP_DELETE: u8 = 2;
/// `ledger.TrieUpdateVersion`.
pub const TRIE_UPDATE_VERSION: u16 = 0;
/// `ledger.TypeTrieUpdate`.
pub const TYPE_TRIE_UPDATE: u8 = 11;
/// Number of entity types flow-go knows (`typeUnsuported`).
const TYPE_UNSUPPORTED: u8 = 12;
/// Key part types used by the execution state.
pub const KEY_PART_OWNER: u16 = 0;
pub const KEY_PART_KEY: u16 = 2;

/// A register payload: the encoded key (as stored, `Payload.EncodedKey`) and the value.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Payload {
    pub key: Box<[u8]>,
    pub value: Box<[u8]>,
}

impl std::fmt::Debug for Payload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Payload(key={}, value={})",
            super::to_hex(&self.key),
            super::to_hex(&self.value)
        )
    }
}

impl Payload {
    pub fn new(key: impl Into<Box<[u8]>>, value: impl Into<Box<[u8]>>) -> Payload {
        Payload {
            key: key.into(),
            value: value.into(),
        }
    }

    /// A payload from key parts `(type, value)`, encoded as `encodeAndAppendKey` does.
    pub fn from_parts(parts: &[(u16, &[u8])], value: &[u8]) -> Payload {
        Payload::new(encode_key(parts), value)
    }

    /// The payload borrowed, as a trie's registers give theirs.
    pub fn view(&self) -> PayloadRef<'_> {
        PayloadRef {
            key: &self.key,
            value: &self.value,
        }
    }

    /// `Payload.Size()`: encoded key length + value length.
    pub fn size(&self) -> u64 {
        self.view().size()
    }

    /// `Payload.IsEmpty()`: an empty value means the register is unallocated (deleted).
    pub fn is_empty(&self) -> bool {
        self.value.is_empty()
    }

    /// First part of the given type, e.g. [`KEY_PART_OWNER`].
    pub fn key_part(&self, typ: u16) -> Option<&[u8]> {
        self.view().key_part(typ)
    }
}

/// A payload borrowed from where it is stored: a decoded record's [`Payload`], or a trie's
/// register (key and value in one allocation with the path).
#[derive(Clone, Copy, PartialEq, Eq, Default, Debug)]
pub struct PayloadRef<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
}

impl<'a> PayloadRef<'a> {
    /// `Payload.Size()`: encoded key length + value length.
    pub fn size(&self) -> u64 {
        (self.key.len() + self.value.len()) as u64
    }

    /// `Payload.IsEmpty()`: an empty value means the register is unallocated (deleted).
    pub fn is_empty(&self) -> bool {
        self.value.is_empty()
    }

    /// The key's parts `(type, value)`, or `None` if the encoded key is malformed.
    pub fn key_parts(&self) -> Option<Vec<(u16, &'a [u8])>> {
        decode_key(self.key)
    }

    /// First part of the given type, e.g. [`KEY_PART_OWNER`].
    pub fn key_part(&self, typ: u16) -> Option<&'a [u8]> {
        self.key_parts()?
            .into_iter()
            .find(|(t, _)| *t == typ)
            .map(|(_, v)| v)
    }
}

/// `encodeAndAppendKey`.
pub fn encode_key(parts: &[(u16, &[u8])]) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + parts.iter().map(|p| 6 + p.1.len()).sum::<usize>());
    out.extend_from_slice(&(parts.len() as u16).to_be_bytes());
    for (typ, value) in parts {
        out.extend_from_slice(&((2 + value.len()) as u32).to_be_bytes());
        out.extend_from_slice(&typ.to_be_bytes());
        out.extend_from_slice(value);
    }
    out
}

/// `decodeKey`; the part count is bounded by the bytes present (each part takes >= 4 bytes).
pub fn decode_key(enc: &[u8]) -> Option<Vec<(u16, &[u8])>> {
    let mut c = Cursor::new(enc);
    let n = c.u16("key part count").ok()? as usize;
    let mut parts = Vec::with_capacity(n.min(enc.len() / 4));
    for _ in 0..n {
        let len = c.u32("key part length").ok()? as usize;
        let part = c.take(len, "key part").ok()?;
        if part.len() < 2 {
            return None;
        }
        parts.push((u16::from_be_bytes([part[0], part[1]]), &part[2..]));
    }
    Some(parts)
}

/// A `ledger.TrieUpdate`: the parent root and the register writes, in record order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrieUpdate {
    pub root: Hash,
    pub paths: Vec<Path>,
    pub payloads: Vec<Arc<Payload>>,
}

/// One decoded WAL record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WalRecord {
    Update(TrieUpdate),
    Delete(Hash),
}

/// A record decoding failure: what, and where inside the record.
pub type RecordResult<T> = Result<T, ErrorKind>;

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    fn left(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take(&mut self, n: usize, field: &'static str) -> RecordResult<&'a [u8]> {
        if n > self.left() {
            return Err(ErrorKind::Truncated {
                field,
                at: self.pos,
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn u8(&mut self, field: &'static str) -> RecordResult<u8> {
        Ok(self.take(1, field)?[0])
    }

    fn u16(&mut self, field: &'static str) -> RecordResult<u16> {
        let b = self.take(2, field)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self, field: &'static str) -> RecordResult<u32> {
        let b = self.take(4, field)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self, field: &'static str) -> RecordResult<u64> {
        let b = self.take(8, field)?;
        Ok(u64::from_be_bytes(b.try_into().expect("8 bytes")))
    }
}

/// `wal.Decode`: one record's bytes into a typed record.
pub fn decode(data: &[u8]) -> RecordResult<WalRecord> {
    if data.len() < 4 {
        return Err(ErrorKind::RecordTooShort { len: data.len() });
    }
    match data[0] {
        OP_UPDATE => decode_update(data).map(WalRecord::Update),
        OP_DELETE => {
            let mut c = Cursor::new(data);
            c.pos = 1;
            let len = c.u16("root hash length")? as usize;
            let h = c.take(len, "root hash")?;
            let h: [u8; 32] = h.try_into().map_err(|_| ErrorKind::BadHashLength { len })?;
            Ok(WalRecord::Delete(Hash(h)))
        }
        op => Err(ErrorKind::UnknownOperation { op }),
    }
}

fn decode_update(data: &[u8]) -> RecordResult<TrieUpdate> {
    let mut c = Cursor::new(data);
    c.pos = 1;
    let version = c.u16("encoding version")?;
    if version > TRIE_UPDATE_VERSION {
        return Err(ErrorKind::UnsupportedVersion { version });
    }
    let typ = c.u8("entity type")?;
    if typ >= TYPE_UNSUPPORTED || typ != TYPE_TRIE_UPDATE {
        return Err(ErrorKind::UnexpectedEntityType { typ });
    }
    let hash_len = c.u16("root hash length")? as usize;
    let root: [u8; 32] = c
        .take(hash_len, "root hash")?
        .try_into()
        .map_err(|_| ErrorKind::BadHashLength { len: hash_len })?;
    let n = c.u32("path count")? as usize;
    let path_size = c.u16("path size")? as usize;
    if n > 0 && path_size != 32 {
        return Err(ErrorKind::BadPathLength { len: path_size });
    }
    // Each path takes 32 bytes and each payload at least 4: bound the count before allocating.
    if n.saturating_mul(36) > c.left() {
        let need = n.saturating_mul(32);
        return Err(ErrorKind::Truncated {
            field: if need > c.left() { "paths" } else { "payloads" },
            at: c.pos + need.min(c.left()),
        });
    }
    let mut paths = Vec::with_capacity(n);
    for _ in 0..n {
        let p = c.take(32, "path")?;
        paths.push(Path(p.try_into().expect("32 bytes")));
    }
    let mut payloads = Vec::with_capacity(n);
    for _ in 0..n {
        let len = c.u32("payload length")? as usize;
        let slot_at = c.pos;
        let slot = c.take(len, "payload")?;
        payloads.push(Arc::new(decode_payload_v0(slot, slot_at)?));
    }
    Ok(TrieUpdate {
        root: Hash(root),
        paths,
        payloads,
    })
}

/// `decodePayload(version 0)`; `base` is the slot's position in the record (for errors).
fn decode_payload_v0(slot: &[u8], base: usize) -> RecordResult<Payload> {
    let mut c = Cursor::new(slot);
    let shift = |e: ErrorKind| match e {
        ErrorKind::Truncated { field, at } => ErrorKind::Truncated {
            field,
            at: at + base,
        },
        other => other,
    };
    let k = c.u32("key length").map_err(shift)? as usize;
    let key = c.take(k, "key").map_err(shift)?;
    let v = c.u64("value length").map_err(shift)?;
    let v = usize::try_from(v).unwrap_or(usize::MAX);
    let value = c.take(v, "value").map_err(shift)?;
    Ok(Payload::new(key, value))
}

/// `wal.EncodeUpdate`: flow-go's exact bytes (the encoder stops after the count when N = 0).
pub fn encode_update(u: &TrieUpdate) -> Vec<u8> {
    let mut size = 1 + 2 + 1 + 2 + 32 + 4;
    if !u.paths.is_empty() {
        size += 2 + 32 * u.paths.len();
        size += u
            .payloads
            .iter()
            .map(|p| 4 + 4 + p.key.len() + 8 + p.value.len())
            .sum::<usize>();
    }
    let mut out = Vec::with_capacity(size);
    out.push(OP_UPDATE);
    out.extend_from_slice(&TRIE_UPDATE_VERSION.to_be_bytes());
    out.push(TYPE_TRIE_UPDATE);
    out.extend_from_slice(&32u16.to_be_bytes());
    out.extend_from_slice(&u.root.0);
    out.extend_from_slice(&(u.paths.len() as u32).to_be_bytes());
    if u.paths.is_empty() {
        return out;
    }
    out.extend_from_slice(&32u16.to_be_bytes());
    for p in &u.paths {
        out.extend_from_slice(&p.0);
    }
    for p in &u.payloads {
        let len = 4 + p.key.len() + 8 + p.value.len();
        out.extend_from_slice(&(len as u32).to_be_bytes());
        out.extend_from_slice(&(p.key.len() as u32).to_be_bytes());
        out.extend_from_slice(&p.key);
        out.extend_from_slice(&(p.value.len() as u64).to_be_bytes());
        out.extend_from_slice(&p.value);
    }
    out
}

/// `wal.EncodeDelete`.
pub fn encode_delete(root: &Hash) -> Vec<u8> {
    let mut out = Vec::with_capacity(35);
    out.push(OP_DELETE);
    out.extend_from_slice(&32u16.to_be_bytes());
    out.extend_from_slice(&root.0);
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::flow::from_hex;
    use crate::flow::hash::empty_root;

    pub(crate) fn path(s: &str) -> Path {
        Path::from_hex(s).unwrap()
    }

    pub(crate) fn p1() -> Path {
        path("0000000000000000000000000000000000000000000000000000000000000001")
    }
    pub(crate) fn p2() -> Path {
        path("8000000000000000000000000000000000000000000000000000000000000000")
    }
    pub(crate) fn p3() -> Path {
        path("4000000000000000000000000000000000000000000000000000000000000002")
    }

    pub(crate) fn payload(owner: &str, key: &str, value: &[u8]) -> Arc<Payload> {
        Arc::new(Payload::from_parts(
            &[
                (KEY_PART_OWNER, owner.as_bytes()),
                (KEY_PART_KEY, key.as_bytes()),
            ],
            value,
        ))
    }

    fn hexs(lines: &str) -> Vec<u8> {
        from_hex(&lines.split_whitespace().collect::<String>()).unwrap()
    }

    fn u1() -> TrieUpdate {
        TrieUpdate {
            root: empty_root(),
            paths: vec![p1()],
            payloads: vec![payload("owner1", "key1", &[1, 2, 3])],
        }
    }

    fn u3() -> TrieUpdate {
        TrieUpdate {
            root: empty_root(),
            paths: vec![p1(), p2(), p3()],
            payloads: vec![
                payload("owner1", "key1", &[1, 2, 3]),
                payload("owner2", "key2", b"hello"),
                payload("owner3", "key3", &[0xff]),
            ],
        }
    }

    const U1_HEX: &str = "
        0100000b0020568f4ec740fe3b5de88034cb7b1fbddb41548b068f31aebc8ae9
        189e429c57490000000100200000000000000000000000000000000000000000
        000000000000000000000001000000270000001800020000000800006f776e65
        72310000000600026b6579310000000000000003010203";

    const U3_HEX: &str = "
        0100000b0020568f4ec740fe3b5de88034cb7b1fbddb41548b068f31aebc8ae9
        189e429c57490000000300200000000000000000000000000000000000000000
        0000000000000000000000018000000000000000000000000000000000000000
        0000000000000000000000004000000000000000000000000000000000000000
        000000000000000000000002000000270000001800020000000800006f776e65
        72310000000600026b6579310000000000000003010203000000290000001800
        020000000800006f776e6572320000000600026b657932000000000000000568
        656c6c6f000000250000001800020000000800006f776e657233000000060002
        6b6579330000000000000001ff";

    #[test]
    fn encoded_key_spec_6_1() {
        let p = payload("owner1", "key1", &[1, 2, 3]);
        assert_eq!(
            crate::flow::to_hex(&p.key),
            "00020000000800006f776e6572310000000600026b657931"
        );
        assert_eq!(p.size(), 27);
        assert_eq!(p.key_part(KEY_PART_OWNER).unwrap(), b"owner1");
        assert_eq!(p.key_part(KEY_PART_KEY).unwrap(), b"key1");
        assert_eq!(p.key_part(1), None);
    }

    #[test]
    fn update_records_spec_6_3() {
        let b1 = hexs(U1_HEX);
        assert_eq!(b1.len(), 119);
        assert_eq!(encode_update(&u1()), b1);
        assert_eq!(decode(&b1).unwrap(), WalRecord::Update(u1()));
        let b3 = hexs(U3_HEX);
        assert_eq!(encode_update(&u3()), b3);
        assert_eq!(decode(&b3).unwrap(), WalRecord::Update(u3()));
    }

    #[test]
    fn delete_record_spec_6_3() {
        let root =
            Hash::from_hex("b1f3bb0891acc0da65970811040480b3a61b3190f73b8817045274f3ad6877ff")
                .unwrap();
        let b = hexs(
            "020020b1f3bb0891acc0da65970811040480b3a61b3190f73b8817045274f3ad
             6877ff",
        );
        assert_eq!(encode_delete(&root), b);
        assert_eq!(decode(&b).unwrap(), WalRecord::Delete(root));
    }

    #[test]
    fn every_truncation_fails_cleanly() {
        for b in [hexs(U1_HEX), hexs(U3_HEX)] {
            for cut in 0..b.len() {
                assert!(decode(&b[..cut]).is_err(), "cut at {cut}");
            }
        }
        let d = encode_delete(&empty_root());
        for cut in 0..d.len() {
            assert!(decode(&d[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn trailing_bytes_are_ignored_like_flow_go() {
        let mut b = hexs(U1_HEX);
        b.extend_from_slice(&[9, 9, 9]);
        assert_eq!(decode(&b).unwrap(), WalRecord::Update(u1()));
    }

    #[test]
    fn header_errors() {
        let good = hexs(U1_HEX);
        let mut b = good.clone();
        b[0] = 3;
        assert_eq!(decode(&b), Err(ErrorKind::UnknownOperation { op: 3 }));
        let mut b = good.clone();
        b[2] = 1;
        assert_eq!(
            decode(&b),
            Err(ErrorKind::UnsupportedVersion { version: 1 })
        );
        let mut b = good.clone();
        b[3] = 10;
        assert_eq!(decode(&b), Err(ErrorKind::UnexpectedEntityType { typ: 10 }));
        let mut b = good.clone();
        b[5] = 31;
        assert_eq!(decode(&b), Err(ErrorKind::BadHashLength { len: 31 }));
        let mut b = good.clone();
        b[43] = 33; // path size
        assert_eq!(decode(&b), Err(ErrorKind::BadPathLength { len: 33 }));
        assert_eq!(
            decode(&[1, 0, 0]),
            Err(ErrorKind::RecordTooShort { len: 3 })
        );
        // A delete whose length field runs past the record.
        assert!(matches!(
            decode(&[2, 0, 40, 1, 2, 3]),
            Err(ErrorKind::Truncated { .. })
        ));
    }

    #[test]
    fn huge_counts_do_not_allocate() {
        let mut b = hexs(U1_HEX);
        b[38..42].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(decode(&b), Err(ErrorKind::Truncated { .. })));
        // Payload value length u64::MAX.
        let mut b = hexs(U1_HEX);
        let v_at = b.len() - 3 - 8;
        b[v_at..v_at + 8].copy_from_slice(&u64::MAX.to_be_bytes());
        assert!(matches!(
            decode(&b),
            Err(ErrorKind::Truncated { field: "value", .. })
        ));
    }

    #[test]
    fn zero_path_update() {
        // flow-go's encoder omits the path size when N = 0, so its own decoder rejects it...
        let u = TrieUpdate {
            root: empty_root(),
            paths: vec![],
            payloads: vec![],
        };
        let b = encode_update(&u);
        assert!(matches!(
            decode(&b),
            Err(ErrorKind::Truncated {
                field: "path size",
                ..
            })
        ));
        // ...but accepts it with a path size present.
        let mut b2 = b.clone();
        b2.extend_from_slice(&[0, 32]);
        assert_eq!(decode(&b2).unwrap(), WalRecord::Update(u));
    }

    #[test]
    fn malformed_keys_decode_to_none() {
        assert!(decode_key(&[0, 1, 0, 0, 0, 9, 0]).is_none());
        assert!(decode_key(&[0, 1, 0, 0, 0, 1, 0]).is_none()); // part shorter than its type
        assert_eq!(decode_key(&[0, 0]).unwrap(), vec![]);
        assert!(decode_key(&[]).is_none());
        assert!(decode_key(&[0xff, 0xff]).is_none());
    }
}
