//! libFuzzer entry for the `wal_segment` target; the target itself is shared with the stable harness.
#![no_main]

#[path = "../../tests/fuzz_support/targets.rs"]
mod targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::run("wal_segment", data));
