//! Ere writer (spec §2.8): byte for byte what geth's `execdb.Builder` writes for the same
//! blocks, in the profiles geth reads:
//!
//! ```text
//! Version | CompressedHeader{n} | CompressedBody{n} | CompressedSlimReceipts{n}? | Proof{n}? |
//! TotalDifficulty{n}? | Accumulator? | DynamicBlockIndex
//! ```
//!
//! * TD records for a file that starts before the merge: each pre-merge block's TD, then the
//!   final TD for the blocks after the merge; none in a file that starts after it.
//! * The Accumulator (over the pre-merge blocks only) in a file with TDs.
//! * `noreceipts` leaves the receipts out; `noproofs` (geth's only profile) the proofs. A
//!   block's proof is the one given with it (a source file's, of any type, kept as it is), else
//!   built here for a pre-merge block (its place in the epoch accumulator); a post-merge block
//!   without one is refused a proof profile: its proof needs the beacon chain's roots.
//!
//! Records are grouped by kind while blocks come one at a time: headers go straight to the
//! output, bodies and receipts to spill files beside it, appended at [`EreWriter::finish`];
//! memory holds only the TDs and hashes (64 bytes a block). [`EreDirWriter`] cuts a run of
//! blocks into files of 8192 from its first block, as geth's `ExportHistory` does, each
//! written under a temporary name and renamed once its last hash (its name) is known.

use super::accumulator::{epoch_root, EPOCH_SIZE};
use super::e2store;
use super::ere::{accumulator_proofs, encode_proof, file_name, BlockProof};
use super::error::{Error, ErrorKind, Result};
use super::snappy;
use crate::atomic;
use alloy_primitives::{B256, U256};
use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// What an Ere file carries besides headers and bodies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EreProfile {
    pub receipts: bool,
    pub proofs: bool,
}

/// geth's profile: receipts, no proofs (`-noproofs`).
pub const GETH_PROFILE: EreProfile = EreProfile {
    receipts: true,
    proofs: false,
};

impl EreProfile {
    /// From a profile name: `full`, `noproofs` (geth's), `noreceipts` (and no proofs).
    pub fn by_name(name: &str) -> Option<EreProfile> {
        Some(match name {
            "full" => EreProfile {
                receipts: true,
                proofs: true,
            },
            "noproofs" => GETH_PROFILE,
            "noreceipts" => EreProfile {
                receipts: false,
                proofs: false,
            },
            _ => return None,
        })
    }
}

fn refuse(s: String) -> Error {
    Error::new(ErrorKind::Layout(s))
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |e| Error::io(path, e)
}

/// A spill file of one section's records, deleted when dropped.
struct Spill {
    path: PathBuf,
    out: BufWriter<File>,
    len: u64,
}

impl Spill {
    fn new(path: PathBuf) -> Result<Self> {
        let f = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        Ok(Spill {
            out: BufWriter::with_capacity(1 << 20, f),
            path,
            len: 0,
        })
    }
}

impl Drop for Spill {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Writes `typ | len | 00 00 | value`; returns the bytes written.
fn write_record(out: &mut impl Write, typ: [u8; 2], value: &[u8]) -> std::io::Result<u64> {
    let mut h = [0u8; e2store::HEADER_LEN];
    h[..2].copy_from_slice(&typ);
    h[2..6].copy_from_slice(&(value.len() as u32).to_le_bytes());
    out.write_all(&h)?;
    out.write_all(value)?;
    Ok((h.len() + value.len()) as u64)
}

/// One Ere file being written to `out`.
pub struct EreWriter<W: Write> {
    out: W,
    /// Where `out` writes (errors name it) and its spill files go.
    path: PathBuf,
    profile: EreProfile,
    written: u64,
    first: Option<u64>,
    /// Per block: header offset, then local offsets in the body and receipt spills.
    headers: Vec<u64>,
    bodies: Vec<u64>,
    receipts: Vec<u64>,
    body_spill: Option<Spill>,
    receipt_spill: Option<Spill>,
    /// Proofs given with their blocks (their records' place in the spill), when writing proofs.
    proof_spill: Option<Spill>,
    given_proofs: Vec<Option<(u64, u64)>>,
    /// `(hash, TD)` of the pre-merge blocks, for the accumulator and proofs.
    pre_merge: Vec<(B256, U256)>,
    /// TD record per block (empty for a file that starts after the merge).
    tds: Vec<U256>,
    /// The TD at the merge, once a post-merge block follows pre-merge ones.
    final_td: Option<U256>,
    last: B256,
}

impl<W: Write> EreWriter<W> {
    /// `path`: the file `out` writes (named in errors; spills go beside it).
    pub fn new(out: W, path: &Path, profile: EreProfile) -> Result<Self> {
        let spill = |what: &str| {
            let mut p = path.as_os_str().to_owned();
            p.push(format!(".{what}"));
            Spill::new(PathBuf::from(p))
        };
        Ok(EreWriter {
            out,
            path: path.to_path_buf(),
            profile,
            written: 0,
            first: None,
            headers: Vec::new(),
            bodies: Vec::new(),
            receipts: Vec::new(),
            body_spill: Some(spill("bodies")?),
            receipt_spill: if profile.receipts {
                Some(spill("receipts")?)
            } else {
                None
            },
            proof_spill: if profile.proofs {
                Some(spill("proofs")?)
            } else {
                None
            },
            given_proofs: Vec::new(),
            pre_merge: Vec::new(),
            tds: Vec::new(),
            final_td: None,
            last: B256::ZERO,
        })
    }

