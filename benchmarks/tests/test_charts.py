"""benchmarks/charts.py, scaling.py and btc_full_scaling.py: PNGs from results JSON, missing
inputs skipped, ratios read right, projections and growth fits. The benchmarks are imported
plainly (their folder is on sys.path by benchmarks/tests/conftest.py), so a broken one fails
here rather than skipping."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import btc_full_scaling
import charts
import pytest
import scaling

BENCH = Path(__file__).resolve().parents[1]


def test_charts_written_and_missing_json_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import matplotlib.image as mpimg

    for name in ("btc_headers", "scaling"):
        shutil.copy(BENCH / "results" / f"{name}.json", tmp_path)
    monkeypatch.setattr(sys, "argv", ["charts.py", "--results", str(tmp_path)])
    charts.main()
    out = capsys.readouterr().out
    for png in ("scaling.png", "btc_headers_stages.png", "ratios.png"):
        image = mpimg.imread(tmp_path / png)
        assert image.shape[0] > 300 and image.shape[1] > 600, png
    assert not (tmp_path / "btc_full_workers.png").exists()
    assert "btc_full.json missing" in out
    assert "btc_full_workers.png skipped" in out


def test_ratios_agree_with_each_benchmarks_own_targets() -> None:
    """The chart's met/missed must match the booleans each benchmark computed itself."""
    headers = json.loads((BENCH / "results" / "btc_headers.json").read_text())
    rows = {label: (v, t, hi) for _, label, v, t, hi in charts.ratios({"btc_headers": headers})}
    own = headers["targets"]
    pairs = {
        "scanner / SHA-256d limit": "scanner_vs_hash_limit >= 0.5",
        "end-to-end headers/s": "end_to_end >= 500000/s",
        "bytes read fraction": "read_fraction < 0.05",
        "committer / combined scan": "apply >= 3x combined scan",
        "peak RSS MiB (process)": "peak rss (rechain process) < 1 GiB",
    }
    for label, key in pairs.items():
        value, target, higher = rows[label]
        met = value >= target if higher else value < target
        assert met == own[key], label


def test_scaling_reads_ray_address_and_input_path_from_tofu_outputs(tmp_path: Path) -> None:
    outputs = {  # the shape of `tofu output -json` for infra/terraform/outputs.tf
        "ray_address": {"sensitive": False, "type": "string", "value": "10.0.1.5:6379"},
        "paths": {
            "sensitive": False,
            "type": ["object", {"input": "string"}],
            "value": {"input": "/data", "blocks": "/data/blocks", "data": "/mnt/nvme/rechain"},
        },
    }
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps(outputs))
    assert scaling.from_tofu_outputs(path) == ("10.0.1.5:6379", Path("/data/bench-scaling"))


def test_scaling_projects_steeper_stages_at_their_measured_growth() -> None:
    # A coordinator stage that grew as size^1.2, and a worker stage slower than linear.
    stage = {"measured_gb": 0.5}
    per_stage = {
        "commit": {**stage, "s_per_gb": 2.0, "growth_exponent": 1.2, "where": "coordinator"},
        "apply": {**stage, "s_per_gb": 30.0, "growth_exponent": 0.9, "where": "workers"},
    }
    got = btc_full_scaling.project(per_stage, 650.0, [4], 16, 2)["4"]
    commit_s, apply_s = 2.0 * 650, 30.0 * 650 * 2 / (4 * 16)
    assert got["stage_h"]["commit"] == pytest.approx(commit_s / 3600)
    assert got["stage_h"]["apply"] == pytest.approx(apply_s / 3600)
    assert got["stage_h_at_measured_growth"]["commit"] == pytest.approx(
        commit_s * (650 / 0.5) ** 0.2 / 3600
    )
    assert got["stage_h_at_measured_growth"]["apply"] == pytest.approx(apply_s / 3600)
    assert got["total_h_at_measured_growth"] > got["total_h"]


def test_scaling_fits_the_growth_exponent_over_every_size() -> None:
    sizes = [1e8, 2e8, 4e8, 8e8]
    # A stage growing as size^1.2, one linear with noise, one that took no time at all.
    points = [
        {
            "bytes": b,
            "run": {
                "stage_s": {
                    "steep": 3e-11 * b**1.2,
                    "flat": b / 1e8 * (1.1, 0.9, 1.1, 0.9)[i],
                    "none": 0.0,
                },
                "where": {"steep": "coordinator"},
            },
        }
        for i, b in enumerate(sizes)
    ]
    got = btc_full_scaling.scaling(points)
    assert got["steep"]["growth_exponent"] == pytest.approx(1.2)
    assert got["steep"]["where"] == "coordinator" and got["flat"]["where"] == "coordinator"
    assert 0.9 < got["flat"]["growth_exponent"] < 1.0
    assert got["none"]["growth_exponent"] is None
    assert got["steep"]["measured_gb"] == pytest.approx(0.8)
    assert btc_full_scaling.growth_exponent([1.0], [2.0]) is None
