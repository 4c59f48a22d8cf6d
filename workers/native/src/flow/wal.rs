//! LedgerWAL segment framing (spec §2; `onflow/wal` `wal/wal.go`, `wal/reader.go`).
//!
//! A segment is a run of 32 KiB pages. A page holds fragments back to back, then zero padding:
//!
//! ```text
//! fragment: | type+flags u8 | length u16 BE | CRC-32C(payload) u32 BE | payload[length] |
//!   type (bits 0-2): 0 page padding follows, 1 Full, 2 First, 3 Middle, 4 Last
//!   bit 3: snappy (the concatenated payload is one snappy block); length <= 32 761
//! ```
//!
//! Reading follows `Reader.next` byte for byte, one segment at a time:
//! * a segment whose size is not a page multiple reads as if zero-padded to the next page
//!   (`segmentBufReader.Read`), so a cut inside a fragment shows as a checksum mismatch;
//! * a type-0 byte must be followed by zeros up to the page boundary;
//! * length > 32 761, CRC mismatch, type 5..7 and out-of-sequence fragments are errors, checked
//!   in flow-go's order (length, CRC, sequence);
//! * the segment ending while a record is open (First/Middle read) is [`ErrorKind::TornRecord`].
//!
//! flow-go streams all segments as one byte stream; records never span segments in its writer, so
//! reading per segment (needed to decode segments in parallel) only differs for files no writer
//! produces: a fragment crossing the segment end is reported ([`ErrorKind::FragmentPastSegmentEnd`])
//! instead of being continued in the next segment.

use super::{ErrorKind, FlowError};
use std::borrow::Cow;
use std::path::{Path as FsPath, PathBuf};

pub const PAGE_SIZE: usize = 32 * 1024;
pub const HEADER_SIZE: usize = 7;
/// Largest fragment payload: a page minus one header.
pub const MAX_FRAGMENT: usize = PAGE_SIZE - HEADER_SIZE;
/// flow-go's segment size (`wal.SegmentSize`).
pub const DEFAULT_SEGMENT_SIZE: usize = 32 * 1024 * 1024;

const TYPE_MASK: u8 = 0x07;
const SNAPPY_MASK: u8 = 0x08;

/// Fragment types (`recType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FragmentType {
    PageTerm = 0,
    Full = 1,
    First = 2,
    Middle = 3,
    Last = 4,
}

/// CRC-32C (Castagnoli), as `crc32.Checksum(b, castagnoliTable)`.
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

/// One segment: its bytes in memory (zero-padded to a whole number of pages), or its file,
/// read through a bounded window as records are taken (a replay then holds about a megabyte of
/// the segment, not all 32 MiB of it).
pub struct Segment {
    pub number: u64,
    /// Size of the file on disk (before padding).
    pub file_len: u64,
    body: Body,
}

enum Body {
    Bytes(Vec<u8>),
    File { path: PathBuf, window: usize },
}

/// Bytes a streamed reader holds ahead of its position (whole pages).
const STREAM_WINDOW: usize = 32 * PAGE_SIZE;

impl Segment {
    /// Takes a segment's raw bytes (any length) and pads them.
    pub fn from_bytes(number: u64, mut bytes: Vec<u8>) -> Segment {
        let file_len = bytes.len() as u64;
        let padded = bytes.len().div_ceil(PAGE_SIZE) * PAGE_SIZE;
        bytes.resize(padded, 0);
        Segment {
            number,
            file_len,
            body: Body::Bytes(bytes),
        }
    }

    /// Reads a whole segment file into memory.
    pub fn read(path: &FsPath, number: u64) -> Result<Segment, FlowError> {
        let bytes = std::fs::read(path).map_err(|e| FlowError::io(number, "read segment", &e))?;
        Ok(Segment::from_bytes(number, bytes))
    }

    /// A segment file to be streamed by its reader; only its size is read here.
    pub fn open(path: &FsPath, number: u64) -> Result<Segment, FlowError> {
        Segment::open_with_window(path, number, STREAM_WINDOW)
    }

