//! The v6 byte format (spec §5.1-5.2; flow-go `checkpoint_v6_*.go`, `flattener/encoding.go`):
//! magic numbers, versions and lengths, file names, the header, the part reader, and the one
//! node decoder and encoder every reader and writer here uses ([`read_node`], [`build_node`],
//! [`encode_leaf`], [`encode_interior`], the top part's node and trie records).

use super::error::{CheckpointError, CpResult};
use crate::flow::hash::{compact_value, default_hash, hash_inter, Hash, Path, MAX_HEIGHT};
use crate::flow::mtrie::Trie;
use crate::flow::node::{Node, Register};
use crate::flow::record::PayloadRef;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;

pub const MAGIC_HEADER: u16 = 0x2137;
pub const MAGIC_SUBTRIE: u16 = 0x2136;
pub const MAGIC_TOPTRIE: u16 = 0x2135;
pub const VERSION_V6: u16 = 6;
/// Single-file versions flow-go v0.33.1 still reads (`legacy`).
pub(super) const OLDER_VERSIONS: [u16; 4] = [1, 3, 4, 5];
/// Depth at which v6 splits tries into part files.
pub const SUBTRIE_LEVEL: usize = 4;
pub const SUBTRIE_COUNT: usize = 1 << SUBTRIE_LEVEL;
/// Index of the top-level part file (`.016`).
pub const TOP_PART: usize = SUBTRIE_COUNT;
pub const HEADER_LEN: u64 = 4 + 2 + 4 * (SUBTRIE_COUNT as u64 + 1) + 4;
pub(super) const INTERIOR_LEN: u64 = 1 + 2 + 32 + 8 + 8;
pub(super) const TRIE_RECORD_LEN: u64 = 8 + 8 + 8 + 32;
pub(super) const NODE_LEAF: u8 = 0;
pub(super) const NODE_INTERIOR: u8 = 1;
pub(super) const IO_BUF: usize = 1 << 20;

/// `checkpoint.` + `%08d` (flow-go `NumberToFilename`).
pub fn checkpoint_name(number: u64) -> String {
    format!("checkpoint.{number:08}")
}

/// `<name>.%03d`.
pub fn part_name(name: &str, index: usize) -> String {
    format!("{name}.{index:03}")
}

pub(super) fn crc(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

// ---------------------------------------------------------------------------------------------
// Reading

/// The main file: the 16 subtrie part checksums and the top part's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub part_crcs: [u32; SUBTRIE_COUNT + 1],
}

pub(super) fn version_error(
    file: &FsPath,
    magic: u16,
    version: u16,
    want_magic: u16,
) -> CheckpointError {
    if magic != want_magic {
        return CheckpointError::new(
            file,
            0,
            "bad_magic",
            format!("unknown file format: magic {magic:04x}, expected {want_magic:04x}"),
        );
    }
    if OLDER_VERSIONS.contains(&version) {
        return CheckpointError::new(
            file,
            2,
            "unsupported_version",
            format!(
                "checkpoint version {version} is one file without subtrie parts: it is read \
                 whole (`load`), not part by part"
            ),
        );
    }
    CheckpointError::new(
        file,
        2,
        "unsupported_version",
        format!("unsupported file version {version} (expected {VERSION_V6})"),
    )
}

pub(super) fn check_magic(file: &FsPath, head: &[u8], want_magic: u16) -> CpResult<()> {
    if head.len() < 4 {
        return Err(CheckpointError::new(
            file,
            head.len() as u64,
            "truncated",
            "file shorter than its 4-byte magic and version",
        ));
    }
    let magic = u16::from_be_bytes([head[0], head[1]]);
    let version = u16::from_be_bytes([head[2], head[3]]);
    if magic != want_magic || version != VERSION_V6 {
        return Err(version_error(file, magic, version, want_magic));
    }
    Ok(())
}

