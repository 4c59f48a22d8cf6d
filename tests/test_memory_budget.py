"""`--memory-budget` against peak RSS, on a full reindex whose blocks are at least 10x the
budget (slow: `make soak` runs it; RECHAIN_MEMTEST_BLOCKS sets the chain length). The small
case of every pipeline runs in `make test`: tests/test_memory_ci.py.

The budget bounds what the pipeline holds for the data: in-flight units, DuckDB's buffers
(it spills to DATADIR/tmp beyond them), staged and published row groups, the UTXO set and
tx index streamed into RocksDB. The Python interpreter, Arrow, DuckDB's code and Ray's own
processes come on top, and do not grow with the input: the same run over a tiny chain
measures them, and the big run may exceed that baseline by at most the budget."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from rechain.pipeline.runtime import local_runner

from tests.conftest import gen_chain
from tests.measure import btc_reindex_cmd, run_measured

BUDGET = 256 << 20
#: ~82 KB per block (signed spends): 33,000 blocks are ~2.6 GiB, just over 10x the budget.
BLOCKS = int(os.environ.get("RECHAIN_MEMTEST_BLOCKS", "33000"))


def _full(blocks: Path, data: Path) -> tuple[dict, int, int]:
    cmd = btc_reindex_cmd(blocks, data, 1, "--mode", "full", "--memory-budget", str(BUDGET))
    done, rss, _ = run_measured(cmd)
    return json.loads(done.stdout), rss.peak_root, rss.peak_tree


@pytest.mark.slow
@pytest.mark.parametrize("execution", ["threads", "ray"])
def test_full_reindex_of_ten_times_the_budget_stays_within_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, execution: str
) -> None:
    # On the process's threads (a local run's default) and on an embedded Ray; both runs of a
    # case alike, so that the baseline holds Ray's own processes where they run.
    monkeypatch.setenv(local_runner.EXECUTION_ENV, execution)
    tiny = gen_chain(tmp_path / "tiny", "--blocks", "30", "--tx-per-block", "100:400")
    big = gen_chain(tmp_path / "big", "--blocks", str(BLOCKS), "--tx-per-block", "100:400")
    size = big["bytes"]  # block records, not the files' zero-filled preallocated tails
    assert size >= 10 * BUDGET, f"input {size >> 20} MiB is not 10x the budget"
    base, base_root, base_tree = _full(tmp_path / "tiny" / "blocks", tmp_path / "d0")
    assert base["full"]["utxo_count"] == tiny["utxo_count"]
    result, root, tree = _full(tmp_path / "big" / "blocks", tmp_path / "d1")
    assert result["full"]["utxo_count"] == big["utxo_count"]
    assert result["full"]["total_amount"] == big["total_amount"]
    print(
        f"\n{execution}: input {size >> 20} MiB, budget {BUDGET >> 20} MiB; peak RSS coordinator "
        f"{root >> 20} MiB (baseline {base_root >> 20}), Ray tree {tree >> 20} MiB "
        f"(baseline {base_tree >> 20})"
    )
    assert root - base_root <= BUDGET
    assert tree - base_tree <= BUDGET
