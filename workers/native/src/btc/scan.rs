//! The blk-file scanner (spec §1.2, §2, §9, §10): de-obfuscation by absolute offset, framing by
//! magic and size, header hashing and proof of work, and resynchronisation after damage.
//!
//! ```text
//! record = magic(4) | size u32 LE | block(size)      nDataPos = record start + 8
//! ```
//!
//! Header mode reads the 8-byte prefix, the 80-byte header and the tx-count CompactSize, then
//! trusts `size` only when the bytes at `data_pos + size` confirm it (the next magic, raw zeros of
//! a preallocated tail, or the exact end of the file). An unconfirmed size makes the scanner frame
//! the body transaction by transaction to learn where the record really ends. Body-check mode
//! always frames and hashes the body (merkle root, mutation, witness commitment).
//!
//! A shard scans record *starts* in `[start, bound)`; a record may run past `bound`. What is left
//! open at the end (a gap that may continue in the next shard) is returned as `Pending` so the
//! committer can stitch neighbouring shards into exactly what one sequential scan would report.

use super::block::{parse_block, BodyMode};
use super::encode::read_compact_size;
use super::header::{Header, PowChecker, HEADER_LEN};
use super::network::Network;
use super::sha256::sha256d;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

/// Core's reindex scanner bounds (`LoadExternalBlockFile`): smaller or larger is not a record.
pub const MIN_RECORD_SIZE: u32 = 80;
pub const MAX_RECORD_SIZE: u32 = 4_000_000;
const PREFIX_LEN: u64 = 8;
/// Reads further apart than this are served by small positioned reads instead of streaming.
const SEQUENTIAL_GAP: u64 = 1024;
const STREAM_CHUNK: usize = 256 << 10;
const STREAM_START: usize = 8 << 10;
const SMALL_READ: usize = 128;
/// Raw zero bytes that confirm a record's end: more than any header's run of zeros (a header
/// always carries a 32-byte merkle root).
const ZERO_CONFIRM: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum RecordStatus {
    Ok = 0,
    BodyError = 1,
    InvalidBody = 2,
    InvalidHeader = 3,
    /// Body decoded but the block breaks a consensus rule that no other copy can fix (BIP34
    /// height, spends): set by the full decode, poisons descendants like a bad header.
    InvalidBlock = 4,
}

