"""``flow_replay.py --independent``: rechain's replay against flow-go's on WALs that neither
rechain's generator nor its PRNG wrote, at trie sizes growing to millions of registers.

The default ``flow_replay.py`` sizes come from ``flowgo gen``, which draws exactly what
rechain's own generator draws (``tests/flow_go/gen.go``). Here flow-go's DiskWAL writes the
workload of ``flowgo gen-bench`` (``tests/flow_go/bench_workload.go``): 50 registers an update,
a share of them overwriting registers already in the trie (20% by default), Flow-like account
keys, value sizes of a storage-slab mix (mean ~300 bytes), Go's ChaCha8 PRNG, parent roots from
flow-go's own forest. One WAL of the largest size is generated (cached under ``--wal-cache``);
each smaller size is the prefix of whole segments that first reaches it, whose root the
generator recorded.

Per size: ``rechain flow replay`` of that prefix (its own process, the forest in memory:
``--memory-budget`` is raised above what would page it, as flow-go holds it) with its time,
publication apart, CPU and peak RSS, the keccak permutations it ran, and a ``perf`` profile
(sampled at 499 Hz) grouped into where the time went; flow-go's time, CPU and peak RSS to the
same update, from one ``flowgo replay-marks`` of the largest WAL that marks each size as it
passes it (stopped after ``--flowgo-limit`` seconds: sizes it did not reach have no ratio).
Every root must equal the generator's. Host load and steal are recorded with each run.
Variants (``--variants``: overwrite share, segment size, register writes) run one size each.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from common import BIN, machine, run_measured, write_result
from rechain.pipeline.cli import parse_size
from rechain.pipeline.flow.checkpoint import IN_MEMORY_FACTOR
from rechain.workers.memory import DEFAULT_MEMORY_BUDGET

DEFAULT_SIZES = "150000,500000,1500000,3000000"
DEFAULT_VARIANTS = "0:1M:500000,20:32M:500000"
PER_UPDATE = 50
SEED = 1
PERF_HZ = 499

#: Where a sampled symbol's time goes, first match wins (symbol text, lower-cased). rechain's
#: Rust core and flow-go's Go side by side: hashing, the trie's own work, allocation and
#: freeing (glibc malloc, Arc drops; Go's allocator and GC), reading the WAL, publishing.
CATEGORIES: list[tuple[str, tuple[str, ...]]] = [
    ("keccak", ("keccak", "chains8", "sponge", "hash_leaves", "sha3", "hashleaf", "hashinterior",
               "hash256", "hash.(*state)", "computecompactvalue")),
    ("trie_update", ("mtrie", "::flow::forest", "trie.", "node.", "flattener", "ledger.")),
    (
        "alloc_free",
        (
            "malloc", "free", "unlink_chunk", "drop_slow", "drop_in_place", "realloc",
            "runtime.mallocgc", "runtime.memclr", "runtime.(*mheap)", "runtime.(*mcache)",
            "runtime.(*mspan)", "runtime.nextfreefast",
        ),
    ),
    ("go_gc", ("runtime.scanobject", "runtime.gc", "runtime.greyobject", "runtime.findobject",
               "runtime.markbits", "runtime.(*gcwork)", "runtime.wbbuf", "runtime.bulkbarrier",
               "runtime.typepointers", "runtime.spanof", "runtime.scanblock")),
    ("memcpy", ("memmove", "memcpy", "memset")),
    ("go_runtime_other", ("runtime.",)),
    ("wal_decode", ("wal::", "record::", "crc", "snap::decompress", "snappy", "encoding.",
                    "decodeupdate", "readrecord", "(*reader)")),
    ("publish", ("parquet", "zstd", "snap::compress", "register_sst", "rocksdb", "arrow",
                 "writer::", "lz4")),
    ("python", ("libpython", "_py", "py_")),
]  # fmt: skip


def _category(dso: str, symbol: str) -> str:
    s = symbol.lower()
    for name, needles in CATEGORIES:
        if any(n in s for n in needles):
            return name
    if dso.startswith("[kernel") or symbol.startswith("[k]"):
        return "kernel"
    if "libpython" in dso:
        return "python"
    return "other"


_PERF_LINE = re.compile(r"^\s*([\d.]+)%\s+(\S+)\s+\[(.)\]\s+(.*?)\s*$")


def perf_available() -> bool:
    if not shutil.which("perf"):
        return False
    with tempfile.NamedTemporaryFile() as f:
        probe = ["perf", "record", "-q", "-F", str(PERF_HZ), "-o", f.name, "--", "true"]
        return subprocess.run(probe, capture_output=True).returncode == 0


def perf_profile(data: Path, top: int = 12) -> dict[str, Any]:
    """Self time of each symbol sampled (``perf report --no-children``), grouped by
    ``CATEGORIES``: percent of the samples, and the top symbols."""
    out = subprocess.run(
        [
            "perf",
            "report",
            "-i",
            str(data),
            "--no-children",
            "--sort",
            "dso,symbol",
            "--stdio",
            "-q",
            "--percent-limit",
            "0.05",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    ).stdout
    cats: dict[str, float] = {}
    symbols: list[tuple[float, str]] = []
    for line in out.splitlines():
        m = _PERF_LINE.match(line)
        if not m:
            continue
        pct, dso, kind = float(m[1]), m[2], m[3]
        symbol = re.sub(r"(\s+-)+$", "", m[4]).strip()  # perf pads with empty columns
        cat = "kernel" if kind == "k" else _category(dso, symbol)
        cats[cat] = cats.get(cat, 0.0) + pct
        symbols.append((pct, f"{symbol} ({cat})"))
    symbols.sort(reverse=True)
    return {
        "percent_of_samples": {
            k: round(v, 1) for k, v in sorted(cats.items(), key=lambda x: -x[1])
        },
        "top_symbols": [[round(p, 2), s] for p, s in symbols[:top]],
    }


def _perf_cmd(profile: bool, data: Path, cmd: list[str]) -> list[str]:
    return (
        ["perf", "record", "-q", "-F", str(PERF_HZ), "-o", str(data), "--", *cmd]
        if profile
        else cmd
    )


def wal_name(register_updates: int, overwrite_pct: int, segment_size: int, seed: int) -> str:
    return f"u{register_updates}-k{PER_UPDATE}-o{overwrite_pct}-seg{segment_size >> 20}m-seed{seed}"


class Generated:
    """The WAL of ``flowgo gen-bench`` with these parameters in ``cache``: generated there
    (its process's id in ``NAME.pid``, each finished segment's record in ``NAME.progress``),
    found done (``NAME.json``), or joined while its generator still runs: a size is measured
    as soon as the segments reaching it are written, so generating the largest WAL (flow-go's
    hashing of every record) overlaps measuring the smaller ones."""

    def __init__(
        self,
        flowgo: Path,
        cache: Path,
        register_updates: int,
        overwrite_pct: int,
        segment_size: int,
    ) -> None:
        self.name = name = wal_name(register_updates, overwrite_pct, segment_size, SEED)
        self.wal, self.meta = cache / name, cache / f"{name}.json"
        self.progress, self.pidfile = cache / f"{name}.progress", cache / f"{name}.pid"
        self.proc: subprocess.Popen[bytes] | None = None
        self.t0 = time.perf_counter()
        if self.meta.exists() or self._running():
            return
        shutil.rmtree(self.wal, ignore_errors=True)
        tmp = cache / f"{name}.json.tmp"
        with open(tmp, "w") as out:
            self.proc = subprocess.Popen(
                [
                    str(flowgo),
                    "gen-bench",
                    "--out",
                    str(self.wal),
                    "--registers-updated",
                    str(register_updates),
                    "--per-update",
                    str(PER_UPDATE),
                    "--overwrite",
                    str(overwrite_pct / 100),
                    "--seed",
                    str(SEED),
                    "--segment-size",
                    str(segment_size),
                    "--progress",
                    str(self.progress),
                ],
                stdout=out,
            )
        self.pidfile.write_text(str(self.proc.pid))
        self.tmp = tmp

    def _running(self) -> bool:
        try:
            os.kill(int(self.pidfile.read_text()), 0)
            return True
        except (OSError, ValueError):
            return False

    def _done(self) -> dict[str, Any] | None:
        if self.proc is not None and self.proc.poll() is not None:
            if self.proc.returncode != 0:
                raise RuntimeError(f"flowgo gen-bench failed ({self.proc.returncode})")
            self.tmp.rename(self.meta)
            self.proc = None
        if self.meta.exists():
            return json.loads(self.meta.read_text())
        tmp = self.meta.with_name(f"{self.name}.json.tmp")
        if self.proc is None and not self._running() and tmp.exists():
            # A generator joined (or left by an interrupted run) that finished: its output.
            try:
                json.loads(tmp.read_text())
            except ValueError:
                pass
            else:
                tmp.rename(self.meta)
                return json.loads(self.meta.read_text())
        if self.proc is None and not self._running():
            raise RuntimeError(f"{self.name}: no generator running and no {self.meta.name}")
        return None

    def segments_to(self, target: int) -> list[dict[str, Any]]:
        """The generator's records of the first segments reaching ``target`` register
        writes (all of them if the WAL ends before), once they are written."""
        while True:
            done = self._done()
            if done is not None:
                segs = done["segments"]
            else:
                text = self.progress.read_text() if self.progress.exists() else ""
                segs = [json.loads(x) for x in text.splitlines() if x.endswith("}")]
            end = next((i for i, s in enumerate(segs) if s["register_updates"] >= target), None)
            if end is not None:
                return segs[: end + 1]
            if done is not None:
                return segs
            time.sleep(5)

    def result(self) -> dict[str, Any]:
        while (done := self._done()) is None:
            time.sleep(5)
        self.seconds = time.perf_counter() - self.t0
        return done


def _generators_running(cache: Path) -> bool:
    """Whether any ``flowgo gen-bench`` of the cache (its ``NAME.pid``) is still running."""
    for pid in cache.glob("*.pid"):
        try:
            os.kill(int(pid.read_text()), 0)
            return True
        except (OSError, ValueError):
            continue
    return False


def prefix(wal: Path, segs: list[dict[str, Any]], into: Path) -> dict[str, Any]:
    """Hard links of the segments ``segs`` (the first ones of ``wal``) in ``into``; returns
    the generator's record of the last one."""
    into.mkdir(parents=True)
    for s in segs:
        name = f"{s['segment']:08d}"
        os.link(wal / name, into / name)
    return {**segs[-1], "segments": len(segs), "wal_bytes": _bytes(into)}


