//! Fuzz targets: each takes arbitrary bytes, runs one decoder of the crate on them and asserts
//! the invariants that must hold for *any* input (no panic, nothing past the end, equal answers
//! from the two body modes, one sequential scan equal to a sharded one, byte-exact re-encoding,
//! rust-bitcoin agreeing on whole blocks, a loaded checkpoint re-written and re-loaded to the
//! same tries). Shared by the stable harness (`tests/fuzz.rs`) and
//! the cargo-fuzz crate (`fuzz/`), which includes this file by path.

use rechain_native::btc::block::{parse_block, parse_tx, BodyMode};
use rechain_native::btc::chain_state::{Applied, Chunk, SpendRows};
use rechain_native::btc::coin::Key;
use rechain_native::btc::decode::{BodyDecoder, Rows};
use rechain_native::btc::encode::Cursor;
use rechain_native::btc::error::ChainStateError;
use rechain_native::btc::locktime::MedianTimes;
use rechain_native::btc::network::Network;
use rechain_native::btc::scan::{Record, ScanConfig, Scanner, ShardScan};
use rechain_native::flow::batches::RegisterLayouts;
use rechain_native::flow::checkpoint::page_in::page_in;
use rechain_native::flow::checkpoint::stream::{
    stream, verify as verify_only, StreamOptions, Walk,
};
use rechain_native::flow::checkpoint::{
    checkpoint_name, count_registers, load, part_name, verify_part, write_tries, CheckpointError,
    Loaded, Verify, HEADER_LEN, SUBTRIE_COUNT, VERSION_V6,
};
use rechain_native::flow::node_store::NodeStore;
use rechain_native::flow::record::{decode, encode_delete, encode_update, WalRecord};
use rechain_native::flow::register_sst::RegisterSst;
use rechain_native::flow::wal::{snappy_decode, Segment, PAGE_SIZE};
use rechain_native::flow::{decode_segment, ErrorKind};
use rechain_native::parquet_out::RowGroups;
use std::cell::RefCell;
use std::path::PathBuf;

pub const TARGETS: [&str; 7] = [
    "blk_scan",
    "block_decode",
    "wal_segment",
    "wal_record",
    "checkpoint_read",
    "checkpoint_stream",
    "chain_state",
];

/// Runs target `name` on `data`; panics (with the broken invariant) when one does not hold.
pub fn run(name: &str, data: &[u8]) {
    match name {
        "blk_scan" => blk_scan(data),
        "block_decode" => block_decode(data),
        "wal_segment" => wal_segment(data),
        "wal_record" => wal_record(data),
        "checkpoint_read" => checkpoint_read(data),
        "checkpoint_stream" => checkpoint_stream(data),
        "chain_state" => chain_state(data),
        other => panic!("unknown fuzz target {other}"),
    }
}

// ---------------------------------------------------------------------------------------------
// blk scanner

/// Bytes before the blk file content in a `blk_scan` input.
pub const SCAN_HEADER: usize = 11;

/// A `blk_scan` input: `flags u8 | xor key [8] | split u16 LE | file bytes`.
/// flags: bits 0-1 network (main, testnet3, regtest, regtest), bit 2 check bodies, bit 3 use
/// the key (else the zero key). `split` picks the shard boundary as a fraction of the file.
pub fn scan_input(network: Network, key: Option<[u8; 8]>, check: bool, file: &[u8]) -> Vec<u8> {
    let net = match network {
        Network::Main => 0u8,
        Network::Testnet3 => 1,
        _ => 2,
    };
    let mut out = vec![net | (u8::from(check) << 2) | (u8::from(key.is_some()) << 3)];
    out.extend_from_slice(&key.unwrap_or_default());
    out.extend_from_slice(&0x8000u16.to_le_bytes());
    out.extend_from_slice(file);
    out
}

thread_local! {
    /// One scratch file per thread: the scanner reads files, not slices.
    static SCRATCH: RefCell<Option<PathBuf>> = const { RefCell::new(None) };
}

/// An empty per-thread scratch folder `tag` for targets that read a set of files; in memory
/// where /dev/shm exists, since the checkpoint writer fsyncs every file.
fn scratch_dir(tag: &str) -> PathBuf {
    let file = scratch_path().with_extension(tag);
    let shm = std::path::Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        shm.join(file.file_name().expect("scratch file name"))
    } else {
        file
    };
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch folder");
    dir
}

fn scratch_path() -> PathBuf {
    SCRATCH.with(|s| {
        s.borrow_mut()
            .get_or_insert_with(|| {
                let dir = std::env::temp_dir();
                let tid = format!("{:?}", std::thread::current().id());
                let tid: String = tid.chars().filter(char::is_ascii_digit).collect();
                dir.join(format!("rechain-fuzz-{}-{tid}.blk", std::process::id()))
            })
            .clone()
    })
}

