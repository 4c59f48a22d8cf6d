"""Storage failures a user can fix (full disk, read-only or unwritable folder), told in one line.

RocksDB reports them as plain exceptions carrying its status text, Parquet and the file system
as ``OSError``; either may arrive wrapped in another exception. Everything committed before the
failure stays usable: RocksDB's write-ahead log recovers up to the last whole write batch and a
Parquet generation is only published once complete, so rerunning after freeing space resumes.
"""

from __future__ import annotations

import errno
from pathlib import Path

#: errno -> (words RocksDB uses in its status text, what the user is told).
_KNOWN = {
    errno.ENOSPC: ("no space left on device", "no space left on the device"),
    errno.EDQUOT: ("disk quota exceeded", "disk quota exceeded"),
    errno.EROFS: ("read-only file system", "the file system is read-only"),
    errno.EACCES: ("permission denied", "permission denied"),
}


def _causes(error: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    e: BaseException | None = error
    while e is not None and all(e is not s for s in seen):
        seen.append(e)
        e = e.__cause__ or e.__context__
    return seen


def storage_failure(error: BaseException, data: Path | str | None) -> str | None:
    """A one-line message for a storage failure under ``data``, or None for anything else."""
    for e in _causes(error):
        code = getattr(e, "errno", None) if isinstance(e, OSError) else None
        text = str(e).lower()
        for known, (words, told) in _KNOWN.items():
            if code == known or words in text:
                if known == errno.EACCES and data is not None and str(data).lower() not in text:
                    continue  # permission trouble elsewhere (e.g. the blocks folder)
                folder = f"data folder {data}" if data is not None else "the data folder"
                hint = (
                    "free space or move it to a bigger disk, then rerun to resume"
                    if known in (errno.ENOSPC, errno.EDQUOT)
                    else "make it writable or choose another --data"
                )
                return f"{folder}: {told} ({_first_line(e)}); committed work is kept; {hint}"
    return None


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__
