"""A real multi-node Ray cluster on this machine for tests: a head and worker nodes, each a
`ray start --block` this helper runs in a session of its own (each a raylet with its own node
id), torn down by stopping exactly the processes those started. Never `ray stop`, which stops
every Ray process on the host, other tests' and other users' included."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil

VENV_BIN = Path(sys.executable).parent
ENV = {**os.environ, "RAY_AUTH_MODE": "disabled"}
#: Starting a node is fixed work (no data): generous for a busy 2-core host, where a node has
#: been seen to take ~30 s to join; a node that has not joined by then never will.
NODE_START_S = 300


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Nodes:
    """The `ray start --block` processes this helper started, each the leader of its own
    session, and every process they started."""

    def __init__(self, temp_dir: str) -> None:
        self.temp_dir = temp_dir
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, *args: str) -> None:
        log = open(Path(self.temp_dir) / f"node-{len(self.procs)}.log", "wb")  # noqa: SIM115
        with log:
            self.procs.append(
                subprocess.Popen(
                    [str(VENV_BIN / "ray"), "start", "--block", *args],
                    stdout=log,
                    stderr=log,
                    env=ENV,
                    start_new_session=True,
                )
            )

    def check_alive(self) -> None:
        for i, proc in enumerate(self.procs):
            if proc.poll() is not None:
                tail = (Path(self.temp_dir) / f"node-{i}.log").read_text(errors="replace")
                raise RuntimeError(f"ray start exited ({proc.returncode}):\n{tail[-3000:]}")

    def ours(self) -> list[psutil.Process]:
        """Every live process these nodes started: their descendants (Ray may give its workers
        process groups of their own, but they stay the raylet's children) and anything left
        in their sessions (a process whose parent died is re-parented, not re-sessioned)."""
        sessions = {p.pid for p in self.procs}
        found: dict[int, psutil.Process] = {}
        for proc in self.procs:
            with contextlib.suppress(psutil.Error):
                root = psutil.Process(proc.pid)
                for p in [root, *root.children(recursive=True)]:
                    found[p.pid] = p
        for p in psutil.process_iter():
            with contextlib.suppress(psutil.Error, OSError):
                if os.getsid(p.pid) in sessions:
                    found[p.pid] = p
        return list(found.values())

    def stop(self) -> None:
        procs = self.ours()
        for p in procs:
            with contextlib.suppress(psutil.Error):
                p.send_signal(signal.SIGTERM)
        _, alive = psutil.wait_procs(procs, timeout=30)
        for p in alive:
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(alive, timeout=30)
        for proc in self.procs:  # reap our own children
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)


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
    address = f"127.0.0.1:{port}"
    # Ray's socket paths must stay under 107 bytes: a short temp dir, not pytest's.
    temp_dir = tempfile.mkdtemp(prefix="rc-", dir="/tmp")
    dashboard = (
        ["--include-dashboard", "true", "--dashboard-port", str(dashboard_port)]
        if dashboard_port
        else ["--include-dashboard", "false"]
    )
    nodes = _Nodes(temp_dir)
    try:
        nodes.start(
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
        _wait_for_nodes(nodes, address, 1)
        # One node at a time, each waited for until it has joined: nodes registering at once
        # on a busy 2-core host miss the GCS's deadline. A job started before every node has
        # joined would see (and spread its tasks over) fewer nodes.
        for n in range(worker_nodes):
            nodes.start("--address", address, "--num-cpus", "1")
            _wait_for_nodes(nodes, address, 2 + n)
        yield address
    finally:
        if ray.is_initialized():  # its driver would lose the cluster under its feet
            ray.shutdown()
        nodes.stop()
        shutil.rmtree(temp_dir, ignore_errors=True)


def _wait_for_nodes(nodes: _Nodes, address: str, count: int) -> None:
    deadline = time.monotonic() + NODE_START_S
    while True:
        nodes.check_alive()
        try:
            if len(alive_nodes(address)) >= count:
                return
        except subprocess.CalledProcessError:
            pass  # the head's GCS is not up yet
        if time.monotonic() > deadline:
            raise RuntimeError(f"the cluster at {address} has not got {count} nodes")
        time.sleep(0.5)


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
        timeout=NODE_START_S,
    ).stdout
    return [tuple(n) for n in json.loads(out.strip().splitlines()[-1])]
