//! Flow checkpoint files of versions 1, 3, 4 and 5: one file holding the whole forest, read as
//! flow-go v0.33.1 reads them (`wal/checkpointer.go` `readCheckpointV3AndEarlier`,
//! `readCheckpointV4`, `readCheckpointV5`; `mtrie/flattener/encoding_v3.go`, `encoding_v4.go`,
//! `encoding.go`), into the same in-memory tries as a v6 read.
//!
//! ```text
//! v1, v3: | 2137 | ver | nodes u64 | tries u16 | node* | trie* | (v3: CRC u32) |
//! v4, v5: | 2137 | ver | node* | trie* | nodes u64 | tries u16 | CRC u32 |
//! v1/v3 node: | 0000 | height u16 | left u64 | right u64 | max depth u16 | reg count u64 |
//!             | path: u16 len + bytes | payload: u32 len + bytes | hash: u16 len + bytes |
//!             (a leaf has a path; its payload is `0000 | 06 | payload v0/v1`, empty = none)
//! v1/v3 trie: | 0000 | root index u64 | root hash: u16 len + bytes |
//! v4 node:    | type u8 | height u16 | max depth u16 | reg count u64 | hash |
//!             leaf: | path | u32 len | payload v0 | ; interior: | left u64 | right u64 |
//! v4 trie:    | root index u64 | root hash |
//! v5 node, v5 trie: as v6 (`checkpoint::read_node`, the v6 trie record)
//! payload v0: | key len u32 | key | value len u64 | value |   (v1: value len u32)
//! ```
//!
//! The CRC-32C (v3 on, Castagnoli like v6) covers every byte before it. As in v6 reads, and
//! unlike flow-go, every node hash is recomputed from the leaf values up and every root
//! compared with its record. The register count and size of a v1/v3/v4 trie are summed over
//! its leaves as flow-go sums them (one per leaf, `Payload.Size()` = key + value bytes); v5
//! records them. flow-go ignores bytes after a v1 file's last trie; they are an error here.

use super::error::{CheckpointError, CpResult};
use super::format::{
    build_node, check_count, finish_part, read_node, Loaded, NodeFields, PartInfo, PartReader,
    RawNode, Verify, MAGIC_HEADER,
};
use crate::flow::hash::{empty_root, Hash, Path, MAX_HEIGHT};
use crate::flow::mtrie::Trie;
use crate::flow::node::{Node, Register};
use crate::flow::record::Payload;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path as FsPath;
use std::sync::Arc;

const V1: u16 = 1;
const V3: u16 = 3;
const V4: u16 = 4;
const V5: u16 = 5;
/// `nodes u64 | tries u16` (v1/v3 after the magic, v4/v5 before the CRC).
const COUNTS_LEN: u64 = 8 + 2;
const CRC_LEN: u64 = 4;
/// flow-go's node/trie encoding version inside v1/v3 records (`encodingDecodingVersion`).
const V3_RECORD_VERSION: u16 = 0;
/// `ledger.PayloadVersion` and `ledger.TypePayload`: the prefix of a v1/v3 leaf payload.
const PAYLOAD_VERSION_MAX: u16 = 1;
const TYPE_PAYLOAD: u8 = 6;
const NODE_LEAF: u8 = 0;
const NODE_INTERIOR: u8 = 1;

/// A node read so far with flow-go's register metrics (v1/v3/v4 tries take theirs from them).
struct Stored {
    node: Arc<Node>,
    reg_count: u64,
    reg_size: u64,
}

/// Decodes a payload without its prefix in encoding `version` (0: value length u64, 1: u32).
/// Bytes after the value are ignored, as flow-go's `decodePayload` ignores them. Errors are
/// `bad_payload` at `payload_at` of `r`'s file (where the payload starts).
fn decode_payload(data: &[u8], version: u16, r: &PartReader, payload_at: u64) -> CpResult<Payload> {
    let take = |at: usize, n: usize, what: &str| {
        data.get(at..at + n).ok_or_else(|| {
            payload_error(
                r,
                payload_at,
                format!("payload ends inside its {what} ({n} bytes at {at})"),
            )
        })
    };
    let klen = u32::from_be_bytes(take(0, 4, "key length")?.try_into().expect("4")) as usize;
    let key = take(4, klen, "key")?.to_vec();
    let at = 4 + klen;
    let (vlen, at) = if version == 0 {
        let v = u64::from_be_bytes(take(at, 8, "value length")?.try_into().expect("8"));
        (usize::try_from(v).unwrap_or(usize::MAX), at + 8)
    } else {
        let v = u32::from_be_bytes(take(at, 4, "value length")?.try_into().expect("4"));
        (v as usize, at + 4)
    };
    if vlen > data.len() - at {
        return Err(payload_error(
            r,
            payload_at,
            format!(
                "payload value of {vlen} bytes at {at} runs past its {} bytes",
                data.len()
            ),
        ));
    }
    Ok(Payload::new(key, data[at..at + vlen].to_vec()))
}

