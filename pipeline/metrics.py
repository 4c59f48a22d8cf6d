"""Prometheus metrics for every stage, named ``rechain_*`` and labelled by stage.

The metrics are made in ``prometheus_client`` on first use (or when ``serve`` exports them),
not at import: that library and what it loads (an HTTP server, TLS) cost a process ~12 MiB, and
a CLI run without ``--metrics-port`` (``serve(None)``), which nothing could scrape, drops its
updates and never loads it (a Flow replay must stay within flow-go's memory).
"""

from __future__ import annotations

from typing import Any

#: None: `serve` not called (library use collects, e.g. tests reading the registry); True:
#: served; False: a CLI run without a metrics port, whose updates go nowhere.
_exported: bool | None = None
_ALL: list[_Metric] = []


class _Dropped:
    """What ``labels()`` gives when metrics are not exported: every update is ignored."""

    def inc(self, amount: float = 1) -> None: ...

    def dec(self, amount: float = 1) -> None: ...

    def set(self, value: float) -> None: ...

    def observe(self, value: float) -> None: ...


_DROPPED = _Dropped()


class _Metric:
    """A labelled ``prometheus_client`` metric (``kind``: Counter, Gauge, Histogram), made
    when first needed."""

    def __init__(self, kind: str, name: str, doc: str, labels: list[str], **kw: Any) -> None:
        self._spec = (kind, name, doc, labels, kw)
        self._metric: Any = None
        _ALL.append(self)

    def _real(self) -> Any:
        if self._metric is None:
            import prometheus_client

            kind, name, doc, labels, kw = self._spec
            self._metric = getattr(prometheus_client, kind)(name, doc, labels, **kw)
        return self._metric

    def labels(self, *values: str) -> Any:
        if _exported is False:
            return _DROPPED
        return self._real().labels(*values)


RECORDS = _Metric(
    "Counter", "rechain_stage_records_total", "Records decoded and committed", ["stage"]
)
BYTES_READ = _Metric(
    "Counter", "rechain_stage_bytes_read_total", "Bytes read from input files", ["stage"]
)
SKIPS = _Metric(
    "Counter",
    "rechain_stage_skips_total",
    "Skipped or damaged input by reason",
    ["stage", "reason"],
)
SHARD_DECODE_SECONDS = _Metric(
    "Histogram",
    "rechain_shard_decode_seconds",
    "Worker time per shard",
    ["stage"],
    buckets=(0.001, 0.01, 0.05, 0.1, 0.5, 1, 5, 30),
)
COMMIT_SECONDS = _Metric(
    "Histogram",
    "rechain_commit_seconds",
    "Committer time per shard",
    ["stage"],
    buckets=(0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5),
)
LINK_SECONDS = _Metric(
    "Gauge", "rechain_link_seconds", "Duration of the last link/publish phase", ["stage", "step"]
)
QUEUE_DEPTH = _Metric(
    "Gauge", "rechain_queue_depth", "Shards submitted but not yet committed", ["stage"]
)
SHARDS_TOTAL = _Metric("Gauge", "rechain_shards_planned", "Shards planned for this run", ["stage"])


def serve(port: int | None) -> None:
    """Exposes /metrics on ``port`` (all interfaces of this host) when a port is given; without
    one (a CLI run nobody can scrape) metric updates are dropped until a later call serves."""
    global _exported
    _exported = bool(port)
    if not port:
        return
    from prometheus_client import start_http_server

    for m in _ALL:  # every metric listed from the first scrape, as before any update
        m._real()
    start_http_server(port)
