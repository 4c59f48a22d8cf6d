//! rechain's native core, exposed to Python as `rechain.workers._native`.
//!
//! Byte work lives here (scanning, decoding, hashing, linking, generating); Python receives
//! Arrow record batches through the C data interface and never loops over records.

pub mod atomic;
pub mod bounded;
pub mod btc;
pub mod datasets;
pub mod eth;
pub mod flow;
pub mod parquet_out;
mod py;
pub mod sst;
pub mod store;
pub mod writeback;

use btc::network::Network;
use btc::scan::{ScanConfig, Scanner};
use primitive_types::U256;
use py::result::result_class;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use pyo3_arrow::{PyArray, PyRecordBatch};
use std::path::PathBuf;
use std::sync::Arc;

pub(crate) fn network(name: &str) -> PyResult<Network> {
    Network::from_name(name).ok_or_else(|| {
        PyValueError::new_err(format!(
            "unknown network {name:?} (expected main, testnet, testnet4, signet or regtest)"
        ))
    })
}

pub(crate) fn key8(b: &[u8]) -> PyResult<[u8; 8]> {
    b.try_into()
        .map_err(|_| PyValueError::new_err("the XOR key must be exactly 8 bytes"))
}

pub(crate) fn hex_be(v: U256) -> String {
    datasets::hex::to_hex(&v.to_big_endian())
}

result_class! {
    /// A network's constants (`network_info`): its magic bytes, genesis hash (display hex) and
    /// bits, BIP34 height and halving interval.
    NetworkInfo {
        name: &'static str,
        magic: Py<PyBytes>,
        genesis_hash: &'static str,
        genesis_bits: u32,
        bip34_height: u64,
        halving_interval: u64,
        minimum_chain_work: &'static str,
        target_spacing: u64,
    }
}

/// Network constants: magic, genesis hash (display hex), pow limit bits.
#[pyfunction]
fn network_info(py: Python<'_>, name: &str) -> PyResult<NetworkInfo> {
    let n = network(name)?;
    Ok(NetworkInfo {
        name: n.name(),
        magic: PyBytes::new(py, &n.magic()).unbind(),
        genesis_hash: n.genesis_hash_hex(),
        genesis_bits: n.genesis_bits(),
        bip34_height: n.bip34_height(),
        halving_interval: n.halving_interval(),
        minimum_chain_work: n.minimum_chain_work_hex(),
        target_spacing: n.target_spacing(),
    })
}

/// Scans record starts in `[start, bound)` of one blk file.
/// Returns (records, events, info) where info describes what is left open at the shard's end.
#[pyfunction]
#[pyo3(signature = (path, file_no, start, bound, network_name, xor_key, check_bodies=false))]
#[allow(clippy::too_many_arguments)]
fn scan_blk<'py>(
    py: Python<'py>,
    path: PathBuf,
    file_no: u32,
    start: u64,
    bound: u64,
    network_name: &str,
    xor_key: &[u8],
    check_bodies: bool,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>, ShardScanInfo)> {
    let cfg = ScanConfig {
        network: network(network_name)?,
        xor_key: key8(xor_key)?,
        check_bodies,
    };
    let result = py.detach(|| -> std::io::Result<_> {
        let mut scanner = Scanner::open(&cfg, &path)?;
        scanner.scan(start, bound)
    });
    let shard = result.map_err(|e| py::btc_error::io_error(py, &path, &e))?;
    shard_result(py, file_no, shard)
}

result_class! {
    /// What a scanned shard leaves open and read (`scan_blk`, `scan_blk_guided`): the range
    /// scanned, the file's length, a gap before the first record, and the record started
    /// before the bound but not finished (`pending_*`), for the next shard to stitch.
    ShardScanInfo {
        start: u64,
        bound: u64,
        file_len: u64,
        leading_gap: Option<(u64, bool)>,
        empty: bool,
        pending_start: u64,
        pending_through: u64,
        pending_all_zero: bool,
        bytes_read: u64,
    }
}

