//! LedgerWAL segment writer with `onflow/wal`'s exact framing (spec §2.1; `wal.go` `WAL.log`,
//! `flushPage`, `nextSegment`, `Close`), so files it writes are byte-identical to flow-go's.
//!
//! ```text
//! per record (one record per Log call, as flow-go's DiskWAL):
//!   page has < 7 free bytes       -> pad it to 32 KiB, start a new page
//!   record longer than the room left in this segment (current page + remaining pages, each
//!   minus a 7-byte header)        -> pad the page if non-empty, start segment index+1
//!   fragments: L = min(left, page free - 7); Full / First / Middle / Last; a page left with
//!   < 7 free bytes is padded and written
//!   end of record: the unwritten part of a non-empty page is written unpadded
//! close: a non-empty page is padded to 32 KiB
//! ```
//!
//! A record larger than a whole segment is still written after the switch, so such a segment
//! grows past the nominal size (spec §8), exactly as onflow/wal does.

use super::wal::{crc32c, list_segments, segment_name, FragmentType, HEADER_SIZE, PAGE_SIZE};
use super::{ErrorKind, FlowError};
use std::fs::File;
use std::io::Write;
use std::path::{Path as FsPath, PathBuf};

/// Where a record starts: segment and byte offset (`LogLocation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogLocation {
    pub segment: u64,
    pub offset: u64,
}

pub struct WalWriter {
    dir: PathBuf,
    pages_per_segment: i64,
    segment: u64,
    file: Option<File>,
    done_pages: i64,
    page: Vec<u8>,
    alloc: usize,
    flushed: usize,
    sync: bool,
    bytes_written: u64,
}

impl WalWriter {
    /// Opens a writer as `wal.NewSize` does: creates `dir`, and starts a fresh segment numbered
    /// one past the last existing segment (0 if none). `sync` fdatasyncs after every record, as
    /// flow-go does; a generator can skip it.
    pub fn create(dir: &FsPath, segment_size: usize, sync: bool) -> Result<WalWriter, FlowError> {
        if segment_size == 0 || !segment_size.is_multiple_of(PAGE_SIZE) {
            return Err(FlowError::new(
                0,
                0,
                ErrorKind::Config {
                    reason: format!(
                        "invalid segment size {segment_size}: must be a positive multiple of {PAGE_SIZE}"
                    ),
                },
            ));
        }
        std::fs::create_dir_all(dir).map_err(|e| FlowError::io(0, "create WAL directory", &e))?;
        let next = list_segments(dir)?.last().map_or(0, |(n, _)| n + 1);
        let mut w = WalWriter {
            dir: dir.to_path_buf(),
            pages_per_segment: (segment_size / PAGE_SIZE) as i64,
            segment: next,
            file: None,
            done_pages: 0,
            page: vec![0u8; PAGE_SIZE],
            alloc: 0,
            flushed: 0,
            sync,
            bytes_written: 0,
        };
        w.open_segment(next)?;
        Ok(w)
    }

    /// Segment currently written.
    pub fn segment(&self) -> u64 {
        self.segment
    }

    pub fn bytes_written(&self) -> u64 {
        self.bytes_written
    }

