"""Checks that the Grafana dashboard and the Prometheus rules use only metrics rechain exports.

The exported names are read from pipeline/metrics.py (the name given with every Counter, Gauge,
Histogram and Summary, made directly or, as there, declared as `_Metric("Counter", "name", ...)`
and made on first use); histograms also export NAME_bucket, NAME_sum and NAME_count. Every
PromQL expression of the dashboard (panels, rows, template variables) and of rules.yml is reduced
to its metric names (label matchers, strings, ranges, grouping clauses, functions and keywords
removed), and each must be one of those (or, in rules, a recording rule defined there). The
dashboard must also be well formed: unique panel ids, a Prometheus datasource variable that every
panel and query uses, and the panels the README promises.

Usage: python check_dashboard.py METRICS_PY DASHBOARD_JSON RULES_YML
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
    "unless", "offset", "inf", "nan", "atan2", "le",
}
DECL = re.compile(
    r"\b(Counter|Gauge|Histogram|Summary)(?:\(|[\"']\s*,)\s*[\"']([A-Za-z_:][\w:]*)[\"']"
)


def exported_metrics(metrics_py: Path) -> set[str]:
    names: set[str] = set()
    for kind, name in DECL.findall(metrics_py.read_text()):
        names.add(name)
        if kind in ("Histogram", "Summary"):
            names |= {f"{name}_sum", f"{name}_count"}
        if kind == "Histogram":
            names.add(f"{name}_bucket")
    return names


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression (Grafana variables and macros allowed)."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)
    e = re.sub(r"\{[^{}]*\}", " ", e)  # label matchers
    e = re.sub(r"\[[^\]]*\]", " ", e)  # ranges and subqueries
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    e = re.sub(r"\$\{?[A-Za-z_]\w*\}?", " ", e)  # $__rate_interval, ${stage}
    names = set()
    for m in re.finditer(r"(?<![\w:.])([A-Za-z_:][\w:]*)(\s*\()?", e):
        ident, call = m.group(1), m.group(2)
        if call or ident.lower() in KEYWORDS:
            continue
        if re.fullmatch(r"\d+(e\d+)?", ident) or re.fullmatch(r"\d*[smhdwy]", ident):
            continue
        names.add(ident)
    return names


def main(metrics_py: Path, dashboard: Path, rules: Path) -> int:
    problems: list[str] = []
    known = exported_metrics(metrics_py)
    if not known:
        problems.append(f"{metrics_py}: no metric declarations found")

    # ------------------------------------------------------------------ dashboard
    try:
        dash = json.loads(dashboard.read_text())
    except json.JSONDecodeError as exc:
        print(f"  FAIL {dashboard}: not valid JSON: {exc}")
        return 1
    templating = dash.get("templating", {}).get("list", [])
    ds_vars = [v["name"] for v in templating if v.get("type") == "datasource" and v.get("query") == "prometheus"]
    if not ds_vars:
        problems.append("dashboard: no Prometheus datasource variable")
    ds_uids = {f"${{{n}}}" for n in ds_vars} | {f"${n}" for n in ds_vars}

    exprs: list[tuple[str, str]] = []
    for v in templating:
        if v.get("type") == "query":
            q = v.get("query")
            q = q.get("query", "") if isinstance(q, dict) else (q or "")
            m = re.fullmatch(r"\s*label_values\((.*),\s*\w+\)\s*", q)
            exprs.append((f"variable {v.get('name')}", m.group(1) if m else q))
            if (v.get("datasource") or {}).get("uid") not in ds_uids:
                problems.append(f"dashboard: variable {v.get('name')} does not use the datasource variable")

    def all_panels(panels: list[dict[str, Any]]):
        for p in panels:
            yield p
            yield from all_panels(p.get("panels", []))

    ids = []
    titles = []
    for p in all_panels(dash.get("panels", [])):
        ids.append(p.get("id"))
        titles.append(p.get("title", ""))
        if p.get("type") == "row":
            continue
        if not p.get("targets"):
            problems.append(f"dashboard: panel {p.get('title')!r} has no queries")
        for src in [p] + p.get("targets", []):
            uid = (src.get("datasource") or {}).get("uid")
            if uid not in ds_uids:
                problems.append(f"dashboard: panel {p.get('title')!r} datasource {uid!r} is not the variable")
                break
        for t in p.get("targets", []):
            if not t.get("expr", "").strip():
                problems.append(f"dashboard: panel {p.get('title')!r} query {t.get('refId')} is empty")
            exprs.append((f"panel {p.get('title')!r}", t.get("expr", "")))
    if len(ids) != len(set(ids)):
        problems.append("dashboard: panel ids are not unique")

    used_in_dashboard: set[str] = set()
    for where, expr in exprs:
        names = metric_names(expr)
        if not names:
            problems.append(f"dashboard: {where} names no metric: {expr}")
        for n in sorted(names - known):
            problems.append(f"dashboard: {where} uses {n}, which pipeline/metrics.py does not export")
        used_in_dashboard |= names
    required = {
        "rechain_stage_records_total", "rechain_stage_bytes_read_total", "rechain_stage_skips_total",
        "rechain_shard_decode_seconds_bucket", "rechain_commit_seconds_bucket",
        "rechain_queue_depth", "rechain_link_seconds",
    }
    for n in sorted(required - used_in_dashboard):
        problems.append(f"dashboard: no panel shows {n}")
    for metric in ("rechain_shard_decode_seconds_bucket", "rechain_commit_seconds_bucket"):
        for q in ("0.5", "0.95"):
            if not any(f"histogram_quantile({q}," in e and metric in e for _, e in exprs):
                problems.append(f"dashboard: no histogram_quantile({q}) over {metric}")

    # ------------------------------------------------------------------ rules
    doc = yaml.safe_load(rules.read_text()) or {}
    recorded = {r["record"] for g in doc.get("groups", []) for r in g.get("rules", []) if "record" in r}
    n_rules = 0
    for g in doc.get("groups", []):
        for r in g.get("rules", []):
            n_rules += 1
            name = r.get("record") or r.get("alert")
            for n in sorted(metric_names(str(r.get("expr", ""))) - known - recorded):
                problems.append(f"rules: {name} uses {n}, which pipeline/metrics.py does not export")

    if problems:
        for p in problems:
            print(f"  FAIL {p}")
        return 1
    print(
        f"check_dashboard: {len(ids)} panels, {len(exprs)} queries and {n_rules} rules use only "
        f"the {len(known)} series names pipeline/metrics.py exports"
    )
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 4:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])))
