"""Reorgs in the node's folder, full mode: new blocks make a branch 1 or 6 blocks deep the
best chain, or such a branch wins and then loses again to the old chain. Each rerun unwinds
the chain state to the fork point from its undo data and applies the new best chain, and
must end exactly where a fresh full reindex of the same files does: the verify digest's
content (block index, best chain, UTXO set, undo data, tx index, tables), hash_serialized_3
and every table's rows. A kill -9 between the unwind's commit and the new branch's, or
between a chunk's staged spends and its commit, changes nothing of that."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from rechain.pipeline.bitcoin import body_units, chain_parts
from rechain.pipeline.store.datadir import DataDir
from rechain.pipeline.verify import digest, verify

from tests.conftest import cli_json, gen_chain, reindex, reindex_cmd, run_killed_at
from tests.test_btc_full import chain_model, read_records, state_facts

#: name -> gen arguments of the reorg
SCENARIOS = {
    "1-deep": ("--reorg", "1"),
    "6-deep": ("--reorg", "6"),
    "6-deep-then-back": ("--reorg", "6", "--reorg-back"),
}

Cut = tuple[int, int]


@pytest.fixture(autouse=True)
def small_segments(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables published in segments of 40 heights (runs in this process), so that a reorg
    keeps some, cuts one and writes new ones, as on a long chain."""
    from rechain.pipeline.bitcoin.stages import chain_state

    monkeypatch.setattr(chain_state, "SEGMENT_BLOCKS", 40)


@pytest.fixture(scope="module")
def chains(
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, tuple[Path, dict[str, Any], list[Cut]]]:
    """Each scenario's complete folder, its facts, and where the folder stood before each
    step of the reorg (file, offset of the first record not yet written)."""
    out = {}
    for name, args in SCENARIOS.items():
        root = tmp_path_factory.mktemp(f"reorg-{name}")
        facts = gen_chain(
            root,
            "--blocks",
            "260",
            "--tx-per-block",
            "1:12",
            "--file-size",
            "120K",
            "--seed",
            "11",
            *args,
        )
        branch, back = facts["reorg_records"]
        assert branch == int(args[1]) + 1 and back == (2 if "--reorg-back" in args else 0)
        ref = tmp_path_factory.mktemp(f"reorg-{name}-headers")
        reindex(root / "blocks", ref, "--mode", "headers")
        rows = cli_json(
            "query",
            "--data",
            ref,
            'SELECT file, "offset" FROM headers ORDER BY file, "offset"',
            "--format",
            "json",
        )
        tail = [(int(r["file"]), int(r["offset"])) for r in rows[-(branch + back) :]]
        cuts = [tail[0]] + ([tail[branch]] if back else [])
        out[name] = (root, facts, cuts)
    return out


def node_folder(root: Path, blocks: Path, cut: Cut | None) -> None:
    """``blocks`` as the node had it when it had written everything before ``cut`` (all of
    ``root``'s files when None): earlier files whole, the file of the cut ending there."""
    blocks.mkdir(parents=True, exist_ok=True)
    shutil.copy(root / "blocks" / "xor.dat", blocks / "xor.dat")
    for f in sorted((root / "blocks").glob("blk*.dat")):
        file_no = int(f.name[3:8])
        if cut is None or file_no < cut[0]:
            shutil.copy(f, blocks / f.name)
        elif file_no == cut[0]:
            (blocks / f.name).write_bytes(f.read_bytes()[: cut[1]])


def content(data: Path) -> dict[str, str]:
    with DataDir(data, readonly=True) as d:
        return digest(d)


def fresh_content(blocks: Path, tmp: Path) -> dict[str, str]:
    data = tmp / "fresh"
    shutil.rmtree(data, ignore_errors=True)
    reindex(blocks, data, "--mode", "full")
    return content(data)


