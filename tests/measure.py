"""Running a command measured, for the tests that bound a command's memory and for the
benchmarks (``benchmarks/common.py`` re-exports these; tests never import the benchmarks): its
output, wall and CPU seconds, the peak RSS of it and of its process tree, and the host's steal
while it ran."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import psutil
from rechain.workers.memory import PEAK_RSS_FILE_ENV, high_water_mark

#: The CLI of the virtualenv running the tests or the benchmark.
BIN = Path(sys.executable).parent / "rechain"


def btc_reindex_cmd(blocks: Path, data: Path, workers: int, *extra: str) -> list[str]:
    """``rechain btc reindex`` on a generated regtest folder, JSON result, no progress bar."""
    return [
        str(BIN),
        "btc",
        "reindex",
        "--blocks",
        str(blocks),
        "--data",
        str(data),
        "--network",
        "regtest",
        "--no-progress",
        "--json",
        "--workers",
        str(workers),
        *extra,
    ]


class TreeRss:
    """The peak RSS of a command and of it with all its descendants. The command's own is
    exact: a rechain command writes its high-water mark as it exits (``PEAK_RSS_FILE_ENV``),
    and of any other ``_REAPER`` reports ``wait4``'s ``ru_maxrss`` (the largest of it and its
    children, which it is alone for the peers measured) unless that is no more than the
    reaper's own, when the command's ``VmHWM`` read every 50 ms stands in. The tree's is
    sampled, its processes' RSS summed (the reaper's own left out)."""

    def __init__(self, reaper: int, interval: float = 0.05) -> None:
        self.reaper = psutil.Process(reaper)
        self.interval = interval
        self.peak_tree = 0
        self.peak_root = 0
        #: The command's ``VmHWM`` as last read: for a command below the reaper's own peak.
        self.sampled_root = 0
        self.cpu_s = 0.0
        #: CPU seconds stolen from the host's cores while the command ran (``host_steal_s``).
        self.steal_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                command = self.reaper.children()
                tree = self.reaper.children(recursive=True)
                total = 0
                for p in tree:
                    try:
                        total += p.memory_info().rss
                    except psutil.Error:
                        continue
                self.peak_tree = max(self.peak_tree, total)
                for p in command:
                    self.sampled_root = max(self.sampled_root, high_water_mark(p.pid))
            except psutil.Error:
                pass
            self._stop.wait(self.interval)

    def __enter__(self) -> TreeRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


#: Runs the command after its first argument as its only child and writes what it measured
#: to the file that argument names: the child's wall and CPU seconds and peak RSS. A sampler
#: misses a short command's last moments (more so when the host is busy), and ``wait4``'s
#: ``ru_maxrss`` seen from the benchmark itself would keep the high-water mark of the large
#: process that forked it: a fresh small interpreter has neither problem. Its own high-water
#: mark (its memory's, which the spawned child's figure starts from) is written too: at or
#: below it the child's figure is the reaper's.
_REAPER = """
import json, os, sys, time
out, cmd = sys.argv[1], sys.argv[2:]
t0 = time.perf_counter()
pid = os.posix_spawnp(cmd[0], cmd, os.environ)
_, status, usage = os.wait4(pid, 0)
wall = time.perf_counter() - t0
with open("/proc/self/status") as status_file:
    own = next(int(x.split()[1]) for x in status_file if x.startswith("VmHWM:"))
with open(out, "w") as f:
    cpu = usage.ru_utime + usage.ru_stime
    json.dump({"wall_s": wall, "cpu_s": cpu, "peak_rss": usage.ru_maxrss << 10,
               "own_peak_rss": own << 10}, f)
code = os.waitstatus_to_exitcode(status)
if code < 0:
    os.kill(os.getpid(), -code)
sys.exit(code)
"""


def host_steal_s() -> float:
    """CPU seconds the hypervisor has run other guests on this machine's cores while this one
    had work for them (``/proc/stat``'s steal, summed over cores); 0 where not reported."""
    try:
        with open("/proc/stat") as stat:
            return steal_ticks(stat.readline()) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def steal_ticks(cpu_line: str) -> int:
    """The steal field of ``/proc/stat``'s summed ``cpu`` line (its eighth value, after user,
    nice, system, idle, iowait, irq and softirq), in clock ticks; 0 if the line has none."""
    fields = cpu_line.split()
    if len(fields) < 9 or fields[0] != "cpu" or not fields[8].isdigit():
        return 0
    return int(fields[8])


def run_measured(cmd: list[str]) -> tuple[subprocess.CompletedProcess[str], TreeRss, float]:
    """Runs ``cmd`` to its end: its output, its peak RSS and CPU time, its wall seconds.
    The host's steal over the run (``TreeRss.steal_s``) says how far a noisy neighbour slowed
    it. Raises with the tail of its stderr if it fails."""
    with (
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
        tempfile.NamedTemporaryFile(suffix=".json") as measured,
        tempfile.NamedTemporaryFile() as own_peak,
    ):
        reaper = [sys.executable, "-S", "-c", _REAPER, measured.name, *cmd]
        env = {**os.environ, PEAK_RSS_FILE_ENV: own_peak.name}
        steal = host_steal_s()
        proc = subprocess.Popen(reaper, stdout=out, stderr=err, env=env)
        with TreeRss(proc.pid) as rss:
            _, status, _ = os.wait4(proc.pid, 0)
        rss.steal_s = host_steal_s() - steal
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        done = subprocess.CompletedProcess(
            cmd, proc.returncode, out.read().decode(), err.read().decode(errors="replace")
        )
        got = json.loads(Path(measured.name).read_text() or "{}")
        reported = Path(own_peak.name).read_text()
    if proc.returncode != 0 or not got:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{done.stderr[-3000:]}")
    if reported:
        rss.peak_root = int(reported)
    elif got["peak_rss"] > got["own_peak_rss"]:
        rss.peak_root = got["peak_rss"]
    else:
        # Smaller than the reaper: only the readings taken while it ran say how small.
        rss.peak_root = rss.sampled_root
    rss.cpu_s = got["cpu_s"]
    rss.peak_tree = max(rss.peak_tree, rss.peak_root)
    return done, rss, got["wall_s"]
