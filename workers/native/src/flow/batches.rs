//! Arrow record batches for the Flow datasets (the decoders above know nothing of Arrow).
//!
//! `wal_records` (one row per WAL record, from [`RecordsBuilder`]):
//!
//! | column        | type                        | meaning                                          |
//! |---------------|-----------------------------|--------------------------------------------------|
//! | `segment`     | uint64                      | segment number                                   |
//! | `index`       | uint32                      | record number inside the segment (0-based)       |
//! | `offset`      | uint64                      | byte offset of the record's first fragment       |
//! | `op`          | utf8                        | `update` or `delete`                             |
//! | `parent_root` | utf8 (64 lower-case hex)    | update: parent root; delete: the deleted root    |
//! | `n_paths`     | uint32                      | paths in the record (before de-duplication)      |
//! | `paths`       | list<fixed_size_binary[32]> | register paths, record order                     |
//! | `encoded_keys`| list<binary>                | `Payload.EncodedKey()` per path                  |
//! | `owners`      | list<binary> (null items)   | key part of type 0; null if the key is malformed |
//! | `keys`        | list<binary> (null items)   | key part of type 2; null if absent or malformed  |
//! | `values`      | list<binary>                | register values; empty = delete                  |
//!
//! Delete records have empty lists. The published tables' schemas are defined here and only
//! here (Python asks `flow_table_schema`); every column is nullable, as pyarrow writes them.
//!
//! `registers` (current payloads of a trie, path order, from [`registers_batch`]): `path`
//! fixed_size_binary[32], `owner` binary (null if absent), `key` binary (null if absent),
//! `value_size` uint64, `value` binary, `encoded_key` binary.
//!
//! `register_hashes` (same rows and order as `registers`, from [`leaf_hashes_batch`]): `path`
//! fixed_size_binary[32], `height` uint16 (the leaf node's height in the trie), `leaf_hash`
//! fixed_size_binary[32] (`HashLeaf(path, value)`), `node_hash` fixed_size_binary[32] (the
//! compact leaf hash at that height, the chain a checkpoint writer would otherwise recompute).
//!
//! `checkpoint stats` tables (of [`super::register_stats`] values; key bytes are encoded keys):
//!
//! * `flow_checkpoint_tries` (one row per trie read): `root` utf8 (hex), `reg_count` and
//!   `reg_size` uint64 (the trie record's), `nodes`, `leaf_nodes`, `interim_nodes`,
//!   `registers` (leaves with a value), `key_bytes`, `value_bytes` uint64, `max_depth` uint16.
//! * `flow_checkpoint_depths`: `depth` uint16 (0 = root), `leaf_nodes`, `interim_nodes`
//!   uint64; one row per depth holding nodes.
//! * `flow_checkpoint_register_kinds`: `kind` utf8 (flow-go's register types), `registers`,
//!   `key_bytes`, `value_bytes`, `min_value_bytes`, `max_value_bytes` uint64.
//! * `flow_checkpoint_owners` (owner byte order): `owner` binary (null: keys without an owner
//!   part), then the same counts as the kinds.
//!
//! `trie_updates` (one row per WAL record applied, WAL order, from [`trie_updates_batch`]):
//! `seq` uint64 (0-based), `segment` uint64, `offset` uint64, `parent_root` utf8 (hex; a
//! delete's deleted root), `root` utf8 (hex; null for a delete), `n_paths` uint32, `op` utf8.

use super::hash::{hash_leaves, Hash, Path};
use super::node::{Node, Register};
use super::record::{Payload, TrieUpdate, WalRecord, KEY_PART_KEY, KEY_PART_OWNER};
use super::register_stats::{OwnerRow, Sizes, TrieStats};
use super::{ErrorKind, OutputError};
use crate::parquet_out::{Layout, RowGroups, TableWriter};
use arrow_array::builder::{
    ArrayBuilder, BinaryBuilder, FixedSizeBinaryBuilder, ListBuilder, StringBuilder, UInt16Builder,
    UInt32Builder, UInt64Builder,
};
use arrow_array::cast::AsArray;
use arrow_array::types::{UInt32Type, UInt64Type};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use std::path::Path as FsPath;
use std::sync::Arc;

fn list_of(item: DataType, nullable: bool) -> DataType {
    DataType::List(Arc::new(Field::new("item", item, nullable)))
}