    pub fn first(&self) -> Option<u64> {
        self.first
    }
    pub fn count(&self) -> u64 {
        self.headers.len() as u64
    }
    pub fn last_hash(&self) -> B256 {
        self.last
    }

    /// Append a block (geth's `AddRLP`): header, body and slim receipts RLP, its hash, its TD
    /// (`Some` exactly for a pre-merge block, `difficulty > 0`) and, for a proof profile, its
    /// proof as read (`rlp([type, ssz])`; `None`: built here if the block is pre-merge).
    #[allow(clippy::too_many_arguments)]
    pub fn add_block(
        &mut self,
        number: u64,
        hash: B256,
        header: &[u8],
        body: &[u8],
        slim_receipts: &[u8],
        td: Option<U256>,
        proof: Option<&[u8]>,
    ) -> Result<()> {
        let fail = |s: String| refuse(s).for_block(number).in_file(&self.path);
        if self.headers.len() as u64 >= super::ere::MAX_BLOCKS {
            return Err(fail(format!(
                "an Ere file holds at most {} blocks",
                super::ere::MAX_BLOCKS
            )));
        }
        match self.first {
            None => {
                self.written += write_record(&mut self.out, e2store::VERSION, &[])
                    .map_err(io_err(&self.path))?;
                self.first = Some(number);
            }
            Some(first) if first + self.count() != number => {
                return Err(fail(format!(
                    "block {number} added where {} is next",
                    first + self.count()
                )));
            }
            Some(_) => {}
        }
        let post = (self.tds.is_empty() && !self.headers.is_empty()) || self.final_td.is_some();
        match td {
            Some(_) if post => {
                return Err(fail(
                    "a block with difficulty after the merge in one Ere file".into(),
                ))
            }
            Some(td) => {
                self.pre_merge.push((hash, td));
                self.tds.push(td);
            }
            None => {
                if self.final_td.is_none() && !self.tds.is_empty() {
                    self.final_td = self.tds.last().copied();
                }
                if let Some(t) = self.final_td {
                    self.tds.push(t);
                }
            }
        }
        self.headers.push(self.written);
        self.written += write_record(
            &mut self.out,
            e2store::COMPRESSED_HEADER,
            &snappy::encode_framed(header),
        )
        .map_err(io_err(&self.path))?;
        let s = self.body_spill.as_mut().expect("until finish");
        self.bodies.push(s.len);
        s.len += write_record(
            &mut s.out,
            e2store::COMPRESSED_BODY,
            &snappy::encode_framed(body),
        )
        .map_err(io_err(&s.path))?;
        if let Some(s) = &mut self.receipt_spill {
            self.receipts.push(s.len);
            s.len += write_record(
                &mut s.out,
                e2store::COMPRESSED_SLIM_RECEIPTS,
                &snappy::encode_framed(slim_receipts),
            )
            .map_err(io_err(&s.path))?;
        }
        if let Some(s) = &mut self.proof_spill {
            let given = match proof {
                Some(p) => {
                    let at = s.len;
                    let n = write_record(&mut s.out, e2store::PROOF, &snappy::encode_framed(p))
                        .map_err(io_err(&s.path))?;
                    s.len += n;
                    Some((at, n))
                }
                None => None,
            };
            self.given_proofs.push(given);
        }
        self.last = hash;
        Ok(())
    }

