"""``--config FILE``: job configurations give every command its options; flags override them;
anything a file names that no command has is an error. The shipped ``configs/`` must apply."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from rechain.pipeline import config
from rechain.pipeline.cli import build_parser
from rechain.pipeline.errors import RechainError

from tests.conftest import cli, gen_chain

REPO = Path(__file__).resolve().parents[1]


def parse(path: Path, *argv: str) -> argparse.Namespace:
    parser = build_parser()
    args = [*argv, "--config", str(path)]
    config.apply(parser, path, args)
    return parser.parse_args(args)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "job.toml"
    path.write_text(text)
    return path


def test_sections_defaults_and_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHAIN_ROOT", "/srv/chain")
    path = write(
        tmp_path,
        '[defaults]\nmemory-budget = "2G"\nworkers = 3\nno-progress = true\n'
        '[btc.reindex]\nblocks = "$CHAIN_ROOT/blocks"\ndata = "out"\nnetwork = "regtest"\n'
        'mode = "full"\nshard_size = 1048576\n'
        '[eth.import]\nfreezer = "~/ancient"\ndata = "eth"\nno-pow = true\n',
    )
    a = parse(path, "btc", "reindex")
    assert (a.blocks, a.data, a.network, a.mode) == (
        Path("/srv/chain/blocks"),
        tmp_path / "out",  # relative to the file's folder
        "regtest",
        "full",
    )
    assert (a.memory_budget, a.workers, a.no_progress, a.shard_size) == (2 << 30, 3, True, 1 << 20)
    # Flags win over the file.
    a = parse(path, "btc", "reindex", "--workers", "1", "--memory-budget", "64M", "--mode=headers")
    assert (a.workers, a.memory_budget, a.mode) == (1, 64 << 20, "headers")
    # A required option from the file; --era1 on the command line replaces the file's --freezer.
    e = parse(path, "eth", "import")
    assert (e.freezer, e.era1) == (Path.home() / "ancient", None)
    assert e.no_pow is True and e.memory_budget == 2 << 30
    e = parse(path, "eth", "import", "--era1", "x")
    assert (e.era1, e.freezer) == (Path("x"), None)
    # [defaults] reaches only the commands that have the option.
    q = parse(path, "verify", "--data", "d")
    assert not hasattr(q, "memory_budget")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[btc.reindx]\nblocks = 'b'\n", "no command btc.reindx"),
        ("[btc.reindex]\nblock = 'b'\n", "has no option 'block'"),
        ("[btc.reindex]\nmode = 'fast'\n", "'fast' is not one of headers, full"),
        ("[btc.reindex]\nno-progress = 'yes'\n", "expected true or false"),
        ("[defaults]\nmemory-bugdet = '1G'\n", "memory-bugdet: no command has it"),
        ("blocks = 'b'\n", "outside a [command] table"),
        ("[btc.reindex\n", "not valid TOML"),
    ],
)
def test_mistakes_are_errors(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(RechainError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse(path, "btc", "status", "--data", "d")
    code, _, err = cli("btc", "status", "--data", tmp_path, "--config", path)
    assert code == 2 and message in err


def test_missing_file_is_an_error(tmp_path: Path) -> None:
    code, _, err = cli("btc", "status", "--data", tmp_path, "--config", tmp_path / "none.toml")
    assert code == 2 and "none.toml" in err


@pytest.mark.parametrize("name", sorted(p.name for p in (REPO / "configs").glob("*.toml")))
def test_shipped_configs_apply_to_every_command_they_name(name: str) -> None:
    path = REPO / "configs" / name
    doc = config.load(path)
    commands = [c for c in doc if c != config.DEFAULTS]
    assert commands, f"{name} configures no command"
    applied: set[str] = set()
    for words, sub in config.leaf_parsers(build_parser()).items():
        table: dict = doc
        for w in words:
            table = table.get(w, {}) if isinstance(table, dict) else {}
        if not table:
            continue
        args = parse(path, *words)  # every required option comes from the file
        for key in table:
            assert getattr(args, config._options(sub)[config._norm(key)].dest) is not None
        applied.add(words[0])
    # Every section the file names reached a command (else the loop above checked nothing).
    assert set(commands) <= applied, set(commands) - applied


def test_reindex_from_a_config_equals_flags(tmp_path: Path) -> None:
    facts = gen_chain(tmp_path / "g", "--blocks", "150", "--tx-per-block", "1:3")
    path = write(
        tmp_path,
        f'[btc.reindex]\nblocks = "{tmp_path / "g" / "blocks"}"\ndata = "{tmp_path / "d"}"\n'
        'network = "regtest"\nno-progress = true\n',
    )
    code, out, err = cli("btc", "reindex", "--config", path, "--json")
    assert code == 0, err
    assert f'"tip_hash": "{facts["tip_hash"]}"' in out
