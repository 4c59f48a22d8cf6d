"""The publish stage's bookkeeping for incremental runs: which off-chain groups a rerun keeps
and which parts it writes again, and spend prints that add up across runs."""

from __future__ import annotations

from rechain.pipeline.stages.bitcoin.publish import (
    OFFCHAIN_GROUP_PARTS,
    _add_prints,
    _offchain_groups,
)


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
