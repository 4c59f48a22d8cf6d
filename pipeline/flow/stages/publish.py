"""Stage ``publish``: the forest's current trie and update log to RocksDB and Parquet.

The Parquet tables are written by the Rust core (so this process never loads pyarrow), as a
new generation; then RocksDB's registers (SST files, path order) and the root history
(``publication.publish_forest``, which a checkpoint read in memory publishes through too).
"""

from __future__ import annotations

from typing import Any

from rechain.pipeline.engine.driver import Done, Stage
from rechain.pipeline.flow.publication import publish_forest
from rechain.pipeline.flow.run import FlowRun
from rechain.schemas import flow as fs


class PublishStage(Stage[FlowRun]):
    name = "publish"
    uses = ("replay",)

    def output(self, ctx: FlowRun) -> Any:
        return ctx.data.meta_get(fs.META_FLOW_GENERATION)

    def run(self, ctx: FlowRun) -> Done:
        resumed = ctx.resumed
        segments = ctx.replayed
        summary = publish_forest(
            ctx.data,
            ctx.forest,
            segments,
            ctx.skipped,
            last_segment=resumed["number"] if resumed is not None else None,
            resumed_from=resumed,
            memory_budget=ctx.opts.memory_budget,
        )
        return Done(rows=int(summary["registers"]), detail={"root": summary["root"]})
