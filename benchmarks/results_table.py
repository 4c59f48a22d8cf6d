"""One markdown table of the latest result of each benchmark, from benchmarks/results/*.json.

One row per results file, sorted by file name: its date and machine, the 1-minute load average
at the end of the run, the headline figures, the ratios to its peer and how many of the targets
the JSON records were met. A file whose shape this script does not know still gets a row (date,
machine, load and the count of its ``targets`` / ``ratios``).

    .venv/bin/python benchmarks/results_table.py [--results DIR] [--check FILE | --write FILE]

Without a flag the table is printed. ``--write FILE`` replaces what lies between the marker
comments ``<!-- results-table:start -->`` and ``<!-- results-table:end -->`` in FILE;
``--check FILE`` exits 1 if that part differs from the table generated now.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
START = "<!-- results-table:start -->"
END = "<!-- results-table:end -->"
HEADER = (
    "| results file | date (UTC) | machine | load | headline | vs peer | targets met |",
    "|---|---|---|---|---|---|---|",
)

Result = dict[str, Any]
# (headline cell, vs-peer cell, targets the JSON records outside `targets` / `ratios`: met?)
Cells = tuple[str, str, list[bool]]


def x(v: Any) -> str:
    """A ratio, or n/a when it was not measured."""
    return "n/a" if v is None else f"{float(v):.2f}x"


def count(v: float) -> str:
    """A register/spend count: 150 k, 1.5 M."""
    return f"{v / 1e6:.1f} M" if v >= 1e6 else f"{v / 1e3:.0f} k"


def btc_core_index(r: Result) -> Cells:
    return (
        f"export {r['export']['wall_s']:.1f} s; guided reindex "
        f"{r['reindex_core_index']['wall_s']:.2f} s, plain {r['reindex_plain']['wall_s']:.2f} s",
        f"{x(r['speedup_wall'])} plain reindex (wall; "
        f"{x(r['speedup_without_ray_start'])} without Ray start-up)",
        [],
    )


def mismatched(checks: dict[str, Any]) -> str:
    """`; counts differ: PEER, ...` for the peers whose counts differ from rechain's."""
    bad = sorted(k for k, c in checks.items() if isinstance(c, dict) and c.get("ok") is False)
    return f"; counts differ from rechain's: {', '.join(bad)}" if bad else ""


def btc_full(r: Result) -> Cells:
    ratio = {k: v.get("value") for k, v in r["ratios"].items()}
    ray = r.get("context", {}).get("whole_pipeline_2_workers_ray_over_threads")
    on_ray = "" if ray is None else f" (on an embedded Ray {x(ray)} the time)"
    checks = {k: v.get("check") for k, v in r["peers"].items() if isinstance(v, dict)}
    return (
        f"whole pipeline {r['rechain']['whole_pipeline_mb_per_s']:.1f} MB/s on "
        f"{r['rechain']['whole_pipeline_workers']} workers{on_ray}; decoder "
        f"{r['decoder_mb_per_s_per_core']:.0f} MB/s a core",
        f"{x(ratio['whole_pipeline_vs_utxo_parser_paired'])} sized UtxoParser, "
        f"{x(ratio['whole_pipeline_vs_blocks_iterator_paired'])} blocks_iterator (paired medians); "
        f"{x(ratio['whole_pipeline_vs_core_reindex'])} Core's reindex; decode-only "
        f"{x(ratio['decode_only_vs_block_parser_per_core'])} BlockParser a CPU second"
        + mismatched(checks),
        [r["speedup_1_to_2_workers"] >= r["target_speedup"]],
    )


def btc_full_scaling(r: Result) -> Cells:
    p = r["projection"]
    hours = {
        int(n): v.get("total_h_at_measured_growth", v["total_h"]) for n, v in p["nodes"].items()
    }
    goal = p["goal_h_on_16_nodes"]
    measured_gb = max(pt["bytes"] for pt in r["points"]) / 1e9
    on = ", ".join(f"{h:.2f} h on {n} nodes" for n, h in sorted(hours.items(), reverse=True))
    return (
        f"mainnet ({p['mainnet_gb']:.0f} GB) projected {on}; largest run {measured_gb:.2f} GB",
        f"goal {goal:g} h on 16 nodes",
        [hours[16] <= goal],
    )


BTC_PEERS = {
    "utxo_parser_sized": "sized UtxoParser",
    "blocks_iterator": "blocks_iterator",
    "block_parser": "BlockParser",
}