fn payload_error(r: &PartReader, at: u64, message: String) -> CheckpointError {
    CheckpointError::new(&r.file, at, "bad_payload", message)
}

/// `u16 length | bytes` (flow-go `ReadShortDataFromReader`).
fn short_data(r: &mut PartReader, what: &str) -> CpResult<Vec<u8>> {
    let n = r.u16(what)? as usize;
    r.vec(n, what)
}

fn fixed32(r: &PartReader, at: u64, data: Vec<u8>, what: &str) -> CpResult<[u8; 32]> {
    let n = data.len();
    data.try_into().map_err(|_| {
        CheckpointError::new(
            &r.file,
            at,
            "bad_length",
            format!("{what} of {n} bytes, expected 32"),
        )
    })
}

/// One v1/v3 node record: where its fields lie (the hash: its 32 bytes after their length)
/// and the node with its child indices.
fn read_node_v3(r: &mut PartReader) -> CpResult<(NodeFields, RawNode)> {
    let at = r.offset;
    let version = r.u16("node encoding version")?;
    if version > V3_RECORD_VERSION {
        return Err(CheckpointError::new(
            &r.file,
            at,
            "unsupported_version",
            format!("node encoding version {version} (> {V3_RECORD_VERSION})"),
        ));
    }
    let height = r.u16("node height")?;
    let left = r.u64("left child index")?;
    let right = r.u64("right child index")?;
    r.u16("max depth")?;
    r.u64("register count")?;
    let path_at = r.offset;
    let path = short_data(r, "leaf path")?;
    let payload_at = r.offset;
    let n = r.u32("payload length")? as usize;
    let encoded = r.vec(n, "payload")?;
    let hash_at = r.offset;
    let hash = short_data(r, "node hash")?;
    let hash = Hash(fixed32(r, hash_at, hash, "node hash")?);
    let fields = NodeFields {
        start: at,
        height: at + 2,
        hash: hash_at + 2,
        left: at + 4,
        right: at + 12,
    };
    if path.is_empty() {
        return Ok((
            fields,
            RawNode::Interior {
                height,
                hash,
                left,
                right,
            },
        ));
    }
    let path = Path(fixed32(r, path_at, path, "leaf path")?);
    let payload = if encoded.is_empty() {
        Payload::default()
    } else {
        if encoded.len() < 3 {
            return Err(payload_error(
                r,
                payload_at + 4,
                "payload shorter than its prefix".into(),
            ));
        }
        let version = u16::from_be_bytes([encoded[0], encoded[1]]);
        if version > PAYLOAD_VERSION_MAX || encoded[2] != TYPE_PAYLOAD {
            return Err(payload_error(
                r,
                payload_at + 4,
                format!(
                    "payload prefix: version {version}, type {} (expected <= {PAYLOAD_VERSION_MAX}, {TYPE_PAYLOAD})",
                    encoded[2]
                ),
            ));
        }
        decode_payload(&encoded[3..], version, r, payload_at + 4)?
    };
    Ok((
        fields,
        RawNode::Leaf {
            height,
            hash,
            reg: Register::new(path, payload.view()),
        },
    ))
}

