"""Where a run's work ran: per stage, the Ray nodes its tasks ran on (``ray_cluster`` records
each task's node under the stage the driver is running), or the coordinator for a stage that
ran no tasks. Kept apart from ``ray_cluster`` so that a run which never used Ray reports
without importing it."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

#: stage → Ray node id → tasks, since the last ``reset``.
_tasks: defaultdict[str, Counter[str]] = defaultdict(Counter)
#: [stage the driver is running], [the coordinator's Ray node once it started or joined Ray].
_stage: list[str] = ["-"]
_coordinator: list[str] = []


def reset() -> None:
    _tasks.clear()


def enter(stage: str) -> None:
    _stage[0] = stage


def set_coordinator(node_id: str) -> None:
    _coordinator[:] = [node_id]


def record(node_id: str) -> None:
    _tasks[_stage[0]][node_id] += 1


def report(stages_run: list[str]) -> dict[str, Any]:
    """Per stage run: ``{"ray_tasks": {node id: tasks}}`` (node ids as ``ray status`` names
    them) or ``{"coordinator": true}``; and the coordinator's node (None without Ray)."""
    out: dict[str, Any] = {"coordinator_node": _coordinator[0] if _coordinator else None}
    for stage in dict.fromkeys(stages_run):
        out[stage] = (
            {"ray_tasks": dict(_tasks[stage])} if stage in _tasks else {"coordinator": True}
        )
    return out
