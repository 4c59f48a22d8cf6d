"""RSS over time of one ``rechain btc reindex`` run, against its stage log lines: which stage
makes the peak (issue #7). Samples the coordinator and the whole process tree every 0.1 s and
prints, per stage (the span between two log lines), the peak of each.

    .venv/bin/python -m benchmarks.rss_timeline BLOCKS_DIR DATA_DIR [reindex options...]
"""

from __future__ import annotations

import argparse
import subprocess
import threading
import time
from pathlib import Path

import psutil

from benchmarks.common import btc_reindex_cmd, machine


def _rss_kinds(pid: int) -> dict[str, int]:
    """The coordinator's RSS split: anonymous (heap), file-backed, shared memory (bytes)."""
    kinds = {}
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith(("RssAnon", "RssFile", "RssShmem")):
                name, value = line.split(":")
                kinds[name] = int(value.split()[0]) << 10
    except OSError:
        pass
    return kinds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("blocks", type=Path)
    ap.add_argument("data", type=Path)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--interval", type=float, default=0.1)
    args, extra = ap.parse_known_args()
    cmd = btc_reindex_cmd(args.blocks, args.data, args.workers, *extra)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    root = psutil.Process(proc.pid)
    samples: list[tuple[float, int, int, dict[str, int]]] = []
    stop = threading.Event()
    peak_procs: list[tuple[int, str, dict[str, int]]] = []

    def sample() -> None:
        while not stop.is_set():
            try:
                tree = 0
                own = 0
                procs = []
                for p in [root, *root.children(recursive=True)]:
                    try:
                        rss = p.memory_info().rss
                        procs.append((rss, " ".join(p.cmdline())[:60], p.pid))
                    except psutil.Error:
                        continue
                    tree += rss
                    if p.pid == root.pid:
                        own = rss
                if tree > max((s[2] for s in samples), default=0):
                    # Where each process's pages are: its heap, mapped files, or shared memory
                    # (Ray's object store counts in every process that maps it).
                    peak_procs[:] = [(r, n, _rss_kinds(pid)) for r, n, pid in sorted(procs)[::-1]]
                samples.append((time.perf_counter() - t0, own, tree, _rss_kinds(proc.pid)))
            except psutil.Error:
                pass
            stop.wait(args.interval)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    marks: list[tuple[float, str]] = [(0.0, "start")]
    assert proc.stderr is not None
    for line in proc.stderr:
        marks.append((time.perf_counter() - t0, line.rstrip()[:110]))
    proc.wait()
    stop.set()
    sampler.join()
    marks.append((time.perf_counter() - t0, "end"))
    print(f"exit {proc.returncode}; load {machine()['load_avg_1_5_15m']}")
    for (t_a, name), (t_b, _) in zip(marks, marks[1:], strict=False):
        span = [s for s in samples if t_a <= s[0] < t_b]
        own = max((s[1] for s in span), default=0) >> 20
        tree = max((s[2] for s in span), default=0) >> 20
        top = max(span, key=lambda s: s[1], default=None)
        kinds = " ".join(f"{k[3:]} {v >> 20}" for k, v in (top[3] if top else {}).items())
        print(
            f"{t_a:8.1f}s {t_b - t_a:7.1f}s  coord {own:5d} MiB ({kinds})  tree {tree:5d} MiB  "
            f"{name}"
        )
    for rss, name, split in peak_procs:
        kinds = " ".join(f"{k[3:]} {v >> 20}" for k, v in split.items())
        print(f"  at the tree's peak: {rss >> 20:5d} MiB ({kinds})  {name}")
    print(
        f"peak coordinator {max(s[1] for s in samples) >> 20} MiB, "
        f"tree {max(s[2] for s in samples) >> 20} MiB"
    )


if __name__ == "__main__":
    main()
