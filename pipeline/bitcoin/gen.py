"""``rechain gen bitcoin``: writes a test chain (Rust core) and its ``expected.json``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rechain.pipeline.errors import RechainError
from rechain.workers import _native


def generate(
    outdir: Path,
    *,
    blocks: int,
    network: str = "regtest",
    seed: int = 1,
    file_size: int = 134_217_728,
    xor: bool = True,
    shuffle_window: int = 16,
    side_branches: int = 0,
    orphans: int = 0,
    tx_per_block: str = "1:1",
    reorg_depth: int = 0,
    reorg_back: bool = False,
    bad_signature: int = 0,
    bad_signature_branch: bool = False,
    bad_signature_kind: str | None = None,
    script_kinds: str = "wallet",
) -> dict[str, Any]:
    try:
        lo_s, _, hi_s = tx_per_block.partition(":")
        tx_min, tx_max = int(lo_s), int(hi_s or lo_s)
    except ValueError:
        raise RechainError(f"--tx-per-block wants MIN:MAX, got {tx_per_block!r}") from None
    if blocks < 1 or tx_min < 1 or tx_max < tx_min:
        raise RechainError("--blocks and --tx-per-block must be at least 1 (and MIN <= MAX)")
    if reorg_depth < 0 or (reorg_depth and reorg_depth + 1 >= blocks):
        raise RechainError("--reorg DEPTH must be below the chain's length minus one")
    if bad_signature < 0 or bad_signature >= blocks:
        raise RechainError("--bad-signature HEIGHT must be a height of the chain")
    if bad_signature_branch and not reorg_depth:
        raise RechainError("--bad-signature-branch damages the reorg branch: add --reorg DEPTH")
    if bad_signature_kind and not (bad_signature or bad_signature_branch):
        raise RechainError("--bad-signature-kind needs --bad-signature or --bad-signature-branch")
    if file_size < 1024:
        raise RechainError("--file-size must be at least 1024 bytes")
    try:
        facts = _native.generate_bitcoin(
            str(outdir),
            _native.BtcGenConfig(
                blocks=blocks,
                network=network,
                seed=seed,
                file_size=file_size,
                xor=xor,
                shuffle_window=shuffle_window,
                side_branches=side_branches,
                orphans=orphans,
                tx_min=tx_min,
                tx_max=tx_max,
                reorg_depth=reorg_depth,
                reorg_back=reorg_back,
                bad_signature_height=bad_signature,
                bad_signature_branch=bad_signature_branch,
                bad_signature_kind=bad_signature_kind,
                script_kinds=script_kinds,
            ),
        ).as_dict()
    except (OSError, ValueError) as e:
        raise RechainError(str(e)) from e
    facts["seed"] = seed
    best_chain = facts.pop("best_chain")
    (outdir / "expected.json").write_text(json.dumps(facts, indent=1, sort_keys=True) + "\n")
    (outdir / "best_chain.txt").write_text("\n".join(best_chain) + "\n")
    return facts
