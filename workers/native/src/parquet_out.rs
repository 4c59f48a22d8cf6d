//! Parquet files written by the Rust core, with the settings `DataDir.stage_parquet_parts` gives
//! pyarrow's writer (zstd, statistics, dictionary encoding only for the columns named; the
//! tables may also name columns whose min/max statistics prune nothing, and columns of random
//! bytes stored uncompressed: see [`Layout`]) but version 2 data pages (see `properties`), so a
//! stage can publish a table without loading pyarrow. Where the file goes and when it becomes
//! visible stays with `DataDir` (Python): this only writes the file it is given.

use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, SchemaRef};
use bytes::Bytes;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use parquet::arrow::arrow_writer::{compute_leaves, ArrowRowGroupWriterFactory};
use parquet::arrow::{ArrowWriter, ProjectionMask};
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::column::writer::ColumnCloseResult;
use parquet::file::metadata::PageIndexPolicy;
use parquet::file::page_index::column_index::ColumnIndexMetaData;
use parquet::file::properties::{
    EnabledStatistics, WriterProperties, WriterPropertiesBuilder, WriterVersion,
};
use parquet::file::reader::{ChunkReader, Length};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::ColumnPath;
use std::fmt;
use std::fs::File;
use std::io::{BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A Parquet file that could not be written (or, for `replace_column`, read).
#[derive(Debug)]
pub enum WriteError {
    /// A failure at the file `path` (creating, reading or finishing it, or a column its
    /// layout names): shown as `path: source`.
    At {
        path: PathBuf,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Encoding a batch or closing a row group failed.
    Parquet(parquet::errors::ParquetError),
    /// The caller's rows (a batch to write, a replacement column) could not be made: their
    /// error, shown as it is.
    Rows(Box<dyn std::error::Error + Send + Sync>),
}

impl WriteError {
    fn at(path: &Path, source: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Self {
        WriteError::At {
            path: path.to_path_buf(),
            source: source.into(),
        }
    }

    /// The caller's own error in making the rows.
    pub fn rows(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        WriteError::Rows(Box::new(e))
    }
}

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WriteError::At { path, source } => write!(f, "{}: {source}", path.display()),
            WriteError::Parquet(e) => write!(f, "{e}"),
            WriteError::Rows(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for WriteError {}

/// Row-group limits: at most `rows` rows, and a group is closed early once its encoded
/// columns (which a writer holds until the group is done) reach `bytes`.
#[derive(Debug, Clone, Copy)]
pub struct RowGroups {
    pub rows: usize,
    pub bytes: usize,
}

/// How a table's columns are encoded where they differ from the defaults (zstd, min/max
/// statistics, no dictionary), by column name: each table's is declared in
/// `schemas/tables.py` and reaches the writers from there (`Table.native_layout`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Layout {
    /// Dictionary-encoded.
    pub dictionary: Vec<String>,
    /// Without min/max statistics: values such as random hashes or scripts, whose ranges per
    /// page and row group prune nothing and cost a comparison per value.
    pub unsorted: Vec<String>,
    /// Stored uncompressed: random bytes (hashes, and paths that are hashes), which zstd
    /// cannot shrink and spends as long on as on any other page.
    pub uncompressed: Vec<String>,
    /// Encoded DELTA_LENGTH_BYTE_ARRAY (see `delta_length_columns` in `schemas/tables.py`).
    pub delta_length: Vec<String>,
    /// Every other column's codec where it is not zstd: a staged file read back once is
    /// cheaper to write with snappy than to keep small.
    pub compression: Option<Compression>,
}

/// Column names as a [`Layout`] holds them.
pub fn columns(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| n.to_string()).collect()
}

/// The codec of a `compression` name of `schemas/tables.py` (None: not one of them).
pub fn parquet_codec(name: &str) -> Option<Compression> {
    match name {
        "zstd" => Some(Compression::ZSTD(ZstdLevel::default())),
        "snappy" => Some(Compression::SNAPPY),
        "none" => Some(Compression::UNCOMPRESSED),
        _ => None,
    }
}

/// One Parquet file being written batch by batch; row groups are closed by its owner.
pub struct TableWriter {
    writer: ArrowWriter<File>,
    rows: u64,
}

impl TableWriter {
    /// Creates the file at `path` for `schema`'s batches, its columns laid out by `layout`.
    pub fn create(
        path: &Path,
        schema: SchemaRef,
        layout: &Layout,
    ) -> Result<TableWriter, WriteError> {
        let props = properties(path, &schema, layout)?;
        let file = File::create(path).map_err(|e| WriteError::at(path, e))?;
        let writer = ArrowWriter::try_new(file, schema, Some(props.build()))
            .map_err(|e| WriteError::at(path, e))?;
        Ok(TableWriter { writer, rows: 0 })
    }

    fn write(&mut self, batch: &RecordBatch) -> Result<(), WriteError> {
        self.rows += batch.num_rows() as u64;
        self.writer.write(batch).map_err(WriteError::Parquet)
    }

    fn close_group(&mut self) -> Result<(), WriteError> {
        self.writer.flush().map_err(WriteError::Parquet)
    }

    /// Writes the footer and starts its writeback; returns the rows written. (`DataDir`
    /// syncs the file.)
    fn finish(self) -> Result<u64, WriteError> {
        let file = self.writer.into_inner().map_err(WriteError::Parquet)?;
        crate::writeback::start(&file);
        Ok(self.rows)
    }
}

/// The writer settings of every table the Rust core writes (see [`Layout`]).
fn properties(
    path: &Path,
    schema: &SchemaRef,
    layout: &Layout,
) -> Result<WriterPropertiesBuilder, WriteError> {
    let mut props = WriterProperties::builder()
        .set_compression(
            layout
                .compression
                .unwrap_or(Compression::ZSTD(ZstdLevel::default())),
        )
        .set_dictionary_enabled(false)
        // Version 2 data pages compress the values where the encoder left them; a version 1
        // page first copies them behind its levels, then copies that again as the buffer it
        // is compressed into grows. The version also changes the default encodings (delta for
        // numbers and strings), which these tables do not want: PLAIN unless a column names
        // its own.
        .set_writer_version(WriterVersion::PARQUET_2_0)
        .set_encoding(Encoding::PLAIN)
        .set_max_row_group_row_count(None);
    let leaf = |c: &str| -> Result<ColumnPath, WriteError> {
        let field = schema
            .field_with_name(c)
            .map_err(|e| WriteError::at(path, e))?;
        // A list's values are the leaf `name.list.<item>` of the Parquet schema.
        Ok(ColumnPath::new(match field.data_type() {
            DataType::List(item) | DataType::LargeList(item) => {
                vec![c.to_string(), "list".into(), item.name().clone()]
            }
            _ => vec![c.to_string()],
        }))
    };
    for c in &layout.dictionary {
        props = props.set_column_dictionary_enabled(leaf(c)?, true);
    }
    for c in &layout.unsorted {
        props = props.set_column_statistics_enabled(leaf(c)?, EnabledStatistics::None);
    }
    for c in &layout.uncompressed {
        props = props.set_column_compression(leaf(c)?, Compression::UNCOMPRESSED);
    }
    for c in &layout.delta_length {
        props = props.set_column_encoding(leaf(c)?, Encoding::DELTA_LENGTH_BYTE_ARRAY);
    }
    Ok(props)
}

/// Copies the Parquet file `src` to `dest` with the top-level primitive column `column`
/// replaced by what `compute` makes of each batch of the `inputs` columns (read row group by
/// row group, in order). Every other column chunk is copied as it was encoded: no decoding,
/// no recompression, same pages, statistics and page indexes, and the same row groups and
/// key-value metadata (the Arrow schema). The new column is encoded as `TableWriter` does.
/// Returns the rows.
pub fn replace_column(
    src: &Path,
    dest: &Path,
    column: &str,
    inputs: &[&str],
    mut compute: impl FnMut(&RecordBatch) -> Result<ArrayRef, WriteError>,
) -> Result<u64, WriteError> {
    let at = |e: &dyn fmt::Display| WriteError::at(src, e.to_string());
    let file = File::open(src).map_err(|e| at(&e))?;
    let options = ArrowReaderOptions::new().with_page_index_policy(PageIndexPolicy::Optional);
    let meta = ArrowReaderMetadata::load(&file, options).map_err(|e| at(&e))?;
    let parquet = meta.metadata().clone();
    let descr = parquet.file_metadata().schema_descr_ptr();
    let arrow_schema = meta.schema().clone();
    // The copied chunks keep their offset indexes and the new one gets one: a file without
    // them would end with a mix the footer cannot hold.
    if parquet.offset_index().is_none() {
        return Err(at(
            &"no page index (offset index) to copy the other columns with",
        ));
    }
    let target = descr
        .columns()
        .iter()
        .position(|c| c.path().parts() == [column])
        .ok_or_else(|| at(&format!("no top-level column {column}")))?;
    let field_index = arrow_schema.index_of(column).map_err(|e| at(&e))?;
    let field = arrow_schema.field(field_index).clone();
    let props = properties(dest, &arrow_schema, &Layout::default())?
        .set_key_value_metadata(parquet.file_metadata().key_value_metadata().cloned())
        .build();
    let out = File::create(dest).map_err(|e| WriteError::at(dest, e))?;
    let mut writer = SerializedFileWriter::new(out, descr.root_schema_ptr(), Arc::new(props))
        .map_err(|e| at(&e))?;
    let factory = ArrowRowGroupWriterFactory::new(&writer, arrow_schema.clone());
    let mask = ProjectionMask::columns(&descr, inputs.iter().copied());
    let mut rows = 0u64;
    for (g, group) in parquet.row_groups().iter().enumerate() {
        let mut encoder = factory
            .create_column_writers(g)
            .map_err(|e| at(&e))?
            .into_iter()
            .nth(field_index)
            .ok_or_else(|| at(&"column writers"))?;
        let batches = ParquetRecordBatchReaderBuilder::new_with_metadata(
            file.try_clone().map_err(|e| at(&e))?,
            meta.clone(),
        )
        .with_row_groups(vec![g])
        .with_projection(mask.clone())
        .build()
        .map_err(|e| at(&e))?;
        let mut group_rows = 0u64;
        for batch in batches {
            let batch = batch.map_err(|e| at(&e))?;
            let values = compute(&batch)?;
            if values.len() != batch.num_rows() {
                return Err(at(&"the new column's length differs from the batch's"));
            }
            group_rows += values.len() as u64;
            for leaf in compute_leaves(&field, &values).map_err(|e| at(&e))? {
                encoder.write(&leaf).map_err(|e| at(&e))?;
            }
        }
        if group_rows != group.num_rows() as u64 {
            return Err(at(&format!(
                "row group {g}: read {group_rows} rows of {}",
                group.num_rows()
            )));
        }
        let mut chunk = Some(encoder.close().map_err(|e| at(&e))?);
        let mut out_group = writer.next_row_group().map_err(|e| at(&e))?;
        for (c, meta_c) in group.columns().iter().enumerate() {
            if c == target {
                let chunk = chunk.take().expect("one replaced chunk per group");
                chunk
                    .append_to_row_group(&mut out_group)
                    .map_err(|e| at(&e))?;
                continue;
            }
            let column_index = parquet
                .column_index()
                .map(|x| x[g][c].clone())
                .filter(|x| !matches!(x, ColumnIndexMetaData::NONE));
            let offset_index = parquet.offset_index().map(|x| x[g][c].clone());
            let close = ColumnCloseResult {
                bytes_written: meta_c.compressed_size() as u64,
                rows_written: group.num_rows() as u64,
                metadata: meta_c.clone(),
                bloom_filter: None,
                column_index,
                offset_index,
            };
            out_group
                .append_column(&ChunkSource(&file), close)
                .map_err(|e| at(&e))?;
        }
        out_group.close().map_err(|e| at(&e))?;
        rows += group_rows;
    }
    let out = writer.into_inner().map_err(|e| at(&e))?;
    crate::writeback::start(&out);
    Ok(rows)
}

/// Bytes read at a time from a file whose column chunks are copied as they are.
const COPY_BUFFER: usize = 1 << 20;

/// The file `replace_column` copies chunks from. `File`'s own reader reads a chunk 8 KiB at a
/// time, and each read and each write of those 8 KiB is a syscall of its own.
struct ChunkSource<'a>(&'a File);

impl Length for ChunkSource<'_> {
    fn len(&self) -> u64 {
        self.0.len()
    }
}

