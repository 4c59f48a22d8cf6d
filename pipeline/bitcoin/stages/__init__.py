"""The Bitcoin reindex stages, one file each and their order (``stages``)."""

from __future__ import annotations

from rechain.pipeline.bitcoin.run import BtcRun
from rechain.pipeline.engine.driver import Stage


def stages(mode: str, scripts: bool = False) -> list[Stage[BtcRun]]:
    """The stages of a reindex in ``mode`` ("headers" or "full"), in order; ``scripts``: with
    the script checks after the chain state (full mode)."""
    from rechain.pipeline.bitcoin.stages.bodies import BodiesStage
    from rechain.pipeline.bitcoin.stages.chain_state import ChainStateStage
    from rechain.pipeline.bitcoin.stages.indexes import IndexesStage
    from rechain.pipeline.bitcoin.stages.link import LinkStage
    from rechain.pipeline.bitcoin.stages.publish import PublishStage
    from rechain.pipeline.bitcoin.stages.scan import ScanStage
    from rechain.pipeline.bitcoin.stages.scripts import ScriptsStage

    header_stages: list[Stage[BtcRun]] = [ScanStage(), LinkStage()]
    if mode == "headers":
        return header_stages
    checks: list[Stage[BtcRun]] = [ScriptsStage()] if scripts else []
    return [
        *header_stages,
        BodiesStage(),
        ChainStateStage(),
        *checks,
        PublishStage(),
        IndexesStage(),
    ]
