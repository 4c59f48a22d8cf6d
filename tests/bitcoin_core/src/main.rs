//! Bitcoin Core as a test oracle: Core's own validation engine (libbitcoinkernel) reindexes a
//! blocks folder in a fresh data directory and prints what it ends with as JSON: the tip, its
//! chainwork, the active chain (count, digest, optionally every hash), the UTXO set's count,
//! amount and hash_serialized_3 (gettxoutsetinfo's), the blocks it found invalid and the wall
//! time of the import. kernel.patch adds the three read-only calls the C API lacks (assumed-valid
//! block, UTXO statistics, chainwork).
//!
//! Modes: by default the blk files (and xor.dat) are copied into the data directory's blocks
//! folder and imported as `-reindex` does. `--loadblock FILE...` instead imports plain
//! (un-obfuscated) block files the way `-loadblock` does, for files not laid out as a node's
//! (real-blk/, which lacks the genesis block a reindex starts from). `--open DATADIR` starts on
//! an existing data directory as a restarted node does: Core loads `blocks/index` as it stands
//! (whoever wrote it) and connects the best chain it names from the blk files at the positions
//! it names, without reindexing; the directory is kept, with the index as Core flushed it.
//!
//! Usage: rechain-core-oracle --network NET (--blocks DIR | --loadblock FILE... | --open DATADIR)
//!        [--assumevalid HASH] [--datadir DIR] [--threads N] [--list-chain] [--verbose]
//!        [--log-rejects] [--lookup HASH]... [--muhash]
//!        rechain-core-oracle --network NET --read-snapshot FILE
//!
//! `--muhash` adds the set's MuHash3072 (gettxoutsetinfo muhash). `--read-snapshot FILE` reads a
//! UTXO snapshot (dumptxoutset's format) with Core's own deserializer, as loadtxoutset does, and
//! prints its base block, coin count, amount, hash_serialized_3 and MuHash, or Core's error.
//!
//! `--log-rejects` turns on Core's debug log of its validation and reindex categories and
//! prints every line as `log_debug`: the reasons Core gives only there (a header it refuses,
//! a record it cannot deserialize). `--lookup HASH` prints, under `lookups`, the height of
//! Core's block index entry for each hash asked about, or null where Core kept none.

#![allow(non_upper_case_globals)] // the C API's enum constants, used as patterns

use libbitcoinkernel_sys::*;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::ffi::{c_char, c_int, c_uchar, c_void};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

extern "C" {
    // kernel.patch
    fn btck_chainstate_manager_options_set_assumed_valid_block(
        opts: *mut btck_ChainstateManagerOptions,
        block_hash: *const btck_BlockHash,
    );
    fn btck_chainstate_manager_get_utxo_stats(
        chainman: *mut btck_ChainstateManager,
        coins_count: *mut u64,
        total_amount: *mut i64,
        hash_serialized: *mut c_uchar,
        height: *mut i32,
    ) -> c_int;
    fn btck_block_tree_entry_get_chainwork(entry: *const btck_BlockTreeEntry, out: *mut c_uchar);
    fn btck_chainstate_manager_get_utxo_muhash(
        chainman: *mut btck_ChainstateManager,
        muhash: *mut c_uchar,
    ) -> c_int;
    #[allow(clippy::too_many_arguments)]
    fn btck_read_utxo_snapshot(
        path: *const c_char,
        path_len: usize,
        network_magic: *const c_uchar,
        base_blockhash: *mut c_uchar,
        coins_count: *mut u64,
        coins_read: *mut u64,
        total_amount: *mut i64,
        hash_serialized: *mut c_uchar,
        muhash: *mut c_uchar,
        error: *mut c_char,
        error_len: usize,
    ) -> c_int;
}

