"""PNG charts from the benchmark results in benchmarks/results/*.json.

Writes, beside the JSON: ``scaling.png`` (headers/s and time against input size, one line per
worker count), ``btc_headers_stages.png`` (where a header reindex's time goes),
``btc_full_workers.png`` (body pass with 1 and 2 workers; decoder against the hashing ceiling
and the peer parsers) and ``ratios.png`` (each benchmark's headline ratio against its target).
A chart whose JSON is missing is skipped with a note. Each chart names the machine its JSON was
measured on, since results may come from different hosts.

    .venv/bin/python benchmarks/charts.py [--results benchmarks/results]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # headless: no display on CI or cluster nodes

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import RESULTS  # noqa: E402

Result = dict[str, Any]
MET, MISSED = "#2e7d32", "#c62828"


def machine_name(result: Result) -> str:
    m = result.get("machine", {})
    return f"{m.get('cores', '?')} cores, {m.get('cpu') or 'unknown CPU'}"


def machine_line(result: Result) -> str:
    m = result.get("machine", {})
    line = f"{machine_name(result)}, {m.get('date', '')}"
    load = m.get("load_avg_1_5_15m")
    if load:
        line += f", load avg {load[0]:.1f}"
    return line


def titled(fig: Figure, title: str, result: Result) -> None:
    fig.suptitle(f"{title}\n{machine_line(result)}", fontsize=11)


def chart_scaling(r: Result) -> Figure:
    points = r["points"]
    fig, (ax_rate, ax_time) = plt.subplots(1, 2, figsize=(11, 4.8), constrained_layout=True)
    for workers in sorted({p["workers"] for p in points}):
        mine = sorted((p for p in points if p["workers"] == workers), key=lambda p: p["headers"])
        xs = [p["headers"] / 1e6 for p in mine]
        label = f"{workers} worker{'s' if workers > 1 else ''}"
        ax_rate.plot(xs, [p["best"]["headers_per_s"] / 1e3 for p in mine], "o-", label=label)
        secs = [p["best"]["seconds_excluding_ray_start"] for p in mine]
        line = ax_time.plot(xs, secs, "o-", label=label)[0]
        # Linear growth from the smallest point: where the time would be if cost grew 1:1.
        ax_time.plot(xs, [secs[0] * x / xs[0] for x in xs], ":", color=line.get_color(), lw=1)
    ax_rate.set(xlabel="input (million headers)", ylabel="thousand headers/s (best run)")
    ax_rate.set_title("throughput (Ray start-up excluded)", fontsize=10)
    ax_rate.set_ylim(bottom=0)
    ax_time.set(xlabel="input (million headers)", ylabel="seconds (Ray start-up excluded)")
    ax_time.set_title("time; dotted = linear from 1x", fontsize=10)
    ax_time.set_ylim(bottom=0)
    for ax in (ax_rate, ax_time):
        ax.grid(alpha=0.3)
        ax.legend()
    titled(fig, "Header reindex at 1x / 2x / 4x input, 1 vs 2 workers", r)
    return fig


def chart_full_scaling(r: Result) -> Figure:
    """Each full-reindex stage's seconds against input size, and the projected mainnet hours."""
    points = r["points"]
    fig, (ax_time, ax_proj) = plt.subplots(1, 2, figsize=(12, 4.8), constrained_layout=True)
    xs = [p["bytes"] / 1e6 for p in points]
    for stage, figures in r["per_stage"].items():
        secs = [p["run"]["stage_s"].get(stage, 0.0) for p in points]
        exponent = figures["growth_exponent"]
        grows = "" if exponent is None else f", x^{exponent:.2f}"
        label = f"{stage} ({figures['where']}{grows})"
        line = ax_time.plot(xs, secs, "o-", label=label)[0]
        ax_time.plot(xs, [secs[0] * x / xs[0] for x in xs], ":", color=line.get_color(), lw=1)
    ax_time.set(xlabel="input (MB of blk files)", ylabel="seconds")
    ax_time.set_title("time per stage; dotted = linear from 1x", fontsize=10)
    ax_time.set_ylim(bottom=0)
    ax_time.legend(fontsize=8)
    proj = r["projection"]
    nodes = list(proj["nodes"])
    stages = list(r["per_stage"])
    bottom = [0.0] * len(nodes)
    for stage in stages:
        hours = [proj["nodes"][n]["stage_h"][stage] for n in nodes]
        ax_proj.bar([f"{n} nodes" for n in nodes], hours, bottom=bottom, label=stage)
        bottom = [b + h for b, h in zip(bottom, hours, strict=True)]
    bound = [proj["nodes"][n]["total_h_if_coordinator_used_all_its_cores"] for n in nodes]
    ax_proj.plot([f"{n} nodes" for n in nodes], bound, "k_", ms=40, mew=2)
    grown = [proj["nodes"][n].get("total_h_at_measured_growth") for n in nodes]
    if None not in grown:
        ax_proj.plot(
            [f"{n} nodes" for n in nodes],
            grown,
            "rD",
            label="stages above linear grown at their exponent",
        )
    ax_proj.axhline(proj["goal_h_on_16_nodes"], color=MET, ls="--", lw=1, label="goal (16 nodes)")
    ax_proj.set(ylabel="hours")
    ax_proj.set_title(
        f"mainnet ({proj['mainnet_gb']:.0f} GB), {proj['cores_per_node']} cores/node; "
        "bar = coordinator as measured, tick = it using all its cores",
        fontsize=9,
    )
    ax_proj.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    for ax in (ax_time, ax_proj):
        ax.grid(alpha=0.3)
    sizes = " / ".join(f"{p['multiplier']}x" for p in points)
    titled(fig, f"Full reindex stages at {sizes} input, {r['workers']} workers", r)
    return fig


