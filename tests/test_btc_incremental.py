"""The bookkeeping that lets a rerun do only the new blocks' work: which off-chain groups
publish keeps and which parts it writes again, and spend prints that add up across runs. (The
chain state reads coins through the chunks it has applied but not yet committed:
`chain_state::overlay`, tested in Rust.)"""

from __future__ import annotations

import random

import duckdb
import pyarrow as pa
import pytest
from rechain.pipeline.bitcoin.stages.publish import (
    OFFCHAIN_GROUP_PARTS,
    _add_prints,
    _offchain_groups,
    _spent_prints,
)
from rechain.pipeline.errors import RechainError


def placement(prints: dict[str, str]) -> dict[str, object]:
    return {"off": prints}


def test_a_first_run_writes_many_parts_as_one_group_and_few_one_group_each() -> None:
    many = {f"p{i:02d}": str(i) for i in range(OFFCHAIN_GROUP_PARTS + 1)}
    kept, new = _offchain_groups(None, placement(many))
    assert kept == {} and len(new) == 1 and next(iter(new.values())) == many
    few = {"a": "1", "b": "2"}
    kept, new = _offchain_groups(None, placement(few))
    assert kept == {} and new == {"a": {"a": "1"}, "b": {"b": "2"}}


def test_a_group_is_kept_only_while_every_part_holds_the_same_blocks() -> None:
    old = {"g1": {"a": "1", "b": "2"}, "c": {"c": "3"}, "d": {"d": "4"}}
    # b's off-chain blocks changed, d has none left, e is new: g1 is written again with b,
    # each part on its own; c is kept.
    now = {"a": "1", "b": "20", "c": "3", "e": "5"}
    kept, new = _offchain_groups(old, placement(now))
    assert kept == {"c": {"c": "3"}}
    assert new == {"a": {"a": "1"}, "b": {"b": "20"}, "e": {"e": "5"}}
    # Every part of the next manifest is in exactly one group.
    parts = [p for g in {**kept, **new}.values() for p in g]
    assert sorted(parts) == sorted(now)
    # A manifest of an older layout (prints per part, not groups) keeps nothing.
    kept, new = _offchain_groups({"a": "1"}, placement({"a": "1"}))
    assert kept == {} and new == {"a": {"a": "1"}}


def test_spend_prints_add_up() -> None:
    assert _add_prints("3:100", "0:0") == "3:100"
    assert _add_prints("3:100", "2:-7") == "5:93"


def test_spend_prints_per_segment_are_those_of_its_spends() -> None:
    """Each segment's print is the count and hash sum of exactly the spends of its heights,
    as a range join of every spend against every segment defines it: segments with gaps
    between them, one without spends, spends below, between and above every segment."""
    rng = random.Random(7)
    n = 5_000
    spends = pa.table(
        {
            "prev_height": pa.array([rng.randrange(0, 400) for _ in range(n)], pa.uint32()),
            "prev_row": pa.array([rng.randrange(0, 50) for _ in range(n)], pa.uint32()),
        }
    )
    segs = [(10, 49), (50, 50), (51, 120), (130, 199), (200, 260), (300, 300), (390, 395)]
    con = duckdb.connect()
    con.register("spends", spends)
    got = _spent_prints(con, segs, "spends")
    for first, last in segs:
        row = con.execute(
            """SELECT count(*), coalesce(sum(hash(prev_height, prev_row)::HUGEINT), 0)
            FROM spends WHERE prev_height BETWEEN ? AND ?""",
            [first, last],
        ).fetchone()
        assert row is not None
        count, total = row
        inside = sum(first <= h <= last for h in spends.column("prev_height").to_pylist())
        assert count == inside
        assert got[(first, last)] == f"{count}:{total}"
    assert sorted(got) == segs
    with pytest.raises(RechainError, match="overlap"):
        _spent_prints(con, [(10, 49), (40, 60)], "spends")
