"""Shared benchmark helpers: machine description, peak RSS of a process tree, result files, the
encoding floor of published Parquet tables."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import psutil
from rechain.workers.memory import PEAK_RSS_FILE_ENV, high_water_mark

RESULTS = Path(__file__).resolve().parent / "results"


def machine() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "kernel": platform.release(),
        # Other jobs share small machines; the load average says how much while this one ran.
        "load_avg_1_5_15m": [round(x, 2) for x in os.getloadavg()],
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


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


def warm_page_cache(folder: Path, pattern: str = "*") -> float:
    """Reads the files of ``folder`` matching ``pattern`` once, so that the timed run after it
    finds them in the page cache, as a warm-cache benchmark says: the hosts these run on page
    out file pages left idle for a while (DAMON's pageout; 1.1 GB of blk files read back from
    disk in 1.9 s against 0.2 s warm). Returns the seconds the read took."""
    t0 = time.perf_counter()
    for f in sorted(folder.glob(pattern)):
        with open(f, "rb", buffering=0) as r:
            while r.read(1 << 20):
                pass
    return time.perf_counter() - t0


def write_result(name: str, result: dict[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    return path


#: The CLI of the virtualenv running the benchmark.
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


def encoding_floor(files: list[Path], threads: int = 2, repeat: int = 1) -> dict[str, Any]:
    """The Parquet ``files`` encoded again from memory on ``threads`` threads (pyarrow's writer,
    zstd at level 1 as the Rust core writes it), each with the settings its own metadata records
    per column (codec, dictionary, delta encodings, statistics) and its largest row group: the
    encoding's CPU seconds (the least of ``repeat`` rounds), and those over the threads,
    ``floor_s`` (reading the files is not counted). A run that publishes these tables spends
    at least this writing them, whoever writes them."""
    import io

    import pyarrow.parquet as pq

    def encode(path: Path) -> float:
        meta = pq.ParquetFile(path).metadata
        rows = pq.read_table(path)
        first = meta.row_group(0)
        columns = [first.column(i) for i in range(first.num_columns)]
        codec = {c.path_in_schema: c.compression.lower() for c in columns}
        codec = {k: "none" if v == "uncompressed" else v for k, v in codec.items()}
        deltas = ("DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY", "DELTA_BINARY_PACKED")
        encoding = {c.path_in_schema: e for c in columns for e in deltas if e in c.encodings}
        t0 = time.thread_time()
        pq.write_table(
            rows,
            io.BytesIO(),
            compression=codec,
            compression_level={k: 1 for k, v in codec.items() if v == "zstd"} or None,
            use_dictionary=[c.path_in_schema for c in columns if c.has_dictionary_page] or False,
            column_encoding=encoding or None,
            write_statistics=[c.path_in_schema for c in columns if c.is_stats_set] or False,
            row_group_size=max(meta.row_group(g).num_rows for g in range(meta.num_row_groups)),
        )
        return time.thread_time() - t0

    with ThreadPoolExecutor(threads) as pool:
        cpu = min(sum(pool.map(encode, files)) for _ in range(max(1, repeat)))
    return {"threads": threads, "files": len(files), "cpu_s": cpu, "floor_s": cpu / threads}
