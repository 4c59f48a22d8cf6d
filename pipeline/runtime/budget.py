"""The memory budget (``--memory-budget``) and the shares of it each pipeline's stages take,
declared once in ``SHARES``.

A stage asks ``budget_share(budget, pipeline, name)`` for its bytes instead of dividing the
budget itself. A share is the whole of what its holders take together: a share held by
several threads or chunks at once is divided among them where it is used. A share marked
``within`` another sizes a piece of that one (a unit's bytes inside the units in flight) and
takes nothing beside it. ``rechain stages`` lists the table; ``tests/test_budget.py`` checks
that the shares a stage holds at once add up to at most the budget, and that no module
divides the budget otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction


@dataclass(frozen=True)
class Share:
    #: The stages (or commands) holding it while they run.
    stages: tuple[str, ...]
    fraction: Fraction
    what: str
    #: The share this one sizes a piece of (it takes nothing beside it).
    within: str | None = None


def _share(stages: str, numerator: int, denominator: int, what: str, **kw: str) -> Share:
    return Share(tuple(stages.split(",")), Fraction(numerator, denominator), what, **kw)


SHARES: dict[str, dict[str, Share]] = {
    "bitcoin": {
        "scan.results": _share("scan", 1, 2, "shard results in flight, a quarter of a shard each"),
        "bodies.units": _share(
            "bodies,chain_state", 1, 2, "body units in flight, four times a unit each"
        ),
        "bodies.unit": _share(
            "bodies,chain_state", 1, 64, "a body unit's block bytes", within="bodies.units"
        ),
        "chain_state.chunks": _share(
            "chain_state", 1, 32, "block bytes of the chunks held while their rows are written"
        ),
        "chain_state.row_groups": _share(
            "chain_state", 1, 16, "the open row groups of the chunks' part writers"
        ),
        "chain_state.rounds": _share(
            "chain_state", 1, 4, "block bytes of a spend-resolution round on Ray"
        ),
        "scripts.runs": _share(
            "scripts", 1, 4, "block bytes and undo records of the script runs in flight"
        ),
        "duckdb": _share("publish,indexes", 1, 2, "DuckDB's buffer pool (it spills past it)"),
        "publish.row_groups": _share("publish", 1, 16, "a published file's open row group"),
        "indexes.txindex": _share("indexes", 1, 8, "the tx index's sorted runs (spilled past it)"),
        "indexes.sst": _share("indexes", 1, 16, "open SST files' filters and indexes"),
        "rocksdb.memtables": _share(
            "scan,link,bodies,chain_state,scripts,publish,indexes",
            1,
            8,
            "RocksDB's memtables (at most 32 MiB, at least 4 MiB: datadir.memtable_bytes)",
        ),  # fmt: skip
        "dump_utxo.rewind": _share(
            "dump-utxo", 1, 2, "the net change of the blocks rewound (spilled past it)"
        ),
        "dump_utxo.rows": _share("dump-utxo", 1, 8, "a utxo Parquet file's rows before writing"),
    },
    "flow": {
        "replay.decoded": _share(
            "replay", 1, 8, "WAL segments decoded on Ray, in flight, 32 MiB each"
        ),
        "forest.node_cache": _share("replay,checkpoint read", 3, 8, "a paged forest's node cache"),
        "forest.node_hold": _share(
            "replay,checkpoint read", 1, 4, "new nodes held before they are paged out"
        ),
        "publish.sst": _share(
            "publish", 1, 16, "open register SST files", within="forest.node_cache"
        ),
        "checkpoint.stream": _share(
            "checkpoint read", 1, 32, "leaves the streamed parts buffer, all threads"
        ),
        "checkpoint.sst": _share("checkpoint read", 1, 16, "open register SST files, all threads"),
        "checkpoint.owners": _share("checkpoint stats", 1, 8, "the owner maps (spilled past it)"),
    },
    "eth": {
        "blocks.units": _share("blocks", 1, 1, "units in flight, five times an era1 file each"),
    },
}


def budget_share(budget: int, pipeline: str, name: str) -> int:
    """Bytes of ``budget`` the share ``name`` of ``pipeline`` takes (rounded down)."""
    f = SHARES[pipeline][name].fraction
    return budget * f.numerator // f.denominator


def held_at_once(pipeline: str) -> dict[str, Fraction]:
    """Each stage's shares together (a share within another is not counted twice)."""
    out: dict[str, Fraction] = {}
    for s in SHARES[pipeline].values():
        if s.within is None:
            for stage in s.stages:
                out[stage] = out.get(stage, Fraction(0)) + s.fraction
    return out


def table() -> dict[str, dict[str, str]]:
    """The shares as ``rechain stages`` lists them: pipeline -> name -> fraction."""
    return {p: {n: str(s.fraction) for n, s in shares.items()} for p, shares in SHARES.items()}
