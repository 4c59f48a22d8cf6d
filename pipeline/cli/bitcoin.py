"""Bitcoin's commands: `gen bitcoin` (a generated blocks/ folder) and `btc reindex`,
`btc export-core-index`, `btc status`, `btc dump-utxo`, `btc check-utxo`, `btc block`,
`btc tx`: their parsers and handlers.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rechain.pipeline.cli.common import (
    add_memory_budget,
    add_workers,
    options,
    parse_size,
    print_json,
)

if TYPE_CHECKING:
    from rechain.pipeline.cli.common import Subparsers


def add_gen(gen: Subparsers) -> None:
    """`gen bitcoin`."""
    g = gen.add_parser("bitcoin", help="a blocks/ folder laid out like a node's, + expected.json")
    g.add_argument("outdir", type=Path)
    g.add_argument("--blocks", type=int, required=True, help="best-chain length incl. genesis")
    g.add_argument("--network", default="regtest", choices=["regtest", "testnet", "signet", "main"])
    g.add_argument("--seed", type=int, default=1)
    g.add_argument(
        "--file-size",
        type=parse_size,
        default=134_217_728,
        help="maximum blk file size (default 128MiB, as Core)",
    )
    g.add_argument("--xor", dest="xor", action="store_true", default=True)
    g.add_argument("--no-xor", dest="xor", action="store_false")
    g.add_argument(
        "--shuffle-window",
        type=int,
        default=16,
        help="blocks arrive shuffled within windows of this many",
    )
    g.add_argument("--side-branches", type=int, default=0)
    g.add_argument("--orphans", type=int, default=0)
    g.add_argument(
        "--reorg",
        type=int,
        default=0,
        metavar="DEPTH",
        help="append last a branch forking DEPTH blocks below the tip, one block longer "
        "(a reorg; expected.json's reorg_records counts its records)",
    )
    g.add_argument(
        "--reorg-back",
        action="store_true",
        help="then two more blocks on the old chain, which wins again",
    )
    g.add_argument("--tx-per-block", default="1:1", metavar="MIN:MAX")
    g.add_argument(
        "--bad-signature",
        type=int,
        default=0,
        metavar="HEIGHT",
        help="damage for oracle tests: the first spend of the best-chain block at HEIGHT "
        "carries a wrong signature (a node checking scripts, and `btc reindex --scripts`, "
        "rejects the block)",
    )
    g.add_argument(
        "--bad-signature-branch",
        action="store_true",
        help="damage for oracle tests: the --reorg branch's first block carries a wrong "
        "signature, so a node checking scripts keeps the main chain (expected.json describes "
        "the chain a node that does not check them ends on)",
    )
    g.add_argument(
        "--bad-signature-kind",
        default=None,
        metavar="KIND",
        help="with --bad-signature or --bad-signature-branch: damage a spend of this kind (p2pkh, "
        "p2wpkh, p2tr, p2pk, multisig, p2sh-p2wpkh, p2wsh, p2tr-script; expected.json's "
        "bad_signature_kind names the kind damaged)",
    )
    g.add_argument(
        "--script-kinds",
        choices=("wallet", "all"),
        default="wallet",
        help="the outputs the generated wallet owns and signs spends of: wallet (P2PKH, P2WPKH, "
        "P2TR key path; the default chains) or all (adds P2PK, bare multisig, P2SH-wrapped "
        "P2WPKH, P2WSH multisig and P2TR script path)",
    )
    g.set_defaults(handler=gen_bitcoin)


def add_commands(sub: Subparsers) -> None:
    """`btc ...`."""
    btc = sub.add_parser("btc", help="Bitcoin block files").add_subparsers(
        dest="action", required=True
    )
    r = btc.add_parser("reindex", help="rebuild the block index from blk*.dat files")
    r.add_argument("--blocks", type=Path, required=True, help="the node's blocks/ folder")
    r.add_argument("--data", type=Path, required=True, help="rechain's data folder")
    r.add_argument(
        "--network",
        default=None,
        choices=["main", "testnet", "testnet4", "signet", "regtest"],
        help="the chain the blk files hold (default: the data folder's; main for a new one)",
    )
    add_workers(r, "parallel scan tasks (default: one per core)")
    r.add_argument(
        "--ray-address", default=None, help="join this Ray cluster instead of a local one"
    )
    add_memory_budget(r)
    r.add_argument("--metrics-port", type=int, default=None)
    r.add_argument(
        "--metrics-linger",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="keep serving metrics this long after the run (for a last scrape)",
    )
    r.add_argument("--no-progress", action="store_true")
    r.add_argument(
        "--shard-size", type=parse_size, default=None, help="bytes per scan shard (default 32M)"
    )
    r.add_argument(
        "--check-bodies",
        action="store_true",
        help="also frame and hash every block body (merkle root, witness commitment)",
    )
    r.add_argument(
        "--mode",
        choices=["headers", "full"],
        default=None,
        help="headers: block index only; full: every transaction, input and output to Parquet, "
        "consensus checks, UTXO set (default: the data folder's mode; headers for a new one)",
    )
    r.add_argument(
        "--scripts",
        dest="scripts",
        action="store_true",
        default=None,
        help="full mode: verify every input's script with Bitcoin Core's interpreter (the "
        "data folder remembers it; default: the folder's choice, off for a new one)",
    )
    r.add_argument("--no-scripts", dest="scripts", action="store_false")
    r.add_argument(
        "--assume-valid",
        default=None,
        metavar="HASH",
        help="with --scripts: skip the scripts of this block and its ancestors, as Core's "
        "-assumevalid does (0: check every script; default: the folder's, else 0)",
    )
    r.add_argument(
        "--core-index",
        type=Path,
        default=None,
        help="a Bitcoin Core blocks/index (LevelDB) whose block positions guide the scan",
    )
    r.add_argument(
        "--from-stage",
        default=None,
        metavar="NAME",
        help="rerun the pipeline from this stage on (scan, link, bodies, chain_state, "
        "scripts, publish, indexes), whatever the checkpoints say",
    )
    r.add_argument("--json", action="store_true", help="print the result as JSON")
    r.set_defaults(handler=reindex)

    x = btc.add_parser("export-core-index", help="write the block index in Bitcoin Core's format")
    x.add_argument("--data", type=Path, required=True)
    x.add_argument("--out", type=Path, required=True, help="a new LevelDB folder")
    x.add_argument("--json", action="store_true")
    x.set_defaults(handler=export_core_index)

    s = btc.add_parser("status", help="summary of a data folder's block index")
    s.add_argument("--data", type=Path, required=True)
    s.add_argument("--json", action="store_true")
    s.set_defaults(handler=status)

    d = btc.add_parser(
        "dump-utxo",
        help="the UTXO set at a height of the best chain, in Core's snapshot format",
    )
    d.add_argument("--data", type=Path, required=True)
    d.add_argument("--height", type=int, default=None, help="default: the applied tip")
    d.add_argument(
        "--out", type=Path, default=None,
        help="the snapshot file (core) or table folder (parquet) to write; none: figures only",
    )  # fmt: skip
    d.add_argument(
        "--format", choices=("core", "parquet"), default="core",
        help="core: Bitcoin Core's dumptxoutset format; parquet: the utxo table",
    )  # fmt: skip
    add_memory_budget(d, help="bytes held for the blocks rewound (spilled to disk past it)")
    d.add_argument(
        "--workers", type=int, default=1, metavar="N",
        help="split the set into txid ranges over N parallel tasks (default 1)",
    )  # fmt: skip
    d.add_argument(
        "--ray-address", default=None,
        help="run the ranges as tasks of this Ray cluster (every node must see --data at the "
        "same path)",
    )  # fmt: skip
    d.add_argument("--json", action="store_true")
    d.set_defaults(handler=dump_utxo)

    c = btc.add_parser("check-utxo", help="read a UTXO snapshot in Core's format and check it")
    c.add_argument("file", type=Path)
    c.add_argument("--data", type=Path, default=None, help="compare with this data folder's set")
    add_memory_budget(c)
    c.add_argument("--json", action="store_true")
    c.set_defaults(handler=check_utxo)

    b = btc.add_parser("block", help="one block from the index")
    b.add_argument("--data", type=Path, required=True)
    grp = b.add_mutually_exclusive_group(required=True)
    grp.add_argument("--height", type=int)
    grp.add_argument("--hash")
    b.add_argument("--json", action="store_true")
    b.set_defaults(handler=block)

    tx = btc.add_parser("tx", help="one transaction (needs a --mode full reindex)")
    tx.add_argument("--data", type=Path, required=True)
    tx.add_argument("txid")
    tx.add_argument("--json", action="store_true")
    tx.set_defaults(handler=transaction)


def gen_bitcoin(args: argparse.Namespace) -> int:
    from rechain.pipeline.bitcoin.gen import generate

    facts = generate(
        args.outdir,
        blocks=args.blocks,
        network=args.network,
        seed=args.seed,
        file_size=args.file_size,
        xor=args.xor,
        shuffle_window=args.shuffle_window,
        side_branches=args.side_branches,
        orphans=args.orphans,
        tx_per_block=args.tx_per_block,
        reorg_depth=args.reorg,
        reorg_back=args.reorg_back,
        bad_signature=args.bad_signature,
        bad_signature_branch=args.bad_signature_branch,
        bad_signature_kind=args.bad_signature_kind,
        script_kinds=args.script_kinds,
    )
    print(
        f"wrote {facts['records']:,} blocks in {facts['files']} file(s) to "
        f"{args.outdir / 'blocks'}; tip {facts['tip_hash']} at height {facts['tip_height']}"
    )
    return 0


def reindex(args: argparse.Namespace) -> int:
    from rechain.pipeline import metrics
    from rechain.pipeline.bitcoin.reindex import ReindexOptions, run

    metrics.serve(args.metrics_port)
    # --shard-size unset (or 0) keeps ReindexOptions' default shard size.
    shard = {"shard_bytes": args.shard_size} if args.shard_size else {}
    result = run(options(ReindexOptions, args, **shard))
    if args.metrics_port and args.metrics_linger > 0:
        import time

        time.sleep(args.metrics_linger)
    if args.json:
        print_json(result)
    else:
        run_ = result["run"]
        print(
            f"indexed {result['blocks_indexed']:,} blocks; tip {result['tip_hash']} "
            f"at height {result['tip_height']}; {run_['records_scanned']:,} records "
            f"scanned in {run_['total_s']:.2f}s"
        )
    return 0


def export_core_index(args: argparse.Namespace) -> int:
    from rechain.pipeline.bitcoin.core_index import export

    res = export(args.data, args.out)
    if args.json:
        print_json(res)
    else:
        print(
            f"wrote {res['block_records']:,} block records ({res['with_data']:,} with data) "
            f"and {res['file_records']} file records to {res['out']} in {res['total_s']:.2f}s"
        )
    for warning in res["warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    return 0


def status(args: argparse.Namespace) -> int:
    from rechain.pipeline.bitcoin import status as btc_status

    st = btc_status.status(args.data)
    print_json(st) if args.json else print(btc_status.format_status(st))
    return 1 if st["problems"] else 0


def _set_rows(res: dict[str, Any]) -> str:
    from rechain.pipeline.human import rows

    height = "" if res["height"] is None else f" (height {res['height']})"
    chain_tx = res["chain_tx_count"]
    return rows(
        {
            "block": f"{res['block_hash']}{height}",
            "coins": f"{res['coins']:,}",
            "total amount": f"{res['total_amount']:,} sat",
            "chain tx count": "-" if chain_tx is None else f"{chain_tx:,}",
            "hash_serialized_3": res["hash_serialized_3"],
            "muhash": res["muhash"],
        }
    )


def dump_utxo(args: argparse.Namespace) -> int:
    from rechain.pipeline.bitcoin.utxo_snapshot import set_at

    res = set_at(
        args.data,
        args.height,
        memory_budget=args.memory_budget,
        snapshot=args.out,
        fmt=args.format,
        workers=args.workers,
        ray_address=args.ray_address,
    )
    if args.json:
        print_json(res)
    else:
        print(_set_rows(res))
        if res["out"]:
            print(f"wrote {res['coins']:,} coins to {res['out']} in {res['seconds']:.2f}s")
    return 0


def check_utxo(args: argparse.Namespace) -> int:
    from rechain.pipeline.bitcoin.utxo_snapshot import check

    res = check(args.file, args.data, memory_budget=args.memory_budget)
    if args.json:
        print_json(res)
    else:
        print(_set_rows(res))
        if args.data is not None:
            same = res["matches"]
            print("equals the data folder's set" if same else "differs from the data folder's set:")
            for line in res["mismatch"]:
                print(f"  {line}")
    return 0 if res.get("matches", True) else 1


def block(args: argparse.Namespace) -> int:
    from rechain.pipeline.bitcoin import status as btc_status

    blk = btc_status.block(args.data, height=args.height, hash_=args.hash)
    print_json(blk) if args.json else print(btc_status.format_block(blk))
    return 0


def transaction(args: argparse.Namespace) -> int:
    from rechain.pipeline.bitcoin import status as btc_status
    from rechain.pipeline.bitcoin.tx import lookup_tx
    from rechain.pipeline.store.datadir import DataDir

    with DataDir(args.data, readonly=True) as data:
        found = lookup_tx(data, args.txid.lower())
    if args.json:
        print_json(found)
    else:
        print(btc_status.format_block({k: v for k, v in found.items()}))
    return 0