fn blk_scan(data: &[u8]) {
    if data.len() < SCAN_HEADER {
        return;
    }
    let flags = data[0];
    let network = match flags & 3 {
        0 => Network::Main,
        1 => Network::Testnet3,
        _ => Network::Regtest,
    };
    let xor_key: [u8; 8] = if flags & 8 != 0 {
        data[1..9].try_into().unwrap()
    } else {
        [0; 8]
    };
    let split = u16::from_le_bytes([data[9], data[10]]) as u64;
    let file = &data[SCAN_HEADER..];
    let path = scratch_path();
    std::fs::write(&path, file).expect("write scratch blk file");
    let cfg = ScanConfig {
        network,
        xor_key,
        check_bodies: flags & 4 != 0,
    };
    let len = file.len() as u64;
    let mut scanner = Scanner::open(&cfg, &path).expect("open scratch blk file");
    let full = scanner.scan(0, len).expect("scan");
    check_shard(&full, len);

    // Two shards, stitched the way the committer does it: the second one resumes where the
    // first one's last record ended when that is past the boundary. Same records as one scan.
    let k = len * split / 0x1_0000;
    let first = Scanner::open(&cfg, &path).unwrap().scan(0, k).unwrap();
    check_shard(&first, len);
    let resume = k.max(first.pending.through);
    let second = Scanner::open(&cfg, &path)
        .unwrap()
        .scan(resume, len)
        .unwrap();
    check_shard(&second, len);
    let sharded: Vec<Record> = (0..first.records.len())
        .map(|i| first.records.get(i))
        .chain((0..second.records.len()).map(|i| second.records.get(i)))
        .collect();
    assert_eq!(
        sharded.len(),
        full.records.len(),
        "sharded scan (split at {k}) found a different number of records"
    );
    for (i, r) in sharded.iter().enumerate() {
        let f = full.records.get(i);
        assert_eq!(
            record_key(r),
            record_key(&f),
            "record {i} differs between one scan and two shards split at {k}"
        );
    }
}

type RecordKey = (
    u64,
    u32,
    Option<u32>,
    u8,
    [u8; 32],
    Option<u64>,
    Option<String>,
);

fn record_key(r: &Record) -> RecordKey {
    (
        r.magic_offset,
        r.declared_size,
        r.consumed,
        r.status as u8,
        r.hash,
        r.n_tx,
        r.reason.clone(),
    )
}

fn check_shard(s: &ShardScan, len: u64) {
    let mut last: Option<u64> = None;
    for i in 0..s.records.len() {
        let r = s.records.get(i);
        assert!(
            r.magic_offset >= s.start && r.magic_offset < s.bound.max(s.start + 1),
            "record at {} outside shard [{}, {})",
            r.magic_offset,
            s.start,
            s.bound
        );
        assert!(
            last.is_none_or(|l| r.magic_offset > l),
            "records out of order"
        );
        last = Some(r.magic_offset);
        assert!(r.magic_offset + 8 + 80 <= len, "record header past EOF");
        if let Some(c) = r.consumed {
            assert!(
                c <= r.declared_size,
                "consumed {c} > declared {}",
                r.declared_size
            );
            assert!(
                r.magic_offset + 8 + c as u64 <= len,
                "consumed bytes past EOF"
            );
        }
    }
    for e in &s.events {
        assert!(e.offset <= len, "event offset {} past EOF {len}", e.offset);
        if let Some(end) = e.end {
            assert!(e.offset <= end && end <= len, "bad gap {}..{end}", e.offset);
        }
    }
    assert!(
        s.pending.start <= s.pending.through,
        "pending runs backwards"
    );
    assert!(s.pending.through <= len.max(s.bound), "pending past EOF");
}

// ---------------------------------------------------------------------------------------------
// block / transaction decoder