    /// As [`Segment::open`], holding `window` bytes (at least a page) ahead while reading.
    pub fn open_with_window(
        path: &FsPath,
        number: u64,
        window: usize,
    ) -> Result<Segment, FlowError> {
        let meta =
            std::fs::metadata(path).map_err(|e| FlowError::io(number, "read segment", &e))?;
        Ok(Segment {
            number,
            file_len: meta.len(),
            body: Body::File {
                path: path.to_path_buf(),
                window: window.max(PAGE_SIZE),
            },
        })
    }

    pub fn reader(&self) -> SegmentReader<'_> {
        let (data, stream) = match &self.body {
            Body::Bytes(b) => (b.as_slice(), None),
            Body::File { path, window } => {
                let stream = Stream::new(path, self.file_len as usize, *window);
                (&[][..], Some(stream))
            }
        };
        SegmentReader {
            segment: self.number,
            data,
            stream,
            pos: 0,
            done: false,
        }
    }
}

/// The window of a streamed segment: bytes `[start, start + window.len())` of the segment as
/// if zero-padded to whole pages (a file that shrank while being read reads as zeros).
struct Stream {
    file: Result<std::fs::File, std::io::Error>,
    padded_len: usize,
    window_len: usize,
    window: Vec<u8>,
    start: usize,
    file_end: bool,
}

impl Stream {
    fn new(path: &FsPath, file_len: usize, window_len: usize) -> Stream {
        Stream {
            file: std::fs::File::open(path),
            padded_len: file_len.div_ceil(PAGE_SIZE) * PAGE_SIZE,
            window_len,
            window: Vec::new(),
            start: 0,
            file_end: false,
        }
    }

    /// Makes the window cover `[at, at + PAGE_SIZE)` (clamped to the padded length): one
    /// fragment with its header, or the rest of a page, never needs more.
    fn fill(&mut self, at: usize) -> std::io::Result<()> {
        use std::io::Read;
        let need = (at + PAGE_SIZE).min(self.padded_len);
        let end = self.start + self.window.len();
        if need <= end {
            return Ok(());
        }
        self.window.drain(..at.min(end) - self.start);
        self.start = at.min(end);
        let target = (at + self.window_len).min(self.padded_len);
        let mut have = self.start + self.window.len();
        self.window.resize(target - self.start, 0);
        let file = self
            .file
            .as_mut()
            .map_err(|e| std::io::Error::new(e.kind(), e.to_string()))?;
        while have < target && !self.file_end {
            match file.read(&mut self.window[have - self.start..]) {
                Ok(0) => self.file_end = true,
                Ok(n) => have += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        // Past the file's end the window keeps the zeros `resize` wrote.
        Ok(())
    }
}
/// A record reassembled from its fragments.
#[derive(Debug)]
pub struct RawRecord<'a> {
    /// Offset of the record's first fragment header inside the segment.
    pub offset: u64,
    pub fragments: u32,
    pub data: Cow<'a, [u8]>,
}

/// Iterates over the records of one segment. After an error it yields nothing more.
pub struct SegmentReader<'a> {
    segment: u64,
    /// The whole padded segment when it is in memory (empty when streamed).
    data: &'a [u8],
    stream: Option<Stream>,
    pos: usize,
    done: bool,
}

/// Ends reading with an error at `offset`.
fn fail(done: &mut bool, segment: u64, offset: usize, kind: ErrorKind) -> FlowError {
    *done = true;
    FlowError::new(segment, offset as u64, kind)
}

impl<'a> SegmentReader<'a> {
    /// Byte offset where reading stopped (the end of the last record returned, or of padding).
    pub fn position(&self) -> u64 {
        self.pos as u64
    }