def btc_full_sizes(r: Result) -> Cells:
    by_size = sorted(r["ratio_by_size_mb"].items(), key=lambda kv: float(kv[0]))
    sizes = " / ".join(mb for mb, _ in by_size)
    peers = ", ".join(
        f"{name} " + " / ".join(x(ratios.get(key)) for _, ratios in by_size)
        for key, name in BTC_PEERS.items()
    )
    fit = r["seconds_fit"]
    fits = ", ".join(
        f"{name} {fit[key]['fixed_s']:.1f} s + {fit[key]['s_per_gb']:.1f} s/GB"
        for key, name in (("rechain", "rechain"), ("utxo_parser_sized", "sized UtxoParser"))
    )
    checks: dict[str, Any] = {}
    for size in r["sizes"].values():
        for k, c in size.get("checks", {}).items():
            checks[k] = c if c.get("ok") is False else checks.get(k, c)
    return (
        f"seconds fitted over sizes: {fits}",
        f"at {sizes} MB: {peers} (median MB/s)" + mismatched(checks),
        [],
    )


def btc_headers(r: Result) -> Cells:
    return (
        f"{r['end_to_end_headers_per_s']:,} headers/s end to end; peak RSS "
        f"{r['peak_rss_mib']['rechain_process']} MiB",
        f"scanner {x(r['scanner_vs_hash_limit'])} the double-SHA-256 limit a core; committer "
        f"{x(r['apply_vs_combined_scan'])} the scanners combined",
        [],
    )


def btc_incremental(r: Result) -> Cells:
    steps = r["steps"]
    grown = " / ".join(f"+{s['grown_by']:.0%}" for s in steps)
    same = all(s["identical_to_fresh"] for s in steps)
    return (
        f"{r['chain']['bytes'] / 1e6:,.0f} MB chain grown {grown}: rerun "
        + " / ".join(f"{s['incremental_s']:.2f}" for s in steps)
        + " s, fresh "
        + " / ".join(f"{s['fresh_s']:.1f}" for s in steps)
        + " s",
        " / ".join(f"{s['ratio']:.3f}" for s in steps)
        + f" of a fresh reindex (no-op rerun {r['base']['noop_rerun_s']} s); "
        + ("digests equal" if same else "DIGESTS DIFFER"),
        [s["ratio"] <= s["target"] for s in steps if s.get("target") is not None],
    )


def btc_publish_prints(r: Result) -> Cells:
    runs = r["runs"]
    shapes = " / ".join(f"{u['segments']:,} x {count(u['spends'])}" for u in runs)
    same = all(u["equal"] for u in runs)
    return (
        "prints " + " / ".join(f"{u['prints_s']:.2f}" for u in runs) + f" s at {shapes} "
        "(segments x spends)",
        " / ".join(x(u["range_join_s"] / u["prints_s"]) for u in runs)
        + " the range join; "
        + ("equal results" if same else "RESULTS DIFFER"),
        [],
    )


def btc_scripts(r: Result) -> Cells:
    ra, t, c = r["ratios"], r["targets"], r["chain"]
    higher = ("core_over_rechain_full_scripts", "stage_1_over_2_workers")
    met = [ra[k] >= t[k] if k in higher else ra[k] <= t[k] for k in t]
    return (
        f"{c['inputs'] / 1e6:.2f} M inputs ({c['bytes'] / 1e9:.2f} GB): full --scripts "
        f"{r['rechain_full_scripts']['wall_s']:.0f} s, scripts stage "
        f"{r['scripts_stage_2_workers_s']:.0f} s, floor {r['floor_2_threads']['wall_s']:.0f} s",
        f"{x(ra['core_over_rechain_full_scripts'])} Core -assumevalid=0; stage "
        f"{x(ra['stage_over_floor'])} its floor; 1 -> 2 workers {x(ra['stage_1_over_2_workers'])}"
        f"; peak RSS {x(ra['peak_rss_over_baseline_plus_budget'])} baseline + budget",
        met,
    )


def btc_utxo(r: Result) -> Cells:
    ra, t, c = r["ratios"], r["targets"], r["chain"]
    tip, past = r["dump_at_tip"], r["dump_10pct_below_tip"]
    return (
        f"{tip['coins']:,} coins ({c['bytes'] / 1e9:.2f} GB chain): snapshot at the tip "
        f"{tip['wall_s']:.2f} s, 10% below {past['wall_s']:.2f} s; Parquet "
        f"{r['parquet_coins_per_wall_s'] / 1e3:.0f}k coins/s",
        f"{x(ra['tip_dump_over_reindex'])} the full reindex; Parquet per core "
        f"{x(ra['parquet_coins_per_cpu_s_over_utxo_to_parquet'])} utxo-to-parquet; peak RSS "
        f"{x(ra['past_peak_rss_over_baseline_plus_budget'])} baseline + budget",
        [ra[k] <= t[k] for k in t],
    )


