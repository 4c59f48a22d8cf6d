//! The peers of `benchmarks/btc_full.py`: two crates.io Bitcoin block parsers run on a blocks
//! folder as their own documentation shows, each printing one JSON object with what it counted,
//! its wall seconds and what it read, so the benchmark can time them and check their counts
//! against rechain's tables.
//!
//! ```text
//! rechain-peers block-parser DIR                      bitcoin-block-parser BlockParser
//! rechain-peers utxo-parser DIR [--estimated-utxos N] bitcoin-block-parser UtxoParser
//! rechain-peers blocks-iterator DIR [--network NAME]  blocks_iterator with previous outputs
//! ```
//!
//! Both read `xor.dat` themselves. bitcoin-block-parser never looks at the record magic (it
//! reads the 8-byte prefix and decodes a header), so it needs no network; blocks_iterator
//! finds records by the network's magic and starts from its genesis, so it is told the network
//! (default regtest).

use std::fs;
use std::ops::AddAssign;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use bitcoin_block_parser::utxos::{OutputStatus, UtxoBlock};
use bitcoin_block_parser::{BlockParser, UtxoParser};
use blocks_iterator::bitcoin::hashes::Hash;
use blocks_iterator::bitcoin::{Block, BlockHash, Network, Script};
use serde_json::{json, Map, Value};

/// bitcoin-block-parser's own guess of the UTXO count (mainnet-sized) when none is given.
const DEFAULT_ESTIMATED_UTXOS: usize = 250_000_000;

/// What a peer counted; each subcommand reports the fields its parser can give.
#[derive(Default, Clone, Copy)]
struct Counts {
    blocks: u64,
    block_bytes: u64,
    max_height: u64,
    transactions: u64,
    inputs: u64,
    outputs: u64,
    output_value: u64,
    /// Inputs with a previous output's value (every input but the coinbase's).
    inputs_with_value: u64,
    input_value: u64,
    /// Outputs the parser marks unspent (all of them: OP_RETURN and genesis included).
    unspent_outputs: u64,
    unspent_value: u64,
    /// The unspent outputs Core keeps in its UTXO set: not provably unspendable, not genesis.
    utxo_count: u64,
    utxo_value: u64,
}

impl AddAssign for Counts {
    fn add_assign(&mut self, o: Counts) {
        self.blocks += o.blocks;
        self.block_bytes += o.block_bytes;
        self.max_height = self.max_height.max(o.max_height);
        self.transactions += o.transactions;
        self.inputs += o.inputs;
        self.outputs += o.outputs;
        self.output_value += o.output_value;
        self.inputs_with_value += o.inputs_with_value;
        self.input_value += o.input_value;
        self.unspent_outputs += o.unspent_outputs;
        self.unspent_value += o.unspent_value;
        self.utxo_count += o.utxo_count;
        self.utxo_value += o.utxo_value;
    }
}

/// Core's `CScript::IsUnspendable`: OP_RETURN first, or longer than MAX_SCRIPT_SIZE.
fn unspendable(script: &Script) -> bool {
    let bytes = script.as_bytes();
    bytes.first() == Some(&0x6a) || bytes.len() > 10_000
}

/// Blocks, transactions, inputs and outputs of one decoded block (no hashing: BlockParser's
/// decode is all that is timed).
fn block_counts(block: &Block) -> Counts {
    let mut c = Counts {
        blocks: 1,
        block_bytes: block.total_size() as u64,
        transactions: block.txdata.len() as u64,
        ..Counts::default()
    };
    for tx in &block.txdata {
        c.inputs += tx.input.len() as u64;
        c.outputs += tx.output.len() as u64;
        c.output_value += tx.output.iter().map(|o| o.value.to_sat()).sum::<u64>();
    }
    c
}

fn utxo_block_counts(block: UtxoBlock) -> Counts {
    let genesis = block.header.prev_blockhash == BlockHash::all_zeros();
    let mut c = Counts::default();
    for tx in &block.txdata {
        let coinbase = tx.transaction.is_coinbase();
        for (_, prev) in tx.input() {
            c.inputs += 1;
            if !coinbase {
                c.inputs_with_value += 1;
                c.input_value += prev.value.to_sat();
            }
        }
        for (out, status) in tx.output() {
            c.outputs += 1;
            c.output_value += out.value.to_sat();
            if *status == OutputStatus::Unspent {
                c.unspent_outputs += 1;
                c.unspent_value += out.value.to_sat();
                if !genesis && !unspendable(&out.script_pubkey) {
                    c.utxo_count += 1;
                    c.utxo_value += out.value.to_sat();
                }
            }
        }
    }
    let block = block.to_block();
    c.blocks = 1;
    c.transactions = block.txdata.len() as u64;
    c.block_bytes = block.total_size() as u64;
    c
}

fn block_parser(dir: &str) -> Result<Map<String, Value>> {
    let mut c = Counts::default();
    for counts in BlockParser::new(dir)?.parse(|block| block_counts(&block)) {
        c += counts;
    }
    Ok(json_map(json!({
        "parser": "bitcoin-block-parser BlockParser",
        "blocks": c.blocks,
        "block_bytes": c.block_bytes,
        "transactions": c.transactions,
        "inputs": c.inputs,
        "outputs": c.outputs,
        "output_value": c.output_value,
    })))
}