impl ChunkReader for ChunkSource<'_> {
    type T = BufReader<File>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<BufReader<File>> {
        let mut file = self.0.try_clone()?;
        file.seek(SeekFrom::Start(start))?;
        Ok(BufReader::with_capacity(COPY_BUFFER, file))
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        self.0.get_bytes(start, length)
    }
}

/// Rows handed to the writer per step when one batch is written whole: small enough that a
/// row group closes near its byte limit.
const STEP_ROWS: usize = 8_192;

/// Writes `batch` as one Parquet file at `path` (columns encoded as `layout` says), closing
/// row groups at `groups`' limits; returns the rows written.
pub fn write_batch(
    path: &Path,
    batch: &RecordBatch,
    layout: &Layout,
    groups: RowGroups,
) -> Result<u64, WriteError> {
    let batches = std::iter::once(Ok(batch.clone()));
    write_batches(path, batch.schema(), batches, layout, groups)
}

/// `write_batch` for a table built a batch at a time (`batches`, each of `schema`), so that
/// each one is encoded while it is still in cache and no whole-table copy is ever held.
pub fn write_batches(
    path: &Path,
    schema: SchemaRef,
    batches: impl Iterator<Item = Result<RecordBatch, WriteError>>,
    layout: &Layout,
    groups: RowGroups,
) -> Result<u64, WriteError> {
    let mut t = AlignedTables::new(vec![TableWriter::create(path, schema, layout)?], groups);
    for batch in batches {
        let batch = batch?;
        let mut at = 0;
        while at < batch.num_rows() {
            let n = t.step_rows(STEP_ROWS).min(batch.num_rows() - at);
            t.write(&[batch.slice(at, n)])?;
            at += n;
        }
    }
    t.finish()
}

