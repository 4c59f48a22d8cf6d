"""Reading a finished (or running) Bitcoin reindex: status summary, the UTXO set's
statistics (``gettxoutsetinfo``) and single-block lookups."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rechain.pipeline.bitcoin import chain_parts
from rechain.pipeline.bitcoin.scan_log import skipped_from
from rechain.pipeline.errors import RechainError
from rechain.pipeline.human import rows
from rechain.pipeline.stage_report import behind
from rechain.pipeline.store.datadir import DataDir
from rechain.pipeline.store.table_view import view_problems
from rechain.schemas import rocksdb as layout
from rechain.workers import _native


def status(data_path: Path) -> dict[str, Any]:
    with DataDir(data_path, readonly=True) as data:
        summary = data.meta_get(layout.META_BTC_SUMMARY)
        if summary is None:
            raise RechainError(f"{data_path}: no completed Bitcoin reindex here yet")
        out = {
            "network": summary["network"],
            "tip_hash": summary["tip_hash"],
            "tip_height": summary["tip_height"],
            "chainwork": summary["chainwork"],
            "blocks_indexed": summary["blocks_indexed"],
            "orphans": summary["orphans"],
            "duplicates": summary["duplicates"],
            "invalid": summary["invalid"],
            "skipped": skipped_from(data),
            "records": summary["records"],
            "distinct_hashes": summary["distinct_hashes"],
            "body_checked": summary["body_checked"],
            "pending_changes": bool(data.meta_get(layout.META_BTC_DIRTY)),
            "run": data.meta_get(layout.META_BTC_RUN),
            "mode": "headers",
        }
        # A stage behind the others (an interrupted run): the tables lag the index.
        out["problems"] = behind(data) + view_problems(data.path)
        full = data.meta_get(layout.META_BTC_FULL)
        if full is not None:
            # Count, amount and digest of the set as it is now, from one pass over it.
            out.update(
                mode="full",
                **recorded_utxo_set_info(data),
                tables=full["tables"],
                invalid_blocks=full["invalid_blocks"],
            )
        checked = data.meta_get(layout.META_BTC_SCRIPTS)
        if checked is not None:
            failures = data.meta_get(layout.META_BTC_SCRIPT_FAILURES) or {}
            out["scripts"] = {**checked, "failures": failures}
        return out


#: Where the UTXO set's commitments are recorded for the set they were computed over.
UTXO_SET_REPORT = "btc_utxo_set"


def recorded_utxo_set_info(data: DataDir) -> dict[str, Any]:
    """``utxo_set_info`` computed once per state of the set: recorded (``reports/``) with the
    chain-state checkpoint it hashed, and served from there while that checkpoint stands, so
    ``status`` is instant however large the set (Core's ``gettxoutsetinfo`` hashes it on every
    call)."""
    state = chain_parts.checkpoint(data) or {}
    path = data.path / "reports" / f"{UTXO_SET_REPORT}.json"
    try:
        recorded = json.loads(path.read_text())
    except (OSError, ValueError):
        recorded = {}
    fields = ("utxo_count", "total_amount", "hash_serialized_3", "muhash")
    if recorded.get("state") == state and all(k in recorded for k in fields):
        return {k: recorded[k] for k in fields}
    info = utxo_set_info(data)
    try:
        data.write_report(UTXO_SET_REPORT, {**info, "state": state})
    except OSError:
        pass  # a read-only folder: computed again next time
    return info


def utxo_set_info(data: DataDir) -> dict[str, Any]:
    """Count, amount, ``hash_serialized_3`` and MuHash of ``btc_utxo``, computed over the whole set
    in key order as Core's ``gettxoutsetinfo`` does (on demand: a reindex keeps only the
    running count and amount, so its work grows with the new blocks, not with the set). The
    set must agree with the chain state's running figures."""
    digest, muhash, count, total = _native.hash_utxo_entries(data.cf(layout.CF_BTC_UTXO).items())
    cp = chain_parts.checkpoint(data) or {"utxo_count": 0, "total_amount": 0}
    if (count, total) != (cp["utxo_count"], cp["total_amount"]):
        raise RechainError(
            f"the UTXO set holds {count} outputs / {total} sat but the chain state applied "
            f"{cp['utxo_count']} / {cp['total_amount']}: rerun the reindex with "
            "--from-stage chain_state"
        )
    return {
        "utxo_count": count,
        "total_amount": total,
        "hash_serialized_3": digest,
        "muhash": muhash,
    }