struct Args {
    network: String,
    blocks: Option<PathBuf>,
    loadblock: Vec<PathBuf>,
    open: Option<PathBuf>,
    assumevalid: [u8; 32],
    datadir: Option<PathBuf>,
    threads: i32,
    list_chain: bool,
    verbose: bool,
    log_rejects: bool,
    lookup: Vec<[u8; 32]>,
    muhash: bool,
    read_snapshot: Option<PathBuf>,
}

fn die(msg: impl std::fmt::Display) -> ! {
    eprintln!("rechain-core-oracle: {msg}");
    std::process::exit(2)
}

/// Display hex (big-endian, as RPC shows hashes) to internal byte order.
fn parse_hash(s: &str) -> [u8; 32] {
    let s = s.strip_prefix("0x").unwrap_or(s);
    if s == "0" {
        return [0u8; 32];
    }
    if s.len() != 64 {
        die(format!("not a 64-digit hash: {s}"));
    }
    let mut out = [0u8; 32];
    for i in 0..32 {
        out[31 - i] = u8::from_str_radix(&s[2 * i..2 * i + 2], 16)
            .unwrap_or_else(|_| die(format!("not a hex hash: {s}")));
    }
    out
}

fn display(internal: &[u8]) -> String {
    internal.iter().rev().map(|b| format!("{b:02x}")).collect()
}

fn parse_args() -> Args {
    let mut a = Args {
        network: String::new(),
        blocks: None,
        loadblock: Vec::new(),
        open: None,
        assumevalid: [0u8; 32],
        datadir: None,
        // Core's -par default: one script-check thread per core beyond the first.
        threads: std::thread::available_parallelism()
            .map(|n| n.get() as i32 - 1)
            .unwrap_or(0),
        list_chain: false,
        verbose: false,
        log_rejects: false,
        lookup: Vec::new(),
        muhash: false,
        read_snapshot: None,
    };
    let mut it = std::env::args().skip(1).peekable();
    while let Some(arg) = it.next() {
        let mut value = || {
            it.next()
                .unwrap_or_else(|| die(format!("{arg} wants a value")))
        };
        match arg.as_str() {
            "--network" => a.network = value(),
            "--blocks" => a.blocks = Some(PathBuf::from(value())),
            "--loadblock" => a.loadblock.push(PathBuf::from(value())),
            "--open" => a.open = Some(PathBuf::from(value())),
            "--assumevalid" => a.assumevalid = parse_hash(&value()),
            "--datadir" => a.datadir = Some(PathBuf::from(value())),
            "--threads" => a.threads = value().parse().unwrap_or_else(|e| die(e)),
            "--list-chain" => a.list_chain = true,
            "--verbose" => a.verbose = true,
            "--log-rejects" => a.log_rejects = true,
            "--lookup" => a.lookup.push(parse_hash(&value())),
            "--muhash" => a.muhash = true,
            "--read-snapshot" => a.read_snapshot = Some(PathBuf::from(value())),
            _ => die(format!("unknown argument {arg}")),
        }
    }
    let sources = a.blocks.is_some() as u8
        + !a.loadblock.is_empty() as u8
        + a.open.is_some() as u8
        + a.read_snapshot.is_some() as u8;
    if a.network.is_empty() || sources != 1 || (a.open.is_some() && a.datadir.is_some()) {
        die(
            "usage: --network NET (--blocks DIR | --loadblock FILE... | --open DATADIR \
             | --read-snapshot FILE) [--assumevalid HASH] [--datadir DIR] [--threads N] \
             [--list-chain] [--verbose] [--log-rejects] [--lookup HASH]... [--muhash]",
        );
    }
    a
}

fn chain_type(network: &str) -> btck_ChainType {
    match network {
        "main" | "mainnet" => btck_ChainType_MAINNET,
        "testnet" | "testnet3" => btck_ChainType_TESTNET,
        "testnet4" => btck_ChainType_TESTNET_4,
        "signet" => btck_ChainType_SIGNET,
        "regtest" => btck_ChainType_REGTEST,
        _ => die(format!("unknown network {network}")),
    }
}

