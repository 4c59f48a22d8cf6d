"""Type hints for result classes of the Rust core (`rechain.workers._native`, which has no
stubs): each is a frozen class with a read-only attribute per field and `as_dict()` (the
fields as a dict, nested results as dicts) for the places that write a result as JSON or merge
it into a report. Only the classes Python code annotates are described here."""

from __future__ import annotations

from typing import Any, Protocol


class NativeResult(Protocol):
    def as_dict(self) -> dict[str, Any]: ...


class IndexEntry(NativeResult, Protocol):
    """One block of the block index (`decode_index_value`)."""

    @property
    def hash(self) -> str: ...
    @property
    def prev_hash(self) -> str: ...
    @property
    def height(self) -> int | None: ...
    @property
    def status(self) -> str: ...
    @property
    def in_best_chain(self) -> bool: ...
    @property
    def chainwork(self) -> str | None: ...
    @property
    def file(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def n_tx(self) -> int | None: ...
