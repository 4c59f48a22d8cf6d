//! Ethereum execution-layer history, read straight from the files clients leave on disk
//! (`shared/specs/ethereum-history.md`).
//!
//! Each module owns one format or one set of rules:
//!
//! * [`e2store`]: the `type | length | reserved | value` record container (§2.1).
//! * [`snappy`]: both snappy flavours — the framed stream of e2store values (chunk CRCs checked)
//!   and the raw blocks of geth's freezer (§1.6, §2.5).
//! * [`era1`]: era1 archives — layout, block index, block tuples, TD and accumulator records (§2.2–2.3).
//! * [`ere`]: Ere archives across the merge — dynamic block index and its layout, slim receipts,
//!   TDs, accumulator, block proofs (§2.8); [`ere_writer`] writes them as geth does.
//! * [`freezer`]: geth's "ancient" tables, read-only, both directory layouts, index entries,
//!   tails, `.meta` versions, raw and compressed tables (§1).
//! * [`header`]: header RLP of every fork (15/16/17/20/21 fields) and the hash of the bytes read (§3.1).
//! * [`body`]: block bodies — legacy and typed (1–4) transactions, uncles, withdrawals (§1.9).
//! * [`receipt`]: receipts in consensus (era1, portal) and storage (freezer) form (§1.9, §2.2).
//! * [`ethash`]: proof of work (hashimoto-light with one shared cache per epoch, §3.3.3).
//! * [`chain_config`]: the fork schedules (mainnet, Sepolia, `dev`) and blob schedules.
//! * [`rules`]: the header and block rules that need no state (§3.3–3.5).
//! * [`validate`]: those rules walked over a whole era1 file or freezer range, in chain order.
//! * [`accumulator`]: era1 epoch accumulator roots and the EIP-7643 list of 1,897 roots (§2.6).
//! * [`tables`]: the Parquet tables (`eth_blocks`, `eth_transactions`, ...) and their rows.
//! * [`import`]: one unit of `rechain eth import` (a file or freezer range checked into rows).
//! * [`export`]: `rechain eth export-era1` and `export-ere` (archives from what an import read).
//!
//! Every reader takes bytes or paths and returns plain structs or an [`Error`] naming the file,
//! the byte offset (or block / item number) and the rule that failed; bad input never panics.

pub mod accumulator;
pub mod body;
pub mod chain_config;
pub mod e2store;
pub mod era1;
pub mod era1_writer;
pub mod ere;
pub mod ere_writer;
mod error;
pub mod ethash;
pub mod export;
pub mod freezer;
pub mod freezer_writer;
pub mod gen;
pub mod header;
pub mod import;
pub mod receipt;
pub mod rules;
pub mod snappy;
pub mod tables;
pub mod validate;

pub use error::{Error, ErrorKind, Result};

pub use alloy_primitives::{keccak256, Address, Bloom, B256, U256};
