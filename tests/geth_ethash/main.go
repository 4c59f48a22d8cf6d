// Command gethethash runs go-ethereum v1.11.6, the last release with proof-of-work
// verification and the `diffs` (total difficulty) freezer table, for what go-ethereum v1.17 no
// longer does. A separate module from tests/geth, since one module holds one go-ethereum.
// Each command prints one JSON object on stdout; hashes are lower-case hex without 0x, TDs
// decimal strings.
//
//	gethethash ethash --headers FILE [--count N] [--network mainnet|sepolia] [--threads T]
//	gethethash freezer-td --dir ANCIENT_DIR
//
// ethash: go-ethereum's ethash engine (ModeNormal: light verification with the epoch's 16+ MiB
// cache, what a v1.11 node did for every imported header) verifies headers 2..n of FILE, a file
// of concatenated header RLPs as `gethharness headers --era1 ...` writes (go-ethereum v1.11
// has no era1 reader). The first header only serves as the parent, so the file may start
// mid-chain (e.g. mainnet-00003). Ethash.VerifyHeaders runs on T goroutines (GOMAXPROCS,
// default all cores) with seal checks on, after a warm-up that builds the caches of the epochs
// present (timed apart); a second run with seal checks off gives the cost of the other header
// rules (difficulty, gas limit, timestamps, extra data). The chain config is the network's.
//
// freezer-td: the chain freezer under ANCIENT_DIR is copied to a temporary directory and opened
// read-only with v1.11's core/rawdb; per block: canonical hash and rawdb.ReadTd (the diffs table).
//
// Build: tests/geth_ethash/build.sh CACHE_DIR (first build about 1.5 minutes on 2 cores).
package main

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/consensus/ethash"
	"github.com/ethereum/go-ethereum/core/rawdb"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/ethdb/memorydb"
	"github.com/ethereum/go-ethereum/params"
	"github.com/ethereum/go-ethereum/rlp"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: gethethash ethash|freezer-td [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "ethash":
		err = runEthash(os.Args[2:])
	case "freezer-td":
		err = runFreezerTD(os.Args[2:])
	default:
		err = fmt.Errorf("unknown subcommand %q (expected ethash or freezer-td)", os.Args[1])
	}
	if err != nil {
		_ = emit(map[string]any{"ok": false, "error": err.Error(), "geth_version": gethVersion()})
		fmt.Fprintln(os.Stderr, "gethethash:", err)
		os.Exit(1)
	}
}

func emit(v any) error { return json.NewEncoder(os.Stdout).Encode(v) }

func hexHash(h common.Hash) string { return hex.EncodeToString(h[:]) }

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

// headerReader is the consensus.ChainHeaderReader the engine asks for parents: the input's
// headers, by hash.
type headerReader struct {
	config  *params.ChainConfig
	headers map[common.Hash]*types.Header
}

func (r *headerReader) Config() *params.ChainConfig  { return r.config }
func (r *headerReader) CurrentHeader() *types.Header { return nil }
func (r *headerReader) GetHeader(hash common.Hash, number uint64) *types.Header {
	if h := r.headers[hash]; h != nil && h.Number.Uint64() == number {
		return h
	}
	return nil
}
func (r *headerReader) GetHeaderByNumber(uint64) *types.Header         { return nil }
func (r *headerReader) GetHeaderByHash(hash common.Hash) *types.Header { return r.headers[hash] }
func (r *headerReader) GetTd(hash common.Hash, number uint64) *big.Int { return nil }

type ethashResult struct {
	OK                bool    `json:"ok"`
	GethVersion       string  `json:"geth_version"`
	Network           string  `json:"network"`
	Threads           int     `json:"threads"`
	Headers           int     `json:"headers"`
	First             uint64  `json:"first"`
	Last              uint64  `json:"last"`
	Epochs            []int   `json:"epochs"`
	WarmupSeconds     float64 `json:"warmup_seconds"`
	Seconds           float64 `json:"seconds"`
	HeadersPerSec     float64 `json:"headers_per_second"`
	HeadersPerSecCore float64 `json:"headers_per_second_per_core"`
	RulesOnlySeconds  float64 `json:"rules_only_seconds"`
	Errors            int     `json:"errors"`
	FirstError        *string `json:"first_error"`
}