def eth_headers(r: Result) -> Cells:
    h, e = r["header_import"], r["ethash"]
    return (
        f"{h['rechain_headers_per_s']:,} headers/s ({h['headers']:,} headers, "
        f"{h['rechain_wall_s']:.2f} s)",
        f"{x(h['speedup_vs_geth_insert'])} geth's insert (the floor with `eth_blocks`: "
        f"{x(h['floor_with_table_speedup_vs_geth_insert'])}); ethash {x(e['per_core_vs_geth'])} "
        f"geth a core, 1 -> 2 workers {x(e['rechain_scaling_1_to_2'])} "
        f"(geth {x(e['geth_scaling_1_to_2'])})" + _ere(r.get("ere_import")),
        [h["speedup_vs_geth_insert"] >= h["target"]],
    )


def _ere(e: Result | None) -> str:
    """The Ere section of eth_headers, when the results hold one."""
    if e is None:
        return ""
    return (
        f"; Ere import {x(e['speedup_vs_geth_import'])} geth's history import "
        f"({e['blocks']:,} blocks, {e['rechain_blocks_per_s']:,} blocks/s)"
    )


def flow_checkpoint(r: Result) -> Cells:
    m, w = r["read_modes"], r["write"]
    return (
        f"read {m['streaming_s']:.2f} s verifying, {m['trust_hashes_s']:.3f} s with "
        f"--trust-hashes (flow-go {m['flowgo_s']:.2f} s); write {w['rechain_seconds']:.3f} s",
        f"--trust-hashes read {x(m['trust_hashes_speedup_vs_flowgo'])}, --trust-hashes verify "
        f"{x(r['verify_only']['trust_hashes_speedup_vs_flowgo_read'])} flow-go's read; "
        f"verifying read {x(r['keccak_floor']['rechain_read_vs_floor'])} the keccak floor; "
        f"write {x(w['speedup_vs_flowgo'])} flow-go",
        [],
    )


def flow_replay(r: Result) -> Cells:
    sizes = sorted(r["sizes"].items(), key=lambda kv: int(kv[0]))
    per = " / ".join(k for k, _ in sizes)
    return (
        f"updates/s at {per} registers an update: "
        + " / ".join(f"{s['rechain_updates_per_s']:,}" for _, s in sizes),
        " / ".join(x(s["speedup_vs_flowgo"]) for _, s in sizes)
        + " flow-go's replay"
        + ("; same roots" if all(s["same_final_root"] for _, s in sizes) else "; ROOTS DIFFER"),
        [],
    )


def flow_replay_independent(r: Result) -> Cells:
    sizes = r["series"]["sizes"]
    writes = " / ".join(count(s["input"]["register_updates"]) for s in sizes)
    cells = " / ".join(x(s.get("ratio")) for s in sizes) + " flow-go's replay"
    for v in r.get("variants") or []:
        w, size = v["workload"], v["sizes"][0]
        cells += (
            f"; {w['overwrite_share']:.0%} overwrites, {w['segment_size'] >> 20} MiB segments at "
            f"{count(size['input']['register_updates'])}: {x(size.get('ratio'))}"
        )
    beside = sum(bool(s["rechain"].get("generator_running")) for s in sizes)
    if beside:
        cells += f"; the WAL generator ran beside {beside} of {len(sizes)} sizes"
    return (
        "rechain "
        + " / ".join(f"{s['rechain']['seconds']:.1f}" for s in sizes)
        + f" s at {writes} register writes",
        cells + ("; same roots" if r["same_final_root"] else "; ROOTS DIFFER"),
        [],
    )


def flow_replay_out_of_core(r: Result) -> Cells:
    s, rss, i = r["seconds"], r["peak_rss_mib"], r["input"]
    return (
        f"paged replay {s['rechain_paged']:.2f} s at {rss['rechain_paged']} MiB (budget "
        f"{i['memory_budget'] >> 20} MiB, checkpoint {i['checkpoint_over_budget']:.1f}x it)",
        f"{x(r['paged_over_flowgo_speed'])} flow-go "
        f"({x(r['paged_trusting_hashes_over_flowgo_speed'])} with --trust-hashes); "
        f"RSS {rss['rechain_paged']} / {rss['flowgo']} MiB",
        [],
    )


def scaling(r: Result) -> Cells:
    top = max(p["multiplier"] for p in r["points"])
    best = {p["workers"]: p["best"]["headers_per_s"] for p in r["points"] if p["multiplier"] == top}
    rates = " / ".join(f"{v:,}" for _, v in sorted(best.items()))
    workers = " / ".join(str(n) for n in sorted(best))
    return (
        f"{top}x input: time {x(r['linearity_at_top_size'])} linear (1 worker); "
        f"{rates} headers/s with {workers} workers",
        f"itself: 1 -> {max(best)} workers {x(r['speedup_1_to_max_workers'][f'{top}x'])} at {top}x",
        [],
    )


