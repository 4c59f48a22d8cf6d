"""What a data folder is for: the one pipeline whose data it holds and the settings a rerun
without flags inherits (``META_FOLDER``). A folder of one chain refuses another chain's run, so
two chains' tables never mix."""

from __future__ import annotations

from typing import Any

from rechain.pipeline.errors import RechainError
from rechain.pipeline.store.datadir import DataDir
from rechain.schemas import flow as fs
from rechain.schemas import rocksdb as layout

#: The command that fills a folder of each pipeline, for messages.
COMMANDS = {"bitcoin": "rechain btc reindex", "flow": "rechain flow", "eth": "rechain eth import"}


def folder_record(data: DataDir) -> dict[str, Any]:
    """The folder's record; for a folder written before records existed, what its metadata
    shows (the pipeline whose summary it holds); empty for a new folder."""
    record = data.meta_get(layout.META_FOLDER)
    if record is not None:
        return dict(record)
    if data.meta_get(layout.META_BTC_SUMMARY) is not None:
        full = data.meta_get(layout.META_BTC_FULL) is not None
        return {"pipeline": "bitcoin", "mode": "full" if full else "headers"}
    if data.meta_get(fs.META_FLOW_SUMMARY) is not None:
        return {"pipeline": "flow"}
    if data.meta_get(layout.META_ETH_IMPORT) is not None:
        return {"pipeline": "eth"}
    return {}


def claim(data: DataDir, pipeline: str, **settings: Any) -> dict[str, Any]:
    """Records that ``data`` holds ``pipeline``'s data with ``settings`` (merged over what it
    recorded before); a folder holding another pipeline's data is refused."""
    record = folder_record(data)
    held = record.get("pipeline")
    if held is not None and held != pipeline:
        raise RechainError(
            f"{data.path} holds {held} data (from `{COMMANDS[held]}`); "
            f"give the {pipeline} run a data folder of its own (another --data)"
        )
    new = {**record, "pipeline": pipeline, **settings}
    if new != data.meta_get(layout.META_FOLDER):
        data.write({layout.CF_META: [(layout.META_FOLDER, new)]})
    return new