pub fn records_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("segment", DataType::UInt64, false),
        Field::new("index", DataType::UInt32, false),
        Field::new("offset", DataType::UInt64, false),
        Field::new("op", DataType::Utf8, false),
        Field::new("parent_root", DataType::Utf8, false),
        Field::new("n_paths", DataType::UInt32, false),
        Field::new(
            "paths",
            list_of(DataType::FixedSizeBinary(32), false),
            false,
        ),
        Field::new("encoded_keys", list_of(DataType::Binary, false), false),
        Field::new("owners", list_of(DataType::Binary, true), false),
        Field::new("keys", list_of(DataType::Binary, true), false),
        Field::new("values", list_of(DataType::Binary, false), false),
    ]))
}

fn list_field(schema: &SchemaRef, i: usize) -> Arc<Field> {
    match schema.field(i).data_type() {
        DataType::List(f) => f.clone(),
        _ => unreachable!("column {i} of wal_records is a list"),
    }
}

/// Builds a `wal_records` batch, one record at a time.
pub struct RecordsBuilder {
    schema: SchemaRef,
    segment: UInt64Builder,
    index: UInt32Builder,
    offset: UInt64Builder,
    op: StringBuilder,
    parent_root: StringBuilder,
    n_paths: UInt32Builder,
    paths: ListBuilder<FixedSizeBinaryBuilder>,
    encoded_keys: ListBuilder<BinaryBuilder>,
    owners: ListBuilder<BinaryBuilder>,
    keys: ListBuilder<BinaryBuilder>,
    values: ListBuilder<BinaryBuilder>,
}

impl Default for RecordsBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl RecordsBuilder {
    pub fn new() -> Self {
        let schema = records_schema();
        RecordsBuilder {
            segment: UInt64Builder::new(),
            index: UInt32Builder::new(),
            offset: UInt64Builder::new(),
            op: StringBuilder::new(),
            parent_root: StringBuilder::new(),
            n_paths: UInt32Builder::new(),
            paths: ListBuilder::new(FixedSizeBinaryBuilder::new(32))
                .with_field(list_field(&schema, 6)),
            encoded_keys: ListBuilder::new(BinaryBuilder::new()).with_field(list_field(&schema, 7)),
            owners: ListBuilder::new(BinaryBuilder::new()).with_field(list_field(&schema, 8)),
            keys: ListBuilder::new(BinaryBuilder::new()).with_field(list_field(&schema, 9)),
            values: ListBuilder::new(BinaryBuilder::new()).with_field(list_field(&schema, 10)),
            schema,
        }
    }

    pub fn len(&self) -> usize {
        self.segment.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn push(&mut self, segment: u64, index: u32, offset: u64, rec: &WalRecord) {
        self.segment.append_value(segment);
        self.index.append_value(index);
        self.offset.append_value(offset);
        match rec {
            WalRecord::Update(u) => {
                self.op.append_value("update");
                self.parent_root.append_value(u.root.to_hex());
                self.n_paths.append_value(u.paths.len() as u32);
                for p in &u.paths {
                    self.paths
                        .values()
                        .append_value(p.0)
                        .expect("paths are 32 bytes");
                }
                for pl in &u.payloads {
                    self.encoded_keys.values().append_value(&pl.key);
                    let parts = pl.view().key_parts();
                    let part = |t: u16| {
                        parts
                            .as_ref()
                            .and_then(|ps| ps.iter().find(|(pt, _)| *pt == t).map(|(_, v)| *v))
                    };
                    self.owners.values().append_option(part(KEY_PART_OWNER));
                    self.keys.values().append_option(part(KEY_PART_KEY));
                    self.values.values().append_value(&pl.value);
                }
            }
            WalRecord::Delete(h) => {
                self.op.append_value("delete");
                self.parent_root.append_value(h.to_hex());
                self.n_paths.append_value(0);
            }
        }
        self.paths.append(true);
        self.encoded_keys.append(true);
        self.owners.append(true);
        self.keys.append(true);
        self.values.append(true);
    }

    pub fn finish(mut self) -> RecordBatch {
        let cols: Vec<ArrayRef> = vec![
            Arc::new(self.segment.finish()),
            Arc::new(self.index.finish()),
            Arc::new(self.offset.finish()),
            Arc::new(self.op.finish()),
            Arc::new(self.parent_root.finish()),
            Arc::new(self.n_paths.finish()),
            Arc::new(self.paths.finish()),
            Arc::new(self.encoded_keys.finish()),
            Arc::new(self.owners.finish()),
            Arc::new(self.keys.finish()),
            Arc::new(self.values.finish()),
        ];
        RecordBatch::try_new(self.schema, cols).expect("wal_records columns match the schema")
    }
}

/// One WAL record applied to the forest, as the `trie_updates` table keeps it (88 bytes; the
/// hex columns are made only when the table is written).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoggedUpdate {
    pub segment: u64,
    pub offset: u64,
    pub n_paths: u32,
    /// An update's parent root, or the root a delete record names.
    pub parent: Hash,
    /// The new root of an update; None for a delete.
    pub root: Option<Hash>,
}

