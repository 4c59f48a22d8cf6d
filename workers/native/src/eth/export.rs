//! `rechain eth export-era1`: era1 archives written from what an import read, so a geth
//! freezer becomes an archive without geth. Blocks are taken as bytes from the source (never
//! re-encoded from the tables): era1 files are re-framed as they are, a freezer's storage-form
//! receipts are rebuilt in consensus form with their transactions' types (as geth's era
//! exporter does), and TDs come from era1 records, the freezer's `diffs`, or are summed from
//! the TD before the first block. The writer ([`super::era1_writer`]) makes the files byte for
//! byte what geth writes for the same blocks.

use super::body::decode_body;
use super::era1::Era1;
use super::era1_writer::{Era1DirWriter, WrittenEra1};
use super::error::{Error, ErrorKind, Result};
use super::freezer::Freezer;
use super::gen::{rlp_list, wrap_typed};
use super::header::decode_header;
use super::receipt::{decode_storage_receipts, set_types};
use super::{keccak256, U256};
use std::path::{Path, PathBuf};

/// Where the blocks come from.
pub enum ExportSource {
    /// era1 files, in block order.
    Era1(Vec<PathBuf>),
    /// A freezer (its `ancient` folder or `chain/`).
    Freezer(PathBuf),
}

fn refuse(detail: String) -> Error {
    Error::new(ErrorKind::Layout(detail))
}

/// Writes blocks `from..to` (capped at what the source holds) as era1 files named for
/// `network` into `out`. `from` must start an epoch (a multiple of 8192). `td_before`: the TD
/// of block `from - 1` (zero for genesis), needed when the source stores no TD.
pub fn export_era1(
    source: &ExportSource,
    network: &str,
    out: &Path,
    from: u64,
    to: u64,
    td_before: Option<U256>,
) -> Result<Vec<WrittenEra1>> {
    if !from.is_multiple_of(super::era1::MAX_BLOCKS) {
        return Err(refuse(format!(
            "era1 files start at a multiple of 8192; {from} is not one"
        )));
    }
    let mut w = Era1DirWriter::new(out, network)?;
    let mut written = Vec::new();
    match source {
        ExportSource::Era1(files) => {
            let mut next: Option<u64> = None;
            for path in files {
                let era = Era1::open(path)?;
                let (lo, hi) = (era.start().max(from), era.end().min(to));
                if lo >= hi {
                    continue;
                }
                if next.is_some_and(|n| n != lo) {
                    // A gap between the files: the next ones are another run of epochs.
                    written.extend(w.finish()?);
                    w = Era1DirWriter::new(out, network)?;
                }
                next = Some(hi);
                for n in lo..hi {
                    let b = era.block(n)?;
                    let hash = keccak256(&b.header);
                    w.add_block_numbered(
                        n,
                        hash,
                        &b.header,
                        &b.body,
                        &b.receipts,
                        b.total_difficulty,
                    )?;
                }
            }
        }
        ExportSource::Freezer(dir) => {
            let f = Freezer::open(dir)?;
            let end = to.min(f.head());
            let mut td = match (from, td_before) {
                (0, _) => Some(U256::ZERO),
                (_, t) => t,
            };
            for n in from..end {
                let header = f.header(n)?;
                let h = decode_header(&header).map_err(|e| e.for_block(n))?;
                if h.header.difficulty.is_zero() {
                    // era1 holds pre-merge history only.
                    break;
                }
                let body = f.body(n)?;
                let decoded = decode_body(&body).map_err(|e| e.for_block(n))?;
                let mut receipts =
                    decode_storage_receipts(&f.receipts(n)?).map_err(|e| e.for_block(n))?;
                set_types(&mut receipts, &decoded);
                let items = receipts
                    .iter()
                    .map(|r| r.consensus_encoding().map(|e| wrap_typed(&e)))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| refuse(format!("block {n}: a receipt of unknown type")))?;
                let block_td = match f.total_difficulty(n)? {
                    Some(stored) => stored,
                    None => td
                        .map(|t| t + h.header.difficulty)
                        .ok_or_else(|| refuse(format!("no TD known before block {from}")))?,
                };
                td = Some(block_td);
                w.add_block_numbered(n, h.hash, &header, &body, &rlp_list(&items), block_td)?;
            }
        }
    }
    written.extend(w.finish()?);
    Ok(written)
}
