//! The UTXO set as a whole: its commitments (`hash_serialized_3`, MuHash3072) over the stored
//! set, the set at a past height (rewound through undo records, never touching `btc_utxo`),
//! and Bitcoin Core's snapshot format written and read.

use super::btc_error::{btc_error, io_error, store_error, Where};
use super::parquet_layout::ParquetLayout;
use crate::btc::coin::{coin_fields, COIN_HEAD, UTXO_KEY_PREFIX};
use crate::btc::encode::read_core_varint;
use crate::btc::error::StoreError;
use crate::btc::muhash::MuHash3072;
use crate::btc::network::Network;
use crate::btc::utxo::SetDigest;
use crate::btc::utxo_rewind::Rewind;
use crate::btc::utxo_snapshot::{
    SetCoin, SnapshotError, SnapshotMeta, SnapshotReader, SnapshotWriter,
};
use crate::datasets::btc_utxo::UtxoRows;
use crate::datasets::hex::{display_hex, to_hex};
use crate::parquet_out::{write_batch, Layout, RowGroups};
use arrow_schema::SchemaRef;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyIterator};
use pyo3_arrow::PySchema;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

fn pairs<'py>(
    items: &Bound<'py, PyAny>,
) -> PyResult<impl Iterator<Item = PyResult<(Vec<u8>, Vec<u8>)>> + 'py> {
    Ok(PyIterator::from_object(items)?.map(|item| item?.extract::<(Vec<u8>, Vec<u8>)>()))
}

/// Core's `hash_serialized_3` and MuHash of the `btc_utxo` entries yielded in key order by
/// `items` ((key, value) pairs): (hash_serialized_3, muhash, count, total amount), display hex.
#[pyfunction]
fn hash_utxo_entries(items: &Bound<'_, PyAny>) -> PyResult<(String, String, u64, u64)> {
    let mut digest = SetDigest::default();
    for item in pairs(items)? {
        let (k, v) = item?;
        digest
            .push(&k, &v)
            .map_err(|e| store_error(items.py(), &e))?;
    }
    let (count, total) = (digest.count, digest.total);
    let c = digest.commitments();
    Ok((
        to_hex(&c.hash_serialized_3),
        to_hex(&c.muhash),
        count,
        total,
    ))
}

fn write_failure(py: Python<'_>, message: String) -> PyErr {
    btc_error(
        py,
        "write",
        message.clone(),
        Where {
            reason: Some(message),
            ..Where::default()
        },
    )
}

fn snapshot_error(py: Python<'_>, path: &Path, e: &SnapshotError) -> PyErr {
    btc_error(
        py,
        "snapshot",
        format!("{}: {e}", path.display()),
        Where {
            file: Some(path.display().to_string()),
            offset: Some(e.offset),
            reason: Some(e.reason.clone()),
            ..Where::default()
        },
    )
}

/// The `utxo` table being written: a file per batch of rows, in key order.
struct ParquetSink {
    dir: PathBuf,
    schema: SchemaRef,
    layout: Layout,
    groups: RowGroups,
    network: Network,
    max_bytes: usize,
    /// File names: prefix, then the file's number.
    prefix: String,
    rows: UtxoRows,
    files: u32,
}

impl ParquetSink {
    fn flush(&mut self) -> Result<(), String> {
        if self.rows.is_empty() {
            return Ok(());
        }
        let batch = self
            .rows
            .finish(self.schema.clone(), self.network)
            .map_err(|e| e.to_string())?;
        let path = self
            .dir
            .join(format!("{}{:05}.parquet", self.prefix, self.files));
        write_batch(&path, &batch, &self.layout, self.groups)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        self.files += 1;
        Ok(())
    }
}