/// The version of checkpoint `name` (its magic checked): 6, or a single-file version.
pub fn checkpoint_version(dir: &FsPath, name: &str) -> CpResult<u16> {
    let file = dir.join(name);
    let mut head = Vec::with_capacity(4);
    File::open(&file)
        .and_then(|f| f.take(4).read_to_end(&mut head))
        .map_err(|e| CheckpointError::io(&file, 0, &e))?;
    if head.len() < 4 {
        return Err(CheckpointError::new(
            &file,
            head.len() as u64,
            "truncated",
            "file shorter than its 4-byte magic and version",
        ));
    }
    let magic = u16::from_be_bytes([head[0], head[1]]);
    if magic != MAGIC_HEADER {
        return Err(version_error(&file, magic, 0, MAGIC_HEADER));
    }
    Ok(u16::from_be_bytes([head[2], head[3]]))
}

/// Reads and validates the 78-byte main file (`readCheckpointHeader`).
pub fn read_header(dir: &FsPath, name: &str) -> CpResult<Header> {
    let file = dir.join(name);
    let mut data = Vec::with_capacity(HEADER_LEN as usize);
    File::open(&file)
        .and_then(|f| f.take(HEADER_LEN + 1).read_to_end(&mut data))
        .map_err(|e| CheckpointError::io(&file, 0, &e))?;
    check_magic(&file, &data, MAGIC_HEADER)?;
    if data.len() < 6 {
        return Err(CheckpointError::new(
            &file,
            data.len() as u64,
            "truncated",
            "header ends before its subtrie count",
        ));
    }
    let count = u16::from_be_bytes([data[4], data[5]]);
    if count as usize != SUBTRIE_COUNT {
        return Err(CheckpointError::new(
            &file,
            4,
            "bad_subtrie_count",
            format!("subtrie count {count}, expected {SUBTRIE_COUNT}"),
        ));
    }
    if (data.len() as u64) < HEADER_LEN {
        return Err(CheckpointError::new(
            &file,
            data.len() as u64,
            "truncated",
            format!("header of {} bytes, expected {HEADER_LEN}", data.len()),
        ));
    }
    if data.len() as u64 > HEADER_LEN {
        return Err(CheckpointError::new(
            &file,
            HEADER_LEN,
            "trailing_bytes",
            "expected to reach EOF after the header checksum",
        ));
    }
    let body = HEADER_LEN as usize - 4;
    let stored = u32::from_be_bytes(data[body..].try_into().expect("4 bytes"));
    let computed = crc(&data[..body]);
    if stored != computed {
        return Err(CheckpointError::new(
            &file,
            body as u64,
            "checksum",
            format!("invalid checksum in checkpoint header: stored {stored:08x}, computed {computed:08x}"),
        ));
    }
    let mut part_crcs = [0u32; SUBTRIE_COUNT + 1];
    for (i, c) in part_crcs.iter_mut().enumerate() {
        let at = 6 + 4 * i;
        *c = u32::from_be_bytes(data[at..at + 4].try_into().expect("4 bytes"));
    }
    Ok(Header { part_crcs })
}

/// Reads a part file sequentially, tracking the offset and the CRC-32C of what was read.
/// Fields are taken from a buffer of its own (not read one `read_exact` each) and the CRC is
/// computed over each stretch of the buffer handed out, not field by field.
pub(super) struct PartReader {
    pub(super) file: PathBuf,
    f: File,
    buf: Box<[u8]>,
    /// `buf[pos..filled]` is read from the file and not yet handed out.
    pos: usize,
    filled: usize,
    /// CRC-32C of everything handed out before `buf[crc_from..pos]`.
    crc: u32,
    crc_from: usize,
    pub(super) offset: u64,
    /// End of the region holding records (start of the footer).
    pub(super) end: u64,
}

impl PartReader {
    /// A reader of `f` (positioned at `offset`) up to `end`, its CRC starting from nothing:
    /// the single-file versions checksum everything from byte 0.
    pub(super) fn new(file: &FsPath, f: File, offset: u64, end: u64) -> Self {
        PartReader::with_crc(file, f, offset, end, 0)
    }

    fn with_crc(file: &FsPath, f: File, offset: u64, end: u64, crc: u32) -> Self {
        PartReader {
            file: file.to_path_buf(),
            f,
            buf: vec![0u8; IO_BUF].into_boxed_slice(),
            pos: 0,
            filled: 0,
            crc,
            crc_from: 0,
            offset,
            end,
        }
    }

