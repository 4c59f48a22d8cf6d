"""The Ethereum history import as stages: ``blocks`` (era1 files or a geth freezer read,
checked and converted unit by unit into the ``eth_*`` tables and the header index), then
``links`` (the checks between neighbouring units). ``EthRun`` is what they share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rechain.pipeline.runtime.executor import Executor

if TYPE_CHECKING:
    from rechain.pipeline.ethereum.importer import ImportOptions
    from rechain.pipeline.store.datadir import DataDir
    from rechain.workers.eth_import import EthUnit

PIPELINE = "eth"


@dataclass
class EthRun:
    opts: ImportOptions
    data: DataDir
    #: Every unit of the input within --from/--to, in block order.
    units: list[EthUnit]
    #: Fingerprint of each unit's input (size and modification time, options).
    fingerprints: dict[str, str]
    workers: int
    #: Threads or Ray for this run's units, chosen once as the run starts.
    executor: Executor = field(init=False)
    #: The run's figures (units run, seconds, Ray start-up), for the run report.
    report: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.executor = Executor.choose(self.opts.ray_address, self.workers)
