//! Python entry points for Bitcoin Core's block index (`btc::core_index`): encode the linked
//! tree into sorted LevelDB puts, decode a node's `'b'` records into columns, and the
//! index-guided blk scan. LevelDB itself is opened from Python (plyvel).

use super::btc_error::io_error;
use super::result::result_class;
use crate::btc::core_index_encode::{encode_index, HeaderRow, Packed};
use crate::btc::core_index_plan as plan;
use crate::btc::scan::{RecordHint, ScanConfig, Scanner};
use crate::datasets::hex::display_hex;
use crate::{binary, key8, network, shard_result, ShardScanInfo};
use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, UInt32Type, UInt64Type};
use arrow_array::{Array, ArrayRef, BinaryArray, FixedSizeBinaryArray, RecordBatch};
use arrow_buffer::{Buffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, Schema};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};
use pyo3_arrow::{PyArray, PyRecordBatch};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

fn column<'a>(batch: &'a RecordBatch, name: &str) -> PyResult<&'a ArrayRef> {
    batch
        .column_by_name(name)
        .ok_or_else(|| PyValueError::new_err(format!("headers batch lacks column {name}")))
}

result_class! {
    /// What `core_index_encode` wrote: block records, those with data and with checked
    /// transactions, file records and the last file.
    CoreIndexSummary {
        block_records: usize,
        with_data: u64,
        valid_transactions: u64,
        file_records: usize,
        last_file: u32,
    }
}

result_class! {
    /// How the hints of a guided scan held (`scan_blk_guided`): records found where a hint
    /// said, bytes searched for magic, and the hints missed: (offset, hash, reason).
    HintReport {
        verified: u64,
        searched_bytes: u64,
        misses: Vec<(u64, String, String)>,
    }
}

/// Encodes the linked block tree (the `headers` table) as Core's block index: `'b'` records for
/// every header linked to genesis (sorted by hash), `'f'` per blk file, and `'l'`.
/// Returns (keys, values, summary) with keys in LevelDB order.
#[pyfunction]
fn core_index_encode<'py>(
    py: Python<'py>,
    headers: PyRecordBatch,
    network_name: &str,
) -> PyResult<Bound<'py, PyList>> {
    let net = network(network_name)?;
    let batch = headers.into_inner();
    let hex_col = |name: &str| -> PyResult<_> {
        column(&batch, name)?
            .as_string_opt::<i32>()
            .ok_or_else(|| PyValueError::new_err(format!("column {name} is not utf8")))
    };
    let prim_err = |name: &str| PyValueError::new_err(format!("column {name} has the wrong type"));
    let hash = hex_col("hash")?;
    let prev = hex_col("prev_hash")?;
    let merkle = hex_col("merkle_root")?;
    let copy_status = hex_col("copy_status")?;
    let u32col = |name: &str| -> PyResult<_> {
        column(&batch, name)?
            .as_primitive_opt::<UInt32Type>()
            .ok_or_else(|| prim_err(name))
    };
    let height = u32col("height")?;
    let time = u32col("time")?;
    let bits = u32col("bits")?;
    let nonce = u32col("nonce")?;
    let file = u32col("file")?;
    let size = u32col("size")?;
    let version = column(&batch, "version")?
        .as_primitive_opt::<Int32Type>()
        .ok_or_else(|| prim_err("version"))?;
    let data_pos = column(&batch, "data_pos")?
        .as_primitive_opt::<UInt64Type>()
        .ok_or_else(|| prim_err("data_pos"))?;
    let n_tx = column(&batch, "n_tx")?
        .as_primitive_opt::<UInt64Type>()
        .ok_or_else(|| prim_err("n_tx"))?;
    let checked = column(&batch, "body_checked")?
        .as_boolean_opt()
        .ok_or_else(|| prim_err("body_checked"))?;

    let row = |i: usize| {
        height.is_valid(i).then(|| HeaderRow {
            hash: hash.value(i),
            prev_hash: prev.value(i),
            merkle_root: merkle.value(i),
            copy_ok: copy_status.value(i) == "ok",
            body_checked: checked.value(i),
            height: height.value(i),
            version: version.value(i),
            time: time.value(i),
            bits: bits.value(i),
            nonce: nonce.value(i),
            file: file.value(i),
            size: size.value(i),
            data_pos: data_pos.value(i),
            n_tx: n_tx.value(i),
        })
    };
    let e = py
        .detach(|| encode_index(batch.num_rows(), row, net))
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let packed = |p: Packed| {
        let offsets = OffsetBuffer::new(ScalarBuffer::from(p.offsets));
        BinaryArray::new(offsets, Buffer::from_vec(p.data), None)
    };
    let (keys, values) = (packed(e.keys), packed(e.values));
    let (blocks, with_data, with_txs, n_files, last_file) = (
        e.block_records,
        e.with_data,
        e.valid_transactions,
        e.file_records,
        e.last_file,
    );
    let summary = CoreIndexSummary {
        block_records: blocks,
        with_data,
        valid_transactions: with_txs,
        file_records: n_files,
        last_file,
    };
    let out = PyList::empty(py);
    out.append(binary(py, keys)?)?;
    out.append(binary(py, values)?)?;
    out.append(summary)?;
    Ok(out)
}