/// Tables written side by side with the same row groups (row `i` of each table describes the
/// same thing, and a reader can pair their groups): each step hands every table a batch of
/// the same length; groups close together when the first table's group reaches the limits.
pub struct AlignedTables {
    tables: Vec<TableWriter>,
    groups: RowGroups,
    in_group: usize,
}

impl AlignedTables {
    pub fn new(tables: Vec<TableWriter>, groups: RowGroups) -> AlignedTables {
        AlignedTables {
            tables,
            groups: RowGroups {
                rows: groups.rows.max(1),
                bytes: groups.bytes.max(1),
            },
            in_group: 0,
        }
    }

    /// Rows the next step may hold without passing the group's row limit.
    pub fn step_rows(&self, most: usize) -> usize {
        most.clamp(1, self.groups.rows - self.in_group)
    }

    pub fn write(&mut self, batches: &[RecordBatch]) -> Result<(), WriteError> {
        assert_eq!(batches.len(), self.tables.len(), "one batch per table");
        let rows = batches.first().map_or(0, RecordBatch::num_rows);
        for (t, b) in self.tables.iter_mut().zip(batches) {
            assert_eq!(b.num_rows(), rows, "aligned batches have equal lengths");
            t.write(b)?;
        }
        self.in_group += rows;
        let size = self
            .tables
            .first()
            .map_or(0, |t| t.writer.in_progress_size());
        if self.in_group >= self.groups.rows || size >= self.groups.bytes {
            for t in &mut self.tables {
                t.close_group()?;
            }
            self.in_group = 0;
        }
        Ok(())
    }