/// What the callbacks collect while Core validates.
#[derive(Default)]
struct Seen {
    invalid: Vec<([u8; 32], u32)>,
    errors: Vec<String>,
    verbose: bool,
    /// Every line, under `--log-rejects`.
    debug: Option<Vec<String>>,
}

static SEEN: Mutex<Option<Seen>> = Mutex::new(None);

unsafe extern "C" fn on_log(_: *mut c_void, msg: *const c_char, len: usize) {
    let text = String::from_utf8_lossy(std::slice::from_raw_parts(msg as *const u8, len));
    let mut g = SEEN.lock().unwrap();
    let seen = g.get_or_insert_with(Seen::default);
    if seen.verbose {
        eprint!("{text}");
    }
    if let Some(debug) = seen.debug.as_mut().filter(|d| d.len() < 100_000) {
        debug.push(text.trim_end().to_string());
    }
    // Core logs each rejection's reason (ConnectBlock/CheckBlock failures, InvalidChainFound).
    let lower = text.to_lowercase();
    if (lower.contains("error") || lower.contains("invalid") || lower.contains("failed"))
        && seen.errors.len() < 100
    {
        seen.errors.push(text.trim_end().to_string());
    }
}

unsafe extern "C" fn on_block_checked(
    _: *mut c_void,
    block: *mut btck_Block,
    state: *const btck_BlockValidationState,
) {
    if btck_block_validation_state_get_validation_mode(state) != btck_ValidationMode_VALID {
        let result = btck_block_validation_state_get_block_validation_result(state);
        let hash = btck_block_get_hash(block);
        let mut bytes = [0u8; 32];
        btck_block_hash_to_bytes(hash, bytes.as_mut_ptr());
        btck_block_hash_destroy(hash);
        let mut g = SEEN.lock().unwrap();
        g.get_or_insert_with(Seen::default)
            .invalid
            .push((bytes, result));
    }
    btck_block_destroy(block);
}

fn result_name(r: u32) -> &'static str {
    match r {
        btck_BlockValidationResult_CONSENSUS => "consensus",
        btck_BlockValidationResult_CACHED_INVALID => "cached-invalid",
        btck_BlockValidationResult_INVALID_HEADER => "invalid-header",
        btck_BlockValidationResult_MUTATED => "mutated",
        btck_BlockValidationResult_MISSING_PREV => "missing-prev",
        btck_BlockValidationResult_INVALID_PREV => "invalid-prev",
        btck_BlockValidationResult_TIME_FUTURE => "time-future",
        btck_BlockValidationResult_HEADER_LOW_WORK => "header-low-work",
        _ => "unset",
    }
}

/// Copies a node's blocks folder (blk*.dat and xor.dat; never rev*.dat, which a reindex
/// rewrites) into `dest`.
fn copy_blocks(src: &Path, dest: &Path) -> u64 {
    std::fs::create_dir_all(dest).unwrap_or_else(|e| die(format!("{}: {e}", dest.display())));
    let entries = std::fs::read_dir(src).unwrap_or_else(|e| die(format!("{}: {e}", src.display())));
    let mut n = 0;
    for e in entries {
        let e = e.unwrap_or_else(|e| die(format!("{}: {e}", src.display())));
        let name = e.file_name().to_string_lossy().to_string();
        if name == "xor.dat" || (name.starts_with("blk") && name.ends_with(".dat")) {
            std::fs::copy(e.path(), dest.join(&name))
                .unwrap_or_else(|err| die(format!("{}: {err}", e.path().display())));
            n += 1;
        }
    }
    if n == 0 {
        die(format!("{}: no blk*.dat files", src.display()));
    }
    n
}