/// Records that did not decode: (key, reason).
type Problems = Vec<(String, String)>;

/// `scan_blk` guided by hinted record starts (magic offsets, u64 LE, sorted; hashes, 32 bytes
/// each, internal order). Same (records, events, info) as `scan_blk`, plus a report:
/// {verified, searched_bytes, misses: [(offset, hash, reason)]}.
#[pyfunction]
#[pyo3(signature = (path, file_no, start, bound, network_name, xor_key, check_bodies,
                    hint_offsets, hint_hashes))]
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
fn scan_blk_guided<'py>(
    py: Python<'py>,
    path: PathBuf,
    file_no: u32,
    start: u64,
    bound: u64,
    network_name: &str,
    xor_key: &[u8],
    check_bodies: bool,
    hint_offsets: &[u8],
    hint_hashes: &[u8],
) -> PyResult<(
    Bound<'py, PyAny>,
    Bound<'py, PyAny>,
    ShardScanInfo,
    HintReport,
)> {
    if !hint_offsets.len().is_multiple_of(8) || hint_hashes.len() != hint_offsets.len() * 4 {
        return Err(PyValueError::new_err(
            "hint offsets must be u64s and hashes 32 bytes each",
        ));
    }
    let hints: Vec<RecordHint> = hint_offsets
        .chunks_exact(8)
        .zip(hint_hashes.chunks_exact(32))
        .map(|(o, h)| RecordHint {
            magic_offset: u64::from_le_bytes(o.try_into().unwrap()),
            hash: h.try_into().unwrap(),
        })
        .collect();
    if hints
        .windows(2)
        .any(|w| w[0].magic_offset > w[1].magic_offset)
    {
        return Err(PyValueError::new_err("hints must be sorted by offset"));
    }
    let cfg = ScanConfig {
        network: network(network_name)?,
        xor_key: key8(xor_key)?,
        check_bodies,
    };
    let result = py.detach(|| -> std::io::Result<_> {
        let mut scanner = Scanner::open(&cfg, &path)?;
        scanner.scan_with_hints(start, bound, &hints)
    });
    let (shard, report) = result.map_err(|e| io_error(py, &path, &e))?;
    let (records, events, info) = shard_result(py, file_no, shard)?;
    let rep = HintReport {
        verified: report.verified,
        searched_bytes: report.searched_bytes,
        misses: report
            .misses
            .into_iter()
            .map(|m| (m.magic_offset, display_hex(&m.hash), m.reason))
            .collect(),
    };
    Ok((records, events, info, rep))
}

/// Numbers as one bytes object of their little-endian forms, written in place.
fn le_bytes<'py, T: Copy, const W: usize>(
    py: Python<'py>,
    items: &[T],
    le: impl Fn(T) -> [u8; W],
) -> PyResult<Bound<'py, PyBytes>> {
    PyBytes::new_with(py, items.len() * W, |buf| {
        for (out, &x) in buf.chunks_exact_mut(W).zip(items) {
            out.copy_from_slice(&le(x));
        }
        Ok(())
    })
}

type PlanOutput<'py> = (
    Bound<'py, PyAny>,
    Problems,
    Vec<(u32, i64, String, String)>,
    Vec<(
        u32,
        Bound<'py, PyBytes>,
        Bound<'py, PyBytes>,
        Bound<'py, PyBytes>,
        usize,
    )>,
);