    /// The CRC-32C of everything read so far.
    pub(super) fn crc(&self) -> u32 {
        crc32c::crc32c_append(self.crc, &self.buf[self.crc_from..self.pos])
    }

    fn check_room(&self, n: usize, what: &str) -> CpResult<()> {
        if self.offset + n as u64 > self.end {
            return Err(CheckpointError::new(
                &self.file,
                self.offset,
                "truncated",
                format!(
                    "{what} of {n} bytes runs past the end of the node records ({})",
                    self.end
                ),
            ));
        }
        Ok(())
    }

    /// Makes at least `n` (at most the buffer's size) unread bytes available in the buffer.
    fn fill(&mut self, n: usize) -> CpResult<()> {
        self.crc = self.crc();
        self.buf.copy_within(self.pos..self.filled, 0);
        self.filled -= self.pos;
        self.pos = 0;
        self.crc_from = 0;
        while self.filled < n {
            let got = self
                .f
                .read(&mut self.buf[self.filled..])
                .map_err(|e| CheckpointError::io(&self.file, self.offset, &e))?;
            if got == 0 {
                let e = std::io::Error::from(std::io::ErrorKind::UnexpectedEof);
                return Err(CheckpointError::io(&self.file, self.offset, &e));
            }
            self.filled += got;
        }
        Ok(())
    }

    /// The next `n` bytes (`n` at most the buffer's size).
    fn take(&mut self, n: usize, what: &str) -> CpResult<&[u8]> {
        self.check_room(n, what)?;
        if self.filled - self.pos < n {
            self.fill(n)?;
        }
        let at = self.pos;
        self.pos += n;
        self.offset += n as u64;
        Ok(&self.buf[at..at + n])
    }

    fn array<const N: usize>(&mut self, what: &str) -> CpResult<[u8; N]> {
        Ok(self.take(N, what)?.try_into().expect("N bytes"))
    }

    pub(super) fn u8(&mut self, what: &str) -> CpResult<u8> {
        Ok(self.array::<1>(what)?[0])
    }
    pub(super) fn u16(&mut self, what: &str) -> CpResult<u16> {
        Ok(u16::from_be_bytes(self.array(what)?))
    }
    pub(super) fn u32(&mut self, what: &str) -> CpResult<u32> {
        Ok(u32::from_be_bytes(self.array(what)?))
    }
    pub(super) fn u64(&mut self, what: &str) -> CpResult<u64> {
        Ok(u64::from_be_bytes(self.array(what)?))
    }
    pub(super) fn hash(&mut self, what: &str) -> CpResult<[u8; 32]> {
        self.array(what)
    }
    pub(super) fn vec(&mut self, n: usize, what: &str) -> CpResult<Vec<u8>> {
        if n <= self.buf.len() {
            return Ok(self.take(n, what)?.to_vec());
        }
        // Longer than the buffer: what it holds, then the rest straight from the file.
        self.check_room(n, what)?;
        let mut v = Vec::with_capacity(n);
        v.extend_from_slice(&self.buf[self.pos..self.filled]);
        self.crc = crc32c::crc32c_append(self.crc(), &v);
        let start = v.len();
        v.resize(n, 0);
        let at = self.offset + start as u64;
        self.f
            .read_exact(&mut v[start..])
            .map_err(|e| CheckpointError::io(&self.file, at, &e))?;
        self.crc = crc32c::crc32c_append(self.crc, &v[start..]);
        (self.pos, self.filled, self.crc_from) = (0, 0, 0);
        self.offset += n as u64;
        Ok(v)
    }
}

/// Where the fields of one node record that `build_node` and the child checks name lie in its
/// file: fixed places after the node's start in a v5/v6 record (§5.2, [`NodeFields::v6`]),
/// elsewhere in the older records (`legacy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct NodeFields {
    pub start: u64,
    pub height: u64,
    pub hash: u64,
    pub left: u64,
    pub right: u64,
}

