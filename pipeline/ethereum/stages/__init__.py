"""The Ethereum import stages, one file each and their order (``stages``)."""

from __future__ import annotations

from rechain.pipeline.engine.driver import Stage
from rechain.pipeline.ethereum.run import EthRun


def stages() -> list[Stage[EthRun]]:
    from rechain.pipeline.ethereum.stages.blocks import BlocksStage
    from rechain.pipeline.ethereum.stages.links import LinksStage

    return [BlocksStage(), LinksStage()]
