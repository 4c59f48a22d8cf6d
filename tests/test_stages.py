"""The stage engine: the driver's order, skips, invalidations and ephemeral inputs on small
stages; and the Bitcoin pipeline through it: an unchanged rerun runs only the scan,
``--from-stage`` reruns from the named stage without decoding again, ``rechain stages``
shows each checkpoint, and a run killed in a late stage resumes to the same content."""

from __future__ import annotations

import random
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from rechain.pipeline.engine.driver import Done, Driver, Invalidate, Stage
from rechain.pipeline.errors import RechainError
from rechain.pipeline.store.datadir import DataDir
from rechain.pipeline.verify import digest, verify

from tests.conftest import (
    cli,
    cli_json,
    gen_chain,
    kill_after,
    reindex,
    reindex_cmd,
    run_killed_at,
)


class Log:
    """What the small stages share: a value each commits, and the order they ran in."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        self.values: dict[str, int] = {}
        self.live: set[str] = set()


class Counter(Stage[Log]):
    """Commits ``source + 1`` from the previous stage's value (or from ``seed``)."""

    def __init__(self, name: str, source: str | None, seed: int = 0, **kw: Any) -> None:
        self.name = name
        self.source = source
        self.seed = seed
        for k, v in kw.items():
            setattr(self, k, v)

    def pending(self, ctx: Log) -> bool:
        # The first stage stands for a scan of the input on disk: it always looks.
        return self.source is None

    def output(self, ctx: Log) -> Any:
        return ctx.values.get(self.name)

    def run(self, ctx: Log) -> Done | Invalidate:
        ctx.ran.append(self.name)
        for used in self.uses:
            assert used in ctx.live, f"{self.name} ran without {used} in this process"
        base = ctx.values[self.source] if self.source else self.seed
        ctx.values[self.name] = base + 1
        if self.ephemeral:
            ctx.live.add(self.name)
        return Done(rows=base + 1, height=base)


def pipeline(seed: int = 0) -> list[Stage[Log]]:
    return [
        Counter("a", None, seed),
        Counter("b", "a", ephemeral=True),
        Counter("c", "b", uses=("b",)),
        Counter("d", "c", uses=("b",)),
    ]


def test_driver_skips_unchanged_stages_and_reruns_changed_ones(tmp_path: Path) -> None:
    with DataDir(tmp_path / "d") as data:
        ctx = Log()
        Driver("toy", pipeline(), data).run(ctx)
        assert ctx.ran == ["a", "b", "c", "d"]
        assert ctx.values == {"a": 1, "b": 2, "c": 3, "d": 4}
        # Same input in a new process (nothing live): only the first stage looks at it.
        ctx2 = Log()
        ctx2.values = dict(ctx.values)
        Driver("toy", pipeline(), data).run(ctx2)
        assert ctx2.ran == ["a"]
        # A new seed changes a's output: everything after it runs again, in order.
        ctx3 = Log()
        ctx3.values = dict(ctx.values)
        driver = Driver("toy", pipeline(seed=10), data)
        driver.run(ctx3)
        assert ctx3.ran == ["a", "b", "c", "d"] and ctx3.values["d"] == 14
        cp = driver.checkpoint("d")
        assert cp is not None and cp["rows"] == 14 and cp["runs"] == 2


def test_from_stage_runs_the_ephemeral_stage_it_reads_first(tmp_path: Path) -> None:
    with DataDir(tmp_path / "d") as data:
        ctx = Log()
        Driver("toy", pipeline(), data).run(ctx)
        ctx2 = Log()
        ctx2.values = dict(ctx.values)
        Driver("toy", pipeline(), data).run(ctx2, from_stage="d")
        # d reads b's in-process output: b runs first, c (whose input is unchanged) does not.
        assert ctx2.ran == ["a", "b", "d"]
        with pytest.raises(RechainError, match="no stage 'nope'"):
            Driver("toy", pipeline(), data).run(Log(), from_stage="nope")


