//! Profiling aid: encodes Parquet files again with the Rust core's writer (`parquet_out`),
//! each with the layout its own metadata records (codec, dictionary, delta lengths,
//! statistics) and its largest row group, and prints the writer's CPU seconds per file and in
//! all, to set beside `benchmarks/common.py::encoding_floor` (pyarrow's writer) on the same
//! files. `cargo run --release --example parquet_write_profile -- OUT_DIR FILE...`

use arrow_array::RecordBatch;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::{Compression, Encoding};
use rechain_native::parquet_out::{write_batches, Layout, RowGroups};
use std::fs::File;
use std::path::Path;

fn thread_cpu_s() -> f64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

fn main() {
    let mut args = std::env::args().skip(1);
    let out_dir = std::path::PathBuf::from(args.next().expect("output folder"));
    let mut total = 0.0;
    for (i, file) in args.enumerate() {
        let builder = ParquetRecordBatchReaderBuilder::try_new(File::open(&file).unwrap()).unwrap();
        let meta = builder.metadata().clone();
        let schema = builder.schema().clone();
        let batches: Vec<RecordBatch> = builder
            .with_batch_size(1 << 20)
            .build()
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let first = meta.row_group(0);
        let top =
            |c: &parquet::file::metadata::ColumnChunkMetaData| c.column_path().parts()[0].clone();
        let mut dictionary = Vec::new();
        let mut unsorted = Vec::new();
        let mut uncompressed = Vec::new();
        let mut delta_length = Vec::new();
        for c in first.columns() {
            if c.dictionary_page_offset().is_some() {
                dictionary.push(top(c));
            }
            if c.statistics().is_none() {
                unsorted.push(top(c));
            }
            if c.compression() == Compression::UNCOMPRESSED {
                uncompressed.push(top(c));
            }
            if c.encodings()
                .any(|e| e == Encoding::DELTA_LENGTH_BYTE_ARRAY)
            {
                delta_length.push(top(c));
            }
        }
        let layout = Layout {
            dictionary,
            unsorted,
            uncompressed,
            delta_length,
            compression: None,
        };
        let rows = (0..meta.num_row_groups())
            .map(|g| meta.row_group(g).num_rows() as usize)
            .max()
            .unwrap_or(1);
        let groups = RowGroups {
            rows,
            bytes: usize::MAX,
        };
        let out = out_dir.join(format!("{i}.parquet"));
        let t0 = thread_cpu_s();
        write_batches(&out, schema, batches.into_iter().map(Ok), &layout, groups).unwrap();
        let dt = thread_cpu_s() - t0;
        std::fs::remove_file(&out).unwrap();
        total += dt;
        println!("{:.3} s  {}", dt, Path::new(&file).display());
    }
    println!("total {total:.3} s");
}
