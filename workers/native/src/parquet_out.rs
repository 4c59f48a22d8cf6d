//! Parquet files written by the Rust core, with the settings `DataDir.stage_parquet_parts` gives
//! pyarrow's writer (zstd, statistics, dictionary encoding only for the columns named; the
//! tables may also name columns whose min/max statistics prune nothing), so a
//! stage can publish a table without loading pyarrow. Where the file goes and when it becomes
//! visible stays with `DataDir` (Python): this only writes the file it is given.

use arrow_array::RecordBatch;
use arrow_schema::{DataType, SchemaRef};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;
use std::fs::File;
use std::path::Path;

/// Row-group limits: at most `rows` rows, and a group is closed early once its encoded
/// columns (which a writer holds until the group is done) reach `bytes`.
#[derive(Debug, Clone, Copy)]
pub struct RowGroups {
    pub rows: usize,
    pub bytes: usize,
}

/// One Parquet file being written batch by batch; row groups are closed by its owner.
pub struct TableWriter {
    writer: ArrowWriter<File>,
    rows: u64,
}

impl TableWriter {
    pub fn create(
        path: &Path,
        schema: SchemaRef,
        dictionary_columns: &[&str],
    ) -> Result<TableWriter, String> {
        TableWriter::create_with(path, schema, dictionary_columns, &[])
    }

    /// `create`, with no statistics for `unsorted_columns`: values such as random hashes or
    /// scripts, whose min and max per page and row group would prune nothing and cost a
    /// comparison per value.
    pub fn create_with(
        path: &Path,
        schema: SchemaRef,
        dictionary_columns: &[&str],
        unsorted_columns: &[&str],
    ) -> Result<TableWriter, String> {
        let mut props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::default()))
            .set_dictionary_enabled(false)
            .set_max_row_group_row_count(None);
        for c in dictionary_columns {
            props = props.set_column_dictionary_enabled(ColumnPath::from(*c), true);
        }
        for c in unsorted_columns {
            let field = schema
                .field_with_name(c)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            // A list's values are the leaf `name.list.<item>` of the Parquet schema.
            let leaf = match field.data_type() {
                DataType::List(item) | DataType::LargeList(item) => {
                    vec![c.to_string(), "list".into(), item.name().clone()]
                }
                _ => vec![c.to_string()],
            };
            props =
                props.set_column_statistics_enabled(ColumnPath::new(leaf), EnabledStatistics::None);
        }
        let file = File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let writer = ArrowWriter::try_new(file, schema, Some(props.build()))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(TableWriter { writer, rows: 0 })
    }

    fn write(&mut self, batch: &RecordBatch) -> Result<(), String> {
        self.rows += batch.num_rows() as u64;
        self.writer.write(batch).map_err(|e| e.to_string())
    }

    fn close_group(&mut self) -> Result<(), String> {
        self.writer.flush().map_err(|e| e.to_string())
    }

    /// Writes the footer; returns the rows written. (`DataDir` syncs the file.)
    fn finish(self) -> Result<u64, String> {
        self.writer.into_inner().map_err(|e| e.to_string())?;
        Ok(self.rows)
    }
}

/// Rows handed to the writer per step when one batch is written whole: small enough that a
/// row group closes near its byte limit.
const STEP_ROWS: usize = 8_192;

/// Writes `batch` as one Parquet file at `path` (columns as for `TableWriter::create_with`),
/// closing row groups at `groups`' limits; returns the rows written.
pub fn write_batch(
    path: &Path,
    batch: &RecordBatch,
    dictionary_columns: &[&str],
    unsorted_columns: &[&str],
    groups: RowGroups,
) -> Result<u64, String> {
    let mut t = AlignedTables::new(
        vec![TableWriter::create_with(
            path,
            batch.schema(),
            dictionary_columns,
            unsorted_columns,
        )?],
        groups,
    );
    let mut at = 0;
    while at < batch.num_rows() {
        let n = t.step_rows(STEP_ROWS).min(batch.num_rows() - at);
        t.write(&[batch.slice(at, n)])?;
        at += n;
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

    pub fn write(&mut self, batches: &[RecordBatch]) -> Result<(), String> {
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
    pub fn finish(self) -> Result<u64, String> {
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
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use std::sync::Arc;

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
        let write = |name: &str, limits: RowGroups| {
            let (a, b) = (dir.join(format!("{name}-a")), dir.join(format!("{name}-b")));
            let tables = vec![
                TableWriter::create(&a, schema.clone(), &["s"]).unwrap(),
                TableWriter::create(&b, small.clone(), &[]).unwrap(),
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
}
