"""The ``rechain`` command line: generators, reindex/replay, status, queries.

CLI names, JSON fields and table columns are a contract (see README.md); keep them.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
from pathlib import Path
from typing import Any

from rechain.pipeline import config
from rechain.pipeline.errors import RechainError
from rechain.workers.memory import DEFAULT_MEMORY_BUDGET

SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """'512M', '2GiB', '1g', '1048576' → bytes (binary units)."""
    m = SIZE.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 512M, 2G)")
    unit = (m.group(2) or "").lower()[:1]
    return int(float(m.group(1)) * UNITS[unit])


def add_memory_budget(p: argparse.ArgumentParser, help: str | None = None) -> None:
    """`--memory-budget SIZE` (default `DEFAULT_MEMORY_BUDGET`), as every command takes it."""
    p.add_argument("--memory-budget", type=parse_size, default=DEFAULT_MEMORY_BUDGET, help=help)


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, sort_keys=False))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rechain", description=__doc__)
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", required=True)

    gen = sub.add_parser("gen", help="generate test data").add_subparsers(
        dest="kind", required=True
    )
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
        "carries a wrong signature (a node checking scripts rejects the block; rechain does "
        "not check scripts)",
    )

    ge = gen.add_parser(
        "eth",
        help="an Ethereum chain from genesis as era1 files or a geth freezer, + expected.json",
    )
    ge.add_argument("outdir", type=Path)
    ge.add_argument("--blocks", type=int, required=True, help="chain length incl. genesis")
    ge.add_argument("--format", dest="eth_format", default="era1", choices=["era1", "freezer"])
    ge.add_argument("--network", default="mainnet", choices=["mainnet", "sepolia", "dev"])
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

    gf = gen.add_parser("flow", help="a Flow LedgerWAL (segments 00000000, ...) + expected.json")
    gf.add_argument("outdir", type=Path)
    gf.add_argument("--updates", type=int, required=True)
    gf.add_argument("--registers-per-update", type=int, required=True)
    gf.add_argument("--seed", type=int, default=1)
    gf.add_argument("--segment-size", type=parse_size, default=32 << 20)

    flow = sub.add_parser("flow", help="Flow execution ledger").add_subparsers(
        dest="action", required=True
    )
    fr = flow.add_parser("replay", help="replay a LedgerWAL into the data folder")
    fr.add_argument("--wal", type=Path, required=True)
    fr.add_argument("--data", type=Path, required=True)
    fr.add_argument("--workers", type=int, default=0)
    fr.add_argument("--ray-address", default=None)
    add_memory_budget(fr)
    fr.add_argument("--metrics-port", type=int, default=None)
    fr.add_argument("--no-progress", action="store_true")
    fr.add_argument("--json", action="store_true")
    fr.add_argument(
        "--checkpoint", type=Path, default=None, help="resume from its latest checkpoint"
    )
    fr.add_argument(
        "--trust-hashes",
        action="store_true",
        help="resuming, take the checkpoint's stored node hashes as flow-go does (roots checked)",
    )
    fr.add_argument("--checkpoint-every", type=int, default=0, metavar="N")
    fr.add_argument("--checkpoint-dir", type=Path, default=None, help="default: the WAL folder")
    fr.add_argument(
        "--from-stage",
        default=None,
        metavar="NAME",
        help="rerun from this stage on (replay, publish), whatever the checkpoints say",
    )
    from rechain.pipeline.flow import checkpoint as flow_checkpoint

    flow_checkpoint.add_cli(flow)
    fst = flow.add_parser("status", help="summary of a data folder's Flow state")
    fst.add_argument("--data", type=Path, required=True)
    fst.add_argument("--json", action="store_true")

    eth = sub.add_parser("eth", help="Ethereum history (era1 archives, geth's freezer)")
    eth_sub = eth.add_subparsers(dest="action", required=True)
    ei = eth_sub.add_parser("import", help="import era1 files or a geth freezer, checked")
    src = ei.add_mutually_exclusive_group(required=True)
    src.add_argument("--era1", type=Path, help="folder of .era1 files")
    src.add_argument("--freezer", type=Path, help="geth's ancient folder (or its chain/)")
    ei.add_argument("--data", type=Path, required=True)
    ei.add_argument("--network", default="mainnet", choices=["mainnet", "sepolia", "dev"])
    ei.add_argument("--workers", type=int, default=0)
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
    ex = eth_sub.add_parser("export-era1", help="era1 files of an imported chain, as geth's")
    ex.add_argument("--data", type=Path, required=True)
    ex.add_argument("--out", type=Path, required=True)
    ex.add_argument("--from", dest="first", type=int, default=None, metavar="N")
    ex.add_argument("--to", dest="last", type=int, default=None, metavar="M", help="inclusive")
    ex.add_argument("--json", action="store_true")
    es = eth_sub.add_parser("status", help="summary of a data folder's Ethereum import")
    es.add_argument("--data", type=Path, required=True)
    es.add_argument("--json", action="store_true")

    btc = sub.add_parser("btc", help="Bitcoin block files").add_subparsers(
        dest="action", required=True
    )
    r = btc.add_parser("reindex", help="rebuild the block index from blk*.dat files")
    r.add_argument("--blocks", type=Path, required=True, help="the node's blocks/ folder")
    r.add_argument("--data", type=Path, required=True, help="rechain's data folder")
    r.add_argument(
        "--network", default="main", choices=["main", "testnet", "testnet4", "signet", "regtest"]
    )
    r.add_argument("--workers", type=int, default=0, help="parallel scan tasks (default: cores)")
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
        default="headers",
        help="headers: block index only (default); full: every transaction, input and output "
        "to Parquet, consensus checks, UTXO set",
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
        "publish, indexes), whatever the checkpoints say",
    )
    r.add_argument("--json", action="store_true", help="print the result as JSON")
    x = btc.add_parser("export-core-index", help="write the block index in Bitcoin Core's format")
    x.add_argument("--data", type=Path, required=True)
    x.add_argument("--out", type=Path, required=True, help="a new LevelDB folder")
    x.add_argument("--json", action="store_true")

    s = btc.add_parser("status", help="summary of a data folder's block index")
    s.add_argument("--data", type=Path, required=True)
    s.add_argument("--json", action="store_true")

    b = btc.add_parser("block", help="one block from the index")
    b.add_argument("--data", type=Path, required=True)
    grp = b.add_mutually_exclusive_group(required=True)
    grp.add_argument("--height", type=int)
    grp.add_argument("--hash")
    b.add_argument("--json", action="store_true")

    tx = btc.add_parser("tx", help="one transaction (needs a --mode full reindex)")
    tx.add_argument("--data", type=Path, required=True)
    tx.add_argument("txid")
    tx.add_argument("--json", action="store_true")

    st = sub.add_parser("stages", help="each pipeline stage's checkpoint in a data folder")
    st.add_argument("--data", type=Path, required=True)
    st.add_argument("--json", action="store_true")

    v = sub.add_parser("verify", help="check RocksDB, Parquet and manifest agree; print a digest")
    v.add_argument("--data", type=Path, required=True)
    v.add_argument("--json", action="store_true")

    q = sub.add_parser("query", help="SQL (DuckDB) over the Parquet tables")
    q.add_argument("--data", type=Path, required=True)
    q.add_argument("sql")
    q.add_argument("--format", default="table", choices=["table", "csv", "json"])
    config.add_to_every_command(p)
    return p


def dispatch(args: argparse.Namespace) -> int:
    if args.command == "gen" and args.kind == "flow":
        from rechain.workers import _native

        if args.updates < 1 or args.registers_per_update < 1:
            raise RechainError("--updates and --registers-per-update must be at least 1")
        args.outdir.mkdir(parents=True, exist_ok=True)
        facts = dict(
            _native.flow_generate(
                str(args.outdir),
                args.updates,
                args.registers_per_update,
                args.seed,
                args.segment_size,
            )
        )
        roots = facts.pop("roots")
        (args.outdir / "expected.json").write_text(json.dumps(facts, indent=1, sort_keys=True))
        (args.outdir / "roots.txt").write_text("\n".join(roots) + "\n")
        print(
            f"wrote {facts['updates']:,} updates in {facts['segments']} segment(s) to "
            f"{args.outdir}; final root {facts['final_root']}"
        )
        return 0
    if args.command == "flow":
        from rechain.pipeline.flow import replay as flow_replay

        if args.action == "checkpoint":
            from rechain.pipeline.flow import checkpoint as flow_checkpoint

            cp_result = flow_checkpoint.dispatch(args)
            if args.json:
                _print_json(cp_result)
            return 0
        if args.action == "replay":
            from rechain.pipeline import metrics

            metrics.serve(args.metrics_port)
            result = flow_replay.run(
                flow_replay.ReplayOptions(
                    wal=args.wal,
                    data=args.data,
                    workers=args.workers,
                    ray_address=args.ray_address,
                    memory_budget=args.memory_budget,
                    progress=not args.no_progress,
                    checkpoint=args.checkpoint,
                    trust_hashes=args.trust_hashes,
                    checkpoint_every=args.checkpoint_every,
                    checkpoint_dir=args.checkpoint_dir,
                    from_stage=args.from_stage,
                )
            )
            if args.json:
                _print_json(result)
            else:
                print(
                    f"replayed {result['updates_applied']:,} updates from "
                    f"{result['segments']} segment(s); root {result['root']}; "
                    f"{result['registers']:,} registers; {len(result['skipped'])} skipped"
                )
            return (
                0
                if not result["skipped"]
                or all(s["reason"] == "torn_record" for s in result["skipped"])
                else 1
            )
        st = flow_replay.status(args.data)
        if args.json:
            _print_json(st)
        else:
            for k in ("root", "updates_applied", "registers", "segments"):
                print(f"{k.ljust(16)} {st[k]}")
            for s in st["skipped"]:
                print(f"  skip {s['segment']}@{s['offset']}: {s['reason']} {s.get('detail') or ''}")
        return 0
    if args.command == "gen" and args.kind == "eth":
        from rechain.pipeline.ethereum import gen as eth_gen

        efacts = eth_gen.generate(
            args.outdir,
            blocks=args.blocks,
            fmt=args.eth_format,
            network=args.network,
            seed=args.seed,
            tx_per_block=args.tx_per_block,
            freezer_version=args.freezer_version,
            max_file_size=args.max_file_size,
        )
        print(
            f"wrote {efacts['blocks']:,} {args.network} blocks ({efacts['transactions']:,} txs) "
            f"as {args.eth_format} to {eth_gen.output_dir(args.outdir, args.eth_format)}; "
            f"tip {efacts['tip_hash']} at {efacts['tip_number']}, TD {efacts['final_td']}"
        )
        return 0
    if args.command == "eth":
        return _eth(args)
    if args.command == "gen":
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
        )
        print(
            f"wrote {facts['records']:,} blocks in {facts['files']} file(s) to "
            f"{args.outdir / 'blocks'}; tip {facts['tip_hash']} at height {facts['tip_height']}"
        )
        return 0
    if args.command == "btc":
        from rechain.pipeline.bitcoin import status as btc_status

        if args.action == "reindex":
            from rechain.pipeline import metrics
            from rechain.pipeline.bitcoin.reindex import ReindexOptions, run

            metrics.serve(args.metrics_port)
            opts = ReindexOptions(
                blocks=args.blocks,
                data=args.data,
                network=args.network,
                workers=args.workers,
                ray_address=args.ray_address,
                memory_budget=args.memory_budget,
                progress=not args.no_progress,
                check_bodies=args.check_bodies,
                mode=args.mode,
                core_index=args.core_index,
                from_stage=args.from_stage,
            )
            if args.shard_size:
                opts.shard_bytes = args.shard_size
            result = run(opts)
            if args.metrics_port and args.metrics_linger > 0:
                import time

                time.sleep(args.metrics_linger)
            if args.json:
                _print_json(result)
            else:
                run_ = result["run"]
                print(
                    f"indexed {result['blocks_indexed']:,} blocks; tip {result['tip_hash']} "
                    f"at height {result['tip_height']}; {run_['records_scanned']:,} records "
                    f"scanned in {run_['total_s']:.2f}s"
                )
            return 0
        if args.action == "export-core-index":
            from rechain.pipeline.bitcoin.core_index import export

            res = export(args.data, args.out)
            _print_json(res) if args.json else print(
                f"wrote {res['block_records']:,} block records ({res['with_data']:,} with data) "
                f"and {res['file_records']} file records to {res['out']} in {res['total_s']:.2f}s"
            )
            for warning in res["warnings"]:
                print(f"warning: {warning}", file=sys.stderr)
            return 0
        if args.action == "status":
            st = btc_status.status(args.data)
            _print_json(st) if args.json else print(btc_status.format_status(st))
            return 0
        if args.action == "tx":
            from rechain.pipeline.bitcoin.tx import lookup_tx
            from rechain.pipeline.store.datadir import DataDir

            with DataDir(args.data, readonly=True) as data:
                found = lookup_tx(data, args.txid.lower())
            if args.json:
                _print_json(found)
            else:
                print(btc_status.format_block({k: v for k, v in found.items()}))
            return 0
        if args.action == "block":
            blk = btc_status.block(args.data, height=args.height, hash_=args.hash)
            _print_json(blk) if args.json else print(btc_status.format_block(blk))
            return 0
    if args.command == "stages":
        from rechain.pipeline.stage_report import format_stages, stage_report

        report = stage_report(args.data)
        _print_json(report) if args.json else print(format_stages(report))
        return 0
    if args.command == "verify":
        from rechain.pipeline.verify import verify

        result = verify(args.data)
        if args.json:
            _print_json(result)
        else:
            print(
                ("OK" if result["ok"] else "MISMATCH") + f"  digest {result['digest']['content']}"
            )
            for p in result["problems"]:
                print(f"  {p}")
        return 0 if result["ok"] else 1
    if args.command == "query":
        from rechain.pipeline.query import render, run_query

        cols, rows = run_query(args.data, args.sql)
        print(render(cols, rows, args.format))
        return 0
    raise RechainError(f"unknown command {args.command}")


def _eth(args: argparse.Namespace) -> int:
    from rechain.pipeline.ethereum import importer as eth_import

    if args.action == "import":
        from rechain.pipeline import metrics

        metrics.serve(args.metrics_port)
        result = eth_import.run(
            eth_import.ImportOptions(
                data=args.data,
                era1=args.era1,
                freezer=args.freezer,
                network=args.network,
                workers=args.workers,
                ray_address=args.ray_address,
                first=args.first,
                last=args.last,
                memory_budget=args.memory_budget,
                progress=not args.no_progress,
                pow=not args.no_pow,
                from_stage=args.from_stage,
            )
        )
        if args.json:
            _print_json(result)
        else:
            print(_format_eth(result))
        return 0 if result["failed"] == 0 else 1
    if args.action == "export-era1":
        from rechain.pipeline.ethereum.export import export_era1

        res = export_era1(args.data, args.out, args.first, args.last)
        _print_json(res) if args.json else print(
            f"wrote {res['blocks']:,} blocks in {len(res['files'])} era1 file(s) to {res['out']}"
        )
        return 0
    st = eth_import.status(args.data)
    _print_json(st) if args.json else print(_format_eth(st))
    return 0


def _format_eth(st: dict[str, Any]) -> str:
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
        return dispatch(args)
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


if __name__ == "__main__":
    sys.exit(main())