def block(
    data_path: Path, *, height: int | None = None, hash_: str | None = None
) -> dict[str, Any]:
    with DataDir(data_path, readonly=True) as data:
        if height is not None:
            key = None
            if 0 <= height < 2**32:
                bucket = data.get(layout.CF_BTC_BEST, layout.best_chain_key(height))
                key = layout.best_chain_hash(bucket, height)
            if key is None:
                raise RechainError(f"no block at height {height} on the best chain")
        else:
            assert hash_ is not None
            try:
                key = layout.index_key(hash_.lower())
            except ValueError as e:
                raise RechainError(str(e)) from e
        value = data.get(layout.CF_BTC_INDEX, key)
        if value is None:
            raise RechainError(f"block {hash_ or height} is not in the index")
        entry = layout.decode_index_value(value)
        return {**entry.as_dict(), "file_name": f"blk{entry.file:05d}.dat"}


def format_status(s: dict[str, Any]) -> str:
    rows = [
        ("network", s["network"]),
        ("mode", s["mode"]),
        ("tip", f"{s['tip_hash']} (height {s['tip_height']})"),
        ("chainwork", s["chainwork"]),
        ("blocks indexed", f"{s['blocks_indexed']:,}"),
        ("records scanned", f"{s['records']:,}"),
        ("duplicates", f"{s['duplicates']:,}"),
        ("orphans", f"{len(s['orphans']):,}"),
        ("invalid", f"{len(s['invalid']):,}"),
        ("skipped", f"{len(s['skipped']):,}"),
    ]
    if s.get("mode") == "full":
        rows += [
            ("utxo set", f"{s['utxo_count']:,} outputs, {s['total_amount']:,} sat"),
            ("hash_serialized_3", s["hash_serialized_3"]),
            ("muhash", s["muhash"]),
            ("transactions", f"{s['tables']['transactions']:,}"),
        ]
    checked = s.get("scripts")
    if checked:
        assumed = checked["assumed_blocks"]
        rows.append(
            (
                "scripts",
                f"checked to height {checked['height']}: {checked['inputs']:,} inputs"
                + (f", {assumed:,} blocks assumed valid" if assumed else ""),
            )
        )
    width = max(len(k) for k, _ in rows)
    lines = [f"{k.ljust(width)}  {v}" for k, v in rows]
    for item in s["skipped"][:20]:
        extra = " ".join(
            f"{k}={v}" for k, v in item.items() if k not in ("file", "offset", "reason")
        )
        lines.append(f"  skip {item['file']}@{item['offset']}: {item['reason']} {extra}".rstrip())
    if len(s["skipped"]) > 20:
        lines.append(f"  ... {len(s['skipped']) - 20} more (use --json)")
    for item in s["invalid"][:20]:
        lines.append(f"  invalid {item['hash']}: {item['reason']}")
    for block_hash, f in sorted((checked or {}).get("failures", {}).items()):
        lines.append(
            f"  invalid {block_hash} (height {f['height']}): {f['reason']}, "
            f"transaction {f['txid']} input {f['input']}"
        )
    run = s.get("run") or {}
    if run:
        lines.append(
            f"last run: {run.get('records_scanned', 0):,} records from {run.get('bytes_read', 0):,}"
            f" of {run.get('file_bytes', 0):,} bytes in {run.get('total_s', 0):.2f}s"
        )
    for problem in s.get("problems", []):
        lines.append(f"NOT UP TO DATE: {problem}")
    return "\n".join(lines)


def format_block(b: dict[str, Any]) -> str:
    return rows(b)