def test_invalidate_reruns_from_the_named_stage_and_is_bounded(tmp_path: Path) -> None:
    class Once(Counter):
        asked = False

        def run(self, ctx: Log) -> Done | Invalidate:
            if not Once.asked:
                Once.asked = True
                ctx.ran.append(self.name + "!")
                return Invalidate("a", "found something a must see")
            return super().run(ctx)

    class Never(Counter):
        def run(self, ctx: Log) -> Done | Invalidate:
            return Invalidate("a", "forever")

    with DataDir(tmp_path / "d") as data:
        ctx = Log()
        stages: list[Stage[Log]] = [Counter("a", None), Once("b", "a")]
        Driver("toy", stages, data).run(ctx)
        assert ctx.ran == ["a", "b!", "a", "b"]
        from rechain.pipeline.engine import driver as engine

        old = engine.MAX_ROUNDS
        engine.MAX_ROUNDS = 3
        try:
            with pytest.raises(RechainError, match="did not settle"):
                Driver("loop", [Counter("a", None), Never("b", "a")], data).run(Log())
        finally:
            engine.MAX_ROUNDS = old


def test_from_stage_resets_while_an_invalidation_only_unwinds(tmp_path: Path) -> None:
    """A stage with incremental state (the chain state) keeps it when an earlier stage is
    invalidated, and starts from nothing only on ``--from-stage``."""

    class Kept(Counter):
        def unwind(self, ctx: Log, data: DataDir) -> None:
            ctx.ran.append(f"{self.name}.unwind")

        def reset(self, ctx: Log, data: DataDir) -> None:
            ctx.ran.append(f"{self.name}.reset")

    class Asks(Counter):
        asked = False

        def run(self, ctx: Log) -> Done | Invalidate:
            if not Asks.asked:
                Asks.asked = True
                return Invalidate("b", "b must look again")
            return super().run(ctx)

    with DataDir(tmp_path / "d") as data:
        ctx = Log()
        stages: list[Stage[Log]] = [Counter("a", None), Kept("b", "a"), Asks("c", "b")]
        Driver("toy", stages, data).run(ctx)
        assert ctx.ran == ["a", "b", "b.unwind", "b", "c"]
        ctx2 = Log()
        ctx2.values = dict(ctx.values)
        Driver("toy", stages, data).run(ctx2, from_stage="b")
        assert ctx2.ran == ["b.reset", "a", "b", "c"]


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("stages")
    gen_chain(
        root / "node",
        "--blocks",
        "500",
        "--side-branches",
        "2",
        "--orphans",
        "1",
        "--tx-per-block",
        "1:5",
        "--file-size",
        "100000",
        "--seed",
        "9",
    )
    data = root / "data"
    reindex(root / "node" / "blocks", data, "--mode", "full")
    return root / "node" / "blocks", data


def content(data: Path) -> dict[str, str]:
    with DataDir(data, readonly=True) as d:
        return digest(d)


def test_an_unchanged_rerun_runs_only_the_scan(chain: tuple[Path, Path]) -> None:
    blocks, data = chain
    before = content(data)
    again = reindex(blocks, data, "--mode", "full")
    assert again["run"]["stages_run"] == ["scan"]
    assert content(data) == before


def test_from_stage_publish_republishes_without_decoding(
    chain: tuple[Path, Path], tmp_path: Path
) -> None:
    blocks, src = chain
    data = tmp_path / "data"
    shutil.copytree(src, data)
    before = content(data)
    gen = cli_json("stages", "--data", data, "--json")["pipelines"]["bitcoin"]
    publish = next(s for s in gen if s["stage"] == "publish")
    again = reindex(blocks, data, "--mode", "full", "--from-stage", "publish")
    # The chain state is kept in RocksDB: republishing neither decodes nor reapplies blocks.
    assert again["run"]["stages_run"] == ["scan", "publish", "indexes"]
    assert again["run"].get("units", 0) == 0
    assert content(data) == before
    after = cli_json("stages", "--data", data, "--json")["pipelines"]["bitcoin"]
    republished = next(s for s in after if s["stage"] == "publish")
    assert republished["runs"] == publish["runs"] + 1
    assert republished["detail"]["generation"] == publish["detail"]["generation"] + 1
    # A header-mode folder has no publish stage to rerun (a full folder refuses header mode).
    code, _, err = cli(
        "btc",
        "reindex",
        "--blocks",
        blocks,
        "--data",
        tmp_path / "headers-only",
        "--network",
        "regtest",
        "--mode",
        "headers",
        "--from-stage",
        "publish",
        "--no-progress",
    )
    assert code == 2 and "no stage 'publish' in the bitcoin pipeline" in err


