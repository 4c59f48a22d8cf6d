//! libFuzzer entry for the `chain_state` target; the target itself is shared with the stable harness.
#![no_main]

#[path = "../../tests/fuzz_support/targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::run("chain_state", data));