/// The UTXO set as of the block at `height` of the best chain. `items` yields the live
/// `btc_utxo` entries in key order; `undos` yields (height, best-chain block hash in internal
/// order, undo record) for every block above `height`, the tip first. The net change of those
/// blocks is held within `budget` bytes and spilled to `spill_dir` past it. Every coin goes
/// through the digests; with `snapshot` (a path) into a snapshot in Core's format whose base
/// block is `base_hash` (internal order); with `parquet` = (folder, schema, layout, bytes a
/// file's rows may hold, file name prefix) into the `utxo` table, `PREFIXNNNNN.parquet` files
/// in key order.
/// Returns coins, total_amount, hash_serialized_3, muhash, blocks_rewound, spilled_runs and
/// parquet_files. With `key_range` = (lo, hi) only the keys in `[lo, hi)` (hi empty: no
/// bound) are taken, `snapshot` is a part (`SnapshotWriter::part`) and the MuHash comes back
/// as `muhash_state` (bytes) in place of both digests, for `assemble_utxo_snapshot`.
#[pyfunction]
#[pyo3(signature = (
    items, undos, *, height, budget, spill_dir, network, base_hash, snapshot=None, parquet=None,
    key_range=None
))]
#[allow(clippy::too_many_arguments)]
fn utxo_set_at<'py>(
    py: Python<'py>,
    items: &Bound<'py, PyAny>,
    undos: &Bound<'py, PyAny>,
    height: u32,
    budget: usize,
    spill_dir: PathBuf,
    network: &str,
    base_hash: [u8; 32],
    snapshot: Option<PathBuf>,
    parquet: Option<(PathBuf, PySchema, PyRef<'py, ParquetLayout>, usize, String)>,
    key_range: Option<(Vec<u8>, Vec<u8>)>,
) -> PyResult<Bound<'py, PyDict>> {
    let network = crate::network(network)?;
    let is_part = key_range.is_some();
    let mut rewind = Rewind::new(budget, &spill_dir);
    if let Some((lo, hi)) = key_range {
        rewind = rewind.with_range(lo, hi);
    }
    for item in PyIterator::from_object(undos)? {
        let (at, expected, raw): (u32, [u8; 32], Vec<u8>) = item?.extract()?;
        let named = py
            .detach(|| rewind.apply_undo(&raw))
            .map_err(|e| store_error(py, &e))?;
        if named != expected {
            let message = format!(
                "the undo record at height {at} names block {}, not the best chain's {}",
                display_hex(&named),
                display_hex(&expected)
            );
            let at = Where {
                block_hash: Some(display_hex(&expected)),
                height: Some(at),
                reason: Some(message.clone()),
                ..Where::default()
            };
            return Err(btc_error(py, "store", message, at));
        }
    }
    let (blocks, runs) = (rewind.blocks, rewind.spilled_runs());
    let mut snapshot = match snapshot {
        Some(path) => {
            let file = File::create(&path).map_err(|e| io_error(py, &path, &e))?;
            let out = BufWriter::with_capacity(1 << 20, file);
            let w = if is_part {
                SnapshotWriter::part(out)
            } else {
                SnapshotWriter::new(out, network.magic(), base_hash)
                    .map_err(|e| io_error(py, &path, &e))?
            };
            Some((w, path))
        }
        None => None,
    };
    let mut table = parquet.map(|(dir, schema, layout, max_bytes, prefix)| ParquetSink {
        dir,
        schema: schema.into_inner(),
        layout: layout.layout.clone(),
        groups: layout.groups,
        network,
        max_bytes,
        prefix,
        rows: UtxoRows::default(),
        files: 0,
    });
    let mut digest = SetDigest::default();
    let mut failed: Option<PyErr> = None;
    let live = pairs(items)?.map(|r| r.map_err(|e| StoreError::Spill(format!("(live set): {e}"))));
    let merged = rewind.merge_with(live, |key, value| {
        let bad = || StoreError::UtxoEntry { key: key.to_vec() };
        let head = coin_fields(value)?;
        if head.height > height {
            // The undo records above `height` should have taken every such coin out.
            return Err(bad());
        }
        digest.push(key, value)?;
        let txid: [u8; 32] = key.get(1..33).ok_or_else(bad)?.try_into().unwrap();
        let (vout, _) = read_core_varint(&key[33..]).ok_or_else(bad)?;
        let coin = SetCoin {
            txid: &txid,
            vout: vout as u32,
            height: head.height,
            coinbase: head.coinbase,
            value: head.value,
            script: &value[COIN_HEAD..],
        };
        if let Some((w, path)) = snapshot.as_mut() {
            if let Err(e) = w.push(coin) {
                failed = Some(io_error(py, path, &e));
                return Err(StoreError::Spill("(snapshot)".into()));
            }
        }
        if let Some(t) = table.as_mut() {
            t.rows.push(coin);
            if t.rows.bytes() >= t.max_bytes {
                if let Err(e) = t.flush() {
                    failed = Some(write_failure(py, e));
                    return Err(StoreError::Spill("(utxo table)".into()));
                }
            }
        }
        Ok(())
    });
    if let Some(e) = failed {
        return Err(e);
    }
    merged.map_err(|e| store_error(py, &e))?;
    if let Some((w, path)) = snapshot.take() {
        w.finish().map_err(|e| io_error(py, &path, &e))?;
    }
    let mut files = 0;
    if let Some(t) = table.as_mut() {
        t.flush().map_err(|e| write_failure(py, e))?;
        files = t.files;
    }
    let out = PyDict::new(py);
    out.set_item("coins", digest.count)?;
    out.set_item("total_amount", digest.total)?;
    if is_part {
        let (_, _, state) = digest.partial();
        out.set_item("muhash_state", PyBytes::new(py, &state))?;
    } else {
        let c = digest.commitments();
        out.set_item("hash_serialized_3", to_hex(&c.hash_serialized_3))?;
        out.set_item("muhash", to_hex(&c.muhash))?;
    }
    out.set_item("blocks_rewound", blocks)?;
    out.set_item("spilled_runs", runs)?;
    out.set_item("parquet_files", files)?;
    Ok(out)
}

