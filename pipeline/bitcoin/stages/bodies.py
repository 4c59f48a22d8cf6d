"""Stage ``bodies``: decodes the block copies the link stage chose into staged parts.

The copies the header pass chose (every linked, side-branch, orphan and unlinked block) that
have no verdict yet are read by file and offset on Ray workers, checked and decoded by the
Rust core, which stages each copy's verdict row and its transactions' txids (the parts of
``pipeline/bitcoin/body_parts.py``); the later stages write every other row from the blocks
themselves. A copy has a verdict once a part staged it here or once the chain state applied
it (its part's ``blocks`` rows). The best-chain copies above the applied chain are left to
the chain state, which reads them anyway and makes the same checks as it frames them: the
best chain is decoded once, not twice. When it stops at a block (a failed copy, or a
consensus rule broken), it stages the verdicts of the best-chain copies it did not reach
here (``stage_unreached``), as if this stage had decoded them.

Already staged copies are never decoded again here, so after the node appended blocks only
the new ones off the best chain are. A copy that fails its checks invalidates the link
stage: the linker then picks another copy of the same hash, which is checked next.
"""

from __future__ import annotations

import hashlib
import logging
import time
from typing import Any

import pyarrow.compute as pc
from rechain.pipeline.bitcoin import body_parts, body_units, chain_parts
from rechain.pipeline.bitcoin.run import BtcRun
from rechain.pipeline.engine.driver import Done, Invalidate, Stage
from rechain.pipeline.store.table_view import newest_generation
from rechain.schemas import bitcoin as ds
from rechain.schemas import rocksdb as layout

log = logging.getLogger(__name__)


class BodiesStage(Stage[BtcRun]):
    name = "bodies"

    def output(self, ctx: BtcRun) -> Any:
        """The staged parts and the consensus verdicts, against the headers generation."""
        h = hashlib.sha256()
        h.update(str(ctx.data.meta_get(layout.META_BTC_GENERATION)).encode())
        for key, _ in ctx.data.items(layout.CF_BTC_BODIES):
            h.update(len(key).to_bytes(4, "big") + key)
        h.update(repr(sorted(body_parts.invalid_blocks(ctx.data).items())).encode())
        return h.hexdigest()[:32]

    def run(self, ctx: BtcRun) -> Done | Invalidate:
        data = ctx.data
        removed = body_parts.remove_unregistered(data)
        if removed:
            log.info("removed %d staged body file(s) a killed run left unregistered", removed)
        gen = newest_generation(data.parquet_dir(ds.HEADERS))
        assert gen is not None
        import pyarrow.parquet as pq

        columns = ["file", "offset", "size", "status", "copy_status", "height", "in_best_chain"]
        headers = pq.read_table(gen, columns=columns)
        budget = ctx.opts.memory_budget
        staged = body_parts.staged_blocks(data, ["file", "offset"])
        cp = chain_parts.checkpoint(data)
        applied_tip = -1 if cp is None else int(cp["height"])
        units = body_units.plan_units(
            headers,
            staged,
            ctx.paths,
            ctx.opts.network,
            ctx.key,
            body_units.unit_bytes(budget),
            applied_tip,
            chain_parts.applied_copies(data),
        )
        if not units:
            return Done(rows=staged.num_rows)
        t_decode = time.perf_counter()
        run_on = ctx.executor
        log.info("decode: %d unit(s) on %s", len(units), "Ray" if run_on.on_ray else "threads")
        run_on.start()
        got = body_units.decode_units(
            units,
            data,
            ctx.workers,
            budget,
            ctx.opts.progress,
            run_on.workers_share_data_folder,
            run_on.on_ray,
        )
        got["decode_s"] = time.perf_counter() - t_decode
        ctx.add(got)
        # Only this run's parts hold new verdicts (staged parts are never decoded again).
        decoded = body_parts.staged_blocks(data, ["valid"], [u.part for u in units])
        if not pc.all(decoded.column("valid")).as_py():
            # Copies that failed their checks change which copy the linker picks.
            return Invalidate("link", "block copies failed their body checks")
        return Done(
            rows=staged.num_rows + decoded.num_rows,
            detail={"units": len(units), "bytes_decoded": int(got["bytes_decoded"])},
        )