# Inside the scan phase: the committer's writes and the workers' decode (summed over workers).
WITHIN_SCAN = ("commit_s", "worker_decode_s")


def chart_stages(r: Result) -> Figure:
    stages = r["stage_seconds"]
    total = stages["total_s"]
    # The wall-clock phases follow each other; what they do not cover is "other".
    phases = {k: v for k, v in stages.items() if k != "total_s" and k not in WITHIN_SCAN}
    phases["other_s"] = max(total - sum(phases.values()), 0.0)
    fig, (ax_wall, ax_scan) = plt.subplots(
        2, 1, figsize=(10, 5), height_ratios=[1, 1.2], constrained_layout=True
    )
    left = 0.0
    cmap = plt.get_cmap("tab10")
    for i, (name, secs) in enumerate(phases.items()):
        ax_wall.barh([0], [secs], left=left, color=cmap(i % 10), label=name.removesuffix("_s"))
        if secs / total > 0.06:
            ax_wall.text(left + secs / 2, 0, f"{secs:.2f}", ha="center", va="center", fontsize=8)
        left += secs
    ax_wall.set_yticks([])
    ax_wall.set_xlim(0, total * 1.01)
    ax_wall.set_xlabel("seconds of wall time, in order")
    ax_wall.set_title(
        f"{r['input']['headers']:,} headers: {total:.2f} s total, "
        f"{total - stages.get('ray_start_s', 0):.2f} s without Ray start-up",
        fontsize=10,
    )
    ax_wall.legend(ncol=len(phases), fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.45))
    inner = {"scan (wall)": stages["scan_s"]}
    inner.update({k.removesuffix("_s"): stages[k] for k in WITHIN_SCAN if k in stages})
    bars = ax_scan.barh(list(inner), list(inner.values()), color=["#1565c0", "gray", "gray"])
    ax_scan.bar_label(bars, fmt="%.2f s", padding=3, fontsize=8)
    ax_scan.invert_yaxis()
    ax_scan.set_xlabel("seconds")
    ax_scan.set_title(
        "inside the scan phase: committer writes, worker decode (summed over workers)", fontsize=10
    )
    ax_scan.grid(axis="x", alpha=0.3)
    titled(fig, "Header reindex: time by stage", r)
    return fig


