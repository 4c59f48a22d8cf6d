"""Stage ``link``: links the scan log into the block tree, rebuilds the block index and best
chain in RocksDB and publishes the ``headers`` table (``BtcCommitter.link_and_publish``).

It runs when the scan changed the log (the committer's durable dirty flag), when nothing was
ever linked, when a folder linked before the best chain's median times were kept lacks them,
or when a later stage invalidated it: a copy of a block that failed its body
checks, or a block that breaks a consensus rule, changes which copy and which chain win.
"""

from __future__ import annotations

from typing import Any

from rechain.pipeline import metrics
from rechain.pipeline.bitcoin.run import BtcRun
from rechain.pipeline.bitcoin.scan_log import STAGE
from rechain.pipeline.engine.driver import Done, Stage
from rechain.pipeline.errors import RechainError
from rechain.schemas import rocksdb as layout


class LinkStage(Stage[BtcRun]):
    name = "link"

    def pending(self, ctx: BtcRun) -> bool:
        data = ctx.data
        first = layout.best_chain_key(0)
        return (
            bool(data.meta_get(layout.META_BTC_DIRTY))
            or data.meta_get(layout.META_BTC_SUMMARY) is None
            or (
                data.get(layout.CF_BTC_BEST, first) is not None
                and data.get(layout.CF_BTC_BEST_MTP, first) is None
            )
        )

    def output(self, ctx: BtcRun) -> Any:
        """The published headers generation (a new one at every link)."""
        return ctx.data.meta_get(layout.META_BTC_GENERATION)

    def run(self, ctx: BtcRun) -> Done:
        summary = ctx.committer.link_and_publish()
        for step, secs in ctx.committer.stats.link.items():
            metrics.LINK_SECONDS.labels(STAGE, step).set(secs)
        check_found_records(ctx, summary)
        return Done(
            rows=int(summary["blocks_indexed"]),
            height=summary["tip_height"],
            detail={"tip_hash": summary["tip_hash"], "records": summary["records"]},
        )


def check_found_records(ctx: BtcRun, summary: dict[str, Any]) -> None:
    """A folder of non-empty blk files without one record is a wrong network or XOR key."""
    if summary["records"] == 0 and any(f.size > 0 for f in ctx.files):
        raise RechainError(
            f"no {ctx.opts.network} block records found in {len(ctx.files)} blk file(s) "
            f"under {ctx.opts.blocks}: wrong --network or XOR key (xor.dat)?"
        )
