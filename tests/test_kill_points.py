"""kill -9 at every commit boundary, by name: each point of ``fault_injection.KILL_POINTS`` is
run deterministically (``RECHAIN_KILL_AT``), the killed command rerun to completion, and what
it left compared with an uninterrupted run's (the ``rechain verify`` digest, ``verify`` ok; the
checkpoint files byte for byte; the checkpoint stats' tables row for row).

Each scenario (a small generated chain and one command) declares the points its command
passes and at which passes it is killed: the first, and for a point passed many times also a
later one (a resume with some commits already made). A reference run per scenario, shared by
the module, traces the points it passes (``RECHAIN_KILL_TRACE``): a point that stops being
passed, or one passed but not declared, fails, and every registered point is killed in some
scenario."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from rechain.pipeline.store.datadir import DataDir
from rechain.pipeline.store.table_view import current_tables
from rechain.pipeline.verify import digest, verify
from rechain.schemas import bitcoin as ds
from rechain.schemas import flow as fs
from rechain.schemas import rocksdb as layout
from rechain.workers.fault_injection import KILL_POINTS, KILL_TRACE_ENV, kill_point

from tests import conftest
from tests.conftest import cli, cli_json, gen_chain, reindex, run_killed_at

#: The last pass of a point (the count the reference run traced).
LAST = -1
#: Each meta key that records a published generation, and the tables it names: what a query of
#: the folder reads, so a kill must never leave one recorded but gone.
RECORDED_GENERATIONS = (
    (layout.META_BTC_GENERATION, (ds.HEADERS,)),
    (layout.META_BTC_FULL_GENERATION, (ds.BLOCKS, ds.TRANSACTIONS, ds.INPUTS, ds.OUTPUTS)),
    (fs.META_FLOW_GENERATION, (fs.TRIE_UPDATES, fs.REGISTERS)),
)

#: Per scenario, every point its command passes, with the passes it is killed at (none: the
#: point is killed in another scenario that reaches it the same way).
SCENARIOS: dict[str, dict[str, tuple[int, ...]]] = {
    "btc_headers": {
        "scan.shard_committed": (1, LAST),
        "link.index_reset": (1,),
        "link.index_ingested": (1,),
        "link.published": (1,),
        "link.summary_written": (1,),
        "store.generation_staged": (1,),
        "store.generation_renamed": (1,),
        "engine.stage_checkpointed": (1, LAST),
        "store.view_switched": (1,),
    },
    "btc_full": {
        "scan.shard_committed": (),
        "link.index_reset": (),
        "link.index_ingested": (),
        "link.published": (),
        "link.summary_written": (),
        "bodies.part_renamed": (1, LAST),
        "bodies.part_registered": (1, LAST),
        "chain_state.spends_written": (1,),
        "chain_state.applied": (1,),
        # Pass 1 is the headers (link); then blocks, transactions, inputs, outputs.
        "store.generation_staged": (2, LAST),
        "store.generation_renamed": (2, LAST),
        "publish.outputs_shared": (1,),
        "publish.manifest_written": (1,),
        "indexes.sst_written": (1,),
        "indexes.index_reset": (1,),
        "indexes.sst_ingested": (1,),
        "indexes.record_written": (1,),
        "indexes.generations_removed": (1,),
        "indexes.summary_written": (1,),
        # After the bodies' checkpoint, and after the publish's.
        "engine.stage_checkpointed": (3, 5),
        "store.view_switched": (1,),
    },
    # A full reindex checking scripts that finds the block at 150 invalid: runs checked, the
    # link stage invalidated, the chain state unwound to 149, everything after redone.
    "btc_scripts": {
        "scan.shard_committed": (),
        "link.index_reset": (),
        "link.index_ingested": (LAST,),
        "link.published": (),
        "link.summary_written": (),
        "chain_state.spends_written": (),
        "chain_state.applied": (),
        "scripts.run_checked": (1, LAST),
        "chain_state.unwound": (1,),
        "store.generation_staged": (),
        "store.generation_renamed": (),
        "publish.outputs_shared": (),
        "publish.manifest_written": (),
        "indexes.sst_written": (),
        "indexes.index_reset": (),
        "indexes.sst_ingested": (),
        "indexes.record_written": (),
        "indexes.generations_removed": (),
        "indexes.summary_written": (),
        "engine.stage_checkpointed": (),
        "store.view_switched": (),
    },
    # A full reindex of a folder indexed before a 6-deep reorg: unwinds, relinks, republishes
    # keeping old segments, and updates the tx index.
    "btc_reorg": {
        "scan.shard_committed": (),
        "link.index_reset": (),
        "link.index_ingested": (),
        "link.published": (),
        "link.summary_written": (),
        "bodies.part_renamed": (),
        "bodies.part_registered": (),
        "chain_state.unwound": (1,),
        "chain_state.spends_written": (),
        "chain_state.applied": (),
        "store.generation_staged": (LAST,),
        "store.generation_renamed": (LAST,),
        "publish.outputs_shared": (1,),
        "publish.manifest_written": (1,),
        "indexes.entries_updated": (1,),
        "indexes.record_written": (1,),
        "indexes.generations_removed": (),
        "indexes.summary_written": (),
        "engine.stage_checkpointed": (),
        "store.view_switched": (),
    },
    "flow_replay": {
        "flow_replay.checkpoint_writing": (1, LAST),
        "flow_replay.checkpoint_written": (1, LAST),
        # trie_updates, then registers and register_hashes.
        "store.generation_staged": (1, LAST),
        "store.generation_renamed": (1, LAST),
        "flow_publish.registers_reset": (1,),
        "flow_publish.registers_ingested": (1,),
        "flow_publish.summary_written": (1,),
        "engine.stage_checkpointed": (1, LAST),
        "store.view_switched": (1,),
    },
    "flow_checkpoint_read": {
        "flow_checkpoint.read_staged": (1,),
        "store.generation_staged": (1, LAST),
        "store.generation_renamed": (1, LAST),
        "flow_publish.registers_reset": (1,),
        "flow_publish.registers_ingested": (1,),
        "flow_publish.summary_written": (1,),
        "flow_checkpoint.read_recorded": (1,),
        "store.view_switched": (),
    },
    "flow_checkpoint_stats": {
        "flow_checkpoint.stats_gathered": (1,),
        # The owners table, then the three small ones.
        "store.generation_staged": (1, LAST),
        "store.generation_renamed": (1, LAST),
        "flow_checkpoint.stats_recorded": (1,),
        "store.view_switched": (1,),
    },
    "flow_checkpoint_write": {
        "flow_checkpoint.writing": (1,),
        "flow_checkpoint.written": (1,),
    },
    # A snapshot at a past height of the btc_full chain, spilling at a tiny budget.
    "btc_dump_utxo": {"utxo_dump.written": (1,)},
    # Three era1 files, one unit each.
    "eth_import": {
        "eth.parts_renamed": (2,),
        "eth.index_ingested": (LAST,),
        "eth.unit_committed": (1, LAST),
        "engine.stage_checkpointed": (1,),
        "store.view_switched": (1,),
    },
}


@dataclass
class Scenario:
    """One command over small generated inputs: ``prepare`` gives a folder to run it on (a
    data folder, or an output folder), ``cmd`` the command for that folder, ``state`` what
    must equal the uninterrupted run's."""

    prepare: Callable[[Path], Path]
    cmd: Callable[[Path], list[str]]
    state: Callable[[Path], Any]
    #: Filled by the reference run.
    want: Any = None
    passes: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0

    def run(self, folder: Path, env: dict[str, str] | None = None) -> None:
        # A limit scaled to the work: many times what the reference run took.
        limit = max(120.0, 30 * self.seconds)
        proc = subprocess.run(
            self.cmd(folder), capture_output=True, text=True, env=env, timeout=limit
        )
        assert proc.returncode == 0, proc.stderr[-3000:]