def chart_full(r: Result) -> Figure:
    fig, (ax_w, ax_mb) = plt.subplots(1, 2, figsize=(13, 5), constrained_layout=True)
    workers = r["workers"]
    # Runs by worker count ("1", "2"); a pinned run ("1_on_1_core") is read from the JSON.
    keys = sorted((k for k in workers if k.isdigit()), key=int)
    # Results before the chain state decoded the best chain itself have the body pass only.
    secs = [workers[k].get("decode_stages_s", workers[k]["body_pass_s"]) for k in keys]
    bars = ax_w.bar([f"{k} worker{'s' if int(k) > 1 else ''}" for k in keys], secs, color="#1565c0")
    ax_w.bar_label(bars, fmt="%.2f s", fontsize=8)
    ax_w.set_ylabel("decode stages (bodies + chain state) seconds")
    ax_w.set_title(
        f"speed-up {r['speedup_1_to_2_workers']:.2f}x (target {r.get('target_speedup', '?')}x)",
        fontsize=10,
    )
    rates = {
        "SHA-256 limit\n(hashlib)": r["sha256_limit_mb_per_s_per_core"],
        "hashing\nceiling": r.get("hashing_ceiling_mb_per_s_per_core"),
        "decoder\n(generated)": r["decoder_mb_per_s_per_core"],
        "decoder\n(mainnet block)": r.get("decoder_mainnet_block_mb_per_s_per_core"),
    }
    peer_names = {
        "block_parser": "BlockParser",
        "utxo_parser": "UtxoParser",
        "utxo_parser_sized": "UtxoParser\n(sized)",
        "blocks_iterator": "blocks_iterator",
    }
    for key, name in peer_names.items():
        rates[f"{name}\n(per CPU s)"] = (r.get("peers") or {}).get(key, {}).get("mb_per_cpu_s")
    rates = {k: v for k, v in rates.items() if v}
    colors = ["gray", "silver", "#1565c0", "#42a5f5"] + ["#ef6c00"] * len(peer_names)
    bars = ax_mb.bar(list(rates), list(rates.values()), color=colors[: len(rates)])
    ax_mb.bar_label(bars, fmt="%.1f", fontsize=8)
    ax_mb.set_yscale("log")
    ax_mb.set_ylim(bottom=min(rates.values()) / 3)  # every bar visibly above the axis
    ax_mb.set_ylabel("MB/s on one core (log)")
    ax_mb.set_title(
        f"decoder / hashing ceiling {r['decoder_vs_hashing_ceiling']:.2f} "
        f"(target {r.get('target_vs_hashing_ceiling', '?')})",
        fontsize=10,
    )
    ax_mb.tick_params(axis="x", labelsize=7, labelrotation=25)
    for ax in (ax_w, ax_mb):
        ax.grid(axis="y", alpha=0.3)
    titled(fig, "Full reindex: 1 vs 2 workers, decoder vs hashing ceiling vs peers", r)
    return fig


# (benchmark, label, value, target, higher is better); only the fields present are charted.
Ratio = tuple[str, str, float, float, bool]