impl NodeFields {
    /// `| type u8 | height u16 | hash | left u64 | right u64 |` from `at`.
    pub(super) fn v6(at: u64) -> Self {
        NodeFields {
            start: at,
            height: at + 1,
            hash: at + 3,
            left: at + 35,
            right: at + 43,
        }
    }
}

/// One node record as stored, children as indices.
#[derive(Debug)]
pub(super) enum RawNode {
    Leaf {
        height: u16,
        hash: Hash,
        reg: Arc<Register>,
    },
    Interior {
        height: u16,
        hash: Hash,
        left: u64,
        right: u64,
    },
}

pub(super) fn read_node(r: &mut PartReader) -> CpResult<(u64, RawNode)> {
    let at = r.offset;
    let typ = r.u8("node type")?;
    let height = r.u16("node height")?;
    let hash = Hash(r.hash("node hash")?);
    match typ {
        NODE_LEAF => {
            let path = Path(r.hash("leaf path")?);
            let plen = r.u32("payload length")? as u64;
            if plen == 0 {
                return Ok((
                    at,
                    RawNode::Leaf {
                        height,
                        hash,
                        reg: Register::new(path, PayloadRef::default()),
                    },
                ));
            }
            let start = r.offset;
            let klen = r.u32("encoded key length")? as usize;
            let key = r.vec(klen, "encoded key")?;
            let vlen = r.u32("value length")? as usize;
            // A value that fits the reader's buffer is copied from there into the register.
            let long;
            let value = if vlen <= r.buf.len() {
                r.take(vlen, "value")?
            } else {
                long = r.vec(vlen, "value")?;
                &long
            };
            let reg = Register::new(path, PayloadRef { key: &key, value });
            if r.offset - start != plen {
                return Err(CheckpointError::new(
                    &r.file,
                    start,
                    "bad_payload",
                    format!(
                        "payload length field {plen} but key and value take {}",
                        r.offset - start
                    ),
                ));
            }
            Ok((at, RawNode::Leaf { height, hash, reg }))
        }
        NODE_INTERIOR => {
            let left = r.u64("left child index")?;
            let right = r.u64("right child index")?;
            Ok((
                at,
                RawNode::Interior {
                    height,
                    hash,
                    left,
                    right,
                },
            ))
        }
        other => Err(CheckpointError::new(
            &r.file,
            at,
            "bad_node_type",
            format!("node type {other}, expected 0 (leaf) or 1 (interior)"),
        )),
    }
}

/// Opens a part: checks magic/version, reads the footer (`footer_len` bytes before the CRC),
/// compares the trailing CRC with the header's, and positions the reader after the magic.
pub(super) fn open_part(
    file: &FsPath,
    magic: u16,
    footer_len: u64,
    expected_crc: u32,
) -> CpResult<(PartReader, Vec<u8>)> {
    let mut f = File::open(file).map_err(|e| CheckpointError::io(file, 0, &e))?;
    let len = f
        .metadata()
        .map_err(|e| CheckpointError::io(file, 0, &e))?
        .len();
    let mut head = [0u8; 4];
    let n = f
        .read(&mut head)
        .map_err(|e| CheckpointError::io(file, 0, &e))?;
    check_magic(file, &head[..n], magic)?;
    if len < 4 + footer_len + 4 {
        return Err(CheckpointError::new(
            file,
            len,
            "truncated",
            format!("part of {len} bytes is shorter than its header and footer"),
        ));
    }
    let footer_at = len - footer_len - 4;
    let mut footer = vec![0u8; footer_len as usize + 4];
    f.seek(SeekFrom::Start(footer_at))
        .and_then(|_| f.read_exact(&mut footer))
        .map_err(|e| CheckpointError::io(file, footer_at, &e))?;
    let stored = u32::from_be_bytes(footer[footer_len as usize..].try_into().expect("4 bytes"));
    if stored != expected_crc {
        return Err(CheckpointError::new(
            file,
            len - 4,
            "checksum",
            format!(
                "part checksum {stored:08x} differs from {expected_crc:08x} listed in the header"
            ),
        ));
    }
    f.seek(SeekFrom::Start(4))
        .map_err(|e| CheckpointError::io(file, 4, &e))?;
    let reader = PartReader::with_crc(file, f, 4, footer_at, crc(&head));
    footer.truncate(footer_len as usize);
    Ok((reader, footer))
}

