//! Python entry points for writing Ethereum history (`eth::gen`, `eth::era1_writer`): the test
//! chain generator behind `rechain gen eth`, and an era1 writer Python can feed block by block.

use crate::eth::era1_writer::{Era1DirWriter, WrittenEra1};
use crate::eth::freezer_writer::{FreezerOptions, FreezerVersion};
use crate::eth::gen::{generate, EthGenConfig, OutputFormat};
use crate::eth::{Error, ErrorKind, U256};
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::path::PathBuf;

fn py_err(e: Error) -> PyErr {
    match e.kind {
        ErrorKind::Io(_) => PyOSError::new_err(e.to_string()),
        _ => PyValueError::new_err(e.to_string()),
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn era1_file_dict<'py>(py: Python<'py>, f: &WrittenEra1) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("path", f.path.display().to_string())?;
    d.set_item("epoch", f.epoch)?;
    d.set_item("first_block", f.first_block)?;
    d.set_item("blocks", f.blocks)?;
    d.set_item("accumulator", hex(&f.accumulator[..]))?;
    d.set_item("bytes", f.bytes)?;
    Ok(d)
}

/// The settings of [`eth_generate`], built in Python by keyword:
/// `EthGenConfig(blocks=300, format="freezer")`; every other field has the default of
/// `rechain gen eth`. `format`: era1 or freezer; `network`: mainnet, sepolia or dev;
/// `freezer_version`: current, v1.15 or v1.10 (with diffs); freezer data files are cut at
/// `max_file_size`.
#[pyclass(
    module = "rechain.workers._native",
    name = "EthGenConfig",
    frozen,
    get_all
)]
struct PyEthGenConfig {
    blocks: u64,
    format: String,
    network: String,
    seed: u64,
    tx_min: usize,
    tx_max: usize,
    freezer_version: String,
    max_file_size: u64,
}

#[pymethods]
impl PyEthGenConfig {
    #[new]
    #[pyo3(signature = (*, blocks, format="era1".to_string(), network="mainnet".to_string(),
                        seed=1, tx_min=0, tx_max=4, freezer_version="current".to_string(),
                        max_file_size=crate::eth::freezer_writer::MAX_FILE_SIZE))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        blocks: u64,
        format: String,
        network: String,
        seed: u64,
        tx_min: usize,
        tx_max: usize,
        freezer_version: String,
        max_file_size: u64,
    ) -> Self {
        PyEthGenConfig {
            blocks,
            format,
            network,
            seed,
            tx_min,
            tx_max,
            freezer_version,
            max_file_size,
        }
    }
}