fn utxo_parser(dir: &str, estimated_utxos: usize) -> Result<Map<String, Value>> {
    // Its filter file must not exist: the filter pass is half of what is measured.
    let filter = std::env::temp_dir().join(format!("rechain-peers-{}.filter", std::process::id()));
    let _ = fs::remove_file(&filter);
    let parser = UtxoParser::new(dir, filter.to_str().context("temp path")?)
        .estimated_utxos(estimated_utxos);
    let t = Instant::now();
    parser.create_filter()?;
    let filter_s = t.elapsed().as_secs_f64();
    let filter_bytes = fs::metadata(&filter)?.len();
    let t = Instant::now();
    let mut c = Counts::default();
    for counts in parser.parse(utxo_block_counts)? {
        c += counts;
    }
    let parse_s = t.elapsed().as_secs_f64();
    fs::remove_file(&filter)?;
    Ok(json_map(json!({
        "parser": "bitcoin-block-parser UtxoParser",
        "passes": 2,
        "filter_pass_s": filter_s,
        "parse_pass_s": parse_s,
        "filter_file_bytes": filter_bytes,
        "estimated_utxos": estimated_utxos,
        "blocks": c.blocks,
        "block_bytes": c.block_bytes,
        "transactions": c.transactions,
        "inputs": c.inputs,
        "outputs": c.outputs,
        "output_value": c.output_value,
        "inputs_with_value": c.inputs_with_value,
        "input_value": c.input_value,
        "unspent_outputs": c.unspent_outputs,
        "unspent_value": c.unspent_value,
        "utxo_count": c.utxo_count,
        "utxo_value": c.utxo_value,
    })))
}

fn blocks_iterator(dir: &str, network: Network) -> Result<Map<String, Value>> {
    let config = blocks_iterator::Config::new(dir, network);
    let max_reorg = config.max_reorg;
    let mut c = Counts::default();
    for extra in blocks_iterator::try_iter(config)? {
        if u64::from(extra.height()) != c.blocks {
            bail!(
                "block {} at height {}, expected {}",
                extra.block_hash(),
                extra.height(),
                c.blocks
            );
        }
        let block = extra.block();
        let mut b = block_counts(block);
        b.block_bytes = u64::from(extra.size());
        b.max_height = u64::from(extra.height());
        let prevouts = extra.outpoint_values();
        for tx in block.txdata.iter().filter(|tx| !tx.is_coinbase()) {
            for input in &tx.input {
                let prev = prevouts.get(&input.previous_output).with_context(|| {
                    format!(
                        "no previous output for {} in {}",
                        input.previous_output,
                        extra.block_hash()
                    )
                })?;
                b.inputs_with_value += 1;
                b.input_value += prev.value.to_sat();
            }
        }
        c += b;
    }
    Ok(json_map(json!({
        "parser": "blocks_iterator (previous outputs, in-memory UTXO map)",
        // It emits a block only once `max_reorg` blocks follow it: the last ones never come.
        "max_reorg": max_reorg,
        "max_height": c.max_height,
        "blocks": c.blocks,
        "block_bytes": c.block_bytes,
        "transactions": c.transactions,
        "inputs": c.inputs,
        "outputs": c.outputs,
        "output_value": c.output_value,
        "inputs_with_value": c.inputs_with_value,
        "input_value": c.input_value,
    })))
}

fn json_map(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => unreachable!("json! of an object"),
    }
}

/// The blk files the peers read, their bytes, and whether `xor.dat` obfuscates them.
fn what_is_read(dir: &Path) -> Result<Value> {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.starts_with("blk") && name.ends_with(".dat")
        })
        .collect();
    files.sort();
    let mut bytes = 0;
    for f in &files {
        bytes += fs::metadata(f)?.len();
    }
    let xor = fs::read(dir.join("xor.dat")).is_ok_and(|k| k.iter().any(|&b| b != 0));
    Ok(json!({"dir": dir, "blk_files": files.len(), "file_bytes": bytes, "xor": xor}))
}

fn usage() -> ! {
    eprintln!(
        "usage: rechain-peers block-parser DIR\n       \
         rechain-peers utxo-parser DIR [--estimated-utxos N]\n       \
         rechain-peers blocks-iterator DIR [--network regtest|bitcoin|testnet|signet]"
    );
    std::process::exit(2)
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(cmd), Some(dir)) = (args.first(), args.get(1)) else {
        usage()
    };
    let mut estimated_utxos = DEFAULT_ESTIMATED_UTXOS;
    let mut network = Network::Regtest;
    let mut rest = args[2..].iter();
    while let Some(flag) = rest.next() {
        let Some(value) = rest.next() else { usage() };
        match flag.as_str() {
            "--estimated-utxos" => estimated_utxos = value.parse()?,
            "--network" => {
                network = Network::from_core_arg(value)
                    .with_context(|| format!("unknown network {value}"))?
            }
            _ => usage(),
        }
    }
    let read = what_is_read(Path::new(dir))?;
    let t = Instant::now();
    let mut out = match cmd.as_str() {
        "block-parser" => block_parser(dir)?,
        "utxo-parser" => utxo_parser(dir, estimated_utxos)?,
        "blocks-iterator" => blocks_iterator(dir, network)?,
        _ => usage(),
    };
    out.insert("wall_s".into(), json!(t.elapsed().as_secs_f64()));
    out.insert("read".into(), read);
    println!("{}", Value::Object(out));
    Ok(())
}