fn block_decode(data: &[u8]) {
    let framed = parse_block(data, BodyMode::FrameOnly);
    let checked = parse_block(data, BodyMode::Check);
    match (&framed, &checked) {
        (Ok(f), Ok(c)) => {
            assert_eq!(
                (f.consumed, f.n_tx, f.stripped_size, f.weight),
                (c.consumed, c.n_tx, c.stripped_size, c.weight),
                "FrameOnly and Check frame the block differently"
            );
            assert!(c.consumed <= data.len() && c.consumed >= 81);
            assert!(f.invalid.is_none(), "FrameOnly judged validity");
        }
        (Err(a), Err(b)) => assert_eq!(a, b, "the two modes fail differently"),
        _ => panic!("one mode decodes, the other fails: {framed:?} vs {checked:?}"),
    }
    // Transactions one after another from offset 0, as a tx-only stream.
    for mode in [BodyMode::FrameOnly, BodyMode::Check] {
        let mut c = Cursor::new(data);
        while c.pos() < data.len() {
            let before = c.pos();
            match parse_tx(&mut c, data, mode) {
                Ok(tx) => {
                    assert_eq!(
                        tx.size,
                        c.pos() - before,
                        "tx size is not the bytes consumed"
                    );
                    assert!(tx.stripped_size <= tx.size);
                    assert!(c.pos() <= data.len() && c.pos() > before);
                }
                Err(_) => break,
            }
        }
    }
    // The full decoder (--mode full) frames exactly as parse_block and agrees on validity:
    // rows only for a block that checks out, one per transaction, input and output.
    let mut full = BodyDecoder::new(Network::Regtest);
    full.push_block(0, data);
    let cols = &full.cols;
    // The body pass's staging decoder gives the same verdict row and txids, and nothing else.
    let mut slim = BodyDecoder::with_rows(Network::Regtest, Rows::Verdicts);
    slim.push_block(0, data);
    let (a, b) = (&cols.blocks, &slim.cols.blocks);
    assert_eq!(
        (
            &a.hash,
            &a.size,
            &a.stripped_size,
            &a.weight,
            &a.n_tx,
            &a.valid
        ),
        (
            &b.hash,
            &b.size,
            &b.stripped_size,
            &b.weight,
            &b.n_tx,
            &b.valid
        )
    );
    assert_eq!(
        (
            &a.reason,
            &a.coinbase_height,
            &a.n_inputs,
            &a.n_outputs,
            &a.output_value
        ),
        (
            &b.reason,
            &b.coinbase_height,
            &b.n_inputs,
            &b.n_outputs,
            &b.output_value
        )
    );
    assert_eq!(
        (&cols.txs.txid, &cols.txs.block, &cols.txs.position),
        (
            &slim.cols.txs.txid,
            &slim.cols.txs.block,
            &slim.cols.txs.position
        )
    );
    assert!(slim.cols.inputs.tx.is_empty() && slim.cols.outputs.tx.is_empty());
    match &checked {
        Ok(c) if c.consumed == data.len() && c.invalid.is_none() => {
            if cols.blocks.valid[0] {
                assert_eq!(cols.txs.txid.len() as u64, c.n_tx);
                assert_eq!(cols.blocks.weight[0], c.weight);
                assert_eq!(cols.inputs.tx.len(), cols.inputs.script_sig.len());
                assert_eq!(cols.outputs.tx.len(), cols.outputs.address.len());
            }
        }
        _ => {
            assert!(
                !cols.blocks.valid[0],
                "full decode accepts what parse_block rejects"
            );
            assert!(cols.txs.txid.is_empty(), "rows for an invalid block");
        }
    }
    // rust-bitcoin, an independent decoder, on whole blocks that use every byte.
    // Core (and we) read a transaction with no inputs and a zero flag byte as having no
    // outputs either; rust-bitcoin rejects it ("unsupported segwit version: 0"), so such
    // blocks are left out of the comparison.
    if let Ok(c) = &checked {
        if c.consumed == data.len() && !has_empty_core_tx(data) {
            let theirs: bitcoin::Block = bitcoin::consensus::deserialize(data)
                .unwrap_or_else(|e| panic!("we decode a whole block rust-bitcoin rejects: {e}"));
            assert_eq!(
                theirs.txdata.len() as u64,
                c.n_tx,
                "tx count differs from rust-bitcoin"
            );
            assert_eq!(
                theirs.weight().to_wu(),
                c.weight,
                "weight differs from rust-bitcoin"
            );
        }
    }
}

/// Whether a transaction of the block is `version | 00 00 | lock_time` (zero inputs, flag 0).
fn has_empty_core_tx(data: &[u8]) -> bool {
    let mut c = Cursor::new(data);
    if c.take(80).is_err() {
        return false;
    }
    let Ok(n) = c.compact_size() else {
        return false;
    };
    for _ in 0..n {
        let at = c.pos();
        if data.get(at + 4..at + 6) == Some(&[0, 0]) {
            return true;
        }
        if parse_tx(&mut c, data, BodyMode::FrameOnly).is_err() {
            return false;
        }
    }
    false
}

// ---------------------------------------------------------------------------------------------
// Flow WAL segment reader and record decoder

