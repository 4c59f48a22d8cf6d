"""Tests of the benchmarks' own code (charts, projections, the peer parsers' runs).

The benchmarks' modules import each other by bare name (``from common import ...``), so their
folder goes on ``sys.path`` here; the product's tests under ``tests/`` never import them.
"""

from __future__ import annotations

import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1]
if str(BENCHMARKS) not in sys.path:
    sys.path.insert(0, str(BENCHMARKS))