def test_stages_lists_every_checkpoint(chain: tuple[Path, Path]) -> None:
    _, data = chain
    report = cli_json("stages", "--data", data, "--json")["pipelines"]["bitcoin"]
    assert [s["stage"] for s in report] == [
        "scan",
        "link",
        "bodies",
        "chain_state",
        "publish",
        "indexes",
    ]
    status = cli_json("btc", "status", "--data", data, "--json")
    by_name = {s["stage"]: s for s in report}
    assert all(s["state"] == "done" and s["last_run"] for s in report)
    assert by_name["link"]["height"] == status["tip_height"]
    assert by_name["link"]["rows"] == status["blocks_indexed"]
    assert by_name["chain_state"]["height"] == status["tip_height"]
    assert by_name["indexes"]["rows"] == status["utxo_count"]
    assert by_name["publish"]["detail"]["tables"] == status["tables"]
    code, out, _ = cli("stages", "--data", data)
    assert code == 0 and "chain_state" in out and "done" in out


def test_a_run_killed_in_a_late_stage_resumes_to_the_same_content(
    chain: tuple[Path, Path], tmp_path: Path
) -> None:
    blocks, src = chain
    want = content(src)
    data = tmp_path / "data"
    shutil.copytree(src, data)
    cmd = reindex_cmd(blocks, data, "--mode", "full", "--from-stage", "chain_state")
    run_killed_at(cmd, "chain_state.applied", 1)  # one kill that surely lands
    # The same command uninterrupted, timed on a copy: the random kills land within its time
    # on this host, wherever the stages are then.
    timed = tmp_path / "timed"
    shutil.copytree(src, timed)
    t0 = time.monotonic()
    proc = subprocess.run(
        reindex_cmd(blocks, timed, "--mode", "full", "--from-stage", "chain_state"),
        capture_output=True,
        text=True,
    )
    full = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert content(timed) == want
    rng = random.Random(3)
    kills = 0
    for _ in range(3):
        # Each run starts again from the chain state (--from-stage).
        if kill_after(cmd, rng.uniform(0.3, max(0.3, 0.9 * full))):
            kills += 1
        else:
            assert content(data) == want and verify(data)["ok"]
    assert kills >= 1
    reindex(blocks, data, "--mode", "full")
    assert content(data) == want
    assert verify(data)["ok"]


def test_flow_replay_of_an_unchanged_wal_runs_no_stage(tmp_path: Path) -> None:
    code, _, err = cli(
        "gen",
        "flow",
        tmp_path / "wal",
        "--updates",
        "300",
        "--registers-per-update",
        "4",
        "--segment-size",
        "64K",
    )
    assert code == 0, err

    def replay(*extra: str) -> Any:
        return cli_json(
            "flow",
            "replay",
            "--wal",
            tmp_path / "wal",
            "--data",
            tmp_path / "d",
            "--no-progress",
            "--json",
            *extra,
        )

    first = replay("--checkpoint-every", "2", "--checkpoint-dir", str(tmp_path / "cp"))
    assert first["run"]["stages_run"] == ["replay", "publish"]
    before = content(tmp_path / "d")
    again = replay("--checkpoint-every", "2", "--checkpoint-dir", str(tmp_path / "cp"))
    assert again["run"]["stages_run"] == []
    assert again["root"] == first["root"] and content(tmp_path / "d") == before
    # Other checkpoint options are another replay; --from-stage publish reruns the replay
    # it reads from.
    assert replay()["run"]["stages_run"] == ["replay", "publish"]
    assert replay("--from-stage", "publish")["run"]["stages_run"] == ["replay", "publish"]
    assert content(tmp_path / "d") == before
    # A checkpoint read into the same folder replaces the published state: the next replay
    # of the unchanged WAL publishes again.
    cli_json(
        "flow", "checkpoint", "read", "--dir", tmp_path / "cp", "--data", tmp_path / "d", "--json"
    )
    assert replay()["run"]["stages_run"] == ["replay", "publish"]
    assert content(tmp_path / "d")["parquet/flow"] == before["parquet/flow"]
    stages = cli_json("stages", "--data", tmp_path / "d", "--json")["pipelines"]["flow"]
    assert [s["stage"] for s in stages] == ["replay", "publish"]
    assert stages[0]["rows"] == first["updates_applied"]
    assert stages[1]["rows"] == first["registers"]
