"""Shared fixtures: the shared data folder, one Ray runtime per session, an in-process CLI."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from rechain.pipeline.bitcoin.scan_log import Pending, gap_event, stitch, with_gap
from rechain.pipeline.cli import main
from rechain.schemas import bitcoin as ds
from rechain.workers.btc_scan import WorkUnit, scan_unit

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("RECHAIN_SHARED", REPO.parent / "shared"))
BTC_DATA = SHARED / "data" / "bitcoin"
CORPUS = BTC_DATA / "corpus"


@pytest.fixture(scope="session", autouse=True)
def _ray_session() -> Iterator[None]:
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    from rechain.pipeline.runtime.ray_cluster import share_runtime

    # In-process runs share one embedded cluster rather than start one each (CLI subprocesses,
    # as in test_memory_budget, still stop theirs after the body pass).
    share_runtime()
    yield
    import ray

    if ray.is_initialized():
        ray.shutdown()


def cli(*argv: str) -> tuple[int, str, str]:
    """Runs the CLI in this process (sharing its Ray runtime); returns (code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def cli_json(*argv: str) -> Any:
    code, out, err = cli(*argv)
    assert code == 0, err
    return json.loads(out)


def reindex(blocks: Path, data: Path, *extra: str) -> dict[str, Any]:
    """A regtest header reindex through the CLI; returns its JSON result."""
    return cli_json(
        "btc",
        "reindex",
        "--blocks",
        blocks,
        "--data",
        data,
        "--network",
        "regtest",
        "--no-progress",
        "--json",
        *extra,
    )


def reindex_cmd(blocks: Path, data: Path, *extra: str) -> list[str]:
    """A regtest reindex as a subprocess command (for runs a test kills)."""
    return [
        sys.executable,
        "-m",
        "rechain.pipeline.cli",
        "btc",
        "reindex",
        "--blocks",
        str(blocks),
        "--data",
        str(data),
        "--network",
        "regtest",
        "--no-progress",
        *extra,
    ]


def gen_chain(root: Path, *args: str) -> dict[str, Any]:
    code, _, err = cli("gen", "bitcoin", root, *args)
    assert code == 0, err
    return json.loads((root / "expected.json").read_text())


def blocks_dir_with(tmp: Path, corpus_file: str, xor: bool) -> Path:
    """A blocks/ folder holding one corpus file as blk00000.dat (and xor.dat when it is XORed)."""
    blocks = tmp / "blocks"
    blocks.mkdir(parents=True, exist_ok=True)
    shutil.copy(CORPUS / corpus_file, blocks / "blk00000.dat")
    if xor:
        shutil.copy(CORPUS / "xor.dat", blocks / "xor.dat")
    return blocks


def run_killed_at(cmd: list[str], point: str, nth: int = 1) -> None:
    """Runs ``cmd`` until its coordinator kills itself the ``nth`` time it passes ``point``
    (``RECHAIN_KILL_AT``), then kills what it left (Ray's processes). Asserts that it died
    there: by SIGKILL, with the point passed exactly ``nth`` times (``RECHAIN_KILL_TRACE``)."""
    from rechain.workers.fault_injection import KILL_POINTS

    assert point in KILL_POINTS, f"{point} is not in fault_injection.KILL_POINTS"
    with tempfile.TemporaryDirectory(prefix="rechain-kill-") as scratch:
        trace = Path(scratch) / "trace"
        env = {
            **os.environ,
            "RECHAIN_KILL_AT": f"{point}:{nth}",
            "RECHAIN_KILL_TRACE": str(trace),
        }
        # Output to a file, not a pipe: Ray's processes outlive the coordinator holding it open.
        with tempfile.TemporaryFile() as out:
            proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=out, stderr=out)
            proc.wait()
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            out.seek(0)
            tail = out.read().decode(errors="replace")[-3000:]
        passed = trace.read_text().split().count(point) if trace.exists() else 0
    assert proc.returncode == -signal.SIGKILL, f"not killed at {point}:{nth}:\n{tail}"
    assert passed == nth, f"killed after passing {point} {passed} time(s), not {nth}:\n{tail}"


