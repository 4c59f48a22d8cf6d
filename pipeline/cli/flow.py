"""Flow's commands: `gen flow` (a generated LedgerWAL), `flow replay`, `flow status` and the
`flow checkpoint read|verify|write|stats` sub-CLI: their parsers, handlers and printing. The
checkpoint work itself is `rechain.pipeline.flow.checkpoint`'s.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rechain.pipeline.cli.common import (
    add_memory_budget,
    add_workers,
    options,
    parse_size,
    print_json,
)
from rechain.pipeline.errors import RechainError

if TYPE_CHECKING:
    from rechain.pipeline.cli.common import Subparsers


def add_gen(gen: Subparsers) -> None:
    """`gen flow`."""
    gf = gen.add_parser("flow", help="a Flow LedgerWAL (segments 00000000, ...) + expected.json")
    gf.add_argument("outdir", type=Path)
    gf.add_argument("--updates", type=int, required=True)
    gf.add_argument("--registers-per-update", type=int, required=True)
    gf.add_argument("--seed", type=int, default=1)
    gf.add_argument("--segment-size", type=parse_size, default=32 << 20)
    gf.set_defaults(handler=gen_flow)


def add_commands(sub: Subparsers) -> None:
    """`flow replay`, `flow checkpoint ...`, `flow status`."""
    flow = sub.add_parser("flow", help="Flow execution ledger").add_subparsers(
        dest="action", required=True
    )
    fr = flow.add_parser("replay", help="replay a LedgerWAL into the data folder")
    fr.add_argument("--wal", type=Path, required=True)
    fr.add_argument("--data", type=Path, required=True)
    add_workers(fr)
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
    fr.set_defaults(handler=replay)
    add_checkpoint_commands(flow)
    fst = flow.add_parser("status", help="summary of a data folder's Flow state")
    fst.add_argument("--data", type=Path, required=True)
    fst.add_argument("--json", action="store_true")
    fst.set_defaults(handler=status)


def gen_flow(args: argparse.Namespace) -> int:
    from rechain.workers import _native

    if args.updates < 1 or args.registers_per_update < 1:
        raise RechainError("--updates and --registers-per-update must be at least 1")
    args.outdir.mkdir(parents=True, exist_ok=True)
    facts = _native.flow_generate(
        str(args.outdir),
        args.updates,
        args.registers_per_update,
        args.seed,
        args.segment_size,
    ).as_dict()
    roots = facts.pop("roots")
    (args.outdir / "expected.json").write_text(json.dumps(facts, indent=1, sort_keys=True))
    (args.outdir / "roots.txt").write_text("\n".join(roots) + "\n")
    print(
        f"wrote {facts['updates']:,} updates in {facts['segments']} segment(s) to "
        f"{args.outdir}; final root {facts['final_root']}"
    )
    return 0


def replay(args: argparse.Namespace) -> int:
    from rechain.pipeline import metrics
    from rechain.pipeline.flow import replay as flow_replay

    metrics.serve(args.metrics_port)
    result = flow_replay.run(options(flow_replay.ReplayOptions, args))
    if args.json:
        print_json(result)
    else:
        print(
            f"replayed {result['updates_applied']:,} updates from "
            f"{result['segments']} segment(s); root {result['root']}; "
            f"{result['registers']:,} registers; {len(result['skipped'])} skipped"
        )
    return (
        0
        if not result["skipped"] or all(s["reason"] == "torn_record" for s in result["skipped"])
        else 1
    )


def status(args: argparse.Namespace) -> int:
    from rechain.pipeline.flow import replay as flow_replay

    st = flow_replay.status(args.data)
    if args.json:
        print_json(st)
    else:
        for k in ("root", "updates_applied", "registers", "segments"):
            print(f"{k.ljust(16)} {st[k]}")
        for s in st["skipped"]:
            print(f"  skip {s['segment']}@{s['offset']}: {s['reason']} {s.get('detail') or ''}")
    return 0


# -- flow checkpoint read|verify|write|stats ---------------------------------------------------


def _source_args(p: argparse.ArgumentParser) -> None:
    """`--dir` and `--file`: the checkpoint a command reads."""
    p.add_argument("--dir", type=Path, required=True, help="folder holding the checkpoint files")
    p.add_argument("--file", default=None, help="main file name (default: the latest checkpoint)")


def _trust_args(p: argparse.ArgumentParser) -> None:
    """`--trust-leaf-hashes` and `--trust-hashes` of a read or verification."""
    p.add_argument(
        "--trust-leaf-hashes",
        action="store_true",
        help="do not recompute leaf hashes from the values (interior hashes and roots still are)",
    )
    p.add_argument(
        "--trust-hashes",
        action="store_true",
        help="take every stored hash as flow-go does (structure, CRCs, roots against records "
        "still checked)",
    )


def add_checkpoint_commands(flow: Subparsers) -> None:
    """Adds `flow checkpoint read|verify|write|stats` to the `flow` subparsers."""
    cp = flow.add_parser("checkpoint", help="Flow v6 checkpoints").add_subparsers(
        dest="cp_action", required=True
    )
    r = cp.add_parser("read", help="verify a checkpoint and load it into the data folder")
    _source_args(r)
    r.add_argument("--data", type=Path, required=True)
    add_workers(r)
    r.add_argument("--ray-address", default=None)
    _trust_args(r)
    add_memory_budget(
        r,
        "bound of a streamed read (v6, one trie)",
    )
    r.add_argument(
        "--in-memory",
        action="store_true",
        help="load the whole forest first (the replay's loader) instead of streaming",
    )
    r.add_argument("--json", action="store_true")
    r.set_defaults(handler=checkpoint_read)
    v = cp.add_parser(
        "verify",
        help="every check of read (hashes recomputed, roots against records), nothing kept: "
        "streamed within --memory-budget",
    )
    _source_args(v)
    add_workers(v)
    _trust_args(v)
    add_memory_budget(
        v,
        "bound of a streamed verification (v6, one trie)",
    )
    v.add_argument("--json", action="store_true")
    v.set_defaults(handler=checkpoint_verify)
    w = cp.add_parser("write", help="write the data folder's state as a v6 checkpoint")
    w.add_argument("--data", type=Path, required=True)
    w.add_argument("--out", type=Path, required=True)
    w.add_argument("--root", default=None, help="fail unless the state has this root hash")
    w.add_argument(
        "--number", type=int, default=None, help="checkpoint number (default: last segment)"
    )
    w.add_argument("--threads", type=int, default=None)
    add_memory_budget(
        w,
        "the heap's thresholds follow it as in every command (the write holds one row "
        "group of the registers table per thread)",
    )
    w.add_argument("--json", action="store_true")
    w.set_defaults(handler=checkpoint_write)
    s = cp.add_parser(
        "stats",
        help="counts and sizes per owner, register kind and depth (streamed; flow-go's "
        "checkpoint-collect-stats)",
    )
    _source_args(s)
    s.add_argument("--data", type=Path, required=True, help="data folder the tables go into")
    add_workers(s)
    s.add_argument(
        "--trust-hashes",
        action="store_true",
        help="do not recompute node hashes (structure, CRCs, roots against records still checked)",
    )
    add_memory_budget(
        s,
        "bound of the streamed read and of the owner counts held before spilling",
    )
    s.add_argument("--json", action="store_true")
    s.set_defaults(handler=checkpoint_stats)


def _latest(directory: Path, name: str | None) -> str:
    """`--file`, or the latest checkpoint in `--dir`."""
    from rechain.pipeline.flow.checkpoint import list_checkpoints

    if name is not None:
        return name
    found = list_checkpoints(directory)
    if not found:
        raise RechainError(f"{directory}: no checkpoint.NNNNNNNN file here")
    return found[-1][1]


def _print_tries(head: str, result: dict[str, Any]) -> None:
    print(
        f"{head}: {len(result['tries'])} trie(s); last root {result['root']}; "
        f"{result['reg_count']:,} registers"
    )


def checkpoint_read(args: argparse.Namespace) -> int:
    from rechain.pipeline.flow import checkpoint

    name = _latest(args.dir, args.file)
    result = checkpoint.read(
        args.dir,
        name,
        args.data,
        args.workers or 0,  # 0: one per core
        args.ray_address,
        not args.trust_leaf_hashes,
        trust_hashes=args.trust_hashes,
        memory_budget=args.memory_budget,
        in_memory=args.in_memory,
    )
    if args.json:
        print_json(result)
    else:
        _print_tries(f"read {result['checkpoint']}", result)
    return 0


def checkpoint_verify(args: argparse.Namespace) -> int:
    from rechain.pipeline.flow import checkpoint

    name = _latest(args.dir, args.file)
    result = checkpoint.verify(
        args.dir,
        name,
        args.workers or 0,  # 0: one per core
        not args.trust_leaf_hashes,
        trust_hashes=args.trust_hashes,
        memory_budget=args.memory_budget,
    )
    if args.json:
        print_json(result)
    else:
        _print_tries(
            f"verified {result['checkpoint']} ({result['verify']}, {result['mode']})", result
        )
    return 0


def checkpoint_write(args: argparse.Namespace) -> int:
    from rechain.pipeline.flow import checkpoint

    result = checkpoint.write(args.data, args.out, args.root, args.number, args.threads)
    if args.json:
        print_json(result)
    else:
        print(
            f"wrote {result['checkpoint']}: root {result['root']}; "
            f"{result['reg_count']:,} registers; {result['bytes']:,} bytes"
        )
    return 0


def checkpoint_stats(args: argparse.Namespace) -> int:
    from rechain.pipeline.flow import checkpoint

    report = checkpoint.stats(
        args.dir,
        _latest(args.dir, args.file),
        args.data,
        args.workers or 0,  # 0: one per core
        trust_hashes=args.trust_hashes,
        memory_budget=args.memory_budget,
    )
    if args.json:
        print_json(report)
    else:
        checkpoint._print_stats(report)  # the stats' printing stays with their table names
    return 0