def _bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir())


def _native_stamp() -> tuple[int, int, int]:
    """Inode, size and mtime of the native module's file."""
    from rechain.workers import _native

    st = os.stat(_native.__file__)
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def run_rechain(
    wal: Path, data: Path, workers: int, profile: bool, perf_data: Path
) -> dict[str, Any]:
    wal_bytes = _bytes(wal)
    # In memory, as flow-go holds the forest: the default budget pages a WAL this large.
    budget = max(DEFAULT_MEMORY_BUDGET, IN_MEMORY_FACTOR * wal_bytes + (256 << 20))
    cmd = [
        str(BIN),
        "flow",
        "replay",
        "--wal",
        str(wal),
        "--data",
        str(data),
        "--workers",
        str(workers),
        "--no-progress",
        "--json",
        "--memory-budget",
        str(budget),
    ]
    load0 = os.getloadavg()
    native0 = _native_stamp()
    out, rss, wall = run_measured(_perf_cmd(profile, perf_data, cmd))
    mine = json.loads(out.stdout)
    run = mine["run"]
    total = float(run["total_s"] - run["ray_start_s"])
    publish = float(mine["publish_s"])
    res = {
        "root": mine["root"],
        "updates": mine["updates_applied"],
        "registers": mine["registers"],
        "seconds": round(total, 3),
        "replay_s": round(total - publish, 3),
        "publish_s": round(publish, 3),
        "wall_s": round(wall, 3),
        "cpu_s": round(rss.cpu_s, 3),
        "host_steal_s": round(rss.steal_s, 2),
        "load_avg_before": [round(x, 2) for x in load0],
        "load_avg_after": [round(x, 2) for x in os.getloadavg()],
        "peak_rss_mib": round(rss.peak_root / 2**20),
        "memory_budget": budget,
        "paged": run.get("node_store") is not None,
        "hash_permutations": run.get("hash_permutations"),
        "parallel_subtries": run.get("parallel_subtries"),
    }
    if profile:
        res["profile"] = perf_profile(perf_data)
        # perf names the samples from the file on disk: one reinstalled since the run
        # started (another build in the same tree) gives the Rust frames wrong names.
        res["profile"]["native_module_replaced"] = _native_stamp() != native0
        perf_data.unlink(missing_ok=True)
    shutil.rmtree(data, ignore_errors=True)
    return res