def data_state(data: Path) -> dict[str, str]:
    checked = verify(data)
    assert checked["ok"], checked["problems"]
    with DataDir(data, readonly=True) as d:
        return digest(d)


def checkpoint_files(folder: Path) -> dict[str, str]:
    """Every file of a checkpoint folder and its hash (a killed writer's leftovers show)."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def flow_state(data: Path) -> dict[str, Any]:
    return {"data": data_state(data), "checkpoints": checkpoint_files(flow_checkpoints(data))}


def flow_checkpoints(data: Path) -> Path:
    return data.with_name(data.name + "-checkpoints")


def stats_state(data: Path) -> dict[str, Any]:
    """The checkpoint stats' summary (its generation aside: a rerun after the summary was
    recorded publishes the next one) and tables row for row, one generation of each kept."""
    with DataDir(data, readonly=True) as d:
        summary = d.meta_get(fs.META_FLOW_CHECKPOINT_STATS)
        generations = {
            t: sorted(p.name for p in d.parquet_dir(t).iterdir())
            for t in fs.CHECKPOINT_STATS_TABLES
        }
    assert all(len(g) == 1 for g in generations.values()), generations
    rows = {}
    for t in fs.CHECKPOINT_STATS_TABLES:
        code, out, err = cli(
            "query", "--data", data, f"SELECT * FROM {t} ORDER BY ALL", "--format", "csv"
        )
        assert code == 0, err
        rows[t] = hashlib.sha256(out.encode()).hexdigest()
    summary.pop("generation")
    return {"summary": summary, "rows": rows}


def empty_folder(name: str) -> Callable[[Path], Path]:
    return lambda tmp: tmp / name


def copy_of(base: Path) -> Callable[[Path], Path]:
    def prepare(tmp: Path) -> Path:
        data = tmp / "data"
        shutil.copytree(base, data, symlinks=True)  # the table view's links stay links
        return data

    return prepare


def cli_cmd(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "rechain.pipeline.cli", *(str(a) for a in args)]


class Scenarios:
    """Builds each scenario's inputs and reference run once, on first use."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.built: dict[str, Scenario] = {}

    def get(self, name: str) -> Scenario:
        if name not in self.built:
            scenario = getattr(self, name)()
            ref = scenario.prepare(self.root / f"{name}-ref")
            trace = self.root / f"{name}.trace"
            t0 = time.monotonic()
            scenario.run(ref, {**os.environ, KILL_TRACE_ENV: str(trace)})
            scenario.seconds = time.monotonic() - t0
            scenario.passes = Counter(trace.read_text().split() if trace.exists() else [])
            scenario.want = scenario.state(ref)
            self.built[name] = scenario
        return self.built[name]

    def _btc_chain(self) -> Path:
        root = self.root / "btc-chain"
        if not root.exists():
            gen_chain(
                root,
                "--blocks",
                "260",
                "--tx-per-block",
                "1:12",
                "--file-size",
                "120K",
                "--side-branches",
                "3",
                "--orphans",
                "2",
                "--seed",
                "11",
            )
        return root / "blocks"

    def _btc(self, blocks: Path, mode: str, base: Path | None, *extra: str) -> Scenario:
        def cmd(data: Path) -> list[str]:
            return conftest.reindex_cmd(
                blocks, data, "--mode", mode, "--workers", "2", "--shard-size", "64K", *extra
            )

        prepare = empty_folder("data") if base is None else copy_of(base)
        return Scenario(prepare, cmd, data_state)

    def btc_headers(self) -> Scenario:
        return self._btc(self._btc_chain(), "headers", None)

    def btc_full(self) -> Scenario:
        return self._btc(self._btc_chain(), "full", None)

    def btc_scripts(self) -> Scenario:
        """A full reindex checking scripts, small runs (a tiny budget), of a chain whose block
        at 150 carries a wrong signature: runs are committed, then the block is found invalid
        and the chain state unwinds to 149."""
        root = self.root / "scripts-chain"
        gen_chain(
            root,
            "--blocks",
            "200",
            "--tx-per-block",
            "2:8",
            "--file-size",
            "120K",
            "--seed",
            "12",
            "--bad-signature",
            "150",
        )
        return self._btc(root / "blocks", "full", None, "--scripts", "--memory-budget", "2M")

    def btc_reorg(self) -> Scenario:
        root = self.root / "reorg-chain"
        facts = gen_chain(
            root,
            "--blocks",
            "260",
            "--tx-per-block",
            "1:12",
            "--file-size",
            "120K",
            "--seed",
            "11",
            "--reorg",
            "6",
        )
        branch, _ = facts["reorg_records"]
        # Where the node stood before it wrote the branch: the file and offset of its first
        # record (the last records in file order).
        headers = self.root / "reorg-headers"
        reindex(root / "blocks", headers, "--mode", "headers")
        rows = cli_json(
            "query",
            "--data",
            headers,
            'SELECT file, "offset" FROM headers ORDER BY file, "offset"',
            "--format",
            "json",
        )
        cut_file, cut_offset = int(rows[-branch]["file"]), int(rows[-branch]["offset"])
        before = self.root / "reorg-before"
        before.mkdir()
        shutil.copy(root / "blocks" / "xor.dat", before / "xor.dat")
        for f in sorted((root / "blocks").glob("blk*.dat")):
            if int(f.name[3:8]) < cut_file:
                shutil.copy(f, before / f.name)
            elif int(f.name[3:8]) == cut_file:
                (before / f.name).write_bytes(f.read_bytes()[:cut_offset])
        base = self.root / "reorg-base"
        reindex(before, base, "--mode", "full")
        return self._btc(root / "blocks", "full", base)

    def _flow_wal(self) -> Path:
        wal = self.root / "wal"
        if not wal.exists():
            code, _, err = cli(
                "gen",
                "flow",
                wal,
                "--updates",
                "600",
                "--registers-per-update",
                "8",
                "--segment-size",
                "32K",
                "--seed",
                "9",
            )
            assert code == 0, err
        return wal

    def flow_replay(self) -> Scenario:
        wal = self._flow_wal()

        def cmd(data: Path) -> list[str]:
            return cli_cmd(
                "flow",
                "replay",
                "--wal",
                wal,
                "--data",
                data,
                "--no-progress",
                "--workers",
                "2",
                "--checkpoint-every",
                "3",
                "--checkpoint-dir",
                flow_checkpoints(data),
            )

        return Scenario(empty_folder("data"), cmd, flow_state)

    def _flow_ref(self) -> Path:
        """The uninterrupted replay's data folder (its checkpoints beside it)."""
        self.get("flow_replay")
        return self.root / "flow_replay-ref" / "data"

    def flow_checkpoint_read(self) -> Scenario:
        cps = flow_checkpoints(self._flow_ref())
        return Scenario(
            empty_folder("data"),
            lambda data: cli_cmd("flow", "checkpoint", "read", "--dir", cps, "--data", data),
            data_state,
        )

    def flow_checkpoint_stats(self) -> Scenario:
        cps = flow_checkpoints(self._flow_ref())
        return Scenario(
            empty_folder("data"),
            lambda data: cli_cmd("flow", "checkpoint", "stats", "--dir", cps, "--data", data),
            stats_state,
        )

    def flow_checkpoint_write(self) -> Scenario:
        state = self._flow_ref()
        return Scenario(
            empty_folder("out"),
            lambda out: cli_cmd("flow", "checkpoint", "write", "--data", state, "--out", out),
            checkpoint_files,
        )

    def btc_dump_utxo(self) -> Scenario:
        """The snapshot file (and nothing else in its folder) equals the uninterrupted run's;
        the data folder it reads is the btc_full reference run's, whose state is checked too."""
        self.get("btc_full")
        data = self.root / "btc_full-ref" / "data"
        before = data_state(data)

        def cmd(out: Path) -> list[str]:
            return cli_cmd(
                "btc", "dump-utxo", "--data", data, "--height", "200", "--memory-budget", "8K",
                "--out", out / "at-200.utxo",
            )  # fmt: skip

        def state(out: Path) -> dict[str, Any]:
            assert data_state(data) == before
            return checkpoint_files(out)

        return Scenario(empty_folder("out"), cmd, state)

    def eth_import(self) -> Scenario:
        root = self.root / "eth-chain"
        code, _, err = cli(
            "gen",
            "eth",
            root,
            "--blocks",
            "16500",
            "--network",
            "sepolia",
            "--format",
            "era1",
            "--tx-per-block",
            "0:1",
            "--seed",
            "3",
        )
        assert code == 0, err

        def cmd(data: Path) -> list[str]:
            return cli_cmd(
                "eth",
                "import",
                "--era1",
                root / "era1",
                "--data",
                data,
                "--network",
                "sepolia",
                "--no-pow",
                "--no-progress",
                "--workers",
                "1",
            )

        return Scenario(empty_folder("data"), cmd, data_state)


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory: pytest.TempPathFactory) -> Scenarios:
    return Scenarios(tmp_path_factory.mktemp("kill-points"))


