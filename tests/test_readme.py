"""The README as written: its table reference is the registry's (every column documented, the
section current), and its commands run as written on small generated chains laid out as
`make demo` lays out `demo/` (Bitcoin, Ethereum) and as its Flow walkthrough does, each query
returning rows.

The README's paths (`demo/...`, `configs/local-demo.toml`, `/tmp/...`) are mapped into a
temporary folder; `DATA` in the Ethereum and Flow examples is that chain's data folder.
Commands on a real node's or a cluster's paths (`~/.bitcoin`, `/data/...`, `HEAD`) are not run.
"""

from __future__ import annotations

import re
import shlex
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from rechain.pipeline.query import connect
from rechain.schemas.readme_tables import DOCUMENTED, render, splice
from rechain.schemas.table_docs import TABLE_DOCS

from tests.conftest import REPO, cli

README = REPO / "README.md"
#: Commands that build the data folders and the exports the queries read: the fixture runs them
#: (as the README or `make demo` does), the tests do not run them again.
BUILDERS = (
    "gen ", "btc reindex ", "eth import ", "flow replay ", "flow checkpoint stats ",
    "btc dump-utxo ",
)  # fmt: skip
#: Paths only a real node or a cluster has.
ELSEWHERE = ("~/", "/data/", "HEAD")
#: Queries that look for trouble, which the generated chains do not have.
EMPTY_ON_CLEAN_DATA = ("WHERE NOT valid",)
#: The section headings of the example queries (`DATA` is that chain's folder).
SECTIONS = {"Ethereum (`rechain eth import`):": "eth", "Flow:": "flow"}


@dataclass(frozen=True)
class Command:
    line: str
    #: The chain `DATA` stands for where the line uses it.
    chain: str | None


def readme() -> str:
    return README.read_text()


def shell_commands(text: str) -> list[Command]:
    """Every `$R ...` line of the README's ```sh blocks (continuations joined), with the chain
    of the example section it is in."""
    out: list[Command] = []
    chain: str | None = None
    in_sh = False
    pending = ""
    for raw in text.splitlines():
        line = raw.rstrip()
        if line.startswith("```"):
            in_sh = line == "```sh" and not in_sh
            continue
        if not in_sh:
            chain = SECTIONS.get(line, chain if not line.startswith("## ") else None)
            continue
        line = pending + line.strip()
        if line.endswith("\\") and not line.endswith('\\"'):
            pending = line[:-1] + " "
            continue
        pending = ""
        if line.startswith("$R "):
            out.append(Command(line, chain))
    return out


@dataclass(frozen=True)
class Demo:
    root: Path
    data: dict[str, Path]

    def path(self, text: str) -> str:
        """A README path mapped into the demo folder."""
        return re.sub(
            r"(?<![\w/.~])(demo/|configs/|/tmp/)",
            lambda m: f"{self.root}/{m.group(1).strip('/')}/",
            text,
        )

    def argv(self, cmd: Command) -> list[str]:
        line = self.path(cmd.line)
        if cmd.chain is not None:
            line = line.replace("--data DATA ", f"--data {self.data[cmd.chain]} ")

        def substitute(m: re.Match[str]) -> str:
            code, out, err = cli(*shlex.split(m.group(1))[1:])
            assert code == 0, err
            return out.strip().splitlines()[-1]

        line = re.sub(r"\$\((\$R .*?) \| tail -n 1\)", substitute, line)
        return shlex.split(line, comments=True)[1:]


def run_ok(*argv: str | Path) -> str:
    code, out, err = cli(*map(str, argv))
    assert code == 0, (argv, err)
    return out


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    """`demo/` as `make demo` leaves it, smaller: a Bitcoin chain with side branches and an
    orphan in full mode, an Ethereum dev chain in era1 files, both through the demo's job
    configuration; then the README's Flow walkthrough as written."""
    root = tmp_path_factory.mktemp("readme")
    (root / "configs").mkdir()
    (root / "tmp").mkdir()
    shutil.copy(REPO / "configs" / "local-demo.toml", root / "configs" / "local-demo.toml")
    conf = str(root / "configs" / "local-demo.toml")
    d = root / "demo"
    btc = "--blocks 400 --side-branches 2 --orphans 1 --tx-per-block 1:4"
    run_ok("gen", "bitcoin", d / "node", *btc.split())
    run_ok("btc", "reindex", "--config", conf, "--no-progress")
    eth = "--blocks 300 --format era1 --network dev --tx-per-block 0:20"
    run_ok("gen", "eth", d / "eth", *eth.split())
    run_ok("eth", "import", "--config", conf, "--no-progress")
    demo = Demo(root, {"btc": d / "data", "eth": d / "eth-data", "flow": d / "flow-data"})
    flow = [c for c in shell_commands(readme()) if c.line.startswith(("$R gen flow", "$R flow"))]
    assert [c.line.split()[1:3] for c in flow][:3] == [
        ["gen", "flow"],
        ["flow", "replay"],
        ["flow", "checkpoint"],
    ], "the README's Flow walkthrough: gen flow, flow replay, flow checkpoint stats"
    for cmd in flow:
        run_ok(*demo.argv(cmd))
    # The UTXO snapshots and table the README's later commands and queries read.
    for cmd in shell_commands(readme()):
        if cmd.line.startswith("$R btc dump-utxo "):
            run_ok(*demo.argv(cmd))
    yield demo


