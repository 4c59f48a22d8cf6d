"""Full block decode benchmark (``--mode full``), side by side in one run with this machine's
SHA-256 limit and with a peer parser.

Reports: the Rust decoder's MB/s on one core (every transaction, input and output to Arrow
columns, merkle/witness checks) against hashlib's SHA-256 MB/s on one core measured now (the
decoder must hash every byte: txid, and wtxid for segwit), with ``sha256_work``: how many bytes
any full decoder must hash per block byte on this chain, so the highest ratio a single SHA-256
stream at the limit allows; the body pass's wall time with 1 and
2 Ray workers (speed-up); end-to-end full reindex time; and the same blk files parsed by the
``blockchain-parser`` package from PyPI (unordered reader, touching every transaction's txid and
output values), as a ratio.

    .venv/bin/python benchmarks/btc_full.py [--blocks 6000] [--peer-seconds 30]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import btc_reindex_cmd, machine, run_measured, write_result  # noqa: E402
from rechain.workers import _native  # noqa: E402
from rechain.workers.btc_decode import BodyUnit, decode_unit  # noqa: E402

MB = 1e6


def sha256_limit(seconds: float = 2.0) -> float:
    """hashlib (OpenSSL) SHA-256 over 1 MiB chunks on one core: MB/s."""
    buf = bytes(1 << 20)
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        hashlib.sha256(buf).digest()
        n += len(buf)
    return n / (time.perf_counter() - t0) / MB


def block_offsets(path: Path) -> list[int]:
    magic = bytes.fromhex("fabfb5da")
    raw = path.read_bytes()
    out, pos = [], 0
    while pos + 8 <= len(raw) and raw[pos : pos + 4] == magic:
        out.append(pos)
        pos += 8 + int.from_bytes(raw[pos + 4 : pos + 8], "little")
    return out


def decoder_rate(blocks: Path) -> tuple[float, int, int]:
    """Single-thread decode of every record of every file (page cache warm): MB/s, txs, bytes."""
    units = [
        BodyUnit(i, str(f), i, tuple(block_offsets(f)), "regtest", b"\0" * 8)
        for i, f in enumerate(sorted(blocks.glob("blk*.dat")))
    ]
    t0 = time.perf_counter()
    txs = nbytes = 0
    for u in units:
        r = decode_unit(u)
        txs += r.transactions.num_rows
        nbytes += r.bytes_decoded
    return nbytes / (time.perf_counter() - t0) / MB, txs, nbytes


def real_block_rate(work: Path, copies: int = 40) -> float:
    """The real mainnet block (2,500 transactions, 2,065 segwit) framed ``copies`` times in one
    file and decoded on one core: MB/s on a realistic transaction mix."""
    shared = Path(__file__).resolve().parents[2] / "shared" / "data" / "bitcoin"
    raw = next(shared.glob("mainnet_block_*.raw")).read_bytes()
    magic = bytes(_native.network_info("main")["magic"])
    record = magic + len(raw).to_bytes(4, "little") + raw
    path = work / "real" / "blk00000.dat"
    path.parent.mkdir()
    path.write_bytes(record * copies)
    offsets = tuple(i * len(record) for i in range(copies))
    t0 = time.perf_counter()
    r = decode_unit(BodyUnit(0, str(path), 0, offsets, "main", b"\0" * 8))
    assert r.transactions.num_rows == 2500 * copies
    return r.bytes_decoded / (time.perf_counter() - t0) / MB


def hash_ceiling(data: Path) -> dict:
    """SHA-256 work no full decoder can skip, from the published tables of a full reindex, in
    64-byte compressions: double SHA-256 of every transaction without witness (txid) and, for
    segwit ones, with it (wtxid); the txid and wtxid merkle trees (3 per inner node) and the
    header; the base58check checksum of every P2PKH/P2SH address. Bytes hashed per block byte,
    and so the highest decoder/limit ratio a single-stream SHA-256 at the limit allows."""
    from rechain.pipeline.query import run_query

    def q(sql: str) -> int:
        return int(run_query(data, sql)[1][0][0])

    def blocks_of(n: str) -> str:  # 64-byte blocks of an n-byte message, with 9 bytes padding
        return f"(({n}) + 72) // 64"

    txs = q(
        f"SELECT sum({blocks_of('(weight - size) // 3')} + 1 + CASE WHEN has_witness "
        f"THEN {blocks_of('size')} + 1 ELSE 0 END) FROM transactions"
    )
    trees = q(
        "SELECT sum(3 + 3 * n_tx + CASE WHEN segwit THEN 3 * n_tx + 3 ELSE 0 END) FROM ("
        "SELECT b.hash, b.n_tx, bool_or(t.has_witness) AS segwit FROM blocks b "
        "JOIN transactions t ON t.block_hash = b.hash GROUP BY ALL)"
    )
    base58 = q("SELECT 2 * count(*) FROM outputs WHERE script_type IN ('p2pkh', 'p2sh')")
    block_bytes = q("SELECT sum(size) FROM blocks WHERE valid")
    per_byte = 64 * (txs + trees + base58) / block_bytes
    return {"hashed_bytes_per_block_byte": per_byte, "ceiling_vs_limit": 1 / per_byte}


def full_reindex(blocks: Path, data: Path, workers: int, budget: str) -> tuple[dict, float, float]:
    cmd = btc_reindex_cmd(blocks, data, workers, "--mode", "full", "--memory-budget", budget)
    done, rss, elapsed = run_measured(cmd)
    return json.loads(done.stdout), elapsed, rss.peak_tree / 2**20


PEER_SCRIPT = """
import sys, time
from blockchain_parser.blockchain import Blockchain
limit = float(sys.argv[2]); t0 = time.perf_counter(); n = txs = 0; nbytes = 0
for block in Blockchain(sys.argv[1]).get_unordered_blocks():
    nbytes += block.size
    for tx in block.transactions:
        tx.txid
        sum(o.value for o in tx.outputs)
        txs += 1
    n += 1
    if time.perf_counter() - t0 > limit:
        break