impl LoggedUpdate {
    pub fn new(segment: u64, offset: u64, rec: &WalRecord, root: Option<Hash>) -> LoggedUpdate {
        let (parent, n_paths) = match rec {
            WalRecord::Update(u) => (u.root, u.paths.len() as u32),
            WalRecord::Delete(h) => (*h, 0),
        };
        LoggedUpdate {
            segment,
            offset,
            n_paths,
            parent,
            root,
        }
    }
}

pub fn trie_updates_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("seq", DataType::UInt64, true),
        Field::new("segment", DataType::UInt64, true),
        Field::new("offset", DataType::UInt64, true),
        Field::new("parent_root", DataType::Utf8, true),
        Field::new("root", DataType::Utf8, true),
        Field::new("n_paths", DataType::UInt32, true),
        Field::new("op", DataType::Utf8, true),
    ]))
}

/// A `trie_updates` batch of logged rows, the first numbered `seq0`.
pub fn trie_updates_batch(rows: &[LoggedUpdate], seq0: u64) -> RecordBatch {
    let n = rows.len();
    let mut seq = UInt64Builder::with_capacity(n);
    let mut segment = UInt64Builder::with_capacity(n);
    let mut offset = UInt64Builder::with_capacity(n);
    let mut parent = StringBuilder::with_capacity(n, n * 64);
    let mut root = StringBuilder::with_capacity(n, n * 64);
    let mut n_paths = UInt32Builder::with_capacity(n);
    let mut op = StringBuilder::with_capacity(n, n * 6);
    for (i, r) in rows.iter().enumerate() {
        seq.append_value(seq0 + i as u64);
        segment.append_value(r.segment);
        offset.append_value(r.offset);
        parent.append_value(r.parent.to_hex());
        root.append_option(r.root.map(|h| h.to_hex()));
        n_paths.append_value(r.n_paths);
        op.append_value(if r.root.is_some() { "update" } else { "delete" });
    }
    let cols: Vec<ArrayRef> = vec![
        Arc::new(seq.finish()),
        Arc::new(segment.finish()),
        Arc::new(offset.finish()),
        Arc::new(parent.finish()),
        Arc::new(root.finish()),
        Arc::new(n_paths.finish()),
        Arc::new(op.finish()),
    ];
    RecordBatch::try_new(trie_updates_schema(), cols).expect("trie_updates columns match")
}

/// One row of a `wal_records` batch read back for the forest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordRow {
    pub segment: u64,
    pub offset: u64,
    pub record: WalRecord,
}

/// A batch that is not the `wal_records` table it is given as: the caller's argument.
fn bad_batch(reason: String) -> ErrorKind {
    ErrorKind::Config { reason }
}

