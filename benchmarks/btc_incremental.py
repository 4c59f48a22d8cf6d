"""Incremental full reindex: a chain reindexed in full mode, then grown by the node by 1%, 5%
and 10% (bytes appended to the last file, a record torn at the end, new files), rerun on the
same data folder, against a fresh full reindex of each grown folder, in one run.

Each rerun must end with the fresh run's ``verify`` content digest (checked, not only timed).
Reports per step the incremental and fresh seconds, their ratio and the stages each ran, and
the floor of any rerun (one that finds nothing new) as a ratio to the same fresh run, and that
floor plus the new bytes' share of the grown chain: what a rerun would cost if its work past
start-up were in proportion to the new data (a rerun can beat it: a fresh run has work of its
own, such as the first build of the tx index).
Targets (issue #16): +1% at most 5% of a fresh run, +10% at most 20%.

    .venv/bin/python benchmarks/btc_incremental.py [--blocks 7000] [--tx 100:400] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import BIN, btc_reindex_cmd, machine, run_measured, write_result  # noqa: E402

#: Growth steps, as fractions of the base chain's bytes.
STEPS = (0.01, 0.05, 0.10)


def records(blocks: Path, data: Path) -> list[tuple[int, int, int]]:
    """(file, offset, size) of every record, from a header reindex of the whole folder."""
    subprocess.run([*btc_reindex_cmd(blocks, data, 2)], check=True, capture_output=True, text=True)
    out = subprocess.run(
        [
            str(BIN),
            "query",
            "--data",
            str(data),
            "--format",
            "json",
            'SELECT file, "offset", size FROM headers WHERE file IS NOT NULL ORDER BY 1, 2',
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [(r["file"], r["offset"], r["size"]) for r in json.loads(out)]


def node_at(
    full: Path, dest: Path, recs: list[tuple[int, int, int]], upto: int, torn: bool
) -> None:
    """``dest`` as the node's folder when it had written ``upto`` bytes of records: whole files
    before, the file being written cut there (mid-record when ``torn``), none after."""
    dest.mkdir(parents=True, exist_ok=True)
    if (full / "xor.dat").exists():
        shutil.copy(full / "xor.dat", dest / "xor.dat")
    done, at = 0, len(recs) - 1
    for i, (_, _, size) in enumerate(recs):
        done += size + 8
        if done >= upto:
            at = i
            break
    file_no, offset, size = recs[at]
    cut: int | None = offset + 8 + (80 + size // 2 if torn else size)
    if at == len(recs) - 1 and not torn:
        cut = None
    for f in sorted(full.glob("blk*.dat")):
        n = int(f.name[3:8])
        if n < file_no:
            if not (dest / f.name).exists() or (dest / f.name).stat().st_size != f.stat().st_size:
                shutil.copy(f, dest / f.name)
        elif n == file_no:
            raw = f.read_bytes()
            (dest / f.name).write_bytes(raw if cut is None else raw[:cut])
        else:
            (dest / f.name).unlink(missing_ok=True)


def reindex(blocks: Path, data: Path, workers: int) -> tuple[dict[str, Any], float]:
    done, _, seconds = run_measured(btc_reindex_cmd(blocks, data, workers, "--mode", "full"))
    return json.loads(done.stdout), seconds


def digest(data: Path) -> str:
    out = subprocess.run(
        [str(BIN), "verify", "--data", str(data), "--json"], capture_output=True, text=True
    )
    result = json.loads(out.stdout)
    assert result["ok"], result["problems"]
    return str(result["digest"]["content"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--blocks", type=int, default=7_000, help="about 567 MB (base 516 MB)")
    ap.add_argument("--tx", default="100:400", help="transactions per block MIN:MAX")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--work", type=Path, default=None, help="scratch folder (default: a temp)")
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="rechain-incremental-"))
    full = work / "node" / "blocks"
    if not full.exists():
        subprocess.run(
            [
                str(BIN),
                "gen",
                "bitcoin",
                str(work / "node"),
                "--blocks",
                str(args.blocks),
                "--tx-per-block",
                args.tx,
                "--side-branches",
                "4",
                "--orphans",
                "2",
            ],
            check=True,
            capture_output=True,
        )
    recs = records(full, work / "headers")
    total = sum(size + 8 for _, _, size in recs)
    base = int(total / (1 + STEPS[-1]))
    node = work / "grown" / "blocks"
    shutil.rmtree(work / "grown", ignore_errors=True)
    data = work / "data"
    shutil.rmtree(data, ignore_errors=True)
    node_at(full, node, recs, base, torn=False)
    first, first_s = reindex(node, data, args.workers)
    # The floor of any rerun: start-up, opening the data folder, the scan finding nothing new.
    _, noop_s = reindex(node, data, args.workers)
    steps = []
    for i, grow in enumerate(STEPS):
        upto = int(base * (1 + grow))
        # The last step is the whole folder; the others end torn, as a node mid-write.
        node_at(full, node, recs, upto, torn=i < len(STEPS) - 1)
        inc, inc_s = reindex(node, data, args.workers)
        fresh_data = work / f"fresh-{i}"
        shutil.rmtree(fresh_data, ignore_errors=True)
        fresh, fresh_s = reindex(node, fresh_data, args.workers)
        same = digest(data) == digest(fresh_data)
        new_share = (upto - base) / upto
        steps.append(
            {
                "grown_by": grow,
                "incremental_s": round(inc_s, 2),
                "fresh_s": round(fresh_s, 2),
                "ratio": round(inc_s / fresh_s, 3),
                "noop_rerun_ratio": round(noop_s / fresh_s, 3),
                "proportional_ratio": round(noop_s / fresh_s + new_share, 3),
                "target": 0.05 if grow <= 0.01 else 0.20 if grow >= 0.10 else None,
                "identical_to_fresh": same,
                "stages_run": inc["run"]["stages_run"],
                "incremental_run": {
                    k: inc["run"].get(k)
                    for k in (
                        "bytes_planned",
                        "units",
                        "bytes_decoded",
                        "decode_s",
                        "chain_state_s",
                        "chain_state_applied",
                        "chain_state_unwound",
                        "publish_s",
                        "publish_segments_kept",
                        "publish_segments_written",
                        "publish_outputs_rewritten",
                        "publish_offchain_parts_written",
                        "publish_spends_appended",
                        "utxo_s",
                        "full_total_s",
                        "total_s",
                    )
                },
                "tip_height": inc["tip_height"],
            }
        )
        shutil.rmtree(fresh_data, ignore_errors=True)
        print(json.dumps(steps[-1]), flush=True)
        assert same, f"+{grow:.0%}: the incremental run differs from a fresh one"
    out = {
        "machine": machine(),
        "chain": {"blocks": args.blocks, "tx_per_block": args.tx, "bytes": total},
        "base": {
            "bytes": base,
            "fresh_s": round(first_s, 2),
            "noop_rerun_s": round(noop_s, 2),
            "tip": first["tip_height"],
        },
        "steps": steps,
    }
    path = write_result("btc_incremental", out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