    fn open_segment(&mut self, n: u64) -> Result<(), FlowError> {
        let path = self.dir.join(segment_name(n));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| FlowError::io(n, "create segment", &e))?;
        self.file = Some(file);
        self.segment = n;
        self.done_pages = 0;
        Ok(())
    }

    fn page_full(&self) -> bool {
        PAGE_SIZE - self.alloc < HEADER_SIZE
    }

    fn flush_page(&mut self, clear: bool) -> Result<(), FlowError> {
        let clear = clear || self.page_full();
        if clear {
            self.alloc = PAGE_SIZE;
        }
        let seg = self.segment;
        let file = self.file.as_mut().ok_or_else(|| {
            FlowError::new(
                seg,
                0,
                ErrorKind::Config {
                    reason: "WAL writer is closed".into(),
                },
            )
        })?;
        file.write_all(&self.page[self.flushed..self.alloc])
            .map_err(|e| FlowError::io(seg, "write segment", &e))?;
        self.bytes_written += (self.alloc - self.flushed) as u64;
        self.flushed = self.alloc;
        if clear {
            self.page.fill(0);
            self.alloc = 0;
            self.flushed = 0;
            self.done_pages += 1;
        }
        Ok(())
    }

    fn next_segment(&mut self) -> Result<(), FlowError> {
        if self.alloc > 0 {
            self.flush_page(true)?;
        }
        self.finish_file()?;
        self.open_segment(self.segment + 1)
    }

    fn finish_file(&mut self) -> Result<(), FlowError> {
        if let Some(f) = self.file.take() {
            if self.sync {
                f.sync_data()
                    .map_err(|e| FlowError::io(self.segment, "sync segment", &e))?;
            }
        }
        Ok(())
    }

    /// Logs one record (`WAL.Log` with a single record).
    pub fn log(&mut self, rec: &[u8]) -> Result<LogLocation, FlowError> {
        if self.page_full() {
            self.flush_page(true)?;
        }
        let left = (PAGE_SIZE - self.alloc - HEADER_SIZE) as i64
            + (PAGE_SIZE - HEADER_SIZE) as i64 * (self.pages_per_segment - self.done_pages - 1);
        if rec.len() as i64 > left {
            self.next_segment()?;
        }
        let location = LogLocation {
            segment: self.segment,
            offset: (self.done_pages as u64) * PAGE_SIZE as u64 + self.alloc as u64,
        };
        let mut rest = rec;
        let mut first = true;
        while first || !rest.is_empty() {
            let l = rest.len().min(PAGE_SIZE - self.alloc - HEADER_SIZE);
            let (part, tail) = rest.split_at(l);
            let typ = match (first, tail.is_empty()) {
                (true, true) => FragmentType::Full,
                (false, true) => FragmentType::Last,
                (true, false) => FragmentType::First,
                (false, false) => FragmentType::Middle,
            };
            let buf = &mut self.page[self.alloc..];
            buf[0] = typ as u8;
            buf[1..3].copy_from_slice(&(l as u16).to_be_bytes());
            buf[3..7].copy_from_slice(&crc32c(part).to_be_bytes());
            buf[HEADER_SIZE..HEADER_SIZE + l].copy_from_slice(part);
            self.alloc += HEADER_SIZE + l;
            if self.page_full() {
                self.flush_page(true)?;
            }
            rest = tail;
            first = false;
        }
        if self.alloc > 0 {
            self.flush_page(false)?;
        }
        if self.sync {
            if let Some(f) = &self.file {
                f.sync_data()
                    .map_err(|e| FlowError::io(self.segment, "sync segment", &e))?;
            }
        }
        Ok(location)
    }

    /// `WAL.Close`: pads a non-empty page and closes the segment.
    pub fn close(mut self) -> Result<(), FlowError> {
        if self.alloc > 0 {
            self.flush_page(true)?;
        }
        self.finish_file()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::wal::Segment;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rechain-flow-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn read_all(dir: &FsPath) -> Vec<(u64, Vec<Vec<u8>>)> {
        list_segments(dir)
            .unwrap()
            .into_iter()
            .map(|(n, p)| {
                let seg = Segment::read(&p, n).unwrap();
                let mut r = seg.reader();
                let mut recs = Vec::new();
                while let Some(rec) = r.next_record().unwrap() {
                    recs.push(rec.data.into_owned());
                }
                (n, recs)
            })
            .collect()
    }

    #[test]
    fn split_record_vector_spec_6_4() {
        let dir = tmp("writer-64");
        let r: Vec<u8> = (0..40_000u32).map(|i| i as u8).collect();
        let mut w = WalWriter::create(&dir, 32 * 1024 * 1024, false).unwrap();
        assert_eq!(
            w.log(&[0xde, 0xad]).unwrap(),
            LogLocation {
                segment: 0,
                offset: 0
            }
        );
        assert_eq!(
            w.log(&r).unwrap(),
            LogLocation {
                segment: 0,
                offset: 9
            }
        );
        let seg = dir.join("00000000");
        let bytes = std::fs::read(&seg).unwrap();
        assert_eq!(bytes.len(), 40_023);
        assert_eq!(
            &bytes[..16],
            &[1, 0, 2, 0x23, 0xc8, 0xd1, 0x51, 0xde, 0xad, 2, 0x7f, 0xf0, 0x5c, 0xf5, 0x79, 0xdc]
        );
        assert_eq!(
            &bytes[32_768..32_775],
            &[4, 0x1c, 0x50, 0x43, 0xf5, 0xd8, 0xa2]
        );
        assert_eq!(&bytes[16..32_768], &r[..32_752]);
        assert_eq!(&bytes[32_775..], &r[32_752..]);
        w.close().unwrap();
        let bytes = std::fs::read(&seg).unwrap();
        assert_eq!(bytes.len(), 65_536);
        assert!(bytes[40_023..].iter().all(|&b| b == 0));
        assert_eq!(read_all(&dir), vec![(0, vec![vec![0xde, 0xad], r])]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn records_never_span_segments() {
        let dir = tmp("writer-seg");
        let mut w = WalWriter::create(&dir, 2 * PAGE_SIZE, false).unwrap();
        let recs: Vec<Vec<u8>> = (0..12u32)
            .map(|i| vec![i as u8; 9000 + 3000 * i as usize])
            .collect();
        let mut locs = Vec::new();
        for r in &recs {
            locs.push(w.log(r).unwrap());
        }
        w.close().unwrap();
        let segs = read_all(&dir);
        assert!(segs.len() > 3);
        let flat: Vec<Vec<u8>> = segs.iter().flat_map(|s| s.1.clone()).collect();
        assert_eq!(flat, recs);
        for (n, p) in list_segments(&dir).unwrap() {
            let len = std::fs::metadata(&p).unwrap().len();
            assert_eq!(
                len % PAGE_SIZE as u64,
                0,
                "segment {n} closed on a page boundary"
            );
        }
        assert!(locs.windows(2).all(|w| w[0].segment <= w[1].segment));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn oversized_record_spec_8() {
        // A record larger than a whole segment: an empty segment is left behind, the record goes
        // into the next one, which grows past the nominal size.
        let dir = tmp("writer-big");
        let mut w = WalWriter::create(&dir, 2 * PAGE_SIZE, false).unwrap();
        let big = vec![7u8; 3 * PAGE_SIZE];
        w.log(&big).unwrap();
        w.log(&big).unwrap();
        w.close().unwrap();
        let lens: Vec<u64> = list_segments(&dir)
            .unwrap()
            .iter()
            .map(|(_, p)| std::fs::metadata(p).unwrap().len())
            .collect();
        assert_eq!(lens, vec![0, 4 * PAGE_SIZE as u64, 4 * PAGE_SIZE as u64]);
        let segs = read_all(&dir);
        assert_eq!(segs[1].1, vec![big.clone()]);
        assert_eq!(segs[2].1, vec![big]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn opening_starts_a_fresh_segment_and_rejects_bad_sizes() {
        let dir = tmp("writer-reopen");
        let mut w = WalWriter::create(&dir, PAGE_SIZE, false).unwrap();
        w.log(b"a").unwrap();
        w.close().unwrap();
        let w = WalWriter::create(&dir, PAGE_SIZE, false).unwrap();
        assert_eq!(w.segment(), 1);
        w.close().unwrap();
        assert_eq!(std::fs::metadata(dir.join("00000001")).unwrap().len(), 0);
        assert!(WalWriter::create(&dir, PAGE_SIZE + 1, false).is_err());
        assert!(WalWriter::create(&dir, 0, false).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn fragment_exactly_filling_a_page() {
        // The first record leaves exactly 7 free bytes, which is not "full": a zero-length
        // record still fits there as a bare Full header, and the page is then complete.
        let dir = tmp("writer-fill");
        let mut w = WalWriter::create(&dir, 4 * PAGE_SIZE, false).unwrap();
        w.log(&vec![1u8; PAGE_SIZE - 14]).unwrap();
        w.log(&[]).unwrap();
        w.log(b"xyz").unwrap();
        w.close().unwrap();
        let bytes = std::fs::read(dir.join("00000000")).unwrap();
        assert_eq!(bytes[PAGE_SIZE - 7], 1); // empty Full fragment at the page end
        assert_eq!(bytes[PAGE_SIZE], 1); // next record on page 1
        assert_eq!(
            read_all(&dir)[0].1,
            vec![vec![1u8; PAGE_SIZE - 14], vec![], b"xyz".to_vec()]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