/// The network's message start, which a snapshot's metadata carries (Core's chainparams.cpp).
fn network_magic(network: &str) -> [u8; 4] {
    match network {
        "main" | "mainnet" => [0xf9, 0xbe, 0xb4, 0xd9],
        "testnet" | "testnet3" => [0x0b, 0x11, 0x09, 0x07],
        "testnet4" => [0x1c, 0x16, 0x3f, 0x28],
        "signet" => [0x0a, 0x03, 0xcf, 0x40],
        "regtest" => [0xfa, 0xbf, 0xb5, 0xda],
        _ => die(format!("unknown network {network}")),
    }
}

/// `--read-snapshot`: Core's deserializer reads the file as loadtxoutset does.
fn read_snapshot(network: &str, path: &Path) -> Value {
    let path_bytes = path.to_string_lossy().into_owned();
    let magic = network_magic(network);
    let (mut base, mut hs, mut mu) = ([0u8; 32], [0u8; 32], [0u8; 32]);
    let (mut count, mut read, mut amount) = (0u64, 0u64, 0i64);
    let mut error = vec![0u8; 512];
    let rc = unsafe {
        btck_read_utxo_snapshot(
            path_bytes.as_ptr() as *const c_char,
            path_bytes.len(),
            magic.as_ptr(),
            base.as_mut_ptr(),
            &mut count,
            &mut read,
            &mut amount,
            hs.as_mut_ptr(),
            mu.as_mut_ptr(),
            error.as_mut_ptr() as *mut c_char,
            error.len(),
        )
    };
    let end = error.iter().position(|&b| b == 0).unwrap_or(error.len());
    json!({
        "network": network,
        "base_hash": display(&base),
        "coins_count": count,
        "coins_read": read,
        "total_amount": amount,
        "hash_serialized_3": (rc == 0).then(|| display(&hs)),
        "muhash": (rc == 0).then(|| display(&mu)),
        "error": (rc != 0).then(|| String::from_utf8_lossy(&error[..end]).into_owned()),
    })
}

