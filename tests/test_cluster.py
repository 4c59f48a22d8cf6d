"""A real multi-node run on one machine: a Ray head and two worker nodes started with
`ray start`, a reindex through `--ray-address`, its metrics scraped by a real Prometheus server
and read back through Prometheus's HTTP API."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import cli_json, gen_chain
from tests.ray_cluster import VENV_BIN, free_port, local_cluster


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
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{base}/-/ready", timeout=1)
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
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    proc = subprocess.run(
        [
            str(VENV_BIN / "rechain"),
            "btc",
            "reindex",
            "--blocks",
            str(blocks),
            "--data",
            str(tmp_path / "cluster"),
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
            "2",
            "--no-progress",
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    remote = json.loads(proc.stdout)
    assert remote["tip_hash"] == facts["tip_hash"]
    assert remote["blocks_indexed"] == facts["blocks_indexed"]
    # Counters as Prometheus saw them while the run lasted.
    deadline = time.monotonic() + 20
    while True:
        result = prom_query(
            base, 'max_over_time(rechain_stage_records_total{stage="btc_headers"}[5m])'
        )
        if result and float(result[0]["value"][1]) == facts["records"]:
            break
        assert time.monotonic() < deadline, result
        time.sleep(0.5)
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
    from rechain.pipeline.store import DataDir
    from rechain.pipeline.verify import digest

    with (
        DataDir(tmp_path / "cluster", readonly=True) as a,
        DataDir(tmp_path / "local", readonly=True) as b,
    ):
        assert digest(a)["content"] == digest(b)["content"]
