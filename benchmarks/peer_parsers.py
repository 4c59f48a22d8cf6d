"""The crates.io peer parsers beside rechain: building their binary (``peers/build.sh``),
running each on a blocks folder with its CPU time, and checking what each counted against a full
reindex of the same files (rechain's Parquet tables and ``rechain btc status``).

Peers (``peers/src/main.rs``): bitcoin-block-parser 0.5.3 ``BlockParser`` (every best-chain
block decoded) and ``UtxoParser`` (a filter pass, then a parse with input amounts and spent
flags), and blocks_iterator 3.0.0 with previous outputs (blocks in height order, each input's
value; it never emits the last ``max_reorg`` blocks, so its counts are checked against rechain's
up to the height it reached, and that height against the tip).

UtxoParser is exact only with a generous ``--estimated-utxos``: on the 240-block chain of
benchmarks/tests/test_peers.py its scalable cuckoo filter, sized for 272 or 6,223 outputs (the final
UTXO count, every output) and shrunk before the parse, no longer holds some unspent outputs
(219 or 258 of the 272 UTXOs come out unspent); with 700, or its own mainnet-sized default of
250,000,000, all 272 do. The test runs it with the default; the benchmark with both (the
mismatches it reports are real).

Bitcoin Core's own reindex runs through the oracle harness of ``tests/bitcoin_core``
(``core_reindex``; built by ``tests/core_oracle.build_core_oracle``), checked on tip, best chain
and UTXO count and amount.

Used by ``btc_full.py``, ``btc_full_sizes.py`` and ``benchmarks/tests/test_peers.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
# The repository, for the oracle's builder, which the tests own (``tests/core_oracle.py``).
sys.path.append(str(Path(__file__).resolve().parents[1]))

from common import BIN, run_measured  # noqa: E402

from tests.core_oracle import build_core_oracle as build_core_oracle  # noqa: E402

PEERS = Path(__file__).resolve().parent / "peers"
#: Subcommand of the peers binary, by the name results use.
SUBCOMMANDS = {
    "block_parser": "block-parser",
    "utxo_parser": "utxo-parser",
    "blocks_iterator": "blocks-iterator",
}
#: Counts a peer may report, each also computed from rechain's output by ``rechain_counts``.
COUNTED = (
    "blocks",
    "block_bytes",
    "transactions",
    "inputs",
    "outputs",
    "output_value",
    "inputs_with_value",
    "input_value",
    "unspent_outputs",
    "unspent_value",
    "utxo_count",
    "utxo_value",
)
MB = 1e6


def build() -> Path:
    """The release binary, from the cache when its sources are unchanged."""
    done = subprocess.run(
        ["bash", str(PEERS / "build.sh")], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"peers/build.sh failed:\n{done.stderr[-3000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def run(binary: Path, peer: str, blocks: Path, *extra: str) -> dict[str, Any]:
    """One peer on ``blocks``: its JSON, plus the child's CPU seconds (user + system over all
    its threads, as the kernel accounted them at exit), peak RSS (sampled: the kernel's
    ``ru_maxrss`` of a child counts the forking Python's pages) and MB/s of wall and of CPU."""
    result = run_json([str(binary), SUBCOMMANDS[peer], str(blocks), *extra])
    result["mb_per_s"] = result["block_bytes"] / result["wall_s"] / MB
    result["mb_per_cpu_s"] = result["block_bytes"] / result["cpu_s"] / MB
    return result


def core_reindex(binary: Path, blocks: Path, tip_hash: str, threads: int) -> dict[str, Any]:
    """Bitcoin Core's ``-reindex`` of ``blocks`` (copied into a fresh data directory with its
    ``xor.dat``) as a node runs it: ``-assumevalid`` at the tip, so scripts are checked only in
    the last blocks. ``wall_s`` is Core's own import time, without the harness's copy."""
    result = run_json(
        [
            str(binary),
            "--network",
            "regtest",
            "--blocks",
            str(blocks),
            "--assumevalid",
            tip_hash,
            "--threads",
            str(threads),
        ]
    )
    result["wall_s"] = result["import_seconds"]
    return result


def run_json(cmd: list[str]) -> dict[str, Any]:
    """A child that prints one JSON object: that object, with its process wall and CPU
    seconds, cores used, peak RSS and the host's steal while it ran."""
    done, rss, elapsed = run_measured(cmd)
    result: dict[str, Any] = json.loads(done.stdout)
    result["process_wall_s"] = elapsed
    result["cpu_s"] = rss.cpu_s
    result["cores_used"] = rss.cpu_s / elapsed
    result["peak_rss_mib"] = rss.peak_root / 2**20
    result["steal_s"] = rss.steal_s
    return result


def rechain_counts(data: Path, max_height: int | None = None) -> dict[str, Any]:
    """The peers' counts computed from a full reindex's tables (best chain only, optionally up
    to ``max_height``) and its UTXO set (``rechain btc status``)."""
    from rechain.pipeline.query import run_query

    cut = "" if max_height is None else f" AND height <= {int(max_height)}"

    def row(sql: str) -> tuple[Any, ...]:
        return tuple(int(v or 0) for v in run_query(data, sql)[1][0])

    blocks, block_bytes, txs, inputs, outputs, output_value = row(
        "SELECT count(*), sum(size), sum(n_tx), sum(n_inputs), sum(n_outputs), "
        f"sum(output_value) FROM blocks WHERE in_best_chain{cut}"
    )
    with_value, input_value = row(
        "SELECT sum(n_in), sum(input_value) FROM transactions "
        f"WHERE in_best_chain AND NOT is_coinbase{cut}"
    )
    unspent, unspent_value = row(
        f"SELECT count(*), sum(value) FROM outputs WHERE in_best_chain AND NOT spent{cut}"
    )
    counts = {
        "blocks": blocks,
        "block_bytes": block_bytes,
        "transactions": txs,
        "inputs": inputs,
        "outputs": outputs,
        "output_value": output_value,
        "inputs_with_value": with_value,
        "input_value": input_value,
        "unspent_outputs": unspent,
        "unspent_value": unspent_value,
    }
    if max_height is None:
        status = json.loads(
            subprocess.run(
                [str(BIN), "btc", "status", "--data", str(data), "--json"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        counts["utxo_count"] = int(status["utxo_count"])
        counts["utxo_value"] = int(status["total_amount"])
        counts["tip_height"] = int(status["tip_height"])
        counts["tip_hash"] = status["tip_hash"]
    return counts


def check(peer: str, result: dict[str, Any], data: Path, ours: dict[str, int]) -> dict[str, Any]:
    """Every count the peer reported against rechain's (``ours``: ``rechain_counts(data)``):
    ``{"ok", "mismatches", "compared"}``. blocks_iterator is compared up to the height it
    reached, which must be the tip less its ``max_reorg``."""
    mismatches = []
    if peer == "blocks_iterator":
        max_height = int(result["max_height"])
        if max_height != ours["tip_height"] - int(result["max_reorg"]):
            mismatches.append(
                f"max_height: {max_height} != tip {ours['tip_height']} - max_reorg "
                f"{result['max_reorg']}"
            )
        ours = rechain_counts(data, max_height)
    compared = {}
    for key in COUNTED:
        if key in result:
            compared[key] = {"peer": result[key], "rechain": ours[key]}
            if int(result[key]) != ours[key]:
                mismatches.append(f"{key}: peer {result[key]} != rechain {ours[key]}")
    if not compared:
        mismatches.append("the peer reported none of the compared counts")
    return {"ok": not mismatches, "mismatches": mismatches, "compared": compared}