def query_export(r: Result) -> Cells:
    pq, csv = r["formats"][".parquet"], r["formats"][".csv"]
    return (
        f"`query --out` of {count(r['rows'])} rows: Parquet {pq['rechain']['seconds']} s, "
        f"{pq['rechain']['peak_rss_mib']} MiB; CSV {csv['rechain']['seconds']} s",
        f"DuckDB's COPY: Parquet {x(pq['time_ratio'])}, CSV {x(csv['time_ratio'])} its time",
        [],
    )


HANDLERS: dict[str, Callable[[Result], Cells]] = {
    "btc_core_index": btc_core_index,
    "btc_full": btc_full,
    "btc_full_scaling": btc_full_scaling,
    "btc_full_sizes": btc_full_sizes,
    "btc_headers": btc_headers,
    "btc_incremental": btc_incremental,
    "btc_publish_prints": btc_publish_prints,
    "btc_scripts": btc_scripts,
    "btc_utxo": btc_utxo,
    "eth_headers": eth_headers,
    "flow_checkpoint": flow_checkpoint,
    "flow_replay": flow_replay,
    "flow_replay_independent": flow_replay_independent,
    "flow_replay_out_of_core": flow_replay_out_of_core,
    "query_export": query_export,
    "scaling": scaling,
}


def handler_for(stem: str, r: Result) -> Callable[[Result], Cells] | None:
    """By the JSON's `benchmark`, else the longest known name the file name starts with."""
    name = r.get("benchmark")
    if isinstance(name, str) and name in HANDLERS:
        return HANDLERS[name]
    known = [k for k in HANDLERS if stem == k or stem.startswith(k + "_")]
    return HANDLERS[max(known, key=len)] if known else None


def recorded_targets(o: Any) -> list[bool]:
    """Every boolean under a `targets` key and every `met` under `ratios`, at any depth."""
    out: list[bool] = []
    if isinstance(o, dict):
        for k, v in o.items():
            if k == "targets" and isinstance(v, dict):
                out += [b for b in v.values() if isinstance(b, bool)]
            elif k == "ratios" and isinstance(v, dict):
                out += [e["met"] for e in v.values() if isinstance(e, dict) and "met" in e]
            else:
                out += recorded_targets(v)
    elif isinstance(o, list):
        for v in o:
            out += recorded_targets(v)
    return out


def row(path: Path) -> str:
    r = json.loads(path.read_text())
    m = r.get("machine") if isinstance(r.get("machine"), dict) else {}
    date = str(m.get("date", "?")).replace("T", " ")[:16]
    cpu = str(m.get("cpu") or "?").replace("(R)", "").replace(" Processor", "")
    load = m.get("load_avg_1_5_15m")
    targets = recorded_targets(r)
    headline, peer = "-", "-"
    handler = handler_for(path.stem, r)
    if handler is not None:
        try:
            headline, peer, extra = handler(r)
            targets += extra
        except (KeyError, TypeError, ValueError, IndexError, ZeroDivisionError) as e:
            headline = f"shape not recognised ({type(e).__name__}: {e})"
    cells = [
        f"`{path.name}`",
        date,
        f"{m.get('cores', '?')} x {cpu}",
        f"{load[0]:.1f}" if isinstance(load, list) and load else "-",
        headline,
        peer,
        f"{sum(targets)} / {len(targets)}" if targets else "none recorded",
    ]
    return "| " + " | ".join(c.replace("|", "/") for c in cells) + " |"


def table(results: Path) -> str:
    files = sorted(results.glob("*.json"), key=lambda p: p.name)
    return "\n".join([*HEADER, *(row(p) for p in files)])


def split(text: str, name: str) -> tuple[str, str, str]:
    """FILE's text before the table, the table's part, and after it."""
    start = text.find(START)
    end = text.find(END, start + len(START)) if start >= 0 else -1
    if start < 0 or end < 0:
        raise SystemExit(f"{name}: no {START} ... {END} markers")
    return text[: start + len(START)], text[start + len(START) : end], text[end:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=RESULTS, help="folder of the JSON files")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", type=Path, metavar="FILE", help="exit 1 if FILE's table is stale")
    mode.add_argument("--write", type=Path, metavar="FILE", help="replace FILE's table")
    args = ap.parse_args()
    part = "\n" + table(args.results) + "\n"
    if args.check is None and args.write is None:
        sys.stdout.write(part.lstrip("\n"))
        return
    target: Path = args.check or args.write
    before, current, after = split(target.read_text(), str(target))
    if current == part:
        return
    if args.check is not None:
        raise SystemExit(
            f"{target}: the results table differs from {args.results}/*.json; regenerate it "
            f"with: .venv/bin/python benchmarks/results_table.py --write {target}"
        )
    target.write_text(before + part + after)
    print(f"{target}: results table rewritten")


if __name__ == "__main__":
    main()