/// A scanned shard as Python sees it: (records, events, info about what is left open).
pub(crate) fn shard_result<'py>(
    py: Python<'py>,
    file_no: u32,
    shard: btc::scan::ShardScan,
) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>, ShardScanInfo)> {
    // Built without the GIL: threads of one process (the guided reindex) scan in parallel.
    let (records, events) = py.detach(|| {
        (
            datasets::btc_records::build(file_no, shard.records),
            datasets::btc_events::build(file_no, &shard.events),
        )
    });
    let records = PyRecordBatch::new(records).into_pyarrow(py)?;
    let events = PyRecordBatch::new(events).into_pyarrow(py)?;
    let info = ShardScanInfo {
        start: shard.start,
        bound: shard.bound,
        file_len: shard.file_len,
        leading_gap: shard.leading_gap,
        empty: shard.empty,
        pending_start: shard.pending.start,
        pending_through: shard.pending.through,
        pending_all_zero: shard.pending.all_zero,
        bytes_read: shard.bytes_read,
    };
    Ok((records, events, info))
}

/// Full decode of the block records at `offsets` (magic positions, ascending) of one blk file.
/// Returns the staged (blocks, transactions, inputs, outputs) batches and the bytes decoded.
#[pyfunction]
fn decode_blk_bodies<'py>(
    py: Python<'py>,
    path: PathBuf,
    file_no: u32,
    offsets: Vec<u64>,
    network_name: &str,
    xor_key: &[u8],
) -> PyResult<(Vec<Bound<'py, PyAny>>, u64)> {
    let net = network(network_name)?;
    let key = key8(xor_key)?;
    let cols = py
        .detach(|| btc::decode::decode_file_records(&path, key, net, &offsets))
        .map_err(|e| py::btc_error::io_error(py, &path, &e))?;
    let bytes = cols.bytes;
    let batches = datasets::btc_bodies::build(file_no, cols)
        .into_iter()
        .map(|b| PyRecordBatch::new(b).into_pyarrow(py))
        .collect::<PyResult<Vec<_>>>()?;
    Ok((batches, bytes))
}

/// The body pass's staging of the block records at `offsets` (magic positions, ascending) of
/// one blk file: each record checked exactly as `decode_blk_bodies` checks it, returned as the
/// (`body_blocks`, `body_txids`) batches, and the bytes decoded.
#[pyfunction]
fn decode_blk_verdicts<'py>(
    py: Python<'py>,
    path: PathBuf,
    file_no: u32,
    offsets: Vec<u64>,
    network_name: &str,
    xor_key: &[u8],
) -> PyResult<(Vec<Bound<'py, PyAny>>, u64)> {
    let net = network(network_name)?;
    let key = key8(xor_key)?;
    let rows = btc::decode::Rows::Verdicts;
    let cols = py
        .detach(|| btc::decode::decode_file_rows(&path, key, net, &offsets, rows))
        .map_err(|e| py::btc_error::io_error(py, &path, &e))?;
    let bytes = cols.bytes;
    let batches = datasets::btc_bodies::build_verdicts(file_no, cols)
        .into_iter()
        .map(|b| PyRecordBatch::new(b).into_pyarrow(py))
        .collect::<PyResult<Vec<_>>>()?;
    Ok((batches, bytes))
}

/// Empty batches with the dataset schemas (the schemas' single source).
#[pyfunction]
fn empty_batch<'py>(py: Python<'py>, dataset: &str) -> PyResult<Bound<'py, PyAny>> {
    let batch = match dataset {
        "btc_records" => datasets::btc_records::build(0, Default::default()),
        "btc_events" => datasets::btc_events::build(0, &[]),
        "headers" => arrow_array::RecordBatch::new_empty(datasets::btc_headers::schema()),
        "btc_spends" => {
            arrow_array::RecordBatch::new_empty(datasets::btc_chain_rows::spends_schema())
        }
        other if datasets::btc_bodies::schema(other).is_some() => {
            arrow_array::RecordBatch::new_empty(datasets::btc_bodies::schema(other).unwrap())
        }
        other => return Err(PyValueError::new_err(format!("unknown dataset {other}"))),
    };
    PyRecordBatch::new(batch).into_pyarrow(py)
}

/// The values of a binary, large binary or fixed-size binary array without nulls, in place.
pub(crate) fn binary_values(array: &arrow_array::ArrayRef) -> PyResult<Vec<&[u8]>> {
    use arrow_array::cast::AsArray;
    if array.null_count() > 0 {
        return Err(PyValueError::new_err("binary values must not be null"));
    }
    Ok(if let Some(a) = array.as_fixed_size_binary_opt() {
        a.iter().map(|v| v.unwrap_or_default()).collect()
    } else if let Some(a) = array.as_binary_opt::<i32>() {
        a.iter().map(|v| v.unwrap_or_default()).collect()
    } else if let Some(a) = array.as_binary_opt::<i64>() {
        a.iter().map(|v| v.unwrap_or_default()).collect()
    } else {
        return Err(PyValueError::new_err(format!(
            "expected binary values, not {}",
            array.data_type()
        )));
    })
}