def kill_after(cmd: list[str], delay: float) -> bool:
    """Starts ``cmd`` in its own process group and SIGKILLs the whole group (Ray workers
    included) after ``delay`` seconds. Returns True when the kill is what ended it, False
    when it finished (successfully) first; a run that failed on its own fails the test with
    its output."""
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=err, stderr=err, start_new_session=True)
        try:
            proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:  # the group ended between the wait and the kill
                pass
            proc.wait()
        err.seek(0)
        output = err.read().decode(errors="replace")[-4000:]
        # A run that ended on its own just as the delay ran out counts as finished, not killed.
        if proc.returncode == -signal.SIGKILL:
            return True
        assert proc.returncode == 0, f"exit {proc.returncode} before the kill:\n{output}"
        return False


#: Where Go lives when it is not on PATH (the official tarball's place).
GO_FALLBACK = Path("/usr/local/go/bin/go")


def oracle_tools(oracle: str, *tools: str) -> list[str]:
    """The one policy for every outside oracle and peer (Bitcoin Core, flow-go, go-ethereum,
    the benchmark peers): the paths of the ``tools`` that build ``oracle``. CI has every such
    tool (``.ci/run`` installs cmake, g++ and Boost; Go and cargo are on its machines), so a
    missing one fails the test, never skips it: an oracle that cannot be built checks nothing.
    A failed build fails too, in the oracle's own fixture."""
    found = [shutil.which(t) or (str(GO_FALLBACK) if t == "go" else None) for t in tools]
    missing = [t for t, f in zip(tools, found, strict=True) if f is None or not Path(f).is_file()]
    if missing:
        pytest.fail(
            f"{', '.join(missing)} not installed: the {oracle} oracle cannot be built "
            "(CI has it; install it to run these tests)",
            pytrace=False,
        )
    return [str(f) for f in found]


#: A subprocess run's time limit: a fixed start (an embedded Ray's, on a busy 2-core host: up
#: to a minute seen) and its input at a rate far below any measured (a full reindex decodes
#: several MB/s a core), so only a hung run reaches it.
START_S = 300
SLOWEST_BYTES_PER_S = 256 << 10


def time_limit(*inputs: Path) -> float:
    """Seconds a run over the files under ``inputs`` may take before it counts as hung."""
    size = sum(f.stat().st_size for p in inputs for f in Path(p).rglob("*") if f.is_file())
    return START_S + size / SLOWEST_BYTES_PER_S


def wal_fragments(seg: bytes) -> list[tuple[int, int, int]]:
    """(start, end, type) of each fragment of a LedgerWAL segment, walked from the format
    (flow-ledger.md §2), not with rechain's reader: 32 KiB pages of fragments (a header byte
    whose low 3 bits are the type, u16 payload length, u32 CRC-32C of the payload, payload);
    a type 0 byte pads the rest of its page."""
    page, header = 32768, 7
    fragments, at = [], 0
    while at < len(seg):
        if seg[at] & 7 == 0:
            at = (at // page + 1) * page
            continue
        end = at + header + int.from_bytes(seg[at + 1 : at + 3], "big")
        fragments.append((at, end, seg[at] & 7))
        at = end
    return fragments


def scan_file(
    unit: WorkUnit, bounds: list[int] | None = None, size: int | None = None
) -> tuple[pa.Table, pa.Table]:
    """Scans a whole file sequentially in shards cut at ``bounds`` and stitches them: the
    reference the parallel path must equal."""
    size = size if size is not None else os.path.getsize(unit.path)
    cuts = sorted({0, size, *(b for b in (bounds or []) if 0 < b < size)})
    pending = Pending(0, 0, True)
    records, events = [], []
    for lo, hi in zip(cuts, cuts[1:], strict=False):
        part = replace(unit, start=lo, bound=hi)
        result = scan_unit(part)
        joined = stitch(pending, result.info, unit.file_no)
        if joined is None:
            result = scan_unit(part, start=pending.through)
            joined = stitch(pending, result.info, unit.file_no)
            assert joined is not None
        gap, pending = joined
        records.append(result.records)
        events.append(with_gap(result.events, gap))
    if pending.start < size:
        tail = gap_event(unit.file_no, pending.start, size, pending.all_zero, True)
        events.append(pa.RecordBatch.from_pylist([tail], schema=ds.schema(ds.EVENTS)))
    rec = pa.Table.from_batches(records, schema=ds.schema(ds.RECORDS))
    ev = pa.Table.from_batches(events, schema=ds.schema(ds.EVENTS))
    return rec, ev
