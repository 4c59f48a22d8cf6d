//! `rechain eth export-era1` and `export-ere`: archives written from what an import read, so a
//! geth freezer (or an era1 / Ere folder) becomes an archive without geth. Blocks are taken as
//! bytes from the source (never re-encoded from the tables): era1 and Ere files are re-framed
//! as they are; receipts move between the three forms field by field (a freezer's storage
//! form gets its transactions' types, as geth's exporter does; era1's consensus form drops its
//! bloom for Ere's slim form; Ere's slim form gets the bloom of its logs back for era1). TDs
//! come from the archives' records, the freezer's `diffs`, or are summed from the TD before
//! the first block. The writers ([`super::era1_writer`], [`super::ere_writer`]) make the files
//! byte for byte what geth writes for the same blocks.

use super::body::decode_body;
use super::era1::Era1;
use super::era1_writer::{Era1DirWriter, WrittenEra1};
use super::ere::Ere;
use super::ere_writer::{EreDirWriter, EreProfile, WrittenEre};
use super::error::{Error, ErrorKind, Result};
use super::freezer::Freezer;
use super::gen::{rlp_list, wrap_typed};
use super::header::decode_header;
use super::receipt::{
    decode_slim_receipts, decode_storage_receipts, set_types, slim_from_consensus,
    slim_from_storage,
};
use super::{keccak256, B256, U256};
use std::path::{Path, PathBuf};

/// Where the blocks come from.
pub enum ExportSource {
    /// era1 and Ere files, in block order.
    Archives(Vec<PathBuf>),
    /// A freezer (its `ancient` folder or `chain/`).
    Freezer(PathBuf),
}

fn refuse(detail: String) -> Error {
    Error::new(ErrorKind::Layout(detail))
}

/// A block's receipts in the form its source keeps them.
enum Receipts {
    /// era1: the consensus list.
    Consensus(Vec<u8>),
    /// Ere: the slim list.
    Slim(Vec<u8>),
    /// Freezer: the storage list (types from the body).
    Storage(Vec<u8>),
    /// An Ere file of the `noreceipts` profile.
    Missing,
}

/// One block of an export's source.
struct SourceBlock {
    number: u64,
    hash: B256,
    header: Vec<u8>,
    body: Vec<u8>,
    receipts: Receipts,
    /// TD including this block, where known.
    td: Option<U256>,
    /// Proof of work (difficulty > 0): a pre-merge block.
    pow: bool,
    /// An Ere source's block proof, as read (`rlp([type, ssz])`).
    proof: Option<Vec<u8>>,
}

impl SourceBlock {
    fn types(&self) -> Result<Vec<u8>> {
        let body = decode_body(&self.body).map_err(|e| e.for_block(self.number))?;
        Ok(body.transactions.iter().map(|t| t.tx_type).collect())
    }

    fn missing(&self) -> Error {
        refuse(format!(
            "block {}: the source has no receipts (an Ere file of the noreceipts profile)",
            self.number
        ))
    }

    /// The consensus-form list era1 holds.
    fn consensus(&self) -> Result<Vec<u8>> {
        let n = self.number;
        let rs = match &self.receipts {
            Receipts::Consensus(raw) => return Ok(raw.clone()),
            Receipts::Slim(raw) => decode_slim_receipts(raw).map_err(|e| e.for_block(n))?,
            Receipts::Storage(raw) => {
                let body = decode_body(&self.body).map_err(|e| e.for_block(n))?;
                let mut rs = decode_storage_receipts(raw).map_err(|e| e.for_block(n))?;
                set_types(&mut rs, &body);
                rs
            }
            Receipts::Missing => return Err(self.missing()),
        };
        let items = rs
            .iter()
            .map(|r| r.consensus_encoding().map(|e| wrap_typed(&e)))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| refuse(format!("block {n}: a receipt of unknown type")))?;
        Ok(rlp_list(&items))
    }

    /// The slim list Ere holds.
    fn slim(&self) -> Result<Vec<u8>> {
        let n = self.number;
        match &self.receipts {
            Receipts::Slim(raw) => Ok(raw.clone()),
            Receipts::Consensus(raw) => slim_from_consensus(raw).map_err(|e| e.for_block(n)),
            Receipts::Storage(raw) => {
                slim_from_storage(raw, &self.types()?).map_err(|e| e.for_block(n))
            }
            Receipts::Missing => Err(self.missing()),
        }
    }
}

