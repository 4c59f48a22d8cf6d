"""The Flow checkpoint task: decode one v6 subtrie part and verify it completely (Rust core)."""

from __future__ import annotations

import time
from typing import Any

from rechain.workers import _native


def verify_part(
    directory: str, name: str, index: int, verify_leaves: bool = True
) -> dict[str, Any]:
    """Checks magic, version, both CRCs, node order and the node hashes of part `index` (leaf
    hashes recomputed from the values unless `verify_leaves` is false).
    Returns its counts, or ``{"error": {...}}`` with the file, offset and reason."""
    t0 = time.perf_counter()
    try:
        info = _native.flow_checkpoint_verify_part(directory, name, index, verify_leaves).as_dict()
    except _native.FlowCheckpointError as e:
        return {
            "index": index,
            "error": {
                "file": getattr(e, "file", name),
                "offset": getattr(e, "offset", None),
                "kind": getattr(e, "kind", "error"),
                "message": str(e),
                "retryable": bool(getattr(e, "retryable", False)),
            },
        }
    info["seconds"] = time.perf_counter() - t0
    return info