pub(crate) fn binary<'py>(
    py: Python<'py>,
    a: arrow_array::BinaryArray,
) -> PyResult<Bound<'py, PyAny>> {
    let arr = PyArray::from_array_ref(Arc::new(a));
    let obj: Py<PyAny> = arr.to_pyarrow(py)?.unbind();
    Ok(obj.into_bound(py))
}

result_class! {
    /// One block of the block index (`decode_index_value`: a `btc_index` value, layout in
    /// `store.rs`): its header's fields, where its record is, and its place in the tree.
    IndexEntry {
        hash: String,
        prev_hash: String,
        merkle_root: String,
        version: i32,
        time: u32,
        bits: u32,
        nonce: u32,
        height: Option<u32>,
        status: &'static str,
        in_best_chain: bool,
        chainwork: Option<String>,
        file: u32,
        offset: u64,
        data_pos: u64,
        size: u32,
        n_tx: Option<u32>,
        copies: u32,
    }
}

/// Decodes one `btc_index` value (layout in `store.rs`).
#[pyfunction]
fn decode_index_value(py: Python<'_>, value: &[u8]) -> PyResult<IndexEntry> {
    let v = store::IndexValue::decode(value).map_err(|e| py::btc_error::store_error(py, &e))?;
    let status = [
        btc::link::EntryState::Active,
        btc::link::EntryState::ValidFork,
        btc::link::EntryState::HeadersOnly,
        btc::link::EntryState::Orphan,
        btc::link::EntryState::Unlinked,
        btc::link::EntryState::Invalid,
    ]
    .get(v.state as usize)
    .map(|s| s.name())
    .unwrap_or("unknown");
    let h = btc::header::Header::parse(&v.header);
    Ok(IndexEntry {
        hash: datasets::hex::display_hex(&btc::sha256::sha256d(&v.header)),
        prev_hash: datasets::hex::display_hex(&h.prev_hash),
        merkle_root: datasets::hex::display_hex(&h.merkle_root),
        version: h.version,
        time: h.time,
        bits: h.bits,
        nonce: h.nonce,
        height: v.height,
        status,
        in_best_chain: v.in_best_chain,
        chainwork: v.height.map(|_| datasets::hex::to_hex(&v.chainwork)),
        file: v.file,
        offset: v.magic_offset,
        data_pos: v.magic_offset + 8,
        size: v.declared_size,
        n_tx: v.n_tx,
        copies: v.copies,
    })
}

/// The `btc_best` key of the bucket holding `height`.
#[pyfunction]
fn best_chain_key<'py>(py: Python<'py>, height: u32) -> Bound<'py, PyBytes> {
    PyBytes::new(py, &store::best_chain_key(height))
}

/// (start, end) of `height`'s hash inside its `btc_best` bucket value.
#[pyfunction]
fn best_chain_slot(height: u32) -> (usize, usize) {
    let r = store::best_chain_slot(height);
    (r.start, r.end)
}

#[pyfunction]
fn parse_hash<'py>(py: Python<'py>, display_hex: &str) -> PyResult<Bound<'py, PyBytes>> {
    let h = datasets::hex::parse_display_hex(display_hex)
        .ok_or_else(|| PyValueError::new_err(format!("not a 64-digit hex hash: {display_hex}")))?;
    Ok(PyBytes::new(py, &h))
}

#[pyfunction]
fn display_hash(internal: &[u8]) -> String {
    datasets::hex::display_hex(internal)
}

/// Each 32-byte hash of `hashes` (binary or fixed_size_binary(32), no nulls) byte-reversed,
/// as fixed_size_binary(32): display order to internal order (and back), for keys sorted the
/// way the database sorts them.
#[pyfunction]
fn reversed_hashes<'py>(py: Python<'py>, hashes: PyArray) -> PyResult<Bound<'py, PyAny>> {
    let (array, _) = hashes.into_inner();
    let values = binary_values(&array)?;
    if values.iter().any(|v| v.len() != 32) {
        return Err(PyValueError::new_err("every hash must be 32 bytes"));
    }
    let out: Vec<[u8; 32]> = values
        .iter()
        .map(|&v| datasets::hex::reversed32(v.try_into().expect("32 bytes")))
        .collect();
    let reversed =
        arrow_array::FixedSizeBinaryArray::try_new(32, out.into_flattened().into(), None)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let out = PyArray::from_array_ref(Arc::new(reversed));
    let array = out.to_pyarrow(py)?.unbind();
    Ok(array.into_bound(py))
}

