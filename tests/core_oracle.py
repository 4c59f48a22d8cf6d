"""Building the Bitcoin Core oracle (``tests/bitcoin_core``: Core's validation engine,
libbitcoinkernel) with its builder, ``tests/bitcoin_core/build.sh``: the oracle of
tests/test_btc_core_oracle.py, also run by the benchmarks (``benchmarks/peer_parsers.py``
imports it from here; tests never import the benchmarks)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

CORE_HARNESS = Path(__file__).resolve().parent / "bitcoin_core"
CORE_CACHE = Path(
    os.environ.get(
        "RECHAIN_BITCOIN_CORE_CACHE", Path.home() / ".cache" / "rechain" / "bitcoin_core"
    )
)


def build_core_oracle() -> Path:
    """Bitcoin Core's validation engine as a binary, from its cache unless its sources changed
    (the first build is 10-25 minutes of C++)."""
    done = subprocess.run(
        ["nice", "-n", "10", "bash", str(CORE_HARNESS / "build.sh"), str(CORE_CACHE)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"tests/bitcoin_core/build.sh failed:\n{done.stderr[-3000:]}")
    return Path(done.stdout.strip().splitlines()[-1])