fn wal_segment(data: &[u8]) {
    let seg = Segment::from_bytes(0, data.to_vec());
    let padded = data.len().div_ceil(PAGE_SIZE) * PAGE_SIZE;
    let mut reader = seg.reader();
    let mut last_pos = 0u64;
    // Every record takes at least one 7-byte header: more steps than that is a loop.
    for _ in 0..=padded / 7 + 1 {
        match reader.next_record() {
            Ok(Some(rec)) => {
                assert!(rec.offset >= last_pos, "record offset went backwards");
                assert!(rec.fragments >= 1);
                let pos = reader.position();
                assert!(
                    pos > rec.offset && pos <= padded as u64,
                    "position {pos} out of range"
                );
                last_pos = pos;
            }
            Ok(None) => {
                assert!(reader.position() <= padded as u64);
                assert!(
                    reader.next_record().unwrap().is_none(),
                    "reader resumed after end"
                );
                break;
            }
            Err(e) => {
                assert!(
                    e.offset <= padded as u64,
                    "error offset {} past the segment",
                    e.offset
                );
                assert!(!e.kind.is_retryable(), "bytes gave an I/O error");
                assert!(
                    reader.next_record().unwrap().is_none(),
                    "reader resumed after error"
                );
                break;
            }
        }
    }
    let d = decode_segment(&seg);
    assert!(d.end <= padded as u64);
    for w in d.records.windows(2) {
        assert!(w[0].1 < w[1].1, "decoded records out of order");
    }
    // A snappy block on its own: the output is exactly the declared length.
    if let Ok(out) = snappy_decode(data) {
        let mut declared = 0u64;
        for (i, b) in data.iter().take(5).enumerate() {
            declared |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                break;
            }
        }
        assert_eq!(out.len() as u64, declared, "snappy output length");
    }
}

fn wal_record(data: &[u8]) {
    match decode(data) {
        Ok(WalRecord::Update(u)) => {
            assert_eq!(u.paths.len(), u.payloads.len());
            // flow-go ignores bytes after a payload's value inside its length-prefixed slot
            // and after the last payload, so the bytes need not come back exactly: the
            // re-encoding is no longer and decodes to the same update.
            let enc = encode_update(&u);
            assert!(
                enc.len() <= data.len(),
                "re-encoding is longer than the input"
            );
            assert_eq!(
                enc[..38],
                data[..38],
                "re-encoding changes the update's head"
            );
            // (With no paths flow-go's encoder stops before the path size its decoder reads.)
            if !u.paths.is_empty() {
                match decode(&enc) {
                    Ok(WalRecord::Update(again)) => assert_eq!(again, u, "re-encoding changes it"),
                    other => panic!("re-encoded update does not decode: {other:?}"),
                }
            }
        }
        Ok(WalRecord::Delete(root)) => {
            assert!(
                data.starts_with(&encode_delete(&root)),
                "delete re-encodes differently"
            );
        }
        Err(ErrorKind::Truncated { at, .. }) => assert!(at <= data.len(), "truncation past end"),
        Err(_) => {}
    }
}

// ---------------------------------------------------------------------------------------------
// Flow checkpoint reader

/// Files of a `checkpoint_read` input: the main file, then parts `.000` to `.016`.
pub const CHECKPOINT_FILES: usize = SUBTRIE_COUNT + 2;

/// A `checkpoint_read` input: `flags u8 | (length u32 LE | bytes) per file`, in
/// [`CHECKPOINT_FILES`] order; files past the end of the input are absent. flags bit 0: set
/// every CRC right (part trailers, the main file's list and its own) so that mutations reach
/// the node decoder instead of stopping at a checksum; bit 1: trust the stored hashes
/// (`Verify::None`) instead of recomputing every one.
pub fn checkpoint_input(files: &[Vec<u8>], fix_crcs: bool, trust_hashes: bool) -> Vec<u8> {
    let mut out = vec![u8::from(fix_crcs) | (u8::from(trust_hashes) << 1)];
    for f in files {
        out.extend_from_slice(&(f.len() as u32).to_le_bytes());
        out.extend_from_slice(f);
    }
    out
}

fn split_checkpoint_input(data: &[u8]) -> Vec<Vec<u8>> {
    let mut files = Vec::new();
    let mut rest = data;
    while files.len() < CHECKPOINT_FILES && rest.len() >= 4 {
        let n = u32::from_le_bytes(rest[..4].try_into().unwrap()) as usize;
        let body = &rest[4..];
        let n = n.min(body.len());
        files.push(body[..n].to_vec());
        rest = &body[n..];
    }
    files
}

fn fix_checkpoint_crcs(files: &mut [Vec<u8>]) {
    let mut part_crcs = Vec::new();
    for part in files.iter_mut().skip(1) {
        if part.len() >= 4 {
            let body = part.len() - 4;
            let c = crc32c(&part[..body]);
            part[body..].copy_from_slice(&c.to_be_bytes());
            part_crcs.push(c);
        }
    }
    if let [single] = files {
        // A single-file version (3, 4, 5): its CRC-32C closes the file.
        let version = single.get(2..4).map(|v| u16::from_be_bytes([v[0], v[1]]));
        if matches!(version, Some(3..=5)) && single.len() >= 8 {
            let body = single.len() - 4;
            let c = crc32c(&single[..body]);
            single[body..].copy_from_slice(&c.to_be_bytes());
        }
        return;
    }
    if let Some(main) = files.first_mut().filter(|m| m.len() as u64 == HEADER_LEN) {
        for (i, c) in part_crcs.iter().enumerate() {
            main[6 + 4 * i..10 + 4 * i].copy_from_slice(&c.to_be_bytes());
        }
        let body = main.len() - 4;
        let c = crc32c(&main[..body]);
        main[body..].copy_from_slice(&c.to_be_bytes());
    }
}