/// Reads a `wal_records` batch (only `segment`, `offset`, `op`, `parent_root`, `paths`,
/// `encoded_keys` and `values` are needed) back into typed records.
pub fn rows_from_batch(batch: &RecordBatch) -> Result<Vec<RecordRow>, ErrorKind> {
    let col = |name: &str| {
        batch
            .column_by_name(name)
            .ok_or_else(|| bad_batch(format!("wal_records batch lacks column {name}")))
    };
    let wrong = |name: &str| bad_batch(format!("wal_records column {name} has an unexpected type"));
    let segment = col("segment")?
        .as_primitive_opt::<UInt64Type>()
        .ok_or_else(|| wrong("segment"))?;
    let offset = col("offset")?
        .as_primitive_opt::<UInt64Type>()
        .ok_or_else(|| wrong("offset"))?;
    let op = col("op")?
        .as_string_opt::<i32>()
        .ok_or_else(|| wrong("op"))?;
    let parent = col("parent_root")?
        .as_string_opt::<i32>()
        .ok_or_else(|| wrong("parent_root"))?;
    let paths = col("paths")?
        .as_list_opt::<i32>()
        .ok_or_else(|| wrong("paths"))?;
    let keys = col("encoded_keys")?
        .as_list_opt::<i32>()
        .ok_or_else(|| wrong("encoded_keys"))?;
    let values = col("values")?
        .as_list_opt::<i32>()
        .ok_or_else(|| wrong("values"))?;
    let path_items = paths
        .values()
        .as_fixed_size_binary_opt()
        .ok_or_else(|| wrong("paths"))?;
    let key_items = keys
        .values()
        .as_binary_opt::<i32>()
        .ok_or_else(|| wrong("encoded_keys"))?;
    let value_items = values
        .values()
        .as_binary_opt::<i32>()
        .ok_or_else(|| wrong("values"))?;
    if path_items.value_length() != 32 {
        return Err(wrong("paths"));
    }
    let mut rows = Vec::with_capacity(batch.num_rows());
    for i in 0..batch.num_rows() {
        let root = Hash::from_hex(parent.value(i))
            .ok_or_else(|| bad_batch(format!("row {i}: parent_root is not 64 hex digits")))?;
        let record = match op.value(i) {
            "update" => {
                let (ps, pe) = (
                    paths.value_offsets()[i] as usize,
                    paths.value_offsets()[i + 1] as usize,
                );
                let (ks, ke) = (
                    keys.value_offsets()[i] as usize,
                    keys.value_offsets()[i + 1] as usize,
                );
                let (vs, ve) = (
                    values.value_offsets()[i] as usize,
                    values.value_offsets()[i + 1] as usize,
                );
                let n = pe - ps;
                if ke - ks != n || ve - vs != n {
                    return Err(bad_batch(format!(
                        "row {i}: paths, encoded_keys and values differ in length"
                    )));
                }
                let mut u = TrieUpdate {
                    root,
                    paths: Vec::with_capacity(n),
                    payloads: Vec::with_capacity(n),
                };
                for j in 0..n {
                    let p: [u8; 32] = path_items
                        .value(ps + j)
                        .try_into()
                        .map_err(|_| wrong("paths"))?;
                    u.paths.push(Path(p));
                    u.payloads.push(Arc::new(Payload::new(
                        key_items.value(ks + j),
                        value_items.value(vs + j),
                    )));
                }
                WalRecord::Update(u)
            }
            "delete" => WalRecord::Delete(root),
            other => return Err(bad_batch(format!("row {i}: unknown op {other:?}"))),
        };
        rows.push(RecordRow {
            segment: segment.value(i),
            offset: offset.value(i),
            record,
        });
    }
    Ok(rows)
}

pub fn registers_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("path", DataType::FixedSizeBinary(32), true),
        Field::new("owner", DataType::Binary, true),
        Field::new("key", DataType::Binary, true),
        Field::new("value_size", DataType::UInt64, true),
        Field::new("value", DataType::Binary, true),
        Field::new("encoded_key", DataType::Binary, true),
    ]))
}

/// A `registers` batch from registers (path and payload).
pub fn registers_batch<R: AsRef<Register>>(regs: &[R]) -> RecordBatch {
    let n = regs.len();
    // Sized up front: growing a column by doubling copies its bytes again at every step.
    let (key_bytes, value_bytes) = regs.iter().fold((0, 0), |(k, v), r| {
        let pl = r.as_ref().payload();
        (k + pl.key.len(), v + pl.value.len())
    });
    let mut path = FixedSizeBinaryBuilder::with_capacity(n, 32);
    let mut owner = BinaryBuilder::with_capacity(n, key_bytes);
    let mut key = BinaryBuilder::with_capacity(n, key_bytes);
    let mut enc = BinaryBuilder::with_capacity(n, key_bytes);
    let mut size = UInt64Builder::with_capacity(n);
    let mut value = BinaryBuilder::with_capacity(n, value_bytes);
    for r in regs {
        let (p, pl) = (r.as_ref().path(), r.as_ref().payload());
        path.append_value(p.0).expect("paths are 32 bytes");
        let parts = pl.key_parts();
        let part = |t: u16| {
            parts
                .as_ref()
                .and_then(|ps| ps.iter().find(|(pt, _)| *pt == t).map(|(_, v)| *v))
        };
        owner.append_option(part(KEY_PART_OWNER));
        key.append_option(part(KEY_PART_KEY));
        enc.append_value(pl.key);
        size.append_value(pl.value.len() as u64);
        value.append_value(pl.value);
    }
    let cols: Vec<ArrayRef> = vec![
        Arc::new(path.finish()),
        Arc::new(owner.finish()),
        Arc::new(key.finish()),
        Arc::new(size.finish()),
        Arc::new(value.finish()),
        Arc::new(enc.finish()),
    ];
    RecordBatch::try_new(registers_schema(), cols).expect("registers columns match the schema")
}