@pytest.mark.parametrize("name", SCENARIOS)
def test_a_rerun_after_a_reorg_equals_a_fresh_reindex(
    chains: Any, tmp_path: Path, name: str
) -> None:
    root, facts, cuts = chains[name]
    blocks, data = tmp_path / "blocks", tmp_path / "data"
    steps: list[Cut | None] = [*cuts, None]
    respent = 0
    for i, cut in enumerate(steps):
        node_folder(root, blocks, cut)
        run = reindex(blocks, data, "--mode", "full")
        assert content(data) == fresh_content(blocks, tmp_path), f"step {i} ({cut})"
        # And both equal what python-bitcoinlib makes of the files: the best chain's spent
        # outputs, fees and UTXO set (a flag left on the wrong output after an unwind fails).
        assert state_facts(data) == chain_model(read_records(blocks)), f"step {i} ({cut})"
        if i > 0:
            # The old tip's blocks were unwound from their undo data, not the whole chain.
            depth = int(SCENARIOS[name][1])
            unwound = run["run"]["chain_state_unwound"]
            assert (unwound, run["run"]["chain_state_applied"]) == (
                (depth, depth + 1) if i == 1 else (depth + 1, depth + 2)
            )
            # Only the segments above the fork were written again.
            assert run["run"]["publish_segments_kept"] >= 5
            assert run["run"]["publish_segments_written"] <= 2
            # Spends were unwound: every segment's spent flags were checked against all spends.
            assert run["run"]["publish_spends_appended"] == 0
            respent += run["run"]["publish_outputs_rewritten"]
            # The tx index was updated from what changed, not rebuilt.
            assert run["run"].get("txindex_updated") == 1 and "txindex_rebuilt" not in run["run"]
    # Some kept segment's flags changed with the unwound spends (and were rewritten).
    assert respent >= 1
    assert run["tip_hash"] == facts["tip_hash"]
    assert (run["full"]["utxo_count"], run["full"]["total_amount"]) == (
        facts["utxo_count"],
        facts["total_amount"],
    )
    assert verify(data)["ok"]


@pytest.mark.parametrize(
    "point", ["chain_state.unwound", "chain_state.spends_written", "chain_state.applied"]
)
def test_a_reorg_run_killed_in_the_chain_state_resumes_to_the_fresh_result(
    chains: Any, tmp_path: Path, point: str
) -> None:
    root, _, cuts = chains["6-deep"]
    blocks, data = tmp_path / "blocks", tmp_path / "data"
    node_folder(root, blocks, cuts[0])
    reindex(blocks, data, "--mode", "full")
    node_folder(root, blocks, None)
    run_killed_at(reindex_cmd(blocks, data, "--mode", "full"), point)
    run = reindex(blocks, data, "--mode", "full")
    assert content(data) == fresh_content(blocks, tmp_path)
    # The resumed run did not start over: at most the reorg's blocks were applied again.
    assert run["run"].get("chain_state_applied", 0) <= 7
    assert verify(data)["ok"]


def _stage_best_chain(data: Path, blocks: Path) -> int:
    """Stages a body part of every best-chain copy, as versions before the chain state checked
    the best chain itself did (their body pass decoded every chosen copy); returns how many
    parts."""
    import pyarrow.parquet as pq
    from rechain.pipeline.store.table_view import newest_generation
    from rechain.schemas import bitcoin as ds

    key = (blocks / "xor.dat").read_bytes()
    with DataDir(data) as d:
        gen = newest_generation(d.parquet_dir(ds.HEADERS))
        assert gen is not None
        headers = pq.read_table(gen, columns=["file", "offset", "size", "in_best_chain"])
        best = headers.filter(headers.column("in_best_chain")).select(["file", "offset", "size"])
        paths = {f: str(blocks / f"blk{f:05d}.dat") for f in set(best.column("file").to_pylist())}
        units = body_units.cut_units(best, paths, "regtest", key, unit_size=64 << 10)
        body_units.decode_units(units, d, 1, 1 << 30, False, on_ray=False)
    return len(units)