    /// Finishes every file; returns the rows written (the same for each table).
    pub fn finish(self) -> Result<u64, WriteError> {
        let mut rows = 0;
        for t in self.tables {
            rows = t.finish()?;
        }
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{ArrayRef, StringArray, UInt64Array};
    use arrow_schema::{DataType, Field, Schema};
    use parquet::file::metadata::ColumnChunkMetaData;
    use parquet::file::reader::{FileReader, SerializedFileReader};

    #[test]
    fn aligned_row_groups_close_at_the_row_and_byte_limits() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("n", DataType::UInt64, true),
            Field::new("s", DataType::Utf8, true),
        ]));
        let small = Arc::new(Schema::new(vec![Field::new("n", DataType::UInt64, true)]));
        let dir = std::env::temp_dir().join(format!("rechain-pq-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let batch = |lo: u64, n: u64| {
            let cols: Vec<ArrayRef> = vec![
                Arc::new(UInt64Array::from_iter_values(lo..lo + n)),
                Arc::new(StringArray::from_iter_values(
                    (lo..lo + n).map(|i| format!("{i:064x}")),
                )),
            ];
            RecordBatch::try_new(schema.clone(), cols).unwrap()
        };
        let groups_of = |path: &Path| -> Vec<i64> {
            let r = SerializedFileReader::new(File::open(path).unwrap()).unwrap();
            let meta = r.metadata();
            let col = meta.row_group(0).column(0);
            assert_eq!(col.compression(), Compression::ZSTD(ZstdLevel::default()));
            assert!(col.statistics().is_some());
            meta.row_groups().iter().map(|g| g.num_rows()).collect()
        };
        let dictionary_s = Layout {
            dictionary: columns(&["s"]),
            ..Layout::default()
        };
        let write = |name: &str, limits: RowGroups| {
            let (a, b) = (dir.join(format!("{name}-a")), dir.join(format!("{name}-b")));
            let tables = vec![
                TableWriter::create(&a, schema.clone(), &dictionary_s).unwrap(),
                TableWriter::create(&b, small.clone(), &Layout::default()).unwrap(),
            ];
            let mut t = AlignedTables::new(tables, limits);
            let mut lo = 0u64;
            while lo < 10_000 {
                let n = t.step_rows(1000).min(10_000 - lo as usize) as u64;
                let wide = batch(lo, n);
                let narrow = wide.project(&[0]).unwrap();
                t.write(&[wide, narrow]).unwrap();
                lo += n;
            }
            assert_eq!(t.finish().unwrap(), 10_000);
            let (ga, gb) = (groups_of(&a), groups_of(&b));
            assert_eq!(ga, gb, "row groups line up");
            ga
        };
        let rows_only = RowGroups {
            rows: 4096,
            bytes: usize::MAX,
        };
        assert_eq!(write("rows", rows_only), vec![4096, 4096, 1808]);
        // A byte limit below one step closes a group after every step.
        let tiny = RowGroups {
            rows: 1 << 20,
            bytes: 1,
        };
        assert_eq!(write("bytes", tiny), vec![1000; 10]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_replaced_column_leaves_the_others_encoded_as_they_were() {
        use arrow_array::cast::AsArray;
        use arrow_array::types::UInt64Type;
        use arrow_array::{Array, BooleanArray};
        let schema = Arc::new(Schema::new(vec![
            Field::new("n", DataType::UInt64, false),
            Field::new("s", DataType::Utf8, true),
            Field::new("flag", DataType::Boolean, true),
        ]));
        let dir = std::env::temp_dir().join(format!("rechain-pq-replace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (src, dest) = (dir.join("src.parquet"), dir.join("dest.parquet"));
        let n = 10_000u64;
        let cols: Vec<ArrayRef> = vec![
            Arc::new(UInt64Array::from_iter_values(0..n)),
            Arc::new(StringArray::from_iter(
                (0..n).map(|i| (i % 7 != 0).then(|| format!("{i:064x}"))),
            )),
            Arc::new(BooleanArray::from_iter(
                (0..n).map(|i| (i % 5 != 0).then_some(i % 2 == 0)),
            )),
        ];
        let batch = RecordBatch::try_new(schema.clone(), cols).unwrap();
        let groups = RowGroups {
            rows: 3000,
            bytes: usize::MAX,
        };
        let layout = Layout {
            dictionary: columns(&["s"]),
            unsorted: columns(&["s"]),
            ..Layout::default()
        };
        write_batch(&src, &batch, &layout, groups).unwrap();
        // The new flag: set for multiples of 3, else the old one (null stays null).
        let rows = replace_column(&src, &dest, "flag", &["n", "flag"], |b| {
            let n = b.column_by_name("n").unwrap().as_primitive::<UInt64Type>();
            let old = b.column_by_name("flag").unwrap().as_boolean();
            Ok(Arc::new(BooleanArray::from_iter((0..b.num_rows()).map(
                |i| {
                    if n.value(i) % 3 == 0 {
                        Some(true)
                    } else {
                        old.is_valid(i).then(|| old.value(i))
                    }
                },
            ))))
        })
        .unwrap();
        assert_eq!(rows, n);
        let read = |path: &Path| {
            let f = File::open(path).unwrap();
            let r = ParquetRecordBatchReaderBuilder::try_new(f)
                .unwrap()
                .with_batch_size(1 << 20)
                .build()
                .unwrap();
            let batches: Vec<RecordBatch> = r.map(Result::unwrap).collect();
            assert_eq!(batches.len(), 1);
            batches.into_iter().next().unwrap()
        };
        let (before, after) = (read(&src), read(&dest));
        assert_eq!(after.schema(), before.schema(), "the Arrow schema is kept");
        assert_eq!(after.column(0), before.column(0));
        assert_eq!(after.column(1), before.column(1));
        let (old, new) = (before.column(2).as_boolean(), after.column(2).as_boolean());
        for i in 0..n as usize {
            let want = if i % 3 == 0 {
                Some(true)
            } else {
                old.is_valid(i).then(|| old.value(i))
            };
            assert_eq!(new.is_valid(i).then(|| new.value(i)), want, "row {i}");
        }
        // Same row groups; the untouched columns' chunks are the same bytes.
        let meta = |path: &Path| {
            SerializedFileReader::new(File::open(path).unwrap())
                .unwrap()
                .metadata()
                .clone()
        };
        let (a, b) = (meta(&src), meta(&dest));
        assert_eq!(a.num_row_groups(), 4);
        assert_eq!(a.num_row_groups(), b.num_row_groups());
        let bytes = |path: &Path, c: &ColumnChunkMetaData| {
            let (start, len) = c.byte_range();
            std::fs::read(path).unwrap()[start as usize..(start + len) as usize].to_vec()
        };
        for g in 0..a.num_row_groups() {
            let (ga, gb) = (a.row_group(g), b.row_group(g));
            assert_eq!(ga.num_rows(), gb.num_rows());
            for c in 0..2 {
                assert_eq!(bytes(&src, ga.column(c)), bytes(&dest, gb.column(c)));
                assert_eq!(ga.column(c).statistics(), gb.column(c).statistics());
            }
            assert_eq!(
                gb.column(2).compression(),
                Compression::ZSTD(ZstdLevel::default())
            );
        }
        assert!(replace_column(&src, &dest, "nope", &["n"], |b| Ok(b.column(0).clone())).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
