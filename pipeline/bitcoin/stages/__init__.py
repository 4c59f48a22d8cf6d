"""The Bitcoin reindex stages, one file each and their order (``stages``)."""

from __future__ import annotations

from rechain.pipeline.bitcoin.run import BtcRun
from rechain.pipeline.engine.driver import Stage


def stages(mode: str) -> list[Stage[BtcRun]]:
    """The stages of a reindex in ``mode`` ("headers" or "full"), in order."""
    from rechain.pipeline.bitcoin.stages.bodies import BodiesStage
    from rechain.pipeline.bitcoin.stages.chain_state import ChainStateStage
    from rechain.pipeline.bitcoin.stages.indexes import IndexesStage
    from rechain.pipeline.bitcoin.stages.link import LinkStage
    from rechain.pipeline.bitcoin.stages.publish import PublishStage
    from rechain.pipeline.bitcoin.stages.scan import ScanStage

    header_stages: list[Stage[BtcRun]] = [ScanStage(), LinkStage()]
    if mode == "headers":
        return header_stages
    return [*header_stages, BodiesStage(), ChainStateStage(), PublishStage(), IndexesStage()]