/// The test chain generator's settings (`btc::gen::GenConfig`), built in Python by keyword:
/// `BtcGenConfig(blocks=300, seed=7)`; every other field has the default of `rechain gen
/// bitcoin`.
#[pyclass(module = "rechain.workers._native", frozen, get_all)]
struct BtcGenConfig {
    blocks: u64,
    network: String,
    seed: u64,
    file_size: u64,
    xor: bool,
    shuffle_window: usize,
    side_branches: usize,
    orphans: usize,
    tx_min: usize,
    tx_max: usize,
    reorg_depth: u64,
    reorg_back: bool,
    bad_signature_height: u64,
    bad_signature_branch: bool,
    /// "wallet" (P2PKH, P2WPKH, P2TR key path: the default chains' bytes) or "all".
    script_kinds: String,
    bad_signature_kind: Option<String>,
}

#[pymethods]
impl BtcGenConfig {
    #[new]
    #[pyo3(signature = (*, blocks, network="regtest".to_string(), seed=1, file_size=134_217_728, xor=true,
                        shuffle_window=16, side_branches=0, orphans=0, tx_min=1, tx_max=1,
                        reorg_depth=0, reorg_back=false, bad_signature_height=0,
                        bad_signature_branch=false, script_kinds="wallet".to_string(),
                        bad_signature_kind=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        blocks: u64,
        network: String,
        seed: u64,
        file_size: u64,
        xor: bool,
        shuffle_window: usize,
        side_branches: usize,
        orphans: usize,
        tx_min: usize,
        tx_max: usize,
        reorg_depth: u64,
        reorg_back: bool,
        bad_signature_height: u64,
        bad_signature_branch: bool,
        script_kinds: String,
        bad_signature_kind: Option<String>,
    ) -> Self {
        BtcGenConfig {
            blocks,
            network,
            seed,
            file_size,
            xor,
            shuffle_window,
            side_branches,
            orphans,
            tx_min,
            tx_max,
            reorg_depth,
            reorg_back,
            bad_signature_height,
            bad_signature_branch,
            script_kinds,
            bad_signature_kind,
        }
    }
}

result_class! {
    /// A generated test chain (`generate_bitcoin`): the facts of expected.json, and the best
    /// chain's hashes (`best_chain`, in height order).
    BtcGenSummary {
        network: &'static str,
        tip_hash: String,
        tip_height: u64,
        chainwork: String,
        blocks_indexed: u64,
        side_branch_blocks: u64,
        orphans: Vec<String>,
        invalid_count: u64,
        utxo_count: u64,
        total_amount: u64,
        duplicates: u64,
        records: u64,
        reorg_records: (u64, u64),
        bad_signature_height: Option<u64>,
        bad_signature_kind: Option<&'static str>,
        files: u32,
        bytes: u64,
        xor_key: String,
        best_chain: Vec<String>,
    }
    omit_none: [bad_signature_height, bad_signature_kind]
}