def ratios(results: dict[str, Result]) -> list[Ratio]:
    out: list[Ratio] = []

    def add(
        bench: str, label: str, get: Callable[[Result], Any], target: Any, higher: bool
    ) -> None:
        r = results.get(bench)
        if r is None:
            return
        try:
            value = get(r)
            goal = target(r) if callable(target) else target
        except (KeyError, TypeError):
            return
        if value is not None and goal is not None:
            out.append((bench, label, float(value), float(goal), higher))

    add("btc_headers", "scanner / SHA-256d limit", lambda r: r["scanner_vs_hash_limit"], 0.5, True)
    add("btc_headers", "end-to-end headers/s", lambda r: r["end_to_end_headers_per_s"], 5e5, True)
    add("btc_headers", "committer / combined scan", lambda r: r["apply_vs_combined_scan"], 3, True)
    add(
        "btc_headers",
        "bytes read fraction",
        lambda r: r["sparse_chain"]["read_fraction"],
        0.05,
        False,
    )
    add(
        "btc_headers",
        "peak RSS MiB (process)",
        lambda r: r["peak_rss_mib"]["rechain_process"],
        1024,
        False,
    )
    add(
        "btc_full",
        "decode stages 1->2 workers",
        lambda r: r["speedup_1_to_2_workers"],
        lambda r: r["target_speedup"],
        True,
    )
    for name in (results.get("btc_full") or {}).get("ratios", {}):
        add(
            "btc_full",
            name.replace("_", " "),
            lambda r, n=name: r["ratios"][n]["value"],
            lambda r, n=name: r["ratios"][n]["target"],
            True,
        )
    add("btc_core_index", "core-index speed-up (wall)", lambda r: r["speedup_wall"], 2, True)
    add("btc_core_index", "export seconds (wall)", lambda r: r["export"]["wall_s"], 10, False)
    for size in (results.get("flow_replay") or {}).get("sizes", {}):
        add(
            "flow_replay",
            f"rechain / flow-go speed, {size} registers/update",
            lambda r, k=size: r["sizes"][k]["speedup_vs_flowgo"],
            3,
            True,
        )
        add(
            "flow_replay",
            f"RSS rechain / flow-go, {size} registers/update",
            lambda r, k=size: (
                r["sizes"][k]["peak_rss_mib"]["rechain_process"]
                / r["sizes"][k]["peak_rss_mib"]["flowgo"]
            ),
            1,
            False,
        )
    add(
        "scaling",
        "time growth at top size (1.0 = linear)",
        lambda r: r["linearity_at_top_size"],
        lambda r: r["target_linearity_max"],
        False,
    )
    return out


def chart_ratios(results: dict[str, Result]) -> Figure | None:
    rows = ratios(results)
    if not rows:
        return None
    # Score: value / target when higher is better, target / value when lower is: >= 1 is met.
    scores = [(v / t if hi else t / v) if v and t else 0.0 for _, _, v, t, hi in rows]
    labels = [f"{b}: {lab}" for b, lab, *_ in rows]
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(rows) + 2), constrained_layout=True)
    colors = [MET if s >= 1 else MISSED for s in scores]
    bars = ax.barh(labels, scores, color=colors)

    def num(x: float) -> str:
        return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"

    notes = [
        f"{num(v)} {'>=' if hi else '<='} {num(t)}" + (" met" if s >= 1 else " missed")
        for (_, _, v, t, hi), s in zip(rows, scores, strict=True)
    ]
    ax.bar_label(bars, labels=notes, padding=3, fontsize=8)
    ax.axvline(1.0, color="black", lw=1)
    ax.set_xscale("log")
    ax.set_xlim(min(min(scores) * 0.5, 0.5), max(max(scores) * 4, 4))
    ax.invert_yaxis()
    ax.set_xlabel("fraction of target (log; 1 = target, right of the line = met)")
    ax.tick_params(axis="y", labelsize=8)
    machines = sorted({machine_name(r) for r in results.values()})
    fig.suptitle("Headline ratios against targets\n" + "; ".join(machines), fontsize=10)
    return fig


def load(results_dir: Path, name: str) -> Result | None:
    path = results_dir / f"{name}.json"
    if not path.exists():
        print(f"note: {path} missing; skipping what needs it (run benchmarks/{name}.py)")
        return None
    return json.loads(path.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=RESULTS)
    args = ap.parse_args()
    names = [
        "scaling",
        "btc_headers",
        "btc_full",
        "btc_full_scaling",
        "btc_core_index",
        "flow_replay",
    ]
    results = {n: r for n in names if (r := load(args.results, n)) is not None}
    # Each chart with the one results file it needs (None: it uses whichever are present).
    charts: list[tuple[str, str | None, Callable[..., Figure | None]]] = [
        ("scaling.png", "scaling", chart_scaling),
        ("btc_headers_stages.png", "btc_headers", chart_stages),
        ("btc_full_workers.png", "btc_full", chart_full),
        ("btc_full_scaling.png", "btc_full_scaling", chart_full_scaling),
        ("ratios.png", None, lambda: chart_ratios(results)),
    ]
    for filename, needs, make in charts:
        if needs is None:
            fig = make()
        else:
            fig = make(results[needs]) if needs in results else None
        if fig is None:
            print(f"note: {filename} skipped (its results JSON is missing)")
            continue
        path = args.results / filename
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
