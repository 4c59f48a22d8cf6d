"""How a full reindex's stages grow with input size, and what that projects for mainnet.

Runs ``rechain btc reindex --mode full`` on generated regtest chains of 1x, 2x, 4x and 8x a base
size (100–400 transactions a block) and records each stage's seconds (``run.stage_s``), where
it ran (``run.placement``: Ray tasks on workers, or the coordinator) and the run's peak RSS;
Ray's start-up (``run.ray_start_s``, inside the scan stage that starts it) is reported apart,
and so is the coordinator's in-order commit of a worker stage's results (``STAGE_commit``).
The chain state runs partitioned, as with ``--ray-address``.
Per stage it reports seconds per GB at the largest size and the growth exponent fitted over
every size (least squares of log seconds on log size; 1.0 = linear). The projection scales
each stage linearly from the largest run to mainnet's blk files (``--mainnet-gb``, about
650): a stage that ran as Ray tasks divides by the cluster's cores over the cores measured; a
coordinator stage does not (it runs in one process on one machine), shown as measured and, as
a bound, spread perfectly over the coordinator's cores. Linear is optimistic for any stage
whose exponent is above 1: a second projection (``total_h_at_measured_growth``) grows each
such stage at its exponent instead.

    .venv/bin/python benchmarks/btc_full_scaling.py [--base-blocks 1000] [--multipliers 1,2,4,8]
        [--workers 2] [--nodes 4,16] [--cores-per-node 16] [--mainnet-gb 650]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import BIN, btc_reindex_cmd, machine, run_measured, write_result  # noqa: E402
from rechain.pipeline.runtime import (
    executor,  # noqa: E402
    local_runner,  # noqa: E402
)

GB = 1e9


def generate(out: Path, blocks: int, tx_per_block: str) -> int:
    """Block bytes of a generated chain (its blk files are preallocated in 16 MiB steps, as
    Core's are, so their sizes would overstate it)."""
    cmd = [str(BIN), "gen", "bitcoin", str(out), "--blocks", str(blocks)]
    cmd += ["--tx-per-block", tx_per_block]
    run_measured(cmd)
    return int(json.loads((out / "expected.json").read_text())["bytes"])


#: The coordinator's own share of a stage that runs Ray tasks (``run`` figures, seconds): it
#: commits each task's result in order, which a cluster does not spread.
COORDINATOR_PARTS = {
    "bodies": ("commit_s",),
    "chain_state": ("chain_state_commit_s", "chain_state_rows_s"),
    # All of publish but its outputs copies (``publish_new_s``: the spends' shuffle and the
    # copies, the tasks).
    "publish": tuple(
        f"publish_{phase}_s" for phase in ("prints", "offchain_decode", "kept", "offchain", "sync")
    ),
}


#: The Ray tasks' share of a stage whose other work is the coordinator's (a ``run`` figure).
TASK_PARTS = {"indexes": "txindex_ray_s"}


def measure(blocks: Path, data: Path, workers: int, budget: str) -> dict[str, Any]:
    cmd = btc_reindex_cmd(blocks, data, workers, "--mode", "full", "--memory-budget", budget)
    # On Ray even below the size rule, as on a cluster: the placement says which stages
    # would spread over its nodes; the chain state as a cluster runs it.
    os.environ[local_runner.EXECUTION_ENV] = "ray"
    os.environ[executor.PARTITIONED_ENV] = "partitioned"
    proc, rss, wall = run_measured(cmd)
    run = json.loads(proc.stdout)["run"]
    where = {
        stage: "workers" if "ray_tasks" in p else "coordinator"
        for stage, p in run["placement"].items()
        if isinstance(p, dict)
    }
    stage_s = dict(run["stage_s"])
    stage_s["scan"] -= run["ray_start_s"]  # the scan starts Ray; reported apart
    for stage, parts in COORDINATOR_PARTS.items():
        if where.get(stage) == "workers":
            own = min(stage_s[stage], sum(float(run.get(p, 0.0)) for p in parts))
            stage_s[stage] -= own
            stage_s[f"{stage}_commit"] = own
            where[f"{stage}_commit"] = "coordinator"
    for stage, part in TASK_PARTS.items():
        if where.get(stage) == "workers":
            tasks = min(stage_s[stage], float(run.get(part, 0.0)))
            stage_s[f"{stage}_commit"] = stage_s[stage] - tasks
            stage_s[stage] = tasks
            where[f"{stage}_commit"] = "coordinator"
    return {
        "wall_s": wall,
        "ray_start_s": run["ray_start_s"],
        "stage_s": stage_s,
        "where": where,
        "peak_rss_coordinator_mib": rss.peak_root / 2**20,
        "peak_rss_tree_mib": rss.peak_tree / 2**20,
    }


def growth_exponent(sizes: list[float], seconds: list[float]) -> float | None:
    """The slope of log(seconds) over log(size), least squares over every point that took
    time (None with fewer than two sizes)."""
    pts = [(math.log(x), math.log(t)) for x, t in zip(sizes, seconds, strict=True) if t > 0]
    if len(pts) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    spread = sum((x - mx) ** 2 for x, _ in pts)
    if spread == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in pts) / spread


