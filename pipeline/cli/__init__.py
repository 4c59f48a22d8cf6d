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
import sys

from rechain.pipeline import config
from rechain.pipeline.cli import bitcoin, ethereum, flow, tables
from rechain.pipeline.cli.common import Handler, add_memory_budget, parse_size
from rechain.pipeline.errors import RechainError

__all__ = ["add_memory_budget", "build_parser", "main", "parse_size"]

#: `rechain --help`'s description.
DESCRIPTION = """The ``rechain`` command line: generators, reindex/replay, status, queries.

CLI names, JSON fields and table columns are a contract (see README.md); keep them.
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rechain", description=DESCRIPTION)
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
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
    return p


def main(argv: list[str] | None = None) -> int:
    from rechain.workers.memory import bound_heap, report_peak_rss_at_exit

    # numpy's OpenBLAS, loaded with pyarrow, starts a thread per core that spins for about a
    # tenth of a CPU second once numpy is imported. rechain does no BLAS work, and its
    # processes (and a local Ray's workers, which inherit the environment) want those cores.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
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
    budget = getattr(args, "memory_budget", None)
    if budget is not None:
        bound_heap(int(budget))
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        handler: Handler = args.handler
        return handler(args)
    except RechainError as e:
        print(f"rechain: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("rechain: interrupted; committed work is kept, rerun to resume", file=sys.stderr)
        return 130
    except Exception as e:
        from rechain.pipeline.store.errors import storage_failure

        message = storage_failure(e, getattr(args, "data", None))
        if message is None:
            raise
        print(f"rechain: error: {message}", file=sys.stderr)
        return 2