def _restage_as_before_slim(data: Path, blocks: Path, every: int = 1) -> int:
    """Rewrites every ``every``-th staged body part as versions before slim staging wrote them
    (the four full tables, a registry entry without ``tables``); returns how many."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from rechain.pipeline.bitcoin import body_parts
    from rechain.schemas import bitcoin as ds
    from rechain.schemas import rocksdb as layout
    from rechain.workers import _native

    key = (blocks / "xor.dat").read_bytes()
    with DataDir(data) as d:
        parts = dict(list(body_parts.registered(d).items())[::every])
        for part, entry in parts.items():
            staged = pq.read_table(body_parts.part_path(d, part, "blocks"))
            path = blocks / f"blk{entry['file']:05d}.dat"
            offsets = staged.column("offset").to_pylist()
            batches, _ = _native.decode_blk_bodies(
                str(path), entry["file"], offsets, "regtest", key
            )
            assert pa.Table.from_batches([batches[0]]).equals(staged)
            for table, batch in zip(ds.BODY_STAGED_V1, batches, strict=True):
                pq.write_table(pa.Table.from_batches([batch]), body_parts.part_path(d, part, table))
            body_parts.part_path(d, part, "txids").unlink()
            old = {"file": entry["file"], "records": entry["records"]}
            d.write({layout.CF_BTC_BODIES: [(part.encode(), old)]})
    return len(parts)


def test_parts_staged_before_slim_staging_are_still_read(chains: Any, tmp_path: Path) -> None:
    """A data folder of older versions, whose body parts hold the best chain's copies too, some
    as slim parts and some as the four full tables: its tx index is rebuilt from both, its
    tables republished to the same content, and a reorg that moves their blocks off the best
    chain ends as a fresh reindex does."""
    root, _, cuts = chains["6-deep"]
    blocks, data = tmp_path / "blocks", tmp_path / "data"
    node_folder(root, blocks, cuts[0])
    reindex(blocks, data, "--mode", "full")
    before = content(data)
    assert _stage_best_chain(data, blocks) > 2
    assert _restage_as_before_slim(data, blocks, every=2) > 0
    run = reindex(blocks, data, "--mode", "full", "--from-stage", "publish")
    assert run["run"].get("txindex_rebuilt") == 1
    assert content(data) == before
    node_folder(root, blocks, None)
    run = reindex(blocks, data, "--mode", "full")
    assert run["run"]["chain_state_unwound"] == 6 and run["run"]["publish_offchain_blocks_decoded"]
    assert content(data) == fresh_content(blocks, tmp_path)
    # Old parts and slim ones side by side: the tx index rebuilt from both equals.
    kinds = {f.name.split(".")[1] for f in (data / "stage" / "bodies").iterdir()}
    assert kinds == {"blocks", "transactions", "inputs", "outputs", "txids"}
    run = reindex(blocks, data, "--mode", "full", "--from-stage", "indexes")
    assert run["run"].get("txindex_rebuilt") == 1
    assert content(data) == fresh_content(blocks, tmp_path)
    assert verify(data)["ok"]


def _checkpoint(data: Path) -> dict[str, Any]:

    with DataDir(data, readonly=True) as d:
        cp = chain_parts.checkpoint(d)
    assert cp is not None
    return cp


def _mark_older_layout(data: Path) -> None:
    """Rewrites the data folder's chain-state checkpoint as the layout before this one's.
    (A function: the folder's column-family handles live as long as its ``DataDir``.)"""
    from rechain.schemas import rocksdb as layout

    with DataDir(data) as d:
        cp = chain_parts.checkpoint(d)
        assert cp is not None and cp["layout"] == chain_parts.LAYOUT
        old = {**cp, "layout": chain_parts.LAYOUT - 1}
        d.write({layout.CF_META: [(layout.META_BTC_CHAIN_STATE, old)]})


def test_a_checkpoint_of_an_older_layout_is_rebuilt_from_genesis(
    chains: Any, tmp_path: Path
) -> None:
    """A data folder whose chain state an older layout wrote (its coins lack their rows) is
    rebuilt from the genesis block on its next run, not unwound and extended, and ends as a
    fresh run does, published tables included."""

    root, _, cuts = chains["6-deep"]
    blocks, data = tmp_path / "blocks", tmp_path / "data"
    node_folder(root, blocks, cuts[0])
    reindex(blocks, data, "--mode", "full")
    _mark_older_layout(data)
    node_folder(root, blocks, None)
    run = reindex(blocks, data, "--mode", "full")
    cp = _checkpoint(data)
    assert cp["layout"] == chain_parts.LAYOUT
    tip = cp["height"]
    assert (run["run"]["chain_state_unwound"], run["run"]["chain_state_applied"]) == (0, tip + 1)
    assert content(data) == fresh_content(blocks, tmp_path)
    assert verify(data)["ok"]
