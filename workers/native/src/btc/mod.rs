//! Bitcoin block files: network constants, codecs, the scanner, the block-tree linker, the chain
//! state (its coins, undo records and spend resolution), Core's block index, the transaction
//! index and the test-chain generator, with their errors in `error`. Nothing here knows about
//! Arrow or Python (see `datasets` and `py`).

pub mod block;
pub mod chain_state;
pub mod coin;
pub mod columns;
pub mod core_index;
pub mod core_index_encode;
pub mod core_index_plan;
pub mod decode;
pub mod encode;
pub mod error;
pub mod gen;
pub mod gen_keys;
pub mod header;
pub mod link;
pub mod locktime;
pub mod muhash;
pub mod network;
pub mod scan;
pub mod script;
pub mod scripts;
pub mod sha256;
pub mod spend_resolve;
pub mod txindex;
pub mod undo;
pub mod utxo;
pub mod utxo_rewind;
pub mod utxo_snapshot;
