"""Stage ``scripts`` (``btc reindex --scripts``): every input of the applied best chain verified
by Bitcoin Core's own interpreter, with the flags Core gives each block.

The chain state has resolved every spend: each applied block's undo record holds the coins it
spent (amount and scriptPubKey). The stage cuts the applied chain above what it has checked
into runs of bounded bytes; each run (its blocks' places and undo records) is checked on a
thread or as a Ray task, independent of the others, and the coordinator commits the verdicts
in height order, one key per run with the summary (``script_checks``), so a killed run
resumes after the last run committed and a rerun checks only new best-chain blocks. A reorg
drops the runs whose last block left the best chain; their heights are checked again.

``--assume-valid HASH`` skips the runs Core would skip (``script_checks.assumed_through``).
The first input that fails makes its block invalid with Core's reason
(``block-script-verify-flag-failed (...)``): the block is recorded invalid, with its txid and
input, and the link stage is invalidated, which chooses the best valid chain again; the chain
state then unwinds to it, as for any reorg, and this stage checks the new branch.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

from rechain.pipeline.bitcoin import body_parts, chain_parts, script_checks
from rechain.pipeline.bitcoin.run import BtcRun
from rechain.pipeline.engine.driver import Done, Invalidate, Stage
from rechain.pipeline.errors import RechainError
from rechain.pipeline.progress import Progress
from rechain.pipeline.runtime.budget import budget_share
from rechain.schemas import rocksdb as layout
from rechain.workers import _native
from rechain.workers.btc_scripts import ScriptsUnit, check_scripts
from rechain.workers.fault_injection import kill_point

log = logging.getLogger(__name__)

#: Runs never cross a multiple of this many heights.
RUN_BLOCKS = 1_000
#: Block bytes per run: at most this, and at most the run's part of the stage's share.
MAX_RUN_BYTES = 16 << 20
MIN_RUN_BYTES = 64 << 10


class ScriptsStage(Stage[BtcRun]):
    name = "scripts"

    def output(self, ctx: BtcRun) -> Any:
        """The chain state's own token once every applied block is checked (so turning the
        checks on over a checked chain changes nothing after it), else how far they are."""
        s = script_checks.summary(ctx.data)
        cs = chain_parts.checkpoint(ctx.data)
        if s is None:
            return None
        if cs is not None and s["height"] == cs["height"] and s["hash"] == cs["hash"]:
            return [cs["height"], cs["hash"], cs["utxo_count"], cs["total_amount"]]
        return ["scripts", s["height"], s["hash"]]

    def pending(self, ctx: BtcRun) -> bool:
        s = script_checks.summary(ctx.data)
        return s is not None and s.get("assume_valid") != ctx.opts.assume_valid

    def reset(self, ctx: BtcRun, data: Any) -> None:
        """``--from-stage scripts``: every block is checked again."""
        stale = [k for k, _ in data.items(layout.CF_META, layout.META_BTC_SCRIPTS_RUN_PREFIX)]
        data.write({}, {layout.CF_META: [layout.META_BTC_SCRIPTS, *stale]})

    def run(self, ctx: BtcRun) -> Done | Invalidate:
        t0 = time.perf_counter()
        data = ctx.data
        cs = chain_parts.checkpoint(data)
        tip = -1 if cs is None else int(cs["height"])
        best = chain_parts.best_chain(data)
        assume_valid = ctx.opts.assume_valid
        through = script_checks.assumed_through(data, ctx.opts.network, assume_valid, best)
        kept, dropped = script_checks.checked_prefix(script_checks.runs(data), best, tip, through)
        if dropped:
            log.info("scripts: %d checked run(s) left the best chain; checked again", len(dropped))
            data.write({}, {layout.CF_META: [layout.scripts_run_key(r["first"]) for r in dropped]})
        totals = {
            "blocks": sum(int(r["last"]) - int(r["first"]) + 1 for r in kept),
            "txs": sum(int(r["txs"]) for r in kept),
            "inputs": sum(int(r["inputs"]) for r in kept),
            "assumed_blocks": sum(
                int(r["last"]) - int(r["first"]) + 1 for r in kept if r["assumed"]
            ),
        }
        start = int(kept[-1]["last"]) + 1 if kept else 0
        checked_before = totals["inputs"]
        if start <= min(through, tip):
            # Core's assumevalid: these blocks' scripts are not run.
            last = min(through, tip)
            run = {"first": start, "last": last, "assumed": True, "txs": 0, "inputs": 0}
            totals["blocks"] += last - start + 1
            totals["assumed_blocks"] += last - start + 1
            self._commit(ctx, best, run, totals)
            start = last + 1
        bar = Progress(
            max(tip - start + 1, 0), enabled=ctx.opts.progress, label="scripts", unit="blocks"
        )
        failure = None
        window = 2 * max(ctx.workers, 1)
        share = budget_share(ctx.opts.memory_budget, "bitcoin", "scripts.runs")
        # A run holds its blocks, their undo records and parse buffers: about twice its bytes.
        run_bytes = max(MIN_RUN_BYTES, min(MAX_RUN_BYTES, share // (2 * window)))
        units = self._units(ctx, best, start, tip, run_bytes)
        for unit, result in ctx.executor.ordered(check_scripts, units, window, "scripts"):
            if isinstance(result, BaseException):
                raise RechainError(f"scripts: heights {unit.spec.first}..{unit.last}: {result}")
            failure = result["failure"]
            last = unit.last if failure is None else int(failure["height"]) - 1
            totals["blocks"] += last - unit.spec.first + 1
            totals["txs"] += int(result["txs"])
            totals["inputs"] += int(result["inputs"])
            if last >= unit.spec.first:
                run = {
                    "first": unit.spec.first,
                    "last": last,
                    "assumed": False,
                    "txs": int(result["txs"]),
                    "inputs": int(result["inputs"]),
                }
                self._commit(ctx, best, run, totals)
            bar.update(last - unit.spec.first + 1, last - unit.spec.first + 1)
            if failure is not None:
                break
        bar.close()
        ctx.add({"scripts_s": time.perf_counter() - t0})
        ctx.full["scripts_inputs_checked"] = (
            ctx.full.get("scripts_inputs_checked", 0) + totals["inputs"] - checked_before
        )
        if failure is not None:
            return self._invalid(ctx, failure)
        self._write_summary(ctx, best, totals)
        return Done(rows=totals["inputs"], height=tip, detail=dict(totals))

    def _units(
        self, ctx: BtcRun, best: bytes, start: int, tip: int, run_bytes: int
    ) -> Iterator[ScriptsUnit]:
        """The runs from ``start`` to ``tip``, each with its undo records (read as the run is
        submitted, so at most the window's runs are in memory)."""
        undo = ctx.data.cf(layout.CF_BTC_UNDO)
        for chunk in chain_parts.best_chain_runs(ctx.data, best, start, tip, run_bytes, RUN_BLOCKS):
            first, hashes, _ = chunk
            heights = range(first, first + len(hashes))
            undos = undo[[layout.undo_key(h) for h in heights]]
            missing = [h for h, u in zip(heights, undos, strict=True) if u is None]
            if missing:
                raise RechainError(
                    f"the chain state has no undo data for height(s) {missing[:5]}: "
                    "rerun with --from-stage chain_state"
                )
            yield ScriptsUnit(chain_parts.chunk_spec(ctx, chunk), tuple(undos))

    def _commit(
        self, ctx: BtcRun, best: bytes, run: dict[str, Any], totals: dict[str, int]
    ) -> None:
        """One checked run's key and the summary, in one write."""
        last = int(run["last"])
        run = {**run, "hash": _native.display_hash(best[32 * last : 32 * last + 32])}
        ctx.data.write(
            {
                layout.CF_META: [
                    (layout.scripts_run_key(int(run["first"])), run),
                    (layout.META_BTC_SCRIPTS, self._summary(ctx, best, last, totals)),
                ]
            }
        )
        kill_point("scripts.run_checked")

    def _summary(
        self, ctx: BtcRun, best: bytes, height: int, totals: dict[str, int]
    ) -> dict[str, Any]:
        block_hash = (
            None if height < 0 else _native.display_hash(best[32 * height : 32 * height + 32])
        )
        return {
            "height": height,
            "hash": block_hash,
            "assume_valid": ctx.opts.assume_valid,
            **totals,
        }

    def _write_summary(self, ctx: BtcRun, best: bytes, totals: dict[str, int]) -> None:
        """The summary as the kept runs leave it (after drops, or a new ``--assume-valid``)."""
        listed = script_checks.runs(ctx.data)
        height = int(listed[-1]["last"]) if listed else -1
        ctx.data.write(
            {layout.CF_META: [(layout.META_BTC_SCRIPTS, self._summary(ctx, best, height, totals))]}
        )

    def _invalid(self, ctx: BtcRun, failure: dict[str, Any]) -> Invalidate:
        """Records the failed block invalid with Core's reason and where it failed, then
        has the link stage choose the best valid chain again."""
        data = ctx.data
        block_hash, height, reason = (
            failure["block_hash"],
            int(failure["height"]),
            failure["reason"],
        )
        log.warning(
            "block %s at height %d (%s offset %d) is invalid: %s (transaction %s, input %d)",
            block_hash,
            height,
            failure["file"],
            failure["offset"],
            reason,
            failure["txid"],
            failure["input"],
        )
        invalid = body_parts.invalid_blocks(data)
        invalid[block_hash] = reason
        failures = dict(data.meta_get(layout.META_BTC_SCRIPT_FAILURES) or {})
        failures[block_hash] = {
            k: failure[k]
            for k in ("height", "file", "offset", "tx_index", "txid", "input", "reason")
        }
        data.write(
            {
                layout.CF_META: [
                    (layout.META_BTC_INVALID_BLOCKS, invalid),
                    (layout.META_BTC_SCRIPT_FAILURES, failures),
                ]
            }
        )
        return Invalidate("link", f"block {block_hash} at height {height}: {reason}")
