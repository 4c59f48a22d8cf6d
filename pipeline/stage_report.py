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


def _stages(pipeline: str, data: DataDir) -> list[Any]:
    if pipeline == "bitcoin":
        from rechain.pipeline.bitcoin.stages import stages
        from rechain.pipeline.store.folder import folder_record

        # The script checks are a stage of the folders that asked for them (``--scripts``).
        return list(stages("full", scripts=bool(folder_record(data).get("scripts"))))
    if pipeline == "eth":
        from rechain.pipeline.ethereum.stages import stages as eth_stages

        return list(eth_stages())
    from rechain.pipeline.flow.stages import stages as flow_stages

    return list(flow_stages())


def _state(cp: dict[str, Any] | None, previous: dict[str, Any] | None, after: Any) -> str:
    if cp is None:
        return "never run"
    if cp.get("invalidated"):
        return "invalidated"
    # Its input is not what the stage before it last committed: that stage ran again since
    # (an interrupted run, or a run that stopped before this stage).
    if previous is not None and not after.ephemeral and cp.get("input") != previous.get("output"):
        return "behind"
    return "done"


def pipeline_states(data: DataDir, pipeline: str) -> list[tuple[str, str, dict[str, Any] | None]]:
    """(stage, state, checkpoint) in stage order: ``done``, ``never run``, ``invalidated`` or
    ``behind`` (its input changed since it ran)."""
    cps = read_checkpoints(data, pipeline)
    out = []
    previous: tuple[Any, dict[str, Any]] | None = None
    for stage in _stages(pipeline, data):
        cp = cps.get(stage.name)
        out.append(
            (
                stage.name,
                _state(cp, previous[1] if previous else None, previous[0] if previous else None),
                cp,
            )
        )
        previous = (stage, cp) if cp is not None else None
    return out


def behind(data: DataDir) -> list[str]:
    """One message per stage of any pipeline that is not up to date with the stage before it:
    the tables may lag the index, so ``status`` and ``verify`` report it as a failure."""
    from rechain.pipeline.store.folder import COMMANDS

    messages = []
    for pipeline in PIPELINES:
        if not read_checkpoints(data, pipeline):
            continue
        for name, state, _ in pipeline_states(data, pipeline):
            if state in ("behind", "invalidated"):
                messages.append(
                    f"{pipeline} stage {name} is {state}: a run stopped before it finished; "
                    f"rerun `{COMMANDS[pipeline]}` on this folder"
                )
    return messages


def stage_report(data_path: Path) -> dict[str, Any]:
    with DataDir(data_path, readonly=True) as data:
        out: dict[str, Any] = {}
        for pipeline in PIPELINES:
            if not read_checkpoints(data, pipeline):
                continue
            rows = []
            for name, state, cp in pipeline_states(data, pipeline):
                rows.append(
                    {
                        "stage": name,
                        "state": state,
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