    /// The next record, `Ok(None)` at the end of the segment.
    pub fn next_record(&mut self) -> Result<Option<RawRecord<'a>>, FlowError> {
        if self.done {
            return Ok(None);
        }
        let segment = self.segment;
        let data = self.data;
        let streamed = self.stream.is_some();
        let total = self.stream.as_ref().map_or(data.len(), |s| s.padded_len);
        let mut start: Option<usize> = None;
        let mut fragments = 0u32;
        let mut plain: Vec<u8> = Vec::new();
        let mut snappy: Vec<u8> = Vec::new();
        let mut single: Option<&'a [u8]> = None;
        loop {
            let at = self.pos;
            if at >= total {
                if let Some(s) = start {
                    return Err(fail(&mut self.done, segment, s, ErrorKind::TornRecord));
                }
                self.done = true;
                return Ok(None);
            }
            // `view[i - base]` is byte `i` of the padded segment, for i in [at, at + PAGE_SIZE).
            let (view, base): (&[u8], usize) = match &mut self.stream {
                None => (data, 0),
                Some(s) => {
                    if let Err(e) = s.fill(at) {
                        self.done = true;
                        return Err(FlowError::io(segment, "read segment", &e));
                    }
                    (&s.window, s.start)
                }
            };
            let head = view[at - base];
            let typ = head & TYPE_MASK;
            if typ == FragmentType::PageTerm as u8 {
                // The rest of the page must be zeros.
                let page_end = (at / PAGE_SIZE + 1) * PAGE_SIZE;
                let rest = &view[at + 1 - base..page_end - base];
                if let Some(i) = rest.iter().position(|&c| c != 0) {
                    let kind = ErrorKind::NonZeroPadding;
                    return Err(fail(&mut self.done, segment, at + 1 + i, kind));
                }
                self.pos = page_end;
                continue;
            }
            if at + HEADER_SIZE > total {
                let kind = ErrorKind::FragmentPastSegmentEnd;
                return Err(fail(&mut self.done, segment, at, kind));
            }
            let h = &view[at - base..at - base + HEADER_SIZE];
            let len = u16::from_be_bytes([h[1], h[2]]);
            let stored = u32::from_be_bytes([h[3], h[4], h[5], h[6]]);
            if len as usize > MAX_FRAGMENT {
                let kind = ErrorKind::FragmentTooLong { len };
                return Err(fail(&mut self.done, segment, at, kind));
            }
            let body_start = at + HEADER_SIZE;
            let body_end = body_start + len as usize;
            if body_end > total {
                let kind = ErrorKind::FragmentPastSegmentEnd;
                return Err(fail(&mut self.done, segment, at, kind));
            }
            let body = &view[body_start - base..body_end - base];
            let computed = crc32c(body);
            if computed != stored {
                let kind = ErrorKind::Checksum { stored, computed };
                return Err(fail(&mut self.done, segment, at, kind));
            }
            let pending = start.is_some();
            let in_sequence = match typ {
                1 | 2 => !pending,
                3 | 4 => pending,
                _ => {
                    let kind = ErrorKind::UnknownFragmentType { typ };
                    return Err(fail(&mut self.done, segment, at, kind));
                }
            };
            if !in_sequence {
                let kind = ErrorKind::UnexpectedFragment { typ, pending };
                return Err(fail(&mut self.done, segment, at, kind));
            }
            let compressed = head & SNAPPY_MASK != 0;
            self.pos = body_end;
            fragments += 1;
            if typ == FragmentType::Full as u8 && !compressed && !streamed {
                single = Some(&data[body_start..body_end]);
            } else if compressed {
                snappy.extend_from_slice(body);
            } else {
                plain.extend_from_slice(body);
            }
            if start.is_none() {
                start = Some(at);
            }
            if typ == FragmentType::Full as u8 || typ == FragmentType::Last as u8 {
                let offset = start.unwrap_or(at);
                // As `Reader.next`: the last fragment's flag decides whether the snappy
                // buffer replaces the plain one.
                let data = if compressed && !snappy.is_empty() {
                    match snappy_decode(&snappy) {
                        Ok(d) => Cow::Owned(d),
                        Err(reason) => {
                            let kind = ErrorKind::Snappy { reason };
                            return Err(fail(&mut self.done, segment, offset, kind));
                        }
                    }
                } else if let Some(b) = single {
                    Cow::Borrowed(b)
                } else {
                    Cow::Owned(plain)
                };
                return Ok(Some(RawRecord {
                    offset: offset as u64,
                    fragments,
                    data,
                }));
            }
        }
    }
}