/// After the records: the reader must sit exactly at the footer, whose bytes (already read)
/// complete the CRC, which must equal the stored one.
pub(super) fn finish_part(r: &PartReader, footer: &[u8], stored: u32) -> CpResult<()> {
    if r.offset != r.end {
        return Err(CheckpointError::new(
            &r.file,
            r.offset,
            "trailing_bytes",
            format!(
                "node records end at {} but the footer starts at {}",
                r.offset, r.end
            ),
        ));
    }
    let computed = crc32c::crc32c_append(r.crc(), footer);
    if computed != stored {
        return Err(CheckpointError::new(
            &r.file,
            r.end + footer.len() as u64,
            "checksum",
            format!("invalid checksum: stored {stored:08x}, computed {computed:08x}"),
        ));
    }
    Ok(())
}

pub(super) fn check_count(file: &FsPath, at: u64, count: u64, room: u64) -> CpResult<()> {
    if count > room / INTERIOR_LEN {
        return Err(CheckpointError::new(
            file,
            at,
            "bad_count",
            format!("node count {count} cannot fit in {room} bytes"),
        ));
    }
    Ok(())
}

/// Recomputes a node's hash from its contents and its children's hashes.
pub(super) fn computed_hash(
    height: u16,
    node: &RawNode,
    left: Option<Hash>,
    right: Option<Hash>,
) -> Hash {
    match node {
        RawNode::Leaf { reg, .. } => compact_value(reg.path(), reg.value(), height),
        RawNode::Interior { .. } => {
            let d = default_hash(height.saturating_sub(1));
            hash_inter(&left.unwrap_or(d), &right.unwrap_or(d))
        }
    }
}

/// A path of some leaf under an interior node of `height` (not a leaf's: those carry their
/// own), from a leaf path under each child (`left`, `right`), each subtree already checked to
/// hold only leaves whose paths lead to it: the left one's bit at this node's depth must be 0,
/// the right one's 1, and the two must agree above it. Otherwise a leaf is stored off the place
/// its path leads to, which hashes the reader trusts would not show and which breaks the
/// registers' path order (`bad_path_order` at the node, `at`).
pub(super) fn path_under(
    file: &FsPath,
    at: u64,
    height: u16,
    left: Option<Path>,
    right: Option<Path>,
) -> CpResult<Path> {
    let depth = usize::from(MAX_HEIGHT - height);
    let off = |why: String| CheckpointError::new(file, at, "bad_path_order", why);
    if let Some(l) = left.filter(|l| l.bit(depth) != 0) {
        return Err(off(format!(
            "leaf path {} lies under the left child of a node at depth {depth}",
            l.to_hex()
        )));
    }
    if let Some(r) = right.filter(|r| r.bit(depth) != 1) {
        return Err(off(format!(
            "leaf path {} lies under the right child of a node at depth {depth}",
            r.to_hex()
        )));
    }
    match (left, right) {
        (Some(l), Some(r)) => {
            if (0..depth).any(|b| l.bit(b) != r.bit(b)) {
                return Err(off(format!(
                    "leaf paths {} and {} under one node at depth {depth} differ above it",
                    l.to_hex(),
                    r.to_hex()
                )));
            }
            Ok(l)
        }
        (Some(p), None) | (None, Some(p)) => Ok(p),
        (None, None) => Err(CheckpointError::new(
            file,
            at,
            "bad_node",
            "interior node without children",
        )),
    }
}

/// The subtrie position (part index) a path leads to.
pub(super) fn subtrie_position(path: &Path) -> usize {
    usize::from(path.0[0] >> (8 - SUBTRIE_LEVEL))
}

