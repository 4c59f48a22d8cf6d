//! Python entry points for script validation (`btc::scripts`): the scripts of a run of
//! best-chain blocks checked with Core's interpreter against their undo records, one
//! transaction through the interpreter (Core's test vectors take this path too) and the flags
//! Core gives a block.

use super::btc_error::{btc_error, read_error, Where};
use super::result::result_class;
use crate::bounded::map_bounded;
use crate::btc::chain_state::{read_blocks, SourceBlock};
use crate::btc::scripts::block::{verify_block, BlockScripts, ScriptsError};
use crate::btc::scripts::flags::{block_script_flags, FLAG_NAMES};
use crate::btc::scripts::interpreter::{verify_tx, Spent, TxVerdict};
use crate::datasets::hex::display_hex;
use crate::{key8, network};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::path::PathBuf;

result_class! {
    /// The first input of a run of blocks that fails its script, with Core's reject reason and
    /// where the block is (its blk file's name and the record's offset).
    ScriptFailure {
        height: u32,
        block_hash: String,
        file: String,
        offset: u64,
        tx_index: u32,
        txid: String,
        input: u32,
        reason: String,
    }
}

result_class! {
    /// A run of best-chain blocks whose scripts were checked: the blocks, transactions and
    /// inputs that passed (all of them below the first failure), and that failure.
    ScriptsChecked {
        blocks: u64,
        txs: u64,
        inputs: u64,
        failure: Option<Py<ScriptFailure>>,
    }
}

fn scripts_error(py: Python<'_>, height: u32, hash: &[u8; 32], e: &ScriptsError) -> PyErr {
    let at = Where {
        block_hash: Some(display_hex(hash)),
        height: Some(height),
        ..Where::default()
    };
    let message = match e {
        ScriptsError::MissingCoin { .. } | ScriptsError::OtherBlock { .. } => e.to_string(),
        _ => format!("block {} at height {height}: {e}", display_hex(hash)),
    };
    btc_error(py, "store", message, at)
}

/// Checks the scripts of the blocks `hashes` (internal order) at heights from `first_height`,
/// read from `paths` at `offsets`, against their undo records `undos`, on at most `threads`
/// threads; every block is checked, the lowest failure reported.
#[pyfunction]
#[pyo3(signature = (network_name, xor_key, first_height, hashes, paths, offsets, undos, threads=1))]
#[allow(clippy::too_many_arguments)]
fn verify_block_scripts(
    py: Python<'_>,
    network_name: &str,
    xor_key: &[u8],
    first_height: u32,
    hashes: Vec<Vec<u8>>,
    paths: Vec<PathBuf>,
    offsets: Vec<u64>,
    undos: Vec<Vec<u8>>,
    threads: usize,
) -> PyResult<ScriptsChecked> {
    let net = network(network_name)?;
    let key = key8(xor_key)?;
    let files: Vec<String> = paths
        .iter()
        .map(|p| {
            p.file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    let blocks = SourceBlock::run(first_height, &hashes, paths, &offsets)
        .filter(|_| undos.len() == hashes.len())
        .ok_or_else(|| {
            PyValueError::new_err(
                "hashes, paths, offsets and undos differ in length, or a hash is not 32 bytes \
                 (internal order)",
            )
        })?;
    let loaded = py
        .detach(|| read_blocks(net, key, blocks))
        .map_err(|e| read_error(py, &e))?;
    let verdicts: Vec<Result<BlockScripts, ScriptsError>> = py.detach(|| {
        // Largest blocks first, so that no thread is left with a big one at the end.
        let mut order: Vec<usize> = (0..loaded.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(loaded[i].2.len()));
        let mut out = map_bounded(order.len(), threads, |j| {
            let (height, hash, data) = &loaded[order[j]];
            verify_block(net, *height, hash, data, &undos[order[j]])
        });
        let mut placed: Vec<Option<Result<BlockScripts, ScriptsError>>> =
            (0..out.len()).map(|_| None).collect();
        for (j, v) in out.drain(..).enumerate() {
            placed[order[j]] = Some(v);
        }
        placed
            .into_iter()
            .map(|v| v.expect("every block"))
            .collect()
    });
    let mut checked = ScriptsChecked {
        blocks: 0,
        txs: 0,
        inputs: 0,
        failure: None,
    };
    for (i, ((height, hash, _), verdict)) in loaded.iter().zip(verdicts).enumerate() {
        let v = verdict.map_err(|e| scripts_error(py, *height, hash, &e))?;
        if v.failure.is_none() {
            checked.blocks += 1;
            checked.txs += v.txs;
            checked.inputs += v.inputs;
        }
        if let Some(f) = v.failure {
            let failure = ScriptFailure {
                height: *height,
                block_hash: display_hex(hash),
                file: files[i].clone(),
                offset: offsets[i],
                tx_index: f.tx_index,
                txid: display_hex(&f.txid),
                input: f.input,
                reason: f.reason,
            };
            checked.failure = Some(Py::new(py, failure)?);
            break;
        }
    }
    Ok(checked)
}

/// One serialized transaction through Core's interpreter with `flags`, against `spent`
/// ((amount, scriptPubKey) per input): ("valid" | "script" | "unreadable" | "trailing" |
/// "spent-mismatch", failed input, Core's error text).
#[pyfunction]
fn core_verify_tx(tx: &[u8], spent: Vec<(u64, Vec<u8>)>, flags: u32) -> (String, u32, String) {
    let coins: Vec<Spent> = spent
        .iter()
        .map(|(amount, script)| Spent {
            amount: *amount,
            script_pubkey: script,
        })
        .collect();
    match verify_tx(tx, &coins, flags) {
        TxVerdict::Valid => ("valid".into(), 0, String::new()),
        TxVerdict::ScriptFailed { input, error } => ("script".into(), input, error),
        TxVerdict::Unreadable(why) => ("unreadable".into(), 0, why),
        TxVerdict::Trailing => ("trailing".into(), 0, String::new()),
        TxVerdict::SpentMismatch => ("spent-mismatch".into(), 0, String::new()),
    }
}

/// Core's interpreter flags by name (`P2SH`, `DERSIG`, ...), as its test vectors spell them.
#[pyfunction]
fn script_flag_bits(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    for (name, bit) in FLAG_NAMES {
        d.set_item(name, bit)?;
    }
    Ok(d)
}

/// The flags Core verifies the scripts of block `block_hash` (internal order) at `height` with.
#[pyfunction]
fn script_flags_of_block(network_name: &str, height: u32, block_hash: &[u8]) -> PyResult<u32> {
    let hash: [u8; 32] = block_hash
        .try_into()
        .map_err(|_| PyValueError::new_err("block hashes are 32 bytes (internal order)"))?;
    Ok(block_script_flags(network(network_name)?, height, &hash))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ScriptFailure>()?;
    m.add_class::<ScriptsChecked>()?;
    m.add_function(wrap_pyfunction!(verify_block_scripts, m)?)?;
    m.add_function(wrap_pyfunction!(core_verify_tx, m)?)?;
    m.add_function(wrap_pyfunction!(script_flag_bits, m)?)?;
    m.add_function(wrap_pyfunction!(script_flags_of_block, m)?)?;
    Ok(())
}