/// Decodes one snappy block (the format `golang/snappy.Decode` reads). The declared length is
/// bounded by what the input could possibly expand to, so the allocation is capped.
pub fn snappy_decode(src: &[u8]) -> Result<Vec<u8>, &'static str> {
    let mut pos = 0usize;
    let mut declared: u64 = 0;
    let mut shift = 0u32;
    loop {
        let b = *src.get(pos).ok_or("truncated length")?;
        pos += 1;
        if shift > 28 {
            return Err("length varint too long");
        }
        declared |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            break;
        }
        shift += 7;
    }
    // The densest element (a 3-byte copy) expands to 64 bytes.
    if declared > 0xffff_ffff || declared > (src.len() as u64) * 22 + 64 {
        return Err("declared length larger than the block can hold");
    }
    let declared = declared as usize;
    let mut out: Vec<u8> = Vec::with_capacity(declared);
    while pos < src.len() {
        let tag = src[pos];
        pos += 1;
        let (len, offset) = match tag & 3 {
            0 => {
                let mut n = (tag >> 2) as usize;
                if n >= 60 {
                    let extra = n - 59;
                    let bytes = src
                        .get(pos..pos + extra)
                        .ok_or("truncated literal length")?;
                    pos += extra;
                    n = bytes
                        .iter()
                        .rev()
                        .fold(0usize, |acc, &b| (acc << 8) | b as usize);
                }
                let n = n.checked_add(1).ok_or("literal length overflow")?;
                let lit = src
                    .get(pos..pos.checked_add(n).ok_or("literal overflow")?)
                    .ok_or("truncated literal")?;
                if out.len() + n > declared {
                    return Err("output longer than declared");
                }
                out.extend_from_slice(lit);
                pos += n;
                continue;
            }
            1 => {
                let b = *src.get(pos).ok_or("truncated copy")?;
                pos += 1;
                (
                    4 + ((tag >> 2) & 7) as usize,
                    (((tag >> 5) as usize) << 8) | b as usize,
                )
            }
            2 => {
                let b = src.get(pos..pos + 2).ok_or("truncated copy")?;
                pos += 2;
                (
                    1 + (tag >> 2) as usize,
                    u16::from_le_bytes([b[0], b[1]]) as usize,
                )
            }
            _ => {
                let b = src.get(pos..pos + 4).ok_or("truncated copy")?;
                pos += 4;
                (
                    1 + (tag >> 2) as usize,
                    u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize,
                )
            }
        };
        if offset == 0 || offset > out.len() {
            return Err("copy offset out of range");
        }
        if out.len() + len > declared {
            return Err("output longer than declared");
        }
        let from = out.len() - offset;
        for i in 0..len {
            let c = out[from + i];
            out.push(c);
        }
    }
    if out.len() != declared {
        return Err("output shorter than declared");
    }
    Ok(out)
}

/// Segment files in a directory, as `listSegments` finds them: every entry whose whole name
/// parses as a decimal integer (Go `strconv.Atoi`: optional sign, digits), sorted by number,
/// which must be consecutive.
pub fn list_segments(dir: &FsPath) -> Result<Vec<(u64, PathBuf)>, FlowError> {
    let rd = std::fs::read_dir(dir).map_err(|e| FlowError::io(0, "list WAL directory", &e))?;
    let mut out: Vec<(i64, PathBuf)> = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|e| FlowError::io(0, "list WAL directory", &e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(n) = atoi(name) {
            out.push((n, entry.path()));
        }
    }
    out.sort_by_key(|(n, _)| *n);
    for w in out.windows(2) {
        if w[0].0 + 1 != w[1].0 {
            return Err(FlowError::new(
                w[1].0.max(0) as u64,
                0,
                ErrorKind::SegmentGap {
                    before: w[0].0.max(0) as u64,
                    after: w[1].0.max(0) as u64,
                },
            ));
        }
    }
    Ok(out
        .into_iter()
        .filter(|(n, _)| *n >= 0)
        .map(|(n, p)| (n as u64, p))
        .collect())
}