impl RecordStatus {
    pub fn name(self) -> &'static str {
        match self {
            RecordStatus::Ok => "ok",
            RecordStatus::BodyError => "body_error",
            RecordStatus::InvalidBody => "invalid_body",
            RecordStatus::InvalidHeader => "invalid_header",
            RecordStatus::InvalidBlock => "invalid_block",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Record {
    pub magic_offset: u64,
    pub declared_size: u32,
    /// Bytes of the block actually used: parsed, or trusted from confirmed framing.
    pub consumed: Option<u32>,
    pub status: RecordStatus,
    pub reason: Option<String>,
    pub hash: [u8; 32],
    pub header: [u8; HEADER_LEN],
    pub n_tx: Option<u64>,
    pub body_checked: bool,
}

/// Accepted records, column by column in the layout of their Arrow arrays, so the batch takes
/// the buffers over without a second pass or copy. Absent values (a consumed size or tx count
/// the scanner could not learn) and reasons are rare: they are kept as row lists, not per row.
#[derive(Clone, Debug, Default)]
pub struct RecordColumns {
    pub magic_offset: Vec<u64>,
    pub declared_size: Vec<u32>,
    /// 0 in the rows listed in `consumed_absent`.
    pub consumed: Vec<u32>,
    pub consumed_absent: Vec<usize>,
    pub status: Vec<RecordStatus>,
    /// (row, reason) for every row that carries one, ascending.
    pub reasons: Vec<(usize, String)>,
    /// 32 bytes per row, internal order.
    pub hash: Vec<u8>,
    pub prev_hash: Vec<u8>,
    pub merkle_root: Vec<u8>,
    pub version: Vec<i32>,
    pub time: Vec<u32>,
    pub bits: Vec<u32>,
    pub nonce: Vec<u32>,
    /// 0 in the rows listed in `n_tx_absent`.
    pub n_tx: Vec<u64>,
    pub n_tx_absent: Vec<usize>,
    pub body_checked: Vec<bool>,
}

/// Columns grow together by doubling from this many rows.
const FIRST_ROWS: usize = 1024;

impl RecordColumns {
    pub fn push(&mut self, r: Record) {
        let row = self.len();
        if row == self.magic_offset.capacity() {
            self.grow();
        }
        self.magic_offset.push(r.magic_offset);
        self.declared_size.push(r.declared_size);
        self.consumed.push(r.consumed.unwrap_or(0));
        if r.consumed.is_none() {
            self.consumed_absent.push(row);
        }
        self.status.push(r.status);
        if let Some(reason) = r.reason {
            self.reasons.push((row, reason));
        }
        self.hash.extend_from_slice(&r.hash);
        let h = Header::parse(&r.header);
        self.prev_hash.extend_from_slice(&h.prev_hash);
        self.merkle_root.extend_from_slice(&h.merkle_root);
        self.version.push(h.version);
        self.time.push(h.time);
        self.bits.push(h.bits);
        self.nonce.push(h.nonce);
        self.n_tx.push(r.n_tx.unwrap_or(0));
        if r.n_tx.is_none() {
            self.n_tx_absent.push(row);
        }
        self.body_checked.push(r.body_checked);
    }

    #[cold]
    fn grow(&mut self) {
        self.reserve_rows((2 * self.len()).max(FIRST_ROWS));
    }

    /// Room for `rows` rows in every per-row column at once. A million rows are ~140 MB: a
    /// doubling realloc that copies them faults every page twice, which cost a third of the
    /// scan (transparent huge pages did not help on the benchmark machine: clearing them did).
    pub fn reserve_rows(&mut self, rows: usize) {
        fn to<T>(v: &mut Vec<T>, n: usize) {
            v.reserve_exact(n.saturating_sub(v.len()));
        }
        to(&mut self.magic_offset, rows);
        to(&mut self.declared_size, rows);
        to(&mut self.consumed, rows);
        to(&mut self.status, rows);
        to(&mut self.hash, 32 * rows);
        to(&mut self.prev_hash, 32 * rows);
        to(&mut self.merkle_root, 32 * rows);
        to(&mut self.version, rows);
        to(&mut self.time, rows);
        to(&mut self.bits, rows);
        to(&mut self.nonce, rows);
        to(&mut self.n_tx, rows);
        to(&mut self.body_checked, rows);
    }

    /// Rows the columns hold without reallocating.
    pub fn capacity(&self) -> usize {
        self.magic_offset.capacity()
    }

    pub fn len(&self) -> usize {
        self.magic_offset.len()
    }

    pub fn is_empty(&self) -> bool {
        self.magic_offset.is_empty()
    }

    pub fn get(&self, i: usize) -> Record {
        let at32 = |v: &Vec<u8>| -> [u8; 32] { v[32 * i..32 * i + 32].try_into().unwrap() };
        let header = Header {
            version: self.version[i],
            prev_hash: at32(&self.prev_hash),
            merkle_root: at32(&self.merkle_root),
            time: self.time[i],
            bits: self.bits[i],
            nonce: self.nonce[i],
        };
        let absent = |rows: &Vec<usize>| rows.binary_search(&i).is_ok();
        Record {
            magic_offset: self.magic_offset[i],
            declared_size: self.declared_size[i],
            consumed: (!absent(&self.consumed_absent)).then_some(self.consumed[i]),
            status: self.status[i],
            reason: self
                .reasons
                .binary_search_by_key(&i, |(row, _)| *row)
                .ok()
                .map(|k| self.reasons[k].1.clone()),
            hash: at32(&self.hash),
            header: header.serialize(),
            n_tx: (!absent(&self.n_tx_absent)).then_some(self.n_tx[i]),
            body_checked: self.body_checked[i],
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    Garbage,
    ZeroGap,
    ZeroTail,
    TrailingGarbage,
    MagicWithoutValidHeader,
    BadSizeField,
    SizeMismatch,
    BodyError,
}

impl EventKind {
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Garbage => "garbage",
            EventKind::ZeroGap => "zero_gap",
            EventKind::ZeroTail => "zero_tail",
            EventKind::TrailingGarbage => "trailing_garbage",
            EventKind::MagicWithoutValidHeader => "magic_without_valid_header",
            EventKind::BadSizeField => "bad_size_field",
            EventKind::SizeMismatch => "size_mismatch",
            EventKind::BodyError => "body_error",
        }
    }

    /// Classifies a byte range between records.
    pub fn for_gap(all_zero: bool, at_eof: bool) -> EventKind {
        match (all_zero, at_eof) {
            (true, true) => EventKind::ZeroTail,
            (true, false) => EventKind::ZeroGap,
            (false, true) => EventKind::TrailingGarbage,
            (false, false) => EventKind::Garbage,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub kind: EventKind,
    pub offset: u64,
    /// End of a byte range (gaps only).
    pub end: Option<u64>,
    pub declared: Option<u64>,
    pub consumed: Option<u64>,
    pub reason: Option<String>,
}

impl Event {
    pub fn gap(start: u64, end: u64, all_zero: bool, at_eof: bool) -> Event {
        Event {
            kind: EventKind::for_gap(all_zero, at_eof),
            offset: start,
            end: Some(end),
            declared: None,
            consumed: None,
            reason: None,
        }
    }

    fn at(kind: EventKind, offset: u64) -> Event {
        Event {
            kind,
            offset,
            end: None,
            declared: None,
            consumed: None,
            reason: None,
        }
    }
}

/// A gap still open when the shard ended: it began at `start`, covers bytes up to `through`
/// (where the next shard takes over) and is all raw zeros so far iff `all_zero`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pending {
    pub start: u64,
    pub through: u64,
    pub all_zero: bool,
}

#[derive(Clone, Debug)]
pub struct ShardScan {
    pub start: u64,
    pub bound: u64,
    pub file_len: u64,
    pub records: RecordColumns,
    /// Events closed inside this shard, in offset order (the leading gap excluded).
    pub events: Vec<Event>,
    /// The gap from `start` to the first candidate, if one was found after `start`:
    /// (end, all_zero). Its classification depends on the previous shard.
    pub leading_gap: Option<(u64, bool)>,
    /// True when the shard found no candidate at all (its whole range is `pending`).
    pub empty: bool,
    pub pending: Pending,
    pub bytes_read: u64,
}

/// A record start claimed by another index (e.g. Bitcoin Core's `blocks/index`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHint {
    pub magic_offset: u64,
    pub hash: [u8; 32],
}

/// A hint the bytes do not confirm, with the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HintMiss {
    pub magic_offset: u64,
    pub hash: [u8; 32],
    pub reason: String,
}

#[derive(Clone, Debug, Default)]
pub struct HintReport {
    pub verified: u64,
    pub misses: Vec<HintMiss>,
    /// Bytes the magic search covered (gaps between hinted records, and the tail).
    pub searched_bytes: u64,
}

impl HintReport {
    fn miss(&mut self, hint: &RecordHint, reason: String) {
        self.misses.push(HintMiss {
            magic_offset: hint.magic_offset,
            hash: hint.hash,
            reason,
        });
    }
}

fn passed_over(last_record: Option<u64>, pos: u64) -> String {
    match last_record {
        Some(r) => format!("not a record start: inside the record at offset {r} (ends at {pos})"),
        None => "not a record start in a sequential scan".into(),
    }
}

/// Why a candidate at a hinted offset does not confirm the hint (None: it does).
fn hint_verdict(outcome: &Candidate, hint: &RecordHint) -> Option<String> {
    match outcome {
        Candidate::NoRecord => Some("record header runs past the end of the file".into()),
        Candidate::Rejected(ev) => Some(match ev.declared {
            Some(size) => format!("{}: size field {size}", ev.kind.name()),
            None => ev.kind.name().to_string(),
        }),
        Candidate::Record { record, .. } => {
            if record.hash != hint.hash {
                let mut got = String::new();
                crate::datasets::hex::display_hex_into(&record.hash, &mut got);
                Some(format!("different block: the file holds {got}"))
            } else if record.status != RecordStatus::Ok {
                Some(format!(
                    "record is {}: {}",
                    record.status.name(),
                    record.reason.as_deref().unwrap_or("")
                ))
            } else {
                None
            }
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub struct ScanConfig {
    pub network: Network,
    pub xor_key: [u8; 8],
    pub check_bodies: bool,
}

/// Positioned reads into one buffer, de-obfuscated by absolute offset; counts bytes read.
struct BlkReader {
    file: File,
    len: u64,
    /// Streaming reads stop here (the shard's bound plus room for one record prefix), so a
    /// shard does not read its neighbour's bytes unless a record really extends into them.
    stream_end: u64,
    stream_len: usize,
    key: [u8; 8],
    key_is_zero: bool,
    buf_pos: u64,
    raw: Vec<u8>,
    dec: Vec<u8>,
    bytes_read: u64,
}

impl BlkReader {
    fn open(path: &Path, key: [u8; 8]) -> io::Result<BlkReader> {
        let file = File::open(path)?;
        let len = file.metadata()?.len();
        Ok(BlkReader {
            file,
            len,
            stream_end: len,
            stream_len: STREAM_START / 2,
            key,
            key_is_zero: key == [0u8; 8],
            buf_pos: 0,
            raw: Vec::new(),
            dec: Vec::new(),
            bytes_read: 0,
        })
    }

    fn buf_end(&self) -> u64 {
        self.buf_pos + self.raw.len() as u64
    }

    /// Makes `[pos, min(pos + n, len))` available; streams when the access is near sequential.
    /// Called several times per record: the buffer hit is inlined, the refill is not.
    #[inline]
    fn ensure(&mut self, pos: u64, n: usize) -> io::Result<()> {
        let want_end = (pos + n as u64).min(self.len);
        if pos >= self.buf_pos && want_end <= self.buf_end() {
            return Ok(());
        }
        self.refill(pos, n)
    }

    #[inline(never)]
    fn refill(&mut self, pos: u64, n: usize) -> io::Result<()> {
        let sequential = pos >= self.buf_pos && pos <= self.buf_end() + SEQUENTIAL_GAP;
        // Streaming reads start small and double while access stays sequential, so a search
        // for the next record near a shard start does not pull in a whole chunk.
        self.stream_len = if sequential {
            (self.stream_len * 2).clamp(STREAM_START, STREAM_CHUNK)
        } else {
            STREAM_START / 2
        };
        let chunk = if sequential {
            (self.stream_len as u64).min(self.stream_end.saturating_sub(pos)) as usize
        } else {
            SMALL_READ
        };
        let read_len = (n.max(chunk) as u64).min(self.len.saturating_sub(pos)) as usize;
        self.raw.resize(read_len, 0);
        self.file.read_exact_at(&mut self.raw, pos)?;
        self.bytes_read += read_len as u64;
        self.buf_pos = pos;
        if !self.key_is_zero {
            self.dec.resize(read_len, 0);
            xor_decode(&self.raw, &mut self.dec, self.key, pos);
        }
        Ok(())
    }

    fn dec(&self, pos: u64, n: usize) -> &[u8] {
        let s = (pos - self.buf_pos) as usize;
        let e = (s + n).min(self.raw.len());
        if self.key_is_zero {
            &self.raw[s..e]
        } else {
            &self.dec[s..e]
        }
    }

    fn raw(&self, pos: u64, n: usize) -> &[u8] {
        let s = (pos - self.buf_pos) as usize;
        let e = (s + n).min(self.raw.len());
        &self.raw[s..e]
    }
}

enum Candidate {
    /// Not a record start after all (e.g. too close to the end of the file): keep searching.
    NoRecord,
    Rejected(Event),
    Record {
        record: Record,
        events: Vec<Event>,
        resume: u64,
    },
}

pub struct Scanner<'a> {
    cfg: &'a ScanConfig,
    pow: PowChecker,
    magic: [u8; 4],
    reader: BlkReader,
}

impl<'a> Scanner<'a> {
    pub fn open(cfg: &'a ScanConfig, path: &Path) -> io::Result<Scanner<'a>> {
        Ok(Scanner {
            cfg,
            pow: PowChecker::new(cfg.network.pow_limit()),
            magic: cfg.network.magic(),
            reader: BlkReader::open(path, cfg.xor_key)?,
        })
    }

    pub fn file_len(&self) -> u64 {
        self.reader.len
    }

    /// Scans record starts in `[start, bound)` (bound clamped to the file length).
    pub fn scan(&mut self, start: u64, bound: u64) -> io::Result<ShardScan> {
        Ok(self.scan_with_hints(start, bound, &[])?.0)
    }

    /// Like `scan`, guided by record starts another index claims (sorted by offset). The result
    /// is exactly `scan`'s: the magic search only stops at each hinted offset and tries it
    /// first, so gaps are still searched and classified. Each hint is checked against the
    /// bytes (magic, size, proof of work, hash) and any disagreement is returned.
    pub fn scan_with_hints(
        &mut self,
        start: u64,
        bound: u64,
        hints: &[RecordHint],
    ) -> io::Result<(ShardScan, HintReport)> {
        let mut report = HintReport::default();
        // Hints before `start` belong to an earlier range (a resumed or rescanned shard).
        let hints = &hints[hints.partition_point(|x| x.magic_offset < start)..];
        let mut h = 0;
        let len = self.reader.len;
        let bound = bound.min(len);
        self.reader.stream_end = (bound + SMALL_READ as u64).min(len);
        let mut out = ShardScan {
            start,
            bound,
            file_len: len,
            records: RecordColumns::default(),
            events: Vec::new(),
            leading_gap: None,
            empty: true,
            pending: Pending {
                start,
                through: start,
                all_zero: true,
            },
            bytes_read: 0,
        };
        let mut pos = start;
        let mut gap_start = start;
        let mut gap_zero = true;
        let mut last_record: Option<u64> = None;
        while pos < bound {
            while h < hints.len() && hints[h].magic_offset < pos {
                report.miss(&hints[h], passed_over(last_record, pos));
                h += 1;
            }
            let search_end = hints.get(h).map_or(bound, |x| x.magic_offset.min(bound));
            // Records usually follow one another: the magic is right here, which is what the
            // search below would find first (an empty, all-zero gap).
            let (found, zero) = if pos < search_end && self.is_magic_at(pos)? {
                (Some(pos), true)
            } else {
                self.find_magic(pos, search_end)?
            };
            report.searched_bytes += found.unwrap_or(search_end) - pos;
            gap_zero &= zero;
            let c = match found {
                Some(c) => c,
                None if search_end < bound => {
                    // At the hinted offset: the same test the magic search would make there.
                    if !self.is_magic_at(search_end)? {
                        report.miss(&hints[h], "no magic at the indexed position".into());
                        h += 1;
                        pos = search_end;
                        continue;
                    }
                    search_end
                }
                None => {
                    pos = bound;
                    break;
                }
            };
            let outcome = self.candidate(c)?;
            let hinted = hints.get(h).filter(|x| x.magic_offset == c);
            if let Some(hint) = hinted {
                h += 1;
                match hint_verdict(&outcome, hint) {
                    None => report.verified += 1,
                    Some(reason) => report.miss(hint, reason),
                }
            }
            if let Candidate::NoRecord = outcome {
                // Byte c belongs to the gap; it is not raw zero (find_magic checks that).
                gap_zero = false;
                pos = c + 1;
                continue;
            }
            if let Candidate::Record { .. } = outcome {
                last_record = Some(c);
            }
            // The gap [gap_start, c) is closed by this candidate.
            if out.empty {
                if c > gap_start {
                    out.leading_gap = Some((c, gap_zero));
                }
                out.empty = false;
            } else if c > gap_start {
                out.events.push(Event::gap(gap_start, c, gap_zero, false));
            }
            let resume = match outcome {
                Candidate::Rejected(ev) => {
                    out.events.push(ev);
                    c + 1
                }
                Candidate::Record {
                    record,
                    events,
                    resume,
                } => {
                    if out.records.len() == out.records.capacity() && !out.records.is_empty() {
                        // Size the columns for the rest of the shard from the record density
                        // so far, so they are not copied by doubling reallocs.
                        let rows = out.records.len() as u64 + 1;
                        let per_row = ((resume - start) / rows).max(PREFIX_LEN + HEADER_LEN as u64);
                        let left = bound.saturating_sub(resume) / per_row;
                        let want = rows + left + left / 8 + FIRST_ROWS as u64;
                        out.records.reserve_rows(want as usize);
                    }
                    out.records.push(record);
                    if !events.is_empty() {
                        out.events.extend(events);
                    }
                    resume
                }
                Candidate::NoRecord => unreachable!(),
            };
            pos = resume;
            gap_start = resume;
            gap_zero = true;
        }
        out.pending = Pending {
            start: gap_start,
            through: pos.max(bound),
            all_zero: gap_zero,
        };
        out.bytes_read = self.reader.bytes_read;
        for hint in &hints[h..] {
            let reason = if hint.magic_offset + PREFIX_LEN > len {
                format!("offset past the end of the file ({len} bytes)")
            } else if hint.magic_offset < bound {
                passed_over(last_record, pos)
            } else {
                continue; // Beyond this shard: its own shard checks it.
            };
            report.miss(hint, reason);
        }
        Ok((out, report))
    }

    /// Next position in `[pos, bound)` whose decoded bytes start with the magic and whose four
    /// raw bytes are not zeros; also whether every raw byte passed over was zero.
    fn find_magic(&mut self, mut pos: u64, bound: u64) -> io::Result<(Option<u64>, bool)> {
        let mut all_zero = true;
        while pos < bound {
            self.reader.ensure(pos, 1)?;
            let avail = (self.reader.buf_end().min(bound) - pos) as usize;
            match memchr::memchr(self.magic[0], self.reader.dec(pos, avail)) {
                None => {
                    all_zero &= is_zero(self.reader.raw(pos, avail));
                    pos += avail as u64;
                }
                Some(j) => {
                    all_zero &= is_zero(self.reader.raw(pos, j));
                    let c = pos + j as u64;
                    if self.is_magic_at(c)? {
                        return Ok((Some(c), all_zero));
                    }
                    self.reader.ensure(c, 1)?;
                    all_zero &= self.reader.raw(c, 1)[0] == 0;
                    pos = c + 1;
                }
            }
        }
        Ok((None, all_zero))
    }

    fn is_magic_at(&mut self, c: u64) -> io::Result<bool> {
        if c + 4 > self.reader.len {
            return Ok(false);
        }
        self.reader.ensure(c, 4)?;
        Ok(self.reader.dec(c, 4) == self.magic && self.reader.raw(c, 4) != [0u8; 4])
    }

    /// Whether the bytes at `next` confirm a record ending there.
    fn framing_confirmed(&mut self, next: u64) -> io::Result<bool> {
        let len = self.reader.len;
        if next == len {
            return Ok(true);
        }
        if next > len {
            return Ok(false);
        }
        self.reader.ensure(next, SMALL_READ)?;
        let n = 4.min((len - next) as usize);
        if n == 4 && self.reader.dec(next, 4) == self.magic && !is_zero(self.reader.raw(next, 4)) {
            return Ok(true);
        }
        // Raw zeros (a preallocated tail or a crash gap) long enough that no header has them.
        let z = ZERO_CONFIRM.min((len - next) as usize);
        Ok(is_zero(self.reader.raw(next, z)))
    }

    fn candidate(&mut self, c: u64) -> io::Result<Candidate> {
        let len = self.reader.len;
        if c + PREFIX_LEN + HEADER_LEN as u64 > len {
            return Ok(Candidate::NoRecord);
        }
        self.reader.ensure(c, SMALL_READ)?;
        let size = u32::from_le_bytes(self.reader.dec(c + 4, 4).try_into().unwrap());
        if !(MIN_RECORD_SIZE..=MAX_RECORD_SIZE).contains(&size) {
            let mut ev = Event::at(EventKind::BadSizeField, c);
            ev.declared = Some(size as u64);
            return Ok(Candidate::Rejected(ev));
        }
        let data_pos = c + PREFIX_LEN;
        let header: [u8; HEADER_LEN] = self.reader.dec(data_pos, HEADER_LEN).try_into().unwrap();
        let mut count_bytes = [0u8; 9];
        let count_src = self.reader.dec(
            data_pos + HEADER_LEN as u64,
            9.min(size as usize - HEADER_LEN),
        );
        let count_len = count_src.len();
        count_bytes[..count_len].copy_from_slice(count_src);
        let hash = sha256d(&header);
        let bits = u32::from_le_bytes(header[72..76].try_into().unwrap());
        let pow = self.pow.check(&hash, bits);
        let next = data_pos + size as u64;
        let confirmed = self.framing_confirmed(next)?;
        let mut record = Record {
            magic_offset: c,
            declared_size: size,
            consumed: None,
            status: RecordStatus::Ok,
            reason: None,
            hash,
            header,
            n_tx: None,
            body_checked: false,
        };
        if let Err(e) = pow {
            if !confirmed {
                return Ok(Candidate::Rejected(Event::at(
                    EventKind::MagicWithoutValidHeader,
                    c,
                )));
            }
            record.status = RecordStatus::InvalidHeader;
            record.reason = Some(e.reason().to_string());
            return Ok(Candidate::Record {
                record,
                events: Vec::new(),
                resume: next,
            });
        }
        let mut events = Vec::new();
        let after_header = data_pos + HEADER_LEN as u64;
        if self.cfg.check_bodies || !confirmed {
            let avail = (size as u64).min(len - data_pos) as usize;
            self.reader.ensure(data_pos, avail)?;
            let mode = if self.cfg.check_bodies {
                BodyMode::Check
            } else {
                BodyMode::FrameOnly
            };
            match parse_block(self.reader.dec(data_pos, avail), mode) {
                Ok(body) => {
                    record.consumed = Some(body.consumed as u32);
                    record.n_tx = Some(body.n_tx);
                    record.body_checked = self.cfg.check_bodies;
                    if body.consumed != size as usize {
                        let mut ev = Event::at(EventKind::SizeMismatch, c);
                        ev.declared = Some(size as u64);
                        ev.consumed = Some(body.consumed as u64);
                        events.push(ev);
                    }
                    if let Some(reason) = body.invalid {
                        record.status = RecordStatus::InvalidBody;
                        record.reason = Some(reason.to_string());
                    }
                    let resume = data_pos + body.consumed as u64;
                    return Ok(Candidate::Record {
                        record,
                        events,
                        resume,
                    });
                }
                Err(e) => return Ok(body_error(record, e.to_string(), after_header)),
            }
        }
        match read_compact_size(&count_bytes[..count_len]) {
            Ok((n, _)) => {
                record.n_tx = Some(n);
                record.consumed = Some(size);
                Ok(Candidate::Record {
                    record,
                    events,
                    resume: next,
                })
            }
            Err(e) => Ok(body_error(record, e.to_string(), after_header)),
        }
    }
}

/// De-obfuscates `raw` (which starts at absolute file offset `pos`) eight bytes at a time, with
/// the key rotated to the chunk's phase (Core's approach since PR #31144).
pub(crate) fn xor_decode(raw: &[u8], dec: &mut [u8], key: [u8; 8], pos: u64) {
    let (rotated, word) = rotated_key(key, pos);
    let mut raw_chunks = raw.chunks_exact(8);
    let mut dec_chunks = dec.chunks_exact_mut(8);
    for (r, d) in (&mut raw_chunks).zip(&mut dec_chunks) {
        let v = u64::from_ne_bytes(r.try_into().unwrap()) ^ word;
        d.copy_from_slice(&v.to_ne_bytes());
    }
    for (i, (r, d)) in raw_chunks
        .remainder()
        .iter()
        .zip(dec_chunks.into_remainder())
        .enumerate()
    {
        *d = r ^ rotated[i];
    }
}

/// `xor_decode` of `buf` into itself: a reader's buffer is de-obfuscated where it was read,
/// not copied into a new allocation each time.
pub(crate) fn xor_in_place(buf: &mut [u8], key: [u8; 8], pos: u64) {
    let (rotated, word) = rotated_key(key, pos);
    let mut chunks = buf.chunks_exact_mut(8);
    for c in &mut chunks {
        let v = u64::from_ne_bytes((&*c).try_into().unwrap()) ^ word;
        c.copy_from_slice(&v.to_ne_bytes());
    }
    for (i, b) in chunks.into_remainder().iter_mut().enumerate() {
        *b ^= rotated[i];
    }
}

/// The key rotated to the phase of absolute offset `pos`, as bytes and as a native word.
fn rotated_key(key: [u8; 8], pos: u64) -> ([u8; 8], u64) {
    let phase = (pos % 8) as usize;
    let mut rotated = [0u8; 8];
    for (i, b) in rotated.iter_mut().enumerate() {
        *b = key[(phase + i) & 7];
    }
    (rotated, u64::from_ne_bytes(rotated))
}

/// Word-wide: a preallocated zero tail is megabytes long and every byte of it is tested.
fn is_zero(b: &[u8]) -> bool {
    let mut blocks = b.chunks_exact(64);
    for block in &mut blocks {
        let any = block.chunks_exact(8).fold(0u64, |acc, w| {
            acc | u64::from_ne_bytes(w.try_into().unwrap())
        });
        if any != 0 {
            return false;
        }
    }
    blocks.remainder().iter().all(|&x| x == 0)
}

fn body_error(mut record: Record, reason: String, resume: u64) -> Candidate {
    let mut ev = Event::at(EventKind::BodyError, record.magic_offset);
    ev.reason = Some(reason.clone());
    record.status = RecordStatus::BodyError;
    record.reason = Some(reason);
    Candidate::Record {
        record,
        events: vec![ev],
        resume,
    }
}

/// Decodes `xor.dat` content: missing → zero key; shorter than 8 → error; longer → first 8.
pub fn xor_key_from_bytes(b: Option<&[u8]>) -> Result<([u8; 8], Option<String>), String> {
    match b {
        None => Ok((
            [0u8; 8],
            Some("xor.dat missing: reading with the all-zero key".into()),
        )),
        Some(b) if b.len() < 8 => Err(format!(
            "xor.dat holds {} bytes; Bitcoin Core writes exactly 8",
            b.len()
        )),
        Some(b) => Ok((
            b[..8].try_into().unwrap(),
            (b.len() > 8).then(|| format!("xor.dat holds {} bytes; using the first 8", b.len())),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xor_in_place_matches_xor_decode_at_every_phase() {
        let key = [0xe5, 0x52, 0x64, 0xec, 0x26, 0x74, 0x14, 0xf8];
        let raw: Vec<u8> = (0..77u8).map(|i| i.wrapping_mul(29)).collect();
        for pos in 0..16u64 {
            for len in [0, 1, 7, 8, 9, 64, 77] {
                let mut want = vec![0u8; len];
                xor_decode(&raw[..len], &mut want, key, pos);
                let mut got = raw[..len].to_vec();
                xor_in_place(&mut got, key, pos);
                assert_eq!(got, want, "pos {pos} len {len}");
            }
        }
    }
    use std::io::Write;

    #[test]
    fn xor_vectors_from_spec() {
        // Key a1b2c3d4e5f60718: magic f9beb4d9 stored at offsets 0, 3, 8, 13.
        let key = [0xa1, 0xb2, 0xc3, 0xd4, 0xe5, 0xf6, 0x07, 0x18];
        let magic = [0xf9u8, 0xbe, 0xb4, 0xd9];
        let mut file = [0u8; 24];
        let want = [
            (0usize, "580c770d"),
            (3, "2d5b42de"),
            (8, "580c770d"),
            (13, "0fb9ac78"),
        ];
        for (off, hex) in want {
            let stored: Vec<u8> = (0..4).map(|i| magic[i] ^ key[(off + i) % 8]).collect();
            let s = crate::datasets::hex::to_hex(&stored);
            assert_eq!(s, hex);
            file[off..off + 4].copy_from_slice(&stored);
        }
        // The reader decodes chunks that start at offsets not divisible by 8.
        let dir = std::env::temp_dir().join(format!("rechain-xor-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x.dat");
        std::fs::File::create(&path)
            .unwrap()
            .write_all(&file[..17])
            .unwrap();
        let mut r = BlkReader::open(&path, key).unwrap();
        for off in [3u64, 13] {
            r.raw.clear();
            r.ensure(off, 4).unwrap();
            assert_eq!(r.dec(off, 4), magic);
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn xor_dat_rules() {
        assert_eq!(xor_key_from_bytes(None).unwrap().0, [0u8; 8]);
        assert!(xor_key_from_bytes(Some(&[1, 2, 3])).is_err());
        let (k, warn) = xor_key_from_bytes(Some(&[1, 2, 3, 4, 5, 6, 7, 8, 9])).unwrap();
        assert_eq!(k, [1, 2, 3, 4, 5, 6, 7, 8]);
        assert!(warn.is_some());
    }
}