def scaling(points: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    large = points[-1]
    sizes = [p["bytes"] for p in points]
    out = {}
    for stage, t_large in large["run"]["stage_s"].items():
        seconds = [p["run"]["stage_s"].get(stage, 0.0) for p in points]
        exponent = growth_exponent(sizes, seconds) if t_large > 0 else None
        out[stage] = {
            "s_per_gb": t_large / (large["bytes"] / GB),
            "measured_gb": large["bytes"] / GB,
            "growth_exponent": exponent,
            "where": large["run"]["where"].get(stage, "coordinator"),
        }
    return out


def project(
    per_stage: dict[str, dict[str, Any]],
    mainnet_gb: float,
    nodes: list[int],
    cores_per_node: int,
    measured_cores: int,
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for n in nodes:
        stages, bound, grown = {}, {}, {}
        for stage, s in per_stage.items():
            base = s["s_per_gb"] * mainnet_gb
            # A stage that grew faster than its input keeps growing at its measured exponent
            # (a slower one is taken as linear: its fixed costs do not shrink mainnet's).
            steeper = max(1.0, s["growth_exponent"] or 1.0)
            growth = (mainnet_gb / s["measured_gb"]) ** (steeper - 1)
            if s["where"] == "workers":
                stages[stage] = bound[stage] = base * measured_cores / (n * cores_per_node)
            else:
                stages[stage] = base
                bound[stage] = base * measured_cores / cores_per_node
            grown[stage] = stages[stage] * growth
        out[str(n)] = {
            "stage_h": {k: v / 3600 for k, v in stages.items()},
            "total_h": sum(stages.values()) / 3600,
            "total_h_if_coordinator_used_all_its_cores": sum(bound.values()) / 3600,
            "stage_h_at_measured_growth": {k: v / 3600 for k, v in grown.items()},
            "total_h_at_measured_growth": sum(grown.values()) / 3600,
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base-blocks", type=int, default=1000)
    ap.add_argument("--multipliers", default="1,2,4,8")
    ap.add_argument("--tx-per-block", default="100:400")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--memory-budget", default="1G")
    ap.add_argument("--nodes", default="4,16")
    ap.add_argument("--cores-per-node", type=int, default=16)
    ap.add_argument("--mainnet-gb", type=float, default=650.0)
    args = ap.parse_args()
    multipliers = [int(m) for m in args.multipliers.split(",")]
    work = Path(tempfile.mkdtemp(prefix="rechain-full-scaling-"))
    points = []
    try:
        for m in multipliers:
            chain = work / f"x{m}"
            size = generate(chain, args.base_blocks * m, args.tx_per_block)
            run = measure(chain / "blocks", work / f"data{m}", args.workers, args.memory_budget)
            points.append(
                {"multiplier": m, "blocks": args.base_blocks * m, "bytes": size, "run": run}
            )
            print(f"{m}x {size / 1e6:.0f} MB: {json.dumps(run['stage_s'])}", file=sys.stderr)
            shutil.rmtree(work / f"data{m}", ignore_errors=True)
            shutil.rmtree(chain, ignore_errors=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    per_stage = scaling(points)
    nodes = [int(n) for n in args.nodes.split(",")]
    result = {
        "machine": machine(),
        "chain": {"tx_per_block": args.tx_per_block, "network": "regtest"},
        "workers": args.workers,
        "memory_budget": args.memory_budget,
        "points": points,
        "per_stage": per_stage,
        "projection": {
            "mainnet_gb": args.mainnet_gb,
            "cores_per_node": args.cores_per_node,
            "model": "linear from the largest run; worker stages over the cluster's cores",
            "model_at_measured_growth": "as model, each stage whose growth exponent is above 1 "
            "growing at that exponent from the largest run",
            "nodes": project(per_stage, args.mainnet_gb, nodes, args.cores_per_node, args.workers),
            "goal_h_on_16_nodes": 1.0,
        },
    }
    path = write_result("btc_full_scaling", result)
    print(json.dumps({"per_stage": per_stage, "projection": result["projection"]}, indent=1))
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