fn main() {
    let args = parse_args();
    if let Some(path) = &args.read_snapshot {
        println!(
            "{}",
            serde_json::to_string_pretty(&read_snapshot(&args.network, path)).unwrap()
        );
        return;
    }
    {
        let mut g = SEEN.lock().unwrap();
        let seen = g.get_or_insert_with(Seen::default);
        seen.verbose = args.verbose;
        seen.debug = args.log_rejects.then(Vec::new);
    }
    if let Some(open) = &args.open {
        // Without an index Core would start a new one, and nothing would have been read.
        if !open.join("blocks").join("index").join("CURRENT").is_file() {
            die(format!("{}: no blocks/index to open", open.display()));
        }
        let files = std::fs::read_dir(open.join("blocks"))
            .unwrap_or_else(|e| die(format!("{}: {e}", open.display())))
            .filter_map(|e| e.ok())
            .filter(|e| {
                let name = e.file_name().to_string_lossy().to_string();
                name.starts_with("blk") && name.ends_with(".dat")
            })
            .count() as u64;
        let out = unsafe { run(&args, open, &open.join("blocks"), Some(files)) };
        println!("{}", serde_json::to_string_pretty(&out).unwrap());
        return;
    }
    let tmp;
    let datadir = match &args.datadir {
        Some(d) => {
            if d.exists()
                && std::fs::read_dir(d)
                    .map(|mut r| r.next().is_some())
                    .unwrap_or(true)
            {
                die(format!(
                    "{}: the data directory must be new or empty",
                    d.display()
                ));
            }
            d.clone()
        }
        None => {
            tmp = std::env::temp_dir().join(format!("rechain-core-oracle-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&tmp);
            tmp.clone()
        }
    };
    let blocks_dir = datadir.join("blocks");
    let copied = args.blocks.as_ref().map(|b| copy_blocks(b, &blocks_dir));
    let out = unsafe { run(&args, &datadir, &blocks_dir, copied) };
    if args.datadir.is_none() {
        let _ = std::fs::remove_dir_all(&datadir);
    }
    println!("{}", serde_json::to_string_pretty(&out).unwrap());
}

unsafe fn run(args: &Args, datadir: &Path, blocks_dir: &Path, copied: Option<u64>) -> Value {
    btck_logging_set_options(btck_LoggingOptions {
        log_timestamps: 0,
        log_time_micros: 0,
        log_threadnames: 0,
        log_sourcelocations: 0,
        always_print_category_levels: 0,
    });
    if args.log_rejects {
        for category in [btck_LogCategory_VALIDATION, btck_LogCategory_REINDEX] {
            btck_logging_set_level_category(category, btck_LogLevel_DEBUG);
            btck_logging_enable_category(category);
        }
    }
    let log = btck_logging_connection_create(on_log, std::ptr::null_mut(), None);
    let params = btck_chain_parameters_create(chain_type(&args.network));
    let ctx_opts = btck_context_options_create();
    btck_context_options_set_chainparams(ctx_opts, params);
    btck_context_options_set_validation_interface(
        ctx_opts,
        btck_ValidationInterfaceCallbacks {
            user_data: std::ptr::null_mut(),
            user_data_destroy: None,
            block_checked: Some(on_block_checked),
            pow_valid_block: None,
            block_connected: None,
            block_disconnected: None,
        },
    );
    let ctx = btck_context_create(ctx_opts);
    if ctx.is_null() {
        die("cannot create the kernel context");
    }
    let (d, b) = (datadir.to_string_lossy(), blocks_dir.to_string_lossy());
    let opts = btck_chainstate_manager_options_create(
        ctx,
        d.as_ptr() as *const c_char,
        d.len(),
        b.as_ptr() as *const c_char,
        b.len(),
    );
    if opts.is_null() {
        die(format!(
            "{}: cannot use as data directory",
            datadir.display()
        ));
    }
    btck_chainstate_manager_options_set_worker_threads_num(opts, args.threads);
    let av = btck_block_hash_create(args.assumevalid.as_ptr());
    btck_chainstate_manager_options_set_assumed_valid_block(opts, av);
    btck_block_hash_destroy(av);
    let reindex = args.blocks.is_some();
    if reindex && btck_chainstate_manager_options_set_wipe_dbs(opts, 1, 1) != 0 {
        die("cannot set the reindex (wipe) options");
    }
    let start = Instant::now();
    let chainman = btck_chainstate_manager_create(opts);
    if chainman.is_null() {
        die("Core could not load a chainstate (see --verbose)");
    }
    let paths: Vec<String> = args
        .loadblock
        .iter()
        .map(|p| p.to_string_lossy().to_string())
        .collect();
    let mut ptrs: Vec<*const c_char> = paths.iter().map(|p| p.as_ptr() as *const c_char).collect();
    let mut lens: Vec<usize> = paths.iter().map(|p| p.len()).collect();
    let rc = btck_chainstate_manager_import_blocks(
        chainman,
        if ptrs.is_empty() {
            std::ptr::null_mut()
        } else {
            ptrs.as_mut_ptr()
        },
        if lens.is_empty() {
            std::ptr::null_mut()
        } else {
            lens.as_mut_ptr()
        },
        ptrs.len(),
    );
    if rc != 0 {
        die("Core failed to import the blocks (see --verbose)");
    }
    let import_seconds = start.elapsed().as_secs_f64();

    let chain = btck_chainstate_manager_get_active_chain(chainman);
    let height = btck_chain_get_height(chain);
    if height < 0 {
        // Nothing connected, not even genesis (an index whose blocks Core may not connect).
        die("Core's active chain is empty (see --verbose)");
    }
    let mut hashes: Vec<String> = Vec::with_capacity(height as usize + 1);
    let mut digest_input = String::with_capacity(65 * (height as usize + 1));
    for h in 0..=height {
        let entry = btck_chain_get_by_height(chain, h);
        let mut bytes = [0u8; 32];
        btck_block_hash_to_bytes(
            btck_block_tree_entry_get_block_hash(entry),
            bytes.as_mut_ptr(),
        );
        let s = display(&bytes);
        digest_input.push_str(&s);
        digest_input.push('\n');
        hashes.push(s);
    }
    let tip = btck_chain_get_by_height(chain, height);
    let mut work = [0u8; 32];
    btck_block_tree_entry_get_chainwork(tip, work.as_mut_ptr());

    let stats_start = Instant::now();
    let (mut count, mut amount, mut hs, mut stats_height) = (0u64, 0i64, [0u8; 32], 0i32);
    if btck_chainstate_manager_get_utxo_stats(
        chainman,
        &mut count,
        &mut amount,
        hs.as_mut_ptr(),
        &mut stats_height,
    ) != 0
    {
        die("Core could not compute the UTXO statistics (see --verbose)");
    }
    let stats_seconds = stats_start.elapsed().as_secs_f64();
    let mut mu = [0u8; 32];
    if args.muhash && btck_chainstate_manager_get_utxo_muhash(chainman, mu.as_mut_ptr()) != 0 {
        die("Core could not compute the UTXO MuHash (see --verbose)");
    }

    let seen = SEEN.lock().unwrap().take().unwrap_or_default();
    let invalid: Vec<Value> = seen
        .invalid
        .iter()
        .map(|(hash, result)| {
            let h = btck_block_hash_create(hash.as_ptr());
            let entry = btck_chainstate_manager_get_block_tree_entry_by_hash(chainman, h);
            btck_block_hash_destroy(h);
            let height = (!entry.is_null()).then(|| btck_block_tree_entry_get_height(entry));
            json!({"hash": display(hash), "height": height, "result": result_name(*result)})
        })
        .collect();
    let lookups: serde_json::Map<String, Value> = args
        .lookup
        .iter()
        .map(|hash| {
            let h = btck_block_hash_create(hash.as_ptr());
            let entry = btck_chainstate_manager_get_block_tree_entry_by_hash(chainman, h);
            btck_block_hash_destroy(h);
            let height = (!entry.is_null()).then(|| btck_block_tree_entry_get_height(entry));
            (display(hash), json!(height))
        })
        .collect();
    let mut out = json!({
        "network": args.network,
        "mode": if reindex { "reindex" } else if args.open.is_some() { "open" } else { "loadblock" },
        "files": copied.unwrap_or(args.loadblock.len() as u64),
        "assumevalid": if args.assumevalid == [0u8; 32] { Value::Null } else { json!(display(&args.assumevalid)) },
        "script_threads": args.threads,
        "tip_hash": hashes.last(),
        "tip_height": height,
        "chainwork": display(&work),
        "best_chain_count": hashes.len(),
        "best_chain_sha256": sha256_hex(digest_input.as_bytes()),
        "utxo_height": stats_height,
        "utxo_count": count,
        "total_amount": amount,
        "hash_serialized_3": display(&hs),
        "invalid_blocks": invalid,
        "log_errors": seen.errors,
        "log_debug": seen.debug,
        "lookups": lookups,
        "import_seconds": import_seconds,
        "utxo_stats_seconds": stats_seconds,
    });
    if args.list_chain {
        out["best_chain"] = json!(hashes);
    }
    if args.muhash {
        out["muhash"] = json!(display(&mu));
    }
    btck_chainstate_manager_destroy(chainman);
    btck_chainstate_manager_options_destroy(opts);
    btck_context_destroy(ctx);
    btck_context_options_destroy(ctx_opts);
    btck_chain_parameters_destroy(params);
    btck_logging_connection_destroy(log);
    out
}

/// Hex SHA-256: the same as `sha256sum` of a file with one display hash per line, as `rechain
/// gen bitcoin` writes best_chain.txt.
fn sha256_hex(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
