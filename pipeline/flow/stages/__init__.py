"""The Flow replay stages, one file each and their order (``stages``)."""

from __future__ import annotations

from rechain.pipeline.engine.driver import Stage
from rechain.pipeline.flow.run import FlowRun


def stages() -> list[Stage[FlowRun]]:
    from rechain.pipeline.flow.stages.publish import PublishStage
    from rechain.pipeline.flow.stages.replay import ReplayStage

    return [ReplayStage(), PublishStage()]
