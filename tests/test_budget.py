"""The memory budget's shares: declared once, and a stage never holds more than the budget."""

from __future__ import annotations

import ast
from fractions import Fraction
from pathlib import Path

import pytest
from rechain.pipeline.runtime import budget

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("pipeline", sorted(budget.SHARES))
def test_the_shares_a_stage_holds_at_once_fit_in_the_budget(pipeline: str) -> None:
    held = budget.held_at_once(pipeline)
    assert held, pipeline
    over = {stage: str(f) for stage, f in held.items() if f > 1}
    assert over == {}


def test_a_share_within_another_is_smaller() -> None:
    within = [
        (p, n, s) for p, shares in budget.SHARES.items() for n, s in shares.items() if s.within
    ]
    assert within
    for pipeline, name, s in within:
        assert s.within is not None
        assert s.fraction < budget.SHARES[pipeline][s.within].fraction, (pipeline, name)


def test_share_rounds_down_as_the_divisions_it_replaced() -> None:
    b = 3 * (1 << 30) + 12_345
    assert budget.budget_share(b, "bitcoin", "duckdb") == b // 2
    assert budget.budget_share(b, "flow", "forest.node_cache") == b * 3 // 8
    # A share divided among its holders at the call site: b // (32 * 2).
    assert budget.budget_share(b, "bitcoin", "chain_state.chunks") // 2 == b // 64


def test_the_budget_is_divided_only_through_the_table() -> None:
    """No module divides ``memory_budget`` (or a ``budget``) by a number of its own: every
    share is a name in ``budget.SHARES``, each name used somewhere."""
    offenders = []
    used: set[tuple[str, str]] = set()
    for path in (ROOT / "pipeline").rglob("*.py"):
        if path.name == "budget.py":
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.FloorDiv, ast.Mult)):
                left = ast.unparse(node.left)
                if left.endswith("memory_budget") or left == "budget":
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
            if (
                isinstance(node, ast.Call)
                and ast.unparse(node.func).endswith("share")
                and len(node.args) == 3
                and all(isinstance(a, ast.Constant) for a in node.args[1:])
            ):
                used.add((node.args[1].value, node.args[2].value))  # type: ignore[attr-defined]
    assert offenders == []
    declared = {(p, n) for p, shares in budget.SHARES.items() for n in shares}
    assert declared - used == set()
    assert used - declared == set()


def test_rechain_stages_lists_the_shares(tmp_path: Path) -> None:
    from rechain.pipeline.store.datadir import DataDir

    from tests.conftest import cli_json

    with DataDir(tmp_path / "d"):
        pass  # a data folder no stage has run in
    got = cli_json("stages", "--data", tmp_path / "d", "--json")["budget_shares"]
    assert got["bitcoin"]["duckdb"] == "1/2"
    assert {p: set(v) for p, v in got.items()} == {p: set(v) for p, v in budget.SHARES.items()}
    assert sum(Fraction(f) for f in got["eth"].values()) <= 1


def test_rechain_stages_prints_each_run_pipelines_shares(tmp_path: Path) -> None:
    from tests.conftest import cli, gen_chain, reindex

    gen_chain(tmp_path / "node", "--blocks", "30")
    reindex(tmp_path / "node" / "blocks", tmp_path / "d", "--mode", "headers")
    code, out, _ = cli("stages", "--data", tmp_path / "d")
    assert code == 0
    line = next(x for x in out.splitlines() if "memory budget shares" in x)
    assert "scan.results 1/2" in line and "duckdb 1/2" in line
