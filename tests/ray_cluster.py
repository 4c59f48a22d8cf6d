"""A real multi-node Ray cluster on this machine for tests: a head and worker nodes started
with `ray start` (each a raylet with its own node id), torn down with `ray stop`."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

VENV_BIN = Path(sys.executable).parent
ENV = {**os.environ, "RAY_AUTH_MODE": "disabled"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ray_cli(*args: str, timeout: float = 120) -> str:
    return subprocess.run(
        [str(VENV_BIN / "ray"), *args],
        check=True,
        capture_output=True,
        text=True,
        env=ENV,
        timeout=timeout,
    ).stdout


@contextlib.contextmanager
def local_cluster(
    head_cpus: int, worker_nodes: int, dashboard_port: int | None = None
) -> Iterator[str]:
    """Yields the GCS address ``127.0.0.1:PORT``; with ``dashboard_port``, the head also runs
    the dashboard and its job server (``ray job submit --address http://127.0.0.1:PORT``)."""
    import ray

    if ray.is_initialized():  # the session's embedded Ray would be stopped with the cluster
        ray.shutdown()
    port = free_port()
    # Ray's socket paths must stay under 107 bytes: a short temp dir, not pytest's.
    temp_dir = tempfile.mkdtemp(prefix="rc-", dir="/tmp")
    dashboard = (
        ["--include-dashboard", "true", "--dashboard-port", str(dashboard_port)]
        if dashboard_port
        else ["--include-dashboard", "false"]
    )
    ray_cli(
        "start",
        "--head",
        "--port",
        str(port),
        "--num-cpus",
        str(head_cpus),
        "--temp-dir",
        temp_dir,
        "--disable-usage-stats",
        *dashboard,
    )
    try:
        for _ in range(worker_nodes):
            ray_cli("start", "--address", f"127.0.0.1:{port}", "--num-cpus", "1")
        address = f"127.0.0.1:{port}"
        # `ray start` returns before its raylet has joined; a job started before then would
        # see (and spread its tasks over) fewer nodes.
        deadline = time.monotonic() + 120
        while len(alive_nodes(address)) < 1 + worker_nodes:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster at {address} has not got all its nodes")
            time.sleep(0.5)
        yield address
    finally:
        if ray.is_initialized():  # `ray stop` would kill it under this process's feet
            ray.shutdown()
        ray_cli("stop", "--force")
        shutil.rmtree(temp_dir, ignore_errors=True)


def alive_nodes(address: str) -> list[tuple[str, bool]]:
    """(node id, is head) of the cluster's live nodes, from a separate driver (one in this
    process would be stopped with the cluster)."""
    code = (
        f"import json, ray; ray.init(address={address!r}, logging_level='ERROR'); "
        "print(json.dumps([(n['NodeID'], 'node:__internal_head__' in n['Resources']) "
        "for n in ray.nodes() if n['Alive']]))"
    )
    out = subprocess.run(
        [str(VENV_BIN / "python"), "-c", code],
        check=True,
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
    ).stdout
    return [tuple(n) for n in json.loads(out.strip().splitlines()[-1])]
