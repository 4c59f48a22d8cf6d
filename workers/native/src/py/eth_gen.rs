//! Python entry points for writing Ethereum history (`eth::gen`, `eth::era1_writer`): the test
//! chain generator behind `rechain gen eth`, and an era1 writer Python can feed block by block.

use super::result::result_class;
use crate::eth::era1_writer::{Era1DirWriter, WrittenEra1};
use crate::eth::ere_writer::EreProfile;
use crate::eth::freezer_writer::{FreezerOptions, FreezerVersion};
use crate::eth::gen::{generate, EthGenConfig, OutputFormat};
use crate::eth::{Error, ErrorKind, U256};
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
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

result_class! {
    /// An era1 file written (`Era1Writer.written()`, `.finish()`): its path, epoch, first
    /// block, blocks, accumulator root (hex) and size.
    Era1File {
        path: String,
        epoch: u64,
        first_block: u64,
        blocks: u64,
        accumulator: String,
        bytes: u64,
    }
}

fn era1_file(f: &WrittenEra1) -> Era1File {
    Era1File {
        path: f.path.display().to_string(),
        epoch: f.epoch,
        first_block: f.first_block,
        blocks: f.blocks,
        accumulator: hex(&f.accumulator[..]),
        bytes: f.bytes,
    }
}

result_class! {
    /// A file of a generated chain: its path, first block, blocks, and (era1) accumulator
    /// root (hex; None for a freezer's files).
    GeneratedFile {
        path: String,
        first_block: u64,
        blocks: u64,
        accumulator: Option<String>,
    }
}

result_class! {
    /// A generated Ethereum chain (`eth_generate`): the facts of expected.json (hashes as hex,
    /// the final TD as a decimal string, transactions per kind in `tx_kinds`).
    EthGenSummary {
        network: String,
        chain_id: u64,
        blocks: u64,
        genesis_hash: String,
        tip_number: u64,
        tip_hash: String,
        final_td: String,
        transactions: u64,
        tx_kinds: Py<PyDict>,
        logs: u64,
        withdrawals: u64,
        blobs: u64,
        pos_blocks: u64,
        senders: Vec<String>,
        files: Vec<Py<GeneratedFile>>,
        geth_genesis: Option<String>,
    }
}

/// The settings of [`eth_generate`], built in Python by keyword:
/// `EthGenConfig(blocks=300, format="freezer")`; every other field has the default of
/// `rechain gen eth`. `format`: era1, freezer or ere (`ere_profile`: noproofs, noreceipts or
/// full); `network`: mainnet, sepolia, dev or devmerge;
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
    ere_profile: String,
}

#[pymethods]
impl PyEthGenConfig {
    #[new]
    #[pyo3(signature = (*, blocks, format="era1".to_string(), network="mainnet".to_string(),
                        seed=1, tx_min=0, tx_max=4, freezer_version="current".to_string(),
                        max_file_size=crate::eth::freezer_writer::MAX_FILE_SIZE,
                        ere_profile="noproofs".to_string()))]
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
        ere_profile: String,
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
            ere_profile,
        }
    }
}

/// Generate `config.blocks` blocks (genesis included) of `config.network` into `out_dir`: era1
/// files or the tables of a geth chain freezer ([`PyEthGenConfig`]). Returns the summary
/// (`EthGenSummary`: hashes and TD as hex / decimal strings).
#[pyfunction]
fn eth_generate(
    py: Python<'_>,
    out_dir: PathBuf,
    config: Bound<'_, PyEthGenConfig>,
) -> PyResult<EthGenSummary> {
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
        "ere" => OutputFormat::Ere(EreProfile::by_name(&c.ere_profile).ok_or_else(|| {
            PyValueError::new_err(format!(
                "unknown Ere profile {:?} (noproofs, noreceipts, full)",
                c.ere_profile
            ))
        })?),
        f => {
            return Err(PyValueError::new_err(format!(
                "unknown format {f:?} (era1, freezer, ere)"
            )))
        }
    };
    let cfg = EthGenConfig::for_network(&c.network, c.blocks, c.seed, c.tx_min, c.tx_max, format)
        .map_err(py_err)?;
    let s = py.detach(|| generate(&cfg, &out_dir)).map_err(py_err)?;
    let kinds = PyDict::new(py);
    for (name, n) in ["legacy", "legacy_eip155", "eip2930", "eip1559", "eip4844"]
        .iter()
        .zip(s.tx_kinds)
    {
        kinds.set_item(*name, n)?;
    }
    Ok(EthGenSummary {
        network: s.network.clone(),
        chain_id: s.chain_id,
        blocks: s.blocks,
        genesis_hash: hex(&s.genesis_hash[..]),
        tip_number: s.tip_number,
        tip_hash: hex(&s.tip_hash[..]),
        final_td: s.final_td.to_string(),
        transactions: s.transactions,
        tx_kinds: kinds.unbind(),
        logs: s.logs,
        withdrawals: s.withdrawals,
        blobs: s.blobs,
        pos_blocks: s.pos_blocks,
        senders: s.senders.iter().map(|a| hex(&a[..])).collect(),
        geth_genesis: s.geth_genesis.clone(),
        files: s
            .files
            .iter()
            .map(|f| {
                Py::new(
                    py,
                    GeneratedFile {
                        path: f.path.display().to_string(),
                        first_block: f.first_block,
                        blocks: f.blocks,
                        accumulator: f.accumulator.map(|a| hex(&a[..])),
                    },
                )
            })
            .collect::<PyResult<_>>()?,
    })
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

    /// Files finished so far (`Era1File`s).
    fn written(&self) -> Vec<Era1File> {
        self.inner
            .as_ref()
            .map(|w| w.written().iter().map(era1_file).collect())
            .unwrap_or_default()
    }

    /// Close the last file; returns every file written (as `written`).
    fn finish(&mut self) -> PyResult<Vec<Era1File>> {
        let w = self
            .inner
            .take()
            .ok_or_else(|| PyValueError::new_err("Era1Writer is finished"))?;
        let files = w.finish().map_err(py_err)?;
        Ok(files.iter().map(era1_file).collect())
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyEthGenConfig>()?;
    m.add_function(wrap_pyfunction!(eth_generate, m)?)?;
    m.add_class::<Era1Writer>()?;
    m.add_class::<EthGenSummary>()?;
    m.add_class::<GeneratedFile>()?;
    m.add_class::<Era1File>()?;
    Ok(())
}