    fn append(&mut self, mut spill: Spill) -> Result<u64> {
        let len = spill.len;
        let path = spill.path.clone();
        spill.out.flush().map_err(io_err(&path))?;
        let f = spill.out.get_mut();
        f.seek(SeekFrom::Start(0)).map_err(io_err(&path))?;
        let copied = std::io::copy(&mut f.take(len), &mut self.out).map_err(io_err(&path))?;
        if copied != len {
            return Err(refuse(format!(
                "{}: spill file shorter than written",
                path.display()
            )));
        }
        self.written += len;
        Ok(len)
    }

    /// Writes the grouped sections, the Accumulator and the index; returns the output, the
    /// last block's hash and the accumulator (if the file has one).
    pub fn finish(mut self) -> Result<(W, B256, Option<B256>)> {
        let Some(first) = self.first else {
            return Err(refuse("an Ere file needs at least one block".into()));
        };
        let n = self.headers.len();
        if let Some(i) = (0..n).find(|&i| {
            self.profile.proofs && i >= self.pre_merge.len() && self.given_proofs[i].is_none()
        }) {
            return Err(refuse(format!(
                "{}: block {} has no proof, and a post-merge block's proof needs the beacon \
                 chain's roots; write this range without proofs",
                self.path.display(),
                first + i as u64
            )));
        }
        let body_base = self.written;
        if let Some(spill) = self.body_spill.take() {
            self.append(spill)?;
        }
        let mut receipt_base = 0;
        if let Some(spill) = self.receipt_spill.take() {
            receipt_base = self.written;
            self.append(spill)?;
        }
        let mut proof_offsets = Vec::new();
        if let Some(mut spill) = self.proof_spill.take() {
            spill.out.flush().map_err(io_err(&spill.path))?;
            let built = accumulator_proofs(&self.pre_merge);
            for (i, given) in std::mem::take(&mut self.given_proofs)
                .into_iter()
                .enumerate()
            {
                proof_offsets.push(self.written);
                let record = match given {
                    Some((at, len)) => {
                        let mut rec = vec![0u8; len as usize];
                        std::os::unix::fs::FileExt::read_exact_at(
                            spill.out.get_ref(),
                            &mut rec,
                            at,
                        )
                        .map_err(io_err(&spill.path))?;
                        rec
                    }
                    None => {
                        let value = encode_proof(&BlockProof {
                            proof_type: super::ere::PROOF_HISTORICAL_HASHES_ACCUMULATOR,
                            data: built[i].clone(),
                        });
                        let mut rec = Vec::new();
                        write_record(&mut rec, e2store::PROOF, &snappy::encode_framed(&value))
                            .map_err(io_err(&self.path))?;
                        rec
                    }
                };
                self.out.write_all(&record).map_err(io_err(&self.path))?;
                self.written += record.len() as u64;
            }
        }
        let mut td_offsets = Vec::with_capacity(self.tds.len());
        for td in std::mem::take(&mut self.tds) {
            td_offsets.push(self.written);
            self.written += write_record(
                &mut self.out,
                e2store::TOTAL_DIFFICULTY,
                &td.to_le_bytes::<32>(),
            )
            .map_err(io_err(&self.path))?;
        }
        let accumulator = if td_offsets.is_empty() {
            None
        } else {
            let root = epoch_root(&self.pre_merge)?;
            self.written += write_record(&mut self.out, e2store::ACCUMULATOR, &root[..])
                .map_err(io_err(&self.path))?;
            Some(root)
        };
        let components = 2
            + self.profile.receipts as usize
            + !td_offsets.is_empty() as usize
            + self.profile.proofs as usize;
        let base = self.written as i64;
        let rel = |abs: u64| (abs as i64 - base).to_le_bytes();
        let mut index = Vec::with_capacity(24 + 8 * n * components);
        index.extend_from_slice(&first.to_le_bytes());
        for i in 0..n {
            index.extend_from_slice(&rel(self.headers[i]));
            index.extend_from_slice(&rel(body_base + self.bodies[i]));
            if self.profile.receipts {
                index.extend_from_slice(&rel(receipt_base + self.receipts[i]));
            }
            if let Some(o) = td_offsets.get(i) {
                index.extend_from_slice(&rel(*o));
            }
            if let Some(o) = proof_offsets.get(i) {
                index.extend_from_slice(&rel(*o));
            }
        }
        index.extend_from_slice(&(components as u64).to_le_bytes());
        index.extend_from_slice(&(n as u64).to_le_bytes());
        self.written += write_record(&mut self.out, e2store::DYNAMIC_BLOCK_INDEX, &index)
            .map_err(io_err(&self.path))?;
        self.out.flush().map_err(io_err(&self.path))?;
        let EreWriter { out, last, .. } = self;
        Ok((out, last, accumulator))
    }
}

/// One finished Ere file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenEre {
    pub path: PathBuf,
    pub epoch: u64,
    pub first_block: u64,
    pub blocks: u64,
    pub last_hash: B256,
    pub accumulator: Option<B256>,
    pub bytes: u64,
}