/// Generate `config.blocks` blocks (genesis included) of `config.network` into `out_dir`: era1
/// files or the tables of a geth chain freezer ([`PyEthGenConfig`]). Returns the summary as a
/// dict (hashes and TD as hex / decimal strings).
#[pyfunction]
fn eth_generate<'py>(
    py: Python<'py>,
    out_dir: PathBuf,
    config: Bound<'py, PyEthGenConfig>,
) -> PyResult<Bound<'py, PyDict>> {
    let c = config.get();
    let freezer_version = c.freezer_version.as_str();
    let format = match c.format.as_str() {
        "era1" => OutputFormat::Era1,
        "freezer" => OutputFormat::Freezer(FreezerOptions {
            version: FreezerVersion::by_name(freezer_version).ok_or_else(|| {
                PyValueError::new_err(format!(
                    "unknown freezer version {freezer_version:?} (current, v1.15, v1.10)"
                ))
            })?,
            max_file_size: c.max_file_size,
        }),
        f => {
            return Err(PyValueError::new_err(format!(
                "unknown format {f:?} (era1, freezer)"
            )))
        }
    };
    let cfg = EthGenConfig::for_network(&c.network, c.blocks, c.seed, c.tx_min, c.tx_max, format)
        .map_err(py_err)?;
    let s = py.detach(|| generate(&cfg, &out_dir)).map_err(py_err)?;
    let d = PyDict::new(py);
    d.set_item("network", &s.network)?;
    d.set_item("chain_id", s.chain_id)?;
    d.set_item("blocks", s.blocks)?;
    d.set_item("genesis_hash", hex(&s.genesis_hash[..]))?;
    d.set_item("tip_number", s.tip_number)?;
    d.set_item("tip_hash", hex(&s.tip_hash[..]))?;
    d.set_item("final_td", s.final_td.to_string())?;
    d.set_item("transactions", s.transactions)?;
    let kinds = PyDict::new(py);
    for (name, n) in ["legacy", "legacy_eip155", "eip2930", "eip1559", "eip4844"]
        .iter()
        .zip(s.tx_kinds)
    {
        kinds.set_item(*name, n)?;
    }
    d.set_item("tx_kinds", kinds)?;
    d.set_item("logs", s.logs)?;
    d.set_item("withdrawals", s.withdrawals)?;
    d.set_item("blobs", s.blobs)?;
    d.set_item("pos_blocks", s.pos_blocks)?;
    let senders: Vec<String> = s.senders.iter().map(|a| hex(&a[..])).collect();
    d.set_item("senders", senders)?;
    let files = PyList::empty(py);
    for f in &s.files {
        let fd = PyDict::new(py);
        fd.set_item("path", f.path.display().to_string())?;
        fd.set_item("first_block", f.first_block)?;
        fd.set_item("blocks", f.blocks)?;
        fd.set_item("accumulator", f.accumulator.map(|a| hex(&a[..])))?;
        files.append(fd)?;
    }
    d.set_item("files", files)?;
    Ok(d)
}

/// Writes consecutive blocks as era1 files, one per epoch of 8192 blocks, into a directory.
/// Blocks are given as the raw bytes era1 stores: header RLP, body RLP, consensus-form receipts
/// RLP, and the total difficulty including the block. The first block must start an epoch.
#[pyclass(module = "rechain.workers._native")]
struct Era1Writer {
    inner: Option<Era1DirWriter>,
}

#[pymethods]
impl Era1Writer {
    #[new]
    fn new(out_dir: PathBuf, network: &str) -> PyResult<Self> {
        Ok(Era1Writer {
            inner: Some(Era1DirWriter::new(out_dir, network).map_err(py_err)?),
        })
    }

    fn add_block(
        &mut self,
        header_rlp: &[u8],
        body_rlp: &[u8],
        receipts_rlp: &[u8],
        td: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let w = self
            .inner
            .as_mut()
            .ok_or_else(|| PyValueError::new_err("Era1Writer is finished"))?;
        let be: Vec<u8> = td
            .call_method1("to_bytes", (32, "big"))
            .and_then(|b| b.extract())
            .map_err(|_| PyValueError::new_err("td must be an int in 0..2**256"))?;
        w.add_block(header_rlp, body_rlp, receipts_rlp, U256::from_be_slice(&be))
            .map_err(py_err)
    }

    /// Files finished so far (each a dict: path, epoch, first_block, blocks, accumulator, bytes).
    fn written<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let l = PyList::empty(py);
        if let Some(w) = &self.inner {
            for f in w.written() {
                l.append(era1_file_dict(py, f)?)?;
            }
        }
        Ok(l)
    }

    /// Close the last file; returns every file written (as `written`).
    fn finish<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let w = self
            .inner
            .take()
            .ok_or_else(|| PyValueError::new_err("Era1Writer is finished"))?;
        let files = w.finish().map_err(py_err)?;
        let l = PyList::empty(py);
        for f in &files {
            l.append(era1_file_dict(py, f)?)?;
        }
        Ok(l)
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyEthGenConfig>()?;
    m.add_function(wrap_pyfunction!(eth_generate, m)?)?;
    m.add_class::<Era1Writer>()?;
    Ok(())
}