/// The declared layouts (`schemas/tables.py`) of a trie's `registers` file and of its
/// `register_hashes` file beside it, which are written with the same row groups.
#[derive(Debug, Clone)]
pub struct RegisterLayouts {
    pub registers: Layout,
    pub hashes: Layout,
    pub groups: RowGroups,
}

impl RegisterLayouts {
    /// Both files with the default column encodings: for tests and fuzzing, which read rows,
    /// not layouts.
    pub fn plain(groups: RowGroups) -> RegisterLayouts {
        RegisterLayouts {
            registers: Layout::default(),
            hashes: Layout::default(),
            groups,
        }
    }
}

/// The writers of a trie's `registers` file and of its `register_hashes` file beside it
/// (written side by side, as [`AlignedTables`](crate::parquet_out::AlignedTables)).
pub fn register_tables(
    registers: &FsPath,
    hashes: &FsPath,
    layouts: &RegisterLayouts,
) -> Result<Vec<TableWriter>, OutputError> {
    Ok(vec![
        TableWriter::create(registers, registers_schema(), &layouts.registers)?,
        TableWriter::create(hashes, leaf_hashes_schema(), &layouts.hashes)?,
    ])
}

pub fn leaf_hashes_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("path", DataType::FixedSizeBinary(32), true),
        Field::new("height", DataType::UInt16, true),
        Field::new("leaf_hash", DataType::FixedSizeBinary(32), true),
        Field::new("node_hash", DataType::FixedSizeBinary(32), true),
    ]))
}

/// A `register_hashes` batch from leaf nodes (one `HashLeaf` each, a sponge or two, on SIMD
/// lanes and all cores).
pub fn leaf_hashes_batch(leaves: &[Arc<Node>]) -> RecordBatch {
    let n = leaves.len();
    let pairs: Vec<(&Path, &[u8])> = leaves
        .iter()
        .filter_map(|l| match &**l {
            Node::Leaf { reg, .. } => Some((reg.path(), reg.value())),
            Node::Interior { .. } | Node::Paged { .. } => None,
        })
        .collect();
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
    let hashes: Vec<Hash> = if threads > 1 && n >= 1024 {
        std::thread::scope(|s| {
            let handles: Vec<_> = pairs
                .chunks(n.div_ceil(threads))
                .map(|c| s.spawn(move || hash_leaves(c)))
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().expect("HashLeaf thread"))
                .collect()
        })
    } else {
        hash_leaves(&pairs)
    };
    leaf_hashes_batch_with(leaves, &hashes)
}

/// A `register_hashes` batch from leaf nodes and their `HashLeaf` values, already computed
/// (`leaf_hashes[i]` is `leaves[i]`'s).
pub fn leaf_hashes_batch_with(leaves: &[Arc<Node>], leaf_hashes: &[Hash]) -> RecordBatch {
    let n = leaves.len();
    debug_assert_eq!(n, leaf_hashes.len());
    let mut path = FixedSizeBinaryBuilder::with_capacity(n, 32);
    let mut height = UInt16Builder::with_capacity(n);
    let mut leaf = FixedSizeBinaryBuilder::with_capacity(n, 32);
    let mut node = FixedSizeBinaryBuilder::with_capacity(n, 32);
    for (l, lh) in leaves.iter().zip(leaf_hashes) {
        if let Node::Leaf {
            height: h,
            reg,
            hash,
        } = &**l
        {
            path.append_value(reg.path().0).expect("paths are 32 bytes");
            height.append_value(*h);
            leaf.append_value(lh.0).expect("hashes are 32 bytes");
            node.append_value(hash.0).expect("hashes are 32 bytes");
        }
    }
    let cols: Vec<ArrayRef> = vec![
        Arc::new(path.finish()),
        Arc::new(height.finish()),
        Arc::new(leaf.finish()),
        Arc::new(node.finish()),
    ];
    RecordBatch::try_new(leaf_hashes_schema(), cols).expect("register_hashes columns match")
}

