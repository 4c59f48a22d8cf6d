//! Bitcoin block files: network constants, codecs, the scanner, the block-tree linker and the
//! test-chain generator. Nothing here knows about Arrow or Python (see `datasets`).

pub mod block;
pub mod chain_state;
pub mod coin;
pub mod columns;
pub mod core_index;
pub mod core_index_plan;
pub mod decode;
pub mod encode;
pub mod error;
pub mod gen;
pub mod gen_keys;
pub mod header;
pub mod link;
pub mod network;
pub mod scan;
pub mod script;
pub mod sha256;
pub mod spend_resolve;
pub mod txindex;
pub mod undo;
pub mod utxo;
