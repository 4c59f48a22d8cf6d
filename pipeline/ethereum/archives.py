"""The networks rechain knows and the history archives of a folder: era1 files (pre-merge) and
Ere files (across the merge), alone or mixed, by name. Import plans its units from here,
export reads its source's files in block order from here.

Names: ``<network>-<epoch:05>-<accumulator root[0..4]>.era1`` and
``<network>-<epoch:05>-<last block hash[0..4]>[-noproofs][-noreceipts].ere`` (the network name
has no dash: geth splits names on it).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from pathlib import Path

from rechain.pipeline.errors import RechainError
from rechain.workers import _native

#: The chain configurations of ``eth::chain_config`` (``devmerge``: ``dev`` through the merge,
#: Shanghai, Cancun and Prague).
NETWORKS = ("mainnet", "sepolia", "dev", "devmerge")

ERA1_NAME = re.compile(r"^(?P<network>[a-z0-9]+)-(?P<epoch>\d{5,})-(?P<tag>[0-9a-f]{8})\.era1$")
ERE_NAME = re.compile(
    r"^(?P<network>[a-z0-9]+)-(?P<epoch>\d{5,})-(?P<tag>[0-9a-f]{8})"
    r"(?P<profiles>(-noproofs)?(-noreceipts)?)\.ere$"
)
#: Blocks per archive file (``era.MaxSize``).
FILE_BLOCKS = 8192


@dataclass(frozen=True)
class Archive:
    path: Path
    #: "era1" or "ere".
    kind: str
    network: str
    epoch: int
    #: Blocks ``first..end`` (era1: the epoch; Ere: its index, which may start mid-epoch).
    first: int
    end: int


def parse(path: Path) -> Archive | None:
    """The archive a file name names, or None for a file of neither format."""
    m = ERA1_NAME.match(path.name)
    if m is not None:
        epoch = int(m["epoch"])
        first = epoch * FILE_BLOCKS
        return Archive(path, "era1", m["network"], epoch, first, first + FILE_BLOCKS)
    m = ERE_NAME.match(path.name)
    if m is not None:
        try:
            first, end = _native.eth_ere_extent(str(path))
        except ValueError:
            # Unreadable: its unit reports why; it claims its epoch's blocks meanwhile.
            first = int(m["epoch"]) * FILE_BLOCKS
            end = first + FILE_BLOCKS
        return Archive(path, "ere", m["network"], int(m["epoch"]), first, end)
    return None


def scan(folder: Path, network: str | None = None) -> list[Archive]:
    """The era1 and Ere files of ``folder`` in block order (of ``network``, when given: a file
    of another network is refused, as is a file with a history suffix but not an archive's
    name, or two files for the same blocks)."""
    if not folder.is_dir():
        raise RechainError(f"{folder}: folder not found")
    found: list[Archive] = []
    for path in sorted(folder.iterdir()):
        if path.suffix not in (".era1", ".ere"):
            continue
        a = parse(path)
        if a is None:
            raise RechainError(
                f"{path}: not an archive name (<network>-<epoch>-<hex8>.era1, "
                "<network>-<epoch>-<hex8>[-noproofs][-noreceipts].ere)"
            )
        if network is not None and a.network != network:
            raise RechainError(
                f"{path.name} is a {a.network} file; this import is --network {network}"
            )
        found.append(a)
    found.sort(key=lambda a: (a.first, a.end))
    for prev, cur in itertools.pairwise(found):
        if cur.first < prev.end:
            raise RechainError(f"{prev.path.name} and {cur.path.name} hold the same blocks")
    if not found:
        raise RechainError(f"{folder}: no .era1 or .ere files")
    return found


def folder_network(folder: Path) -> str | None:
    """The one network a folder's archive names carry, if exactly one."""
    if not folder.is_dir():
        return None
    names = set()
    for p in folder.iterdir():
        m = ERA1_NAME.match(p.name) or ERE_NAME.match(p.name)
        if m is not None:
            names.add(m["network"])
    return names.pop() if len(names) == 1 else None
