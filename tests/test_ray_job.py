"""A full reindex submitted as a Ray job (`ray job submit --working-dir . -- rechain btc
reindex --config FILE`) to a local three-node cluster: a head that runs no tasks (as a cluster's
head usually does not) and two worker nodes. The job's result must equal the generated chain's
facts and a local run's verify digest, and its placement report must show the scan, body
decode and chain state tasks (spends resolved by txid partition, chunks applied and written)
on the two worker nodes, publish's outputs copies and the tx index's build on them too, and the
link stage on the head."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.conftest import cli_json, gen_chain, time_limit
from tests.ray_cluster import ENV, VENV_BIN, alive_nodes, free_port, local_cluster

REPO = Path(__file__).resolve().parents[1]


def _json_line(log: str) -> dict:
    """The reindex's ``--json`` line among the job's log lines (Ray adds its own)."""
    for line in reversed(log.splitlines()):
        if line.startswith("{") and '"tip_hash"' in line:
            return json.loads(line)
    raise AssertionError(f"no JSON result in the job's log:\n{log[-3000:]}")


def test_full_reindex_as_ray_job_on_worker_nodes(tmp_path: Path) -> None:
    facts = gen_chain(
        tmp_path / "g",
        "--blocks",
        "400",
        "--tx-per-block",
        "1:40",
        "--side-branches",
        "2",
        "--file-size",
        "256K",
        "--seed",
        "7",
    )
    config = tmp_path / "job.toml"
    config.write_text(
        "[defaults]\n"
        'ray-address = "auto"\n'
        "workers = 2\n"
        'memory-budget = "64M"\n'
        "no-progress = true\n"
        "[btc.reindex]\n"
        f'blocks = "{tmp_path / "g" / "blocks"}"\n'
        f'data = "{tmp_path / "job"}"\n'
        'network = "regtest"\n'
        'mode = "full"\n'
        'shard-size = "128K"\n'
    )
    dashboard = free_port()
    with local_cluster(head_cpus=0, worker_nodes=2, dashboard_port=dashboard) as address:
        proc = subprocess.run(
            [
                str(VENV_BIN / "ray"),
                "job",
                "submit",
                "--address",
                f"http://127.0.0.1:{dashboard}",
                "--working-dir",
                str(REPO),
                "--",
                str(VENV_BIN / "rechain"),
                "btc",
                "reindex",
                "--config",
                str(config),
                "--json",
            ],
            capture_output=True,
            text=True,
            env=ENV,
            timeout=time_limit(tmp_path / "g" / "blocks"),
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        nodes = alive_nodes(address)
    result = _json_line(proc.stdout)
    assert result["tip_hash"] == facts["tip_hash"]
    assert result["blocks_indexed"] == facts["blocks_indexed"]
    assert result["full"]["utxo_count"] == facts["utxo_count"]
    assert result["full"]["total_amount"] == facts["total_amount"]

    head = {n for n, is_head in nodes if is_head}
    workers = {n for n, is_head in nodes if not is_head}
    assert len(head) == 1 and len(workers) == 2, nodes
    where = result["run"]["placement"]
    assert where["coordinator_node"] in head, where
    # The heavy stages: the scan, and the chain state (which decodes and checks the best
    # chain, resolves its spends and writes its rows).
    for stage in ("scan", "chain_state"):
        tasks = where[stage]["ray_tasks"]
        assert set(tasks) == workers, (stage, where)  # every task on a worker node, both used
    # The body pass (the copies off the best chain), publish's outputs copies and the tx
    # index's build: a few tasks each, on worker nodes.
    for stage in ("bodies", "publish", "indexes"):
        assert set(where[stage]["ray_tasks"]) <= workers, (stage, where)
    for stage in ("link",):
        assert where[stage] == {"coordinator": True}, (stage, where)

    # The job's data folder is what a local run of the same files makes.
    local = tmp_path / "local"
    blocks = tmp_path / "g" / "blocks"
    cli_json(
        "btc",
        "reindex",
        "--blocks",
        blocks,
        "--data",
        local,
        "--network",
        "regtest",
        "--mode",
        "full",
        "--memory-budget",
        "64M",
        "--no-progress",
        "--json",
    )
    job_digest = cli_json("verify", "--data", tmp_path / "job", "--json")
    local_digest = cli_json("verify", "--data", local, "--json")
    assert job_digest["ok"] and local_digest["ok"]
    assert job_digest["digest"] == local_digest["digest"]
