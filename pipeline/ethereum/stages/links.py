"""Stage ``links``: the checks between neighbouring units, over everything committed.

For each pair of units where one ends at the block before the next begins, the next one's
first header is checked against the previous one's last (parent hash, number, timestamp, gas
limit, difficulty, base fee, ...) and its TD against the previous TD. Ranges no unit holds are
listed as gaps (a folder may hold some epochs only). Recomputed whole from the unit records
after every change, so the result does not depend on the order units were committed in.
"""

from __future__ import annotations

from typing import Any

from rechain.pipeline import metrics
from rechain.pipeline.engine.driver import Done, Stage
from rechain.pipeline.ethereum.run import EthRun
from rechain.pipeline.ethereum.units import STAGE, committed_units
from rechain.schemas import rocksdb as layout
from rechain.workers import _native


class LinksStage(Stage[EthRun]):
    name = "links"

    def output(self, ctx: EthRun) -> Any:
        found = ctx.data.meta_get(layout.META_ETH_LINKS)
        return None if found is None else found["token"]

    def run(self, ctx: EthRun) -> Done:
        units = sorted(
            (u for u in committed_units(ctx.data).values() if u["blocks"]),
            key=lambda u: u["first"],
        )
        network = ctx.opts.network
        checked = 0
        verdicts: list[dict[str, Any]] = []
        gaps: list[list[int]] = []
        for prev, unit in zip(units, units[1:], strict=False):
            if prev["end"] != unit["first"]:
                gaps.append([prev["end"], unit["first"] - 1])
                continue
            checked += 1
            for _block, rule, detail in _native.eth_link_violations(
                network,
                bytes.fromhex(prev["last_header"]),
                prev["last_td"] if prev.get("td_known") else None,
                bytes.fromhex(unit["first_header"]),
                unit["first_td"] if unit.get("td_known") else None,
            ):
                verdicts.append(
                    {"source": unit["part"], "block": unit["first"], "rule": rule,
                     "detail": detail}
                )  # fmt: skip
                metrics.SKIPS.labels(STAGE, rule).inc()
        token = "|".join(f"{u['part']}:{u['first']}:{u['end']}" for u in units)
        result = {"token": token, "checked": checked, "verdicts": verdicts, "gaps": gaps}
        ctx.data.write({layout.CF_META: [(layout.META_ETH_LINKS, result)]})
        return Done(rows=checked, detail={"failed": len(verdicts), "gaps": len(gaps)})
