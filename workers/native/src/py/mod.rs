//! The Python binding layer: one module per domain, each using only domain modules and the
//! shared binding types (`result`: the result classes' macro and `as_dict`; `btc_error`: the
//! `BtcError` exception of the Bitcoin bindings; `parquet_layout`: a declared table's
//! `ParquetLayout`; `flow_types`: the
//! Flow forest class, its exception and segment result, shared by `flow` and
//! `flow_checkpoint`). No binding module imports another.

pub(crate) mod btc_chain_state;
pub(crate) mod btc_core_index;
pub(crate) mod btc_error;
pub(crate) mod btc_headers;
pub(crate) mod btc_scripts;
pub(crate) mod btc_txindex;
pub(crate) mod btc_utxo;
pub(crate) mod eth;
pub(crate) mod eth_gen;
pub(crate) mod flow;
pub(crate) mod flow_checkpoint;
pub(crate) mod flow_types;
pub(crate) mod parquet_layout;
pub(crate) mod result;
pub(crate) mod sst;