print(nbytes, txs, n, time.perf_counter() - t0)
"""


def mainnet_framed_copy(blocks: Path, out: Path) -> Path:
    """The same files with each record's magic set to mainnet's: blockchain-parser only reads
    mainnet framing; every other byte is unchanged."""
    out.mkdir(parents=True)
    main_magic = bytes.fromhex("f9beb4d9")
    for f in sorted(blocks.glob("blk*.dat")):
        raw = bytearray(f.read_bytes())
        for off in block_offsets(f):
            raw[off : off + 4] = main_magic
        (out / f.name).write_bytes(bytes(raw))
    return out


def peer_rate(blocks: Path, seconds: float) -> dict | None:
    """blockchain-parser (pure Python) on the same files, in its own venv-installed package."""
    # `make setup` installs it with --no-deps (it pins python-bitcoinlib 0.11, which a plain
    # install would downgrade the venv to); install the same way only when it is missing.
    have = subprocess.run([sys.executable, "-c", "import blockchain_parser"], capture_output=True)
    if have.returncode != 0:
        pip = subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps",
             "blockchain-parser==0.1.6", "ripemd-hash==1.0.1"],
            capture_output=True, text=True,
        )  # fmt: skip
        if pip.returncode != 0:
            return {"error": f"blockchain-parser could not be installed: {pip.stderr[-300:]}"}
    done = subprocess.run(
        [sys.executable, "-c", PEER_SCRIPT, str(blocks), str(seconds)],
        capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0:
        return {"error": done.stderr[-500:]}
    nbytes, txs, n, secs = done.stdout.split()
    return {
        "bytes": int(nbytes),
        "txs": int(txs),
        "blocks": int(n),
        "seconds": float(secs),
        "mb_per_s": int(nbytes) / float(secs) / MB,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--blocks", type=int, default=6000)
    ap.add_argument("--tx-per-block", default="100:400")
    ap.add_argument("--peer-seconds", type=float, default=30.0)
    ap.add_argument("--memory-budget", default="1G", help="passed to rechain btc reindex")
    args = ap.parse_args()
    lo, hi = (int(x) for x in args.tx_per_block.split(":"))
    work = Path(tempfile.mkdtemp(prefix="rechain-bench-full-"))
    try:
        t = time.perf_counter()
        _native.generate_bitcoin(
            str(work / "node"), args.blocks, "regtest", 7, 134_217_728, False, 16, 5, 3, lo, hi
        )
        gen_s = time.perf_counter() - t
        blocks = work / "node" / "blocks"
        file_bytes = sum(f.stat().st_size for f in blocks.glob("blk*.dat"))
        limit = sha256_limit()
        rate, txs, nbytes = decoder_rate(blocks)
        real_rate = real_block_rate(work)
        runs = {}
        for workers in (1, 2):
            result, elapsed, rss = full_reindex(
                blocks, work / f"data{workers}", workers, args.memory_budget
            )
            run = result["run"]
            if workers == 1:
                ceiling = hash_ceiling(work / "data1")
            runs[workers] = {
                "elapsed_s": elapsed,
                "ray_start_s": run["ray_start_s"],
                "body_pass_s": run["decode_s"],
                "body_pass_mb_per_s": run["bytes_decoded"] / run["decode_s"] / MB,
                "publish_s": run["publish_s"],
                "utxo_and_txindex_s": run["utxo_s"],
                "peak_rss_tree_mib": rss,
                "utxo_count": result["full"]["utxo_count"],
            }
        peer = peer_rate(mainnet_framed_copy(blocks, work / "peer"), args.peer_seconds)
        out = {
            "machine": machine(),
            "chain": {
                "blocks": args.blocks,
                "tx_per_block": args.tx_per_block,
                "file_bytes": file_bytes,
                "block_bytes": nbytes,
                "transactions": txs,
                "generate_s": gen_s,
            },  # fmt: skip
            "sha256_limit_mb_per_s_per_core": limit,
            "decoder_mb_per_s_per_core": rate,
            "decoder_vs_sha256_limit": rate / limit,
            "decoder_mainnet_block_mb_per_s_per_core": real_rate,
            "decoder_mainnet_block_vs_sha256_limit": real_rate / limit,
            "target_vs_limit": 0.5,
            "sha256_work": ceiling,
            "memory_budget": args.memory_budget,
            "workers": runs,
            "speedup_1_to_2_workers": runs[1]["body_pass_s"] / runs[2]["body_pass_s"],
            "target_speedup": 1.8,
            "peer_blockchain_parser": peer,
            "vs_peer": (rate / peer["mb_per_s"]) if peer and peer.get("mb_per_s") else None,
            "target_vs_peer": 100,
        }
        path = write_result("btc_full", out)
        print(json.dumps({k: v for k, v in out.items() if k != "machine"}, indent=1))
        print(f"wrote {path}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