def run_flowgo(
    flowgo: Path, wal: Path, marks: list[int], limit: float, profile: bool, perf_data: Path
) -> dict[str, Any]:
    cmd = [
        str(flowgo),
        "replay-marks",
        "--wal",
        str(wal),
        "--marks",
        ",".join(map(str, marks)),
        "--stop-after-seconds",
        str(limit),
    ]
    load0 = os.getloadavg()
    out, rss, wall = run_measured(_perf_cmd(profile, perf_data, cmd))
    go = json.loads(out.stdout)
    res = {
        **go,
        "wall_s": round(wall, 3),
        "process_cpu_s": round(rss.cpu_s, 3),
        "host_steal_s": round(rss.steal_s, 2),
        "load_avg_before": [round(x, 2) for x in load0],
        "load_avg_after": [round(x, 2) for x in os.getloadavg()],
        "peak_rss_mib": round(rss.peak_root / 2**20),
    }
    if profile:
        res["profile"] = perf_profile(perf_data)
        perf_data.unlink(missing_ok=True)
    return res


def _size_entry(
    end: dict[str, Any], ours: dict[str, Any], mark: dict[str, Any] | None, rate1: float
) -> dict[str, Any]:
    """One size: input, both sides, ratios, roots."""
    reg_updates = end["register_updates"]
    entry: dict[str, Any] = {
        "input": {
            "updates": end["updates"],
            "register_updates": reg_updates,
            "registers": end["registers"],
            "segments": end["segments"],
            "wal_bytes": end["wal_bytes"],
        },
        "rechain": {
            **{k: v for k, v in ours.items() if k not in ("root", "updates", "registers")},
            "updates_per_s": round(end["updates"] / ours["seconds"], 1),
            "register_updates_per_s": round(reg_updates / ours["seconds"]),
        },
    }
    perms = ours.get("hash_permutations")
    if perms:
        entry["rechain"]["permutations_per_register_update"] = round(perms / reg_updates, 1)
        # The permutations alone at the multi-lane rate of one thread (50-register updates
        # are applied on one: `parallel_subtries` stays 0).
        entry["rechain"]["keccak_floor_1_thread_s"] = round(perms / rate1, 3)
        entry["rechain"]["replay_over_keccak_floor"] = round(ours["replay_s"] / (perms / rate1), 2)
    roots = {"generator": end["root"], "rechain": ours["root"]}
    ok = ours["root"] == end["root"] and ours["updates"] == end["updates"]
    ok = ok and ours["registers"] == end["registers"]
    if mark is not None:
        go_s, go_cpu = float(mark["elapsed_seconds"]), float(mark["cpu_seconds"])
        roots["flowgo"] = mark["root"]
        ok = ok and mark["root"] == end["root"]
        entry["flowgo"] = {
            "seconds": round(go_s, 3),
            "cpu_s": round(go_cpu, 3),
            "peak_rss_mib": round(mark["peak_rss_bytes"] / 2**20),
            "updates_per_s": round(end["updates"] / go_s, 1),
            "register_updates_per_s": round(reg_updates / go_s),
        }
        entry["ratio"] = round(go_s / ours["seconds"], 3)
        entry["ratio_replay_only"] = round(go_s / ours["replay_s"], 3)
        # CPU seconds: flow-go's replay to the mark against rechain's whole process (start-up
        # and publication included), the steadier figure on a shared host.
        entry["cpu_ratio"] = round(go_cpu / ours["cpu_s"], 3)
        entry["rss_flowgo_over_rechain"] = round(
            mark["peak_rss_bytes"] / 2**20 / max(ours["peak_rss_mib"], 1), 3
        )
    if "update_seconds" in end:
        # flow-go's Forest.Update of the same records, timed inside the generator (no WAL
        # read): a lower bound on its replay, measured at another time than rechain's run.
        upd_s, upd_cpu = float(end["update_seconds"]), float(end["update_cpu_seconds"])
        entry["flowgo_forest_update_in_generator"] = {
            "seconds": round(upd_s, 3),
            "cpu_s": round(upd_cpu, 3),
            "register_updates_per_s": round(reg_updates / upd_s),
            "ratio": round(upd_s / ours["seconds"], 3),
            "ratio_replay_only": round(upd_s / ours["replay_s"], 3),
            "cpu_ratio": round(upd_cpu / ours["cpu_s"], 3),
        }
    entry["roots"] = roots
    entry["same_final_root"] = ok
    return entry