/// Decodes Core's `'b'` records while they are read: `feed` takes the next (key, value) bytes
/// pairs in key order (copied, so the reader can free them), background threads decode, and
/// `finish` plans the guided scan of the blk files numbered `present`. It returns (entries,
/// problems, unplaceable, hints): entries {hash (internal), height, hinted (became a hint)} in
/// key order; problems [(key, reason)] for records that do not decode; unplaceable [(file,
/// offset, hash, reason)] for data the files cannot hold; hints [(file, offsets u64 LE,
/// hashes, heights u32 LE, count)] per present file, sorted by offset.
#[pyclass(module = "rechain.workers._native", frozen)]
struct CoreIndexPlanner {
    planner: Mutex<Option<plan::Planner>>,
}

#[pymethods]
impl CoreIndexPlanner {
    #[new]
    fn new(present: Vec<u32>, threads: usize) -> CoreIndexPlanner {
        CoreIndexPlanner {
            planner: Mutex::new(Some(plan::Planner::new(present, threads))),
        }
    }

    /// Queues a list of (key, value) bytes pairs.
    fn feed(&self, pairs: &Bound<'_, PyList>) -> PyResult<()> {
        let mut chunk = plan::Chunk::with_capacity(pairs.len(), pairs.len() * 160);
        for pair in pairs.iter() {
            let (key, value): (Bound<'_, PyBytes>, Bound<'_, PyBytes>) = pair.extract()?;
            chunk.push(key.as_bytes(), value.as_bytes());
        }
        self.planner
            .lock()
            .expect("planner lock")
            .as_mut()
            .ok_or_else(|| PyValueError::new_err("the planner has finished"))?
            .feed(chunk);
        Ok(())
    }

    /// Waits for the decode threads and returns the plan (see the class).
    fn finish<'py>(&self, py: Python<'py>) -> PyResult<PlanOutput<'py>> {
        let planner = self
            .planner
            .lock()
            .expect("planner lock")
            .take()
            .ok_or_else(|| PyValueError::new_err("the planner has finished"))?;
        let plan = py.detach(|| planner.finish());
        let hash =
            FixedSizeBinaryArray::new(32, Buffer::from_vec(plan.hashes.into_flattened()), None);
        let schema = Schema::new(vec![
            Field::new("hash", DataType::FixedSizeBinary(32), false),
            Field::new("height", DataType::UInt32, false),
            Field::new("hinted", DataType::Boolean, false),
        ]);
        let cols: Vec<ArrayRef> = vec![
            Arc::new(hash),
            Arc::new(arrow_array::UInt32Array::from(plan.heights)),
            Arc::new(arrow_array::BooleanArray::from(plan.hinted)),
        ];
        let entries = RecordBatch::try_new(Arc::new(schema), cols).expect("columns match");
        let hints = plan
            .files
            .iter()
            .map(|f| -> PyResult<_> {
                Ok((
                    f.file,
                    le_bytes(py, &f.offsets, |o| o.to_le_bytes())?,
                    PyBytes::new(py, f.hashes.as_flattened()),
                    le_bytes(py, &f.heights, |h| h.to_le_bytes())?,
                    f.offsets.len(),
                ))
            })
            .collect::<PyResult<_>>()?;
        Ok((
            PyRecordBatch::new(entries).into_pyarrow(py)?,
            plan.problems,
            plan.unplaceable,
            hints,
        ))
    }
}

/// Linked headers (`hash` display hex, `height` null when not linked) against the index
/// entries of `core_index_plan`: the (row, index height) of every linked copy whose height
/// differs from the index's, by row.
#[pyfunction]
fn core_index_height_check(
    py: Python<'_>,
    entries: PyRecordBatch,
    linked_hash: PyArray,
    linked_height: PyArray,
) -> PyResult<Vec<(u32, u32)>> {
    let entries = entries.into_inner();
    let hash = column(&entries, "hash")?
        .as_fixed_size_binary_opt()
        .ok_or_else(|| PyValueError::new_err("entries.hash must be fixed-size binary"))?;
    let height = column(&entries, "height")?
        .as_primitive_opt::<UInt32Type>()
        .ok_or_else(|| PyValueError::new_err("entries.height must be uint32"))?;
    let linked_hash = linked_hash.into_inner().0;
    let linked_height = linked_height.into_inner().0;
    let (Some(lh), Some(lht)) = (
        linked_hash.as_string_opt::<i32>(),
        linked_height.as_primitive_opt::<UInt32Type>(),
    ) else {
        return Err(PyValueError::new_err(
            "linked hashes must be utf8 and heights uint32",
        ));
    };
    if lh.len() != lht.len() {
        return Err(PyValueError::new_err("linked columns differ in length"));
    }
    Ok(py.detach(|| {
        let index: Vec<([u8; 32], u32)> = (0..hash.len())
            .map(|i| (hash.value(i).try_into().expect("32 bytes"), height.value(i)))
            .collect();
        plan::height_disagreements(&index, lh.iter().zip(lht.iter()))
    }))
}

