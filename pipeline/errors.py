"""Errors a user can act on: the CLI prints them as one line and exits non-zero."""

from __future__ import annotations


class RechainError(Exception):
    """A clear, user-facing failure (bad input, wrong network, busy data folder...)."""


class DataFolderBusy(RechainError):
    pass