/// The node of record `raw` (its fields at `at`), its height checked against its children's
/// and, as `verify` asks, its stored hash against its contents'. Errors name the field.
pub(super) fn build_node(
    file: &FsPath,
    at: NodeFields,
    raw: RawNode,
    left: Option<Arc<Node>>,
    right: Option<Arc<Node>>,
    verify: Verify,
) -> CpResult<Arc<Node>> {
    let (height, stored) = match &raw {
        RawNode::Leaf { height, hash, .. } | RawNode::Interior { height, hash, .. } => {
            (*height, *hash)
        }
    };
    if height > MAX_HEIGHT {
        return Err(CheckpointError::new(
            file,
            at.height,
            "bad_height",
            format!("node height {height} > {MAX_HEIGHT}"),
        ));
    }
    for c in [&left, &right].into_iter().flatten() {
        if c.height() + 1 != height {
            return Err(CheckpointError::new(
                file,
                at.height,
                "bad_height",
                format!(
                    "node of height {height} has a child of height {}",
                    c.height()
                ),
            ));
        }
    }
    if let RawNode::Interior { .. } = &raw {
        if left.is_none() && right.is_none() {
            return Err(CheckpointError::new(
                file,
                at.start,
                "bad_node",
                "interior node without children",
            ));
        }
    }
    let check = match verify {
        Verify::None => false,
        Verify::Interior => matches!(raw, RawNode::Interior { .. }),
        Verify::Full => true,
    };
    if check {
        let computed = computed_hash(
            height,
            &raw,
            left.as_ref().map(|n| n.hash()),
            right.as_ref().map(|n| n.hash()),
        );
        if computed != stored {
            return Err(CheckpointError {
                offset: at.hash,
                ..CheckpointError::hash_mismatch(file, at.start, stored, computed)
            });
        }
    }
    Ok(Arc::new(match raw {
        RawNode::Leaf { height, hash, reg } => Node::Leaf { height, reg, hash },
        RawNode::Interior { height, hash, .. } => Node::Interior {
            height,
            left,
            right,
            hash,
        },
    }))
}

/// How much of a part's hashing to redo while reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verify {
    /// Trust the stored hashes (the part was verified elsewhere); CRCs and order still checked.
    None,
    /// Recompute interior hashes from the children (one hash per interior node); trust the
    /// stored leaf hashes, whose recomputation costs one hash per level of the leaf's height.
    Interior,
    /// Recompute every hash, leaves from their values (`ComputeCompactValue`) included.
    Full,
}

/// What [`verify_part`] found in one subtrie part.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PartInfo {
    pub index: usize,
    pub nodes: u64,
    pub leaves: u64,
    pub bytes: u64,
    /// Keccak-f[1600] permutations the hash checks of this part ran (0 when trusted).
    pub permutations: u64,
}

/// The tries of a checkpoint, in file order.
#[derive(Debug)]
pub struct Loaded {
    pub tries: Vec<Trie>,
    pub parts: Vec<PartInfo>,
    pub top_nodes: u64,
}

pub(super) fn version_bytes(magic: u16) -> [u8; 4] {
    let mut b = [0u8; 4];
    b[..2].copy_from_slice(&magic.to_be_bytes());
    b[2..].copy_from_slice(&VERSION_V6.to_be_bytes());
    b
}

pub(super) fn encode_leaf(
    out: &mut Vec<u8>,
    height: u16,
    hash: &Hash,
    path: &Path,
    payload: PayloadRef<'_>,
) {
    out.clear();
    out.push(NODE_LEAF);
    out.extend_from_slice(&height.to_be_bytes());
    out.extend_from_slice(&hash.0);
    out.extend_from_slice(&path.0);
    let plen = 8 + payload.key.len() + payload.value.len();
    out.extend_from_slice(&(plen as u32).to_be_bytes());
    out.extend_from_slice(&(payload.key.len() as u32).to_be_bytes());
    out.extend_from_slice(payload.key);
    out.extend_from_slice(&(payload.value.len() as u32).to_be_bytes());
    out.extend_from_slice(payload.value);
}