/// Go's `strconv.Atoi` on a 64-bit platform.
fn atoi(s: &str) -> Option<i64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse::<i64>().ok()
}

/// File name of segment `n` (`%08d`).
pub fn segment_name(n: u64) -> String {
    format!("{n:08}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frag(typ: u8, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![typ];
        v.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        v.extend_from_slice(&crc32c(payload).to_be_bytes());
        v.extend_from_slice(payload);
        v
    }

    /// (offset, bytes) of each record read.
    type Records = Vec<(u64, Vec<u8>)>;

    fn read_all(seg: &Segment) -> (Records, Option<FlowError>, u64) {
        let mut r = seg.reader();
        let mut out = Vec::new();
        loop {
            match r.next_record() {
                Ok(Some(rec)) => out.push((rec.offset, rec.data.into_owned())),
                Ok(None) => return (out, None, r.position()),
                Err(e) => return (out, Some(e), r.position()),
            }
        }
    }

    /// Reads an in-memory segment, and checks that streaming its file (with the smallest and
    /// the default window) reads exactly the same records, error and end position.
    fn records(seg: &Segment) -> (Records, Option<FlowError>) {
        let (recs, err, end) = read_all(seg);
        let Body::Bytes(bytes) = &seg.body else {
            panic!("records() takes an in-memory segment")
        };
        let dir = std::env::temp_dir().join(format!(
            "rechain-wal-stream-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(segment_name(seg.number));
        std::fs::write(&path, &bytes[..seg.file_len as usize]).unwrap();
        for window in [PAGE_SIZE, STREAM_WINDOW] {
            let streamed = Segment::open_with_window(&path, seg.number, window).unwrap();
            let (s_recs, s_err, s_end) = read_all(&streamed);
            assert_eq!(s_recs, recs, "window {window}");
            assert_eq!(format!("{s_err:?}"), format!("{err:?}"), "window {window}");
            assert_eq!(s_end, end, "window {window}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
        (recs, err)
    }

    #[test]
    fn crc32c_check_value() {
        // Spec §0: CRC-32C of an empty v6 subtrie part body.
        let b = [0x21, 0x36, 0, 6, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(crc32c(&b), 0x80bd_a537);
        assert_eq!(crc32c(&[0xde, 0xad]), 0x23c8_d151);
    }

    /// Spec §6.4: `Log([de ad])`, then `Log(R)` with R[i] = i mod 256, 40 000 bytes.
    fn split_vector_bytes() -> (Vec<u8>, Vec<u8>) {
        let r: Vec<u8> = (0..40_000u32).map(|i| i as u8).collect();
        let mut seg = frag(1, &[0xde, 0xad]);
        seg.extend(frag(2, &r[..32_752]));
        assert_eq!(seg.len(), PAGE_SIZE);
        seg.extend(frag(4, &r[32_752..]));
        (seg, r)
    }

    #[test]
    fn split_record_vector_spec_6_4() {
        let (bytes, r) = split_vector_bytes();
        assert_eq!(
            &bytes[..9],
            &[0x01, 0x00, 0x02, 0x23, 0xc8, 0xd1, 0x51, 0xde, 0xad]
        );
        assert_eq!(&bytes[9..16], &[0x02, 0x7f, 0xf0, 0x5c, 0xf5, 0x79, 0xdc]);
        assert_eq!(
            &bytes[32_768..32_775],
            &[0x04, 0x1c, 0x50, 0x43, 0xf5, 0xd8, 0xa2]
        );
        assert_eq!(bytes.len(), 40_023);
        // Unpadded (as after the two Log calls) and padded (after Close) read the same.
        for len in [40_023usize, 65_536] {
            let mut b = bytes.clone();
            b.resize(len, 0);
            let seg = Segment::from_bytes(0, b);
            let (recs, err) = records(&seg);
            assert!(err.is_none(), "{err:?}");
            assert_eq!(recs.len(), 2);
            assert_eq!(recs[0], (0, vec![0xde, 0xad]));
            assert_eq!(recs[1].0, 9);
            assert_eq!(recs[1].1, r);
        }
    }

    #[test]
    fn empty_and_zero_segments_have_no_records() {
        for len in [0usize, 1, 100, PAGE_SIZE, 3 * PAGE_SIZE] {
            let (recs, err) = records(&Segment::from_bytes(0, vec![0; len]));
            assert!(recs.is_empty() && err.is_none());
        }
    }

    #[test]
    fn zero_length_record() {
        let seg = Segment::from_bytes(0, frag(1, &[]));
        let (recs, err) = records(&seg);
        assert!(err.is_none());
        assert_eq!(recs, vec![(0, vec![])]);
    }

    #[test]
    fn checksum_mismatch_names_offset() {
        let mut b = frag(1, b"first");
        let second = b.len();
        b.extend(frag(1, b"second"));
        b[second + 9] ^= 1;
        let (recs, err) = records(&Segment::from_bytes(5, b));
        assert_eq!(recs.len(), 1);
        let err = err.unwrap();
        assert_eq!((err.segment, err.offset), (5, second as u64));
        assert!(matches!(err.kind, ErrorKind::Checksum { .. }));
    }

    #[test]
    fn truncation_inside_fragment_is_a_checksum_error() {
        // As flow-go: the short file reads as zero-padded, so the cut fragment fails its CRC.
        let mut b = frag(1, b"first");
        b.extend(frag(1, &[7u8; 100]));
        b.truncate(b.len() - 30);
        let (recs, err) = records(&Segment::from_bytes(0, b));
        assert_eq!(recs.len(), 1);
        assert!(matches!(err.unwrap().kind, ErrorKind::Checksum { .. }));
    }

    #[test]
    fn torn_record_at_segment_end() {
        let (bytes, _) = split_vector_bytes();
        let seg = Segment::from_bytes(2, bytes[..PAGE_SIZE].to_vec());
        let (recs, err) = records(&seg);
        assert_eq!(recs.len(), 1);
        let err = err.unwrap();
        assert_eq!(err.kind, ErrorKind::TornRecord);
        assert_eq!((err.segment, err.offset), (2, 9));
    }

    #[test]
    fn bad_sequences_and_types() {
        let cases: Vec<(Vec<u8>, ErrorKind)> = vec![
            (
                frag(3, b"x"),
                ErrorKind::UnexpectedFragment {
                    typ: 3,
                    pending: false,
                },
            ),
            (
                frag(4, b"x"),
                ErrorKind::UnexpectedFragment {
                    typ: 4,
                    pending: false,
                },
            ),
            (
                [frag(2, b"x"), frag(1, b"y")].concat(),
                ErrorKind::UnexpectedFragment {
                    typ: 1,
                    pending: true,
                },
            ),
            (
                [frag(2, b"x"), frag(2, b"y")].concat(),
                ErrorKind::UnexpectedFragment {
                    typ: 2,
                    pending: true,
                },
            ),
            (frag(5, b"x"), ErrorKind::UnknownFragmentType { typ: 5 }),
            (frag(7, b"x"), ErrorKind::UnknownFragmentType { typ: 7 }),
        ];
        for (bytes, want) in cases {
            let (_, err) = records(&Segment::from_bytes(0, bytes));
            assert_eq!(err.unwrap().kind, want);
        }
    }

    #[test]
    fn oversized_fragment_length() {
        let mut b = frag(1, b"abc");
        b[1..3].copy_from_slice(&(MAX_FRAGMENT as u16 + 1).to_be_bytes());
        let (_, err) = records(&Segment::from_bytes(0, b));
        assert_eq!(
            err.unwrap().kind,
            ErrorKind::FragmentTooLong {
                len: MAX_FRAGMENT as u16 + 1
            }
        );
    }

    #[test]
    fn non_zero_padding() {
        let mut b = frag(1, b"abc");
        b.push(0);
        b.push(0);
        b.push(9);
        let (recs, err) = records(&Segment::from_bytes(0, b));
        assert_eq!(recs.len(), 1);
        let err = err.unwrap();
        assert_eq!(err.kind, ErrorKind::NonZeroPadding);
        assert_eq!(err.offset, 12);
    }

    #[test]
    fn header_at_page_end_runs_past_segment() {
        // A header whose payload would cross the end of the padded segment.
        let mut b = vec![0u8; PAGE_SIZE - 7];
        // Make the first page a valid sequence: one full record filling up to PAGE_SIZE - 7.
        let rec = frag(1, &vec![1u8; PAGE_SIZE - 14]);
        b[..rec.len()].copy_from_slice(&rec);
        b.extend([1u8, 0, 10, 0, 0, 0, 0]);
        let (recs, err) = records(&Segment::from_bytes(0, b));
        assert_eq!(recs.len(), 1);
        assert_eq!(err.unwrap().kind, ErrorKind::FragmentPastSegmentEnd);
    }

    #[test]
    fn hostile_bytes_never_panic() {
        // Deterministic pseudo-random garbage, and every truncation of a valid segment.
        let mut x = 0x1234_5678_9abc_def0u64;
        for _ in 0..200 {
            let mut b = vec![0u8; 3000];
            for c in b.iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *c = x as u8;
            }
            let _ = records(&Segment::from_bytes(0, b));
        }
        let (bytes, _) = split_vector_bytes();
        for cut in (0..bytes.len()).step_by(997) {
            let _ = records(&Segment::from_bytes(0, bytes[..cut].to_vec()));
        }
    }

    #[test]
    fn snappy_literal_and_copies() {
        // "hello hello hello!": literal "hello " (6), copy offset 6 length 11 (1-byte-offset
        // copy: 4 + 7), literal "!".
        let block = [
            18u8, // varint length 18
            (6 - 1) << 2,
            b'h',
            b'e',
            b'l',
            b'l',
            b'o',
            b' ',
            (7 << 2) | 1, // copy1: len 4 + 7 = 11, offset high bits 0
            6,
            0,
            b'!',
        ];
        assert_eq!(snappy_decode(&block).unwrap(), b"hello hello hello!");
        // Copy-2 form of the same copy.
        let block2 = [
            18u8,
            (6 - 1) << 2,
            b'h',
            b'e',
            b'l',
            b'l',
            b'o',
            b' ',
            ((11 - 1) << 2) | 2,
            6,
            0,
            0,
            b'!',
        ];
        assert_eq!(snappy_decode(&block2).unwrap(), b"hello hello hello!");
        assert!(snappy_decode(&[5, 0, b'a']).is_err()); // shorter than declared
        assert!(snappy_decode(&[2, 1, 1]).is_err()); // copy before any output
        assert!(snappy_decode(&[0xff, 0xff, 0xff, 0xff, 0x0f]).is_err()); // huge declared
        assert!(snappy_decode(&[]).is_err());
    }

    #[test]
    fn compressed_fragment_record() {
        let block = [
            18u8,
            (6 - 1) << 2,
            b'h',
            b'e',
            b'l',
            b'l',
            b'o',
            b' ',
            (7 << 2) | 1,
            6,
            0,
            b'!',
        ];
        let seg = Segment::from_bytes(0, frag(1 | SNAPPY_MASK, &block));
        let (recs, err) = records(&seg);
        assert!(err.is_none());
        assert_eq!(recs[0].1, b"hello hello hello!");
    }

    #[test]
    fn listing_follows_atoi() {
        let dir = std::env::temp_dir().join(format!("rechain-flow-list-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for n in [
            "00000000",
            "00000001",
            "2",
            "checkpoint.00000001",
            "x1",
            "00000003.tmp",
        ] {
            std::fs::write(dir.join(n), b"").unwrap();
        }
        let segs = list_segments(&dir).unwrap();
        assert_eq!(segs.iter().map(|s| s.0).collect::<Vec<_>>(), vec![0, 1, 2]);
        std::fs::write(dir.join("00000004"), b"").unwrap();
        let err = list_segments(&dir).unwrap_err();
        assert_eq!(
            err.kind,
            ErrorKind::SegmentGap {
                before: 2,
                after: 4
            }
        );
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(atoi("+7"), Some(7));
        assert_eq!(atoi("-"), None);
        assert_eq!(segment_name(42), "00000042");
        assert_eq!(segment_name(123_456_789), "123456789");
    }
}