fn u64_field(name: &str) -> Field {
    Field::new(name, DataType::UInt64, true)
}

const SIZE_COLUMNS: [&str; 5] = [
    "registers",
    "key_bytes",
    "value_bytes",
    "min_value_bytes",
    "max_value_bytes",
];

pub fn checkpoint_tries_schema() -> SchemaRef {
    let mut fields = vec![Field::new("root", DataType::Utf8, true)];
    for n in [
        "reg_count",
        "reg_size",
        "nodes",
        "leaf_nodes",
        "interim_nodes",
        "registers",
        "key_bytes",
        "value_bytes",
    ] {
        fields.push(u64_field(n));
    }
    fields.push(Field::new("max_depth", DataType::UInt16, true));
    Arc::new(Schema::new(fields))
}

/// `flow_checkpoint_tries`: one row per trie.
pub fn checkpoint_tries_batch(tries: &[TrieStats]) -> RecordBatch {
    let mut root = StringBuilder::new();
    let mut cols: Vec<UInt64Builder> = (0..8).map(|_| UInt64Builder::new()).collect();
    let mut depth = UInt16Builder::new();
    for t in tries {
        root.append_value(t.root.to_hex());
        let values = [
            t.reg_count,
            t.reg_size,
            t.leaf_nodes + t.interim_nodes,
            t.leaf_nodes,
            t.interim_nodes,
            t.registers,
            t.key_bytes,
            t.value_bytes,
        ];
        for (c, v) in cols.iter_mut().zip(values) {
            c.append_value(v);
        }
        depth.append_value(t.max_depth);
    }
    let mut arrays: Vec<ArrayRef> = vec![Arc::new(root.finish())];
    arrays.extend(cols.iter_mut().map(|c| Arc::new(c.finish()) as ArrayRef));
    arrays.push(Arc::new(depth.finish()));
    RecordBatch::try_new(checkpoint_tries_schema(), arrays).expect("tries columns match")
}

pub fn checkpoint_depths_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("depth", DataType::UInt16, true),
        u64_field("leaf_nodes"),
        u64_field("interim_nodes"),
    ]))
}

/// `flow_checkpoint_depths`: the depths holding nodes, shallowest first.
pub fn checkpoint_depths_batch(t: &TrieStats) -> RecordBatch {
    let (mut depth, mut leaves, mut interim) = (
        UInt16Builder::new(),
        UInt64Builder::new(),
        UInt64Builder::new(),
    );
    for (d, (l, i)) in t.leaf_depths.iter().zip(&t.interim_depths).enumerate() {
        if l + i > 0 {
            depth.append_value(d as u16);
            leaves.append_value(*l);
            interim.append_value(*i);
        }
    }
    let cols: Vec<ArrayRef> = vec![
        Arc::new(depth.finish()),
        Arc::new(leaves.finish()),
        Arc::new(interim.finish()),
    ];
    RecordBatch::try_new(checkpoint_depths_schema(), cols).expect("depths columns match")
}

fn sizes_columns(rows: &[&Sizes]) -> Vec<ArrayRef> {
    let mut cols: Vec<UInt64Builder> = (0..SIZE_COLUMNS.len())
        .map(|_| UInt64Builder::with_capacity(rows.len()))
        .collect();
    for s in rows {
        let min = if s.registers == 0 {
            0
        } else {
            s.min_value_bytes
        };
        let values = [
            s.registers,
            s.key_bytes,
            s.value_bytes,
            min,
            s.max_value_bytes,
        ];
        for (c, v) in cols.iter_mut().zip(values) {
            c.append_value(v);
        }
    }
    cols.iter_mut()
        .map(|c| Arc::new(c.finish()) as ArrayRef)
        .collect()
}