pub(super) fn encode_interior(out: &mut Vec<u8>, height: u16, hash: &Hash, left: u64, right: u64) {
    out.clear();
    out.push(NODE_INTERIOR);
    out.extend_from_slice(&height.to_be_bytes());
    out.extend_from_slice(&hash.0);
    out.extend_from_slice(&left.to_be_bytes());
    out.extend_from_slice(&right.to_be_bytes());
}

pub(super) fn encode_trie_record(
    out: &mut Vec<u8>,
    root_index: u64,
    count: u64,
    size: u64,
    root: &Hash,
) {
    out.extend_from_slice(&root_index.to_be_bytes());
    out.extend_from_slice(&count.to_be_bytes());
    out.extend_from_slice(&size.to_be_bytes());
    out.extend_from_slice(&root.0);
}

/// The top part (`.016`) opened: its reader positioned after the subtrie node count, and the
/// counts of its footer, each checked to fit the bytes it claims.
pub(super) struct TopPart {
    pub(super) file: PathBuf,
    pub(super) r: PartReader,
    pub(super) footer: Vec<u8>,
    pub(super) top_count: u64,
    pub(super) trie_count: u64,
}

/// One trie record of the top part (`at`: its start).
pub(super) struct TrieRecord {
    pub(super) at: u64,
    pub(super) root_index: u64,
    pub(super) reg_count: u64,
    pub(super) reg_size: u64,
    pub(super) root_hash: Hash,
}

/// Opens the top part of checkpoint `name` and checks its subtrie node count against `total`,
/// what the parts hold. On a mismatch `on_count_mismatch` runs first: a reader that has not
/// checked the parts' checksums yet checks them there, since a part's count may be the damaged
/// one.
pub(super) fn open_top(
    dir: &FsPath,
    name: &str,
    expected_crc: u32,
    total: u64,
    on_count_mismatch: impl FnOnce() -> CpResult<()>,
) -> CpResult<TopPart> {
    let file = dir.join(part_name(name, TOP_PART));
    let (mut r, footer) = open_part(&file, MAGIC_TOPTRIE, 10, expected_crc)?;
    let top_count = u64::from_be_bytes(footer[..8].try_into().expect("8 bytes"));
    let trie_count = u16::from_be_bytes([footer[8], footer[9]]) as u64;
    let stored_total = r.u64("subtrie node count")?;
    if stored_total != total {
        on_count_mismatch()?;
        return Err(CheckpointError::new(
            &file,
            4,
            "bad_count",
            format!(
                "mismatch subtrie node count: top part says {stored_total}, parts hold {total}"
            ),
        ));
    }
    let room = r.end.saturating_sub(r.offset);
    if trie_count * TRIE_RECORD_LEN > room {
        return Err(CheckpointError::new(
            &file,
            r.end,
            "bad_count",
            format!("{trie_count} trie records cannot fit in {room} bytes"),
        ));
    }
    check_count(&file, r.end, top_count, room - trie_count * TRIE_RECORD_LEN)?;
    Ok(TopPart {
        file,
        r,
        footer,
        top_count,
        trie_count,
    })
}

/// The next top-part node, global index `global`: its children must come before it
/// (descendants first), `bad_child_index` at the child's field otherwise.
pub(super) fn read_top_node(r: &mut PartReader, global: u64) -> CpResult<(u64, RawNode)> {
    let (at, raw) = read_node(r)?;
    if let RawNode::Interior { left, right, .. } = &raw {
        let fields = NodeFields::v6(at);
        for (c, field) in [(*left, fields.left), (*right, fields.right)] {
            if c >= global {
                return Err(CheckpointError::new(
                    &r.file,
                    field,
                    "bad_child_index",
                    format!(
                        "node {global} has child index {c}: does not satisfy descendants-first order"
                    ),
                ));
            }
        }
    }
    Ok((at, raw))
}

/// The next trie record of the top part.
pub(super) fn read_trie_record(r: &mut PartReader) -> CpResult<TrieRecord> {
    Ok(TrieRecord {
        at: r.offset,
        root_index: r.u64("trie root index")?,
        reg_count: r.u64("trie register count")?,
        reg_size: r.u64("trie register size")?,
        root_hash: Hash(r.hash("trie root hash")?),
    })
}
