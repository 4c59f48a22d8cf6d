//! The Python binding layer: one module per domain, each using only domain modules.

pub(crate) mod flow;
pub(crate) mod flow_checkpoint;