/// Generates a test chain under `outdir/blocks`; returns the facts for expected.json.
#[pyfunction]
fn generate_bitcoin(
    py: Python<'_>,
    outdir: PathBuf,
    config: Bound<'_, BtcGenConfig>,
) -> PyResult<BtcGenSummary> {
    let c = config.get();
    let all_script_kinds = match c.script_kinds.as_str() {
        "wallet" => false,
        "all" => true,
        other => {
            return Err(PyValueError::new_err(format!(
                "script kinds: wallet or all, not {other:?}"
            )))
        }
    };
    let bad_signature_kind = match &c.bad_signature_kind {
        None => None,
        Some(name) => Some(btc::gen_keys::Kind::from_name(name).ok_or_else(|| {
            let known: Vec<&str> = btc::gen_keys::ALL_KINDS.iter().map(|k| k.name()).collect();
            PyValueError::new_err(format!(
                "bad signature kind {name:?}: one of {}",
                known.join(", ")
            ))
        })?),
    };
    let cfg = btc::gen::GenConfig {
        network: network(&c.network)?,
        blocks: c.blocks,
        seed: c.seed,
        file_size: c.file_size,
        xor: c.xor,
        shuffle_window: c.shuffle_window,
        side_branches: c.side_branches,
        orphans: c.orphans,
        tx_min: c.tx_min,
        tx_max: c.tx_max,
        reorg_depth: c.reorg_depth,
        reorg_back: c.reorg_back,
        bad_signature_height: c.bad_signature_height,
        bad_signature_branch: c.bad_signature_branch,
        all_script_kinds,
        bad_signature_kind,
    };
    let dir = outdir.join("blocks");
    let s = py
        .detach(|| btc::gen::generate(&cfg, &dir))
        .map_err(|e| py::btc_error::io_error(py, &dir, &e))?;
    Ok(BtcGenSummary {
        network: cfg.network.name(),
        tip_hash: datasets::hex::display_hex(&s.tip_hash),
        tip_height: s.tip_height,
        chainwork: hex_be(s.chainwork),
        blocks_indexed: s.blocks_indexed,
        side_branch_blocks: s.side_branch_blocks,
        orphans: s
            .orphans
            .iter()
            .map(|h| datasets::hex::display_hex(h))
            .collect(),
        invalid_count: s.invalid_count,
        utxo_count: s.utxo_count,
        total_amount: s.utxo_total,
        duplicates: 0,
        records: s.records,
        reorg_records: s.reorg_records,
        bad_signature_height: (cfg.bad_signature_height > 0).then_some(cfg.bad_signature_height),
        bad_signature_kind: s.bad_signature_kind.map(|k| k.name()),
        files: s.files,
        bytes: s.bytes,
        xor_key: s.xor_key.iter().map(|b| format!("{b:02x}")).collect(),
        best_chain: s
            .heights
            .iter()
            .map(|(_, h)| datasets::hex::display_hex(h))
            .collect(),
    })
}

/// This machine's double-SHA-256 rate on 80-byte headers, single thread: `n` hashes, in seconds.
#[pyfunction]
fn hash_headers_seconds(py: Python<'_>, n: u64) -> f64 {
    py.detach(|| btc::header::hash_headers_seconds(n))
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(network_info, m)?)?;
    m.add_function(wrap_pyfunction!(scan_blk, m)?)?;
    m.add_function(wrap_pyfunction!(empty_batch, m)?)?;
    m.add_function(wrap_pyfunction!(decode_blk_bodies, m)?)?;
    m.add_function(wrap_pyfunction!(decode_blk_verdicts, m)?)?;
    m.add_class::<py::sst::SstWriter>()?;
    m.add_class::<py::parquet_layout::ParquetLayout>()?;
    m.add_function(wrap_pyfunction!(py::sst::merge_sorted_runs, m)?)?;
    m.add_function(wrap_pyfunction!(py::btc_txindex::write_txindex, m)?)?;
    m.add_function(wrap_pyfunction!(py::btc_txindex::hashes_from_hex, m)?)?;
    m.add_function(wrap_pyfunction!(py::btc_txindex::encode_txindex_places, m)?)?;
    m.add_function(wrap_pyfunction!(py::btc_txindex::decode_txindex_places, m)?)?;
    m.add_function(wrap_pyfunction!(decode_index_value, m)?)?;
    m.add_function(wrap_pyfunction!(best_chain_key, m)?)?;
    m.add_function(wrap_pyfunction!(best_chain_slot, m)?)?;
    m.add_function(wrap_pyfunction!(parse_hash, m)?)?;
    m.add_function(wrap_pyfunction!(display_hash, m)?)?;
    m.add_function(wrap_pyfunction!(reversed_hashes, m)?)?;
    m.add_class::<BtcGenConfig>()?;
    m.add("BtcError", py::btc_error::btc_error_type(m.py())?)?;
    m.add_function(wrap_pyfunction!(generate_bitcoin, m)?)?;
    m.add_function(wrap_pyfunction!(hash_headers_seconds, m)?)?;
    m.add_class::<NetworkInfo>()?;
    m.add_class::<ShardScanInfo>()?;
    m.add_class::<IndexEntry>()?;
    m.add_class::<BtcGenSummary>()?;
    py::flow::register(m)?;
    py::flow_checkpoint::register(m)?;
    py::btc_core_index::register(m)?;
    py::btc_headers::register(m)?;
    py::btc_chain_state::register(m)?;
    py::btc_scripts::register(m)?;
    py::btc_utxo::register(m)?;
    py::eth::register(m)?;
    py::eth_gen::register(m)?;
    Ok(())
}
