"""The Bitcoin reindex as stages: scan → link (header mode), then bodies → chain_state →
publish → indexes (full mode). ``BtcRun`` is what the stages of one run share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rechain.pipeline.runtime.executor import Executor

if TYPE_CHECKING:
    import duckdb
    from rechain.pipeline.bitcoin.core_index import CoreIndexGuide
    from rechain.pipeline.bitcoin.plan import BlkFile
    from rechain.pipeline.bitcoin.reindex import ReindexOptions
    from rechain.pipeline.bitcoin.scan_log import BtcCommitter
    from rechain.pipeline.store.datadir import DataDir

PIPELINE = "bitcoin"


@dataclass
class BtcRun:
    """One reindex: its options, data folder and blk files, and what its stages hand on."""

    opts: ReindexOptions
    data: DataDir
    committer: BtcCommitter
    files: list[BlkFile]
    key: bytes
    workers: int
    #: Threads or Ray for this run's units, chosen once as the run starts.
    executor: Executor = field(init=False)
    guide: CoreIndexGuide | None = None
    #: The scan's figures (shards, bytes, Ray start-up), for the run report.
    scan: dict[str, Any] = field(default_factory=dict)
    #: The full-mode stages' figures (units decoded, stage times), for the run report.
    full: dict[str, float] = field(default_factory=dict)
    #: The DuckDB session publish and indexes read (``session``), opened once per run.
    con: duckdb.DuckDBPyConnection | None = None

    def __post_init__(self) -> None:
        self.executor = Executor.choose(self.opts.ray_address, self.workers)

    @property
    def paths(self) -> dict[int, str]:
        return {f.file_no: str(f.path) for f in self.files}

    def add(self, figures: dict[str, float]) -> None:
        for k, v in figures.items():
            self.full[k] = self.full.get(k, 0.0) + v

    def session(self) -> duckdb.DuckDBPyConnection:
        """DuckDB over the staged bodies, the headers and the chain state's spends."""
        if self.con is None:
            from rechain.pipeline.bitcoin.session import connect

            self.con = connect(self.data, self.opts.memory_budget, self.workers)
        return self.con

    def close(self) -> None:
        if self.con is not None:
            self.con.close()
            self.con = None
