//! Arrow datasets: one module per dataset, each with its schema and a builder that turns decoded
//! values into a RecordBatch. Decoders in `btc` know nothing of Arrow.

pub mod btc_bodies;
pub mod btc_chain_rows;
pub mod btc_events;
pub mod btc_headers;
pub mod btc_records;
pub mod btc_txids;
pub mod btc_utxo;
pub mod hex;