/// One file's hints as Python hands them back: (file, offsets u64 LE, hashes, heights u32 LE).
type RawFileHints = (u32, Vec<u8>, Vec<u8>, Vec<u8>);

/// Linked headers (`file`, `offset`, `height`) against the hints of `core_index_plan`
/// [(file, offsets u64 LE, hashes, heights u32 LE)], minus the `missed` (file, offset) starts:
/// (row, index height, display hash) of every row at an indexed start whose height differs.
#[pyfunction]
fn core_index_position_check(
    py: Python<'_>,
    hints: Vec<RawFileHints>,
    missed: Vec<(u32, u64)>,
    file: PyArray,
    offset: PyArray,
    height: PyArray,
) -> PyResult<Vec<(u32, u32, String)>> {
    let mut files: Vec<plan::FileHints> = Vec::with_capacity(hints.len());
    for (f, offsets, hashes, heights) in hints {
        if offsets.len() % 8 != 0 || hashes.len() != offsets.len() * 4 {
            return Err(PyValueError::new_err(
                "hints: u64 offsets and 32-byte hashes",
            ));
        }
        if heights.len() * 2 != offsets.len() {
            return Err(PyValueError::new_err("hints: one u32 height per offset"));
        }
        files.push(plan::FileHints {
            file: f,
            offsets: offsets
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
                .collect(),
            hashes: hashes
                .chunks_exact(32)
                .map(|c| c.try_into().unwrap())
                .collect(),
            heights: heights
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
                .collect(),
        });
    }
    files.sort_unstable_by_key(|f| f.file);
    let (file, offset, height) = (
        file.into_inner().0,
        offset.into_inner().0,
        height.into_inner().0,
    );
    let (Some(file), Some(offset), Some(height)) = (
        file.as_primitive_opt::<UInt32Type>(),
        offset.as_primitive_opt::<UInt64Type>(),
        height.as_primitive_opt::<UInt32Type>(),
    ) else {
        return Err(PyValueError::new_err(
            "linked file and height must be uint32, offset uint64",
        ));
    };
    if offset.len() != file.len() || height.len() != file.len() {
        return Err(PyValueError::new_err(
            "linked file, offset and height differ in length",
        ));
    }
    // Rows are independent: the two halves are checked on two threads.
    let check = |lo: usize, hi: usize| -> Vec<(u32, u32, [u8; 32])> {
        let (f, o, h) = (
            file.slice(lo, hi - lo),
            offset.slice(lo, hi - lo),
            height.slice(lo, hi - lo),
        );
        let linked = f
            .iter()
            .zip(o.iter())
            .zip(h.iter())
            .map(|((f, o), h)| (f, o, h));
        plan::position_disagreements(&files, &missed, linked)
            .into_iter()
            .map(|(row, h, hash)| (row + lo as u32, h, hash))
            .collect()
    };
    let n = file.len();
    let rows = py.detach(|| {
        std::thread::scope(|s| {
            let second = s.spawn(|| check(n / 2, n));
            let mut rows = check(0, n / 2);
            rows.extend(second.join().expect("position check thread"));
            rows
        })
    });
    Ok(rows
        .into_iter()
        .map(|(row, h, hash)| (row, h, display_hex(&hash)))
        .collect())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(core_index_position_check, m)?)?;
    m.add_class::<CoreIndexPlanner>()?;
    m.add_class::<CoreIndexSummary>()?;
    m.add_class::<HintReport>()?;
    m.add_function(wrap_pyfunction!(core_index_height_check, m)?)?;
    m.add_function(wrap_pyfunction!(core_index_encode, m)?)?;
    m.add_function(wrap_pyfunction!(scan_blk_guided, m)?)?;
    Ok(())
}
