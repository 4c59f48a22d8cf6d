"""`rechain flow checkpoint verify`: every check of `checkpoint read` without a data folder.

* on flow-go v0.33.1's checkpoints (one trie: streamed; several tries, and the legacy versions:
  loaded whole) it gives flow-go's tries, in each of its three modes, and writes nothing;
* damage gives the file and offset, as the read does;
* a stored hash made wrong behind right CRCs fails the modes that recompute it and passes the
  one that trusts it (as flow-go's own read would take it).

The memory bound of the streamed verification is checked with the streamed read's
(`test_flow_checkpoint_stream.bounded_read`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.conftest import cli, cli_json
from tests.test_flow_checkpoint import CheckpointPlaces, error_place, rewrite_with_crcs
from tests.test_flow_checkpoint_legacy import DATA as LEGACY
from tests.test_flow_checkpoint_legacy import ROOTS as LEGACY_ROOTS
from tests.test_flow_checkpoint_stream import (  # noqa: F401  (fixture)
    damaged_copies,
    go_checkpoint,
    make_checkpoint,
)
from tests.test_flow_interop import flowgo, run  # noqa: F401  (fixture)

NAME = "checkpoint.00000000"
MODES = {"full": [], "interior": ["--trust-leaf-hashes"], "none": ["--trust-hashes"]}


def verify(cp: Path, *extra: Any, name: str = NAME) -> dict[str, Any]:
    got: dict[str, Any] = cli_json(
        "flow", "checkpoint", "verify", "--dir", cp, "--file", name, "--json", *extra
    )
    return got


def tries(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [{k: t[k] for k in ("root", "reg_count", "reg_size")} for t in report["tries"]]


def listing(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def test_verify_gives_flow_go_s_tries_in_every_mode_and_writes_nothing(
    flowgo: Path,  # noqa: F811
    go_checkpoint: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    oracle = run(flowgo, "read-checkpoint", "--dir", go_checkpoint, "--file", NAME, "--verify")
    before = listing(go_checkpoint)
    for mode, extra in MODES.items():
        got = verify(go_checkpoint, "--memory-budget", "16M", *extra)
        assert (got["mode"], got["verify"]) == ("streaming", mode)
        assert tries(got) == tries(oracle), mode
        assert got["reg_count"] == oracle["tries"][-1]["registers"]
        leaves = sum(p["leaves"] for p in got["parts"])
        # The full mode runs every leaf's hash chain; the others only hash what they recompute.
        if mode == "full":
            assert got["permutations"] > 200 * leaves
        if mode == "none":
            assert got["permutations"] == got["top_nodes"]
    assert listing(go_checkpoint) == before
    # Several tries (they share nodes): loaded whole, each root flow-go's.
    many = tmp_path / "many"
    run(
        flowgo,
        "gen",
        "--out",
        tmp_path / "wal",
        "--updates",
        40,
        "--registers-per-update",
        10,
        "--seed",
        9,
        "--segment-size",
        64 * 1024,
    )
    run(flowgo, "checkpoint", "--wal", tmp_path / "wal", "--out", many, "--tries", "all")
    oracle = run(flowgo, "read-checkpoint", "--dir", many, "--file", NAME, "--verify")
    assert len(oracle["tries"]) > 1
    for mode, extra in MODES.items():
        got = verify(many, *extra)
        assert (got["mode"], got["verify"]) == ("in_memory", mode)
        assert tries(got) == tries(oracle), mode


def test_verify_reads_the_legacy_versions_to_flow_go_s_roots() -> None:
    for version in (1, 3, 4, 5):
        got = verify(LEGACY, name=f"checkpoint.v{version}")
        assert (got["version"], got["mode"]) == (version, "in_memory")
        assert [t["root"] for t in got["tries"]] == LEGACY_ROOTS


def test_verify_names_file_and_offset_of_damage(go_checkpoint: Path, tmp_path: Path) -> None:  # noqa: F811
    places = CheckpointPlaces(go_checkpoint, NAME)
    for label, victim, bad, damage in damaged_copies(go_checkpoint, tmp_path / "bad", flips=11):
        for mode, extra in MODES.items():
            code, _, err = cli("flow", "checkpoint", "verify", "--dir", bad, "--file", NAME, *extra)
            assert code != 0, (label, extra)
            # The damaged file, at the offset the format puts the check of the hashes `mode`
            # recomputes.
            want = (str(bad / victim), places.place(victim, damage, mode))
            assert error_place(err) == want, (label, mode, err)


def test_a_wrong_stored_hash_behind_right_crcs_fails_the_modes_that_recompute_it(
    tmp_path: Path,
) -> None:
    cp = tmp_path / "cp"
    cp.mkdir()
    made = make_checkpoint(cp, 300, 8, 1)
    part = bytearray((cp / f"{NAME}.005").read_bytes()[:-4])
    # The part's first node is a leaf: type, height (2 bytes), then its stored hash.
    part[4 + 3] ^= 0x01
    rewrite_with_crcs(cp, NAME, 5, bytes(part))
    for mode in ("full", "interior"):
        code, _, err = cli(
            "flow", "checkpoint", "verify", "--dir", cp, "--file", NAME, *MODES[mode]
        )
        assert code != 0 and f"{NAME}.005 offset" in err and "hash" in err, (mode, err)
    # Trusting every stored hash takes it, as flow-go's read does: the root is the record's.
    got = verify(cp, *MODES["none"])
    assert got["root"] == made["root"]