fn crc32c(data: &[u8]) -> u32 {
    rechain_native::flow::wal::crc32c(data)
}

fn check_checkpoint_error(e: &CheckpointError, dir: &std::path::Path) {
    assert!(
        e.file.starts_with(&*dir.to_string_lossy()),
        "error names {}",
        e.file
    );
    assert!(!e.is_retryable(), "bytes gave an I/O error: {e}");
    let len = std::fs::metadata(&e.file).map_or(0, |m| m.len());
    assert!(
        e.offset <= len,
        "error offset {} past {} ({len} bytes)",
        e.offset,
        e.file
    );
}

fn checkpoint_read(data: &[u8]) {
    checkpoint_input_loads(data);
}

/// A `checkpoint_read` input's files written into the scratch folder `tag` (CRCs set right
/// first if its flags ask): the folder, the main file's name and the hashes to check.
fn write_checkpoint_input(data: &[u8], tag: &str) -> Option<(PathBuf, String, Verify)> {
    let (&flags, rest) = data.split_first()?;
    let mut files = split_checkpoint_input(rest);
    if flags & 1 != 0 {
        fix_checkpoint_crcs(&mut files);
    }
    let dir = scratch_dir(tag);
    let name = checkpoint_name(1);
    for (i, f) in files.iter().enumerate() {
        let file = if i == 0 {
            name.clone()
        } else {
            part_name(&name, i - 1)
        };
        std::fs::write(dir.join(file), f).expect("write scratch checkpoint file");
    }
    let verify = if flags & 2 != 0 {
        Verify::None
    } else {
        Verify::Full
    };
    Some((dir, name, verify))
}