func runEthash(args []string) error {
	fs := flag.NewFlagSet("ethash", flag.ContinueOnError)
	file := fs.String("headers", "", "file of concatenated header RLPs (the first one is only the parent)")
	count := fs.Int("count", 0, "verify at most this many headers (0: all)")
	network := fs.String("network", "mainnet", "chain config: mainnet or sepolia")
	threads := fs.Int("threads", runtime.NumCPU(), "verifier goroutines (GOMAXPROCS)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *file == "" {
		return errors.New("ethash: --headers is required")
	}
	configs := map[string]*params.ChainConfig{"mainnet": params.MainnetChainConfig, "sepolia": params.SepoliaChainConfig}
	config, ok := configs[*network]
	if !ok {
		return fmt.Errorf("ethash: unknown --network %q (expected mainnet or sepolia)", *network)
	}
	headers, err := readHeaders(*file)
	if err != nil {
		return err
	}
	if len(headers) < 2 {
		return errors.New("ethash: need at least two headers (the first is only the parent)")
	}
	if *count > 0 && *count+1 < len(headers) {
		headers = headers[:*count+1]
	}
	runtime.GOMAXPROCS(*threads)
	reader := &headerReader{config: config, headers: make(map[common.Hash]*types.Header, len(headers))}
	for _, h := range headers {
		reader.headers[h.Hash()] = h
	}
	verify := headers[1:]
	res := &ethashResult{
		GethVersion: gethVersion(), Network: *network, Threads: *threads, Headers: len(verify),
		First: verify[0].Number.Uint64(), Last: verify[len(verify)-1].Number.Uint64(),
	}
	engine := ethash.New(ethash.Config{PowMode: ethash.ModeNormal, CachesInMem: 3}, nil, false)
	defer engine.Close()

	// Warm-up: one header per epoch builds that epoch's cache (a few seconds each).
	t0 := time.Now()
	lastEpoch := -1
	for _, h := range verify {
		if epoch := int(h.Number.Uint64() / 30000); epoch != lastEpoch {
			lastEpoch = epoch
			res.Epochs = append(res.Epochs, epoch)
			runVerify(engine, reader, []*types.Header{h}, true)
		}
	}
	res.WarmupSeconds = time.Since(t0).Seconds()

	t0 = time.Now()
	errs := runVerify(engine, reader, verify, true)
	res.Seconds = time.Since(t0).Seconds()
	for i, err := range errs {
		if err != nil {
			res.Errors++
			if res.FirstError == nil {
				msg := fmt.Sprintf("header #%d: %v", verify[i].Number, err)
				res.FirstError = &msg
			}
		}
	}
	t0 = time.Now()
	runVerify(engine, reader, verify, false)
	res.RulesOnlySeconds = time.Since(t0).Seconds()
	if res.Seconds > 0 {
		res.HeadersPerSec = float64(res.Headers) / res.Seconds
		res.HeadersPerSecCore = res.HeadersPerSec / float64(*threads)
	}
	res.OK = res.Errors == 0
	return emit(res)
}

func runVerify(engine *ethash.Ethash, reader *headerReader, headers []*types.Header, seal bool) []error {
	seals := make([]bool, len(headers))
	for i := range seals {
		seals[i] = seal
	}
	abort, results := engine.VerifyHeaders(reader, headers, seals)
	defer close(abort)
	errs := make([]error, len(headers))
	for i := range headers {
		errs[i] = <-results
	}
	return errs
}

func readHeaders(path string) ([]*types.Header, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	stream := rlp.NewStream(bufio.NewReaderSize(f, 1<<20), 0)
	var out []*types.Header
	for {
		h := new(types.Header)
		if err := stream.Decode(h); err == io.EOF {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s: header %d: %w", path, len(out), err)
		}
		out = append(out, h)
	}
}

type tdBlock struct {
	Number uint64 `json:"number"`
	Hash   string `json:"hash"`
	TD     string `json:"td"`
}

func runFreezerTD(args []string) error {
	fs := flag.NewFlagSet("freezer-td", flag.ContinueOnError)
	dir := fs.String("dir", "", "ancient directory (holding chain/) or a chain freezer directory")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("freezer-td: --dir is required")
	}
	chainDir := *dir
	if info, err := os.Stat(filepath.Join(*dir, "chain")); err == nil && info.IsDir() {
		chainDir = filepath.Join(*dir, "chain")
	}
	tmp, err := os.MkdirTemp("", "gethethash-freezer-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	ancient := filepath.Join(tmp, "ancient")
	if err := copyFiles(chainDir, filepath.Join(ancient, "chain")); err != nil {
		return err
	}
	db, err := rawdb.NewDatabaseWithFreezer(memorydb.New(), ancient, "", true)
	if err != nil {
		return fmt.Errorf("go-ethereum cannot open %s read-only: %w", chainDir, err)
	}
	defer db.Close()
	frozen, err := db.Ancients()
	if err != nil {
		return err
	}
	res := map[string]any{"ok": true, "geth_version": gethVersion(), "dir": *dir, "ancients": frozen}
	var blocks []tdBlock
	for n := uint64(0); n < frozen; n++ {
		hash := rawdb.ReadCanonicalHash(db, n)
		td := rawdb.ReadTd(db, hash, n)
		b := tdBlock{Number: n, Hash: hexHash(hash)}
		if td == nil {
			res["ok"] = false
		} else {
			b.TD = td.String()
		}
		blocks = append(blocks, b)
	}
	res["blocks"] = blocks
	return emit(res)
}

func copyFiles(src, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() || e.Name() == "FLOCK" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}