/// Reads a snapshot in Core's format through: its metadata (network magic, base block hash
/// in display hex, coin count) and the commitments of its coins in file order (coins,
/// total_amount, hash_serialized_3, muhash). A damaged file raises `BtcError` (kind
/// `snapshot`) with its byte offset.
#[pyfunction]
fn read_utxo_snapshot<'py>(py: Python<'py>, path: PathBuf) -> PyResult<Bound<'py, PyDict>> {
    let file = File::open(&path).map_err(|e| io_error(py, &path, &e))?;
    let result = py.detach(|| -> Result<_, SnapshotError> {
        let mut r = SnapshotReader::new(BufReader::with_capacity(1 << 20, file))?;
        let mut digest = SetDigest::default();
        while let Some(coin) = r.next_coin()? {
            let code = coin.height.checked_mul(2).map(|c| c + coin.coinbase as u32);
            let code = code.ok_or_else(|| SnapshotError {
                offset: r.offset,
                reason: format!("a coin's height {} out of range", coin.height),
            })?;
            digest.push_coin(&coin.txid, coin.vout, code, coin.value, &coin.script);
        }
        Ok((r.meta, r.offset, digest))
    });
    let (meta, size, digest) = result.map_err(|e| snapshot_error(py, &path, &e))?;
    let out = PyDict::new(py);
    out.set_item("network_magic", to_hex(&meta.network_magic))?;
    out.set_item("block_hash", display_hex(&meta.base_hash))?;
    out.set_item("coins", digest.count)?;
    out.set_item("total_amount", digest.total)?;
    out.set_item("bytes", size)?;
    let c = digest.commitments();
    out.set_item("hash_serialized_3", to_hex(&c.hash_serialized_3))?;
    out.set_item("muhash", to_hex(&c.muhash))?;
    Ok(out)
}

/// Reads what counts as one `Read` and copies it to `out` as it goes.
struct Tee<R: Read, W: Write> {
    input: R,
    out: Option<W>,
    failed: Option<std::io::Error>,
}

impl<R: Read, W: Write> Read for Tee<R, W> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.input.read(buf)?;
        if let Some(out) = self.out.as_mut() {
            if let Err(e) = out.write_all(&buf[..n]) {
                self.failed = Some(e);
                return Err(std::io::Error::other("the snapshot could not be written"));
            }
        }
        Ok(n)
    }
}