/// Runs the `checkpoint_read` target's checks; true when the input loaded as a checkpoint.
pub fn checkpoint_input_loads(data: &[u8]) -> bool {
    let Some((dir, name, verify)) = write_checkpoint_input(data, "cp") else {
        return false;
    };
    for i in 0..SUBTRIE_COUNT {
        if let Err(e) = verify_part(&dir, &name, i, verify) {
            check_checkpoint_error(&e, &dir);
        }
    }
    match load(&dir, &name, 2, verify) {
        Err(e) => {
            check_checkpoint_error(&e, &dir);
            false
        }
        Ok(loaded) => {
            if matches!(verify, Verify::None) {
                return true; // stored hashes were trusted, so they need not be right
            }
            // Every hash was checked: what loaded can be written back, and loads again to the
            // same tries.
            let out = scratch_dir("cp-out");
            write_tries(&loaded.tries, &out, &name, 1).expect("re-write a loaded checkpoint");
            let again = load(&out, &name, 1, Verify::Full).expect("re-written checkpoint loads");
            let key = |l: &[rechain_native::flow::mtrie::Trie]| -> Vec<_> {
                l.iter()
                    .map(|t| (t.root_hash(), t.reg_count, t.reg_size))
                    .collect()
            };
            assert_eq!(
                key(&again.tries),
                key(&loaded.tries),
                "re-written tries differ"
            );
            true
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Flow checkpoint, streamed

/// The streamed read (registers to Parquet and SST files) and the paged read (nodes into a
/// node store) against the in-memory load of the same bytes: each accepts exactly what the
/// load accepts, with the same tries, registers and parts, except where only the load reads
/// (another version, several tries); every error names a checkpoint file and an offset in it.
fn checkpoint_stream(data: &[u8]) {
    checkpoint_input_streams(data);
}

/// Runs the `checkpoint_stream` target's checks; true when the input streamed.
pub fn checkpoint_input_streams(data: &[u8]) -> bool {
    let Some((dir, name, verify)) = write_checkpoint_input(data, "cps") else {
        return false;
    };
    let loaded = load(&dir, &name, 2, verify);
    let out = scratch_dir("cps-out");
    std::fs::create_dir_all(out.join("sst")).expect("create scratch folder");
    let files = |t: &str| -> Vec<PathBuf> {
        (0..SUBTRIE_COUNT)
            .map(|i| out.join(format!("{t}-{i:02}.parquet")))
            .collect()
    };
    let opts = StreamOptions {
        threads: 2,
        verify,
        registers: files("registers"),
        hashes: files("hashes"),
        layouts: RegisterLayouts::plain(RowGroups {
            rows: 64,
            bytes: 1 << 16,
        }),
        batch_bytes: 1 << 10,
        sst: Some(RegisterSst {
            dir: out.join("sst"),
            max_held: 256,
            version: 1,
            compress: true,
        }),
    };
    let streamed = stream(&dir, &name, &opts).map(|(info, _)| info);
    let walk = Walk {
        threads: 2,
        verify,
        batch_bytes: 1 << 10,
    };
    // Verifying alone makes the stream's checks: the same outcome, the same first damage.
    match (&streamed, verify_only(&dir, &name, walk)) {
        (Ok(s), Ok(v)) => {
            assert_eq!(v.tries, s.tries, "verify: tries differ from the stream's");
            assert_eq!(
                (v.rows, v.registers),
                (s.rows, s.registers),
                "verify: counts differ from the stream's"
            );
        }
        (Err(s), Err(v)) => assert_eq!(
            (v.kind, &v.file, v.offset),
            (s.kind, &s.file, s.offset),
            "verify: another error than the stream's"
        ),
        (Ok(_), Err(v)) => panic!("verify refused what the stream read: {v}"),
        (Err(s), Ok(_)) => panic!("verify passed what the stream refused: {s}"),
    }
    let store = NodeStore::create(&out.join("store"), 4 << 10).expect("create a node store");
    let paged = page_in(&dir, &name, walk, &store).map(|(info, trie)| {
        assert_eq!(
            info.tries.last().map(|t| t.0),
            Some(trie.root_hash()),
            "the paged trie's root is not its record's"
        );
        info
    });
    for e in [
        &loaded.as_ref().err(),
        &streamed.as_ref().err(),
        &paged.as_ref().err(),
    ]
    .into_iter()
    .flatten()
    {
        check_checkpoint_error(e, &dir);
    }
    // Where only the in-memory load reads: another version, several tries, or none.
    let load_only = |e: &CheckpointError| match e.kind {
        "unsupported_version" => rechain_native::flow::checkpoint::checkpoint_version(&dir, &name)
            .is_ok_and(|v| v != VERSION_V6),
        "shared_node" => loaded.as_ref().is_ok_and(|l| l.tries.len() > 1),
        "no_tries" => loaded.as_ref().is_ok_and(|l| l.tries.is_empty()),
        _ => false,
    };
    let key = |l: &Loaded| -> Vec<_> {
        l.tries
            .iter()
            .map(|t| (t.root_hash(), t.reg_count, t.reg_size))
            .collect()
    };
    let shape = |ps: &[rechain_native::flow::checkpoint::PartInfo]| -> Vec<(u64, u64, u64)> {
        ps.iter().map(|p| (p.nodes, p.leaves, p.bytes)).collect()
    };
    for (what, read) in [("streamed", &streamed), ("paged", &paged)] {
        match (&loaded, read) {
            (Ok(l), Ok(info)) => {
                assert_eq!(info.tries, key(l), "{what}: tries differ from the load's");
                assert_eq!(
                    shape(&info.parts),
                    shape(&l.parts),
                    "{what}: parts differ from the load's"
                );
                let last = l.tries.last().expect("a streamed checkpoint has a trie");
                let registers = count_registers(last).expect("count the loaded registers");
                assert_eq!(
                    info.registers, registers,
                    "{what}: registers differ from the load's"
                );
            }
            (Ok(_), Err(e)) => assert!(load_only(e), "{what}: refused what the load read: {e}"),
            (Err(e), Ok(_)) => panic!("{what}: read what the load refused: {e}"),
            (Err(_), Err(_)) => {}
        }
    }
    drop(store);
    streamed.is_ok()
}

// ---------------------------------------------------------------------------------------------
// Bitcoin chain state

/// A `chain_state` input: `split u16 LE | (length u32 LE | block)*`, the blocks at heights 0,
/// 1, ... of a regtest chain; `split` picks where the chain is cut into two chunks.
pub fn chain_state_input(split: u16, blocks: &[Vec<u8>]) -> Vec<u8> {
    let mut out = split.to_le_bytes().to_vec();
    for b in blocks {
        out.extend_from_slice(&(b.len() as u32).to_le_bytes());
        out.extend_from_slice(b);
    }
    out
}

type CoinSet = std::collections::HashMap<Key, Vec<u8>>;

/// `blocks` framed as a chunk of the chain state from height `first` (each block's hash from
/// its first 80 bytes).
fn frame_chunk(first: usize, blocks: &[Vec<u8>]) -> Chunk {
    use rechain_native::btc::sha256::sha256d;
    let framed = blocks
        .iter()
        .enumerate()
        .map(|(i, b)| {
            (
                (first + i) as u32,
                sha256d(&b[..b.len().min(80)]),
                b.clone(),
            )
        })
        .collect();
    Chunk::from_blocks(Network::Regtest, framed)
}

/// Median times past for heights below `end`: all zero (the fuzzed blocks' lock times are
/// measured against them, the same on every path).
fn zero_times(end: usize) -> Vec<u8> {
    vec![0u8; 4 * end]
}

/// A chunk of `blocks` (from `first`) applied to `set` as the stage applies one to RocksDB:
/// its needed coins read, its net change written.
fn apply_chunk(
    set: &mut CoinSet,
    first: usize,
    blocks: &[Vec<u8>],
) -> Result<Applied, ChainStateError> {
    let chunk = frame_chunk(first, blocks);
    let values = chunk.needed.iter().map(|k| set.get(k).cloned()).collect();
    let times = zero_times(first + blocks.len());
    let applied = chunk.apply(values, MedianTimes(&times));
    if let Ok(a) = &applied {
        write_change(set, &a.puts, &a.deletes);
    }
    applied
}

fn write_change(set: &mut CoinSet, puts: &[(Key, Vec<u8>)], deletes: &[Key]) {
    for k in deletes {
        set.remove(k);
    }
    for (k, v) in puts {
        set.insert(*k, v.clone());
    }
}

/// (coins, amount) of a set.
fn set_totals(set: &CoinSet) -> (i64, i128) {
    use rechain_native::btc::coin::coin_fields;
    let amount = set
        .values()
        .map(|v| coin_fields(v).expect("a stored coin decodes").value as i128)
        .sum();
    (set.len() as i64, amount)
}

fn unwind_into(set: &mut CoinSet, undo: &[(u32, Vec<u8>)]) {
    let records: Vec<Vec<u8>> = undo.iter().rev().map(|u| u.1.clone()).collect();
    let (puts, deletes, _, _) =
        rechain_native::btc::undo::unwind(&records).expect("its own undo records unwind");
    write_change(set, &puts, &deletes);
}

/// The chain applied as one chunk and as two: the same verdict (first failing block and
/// reason), coins, spends and undo records, whatever the cut (chunks are the stage's unit of
/// work, not part of the result); each chunk's deltas match what it changed; unwinding the
/// second chunk's blocks gives back the set after the first, and unwinding all of them the
/// empty set.
fn chain_state(data: &[u8]) {
    chain_state_compared(data);
}

/// Runs the `chain_state` target's checks; the blocks applied when the whole chain and its
/// two chunks applied and were compared (None otherwise).
pub fn chain_state_compared(data: &[u8]) -> Option<u32> {
    if data.len() < 2 {
        return None;
    }
    let split = u16::from_le_bytes([data[0], data[1]]) as usize;
    let mut blocks = Vec::new();
    let mut rest = &data[2..];
    while rest.len() >= 4 && blocks.len() < 400 {
        let n = (u32::from_le_bytes(rest[..4].try_into().unwrap()) as usize).min(rest.len() - 4);
        blocks.push(rest[4..4 + n].to_vec());
        rest = &rest[4 + n..];
    }
    if blocks.len() < 2 {
        return None;
    }
    let cut = 1 + split % (blocks.len() - 1);
    let mut whole_set = CoinSet::default();
    let whole = apply_chunk(&mut whole_set, 0, &blocks);
    // A block the chunk cannot apply at all (no coinbase, say: the body checks keep such a
    // block off the best chain) is an error for the whole chunk, unless a block before it
    // broke a rule, where applying stops. So the chain errs if and only if the chunk holding
    // the first such block errs and no rule broke before it.
    let mut set = CoinSet::default();
    let a = match apply_chunk(&mut set, 0, &blocks[..cut]) {
        Err(e) => {
            assert!(
                whole.is_err(),
                "the first chunk errs ({e}), the whole chain does not"
            );
            return None;
        }
        Ok(a) => a,
    };
    assert_eq!(
        (a.count_delta, a.amount_delta),
        set_totals(&set),
        "first chunk's deltas"
    );
    let after_a = set.clone();
    let mut parts = vec![&a];
    let b;
    if a.failure.is_none() && a.body_failure.is_none() {
        b = match apply_chunk(&mut set, cut, &blocks[cut..]) {
            Err(e) => {
                assert!(
                    whole.is_err(),
                    "the second chunk errs ({e}), the whole chain does not"
                );
                return None;
            }
            Ok(b) => b,
        };
        let (count, amount) = set_totals(&set);
        let before = set_totals(&after_a);
        assert_eq!(
            (b.count_delta, b.amount_delta),
            (count - before.0, amount - before.1),
            "second chunk's deltas"
        );
        parts.push(&b);
    }
    let whole = match whole {
        Ok(w) => w,
        Err(e) => panic!("the whole chain errs ({e}), its chunks do not"),
    };
    // The verdict: the first block that breaks a rule or fails its body checks.
    let failure = parts.iter().find_map(|p| p.first_failure());
    assert_eq!(
        failure,
        whole.first_failure(),
        "verdicts differ with the cut at {cut}"
    );
    assert_eq!(
        parts.iter().map(|p| p.blocks).sum::<u32>(),
        whole.blocks,
        "blocks applied"
    );
    assert!(set == whole_set, "coins differ with the cut at {cut}");
    let undo: Vec<(u32, Vec<u8>)> = parts.iter().flat_map(|p| p.undo.clone()).collect();
    assert_eq!(
        undo, whole.undo,
        "undo records differ with the cut at {cut}"
    );
    let spends = |f: &dyn Fn(&SpendRows) -> Vec<u64>| {
        parts
            .iter()
            .flat_map(|p| f(&p.spends))
            .collect::<Vec<u64>>()
    };
    type Column = fn(&SpendRows) -> Vec<u64>;
    let columns: [(&str, Column); 5] = [
        ("height", |s| s.height.iter().map(|&v| v.into()).collect()),
        ("vin", |s| s.vin.iter().map(|&v| v.into()).collect()),
        ("value", |s| s.value.clone()),
        ("prev_height", |s| {
            s.prev_height.iter().map(|&v| v.into()).collect()
        }),
        ("prev_row", |s| {
            s.prev_row.iter().map(|&v| v.into()).collect()
        }),
    ];
    for (name, column) in columns {
        assert_eq!(spends(&column), column(&whole.spends), "spends' {name}");
    }
    // The partitioned apply (a Ray cluster's): each chunk's coins resolved by txid partition
    // from the events of the chunks before it, then applied on its own, gives the same.
    let partitions = 1 + split % 5;
    let resolved = partitioned(&blocks, cut, partitions);
    for (c, (mine, theirs)) in parts.iter().zip(&resolved).enumerate() {
        let theirs = theirs
            .as_ref()
            .expect("a chunk applies to its resolved coins");
        assert!(
            same_applied(mine, theirs),
            "chunk {c} applied to coins resolved in {partitions} partitions differs"
        );
    }
    if parts.len() == 2 {
        unwind_into(&mut set, &parts[1].undo);
        assert!(
            set == after_a,
            "unwinding the second chunk misses the first's set"
        );
    }
    unwind_into(&mut set, &parts[0].undo);
    assert!(set.is_empty(), "unwinding every block leaves coins");
    Some(whole.blocks)
}

/// The two chunks (cut at `cut`) applied as the partitioned chain state applies them: events
/// split into `partitions` txid partitions, each partition folded over both chunks, each chunk
/// applied to the coins that gives it (the range starts on the empty set).
fn partitioned(
    blocks: &[Vec<u8>],
    cut: usize,
    partitions: usize,
) -> Vec<Result<Applied, ChainStateError>> {
    use rechain_native::btc::spend_resolve::{resolve, stored_keys};
    let chunks = [
        frame_chunk(0, &blocks[..cut]),
        frame_chunk(cut, &blocks[cut..]),
    ];
    let times = zero_times(blocks.len());
    let events: Vec<Vec<Vec<u8>>> = chunks.iter().map(|c| c.events(partitions)).collect();
    let folded: Vec<Vec<Vec<u8>>> = (0..partitions)
        .map(|p| {
            let of_partition: Vec<&[u8]> = events.iter().map(|e| e[p].as_slice()).collect();
            resolve(&of_partition).expect("a partition's events fold")
        })
        .collect();
    chunks
        .iter()
        .enumerate()
        .map(|(c, chunk)| {
            let bufs: Vec<&[u8]> = folded.iter().map(|f| f[c].as_slice()).collect();
            let mut stored = rustc_hash::FxHashMap::default();
            for buf in &bufs {
                for k in stored_keys(buf)? {
                    stored.insert(k, None); // the range starts on the empty set
                }
            }
            chunk.apply(chunk.coins_from(&bufs, &stored)?, MedianTimes(&times))
        })
        .collect()
}

fn same_applied(a: &Applied, b: &Applied) -> bool {
    let (x, y) = (&a.spends, &b.spends);
    (a.blocks, a.tip, a.failure, a.count_delta, a.amount_delta)
        == (b.blocks, b.tip, b.failure, b.count_delta, b.amount_delta)
        && a.puts == b.puts
        && a.deletes == b.deletes
        && a.undo == b.undo
        && (
            &x.height,
            &x.pos,
            &x.vin,
            &x.value,
            &x.prev_height,
            &x.prev_row,
        ) == (
            &y.height,
            &y.pos,
            &y.vin,
            &y.value,
            &y.prev_height,
            &y.prev_row,
        )
}
