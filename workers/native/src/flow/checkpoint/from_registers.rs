//! A data folder's `registers` table (with `register_hashes` where it has them) → the one-trie
//! v6 checkpoint of its state (`rechain flow checkpoint write`), read from Parquet here.
//!
//! The table is in path order and a v6 part holds the paths of one first nibble, so each part's
//! registers are a run of the table's row groups, and no node below depth 4 depends on another
//! part. The parts are folded on parallel threads, each reading its own row groups (decode,
//! `HashLeaf` checks, interior hashes, encoding, its file and CRC), and the few nodes above
//! depth 4 are then folded from their roots as a sequential fold would, so the file is the same.
//! Memory: one row group per thread.

use super::build::{CachedLeaf, PartFold, RegisterCheckpointBuilder};
use super::error::CheckpointError;
use super::format::SUBTRIE_COUNT;
use super::write::WriteInfo;
use crate::bounded::map_bounded;
use crate::flow::hash::{Hash, Path};
use crate::flow::record::Payload;
use crate::flow::ErrorKind;
use arrow_array::cast::AsArray;
use arrow_array::types::UInt16Type;
use arrow_array::{Array, ArrayRef, BinaryArray, FixedSizeBinaryArray, LargeBinaryArray};
use arrow_array::{PrimitiveArray, RecordBatch};
use arrow_schema::DataType;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use parquet::arrow::ProjectionMask;
use std::fs::File;
use std::path::{Path as FsPath, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A register as the builder takes it: path, payload, its `register_hashes` row if usable.
pub type Row = (Path, Arc<Payload>, Option<CachedLeaf>);

const REGISTER_COLUMNS: [&str; 3] = ["path", "encoded_key", "value"];
const HASH_COLUMNS: [&str; 4] = ["path", "height", "leaf_hash", "node_hash"];

/// A binary column of any of the Arrow layouts Parquet readers give.
enum Binary<'a> {
    Small(&'a BinaryArray),
    Large(&'a LargeBinaryArray),
    Fixed(&'a FixedSizeBinaryArray),
}

impl<'a> Binary<'a> {
    fn of(batch: &'a RecordBatch, name: &str) -> Result<Self, ErrorKind> {
        let col: &ArrayRef = batch
            .column_by_name(name)
            .ok_or_else(|| bad_rows(format!("no column {name}")))?;
        Ok(match col.data_type() {
            DataType::Binary => Binary::Small(col.as_binary::<i32>()),
            DataType::LargeBinary => Binary::Large(col.as_binary::<i64>()),
            DataType::FixedSizeBinary(_) => Binary::Fixed(col.as_fixed_size_binary()),
            other => {
                return Err(bad_rows(format!(
                    "column {name}: expected binary, got {other}"
                )))
            }
        })
    }

    /// Row `i`'s bytes; None where null.
    fn get(&self, i: usize) -> Option<&'a [u8]> {
        match self {
            Binary::Small(a) => a.is_valid(i).then(|| a.value(i)),
            Binary::Large(a) => a.is_valid(i).then(|| a.value(i)),
            Binary::Fixed(a) => a.is_valid(i).then(|| a.value(i)),
        }
    }
}

fn path_of(bytes: Option<&[u8]>, row: usize) -> Result<Path, ErrorKind> {
    let p = bytes.ok_or_else(|| bad_rows(format!("row {row}: null path")))?;
    Ok(Path(p.try_into().map_err(|_| {
        bad_rows(format!("row {row}: path of {} bytes, expected 32", p.len()))
    })?))
}

/// A batch that is not a `registers` (or `register_hashes`) table: the caller's argument.
fn bad_rows(reason: String) -> ErrorKind {
    ErrorKind::Config { reason }
}

/// The registers of a `registers` batch (columns `path`, `encoded_key`, `value`), with the
/// same rows of `register_hashes` where given (taken for a row only where the paths agree);
/// with `part`, only the rows of that v6 part.
pub fn register_rows(
    batch: &RecordBatch,
    hashes: Option<&RecordBatch>,
    part: Option<usize>,
) -> Result<Vec<Row>, ErrorKind> {
    let paths = Binary::of(batch, "path")?;
    let keys = Binary::of(batch, "encoded_key")?;
    let values = Binary::of(batch, "value")?;
    let cache = match hashes.filter(|h| h.num_rows() == batch.num_rows()) {
        Some(h) => {
            let fixed = |name: &str| {
                h.column_by_name(name)
                    .and_then(|c| c.as_fixed_size_binary_opt())
                    .filter(|a| a.value_length() == 32)
                    .ok_or_else(|| {
                        bad_rows(format!(
                            "register_hashes column {name}: expected 32-byte binary"
                        ))
                    })
            };
            let height: &PrimitiveArray<UInt16Type> = h
                .column_by_name("height")
                .and_then(|c| c.as_primitive_opt::<UInt16Type>())
                .ok_or_else(|| bad_rows("register_hashes column height: expected uint16".into()))?;
            Some((
                fixed("path")?,
                fixed("leaf_hash")?,
                fixed("node_hash")?,
                height,
            ))
        }
        None => None,
    };
    let mut out = Vec::with_capacity(batch.num_rows());
    for i in 0..batch.num_rows() {
        let p = paths.get(i);
        if let (Some(part), Some(p)) = (part, p) {
            if p.first().map(|b| (b >> 4) as usize) != Some(part) {
                continue;
            }
        }
        let path = path_of(p, i)?;
        let cached = cache.and_then(|(hp, leaf, node, height)| {
            let valid =
                hp.is_valid(i) && leaf.is_valid(i) && node.is_valid(i) && height.is_valid(i);
            (valid && hp.value(i) == path.0).then(|| CachedLeaf {
                height: height.value(i),
                leaf_hash: Hash(leaf.value(i).try_into().expect("32 bytes")),
                node_hash: Hash(node.value(i).try_into().expect("32 bytes")),
            })
        });
        let payload = Payload::new(
            keys.get(i).unwrap_or_default(),
            values.get(i).unwrap_or_default(),
        );
        out.push((path, Arc::new(payload), cached));
    }
    Ok(out)
}

fn bad(file: &FsPath, message: impl Into<String>) -> CheckpointError {
    CheckpointError::new(file, 0, "bad_registers", message)
}

/// One file of the table, with the `register_hashes` file of the same row groups if usable.
struct Input {
    file: PathBuf,
    meta: ArrowReaderMetadata,
    hashes: Option<(PathBuf, ArrowReaderMetadata)>,
}

fn open(file: &FsPath) -> Result<ArrowReaderMetadata, CheckpointError> {
    let f = File::open(file).map_err(|e| CheckpointError::io(file, 0, &e))?;
    ArrowReaderMetadata::load(&f, ArrowReaderOptions::new()).map_err(|e| bad(file, e.to_string()))
}

/// Row group `index` of `file`, the named columns only, as one batch.
fn read_group(
    file: &FsPath,
    meta: &ArrowReaderMetadata,
    index: usize,
    columns: &[&str],
) -> Result<RecordBatch, CheckpointError> {
    let roots = columns
        .iter()
        .map(|c| meta.schema().index_of(c))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(file, e.to_string()))?;
    let mask = ProjectionMask::roots(meta.metadata().file_metadata().schema_descr(), roots);
    let rows = meta.metadata().row_group(index).num_rows().max(1) as usize;
    let f = File::open(file).map_err(|e| CheckpointError::io(file, 0, &e))?;
    let mut reader = ParquetRecordBatchReaderBuilder::new_with_metadata(f, meta.clone())
        .with_row_groups(vec![index])
        .with_projection(mask)
        .with_batch_size(rows)
        .build()
        .map_err(|e| bad(file, e.to_string()))?;
    let at = |e: arrow_schema::ArrowError| bad(file, format!("row group {index}: {e}"));
    let batch = reader.next().transpose().map_err(at)?;
    let batch = batch.ok_or_else(|| bad(file, format!("row group {index}: no rows")))?;
    if reader.next().is_some() {
        return Err(bad(
            file,
            format!("row group {index}: more rows than its metadata"),
        ));
    }
    Ok(batch)
}

/// A row group of the table and the first and last path it holds.
struct Group {
    input: usize,
    index: usize,
    first: Path,
    last: Path,
}

impl Group {
    fn parts(&self) -> std::ops::RangeInclusive<usize> {
        (self.first.0[0] >> 4) as usize..=(self.last.0[0] >> 4) as usize
    }
}

/// The row groups in table order with their path ranges (from the statistics where they are
/// whole paths, else from the column), checked to follow one another.
fn plan(inputs: &[Input]) -> Result<Vec<Group>, CheckpointError> {
    let mut groups: Vec<Group> = Vec::new();
    for (n, input) in inputs.iter().enumerate() {
        let md = input.meta.metadata();
        let schema = md.file_metadata().schema_descr();
        let column = (0..schema.num_columns()).find(|&c| schema.column(c).name() == "path");
        for index in 0..md.num_row_groups() {
            let rg = md.row_group(index);
            if rg.num_rows() == 0 {
                continue;
            }
            let stats = column.and_then(|c| rg.column(c).statistics());
            let bounds = stats.and_then(|s| {
                let min: [u8; 32] = s.min_bytes_opt()?.try_into().ok()?;
                let max: [u8; 32] = s.max_bytes_opt()?.try_into().ok()?;
                Some((Path(min), Path(max)))
            });
            let (first, last) = match bounds {
                Some(b) => b,
                None => {
                    let b = read_group(&input.file, &input.meta, index, &["path"])?;
                    let paths =
                        Binary::of(&b, "path").map_err(|e| bad(&input.file, e.to_string()))?;
                    let end = b.num_rows() - 1;
                    let p =
                        |i| path_of(paths.get(i), i).map_err(|e| bad(&input.file, e.to_string()));
                    (p(0)?, p(end)?)
                }
            };
            if let Some(prev) = groups.last() {
                if prev.last >= first {
                    return Err(CheckpointError::new(
                        &input.file,
                        0,
                        "unsorted_input",
                        format!(
                            "row group {index} starts at register {}, not after {} where the \
                             one before it ends",
                            first.to_hex(),
                            prev.last.to_hex()
                        ),
                    ));
                }
            }
            groups.push(Group {
                input: n,
                index,
                first,
                last,
            });
        }
    }
    Ok(groups)
}

/// The registers of `part` in one row group, after checking the whole group is in strict path
/// order between the bounds `plan` gave it.
fn group_rows(inputs: &[Input], g: &Group, part: usize) -> Result<Vec<Row>, CheckpointError> {
    let input = &inputs[g.input];
    let regs = read_group(&input.file, &input.meta, g.index, &REGISTER_COLUMNS)?;
    let paths = Binary::of(&regs, "path").map_err(|e| bad(&input.file, e.to_string()))?;
    let mut prev: Option<&[u8]> = None;
    for i in 0..regs.num_rows() {
        let p = paths.get(i);
        let out_of_range = (i == 0 && p != Some(&g.first.0[..]))
            || (i + 1 == regs.num_rows() && p != Some(&g.last.0[..]));
        if p.is_none() || prev.is_some_and(|q| Some(q) >= p) || out_of_range {
            return Err(CheckpointError::new(
                &input.file,
                0,
                "unsorted_input",
                format!(
                    "row group {} row {i}: register paths not strictly increasing within the \
                     group's bounds",
                    g.index
                ),
            ));
        }
        prev = p;
    }
    let hashes = match &input.hashes {
        Some((file, meta)) => Some(read_group(file, meta, g.index, &HASH_COLUMNS)?),
        None => None,
    };
    register_rows(&regs, hashes.as_ref(), Some(part))
        .map_err(|e| bad(&input.file, format!("row group {}: {e}", g.index)))
}

/// Pairs each `registers` file with its `register_hashes` file (None: absent or its row
/// groups differ, so every leaf's hash chain is run).
fn inputs(files: &[(PathBuf, Option<PathBuf>)]) -> Result<Vec<Input>, CheckpointError> {
    files
        .iter()
        .map(|(file, hashes)| {
            let meta = open(file)?;
            let sizes = |m: &ArrowReaderMetadata| -> Vec<i64> {
                m.metadata()
                    .row_groups()
                    .iter()
                    .map(|g| g.num_rows())
                    .collect()
            };
            let hashes = match hashes {
                Some(h) => {
                    let hm = open(h)?;
                    let cols = HASH_COLUMNS.iter().all(|c| hm.schema().index_of(c).is_ok());
                    (cols && sizes(&hm) == sizes(&meta)).then(|| (h.clone(), hm))
                }
                None => None,
            };
            Ok(Input {
                file: file.clone(),
                meta,
                hashes,
            })
        })
        .collect()
}

/// Writes `dir/name` (a one-trie v6 checkpoint) from the `registers` files given in table
/// order, each with its `register_hashes` file where it has one; parts folded on `threads`
/// threads. `reg_size`: as for [`RegisterCheckpointBuilder::finish_with`]. Also returns the
/// rows the table holds (unallocated registers included).
pub fn write_from_registers(
    files: &[(PathBuf, Option<PathBuf>)],
    dir: &FsPath,
    name: &str,
    threads: usize,
    reg_size: Option<u64>,
) -> Result<(WriteInfo, u64), CheckpointError> {
    let inputs = inputs(files)?;
    let rows = inputs
        .iter()
        .map(|i| i.meta.metadata().file_metadata().num_rows().max(0) as u64)
        .sum();
    let groups = plan(&inputs)?;
    let mut whole = RegisterCheckpointBuilder::new(dir, name, threads)?;
    let failed = AtomicBool::new(false);
    // A part given up because another failed gives None, so only the real error is reported.
    let fold = |part: usize| -> Result<Option<PartFold>, CheckpointError> {
        let mut b = RegisterCheckpointBuilder::part_fold(&whole, part);
        for g in groups.iter().filter(|g| g.parts().contains(&part)) {
            if failed.load(Ordering::Relaxed) {
                return Ok(None);
            }
            b.push_cached(group_rows(&inputs, g, part)?)?;
        }
        b.finish_part().map(Some)
    };
    let results = map_bounded(SUBTRIE_COUNT, threads, |part| {
        if failed.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let r = fold(part);
        if r.is_err() {
            failed.store(true, Ordering::Relaxed);
        }
        r
    });
    let folds: Vec<PartFold> = results
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .flatten()
        .collect();
    whole.assemble(folds)?;
    Ok((whole.finish_with(reg_size)?, rows))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::checkpoint::tests::{random_registers, read_all, tmp, upd};
    use crate::flow::checkpoint::{checkpoint_name, write_tries};
    use crate::flow::hash::empty_root;
    use crate::flow::mtrie::Forest;
    use crate::flow::record::tests::payload;
    use arrow_array::builder::{BinaryBuilder, FixedSizeBinaryBuilder, UInt16Builder};
    use arrow_schema::{Field, Schema};
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::{EnabledStatistics, WriterProperties};

    type Reg = (Path, Arc<Payload>);

    fn registers_batch(regs: &[Reg]) -> RecordBatch {
        let mut p = FixedSizeBinaryBuilder::new(32);
        let (mut k, mut v) = (BinaryBuilder::new(), BinaryBuilder::new());
        for (path, pl) in regs {
            p.append_value(path.0).unwrap();
            k.append_value(&pl.key);
            v.append_value(&pl.value);
        }
        let schema = Schema::new(vec![
            Field::new("path", DataType::FixedSizeBinary(32), true),
            Field::new("value", DataType::Binary, true),
            Field::new("encoded_key", DataType::Binary, true),
        ]);
        let cols: Vec<ArrayRef> = vec![
            Arc::new(p.finish()),
            Arc::new(v.finish()),
            Arc::new(k.finish()),
        ];
        RecordBatch::try_new(Arc::new(schema), cols).unwrap()
    }

    /// `register_hashes` rows whose `HashLeaf` is wrong: the writer must not take them.
    fn stale_hashes_batch(regs: &[Reg]) -> RecordBatch {
        let mut p = FixedSizeBinaryBuilder::new(32);
        let (mut l, mut n) = (
            FixedSizeBinaryBuilder::new(32),
            FixedSizeBinaryBuilder::new(32),
        );
        let mut h = UInt16Builder::new();
        for (path, _) in regs {
            p.append_value(path.0).unwrap();
            l.append_value([7u8; 32]).unwrap();
            n.append_value([9u8; 32]).unwrap();
            h.append_value(250);
        }
        let fixed = |name| Field::new(name, DataType::FixedSizeBinary(32), true);
        let schema = Schema::new(vec![
            fixed("path"),
            Field::new("height", DataType::UInt16, true),
            fixed("leaf_hash"),
            fixed("node_hash"),
        ]);
        let cols: Vec<ArrayRef> = vec![
            Arc::new(p.finish()),
            Arc::new(h.finish()),
            Arc::new(l.finish()),
            Arc::new(n.finish()),
        ];
        RecordBatch::try_new(Arc::new(schema), cols).unwrap()
    }

    fn write_parquet(file: &FsPath, batch: &RecordBatch, group_rows: usize, stats: bool) {
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(group_rows.max(1)))
            .set_statistics_enabled(if stats {
                EnabledStatistics::Chunk
            } else {
                EnabledStatistics::None
            })
            .build();
        let mut w =
            ArrowWriter::try_new(File::create(file).unwrap(), batch.schema(), Some(props)).unwrap();
        w.write(batch).unwrap();
        w.close().unwrap();
    }

    /// The table as `files` Parquet files of row groups of `group_rows` rows.
    fn table(
        dir: &FsPath,
        regs: &[Reg],
        files: usize,
        group_rows: usize,
        stats: bool,
        hashes: bool,
    ) -> Vec<(PathBuf, Option<PathBuf>)> {
        std::fs::create_dir_all(dir).unwrap();
        let per = regs.len().div_ceil(files.max(1)).max(1);
        regs.chunks(per)
            .enumerate()
            .map(|(i, chunk)| {
                let f = dir.join(format!("part-{i:05}.parquet"));
                write_parquet(&f, &registers_batch(chunk), group_rows, stats);
                let h = hashes.then(|| {
                    let h = dir.join(format!("hashes-{i:05}.parquet"));
                    write_parquet(&h, &stale_hashes_batch(chunk), group_rows, stats);
                    h
                });
                (f, h)
            })
            .collect()
    }

    fn at(nibbles: &[u8], seed: u8) -> Reg {
        let mut b = [seed; 32];
        b[0] = nibbles[0] << 4 | nibbles.get(1).copied().unwrap_or(seed & 15);
        (Path(b), payload(&format!("o{seed}"), "k", &[seed; 5]))
    }

    /// Parts with one register each, sitting above depth 4 or at it alone in its part file,
    /// besides full parts; a single register; one full part.
    fn shapes() -> Vec<Vec<Reg>> {
        let full = |nibble: u8| (0..40u8).map(move |s| at(&[nibble, s & 15], s * 3 + 1));
        let mut lone_above: Vec<Reg> = full(0).chain(full(15)).collect();
        lone_above.push(at(&[8], 77)); // alone between parts 0 and 15: depth 2
        let mut lone_at_4: Vec<Reg> = full(0).collect();
        lone_at_4.push(at(&[1], 78)); // shares 3 bits with part 0: depth 4, in part 1's file
        lone_at_4.push(at(&[6], 79));
        lone_at_4.push(at(&[7], 80));
        let mut all = vec![lone_above, lone_at_4, vec![at(&[5], 9)], full(3).collect()];
        for regs in &mut all {
            regs.sort_by_key(|r| r.0);
            regs.dedup_by_key(|r| r.0);
        }
        all
    }

    /// Every shape of table (files, row groups across parts, statistics or none, stale
    /// `register_hashes`) and thread count gives the bytes of the trie writer, which writes
    /// what flow-go writes.
    #[test]
    fn matches_the_trie_writer_whatever_the_row_groups() {
        let mut sets: Vec<Vec<Reg>> = [0usize, 1, 2, 3, 17, 300, 2000]
            .iter()
            .map(|&n| random_registers(n, 11 + n as u64))
            .collect();
        sets.extend(shapes());
        let name = checkpoint_name(4);
        for (k, regs) in sets.iter().enumerate() {
            let mut f = Forest::new(4, 1);
            let root = f.update(&upd(empty_root(), regs.clone())).unwrap().root;
            let trie = f.get(&root).unwrap().clone();
            let want_dir = tmp(&format!("rw-want-{k}"));
            write_tries(std::slice::from_ref(&trie), &want_dir, &name, 2).unwrap();
            let want = read_all(&want_dir);
            for (files, group_rows, stats, hashes, threads) in [
                (1, 1 << 20, true, false, 1),
                (3, 7, true, true, 2),
                (2, 50, false, false, 3),
                (4, 1, false, true, 2),
            ] {
                let input = tmp(&format!("rw-in-{k}"));
                let out = tmp(&format!("rw-out-{k}"));
                let t = table(&input, regs, files, group_rows, stats, hashes);
                let (info, rows) = write_from_registers(&t, &out, &name, threads, None).unwrap();
                let case = format!("set {k} ({} registers), {files} files of groups of {group_rows}, threads {threads}", regs.len());
                assert_eq!(rows, regs.len() as u64, "{case}");
                assert_eq!(
                    info.tries,
                    vec![(trie.root_hash(), trie.reg_count, trie.reg_size)],
                    "{case}"
                );
                assert_eq!(info.cached_leaves, 0, "{case}: stale hashes taken");
                assert_eq!(read_all(&out), want, "{case}");
                std::fs::remove_dir_all(&input).unwrap();
                std::fs::remove_dir_all(&out).unwrap();
            }
            std::fs::remove_dir_all(&want_dir).unwrap();
        }
    }

    /// Row groups out of order, a row out of order inside a group, and statistics that do not
    /// bound their group are refused with the file, and nothing is left in the folder.
    #[test]
    fn refuses_unsorted_tables_and_leaves_nothing() {
        let regs = random_registers(400, 5);
        let name = checkpoint_name(1);
        let check = |t: &[(PathBuf, Option<PathBuf>)], out: &FsPath, what: &str| {
            let e = write_from_registers(t, out, &name, 2, None).unwrap_err();
            assert_eq!(e.kind, "unsorted_input", "{what}: {e}");
            assert!(e.file.ends_with(".parquet"), "{what}: {e}");
            let left = std::fs::read_dir(out).map_or(0, |d| d.count());
            assert_eq!(left, 0, "{what}");
        };
        // Files given in the wrong order.
        let input = tmp("rw-bad-in");
        let mut t = table(&input, &regs, 2, 64, true, false);
        t.reverse();
        check(&t, &tmp("rw-bad-1"), "files swapped");
        // Two rows swapped inside one group, with and without statistics.
        for stats in [true, false] {
            let mut swapped = regs.clone();
            swapped.swap(100, 101);
            let input = tmp("rw-bad-in2");
            let t = table(&input, &swapped, 1, 64, stats, false);
            check(&t, &tmp("rw-bad-2"), "rows swapped");
        }
    }
}
