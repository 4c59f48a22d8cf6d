//! A block's scripts verified from its bytes and its undo record: each input's spent output
//! is the coin the undo record restores (the chain state resolved it when it applied the
//! block) or an output of an earlier transaction of the same block. Nothing is resolved again.

use super::super::coin::{utxo_key, Key, COIN_HEAD};
use super::super::decode::Spans;
use super::super::encode::DecodeError;
use super::super::error::StoreError;
use super::super::network::Network;
use super::super::undo::decode_undo;
use super::flags::block_script_flags;
use super::interpreter::{verify_tx, Spent, TxVerdict};
use rustc_hash::FxHashMap as HashMap;
use std::fmt;

/// The first input of a block that fails, with Core's reject reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScriptFailure {
    /// The transaction's place in its block (0 is the coinbase).
    pub tx_index: u32,
    pub txid: [u8; 32],
    pub input: u32,
    pub reason: String,
}

/// What checking a block's scripts found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BlockScripts {
    /// Transactions and inputs verified (up to the failure, if any).
    pub txs: u64,
    pub inputs: u64,
    pub flags: u32,
    pub failure: Option<ScriptFailure>,
}

/// Why a block could not be checked at all: stored data that is not what it should be.
#[derive(Debug)]
pub enum ScriptsError {
    /// The block's bytes do not frame (the chain state applied them, so they should).
    Frame(DecodeError),
    /// The undo record does not decode.
    Undo(StoreError),
    /// The undo record at this height belongs to another block (display hashes).
    OtherBlock {
        height: u32,
        block: String,
        undo: String,
    },
    /// The undo record restores no coin for an input (the chain state found every one when it
    /// applied the block, so the record is damaged): display txid of the spending transaction,
    /// the input, and the outpoint it spends.
    MissingCoin {
        height: u32,
        txid: String,
        input: u32,
        prevout: String,
    },
}

impl fmt::Display for ScriptsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScriptsError::Frame(e) => write!(f, "a best-chain block does not frame: {e}"),
            ScriptsError::Undo(e) => write!(f, "{e}: rerun with --from-stage chain_state"),
            ScriptsError::OtherBlock {
                height,
                block,
                undo,
            } => write!(
                f,
                "the undo record at height {height} is block {undo}'s, not {block}'s: rerun \
                 with --from-stage chain_state"
            ),
            ScriptsError::MissingCoin {
                height,
                txid,
                input,
                prevout,
            } => write!(
                f,
                "the undo record at height {height} restores no coin {prevout} for input \
                 {input} of transaction {txid}: rerun with --from-stage chain_state"
            ),
        }
    }
}

fn display(hash: &[u8; 32]) -> String {
    hash.iter().rev().map(|b| format!("{b:02x}")).collect()
}

/// Core's reject reason for a block whose input fails its script.
pub fn script_reason(error: &str) -> String {
    format!("block-script-verify-flag-failed ({error})")
}

/// Verifies every input of block `data` (`hash`, at `height` of `network`'s best chain) with
/// Core's interpreter and flags, against the coins its undo record `undo` restores.
pub fn verify_block(
    network: Network,
    height: u32,
    hash: &[u8; 32],
    data: &[u8],
    undo: &[u8],
) -> Result<BlockScripts, ScriptsError> {
    let record = decode_undo(undo).map_err(ScriptsError::Undo)?;
    if record.hash != *hash {
        return Err(ScriptsError::OtherBlock {
            height,
            block: display(hash),
            undo: display(&record.hash),
        });
    }
    let restored: HashMap<Key, &[u8]> = record
        .restored
        .iter()
        .map(|(k, v)| (*k, v.as_slice()))
        .collect();
    let mut spans = Spans::default();
    spans.parse_block(data).map_err(ScriptsError::Frame)?;
    let flags = block_script_flags(network, height, hash);
    let mut out = BlockScripts {
        flags,
        ..BlockScripts::default()
    };
    // Outputs of the block's transactions so far: (amount, script bounds in `data`).
    let mut made: HashMap<Key, (u64, (usize, usize))> = HashMap::default();
    let mut spent: Vec<Spent> = Vec::new();
    for (index, tx) in spans.txs.iter().enumerate() {
        if index > 0 {
            spent.clear();
            for (vin, input) in spans.ins[tx.ins.0..tx.ins.1].iter().enumerate() {
                let prev = &data[input.prev..input.prev + 36];
                let vout = u32::from_le_bytes(prev[32..36].try_into().unwrap());
                let key = utxo_key(&prev[..32], vout);
                let coin = match made.get(&key) {
                    Some(&(amount, (s, e))) => Some(Spent {
                        amount,
                        script_pubkey: &data[s..e],
                    }),
                    None => restored.get(&key).and_then(|v| {
                        let value = v.get(4..12)?;
                        Some(Spent {
                            amount: u64::from_le_bytes(value.try_into().unwrap()),
                            script_pubkey: v.get(COIN_HEAD..)?,
                        })
                    }),
                };
                let Some(coin) = coin else {
                    return Err(ScriptsError::MissingCoin {
                        height,
                        txid: display(&tx.txid),
                        input: vin as u32,
                        prevout: format!("{}:{vout}", display(prev[..32].try_into().unwrap())),
                    });
                };
                spent.push(coin);
            }
            let (start, end) = tx.bounds();
            let verdict = verify_tx(&data[start..end], &spent, flags);
            let failure = |input: u32, reason: String| ScriptFailure {
                tx_index: index as u32,
                txid: tx.txid,
                input,
                reason,
            };
            match verdict {
                TxVerdict::Valid => {}
                TxVerdict::ScriptFailed { input, error } => {
                    out.failure = Some(failure(input, script_reason(&error)));
                    return Ok(out);
                }
                TxVerdict::Unreadable(why) => {
                    out.failure = Some(failure(0, format!("tx-unreadable ({why})")));
                    return Ok(out);
                }
                TxVerdict::Trailing | TxVerdict::SpentMismatch => {
                    out.failure = Some(failure(0, format!("tx-unreadable ({verdict:?})")));
                    return Ok(out);
                }
            }
            out.txs += 1;
            out.inputs += spent.len() as u64;
        }
        for (vout, o) in spans.outs[tx.outs.0..tx.outs.1].iter().enumerate() {
            made.insert(utxo_key(&tx.txid, vout as u32), (o.value, o.script));
        }
    }
    Ok(out)
}