/// Hands blocks `from..to` of `source` (capped at what it holds) to `f` in order; `gap` is
/// called where the archives leave a hole (the next files start another run). `td_before`:
/// the TD of block `from - 1`, for a source that stores none.
fn for_each_block(
    source: &ExportSource,
    from: u64,
    to: u64,
    td_before: Option<U256>,
    f: &mut dyn FnMut(SourceBlock) -> Result<bool>,
    gap: &mut dyn FnMut() -> Result<()>,
) -> Result<()> {
    match source {
        ExportSource::Archives(files) => {
            let mut next: Option<u64> = None;
            for path in files {
                let is_ere = path.extension().is_some_and(|e| e == "ere");
                let (era1, ere) = if is_ere {
                    (None, Some(Ere::open(path)?))
                } else {
                    (Some(Era1::open(path)?), None)
                };
                let (start, end) = match (&era1, &ere) {
                    (Some(e), _) => (e.start(), e.end()),
                    (_, Some(e)) => (e.start(), e.end()),
                    _ => unreachable!("one of the two is open"),
                };
                let (lo, hi) = (start.max(from), end.min(to));
                if lo >= hi {
                    continue;
                }
                if next.is_some_and(|n| n != lo) {
                    gap()?;
                }
                next = Some(hi);
                for n in lo..hi {
                    let (header, body, receipts, td, proof) = match (&era1, &ere) {
                        (Some(e), _) => {
                            let b = e.block(n)?;
                            let r = Receipts::Consensus(b.receipts);
                            (b.header, b.body, r, Some(b.total_difficulty), None)
                        }
                        (_, Some(e)) => {
                            let b = e.block(n)?;
                            let r = b.receipts.map_or(Receipts::Missing, Receipts::Slim);
                            (b.header, b.body, r, b.total_difficulty, b.proof)
                        }
                        _ => unreachable!("one of the two is open"),
                    };
                    let difficulty = decode_header(&header)
                        .map_err(|e| e.for_block(n))?
                        .header
                        .difficulty;
                    let block = SourceBlock {
                        number: n,
                        hash: keccak256(&header),
                        pow: !difficulty.is_zero(),
                        td,
                        header,
                        body,
                        receipts,
                        proof,
                    };
                    if !f(block)? {
                        return Ok(());
                    }
                }
            }
        }
        ExportSource::Freezer(dir) => {
            let fz = Freezer::open(dir)?;
            let end = to.min(fz.head());
            let mut td = match (from, td_before) {
                (0, _) => Some(U256::ZERO),
                (_, t) => t,
            };
            for n in from..end {
                let header = fz.header(n)?;
                let h = decode_header(&header).map_err(|e| e.for_block(n))?;
                let pow = !h.header.difficulty.is_zero();
                let block_td = match fz.total_difficulty(n)? {
                    Some(stored) => Some(stored),
                    None => td.map(|t| t + h.header.difficulty),
                };
                td = block_td;
                let block = SourceBlock {
                    number: n,
                    hash: h.hash,
                    header,
                    body: fz.body(n)?,
                    receipts: Receipts::Storage(fz.receipts(n)?),
                    td: block_td,
                    pow,
                    proof: None,
                };
                if !f(block)? {
                    return Ok(());
                }
            }
        }
    }
    Ok(())
}

/// Writes blocks `from..to` (capped at what the source holds) as era1 files named for
/// `network` into `out`. `from` must start an epoch (a multiple of 8192); the export stops at
/// the merge (era1 holds pre-merge history only). `td_before`: the TD of block `from - 1`
/// (zero for genesis), needed when the source stores no TD.
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
    let w = std::cell::RefCell::new(Era1DirWriter::new(out, network)?);
    let mut written = Vec::new();
    for_each_block(
        source,
        from,
        to,
        td_before,
        &mut |b| {
            if !b.pow {
                return Ok(false);
            }
            let td =
                b.td.ok_or_else(|| refuse(format!("no TD known before block {from}")))?;
            let receipts = b.consensus()?;
            w.borrow_mut()
                .add_block_numbered(b.number, b.hash, &b.header, &b.body, &receipts, td)?;
            Ok(true)
        },
        &mut || {
            let done = w.replace(Era1DirWriter::new(out, network)?);
            written.extend(done.finish()?);
            Ok(())
        },
    )?;
    written.extend(w.into_inner().finish()?);
    Ok(written)
}

/// Writes blocks `from..to` (capped at what the source holds) as Ere files of `profile` named
/// for `network` into `out`: files of 8192 blocks from `from`, each named for the epoch of its
/// first block, as geth's `export-history --format ere` cuts them. `td_before`: the TD of block
/// `from - 1`, needed when the source stores no TD and `from` is before the merge.
pub fn export_ere(
    source: &ExportSource,
    network: &str,
    out: &Path,
    from: u64,
    to: u64,
    td_before: Option<U256>,
    profile: EreProfile,
) -> Result<Vec<WrittenEre>> {
    let w = std::cell::RefCell::new(EreDirWriter::new(out, network, profile)?);
    let mut written = Vec::new();
    for_each_block(
        source,
        from,
        to,
        td_before,
        &mut |b| {
            let td = if b.pow {
                Some(b.td.ok_or_else(|| refuse(format!("no TD known before block {from}")))?)
            } else {
                None
            };
            let receipts = if profile.receipts {
                b.slim()?
            } else {
                Vec::new()
            };
            // A source's proofs are kept as they are; missing ones are built where they can be.
            let proof = if profile.proofs {
                b.proof.as_deref()
            } else {
                None
            };
            w.borrow_mut()
                .add_block(b.number, b.hash, &b.header, &b.body, &receipts, td, proof)?;
            Ok(true)
        },
        &mut || {
            let done = w.replace(EreDirWriter::new(out, network, profile)?);
            written.extend(done.finish()?);
            Ok(())
        },
    )?;
    written.extend(w.into_inner().finish()?);
    Ok(written)
}
