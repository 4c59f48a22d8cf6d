"""The house rules of the Python tree, read from the source's imports: no import circles, and a
stage imports the engine, the runtime, the store and its own chain's data modules, never a
sibling stage or a command."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Top-level folders mapped onto the ``rechain`` namespace (pyproject's ``package-dir``).
PACKAGES = {
    "pipeline": "rechain.pipeline",
    "workers": "rechain.workers",
    "schemas": "rechain.schemas",
}
CHAINS = ("bitcoin", "flow", "ethereum")
#: Modules that run a command (argument handling, printing, a whole pipeline run): stages never
#: import them.
COMMANDS = {
    "rechain.pipeline.cli",
    "rechain.pipeline.bitcoin.reindex",
    "rechain.pipeline.bitcoin.status",
    "rechain.pipeline.ethereum.importer",
    "rechain.pipeline.ethereum.export",
    "rechain.pipeline.flow.replay",
    "rechain.pipeline.stage_report",
    "rechain.pipeline.verify",
}


def _modules() -> dict[str, Path]:
    found = {}
    for folder, package in PACKAGES.items():
        for path in (ROOT / folder).rglob("*.py"):
            if "native" in path.parts or "__pycache__" in path.parts:
                continue
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            found[".".join([package, *parts])] = path
    return found


MODULES = _modules()


def _imports(path: Path) -> set[str]:
    """The project modules ``path`` imports anywhere (lazy imports included), but for imports
    made only for type checking."""
    tree = ast.parse(path.read_text())
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typing_only.update(id(n) for n in ast.walk(node))
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        for name in names:
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name and name.startswith("rechain."):
                out.add(name)
    return out


GRAPH = {m: _imports(p) - {m} for m, p in MODULES.items()}


def _is_package_of(a: str, b: str) -> bool:
    """Whether ``a`` is a package holding ``b`` (importing ``b`` imports ``a`` first)."""
    return b.startswith(a + ".")


def _circles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in GRAPH[v]:
            if _is_package_of(w, v):
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    return out


def test_the_rules_see_the_tree() -> None:
    """The checks below read real modules and real imports (a rule over nothing passes)."""
    assert len(MODULES) > 60
    stages = [m for m in MODULES if ".stages." in m]
    assert len(stages) >= 10
    assert "rechain.pipeline.engine.driver" in GRAPH["rechain.pipeline.bitcoin.stages.bodies"]


def test_no_import_circles() -> None:
    assert _circles() == []


@pytest.mark.parametrize("chain", CHAINS)
def test_a_stage_imports_no_sibling_stage_no_command_no_other_chain(chain: str) -> None:
    prefix = f"rechain.pipeline.{chain}.stages."
    stages = sorted(m for m in MODULES if m.startswith(prefix))
    assert stages
    wrong = {}
    for stage in stages:
        bad = sorted(
            dep
            for dep in GRAPH[stage]
            if dep.startswith(prefix)
            or dep in COMMANDS
            or any(
                dep.startswith(f"rechain.pipeline.{other}") for other in CHAINS if other != chain
            )
        )
        if bad:
            wrong[stage] = bad
    assert wrong == {}


def test_ray_or_threads_is_decided_in_the_runtime_only() -> None:
    """The rules that send work to Ray or threads (``use_ray``, the partitioned chain state)
    and starting Ray are called from ``pipeline/runtime/`` only: stages ask the run's
    executor."""
    rules = ("use_ray(", "ensure_ray(", "_partitioned(", "PARTITIONED_ENV")
    found = [
        (m, rule)
        for m, path in MODULES.items()
        if not m.startswith("rechain.pipeline.runtime.")
        for rule in rules
        if rule in path.read_text()
    ]
    assert found == []
    runtime = (ROOT / "pipeline" / "runtime" / "executor.py").read_text()
    assert all(rule in runtime for rule in rules[:3])