def test_every_registry_column_is_documented() -> None:
    assert set(TABLE_DOCS) == set(DOCUMENTED)
    for name, table in DOCUMENTED.items():
        cols = [f.name for f in table.schema]
        assert list(TABLE_DOCS[name].columns) == cols, name
        for col, (_, meaning) in TABLE_DOCS[name].columns.items():
            assert meaning.strip(), f"{name}.{col}"


def test_readme_table_reference_is_current() -> None:
    text = readme()
    assert splice(text, render()) == text, (
        "README.md's table reference is stale: run "
        "`.venv/bin/python -m rechain.schemas.readme_tables --write`"
    )


def test_readme_queries_return_rows(demo: Demo) -> None:
    """Every `$R query` line of the README, through the CLI as written, and its SQL through the
    Python API: each returns at least one row."""
    queries = [c for c in shell_commands(readme()) if c.line.startswith("$R query ")]
    chains = {demo.argv(c)[demo.argv(c).index("--data") + 1] for c in queries}
    assert chains == {str(p) for p in demo.data.values()}, "examples for all three chains"
    assert len(queries) >= 20
    for cmd in queries:
        argv = demo.argv(cmd)
        run_ok(*argv)
        sql = argv[-1]
        rows = connect(Path(argv[argv.index("--data") + 1])).sql(sql).fetchall()
        if not any(marker in sql for marker in EMPTY_ON_CLEAN_DATA):
            assert rows, cmd.line
    out = next(a for c in queries if "--out" in (a := demo.argv(c)))
    assert Path(out[out.index("--out") + 1]).stat().st_size > 0


def test_readme_commands_run_as_written(demo: Demo) -> None:
    """The README's other commands on the demo's folders (status, lookups, stages, verify,
    exports, job configurations) exit 0."""
    commands = [
        c
        for c in shell_commands(readme())
        if not c.line.startswith(("$R query ", *(f"$R {b}" for b in BUILDERS[1:])))
        and not c.line.startswith("$R gen ")
        and not any(e in c.line for e in ELSEWHERE)
        and ("demo/" in c.line or "configs/" in c.line)
    ]
    assert any("btc tx" in c.line for c in commands) and any("verify" in c.line for c in commands)
    for cmd in commands:
        run_ok(*demo.argv(cmd))
    # Reruns through the demo's job configuration find nothing new and exit 0.
    for cmd in shell_commands(readme()):
        if cmd.line.startswith("$R btc reindex --config"):
            run_ok(*demo.argv(cmd), "--no-progress")


def test_readme_python_examples(demo: Demo) -> None:
    """The README's Python examples (the API, then the outside tools), paragraph by paragraph
    with the demo's paths; a paragraph whose package is not installed here (polars) is
    skipped."""
    blocks = re.findall(r"```python\n(.*?)```", readme(), re.S)
    assert "from rechain.pipeline.query import connect" in blocks[0]
    scope: dict[str, Any] = {}
    skipped = []
    for block in blocks:
        for paragraph in demo.path(block).split("\n\n"):
            try:
                exec(compile(paragraph, "README.md", "exec"), scope)
            except ModuleNotFoundError as e:
                skipped.append(e.name)
    assert set(skipped) <= {"polars", "pandas"}, skipped
    assert scope["rows"] and scope["table"].num_rows > 0
    # The last of them: DuckDB over the pinned view, and pyarrow's dataset (polars' is replaced).
    assert scope["con"].sql("SELECT count(*) FROM outputs").fetchall()[0][0] > 0
    assert scope["outputs"].count_rows() > 0