def _growth(sizes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Between consecutive sizes: microseconds per register write added, for each side."""
    out = []
    for a, b in zip(sizes, sizes[1:], strict=False):
        n = b["input"]["register_updates"] - a["input"]["register_updates"]
        if n <= 0:
            continue
        step: dict[str, Any] = {
            "from": a["input"]["register_updates"],
            "to": b["input"]["register_updates"],
            "registers_at_end": b["input"]["registers"],
        }
        for key in ("replay_s", "publish_s", "cpu_s"):
            step[f"rechain_{key[:-2]}_us_per_register_update"] = round(
                (b["rechain"][key] - a["rechain"][key]) / n * 1e6, 2
            )
        pa, pb = a["rechain"].get("hash_permutations"), b["rechain"].get("hash_permutations")
        if pa and pb:
            step["rechain_permutations_per_register_update"] = round((pb - pa) / n, 1)
        if "flowgo" in a and "flowgo" in b:
            go = (b["flowgo"]["seconds"] - a["flowgo"]["seconds"]) / n * 1e6
            ours = (b["rechain"]["replay_s"] - a["rechain"]["replay_s"]) / n * 1e6
            step["flowgo_us_per_register_update"] = round(go, 2)
            step["flowgo_cpu_us_per_register_update"] = round(
                (b["flowgo"]["cpu_s"] - a["flowgo"]["cpu_s"]) / n * 1e6, 2
            )
            step["marginal_ratio_replay"] = round(go / ours, 3) if ours > 0 else None
        ga = a.get("flowgo_forest_update_in_generator")
        gb = b.get("flowgo_forest_update_in_generator")
        if ga and gb:
            step["flowgo_forest_update_us_per_register_update"] = round(
                (gb["seconds"] - ga["seconds"]) / n * 1e6, 2
            )
            step["flowgo_forest_update_cpu_us_per_register_update"] = round(
                (gb["cpu_s"] - ga["cpu_s"]) / n * 1e6, 2
            )
        out.append(step)
    return out


def _update_curve(segs: list[dict[str, Any]], points: int = 40) -> Any:
    """flow-go's Forest.Update in the generator as the trie grew, thinned to about ``points``
    segments: register writes, registers, seconds and CPU seconds so far."""
    rows = [
        [
            s["register_updates"],
            s["registers"],
            round(s["update_seconds"], 2),
            round(s["update_cpu_seconds"], 2),
        ]
        for s in segs
        if "update_seconds" in s
    ]
    if not rows:
        return None
    step = max(1, len(rows) // points)
    thin = rows[::step] if rows[-1] in rows[::step] else [*rows[::step], rows[-1]]
    return {"columns": ["register_updates", "registers", "seconds", "cpu_s"], "rows": thin}


def measure_series(
    flowgo: Path,
    cache: Path,
    work: Path,
    targets: list[int],
    overwrite_pct: int,
    segment_size: int,
    workers: int,
    limit: float,
    profile: bool,
    rate1: float,
    wal_size: int = 0,
) -> dict[str, Any]:
    g = Generated(flowgo, cache, max(wal_size, *targets), overwrite_pct, segment_size)
    wal, tag = g.wal, g.name
    ends, ours = [], []
    last_dir = work
    for t in sorted(targets):
        into = work / f"{tag}-{t}"
        segs = g.segments_to(t)
        if ends and len(segs) == ends[-1]["segments"]:
            continue  # the same prefix as the size before
        generating = _generators_running(cache)
        end = prefix(wal, segs, into)
        last_dir = into
        r = run_rechain(into, work / f"data-{tag}-{t}", workers, profile, work / "rechain.perf")
        # Measured while flow-go was still generating the larger sizes (one more busy core).
        r["generator_running"] = generating or _generators_running(cache)
        ends.append(end)
        ours.append(r)
        print(json.dumps({"size": end["register_updates"], "rechain": r}), flush=True)
    gen = g.result()
    gen_s = g.seconds
    largest = last_dir
    # A mark at every segment's end: where flow-go stops short of a size, its curve still
    # says how far it got and how its cost per write grew.
    segs = gen["segments"][: ends[-1]["segments"]]
    go = run_flowgo(
        flowgo, largest, [s["updates"] for s in segs], limit, profile, work / "flowgo.perf"
    )
    by_updates = {m["updates"]: m for m in go["marks"]}
    sizes = [
        _size_entry(e, r, by_updates.get(e["updates"]), rate1)
        for e, r in zip(ends, ours, strict=True)
    ]
    for t in sorted(targets):
        shutil.rmtree(work / f"{tag}-{t}", ignore_errors=True)
    return {
        "workload": {
            "generator": "flowgo gen-bench (tests/flow_go/bench_workload.go)",
            "registers_per_update": PER_UPDATE,
            "overwrite_share": overwrite_pct / 100,
            "segment_size": segment_size,
            "seed": SEED,
            "generated": {k: v for k, v in gen.items() if k != "segments"}
            | {"segments": len(gen["segments"]), "wal_bytes": _bytes(wal)},
            "waited_for_generator_s": round(gen_s, 1),
        },
        "sizes": sizes,
        "growth": _growth(sizes),
        "flowgo_run": {k: v for k, v in go.items() if k != "marks"},
        "flowgo_curve": _curve(segs, go["marks"]),
        "flowgo_forest_update_curve": _update_curve(gen["segments"]),
        "same_final_root": all(s["same_final_root"] for s in sizes),
    }


def _curve(segs: list[dict[str, Any]], marks: list[dict[str, Any]], points: int = 40) -> Any:
    """flow-go's replay as it went, thinned to about ``points`` marks: register writes,
    registers, seconds, CPU seconds, peak RSS MiB; and the microseconds per write over the
    last tenth of the marks it reached."""
    at = {s["updates"]: s for s in segs}
    rows = [
        [
            at[m["updates"]]["register_updates"],
            at[m["updates"]]["registers"],
            round(m["elapsed_seconds"], 2),
            round(m["cpu_seconds"], 2),
            round(m["peak_rss_bytes"] / 2**20),
        ]
        for m in marks
        if m["updates"] in at
    ]
    if not rows:
        return None
    step = max(1, len(rows) // points)
    thin = rows[::step] if rows[-1] in rows[::step] else [*rows[::step], rows[-1]]
    a, b = rows[-max(2, len(rows) // 10)], rows[-1]
    last = None
    if b[0] > a[0]:
        last = {
            "from": a[0],
            "to": b[0],
            "us_per_register_update": round((b[2] - a[2]) / (b[0] - a[0]) * 1e6, 2),
            "cpu_us_per_register_update": round((b[3] - a[3]) / (b[0] - a[0]) * 1e6, 2),
        }
    return {
        "columns": ["register_updates", "registers", "seconds", "cpu_s", "peak_rss_mib"],
        "rows": thin,
        "last_tenth": last,
    }


def _parse_variants(text: str) -> list[tuple[int, int, int]]:
    out = []
    for part in filter(None, text.split(",")):
        pct, seg, n = part.split(":")
        out.append((int(pct), parse_size(seg), int(n)))
    return out


def run_independent(args: Any, flowgo: Path, keccak_rate: Any) -> dict[str, Any]:
    cache = Path(args.wal_cache)
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="rechain-flow-ind-", dir=cache))
    profile = not args.no_profile and perf_available()
    start = machine()
    try:
        rates = [keccak_rate(1), keccak_rate(args.workers)]
        rate1 = rates[0]["permutations_per_s"]
        targets = [int(x) for x in args.ind_sizes.split(",")]
        # The variants' WALs are small: measured first, while the largest WAL is still being
        # generated (its smaller sizes are measured as soon as their segments are written).
        variants = [
            measure_series(
                flowgo, cache, work, [n], pct, seg, args.workers, args.flowgo_limit, profile, rate1
            )
            for pct, seg, n in _parse_variants(args.ind_variants)
        ]
        main = measure_series(
            flowgo,
            cache,
            work,
            targets,
            args.ind_overwrite,
            args.ind_segment_size,
            args.workers,
            args.flowgo_limit,
            profile,
            rate1,
            args.ind_wal_size,
        )
        rates += [keccak_rate(1), keccak_rate(args.workers)]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    every = [main, *variants]
    out = {
        "benchmark": "flow_replay_independent",
        "machine": machine(),
        "machine_at_start": start,
        "workers": args.workers,
        "perf_profile_hz": PERF_HZ if profile else None,
        "keccak_rate_samples": rates,
        "series": main,
        "variants": variants,
        # The headline: flow-go's time over rechain's (whole command) per size of the main
        # series, and of each variant.
        "ratio_by_register_updates": {
            str(s["input"]["register_updates"]): s.get("ratio") for s in main["sizes"]
        },
        "variant_ratios": {
            f"overwrite {v['workload']['overwrite_share']:.0%}, "
            f"{v['workload']['segment_size'] >> 20} MiB segments, "
            f"{s['input']['register_updates']} register writes": s.get("ratio")
            for v in variants
            for s in v["sizes"]
        },
        "same_final_root": all(x["same_final_root"] for x in every),
    }
    path = write_result(args.ind_name, out)
    print(json.dumps(out, indent=1))
    print(f"wrote {path}")
    if not out["same_final_root"]:
        raise SystemExit("final roots differ")
    return out


def add_arguments(ap: Any) -> None:
    ap.add_argument(
        "--independent",
        action="store_true",
        help="WALs of flowgo gen-bench at growing trie sizes (this module)",
    )
    ap.add_argument("--ind-sizes", default=DEFAULT_SIZES, help="register writes, comma-separated")
    ap.add_argument("--ind-overwrite", type=int, default=20, help="percent of writes overwriting")
    ap.add_argument("--ind-segment-size", type=parse_size, default=1 << 20)
    ap.add_argument(
        "--ind-variants",
        default=DEFAULT_VARIANTS,
        help="OVERWRITE_PCT:SEGMENT_SIZE:REGISTER_WRITES,... one size each",
    )
    ap.add_argument(
        "--flowgo-limit",
        type=float,
        default=900.0,
        help="seconds after which flow-go's replay of the largest WAL stops",
    )
    ap.add_argument(
        "--wal-cache", default=str(Path(tempfile.gettempdir()) / "rechain-flow-bench-cache")
    )
    ap.add_argument("--no-profile", action="store_true", help="no perf profile of each run")
    ap.add_argument(
        "--ind-wal-size",
        type=int,
        default=0,
        help="register writes of the WAL whose prefixes are measured (default: the largest "
        "size; a larger one reuses a cached WAL for a run of its smaller sizes)",
    )
    ap.add_argument("--ind-name", default="flow_replay_independent", help="result file name")
