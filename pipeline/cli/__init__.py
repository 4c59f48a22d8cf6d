"""The ``rechain`` command line. This module assembles the parser from the command modules
(``bitcoin``, ``flow``, ``ethereum``: each chain's generator and commands; ``tables``: ``stages``,
``verify``, ``query``), applies ``--config`` and runs the chosen command's handler (each leaf
parser sets ``handler``); ``common`` holds what they share.

CLI names, JSON fields and table columns are a contract (see README.md); keep them.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys

from rechain.pipeline import config
from rechain.pipeline.cli import bitcoin, ethereum, flow, tables
from rechain.pipeline.cli.common import Handler, add_memory_budget, check_numbers, parse_size
from rechain.pipeline.errors import RechainError

__all__ = ["add_memory_budget", "build_parser", "main", "parse_size"]

#: `rechain --help`'s description.
DESCRIPTION = """The ``rechain`` command line: generators, reindex/replay, status, queries.

CLI names, JSON fields and table columns are a contract (see README.md); keep them.
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rechain", description=DESCRIPTION)
    p.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="-v: log what each stage does; -vv: debug logging",
    )
    p.add_argument(
        "-q", "--quiet", action="store_true", help="no progress bars and no warnings: errors only"
    )
    sub = p.add_subparsers(dest="command", required=True)

    gen = sub.add_parser("gen", help="generate test data").add_subparsers(
        dest="kind", required=True
    )
    bitcoin.add_gen(gen)
    ethereum.add_gen(gen)
    flow.add_gen(gen)

    flow.add_commands(sub)
    ethereum.add_commands(sub)
    bitcoin.add_commands(sub)
    tables.add_commands(sub)
    config.add_to_every_command(p)
    # -v and -q after the command too (`rechain btc reindex ... -q`); unset there, the
    # values given before the command stand.
    for leaf in config.leaf_parsers(p).values():
        leaf.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS)
        leaf.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS)
    return p


class Terminated(BaseException):
    """SIGTERM, raised where the main thread is, as SIGINT raises KeyboardInterrupt."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise Terminated


def main(argv: list[str] | None = None) -> int:
    """Runs one command. Expected conditions end in one line on stderr and an exit code: 2 for
    an error the user can act on, 130 (SIGINT) or 143 (SIGTERM) for an interrupt, 141 when
    the reader of stdout went away; only a bug prints a traceback."""
    try:
        return _main(argv)
    except BrokenPipeError:
        _stdout_gone()
        return 141


def _main(argv: list[str] | None) -> int:
    from rechain.pipeline.progress import ProgressAwareHandler
    from rechain.workers.memory import bound_heap, report_peak_rss_at_exit

    # numpy's OpenBLAS, loaded with pyarrow, starts a thread per core that spins for about a
    # tenth of a CPU second once numpy is imported. rechain does no BLAS work, and its
    # processes (and a local Ray's workers, which inherit the environment) want those cores.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    signal.signal(signal.SIGTERM, _on_sigterm)
    report_peak_rss_at_exit()
    bound_heap()
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        path = config.config_path(argv)
        if path is not None:
            config.apply(parser, path, argv)
    except RechainError as e:
        print(f"rechain: error: {e}", file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    if args.quiet and hasattr(args, "no_progress"):
        args.no_progress = True
    problems, warnings = check_numbers(args)
    for problem in problems:
        print(f"rechain: error: {problem}", file=sys.stderr)
    if problems:
        return 2
    for warning in [] if args.quiet else warnings:
        print(f"rechain: warning: {warning}", file=sys.stderr)
    budget = getattr(args, "memory_budget", None)
    if budget is not None:
        bound_heap(int(budget))
    handler_ = ProgressAwareHandler(sys.stderr)
    handler_.setFormatter(_LogFormat())
    level = {0: logging.WARNING, 1: logging.INFO}.get(args.verbose, logging.DEBUG)
    logging.basicConfig(level=logging.ERROR if args.quiet else level, handlers=[handler_])
    try:
        handler: Handler = args.handler
        return handler(args)
    except RechainError as e:
        print(f"rechain: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return _interrupted(130)
    except Terminated:
        return _interrupted(143)
    except BrokenPipeError:
        raise
    except Exception as e:
        # DuckDB turns a SIGINT during a query into its own error (InterruptException, or a
        # RuntimeError "Query interrupted" from a result being fetched).
        if "Interrupt" in type(e).__name__ or "query interrupted" in str(e).lower():
            return _interrupted(130)
        from rechain.pipeline.store.errors import storage_failure

        message = storage_failure(e, getattr(args, "data", None))
        if message is None:
            raise
        print(f"rechain: error: {message}", file=sys.stderr)
        return 2


class _LogFormat(logging.Formatter):
    """Warnings and errors read as the CLI's own messages; ``-v`` lines name their module."""

    def format(self, record: logging.LogRecord) -> str:
        if record.levelno >= logging.WARNING:
            return f"rechain: {record.levelname.lower()}: {record.getMessage()}"
        return f"{record.levelname} {record.name}: {record.getMessage()}"


def _interrupted(code: int) -> int:
    print("\nrechain: interrupted; committed work is kept, rerun to resume", file=sys.stderr)
    return code


def _stdout_gone() -> None:
    """stdout's reader closed it (``rechain query ... | head``): nothing more to say, and
    Python's flush of stdout at exit must not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
