// Command gethharness is rechain's go-ethereum oracle: go-ethereum v1.17.10's own code reads
// era1 and Ere archives and freezers, imports and exports history and imports headers, so
// rechain's Ethereum importer can be checked against the real thing. Each command prints one
// JSON object on stdout. Hashes, addresses and byte strings are lower-case hex without 0x;
// total difficulties and values are decimal strings.
//
//	gethharness era1 --dir DIR [--network mainnet|sepolia|dev] [--mode read|import]
//	                 [--genesis genesis.json] [--datadir DIR] [--detail] [--blocks=false]
//	                 [--export-ere OUTDIR [--first N] [--last M] [--export-via history|loop]]
//	gethharness ere --dir DIR --network NAME [--mode read|import] [--genesis genesis.json]
//	                 [--datadir DIR] [--detail] [--blocks=false]
//	                 [--export OUTDIR [--first N] [--last M] [--export-via history|loop]]
//	gethharness freezer --dir ANCIENT_DIR [--detail] [--blocks=false]
//	gethharness headerimport (--era1 DIR|FILE | --headers FILE) [--count N] [--network ...]
//	                 [--genesis genesis.json] [--batch 2048] [--db pebble|memory]
//	gethharness headers --era1 DIR|FILE --out FILE [--count N] [--network ...]
//
// era1, mode read (default): every *.era1 file in DIR (of --network, if given) is opened with
// go-ethereum's era1 reader (internal/era/onedb) and iterated: per block its number, hash, the
// file's total difficulty record, tx, uncle and receipt counts; per file the stored accumulator
// and the one era.ComputeAccumulator gives over the file's (hash, TD) records, with the checks
// go-ethereum's `era verify` makes (tx and receipt roots) plus uncle hash, parent links and
// TD = previous TD + difficulty. Works on any epoch, including files that start mid-chain.
//
// era1, mode import: go-ethereum's own history import (cmd/utils.ImportHistory with onedb.From,
// what `geth import-history` runs) into a fresh temporary datadir (Pebble + freezer) with the
// network's genesis and consensus engine (ethconfig.CreateConsensusEngine), then the database
// is read back with core/rawdb (canonical hash, header, body, receipts). geth imports only a
// chain from genesis: epochs 0, 1, 2, ... of one network; a file after a gap (e.g.
// sepolia-00021 without 1..20, mainnet-00003 without 0..2) is reported with go-ethereum's
// era.ReadDir message and not imported. go-ethereum >= 1.15 stores no total difficulty, so in
// this mode "td" is the sum of the imported headers' difficulties from genesis. ImportHistory
// wants a checksums.txt beside the files; the harness writes one from the files' SHA-256.
// --datadir keeps the datadir (its chaindata/ancient/chain is a freezer written by geth).
//
// era1, --export-ere OUTDIR (import mode): the imported chain is then exported as Ere files,
// as `geth export-history --era.format ere` does after `geth import-history`; see ere's export.
//
// A file go-ethereum rejects gives "error": "<file>: <go-ethereum's message>" in its entry
// (blocks read before the failure are kept); the command still exits 0 with "ok": false.
//
// ere, mode read (default): every *.ere file of DIR whose name starts with NETWORK- (in name
// order) is opened with go-ethereum's Ere reader (internal/era/execdb.Open) and iterated with
// its iterator: per block number, hash, td (null when the file has no TD component: post-merge
// epochs), tx, uncle and withdrawal counts and the receipt count (null when the file has no
// receipts component, execdb's HasReceipts: the "noreceipts" profile); per file its range,
// "components" (the index's component count, from the file's last 16 bytes), has_receipts,
// has_td, pre_merge_blocks (difficulty > 0), the stored accumulator (null when the file has
// none: post-merge epochs) and the one era.ComputeAccumulator gives over the pre-merge blocks'
// (hash, TD) ("accumulator_ok", null without an accumulator), and name_ok: the name is
// execdb.Filename(NETWORK, epoch, last block's hash), which always ends in -noproofs.ere. The
// checks of go-ethereum's `era verify` are made per block: tx root and, with receipts, the
// receipts root (execdb's iterator turns the bloom-less slim receipts into full ones,
// recomputing each bloom: types.CreateBloom), and more: uncle hash, withdrawals root, parent
// links and TD = previous TD + difficulty (a transition epoch's post-merge blocks keep the
// final TD). A failed check or read is the file's "error", as in era1.
//
// ere, mode import: go-ethereum's history import (utils.ImportHistory with execdb.From, what
// `geth import-history --era.format ere` runs) into a fresh temporary datadir (Pebble +
// freezer) with the network's genesis or --genesis FILE (needed for any network but mainnet
// and sepolia, e.g. the genesis.json `rechain gen eth --format ere` writes), then read back
// with core/rawdb as era1's import mode does ("td" = sum of difficulties from genesis, the
// accumulator recomputed from the database). geth reads DIR through a staging directory of
// links to DIR's .ere and .era1 files (of every network: geth's era.ReadDir sees what DIR holds
// and refuses a directory mixing .era1 and .ere; its message is "import_error") plus the
// checksums.txt ImportHistory wants. geth's import skips block 0 of the files and keeps the
// genesis it was given: the database's blocks are compared with the files' headers, a
// difference is the file's error. "head" is the imported chain's snap-sync head.
//
// ere, --export OUTDIR (import mode): blocks --first..--last (default: to "head") of the
// imported chain are written as Ere files (execdb.NewBuilder, one file per 8,192 blocks from
// --first) with checksums.txt; "export" lists each file's name, size and SHA-256. geth names
// the files after the chain id's network name ("unknown" for a chain id it does not know); the
// harness names them after NETWORK from the command line (execdb.Filename). --export-via
// history (default) calls utils.ExportHistory, which first lowers --last to the chain's current
// block; a history import moves only the snap-sync head, so the current block is still the
// genesis ("head_block": 0) and ExportHistory writes block 0 only ("effective_last"). --export-via
// loop runs ExportHistory's loop itself, without that first step, over the same chain
// accessors (GetBlockByNumber, GetReceiptsByHash): exportLoop in ere.go.
//
// --detail (era1, ere, freezer): per block also "transactions" (hash, from: the sender
// recovered with types.Sender and types.LatestSignerForChainID of the transaction's chain id,
// or types.HomesteadSigner for a legacy transaction without one; to, null for a contract
// creation; nonce, value, type, gas) and "receipt_details" ("receipts" is the count): status,
// or null with post_state for a pre-Byzantium receipt; cumulative_gas; gas_used, the
// difference of cumulative gas; logs [{address, topics, data}]. For test-size inputs.
//
// freezer: the chain freezer under ANCIENT_DIR (a directory holding `chain/` or the tables) is
// copied to a temporary directory (geth takes a FLOCK file in it, and the source may be
// read-only) and opened with rawdb.Open read-only; per item: number, hash (hashes table,
// rawdb.ReadCanonicalHash), keccak256 of the stored header RLP and the hash of the header
// go-ethereum decodes, tx/uncle counts (rawdb.ReadBody) and receipt count (rawdb.ReadRawReceipts).
// go-ethereum 1.17.10 opens a freezer read-only only if every table it knows exists, including
// `bals` (added in 1.17.4): a freezer written by an older geth fails with go-ethereum's message
// in "readonly_error", and is then opened read-write, on the copy only, which is what geth does
// at startup (adds the missing table at the current head, rewrites .meta as version 2);
// "opened" says which happened. go-ethereum >= 1.15 does not read the `diffs` (TD) table, so
// "td" is absent; "tables" lists the table files found (a `diffs` table shows it was there);
// tests/geth_ethash (go-ethereum v1.11.6) reads TDs from it: `gethethash freezer-td`.
//
// headerimport: holiman/headerimport's method on go-ethereum's HeaderChain: a fresh database
// (temporary Pebble by default), header #0 of the input written as genesis with the network's
// chain config, core.NewHeaderChain with beacon.New(ethash.NewFaker()) (what geth runs:
// all header rules, no proof-of-work check), then ValidateHeaderChain + InsertHeaderChain per
// batch. Timed are only the validate and insert calls. The input must start at block 0: a
// header chain cannot be imported without its parent (mid-chain era1 files cannot be used).
// --headers FILE is header RLPs one after another (each a self-delimiting RLP list, the
// exact bytes that hash to the block hash), block 0 first; `headers` writes such a file from
// era1 files.
//
// Build: tests/geth/build.sh CACHE_DIR; the go-ethereum modules come from the Go module proxy.
// The first build took 7 minutes on 2 busy cores (5 minutes of CPU); later ones only link.
//
// Why the module path lies under github.com/ethereum/go-ethereum: the Go toolchain decides who
// may import an internal package by import path, and go-ethereum's era1 and Ere readers
// (internal/era/onedb, internal/era/execdb), its accumulator (internal/era) and the readers
// and the builder ImportHistory and ExportHistory must be given (onedb.From, execdb.From,
// execdb.NewBuilder) are internal. go-ethereum exports no other way to read an era1 or Ere
// file's headers, TDs and accumulator. So go-ethereum's own code, unmodified and not copied,
// does the reading and writing; the one piece that follows go-ethereum's code rather than
// calling it is exportLoop (ere.go), which says what it leaves out. Nothing here is part of
// go-ethereum.
package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"runtime/debug"

	"github.com/ethereum/go-ethereum/common"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: gethharness era1|ere|freezer|headerimport|headers [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "era1":
		err = runEra1(os.Args[2:])
	case "ere":
		err = runEre(os.Args[2:])
	case "freezer":
		err = runFreezer(os.Args[2:])
	case "headerimport":
		err = runHeaderImport(os.Args[2:])
	case "headers":
		err = runHeaders(os.Args[2:])
	default:
		err = fmt.Errorf("unknown subcommand %q (expected era1, ere, freezer, headerimport or headers)", os.Args[1])
	}
	if err != nil {
		// A failure of the command itself (bad arguments, unreadable input, geth refusing the
		// whole input) is still one JSON object, so callers can show go-ethereum's message.
		_ = emit(map[string]any{"ok": false, "error": err.Error(), "geth_version": gethVersion()})
		fmt.Fprintln(os.Stderr, "gethharness:", err)
		os.Exit(1)
	}
}

func emit(v any) error {
	return json.NewEncoder(os.Stdout).Encode(v)
}

func hexHash(h common.Hash) string { return hex.EncodeToString(h[:]) }

func decimal(n *big.Int) string {
	if n == nil {
		return ""
	}
	return n.String()
}

// gethVersion is the go-ethereum module version this binary was built with.
func gethVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == "github.com/ethereum/go-ethereum" {
				return dep.Version
			}
		}
	}
	return "unknown"
}

// guard runs fn and turns a panic inside go-ethereum's code (corrupt input) into an error.
func guard(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return fn()
}