/// The whole set from the parts of a split dump (`utxo_set_at` with `key_range`), in key
/// order: `parts` = (part file or None, coins) and `states` their MuHash states. Reads every
/// part through for `hash_serialized_3`, and with `out` writes the snapshot there (metadata,
/// then the parts). Returns coins, total_amount, hash_serialized_3 and muhash.
#[pyfunction]
#[pyo3(signature = (parts, states, *, network, base_hash, out=None))]
fn assemble_utxo_snapshot<'py>(
    py: Python<'py>,
    parts: Vec<(PathBuf, u64)>,
    states: Vec<Vec<u8>>,
    network: &str,
    base_hash: [u8; 32],
    out: Option<PathBuf>,
) -> PyResult<Bound<'py, PyDict>> {
    let network = crate::network(network)?;
    let mut muhash = MuHash3072::default();
    for state in &states {
        let part = MuHash3072::from_state(state)
            .ok_or_else(|| PyValueError::new_err("a MuHash state is 768 bytes"))?;
        muhash.combine(&part);
    }
    let total_coins: u64 = parts.iter().map(|(_, n)| n).sum();
    let mut writer = match &out {
        Some(path) => {
            let file = File::create(path).map_err(|e| io_error(py, path, &e))?;
            let mut w = BufWriter::with_capacity(1 << 20, file);
            let meta = SnapshotMeta {
                network_magic: network.magic(),
                base_hash,
                coins: total_coins,
            };
            w.write_all(&meta.encode())
                .map_err(|e| io_error(py, path, &e))?;
            Some(w)
        }
        None => None,
    };
    let mut digest = SetDigest::hash_only();
    for (path, coins) in &parts {
        let file = File::open(path).map_err(|e| io_error(py, path, &e))?;
        let tee = Tee {
            input: BufReader::with_capacity(1 << 20, file),
            out: writer.as_mut(),
            failed: None,
        };
        let mut reader = SnapshotReader::part(tee, *coins);
        let read = py.detach(|| -> Result<(), SnapshotError> {
            while let Some(c) = reader.next_coin()? {
                let code = c.height * 2 + c.coinbase as u32;
                digest.push_coin(&c.txid, c.vout, code, c.value, &c.script);
            }
            Ok(())
        });
        let mut tee = reader.into_inner();
        if let Some(e) = tee.failed.take() {
            return Err(io_error(py, out.as_deref().unwrap_or(path), &e));
        }
        read.map_err(|e| snapshot_error(py, path, &e))?;
    }
    if let (Some(mut w), Some(path)) = (writer, &out) {
        w.flush().map_err(|e| io_error(py, path, &e))?;
    }
    let d = PyDict::new(py);
    d.set_item("coins", digest.count)?;
    d.set_item("total_amount", digest.total)?;
    d.set_item("hash_serialized_3", to_hex(&digest.finish()))?;
    let mut mu = muhash.finish();
    mu.reverse();
    d.set_item("muhash", to_hex(&mu))?;
    Ok(d)
}

/// `parts` ranges of `btc_utxo` keys, (lo, hi) in key order, cut by the txid's first two
/// bytes (txids are hashes, so each holds about as many coins); the last one's `hi` is empty
/// (no bound).
#[pyfunction]
fn utxo_key_ranges(parts: u32) -> PyResult<Vec<(Vec<u8>, Vec<u8>)>> {
    if !(1..=65_536).contains(&parts) {
        return Err(PyValueError::new_err("1 to 65,536 key ranges"));
    }
    let cut = |i: u32| {
        let at = (i as u64 * 65_536 / parts as u64) as u16;
        [&[UTXO_KEY_PREFIX][..], &at.to_be_bytes()].concat()
    };
    Ok((0..parts)
        .map(|i| {
            (
                cut(i),
                if i + 1 < parts {
                    cut(i + 1)
                } else {
                    Vec::new()
                },
            )
        })
        .collect())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(utxo_key_ranges, m)?)?;
    m.add_function(wrap_pyfunction!(assemble_utxo_snapshot, m)?)?;
    m.add_function(wrap_pyfunction!(hash_utxo_entries, m)?)?;
    m.add_function(wrap_pyfunction!(utxo_set_at, m)?)?;
    m.add_function(wrap_pyfunction!(read_utxo_snapshot, m)?)?;
    Ok(())
}