struct OpenFile {
    tmp: PathBuf,
    writer: EreWriter<BufWriter<File>>,
}

/// Writes consecutive blocks into Ere files of 8192 blocks from the first block added (geth's
/// `ExportHistory` cut: a file holds blocks `first + 8192·k ..`, named for the epoch of its
/// first block).
pub struct EreDirWriter {
    dir: PathBuf,
    network: String,
    profile: EreProfile,
    current: Option<OpenFile>,
    written: Vec<WrittenEre>,
    next: Option<u64>,
    /// First block of the run (files are cut at 8192 blocks from it).
    origin: Option<u64>,
}

fn atomic_err(e: atomic::AtomicError) -> Error {
    Error::io(e.path, e.source)
}

impl EreDirWriter {
    pub fn new(dir: impl AsRef<Path>, network: &str, profile: EreProfile) -> Result<Self> {
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(&dir, e))?;
        if network.is_empty() || network.contains(['/', '-']) {
            return Err(refuse(format!("bad network name {network:?}")));
        }
        Ok(EreDirWriter {
            dir,
            network: network.to_string(),
            profile,
            current: None,
            written: Vec::new(),
            next: None,
            origin: None,
        })
    }

    #[allow(clippy::too_many_arguments)]
    pub fn add_block(
        &mut self,
        number: u64,
        hash: B256,
        header: &[u8],
        body: &[u8],
        slim_receipts: &[u8],
        td: Option<U256>,
        proof: Option<&[u8]>,
    ) -> Result<()> {
        if let Some(next) = self.next.filter(|n| *n != number) {
            return Err(
                refuse(format!("block {number} added where {next} is next")).for_block(number)
            );
        }
        let origin = *self.origin.get_or_insert(number);
        let cut = (number - origin).is_multiple_of(EPOCH_SIZE as u64);
        if self.current.is_some() && cut {
            self.close_current()?;
        }
        if self.current.is_none() {
            let tmp = self.dir.join(format!(
                ".{}-{:05}.ere.tmp",
                self.network,
                number / EPOCH_SIZE as u64
            ));
            let f = atomic::create(&tmp).map_err(atomic_err)?;
            let writer = EreWriter::new(BufWriter::with_capacity(1 << 20, f), &tmp, self.profile)?;
            self.current = Some(OpenFile { tmp, writer });
        }
        let cur = self.current.as_mut().expect("opened above");
        cur.writer
            .add_block(number, hash, header, body, slim_receipts, td, proof)?;
        self.next = Some(number + 1);
        Ok(())
    }

    fn close_current(&mut self) -> Result<()> {
        let Some(OpenFile { tmp, writer }) = self.current.take() else {
            return Ok(());
        };
        let (first, blocks) = (writer.first().unwrap_or(0), writer.count());
        let (out, last_hash, accumulator) = writer.finish()?;
        let bytes = {
            let f = out
                .into_inner()
                .map_err(|e| Error::io(&tmp, e.into_error()))?;
            atomic::sync(&f, &tmp).map_err(atomic_err)?;
            f.metadata().map_err(|e| Error::io(&tmp, e))?.len()
        };
        let epoch = first / EPOCH_SIZE as u64;
        let name = file_name(
            &self.network,
            epoch,
            &last_hash,
            self.profile.proofs,
            self.profile.receipts,
        );
        let path = self.dir.join(name);
        atomic::rename(&tmp, &path).map_err(atomic_err)?;
        self.written.push(WrittenEre {
            path,
            epoch,
            first_block: first,
            blocks,
            last_hash,
            accumulator,
            bytes,
        });
        Ok(())
    }

    /// Close the last file; returns every file written, in order.
    pub fn finish(mut self) -> Result<Vec<WrittenEre>> {
        self.close_current()?;
        atomic::sync_dir(&self.dir);
        Ok(std::mem::take(&mut self.written))
    }
}

impl Drop for EreDirWriter {
    fn drop(&mut self) {
        if let Some(cur) = self.current.take() {
            let tmp = cur.tmp.clone();
            drop(cur);
            let _ = std::fs::remove_file(tmp);
        }
    }
}