pub fn checkpoint_kinds_schema() -> SchemaRef {
    let mut fields = vec![Field::new("kind", DataType::Utf8, true)];
    fields.extend(SIZE_COLUMNS.map(u64_field));
    Arc::new(Schema::new(fields))
}

/// `flow_checkpoint_register_kinds`, in the order given.
pub fn checkpoint_kinds_batch(kinds: &[(&str, Sizes)]) -> RecordBatch {
    let mut kind = StringBuilder::new();
    for (k, _) in kinds {
        kind.append_value(k);
    }
    let mut cols: Vec<ArrayRef> = vec![Arc::new(kind.finish())];
    cols.extend(sizes_columns(
        &kinds.iter().map(|(_, s)| s).collect::<Vec<_>>(),
    ));
    RecordBatch::try_new(checkpoint_kinds_schema(), cols).expect("kinds columns match")
}

pub fn checkpoint_owners_schema() -> SchemaRef {
    let mut fields = vec![Field::new("owner", DataType::Binary, true)];
    fields.extend(SIZE_COLUMNS.map(u64_field));
    Arc::new(Schema::new(fields))
}

/// `flow_checkpoint_owners` rows (None: registers whose key has no owner part).
pub fn checkpoint_owners_batch(owners: &[OwnerRow]) -> RecordBatch {
    let mut owner = BinaryBuilder::with_capacity(owners.len(), owners.len() * 8);
    for (o, _) in owners {
        owner.append_option(o.as_deref());
    }
    let mut cols: Vec<ArrayRef> = vec![Arc::new(owner.finish())];
    cols.extend(sizes_columns(
        &owners.iter().map(|(_, s)| s).collect::<Vec<_>>(),
    ));
    RecordBatch::try_new(checkpoint_owners_schema(), cols).expect("owners columns match")
}

/// `n_paths` of a `wal_records` batch (handy for summaries).
pub fn total_paths(batch: &RecordBatch) -> u64 {
    batch
        .column_by_name("n_paths")
        .and_then(|c| c.as_primitive_opt::<UInt32Type>().cloned())
        .map_or(0, |a| a.values().iter().map(|&v| v as u64).sum())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::hash::empty_root;
    use crate::flow::record::tests::{p1, p2, payload};
    use arrow_array::Array;

    #[test]
    fn records_round_trip() {
        let u = TrieUpdate {
            root: empty_root(),
            paths: vec![p1(), p2(), p1()],
            payloads: vec![
                payload("owner1", "key1", &[1, 2, 3]),
                payload("owner2", "key2", b""),
                Arc::new(Payload::new(vec![0xffu8], vec![9u8])), // malformed key
            ],
        };
        let recs = [
            WalRecord::Update(u.clone()),
            WalRecord::Delete(empty_root()),
        ];
        let mut b = RecordsBuilder::new();
        for (i, r) in recs.iter().enumerate() {
            b.push(4, i as u32, 100 * i as u64, r);
        }
        let batch = b.finish();
        assert_eq!(batch.num_rows(), 2);
        assert_eq!(total_paths(&batch), 3);
        let owners = batch.column_by_name("owners").unwrap().as_list::<i32>();
        let items = owners.values().as_binary::<i32>();
        assert_eq!(items.value(0), b"owner1");
        assert!(items.is_null(2));
        let rows = rows_from_batch(&batch).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].record, WalRecord::Update(u));
        assert_eq!(rows[1].record, WalRecord::Delete(empty_root()));
        assert_eq!((rows[1].segment, rows[1].offset), (4, 100));
        let sliced = batch.slice(1, 1);
        assert_eq!(
            rows_from_batch(&sliced).unwrap()[0].record,
            WalRecord::Delete(empty_root())
        );
    }

    #[test]
    fn registers_columns() {
        let pl = payload("owner1", "key1", &[1, 2, 3]);
        let regs = vec![Register::new(p1(), pl.view())];
        let b = registers_batch(&regs);
        assert_eq!(b.num_rows(), 1);
        assert_eq!(b.schema(), registers_schema());
        let size = b
            .column_by_name("value_size")
            .unwrap()
            .as_primitive::<UInt64Type>();
        assert_eq!(size.value(0), 3);
    }

    #[test]
    fn bad_batches_are_errors() {
        let empty = RecordBatch::new_empty(registers_schema());
        assert!(rows_from_batch(&empty).is_err());
    }
}
