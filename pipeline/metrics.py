"""Prometheus metrics for every stage, named ``rechain_*`` and labelled by stage."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, start_http_server

RECORDS = Counter("rechain_stage_records_total", "Records decoded and committed", ["stage"])
BYTES_READ = Counter("rechain_stage_bytes_read_total", "Bytes read from input files", ["stage"])
SKIPS = Counter(
    "rechain_stage_skips_total", "Skipped or damaged input by reason", ["stage", "reason"]
)
SHARD_DECODE_SECONDS = Histogram(
    "rechain_shard_decode_seconds",
    "Worker time per shard",
    ["stage"],
    buckets=(0.001, 0.01, 0.05, 0.1, 0.5, 1, 5, 30),
)
COMMIT_SECONDS = Histogram(
    "rechain_commit_seconds",
    "Committer time per shard",
    ["stage"],
    buckets=(0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5),
)
LINK_SECONDS = Gauge(
    "rechain_link_seconds", "Duration of the last link/publish phase", ["stage", "step"]
)
QUEUE_DEPTH = Gauge("rechain_queue_depth", "Shards submitted but not yet committed", ["stage"])
SHARDS_TOTAL = Gauge("rechain_shards_planned", "Shards planned for this run", ["stage"])


def serve(port: int | None) -> None:
    """Exposes /metrics on ``port`` (all interfaces of this host) when a port is given."""
    if port:
        start_http_server(port)
