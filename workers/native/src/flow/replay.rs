//! The replay state: a forest of MTries advanced by WAL records in order, the root of the
//! last update, and the update log that becomes the `trie_updates` table. No Python here
//! (`crate::py::flow` wraps it as `FlowForest`).

use super::batches::{
    leaf_hashes_batch, register_tables, registers_batch, trie_updates_batch, trie_updates_schema,
    LoggedUpdate, RecordRow, RegisterLayouts,
};
use super::hash::{empty_root, Hash};
use super::mtrie::{Forest, Trie, DEFAULT_CAPACITY};
use super::record::WalRecord;
use super::register_sst::RegisterSst;
use super::wal::Segment;
use super::{visit_segment, ErrorKind, FlowError, OutputError};
use crate::parquet_out::{AlignedTables, Layout, RowGroups, TableWriter};
use std::path::{Path, PathBuf};

/// Why writing a trie's registers failed: its root is not held, or an output failed.
#[derive(Debug)]
pub enum PublishError {
    Root(ErrorKind),
    Output(OutputError),
}

impl std::fmt::Display for PublishError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PublishError::Root(e) => write!(f, "{e}"),
            PublishError::Output(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for PublishError {}

impl From<ErrorKind> for PublishError {
    fn from(e: ErrorKind) -> Self {
        PublishError::Root(e)
    }
}

impl From<OutputError> for PublishError {
    fn from(e: OutputError) -> Self {
        PublishError::Output(e)
    }
}

/// Rows built at a time by the Parquet writers and entry iterators (bounded memory).
pub const PUBLISH_CHUNK: usize = 1024;

pub struct ReplayState {
    forest: Forest,
    current: Hash,
    applied: u64,
    /// Every record applied (updates and deletes), in WAL order: the `trie_updates` table.
    log: Vec<LoggedUpdate>,
}

/// What replaying one segment did: its file length, where decoding stopped, the error that
/// stopped it (if any), and the updates, deletes and paths applied.
pub struct SegmentReplay {
    pub file_len: u64,
    pub end: u64,
    pub error: Option<FlowError>,
    pub updates: u64,
    pub deletes: u64,
    pub paths: u64,
}

impl ReplayState {
    /// At most `capacity` tries (oldest evicted), starting with the empty trie; `threads`
    /// bounds the threads one large update may use.
    pub fn new(capacity: usize, threads: usize) -> Self {
        ReplayState {
            forest: Forest::new(capacity, threads),
            current: empty_root(),
            applied: 0,
            log: Vec::new(),
        }
    }

    /// A state holding `tries` (file order: the last one is the current state).
    pub fn from_tries(tries: Vec<Trie>, threads: usize) -> Self {
        let capacity = DEFAULT_CAPACITY.max(tries.len() + 1);
        ReplayState::with_forest(Forest::new(capacity, threads), tries)
    }

    /// A state of `forest` (a paged one, say) with `tries` added, the last being current.
    pub fn with_forest(forest: Forest, tries: Vec<Trie>) -> Self {
        let mut s = ReplayState {
            forest,
            current: empty_root(),
            applied: 0,
            log: Vec::new(),
        };
        if let Some(last) = tries.last() {
            s.current = last.root_hash();
        }
        for t in tries {
            s.forest.add(t);
        }
        s
    }

    fn apply_record(
        &mut self,
        segment: u64,
        offset: u64,
        rec: WalRecord,
    ) -> Result<Option<Hash>, ErrorKind> {
        let mut logged = LoggedUpdate::new(segment, offset, &rec, None);
        if let WalRecord::Update(u) = rec {
            let a = self.forest.update_owned(u)?;
            self.current = a.root;
            self.applied += 1;
            logged.root = Some(a.root);
        }
        self.log.push(logged);
        Ok(logged.root)
    }

    /// Applies decoded rows in order: per row the new root of an update, None for a delete
    /// (flow-go's replay ignores deletes). An update whose parent root is not in the forest
    /// stops it: the roots of the rows before it, and that error.
    pub fn apply_rows(&mut self, rows: Vec<RecordRow>) -> (Vec<Option<Hash>>, Option<FlowError>) {
        let mut roots = Vec::with_capacity(rows.len());
        for row in rows {
            match self.apply_record(row.segment, row.offset, row.record) {
                Ok(root) => roots.push(root),
                Err(kind) => return (roots, Some(FlowError::new(row.segment, row.offset, kind))),
            }
        }
        (roots, None)
    }

    /// Reads WAL segment `path` (streamed) and applies its records as they are decoded.
    /// Errors only when the file cannot be opened; a record that cannot be decoded or applied
    /// ends the segment with `error` set.
    pub fn replay_segment(
        &mut self,
        path: &Path,
        segment_no: u64,
    ) -> Result<SegmentReplay, FlowError> {
        let seg = Segment::open(path, segment_no)?;
        let (mut updates, mut deletes, mut paths) = (0u64, 0u64, 0u64);
        let (end, error) = visit_segment(&seg, |_index, offset, rec| {
            let (update, delete, n_paths) = match &rec {
                WalRecord::Update(u) => (1, 0, u.paths.len() as u64),
                WalRecord::Delete(_) => (0, 1, 0),
            };
            self.apply_record(segment_no, offset, rec)?;
            (updates, deletes, paths) = (updates + update, deletes + delete, paths + n_paths);
            Ok(())
        });
        Ok(SegmentReplay {
            file_len: seg.file_len,
            end,
            error,
            updates,
            deletes,
            paths,
        })
    }

    /// Root of the last update applied (the empty root before any).
    pub fn current(&self) -> Hash {
        self.current
    }

    pub fn updates_applied(&self) -> u64 {
        self.applied
    }

    pub fn log(&self) -> &[LoggedUpdate] {
        &self.log
    }

    pub fn forest(&self) -> &Forest {
        &self.forest
    }

    /// The trie with this root (default: the current one).
    pub fn trie(&self, root: Option<Hash>) -> Result<&Trie, ErrorKind> {
        let h = root.unwrap_or(self.current);
        self.forest
            .get(&h)
            .ok_or(ErrorKind::UnknownRoot { root: h })
    }

    /// The tries with these roots (default: the current one), for a checkpoint.
    pub fn tries_for(&self, roots: Option<Vec<Hash>>) -> Result<Vec<Trie>, ErrorKind> {
        match roots {
            None => Ok(vec![self.trie(None)?.clone()]),
            Some(rs) => rs
                .into_iter()
                .map(|r| self.trie(Some(r)).cloned())
                .collect(),
        }
    }

    /// Writes the update log as a `trie_updates` Parquet file (its declared `layout`); returns
    /// its rows.
    pub fn write_trie_updates(
        &self,
        path: &Path,
        layout: &Layout,
        groups: RowGroups,
    ) -> Result<u64, OutputError> {
        let table = TableWriter::create(path, trie_updates_schema(), layout)?;
        let mut out = AlignedTables::new(vec![table], groups);
        let log = &self.log;
        let mut done = 0;
        while done < log.len() {
            let n = out.step_rows(PUBLISH_CHUNK).min(log.len() - done);
            out.write(&[trie_updates_batch(&log[done..done + n], done as u64)])?;
            done += n;
        }
        Ok(out.finish()?)
    }

    /// Writes a trie's registers as a `registers` Parquet file and their `register_hashes`
    /// file beside it, with the same row groups, and, given `sst`, RocksDB's `flow_registers`
    /// entries (path → value of `RegisterSst::version`) as SST files, all from one walk of
    /// the trie. A paged trie's walk reads its nodes from disk, so the node cache is emptied
    /// first and its share of the budget goes to the writers. Returns the rows of each table
    /// and the SST files (none for an empty trie).
    pub fn write_registers(
        &self,
        root: Option<Hash>,
        registers_path: &Path,
        hashes_path: &Path,
        layouts: &RegisterLayouts,
        sst: Option<RegisterSst>,
    ) -> Result<(u64, Vec<PathBuf>), PublishError> {
        if let Some(store) = self.forest.store() {
            store.clear_cache();
        }
        let mut cursor = self.trie(root)?.leaves();
        let mut out = AlignedTables::new(
            register_tables(registers_path, hashes_path, layouts)?,
            layouts.groups,
        );
        let mut writer = sst.as_ref().map(|s| s.writer("")).transpose()?;
        loop {
            let leaves = cursor
                .next_leaf_nodes(out.step_rows(PUBLISH_CHUNK))
                .map_err(OutputError::from)?;
            if leaves.is_empty() {
                let rows = out.finish().map_err(OutputError::from)?;
                let files = match writer {
                    Some(w) => w.finish()?,
                    None => Vec::new(),
                };
                return Ok((rows, files));
            }
            let regs: Vec<_> = leaves.iter().filter_map(|l| l.register()).collect();
            if let Some(w) = writer.as_mut() {
                w.add(&regs)?;
            }
            out.write(&[registers_batch(&regs), leaf_hashes_batch(&leaves)])
                .map_err(OutputError::from)?;
        }
    }

    /// `flow_roots` entries for log rows `lo..hi`: (seq, root) of each update.
    pub fn root_entries(&self, lo: usize, hi: usize) -> Vec<(u64, Hash)> {
        let hi = hi.min(self.log.len());
        self.log
            .iter()
            .enumerate()
            .take(hi)
            .skip(lo)
            .filter_map(|(seq, row)| row.root.map(|r| (seq as u64, r)))
            .collect()
    }
}
