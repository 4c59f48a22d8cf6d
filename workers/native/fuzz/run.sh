#!/usr/bin/env bash
# `make fuzz`: runs every fuzz target for FUZZ_SECONDS (default 60) each and prints executions,
# seconds and crashes per target. With a nightly toolchain and cargo-fuzz: libFuzzer with
# coverage feedback, seeded from the same corpora as the stable harness. Without (or with
# FUZZ_STABLE=1): the stable harness in tests/fuzz.rs for the same time.
# A crash leaves its input in fuzz/artifacts/<target>/ (cargo-fuzz) or target/fuzz-crashes/
# (stable); copy it to fuzz/regressions/<target>/ once fixed so it replays in `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${FUZZ_SECONDS:-60}
targets=(blk_scan block_decode wal_segment wal_record checkpoint_read checkpoint_stream chain_state)

if [[ -z ${FUZZ_STABLE:-} ]] && cargo +nightly --version >/dev/null 2>&1 \
    && cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz: cargo-fuzz (libFuzzer, nightly), ${secs}s per target"
    rm -rf fuzz/corpus
    FUZZ_CORPUS_DIR="$PWD/fuzz/corpus" cargo test --profile ci --quiet --test fuzz \
        write_seed_corpus -- --ignored >/dev/null
    mkdir -p fuzz/logs
    # Build first (a few minutes the first time) so the seconds below are fuzzing only.
    cargo +nightly fuzz build --fuzz-dir fuzz >fuzz/logs/build.log 2>&1 \
        || { tail -20 fuzz/logs/build.log; exit 1; }
    failed=0
    printf '%-13s %12s %8s %8s %s\n' target executions seconds crashes corpus
    for t in "${targets[@]}"; do
        log="fuzz/logs/$t.log"
        start=$(date +%s.%N)
        if cargo +nightly fuzz run --fuzz-dir fuzz "$t" "fuzz/corpus/$t" -- \
            -max_total_time="$secs" -print_final_stats=1 -rss_limit_mb=4096 \
            -timeout=10 >"$log" 2>&1; then
            crashes=0
        else
            crashes=1
            failed=1
        fi
        end=$(date +%s.%N)
        execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' \
            | tail -1 || true)
        printf '%-13s %12s %8.1f %8s %s\n' "$t" "${execs:-?}" \
            "$(echo "$end - $start" | bc)" "$crashes" "$(ls "fuzz/corpus/$t" | wc -l) inputs"
        if [[ $crashes != 0 ]]; then
            grep -m3 -E 'panicked|ERROR|SUMMARY' "$log" || true
            echo "  log: $log; input: $(ls -t fuzz/artifacts/"$t"/* 2>/dev/null | head -1)"
        fi
    done
    exit $failed
fi

echo "fuzz: stable harness (no nightly cargo-fuzz), ${secs}s per target"
FUZZ_SECONDS=$secs cargo test --profile ci --quiet --test fuzz -- --nocapture \
    --test-threads=1 2>&1 | grep -E '^fuzz |panicked|breaks it|test result'