def test_every_registered_point_is_killed_in_some_scenario() -> None:
    assert len(set(KILL_POINTS)) == len(KILL_POINTS)
    killed = {p for points in SCENARIOS.values() for p, nths in points.items() if nths}
    assert killed == set(KILL_POINTS)


def test_a_point_not_registered_fails_the_run_that_passes_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    trace = tmp_path / "trace"
    monkeypatch.setenv(KILL_TRACE_ENV, str(trace))
    with pytest.raises(ValueError, match="not in fault_injection.KILL_POINTS"):
        kill_point("link.somewhere_new")
    kill_point("link.published")
    kill_point("link.published")
    assert trace.read_text().split() == ["link.published"] * 2


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_uninterrupted_run_passes_exactly_the_declared_points(
    scenarios: Scenarios, name: str
) -> None:
    scenario = scenarios.get(name)
    assert set(scenario.passes) == set(SCENARIOS[name])
    for point, nths in SCENARIOS[name].items():
        # A later pass is one the run reaches, and a last pass is not the first.
        assert all(scenario.passes[point] >= (2 if n == LAST else n) for n in nths), point


CASES = [
    pytest.param(name, point, nth, id=f"{name}-{point}-{'last' if nth == LAST else nth}")
    for name, points in SCENARIOS.items()
    for point, nths in points.items()
    for nth in nths
]


