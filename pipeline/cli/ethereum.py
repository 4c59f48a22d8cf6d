"""Ethereum's commands: `gen eth` (a generated chain as era1 or Ere files or a geth freezer)
and `eth import`, `eth export-era1`, `eth export-ere`, `eth status`: their parsers, handlers
and text output.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rechain.pipeline.cli.common import (
    add_memory_budget,
    add_workers,
    options,
    parse_size,
    print_json,
)
from rechain.pipeline.ethereum import archives
from rechain.pipeline.ethereum import gen as eth_gen
from rechain.pipeline.ethereum.export import ERE_PROFILES

if TYPE_CHECKING:
    from rechain.pipeline.cli.common import Subparsers


def add_gen(gen: Subparsers) -> None:
    """`gen eth`."""
    ge = gen.add_parser(
        "eth",
        help="an Ethereum chain from genesis as era1 or Ere files or a geth freezer, "
        "+ expected.json",
    )
    ge.add_argument("outdir", type=Path)
    ge.add_argument("--blocks", type=int, required=True, help="chain length incl. genesis")
    ge.add_argument("--format", dest="eth_format", default="era1", choices=list(eth_gen.FORMATS))
    ge.add_argument(
        "--network",
        default="mainnet",
        choices=list(archives.NETWORKS),
        help="devmerge: dev through the merge, Shanghai, Cancun and Prague (use with ere)",
    )
    ge.add_argument(
        "--ere-profile",
        default="noproofs",
        choices=list(ERE_PROFILES),
        help="format ere: noproofs (geth's), noreceipts, full (proofs: pre-merge blocks only)",
    )
    ge.add_argument("--seed", type=int, default=1)
    ge.add_argument("--tx-per-block", default="0:4", metavar="MIN:MAX")
    ge.add_argument(
        "--freezer-version",
        default="current",
        choices=["current", "v1.15", "v1.10"],
        help="freezer layout of that geth release (v1.10: .meta v1 and the diffs table)",
    )
    ge.add_argument(
        "--max-file-size",
        type=parse_size,
        default=2_000_000_000,
        help="freezer data file size limit (default 2000000000, as geth)",
    )
    ge.set_defaults(handler=gen_eth)


def add_commands(sub: Subparsers) -> None:
    """`eth import`, `eth export-era1`, `eth status`."""
    eth = sub.add_parser("eth", help="Ethereum history (era1 and Ere archives, geth's freezer)")
    eth_sub = eth.add_subparsers(dest="action", required=True)
    ei = eth_sub.add_parser("import", help="import era1 or Ere files or a geth freezer, checked")
    src = ei.add_mutually_exclusive_group(required=True)
    src.add_argument("--era1", type=Path, help="folder of .era1 files (.ere files too)")
    src.add_argument("--ere", type=Path, help="folder of .ere files (.era1 files too)")
    src.add_argument("--freezer", type=Path, help="geth's ancient folder (or its chain/)")
    ei.add_argument("--data", type=Path, required=True)
    ei.add_argument(
        "--network",
        default=None,
        choices=list(archives.NETWORKS),
        help="default: the data folder's, else the archive names', else mainnet",
    )
    add_workers(ei)
    ei.add_argument("--ray-address", default=None)
    ei.add_argument("--from", dest="first", type=int, default=None, metavar="N")
    ei.add_argument("--to", dest="last", type=int, default=None, metavar="M", help="inclusive")
    add_memory_budget(ei)
    ei.add_argument("--metrics-port", type=int, default=None)
    ei.add_argument("--no-progress", action="store_true")
    ei.add_argument("--json", action="store_true")
    ei.add_argument(
        "--no-pow",
        action="store_true",
        help="skip the ethash check only (generated chains carry no real proof of work)",
    )
    ei.add_argument(
        "--from-stage", default=None, metavar="NAME", help="rerun from this stage (blocks)"
    )
    ei.set_defaults(handler=import_)
    ex = eth_sub.add_parser("export-era1", help="era1 files of an imported chain, as geth's")
    ex.add_argument("--data", type=Path, required=True)
    ex.add_argument("--out", type=Path, required=True)
    ex.add_argument("--from", dest="first", type=int, default=None, metavar="N")
    ex.add_argument("--to", dest="last", type=int, default=None, metavar="M", help="inclusive")
    ex.add_argument("--json", action="store_true")
    ex.set_defaults(handler=export_era1)
    xe = eth_sub.add_parser("export-ere", help="Ere files of an imported chain, as geth's")
    xe.add_argument("--data", type=Path, required=True)
    xe.add_argument("--out", type=Path, required=True)
    xe.add_argument("--from", dest="first", type=int, default=None, metavar="N")
    xe.add_argument("--to", dest="last", type=int, default=None, metavar="M", help="inclusive")
    xe.add_argument(
        "--profile",
        default="noproofs",
        choices=list(ERE_PROFILES),
        help="noproofs (geth's), noreceipts, full (a source's proofs; built for pre-merge ones)",
    )
    xe.add_argument("--json", action="store_true")
    xe.set_defaults(handler=export_ere)
    es = eth_sub.add_parser("status", help="summary of a data folder's Ethereum import")
    es.add_argument("--data", type=Path, required=True)
    es.add_argument("--json", action="store_true")
    es.set_defaults(handler=status)


def gen_eth(args: argparse.Namespace) -> int:
    efacts = eth_gen.generate(
        args.outdir,
        blocks=args.blocks,
        fmt=args.eth_format,
        network=args.network,
        seed=args.seed,
        tx_per_block=args.tx_per_block,
        freezer_version=args.freezer_version,
        max_file_size=args.max_file_size,
        ere_profile=args.ere_profile,
    )
    print(
        f"wrote {efacts['blocks']:,} {args.network} blocks ({efacts['transactions']:,} txs) "
        f"as {args.eth_format} to {eth_gen.output_dir(args.outdir, args.eth_format)}; "
        f"tip {efacts['tip_hash']} at {efacts['tip_number']}, TD {efacts['final_td']}"
    )
    return 0


def import_(args: argparse.Namespace) -> int:
    from rechain.pipeline import metrics
    from rechain.pipeline.ethereum import importer as eth_import

    metrics.serve(args.metrics_port)
    result = eth_import.run(options(eth_import.ImportOptions, args))
    if args.json:
        print_json(result)
    else:
        print(format_eth(result))
    return 0 if result["failed"] == 0 else 1


def export_era1(args: argparse.Namespace) -> int:
    from rechain.pipeline.ethereum import export

    res = export.export_era1(args.data, args.out, args.first, args.last)
    if args.json:
        print_json(res)
    else:
        print(f"wrote {res['blocks']:,} blocks in {len(res['files'])} era1 file(s) to {res['out']}")
    return 0


def export_ere(args: argparse.Namespace) -> int:
    from rechain.pipeline.ethereum import export

    res = export.export_ere(args.data, args.out, args.first, args.last, args.profile)
    if args.json:
        print_json(res)
    else:
        print(
            f"wrote {res['blocks']:,} blocks in {len(res['files'])} Ere file(s) "
            f"({res['profile']}) to {res['out']}"
        )
    return 0


def status(args: argparse.Namespace) -> int:
    from rechain.pipeline.ethereum import importer as eth_import

    st = eth_import.status(args.data)
    print_json(st) if args.json else print(format_eth(st))
    return 0


def format_eth(st: dict[str, Any]) -> str:
    """An import's result or status as text."""
    lines = [
        f"{st['network']} {st['kind']} {st['source']}",
        f"blocks {st['blocks']:,} ({st['first_block']}..{st['last_block']}); "
        f"tip {st['tip_hash']}; TD {st['total_difficulty']}",
        "rows " + ", ".join(f"{k} {v:,}" for k, v in sorted(st["counts"].items())),
        "checks "
        + ", ".join(f"{k} {v:,}" for k, v in st["checks"].items())
        + f"; failed {st['failed']:,}",
    ]
    for v in st["verdicts"][:20]:
        lines.append(f"  {v['source']} block {v['block']}: {v['rule']}: {v['detail']}")
    return "\n".join(lines)
