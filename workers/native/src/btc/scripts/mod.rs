//! Script validation with Bitcoin Core's own interpreter: the flags Core applies to a block
//! (`flags`), the call into Core's VerifyScript once per transaction (`interpreter`) and a
//! block's verdict from its bytes and its undo record (`block`).

pub mod block;
pub mod flags;
pub mod interpreter;