@pytest.mark.parametrize(("name", "point", "nth"), CASES)
def test_a_run_killed_at_a_point_reruns_to_the_uninterrupted_state(
    scenarios: Scenarios, tmp_path: Path, name: str, point: str, nth: int
) -> None:
    scenario = scenarios.get(name)
    n = scenario.passes[point] if nth == LAST else nth
    folder = scenario.prepare(tmp_path)
    run_killed_at(scenario.cmd(folder), point, n)
    assert_recorded_generations_exist(folder)
    scenario.run(folder)
    assert scenario.state(folder) == scenario.want


def assert_recorded_generations_exist(folder: Path) -> None:
    """What a killed run leaves committed is whole before any rerun: every generation the
    folder's meta records is on disk."""
    if not (folder / "rocksdb").exists():
        return
    with DataDir(folder, readonly=True) as d:
        for key, tables in RECORDED_GENERATIONS:
            gen = d.meta_get(key)
            for table in tables if gen is not None else ():
                where = d.parquet_dir(table) / f"{int(gen):06d}"
                assert where.is_dir(), f"{key!r} records generation {gen}, {where} is gone"
    # What readers see is whole and of one publication: the full tables of one generation.
    view = current_tables(folder)
    assert all(p.is_dir() for p in view.values()), view
    full = {view[t].name for t in (ds.BLOCKS, ds.TRANSACTIONS, ds.INPUTS, ds.OUTPUTS) if t in view}
    assert len(full) <= 1, view