/// One v4 node record: where its fields lie and the node.
fn read_node_v4(r: &mut PartReader) -> CpResult<(NodeFields, RawNode)> {
    let at = r.offset;
    let typ = r.u8("node type")?;
    let height = r.u16("node height")?;
    r.u16("max depth")?;
    r.u64("register count")?;
    let fields = NodeFields {
        start: at,
        height: at + 1,
        hash: at + 13,
        left: at + 45,
        right: at + 53,
    };
    let hash = Hash(r.hash("node hash")?);
    match typ {
        NODE_LEAF => {
            let path = Path(r.hash("leaf path")?);
            let payload_at = r.offset;
            let n = r.u32("payload length")? as usize;
            let encoded = r.vec(n, "payload")?;
            let payload = if encoded.is_empty() {
                Payload::default()
            } else {
                decode_payload(&encoded, 0, r, payload_at + 4)?
            };
            Ok((
                fields,
                RawNode::Leaf {
                    height,
                    hash,
                    reg: Register::new(path, payload.view()),
                },
            ))
        }
        NODE_INTERIOR => {
            let left = r.u64("left child index")?;
            let right = r.u64("right child index")?;
            Ok((
                fields,
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

/// The node a trie record points at (index 0: the empty trie), its hash checked against the
/// record's and its height against a root's.
fn trie_root<'a>(
    r: &PartReader,
    at: u64,
    hash_at: u64,
    nodes: &'a [Stored],
    index: u64,
    stored: Hash,
) -> CpResult<Option<&'a Stored>> {
    let node = match index {
        0 => None,
        i => Some(nodes.get((i - 1) as usize).ok_or_else(|| {
            CheckpointError::new(
                &r.file,
                at,
                "bad_child_index",
                format!("trie root index {i} is not a stored node"),
            )
        })?),
    };
    let actual = node.map_or_else(empty_root, |s| s.node.hash());
    if actual != stored {
        return Err(CheckpointError::new(
            &r.file,
            hash_at,
            "root_mismatch",
            format!(
                "trie record root hash {} but its root node hashes to {}",
                stored.to_hex(),
                actual.to_hex()
            ),
        ));
    }
    if let Some(s) = node.filter(|s| s.node.height() != MAX_HEIGHT) {
        return Err(CheckpointError::new(
            &r.file,
            at,
            "bad_height",
            format!(
                "trie root node has height {}, expected 256",
                s.node.height()
            ),
        ));
    }
    Ok(node)
}

/// Reads the whole file at `file`, of single-file `version` (1, 3, 4 or 5; the caller read
/// the magic), every node hash recomputed (leaves from their values). Errors name the version.
pub fn load(file: &FsPath, version: u16) -> CpResult<Loaded> {
    load_version(file, version).map_err(|mut e| {
        e.message = format!("version {version} checkpoint: {}", e.message);
        e
    })
}

fn load_version(file: &FsPath, version: u16) -> CpResult<Loaded> {
    if ![V1, V3, V4, V5].contains(&version) {
        return Err(CheckpointError::new(
            file,
            2,
            "unsupported_version",
            "not a single-file checkpoint version",
        ));
    }
    let mut f = File::open(file).map_err(|e| CheckpointError::io(file, 0, &e))?;
    let len = f
        .metadata()
        .map_err(|e| CheckpointError::io(file, 0, &e))?
        .len();
    let has_crc = version != V1;
    let trailer = match version {
        V1 => 0,
        V3 => CRC_LEN,
        _ => COUNTS_LEN + CRC_LEN,
    };
    let head = 4 + if version <= V3 { COUNTS_LEN } else { 0 };
    if len < head + trailer {
        return Err(CheckpointError::new(
            file,
            len,
            "truncated",
            format!(
                "version {version} checkpoint of {len} bytes is shorter than its header and footer"
            ),
        ));
    }
    let end = len - trailer;
    // v4/v5: the counts sit in the footer, read first (as flow-go does) and again in order
    // for the CRC.
    let mut footer = vec![0u8; trailer as usize];
    f.seek(SeekFrom::Start(end))
        .and_then(|_| f.read_exact(&mut footer))
        .and_then(|_| f.seek(SeekFrom::Start(0)))
        .map_err(|e| CheckpointError::io(file, end, &e))?;
    let mut r = PartReader::new(file, f, 0, end);
    let magic = r.u16("magic")?;
    let got = r.u16("version")?;
    if magic != MAGIC_HEADER || got != version {
        return Err(CheckpointError::new(
            file,
            0,
            "bad_magic",
            format!("expected magic {MAGIC_HEADER:04x} version {version}, got {magic:04x} {got}"),
        ));
    }
    let (node_count, trie_count) = if version <= V3 {
        (r.u64("node count")?, r.u16("trie count")?)
    } else {
        (
            u64::from_be_bytes(footer[..8].try_into().expect("8 bytes")),
            u16::from_be_bytes([footer[8], footer[9]]),
        )
    };
    // Every record kind is longer than a v6 interior node: a bound on a corrupt count.
    check_count(
        file,
        if version <= V3 { 4 } else { end },
        node_count,
        end - r.offset,
    )?;
    let mut nodes: Vec<Stored> = Vec::with_capacity(node_count as usize);
    let mut leaves = 0u64;
    for i in 1..=node_count {
        let (at, raw) = match version {
            V1 | V3 => read_node_v3(&mut r)?,
            V4 => read_node_v4(&mut r)?,
            _ => read_node(&mut r).map(|(at, raw)| (NodeFields::v6(at), raw))?,
        };
        let (li, ri) = match &raw {
            RawNode::Interior { left, right, .. } => (*left, *right),
            RawNode::Leaf { .. } => (0, 0),
        };
        let child = |c: u64, field: u64| -> CpResult<Option<&Stored>> {
            if c >= i {
                return Err(CheckpointError::new(
                    file,
                    field,
                    "bad_child_index",
                    format!(
                        "node {i} has child index {c}: does not satisfy descendants-first order"
                    ),
                ));
            }
            Ok((c > 0).then(|| &nodes[(c - 1) as usize]))
        };
        let (l, rt) = (child(li, at.left)?, child(ri, at.right)?);
        let (reg_count, reg_size) = match &raw {
            RawNode::Leaf { reg, .. } => {
                leaves += 1;
                (1, reg.payload().size())
            }
            RawNode::Interior { .. } => {
                let m = |s: Option<&Stored>| s.map_or((0, 0), |s| (s.reg_count, s.reg_size));
                let ((lc, ls), (rc, rs)) = (m(l), m(rt));
                (lc + rc, ls + rs)
            }
        };
        let (l, rt) = (l.map(|s| s.node.clone()), rt.map(|s| s.node.clone()));
        let node = build_node(file, at, raw, l, rt, Verify::Full)?;
        nodes.push(Stored {
            node,
            reg_count,
            reg_size,
        });
    }
    let mut tries = Vec::with_capacity(trie_count as usize);
    for _ in 0..trie_count {
        let at = r.offset;
        let trie = match version {
            V1 | V3 => {
                let v = r.u16("trie encoding version")?;
                if v > V3_RECORD_VERSION {
                    return Err(CheckpointError::new(
                        file,
                        at,
                        "unsupported_version",
                        format!("trie encoding version {v} (> {V3_RECORD_VERSION})"),
                    ));
                }
                let index = r.u64("trie root index")?;
                let hash_at = r.offset;
                let hash = short_data(&mut r, "trie root hash")?;
                let hash = Hash(fixed32(&r, hash_at, hash, "trie root hash")?);
                // A wrong root hash is named at its 32 bytes, after their length.
                let root = trie_root(&r, at, hash_at + 2, &nodes, index, hash)?;
                Trie {
                    root: root.map(|s| s.node.clone()),
                    reg_count: root.map_or(0, |s| s.reg_count),
                    reg_size: root.map_or(0, |s| s.reg_size),
                }
            }
            V4 => {
                let index = r.u64("trie root index")?;
                let hash_at = r.offset;
                let hash = Hash(r.hash("trie root hash")?);
                let root = trie_root(&r, at, hash_at, &nodes, index, hash)?;
                Trie {
                    root: root.map(|s| s.node.clone()),
                    reg_count: root.map_or(0, |s| s.reg_count),
                    reg_size: root.map_or(0, |s| s.reg_size),
                }
            }
            _ => {
                let index = r.u64("trie root index")?;
                let reg_count = r.u64("trie register count")?;
                let reg_size = r.u64("trie register size")?;
                let hash_at = r.offset;
                let hash = Hash(r.hash("trie root hash")?);
                let root = trie_root(&r, at, hash_at, &nodes, index, hash)?;
                Trie {
                    root: root.map(|s| s.node.clone()),
                    reg_count,
                    reg_size,
                }
            }
        };
        tries.push(trie);
    }
    if has_crc {
        // The footer's bytes (v4/v5 counts) complete the CRC; the last 4 bytes hold it.
        let split = footer.len() - CRC_LEN as usize;
        let stored = u32::from_be_bytes(footer[split..].try_into().expect("4 bytes"));
        finish_part(&r, &footer[..split], stored)?;
    } else if r.offset != end {
        return Err(CheckpointError::new(
            file,
            r.offset,
            "trailing_bytes",
            format!(
                "the last trie record ends at {} but the file at {end}",
                r.offset
            ),
        ));
    }
    Ok(Loaded {
        tries,
        parts: vec![PartInfo {
            index: 0,
            nodes: node_count,
            leaves,
            bytes: len,
            permutations: 0,
        }],
        top_nodes: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::checkpoint::count_registers;

    /// The roots flow-go's `checkpointer_versioning_test.go` publishes for its `test_data`
    /// files (the same four tries in each version).
    const ROOTS: [&str; 4] = [
        "568f4ec740fe3b5de88034cb7b1fbddb41548b068f31aebc8ae9189e429c5749",
        "f53f9696b85b7428227f1b39f40b2ce07c175f58dea2b86cb6f84dc7c9fbeabd",
        "7ac8daf34733cce3d5d03b5a1afde33a572249f81c45da91106412e94661e109",
        "63df641430e5e0745c3d99ece6ac209467ccfdb77e362e7490a830db8e8803ae",
    ];

    fn vendor(name: &str) -> std::path::PathBuf {
        FsPath::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/data/flow_checkpoints")
            .join(name)
    }

    fn roots(l: &Loaded) -> Vec<String> {
        l.tries.iter().map(|t| t.root_hash().to_hex()).collect()
    }

    #[test]
    fn flow_go_test_data_gives_the_published_roots() {
        let all = [
            ("checkpoint.v1", V1),
            ("checkpoint.v3", V3),
            ("checkpoint.v4", V4),
            ("checkpoint.v5", V5),
        ];
        for (name, version) in all {
            let l = load(&vendor(name), version).unwrap();
            assert_eq!(roots(&l), ROOTS, "{name}");
            // flow-go's AllocatedRegCount / AllocatedRegSize of the same files (the oracle's
            // `read-checkpoint`): payloads of 10 bytes (encoded key + value).
            let counts: Vec<(u64, u64)> =
                l.tries.iter().map(|t| (t.reg_count, t.reg_size)).collect();
            assert_eq!(counts, [(0, 0), (2, 20), (4, 40), (4, 40)], "{name}");
            let walked: Vec<u64> = l
                .tries
                .iter()
                .map(|t| count_registers(t).unwrap())
                .collect();
            assert_eq!(walked, [0, 2, 4, 4], "{name}");
        }
    }

    /// Through `checkpoint::load`'s dispatch on the version.
    #[test]
    fn load_dispatches_on_the_version() {
        let dir = vendor("");
        let l = crate::flow::checkpoint::load(&dir, "checkpoint.v4", 1, Verify::Full).unwrap();
        assert_eq!(roots(&l), ROOTS);
    }

    /// Every flipped byte and every truncation of the vendor files is an error naming the
    /// file (v1 has no checksum: its hashes, lengths and counts catch what they can; a flip
    /// in a length-prefixed field that flow-go ignores, like max depth, passes).
    #[test]
    fn damaged_files_give_the_file_and_offset() {
        let tmp = std::env::temp_dir().join(format!("rechain-legacy-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        let all = [
            ("checkpoint.v1", V1),
            ("checkpoint.v3", V3),
            ("checkpoint.v4", V4),
            ("checkpoint.v5", V5),
        ];
        for (name, version) in all {
            let good = std::fs::read(vendor(name)).unwrap();
            let f = tmp.join(name);
            for cut in 0..good.len() {
                std::fs::write(&f, &good[..cut]).unwrap();
                let e = load(&f, version).unwrap_err();
                assert!(
                    e.file.ends_with(name) && e.offset <= cut as u64,
                    "{name} cut {cut}: {e}"
                );
            }
            let mut caught = 0;
            for at in 4..good.len() {
                let mut bad = good.clone();
                bad[at] ^= 0x10;
                std::fs::write(&f, &bad).unwrap();
                match load(&f, version) {
                    Err(e) => {
                        assert!(e.file.ends_with(name), "{e}");
                        caught += 1;
                    }
                    // Only v1 (no CRC) can pass a flip, and then with the same roots.
                    Ok(l) => {
                        assert_eq!(version, V1, "{name} flip at {at} passed");
                        assert_eq!(roots(&l), ROOTS, "{name} flip at {at}");
                    }
                }
            }
            if version != V1 {
                assert_eq!(caught, good.len() - 4, "{name}");
            }
            let mut longer = good.clone();
            longer.push(0);
            std::fs::write(&f, &longer).unwrap();
            assert!(load(&f, version).is_err(), "{name} with a trailing byte");
        }
        std::fs::remove_dir_all(&tmp).unwrap();
    }

    /// The node records of a vendor file (§5.8), walked here from the format: (start, end,
    /// is interior).
    fn node_records(b: &[u8], version: u16) -> Vec<(usize, usize, bool)> {
        let u = |at: usize, n: usize| {
            b[at..at + n]
                .iter()
                .fold(0usize, |v, &x| (v << 8) | usize::from(x))
        };
        let (mut at, count) = if version <= V3 {
            (14, u(4, 8))
        } else {
            (4, u(b.len() - 14, 8))
        };
        let mut nodes = Vec::new();
        for _ in 0..count {
            let (interior, len) = match version {
                // version, height, left, right, max depth, reg count; path, payload, hash.
                V1 | V3 => {
                    let path = at + 30;
                    let payload = path + 2 + u(path, 2);
                    let hash = payload + 4 + u(payload, 4);
                    (u(path, 2) == 0, hash + 2 + u(hash, 2) - at)
                }
                // type, height, max depth, reg count, hash; children or path and payload.
                V4 if b[at] == 1 => (true, 45 + 16),
                V4 => (false, 45 + 32 + 4 + u(at + 77, 4)),
                _ if b[at] == 1 => (true, 51),
                _ => (false, 71 + u(at + 67, 4)),
            };
            nodes.push((at, at + len, interior));
            at += len;
        }
        nodes
    }

    /// A node's stored hash, its height and its child indices are named at their own fields
    /// in every version: v1/v3 `| ver u16 | height u16 | left u64 | right u64 | ... | hash
    /// (u16 length, 32 bytes) |`, v4 `| type | height u16 | max depth u16 | reg count u64 |
    /// hash | left u64 | right u64 |`, v5 as v6.
    #[test]
    fn damage_is_named_at_the_node_field() {
        let tmp = std::env::temp_dir().join(format!("rechain-legacy-at-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        for (name, version, height, left, right) in [
            ("checkpoint.v1", V1, 2, 4, 12),
            ("checkpoint.v3", V3, 2, 4, 12),
            ("checkpoint.v4", V4, 1, 45, 53),
            ("checkpoint.v5", V5, 1, 35, 43),
        ] {
            let good = std::fs::read(vendor(name)).unwrap();
            let nodes = node_records(&good, version);
            assert_eq!(nodes.len(), 11, "{name}");
            let f = tmp.join(name);
            let fail = |bad: &[u8]| {
                std::fs::write(&f, bad).unwrap();
                let e = load(&f, version).unwrap_err();
                assert!(e.file.ends_with(name), "{e}");
                (e.kind, e.offset as usize)
            };
            // Each node's hash: a flipped byte in its middle.
            for (i, &(at, end, _)) in nodes.iter().enumerate() {
                let hash = match version {
                    V1 | V3 => end - 32,
                    V4 => at + 13,
                    _ => at + 3,
                };
                let mut bad = good.clone();
                bad[hash + 16] ^= 0x10;
                assert_eq!(fail(&bad), ("hash_mismatch", hash), "{name} node {i}");
            }
            // The first node's height above 256.
            let (first, ..) = nodes[0];
            let mut bad = good.clone();
            bad[first + height] ^= 0x10;
            assert_eq!(fail(&bad), ("bad_height", first + height), "{name}");
            // The first interior node's child indices, each past the node itself.
            let (interior, ..) = *nodes.iter().find(|n| n.2).unwrap();
            for field in [left, right] {
                let mut bad = good.clone();
                bad[interior + field..interior + field + 8].copy_from_slice(&[0xff; 8]);
                assert_eq!(fail(&bad), ("bad_child_index", interior + field), "{name}");
            }
        }
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
