"""``rechain gen eth``: writes an Ethereum test chain (Rust core, ``eth::gen``) and its
``expected.json``.

Layout of OUTDIR: ``era1/<network>-<epoch>-<root>.era1`` (format era1),
``ancient/chain/`` (format freezer, as geth's ``<datadir>/geth/chaindata/ancient/chain``) or
``ere/<network>-<epoch>-<last hash>-<profile>.ere`` (format ere, with ``genesis.json``: the
genesis file geth needs to hold the chain), plus ``expected.json`` with the generator's
summary. Generated pre-merge headers carry no proof of work (``mixHash`` and ``nonce`` zero):
check or import them without PoW. Network ``devmerge`` crosses the merge, Shanghai, Cancun and
Prague within 20,000 blocks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rechain.pipeline.errors import RechainError
from rechain.pipeline.ethereum.archives import NETWORKS
from rechain.pipeline.ethereum.export import ERE_PROFILES
from rechain.workers import _native

FORMATS = ("era1", "freezer", "ere")
FREEZER_VERSIONS = ("current", "v1.15", "v1.10")


def parse_tx_per_block(text: str) -> tuple[int, int]:
    """'MIN:MAX' (or 'N') → (min, max); MIN may be 0."""
    try:
        lo_s, _, hi_s = text.partition(":")
        lo, hi = int(lo_s), int(hi_s or lo_s)
    except ValueError:
        raise RechainError(f"--tx-per-block wants MIN:MAX, got {text!r}") from None
    if lo < 0 or hi < lo:
        raise RechainError(f"--tx-per-block {text!r}: want 0 <= MIN <= MAX")
    return lo, hi


def output_dir(outdir: Path, fmt: str) -> Path:
    if fmt == "freezer":
        return outdir / "ancient" / "chain"
    return outdir / fmt


def generate(
    outdir: Path,
    *,
    blocks: int,
    fmt: str = "era1",
    network: str = "mainnet",
    seed: int = 1,
    tx_per_block: str = "0:4",
    freezer_version: str = "current",
    max_file_size: int = 2_000_000_000,
    ere_profile: str = "noproofs",
) -> dict[str, Any]:
    if blocks < 1:
        raise RechainError("--blocks must be at least 1 (block 0 is genesis)")
    if fmt not in FORMATS:
        raise RechainError(f"--format must be one of {', '.join(FORMATS)}")
    if network not in NETWORKS:
        raise RechainError(f"--network must be one of {', '.join(NETWORKS)}")
    if ere_profile not in ERE_PROFILES:
        raise RechainError(f"--ere-profile must be one of {', '.join(ERE_PROFILES)}")
    if max_file_size < 1:
        raise RechainError("--max-file-size must be positive")
    tx_min, tx_max = parse_tx_per_block(tx_per_block)
    target = output_dir(outdir, fmt)
    if target.exists() and any(target.iterdir()):
        raise RechainError(f"{target} is not empty")
    try:
        facts = _native.eth_generate(
            str(target),
            _native.EthGenConfig(
                blocks=blocks,
                format=fmt,
                network=network,
                seed=seed,
                tx_min=tx_min,
                tx_max=tx_max,
                freezer_version=freezer_version,
                max_file_size=max_file_size,
                ere_profile=ere_profile,
            ),
        ).as_dict()
    except (OSError, ValueError) as e:
        raise RechainError(str(e)) from e
    facts["format"] = fmt
    facts["seed"] = seed
    facts["tx_per_block"] = [tx_min, tx_max]
    if fmt == "freezer":
        facts["freezer_version"] = freezer_version
    genesis = facts.pop("geth_genesis", None)
    if fmt == "ere":
        facts["ere_profile"] = ere_profile
    if genesis is not None and network == "devmerge":
        # geth builds the same genesis block from it (an empty allocation).
        (outdir / "genesis.json").write_text(genesis)
    facts["pow"] = "none: mixHash and nonce are zero (check without PoW)"
    for f in facts["files"]:
        f["path"] = str(Path(f["path"]).relative_to(outdir))
    (outdir / "expected.json").write_text(json.dumps(facts, indent=1, sort_keys=True) + "\n")
    return facts
