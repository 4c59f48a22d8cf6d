"""A real multi-node run on one machine: a Ray head and two worker nodes started with
`ray start`, a reindex through `--ray-address`, its metrics scraped by a real Prometheus server
and read back through Prometheus's HTTP API."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import cli_json, gen_chain
from tests.ray_cluster import NODE_START_S, VENV_BIN, free_port, local_cluster

#: The longest the run serves its metrics after it ends; the test interrupts it as soon as
#: Prometheus has what it waits for. A bound on a hung test, not a wait.
LINGER_S = 1800
#: Prometheus's start-up is fixed work: generous for a busy 2-core host.
PROMETHEUS_START_S = NODE_START_S


@pytest.fixture
def cluster() -> Iterator[str]:
    with local_cluster(head_cpus=1, worker_nodes=2) as address:
        yield address


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[str, int]]:
    binary = shutil.which("prometheus")
    assert binary, "Prometheus is installed by .ci/run (Debian package 'prometheus')"
    target_port = free_port()
    web_port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 200ms\n  scrape_timeout: 150ms\n"
        "scrape_configs:\n  - job_name: rechain\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{target_port}']\n"
    )
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{web_port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{web_port}"
    try:
        deadline = time.monotonic() + PROMETHEUS_START_S
        while True:
            try:
                urllib.request.urlopen(f"{base}/-/ready", timeout=5)
                break
            except OSError:
                assert time.monotonic() < deadline, "Prometheus did not start"
                time.sleep(0.2)
        # Ready is not scraping: Prometheus hands new targets to its scrape loops in batches
        # (up to ~5 s after start). Wait for a first attempt, or a short run is never seen.
        while not _scrape_attempted(base):
            assert time.monotonic() < deadline, "Prometheus never tried its scrape target"
            time.sleep(0.2)
        yield base, target_port
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _scrape_attempted(base: str) -> bool:
    body = json.loads(urllib.request.urlopen(f"{base}/api/v1/targets", timeout=5).read())
    return any(
        not t.get("lastScrape", "").startswith("0001-") for t in body["data"]["activeTargets"]
    )


def _tail(out: Any) -> str:
    out.seek(0)
    return out.read().decode(errors="replace")[-3000:]


def _released(lock: Path) -> bool:
    """Whether no process holds the data folder's lock (its run closed it)."""
    with open(lock, "rb") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(f, fcntl.LOCK_UN)
        return True


def _wait_until_done_and_scraped(
    proc: subprocess.Popen[bytes], data: Path, base: str, records: int, out: Any
) -> None:
    """Waits for the events, not for time: the run has written its report and closed its data
    folder (it is lingering), and Prometheus holds the scan's final record count. Fails at
    once if the run exits first; the only bound is the linger (a hung run)."""
    report = data / "reports" / "btc_reindex.json"
    expr = 'max_over_time(rechain_stage_records_total{stage="btc_headers"}[1h])'
    while True:
        assert proc.poll() is None, f"the run ended before it was scraped:\n{_tail(out)}"
        if report.exists() and _released(data / "LOCK"):
            result = prom_query(base, expr)
            if result and float(result[0]["value"][1]) == records:
                return
        time.sleep(0.5)


def prom_query(base: str, expr: str) -> list[dict]:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    body = json.loads(urllib.request.urlopen(url, timeout=5).read())
    assert body["status"] == "success"
    return body["data"]["result"]


def test_multi_node_run_equals_local_and_is_scraped(
    tmp_path: Path, cluster: str, prometheus: tuple[str, int]
) -> None:
    facts = gen_chain(
        tmp_path / "g",
        "--blocks",
        "200000",
        "--side-branches",
        "5",
        "--orphans",
        "2",
        "--file-size",
        "4M",
        "--seed",
        "21",
    )
    blocks = tmp_path / "g" / "blocks"
    base, metrics_port = prometheus
    data = tmp_path / "cluster"
    # The run keeps its exporter up after it ends (`--metrics-linger`) until this test has
    # seen Prometheus scrape the final counters, then is interrupted: no fixed linger to
    # outlast, no deadline shorter than a busy host's scrape loop.
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(
            [
                str(VENV_BIN / "rechain"),
                "btc",
                "reindex",
                "--blocks",
                str(blocks),
                "--data",
                str(data),
                "--network",
                "regtest",
                "--ray-address",
                cluster,
                "--workers",
                "2",
                "--shard-size",
                "1M",
                "--metrics-port",
                str(metrics_port),
                "--metrics-linger",
                str(LINGER_S),
                "--no-progress",
                "--json",
            ],
            stdout=out,
            stderr=out,
            env={**os.environ, "RAY_AUTH_MODE": "disabled"},
        )
        try:
            _wait_until_done_and_scraped(proc, data, base, facts["records"], out)
            proc.send_signal(signal.SIGINT)  # ends the linger
            assert proc.wait(timeout=60) == 130, _tail(out)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    remote = cli_json("btc", "status", "--data", data, "--json")
    assert remote["tip_hash"] == facts["tip_hash"]
    assert remote["blocks_indexed"] == facts["blocks_indexed"]
    read = prom_query(base, "max_over_time(rechain_stage_bytes_read_total[5m])")
    assert read and float(read[0]["value"][1]) > 0
    local = cli_json(
        "btc",
        "reindex",
        "--blocks",
        blocks,
        "--data",
        tmp_path / "local",
        "--network",
        "regtest",
        "--no-progress",
        "--json",
    )
    for key in ("tip_hash", "tip_height", "chainwork", "blocks_indexed", "orphans", "duplicates"):
        assert remote[key] == local[key]
    from rechain.pipeline.store.datadir import DataDir
    from rechain.pipeline.verify import digest

    with (
        DataDir(tmp_path / "cluster", readonly=True) as a,
        DataDir(tmp_path / "local", readonly=True) as b,
    ):
        assert digest(a)["content"] == digest(b)["content"]
