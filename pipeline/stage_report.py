"""``rechain stages``: every pipeline's stage checkpoints in a data folder, in stage order, and
the shares of the memory budget its stages take (``runtime/budget.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rechain.pipeline.engine.driver import read_checkpoints
from rechain.pipeline.runtime import budget
from rechain.pipeline.store.datadir import DataDir

#: Pipelines and the order of their stages (a stage never run is listed as such).
PIPELINES = ("bitcoin", "flow", "eth")


def _order(pipeline: str) -> list[str]:
    if pipeline == "bitcoin":
        from rechain.pipeline.bitcoin.stages import stages

        return [s.name for s in stages("full")]
    if pipeline == "eth":
        from rechain.pipeline.ethereum.stages import stages as eth_stages

        return [s.name for s in eth_stages()]
    from rechain.pipeline.flow.stages import stages as flow_stages

    return [s.name for s in flow_stages()]


def stage_report(data_path: Path) -> dict[str, Any]:
    with DataDir(data_path, readonly=True) as data:
        out: dict[str, Any] = {}
        for pipeline in PIPELINES:
            cps = read_checkpoints(data, pipeline)
            if not cps:
                continue
            rows = []
            for name in _order(pipeline):
                cp = cps.get(name)
                rows.append(
                    {
                        "stage": name,
                        "state": "never run"
                        if cp is None
                        else ("invalidated" if cp.get("invalidated") else "done"),
                        **{
                            k: (cp or {}).get(k)
                            for k in ("height", "rows", "last_run", "seconds", "runs")
                        },
                        **({"detail": cp["detail"]} if cp and cp.get("detail") else {}),
                    }
                )
            out[pipeline] = rows
        return {"pipelines": out, "budget_shares": budget.table()}


def format_stages(report: dict[str, Any]) -> str:
    lines = []
    for pipeline, rows in report["pipelines"].items():
        lines.append(pipeline)
        for r in rows:
            height = "" if r["height"] is None else f"height {r['height']:,}  "
            rows_ = "" if r["rows"] is None else f"rows {r['rows']:,}  "
            took = "" if r["seconds"] is None else f"{r['seconds']:.2f} s  "
            lines.append(
                f"  {r['stage']:<12} {r['state']:<12} {height}{rows_}{took}{r['last_run'] or ''}"
            )
        shares = report.get("budget_shares", {}).get(pipeline, {})
        if shares:
            lines.append(
                "  memory budget shares: " + ", ".join(f"{n} {f}" for n, f in shares.items())
            )
    return "\n".join(lines) if lines else "no stage has run in this data folder"
