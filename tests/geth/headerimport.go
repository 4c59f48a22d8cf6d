package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/consensus/beacon"
	"github.com/ethereum/go-ethereum/consensus/ethash"
	"github.com/ethereum/go-ethereum/core"
	"github.com/ethereum/go-ethereum/core/rawdb"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/ethdb"
	"github.com/ethereum/go-ethereum/ethdb/memorydb"
	"github.com/ethereum/go-ethereum/ethdb/pebble"
	"github.com/ethereum/go-ethereum/internal/era/onedb"
	"github.com/ethereum/go-ethereum/params"
	"github.com/ethereum/go-ethereum/rlp"
)

type headerImportResult struct {
	OK              bool    `json:"ok"`
	GethVersion     string  `json:"geth_version"`
	Source          string  `json:"source"`
	Config          string  `json:"config"`
	DB              string  `json:"db"`
	Batch           int     `json:"batch"`
	Headers         int     `json:"headers"`
	Seconds         float64 `json:"seconds"`
	ValidateSeconds float64 `json:"validate_seconds"`
	WriteSeconds    float64 `json:"write_seconds"`
	HeadersPerSec   float64 `json:"headers_per_second"`
	Genesis         string  `json:"genesis"`
	Tip             string  `json:"tip"`
	TipNumber       uint64  `json:"tip_number"`
}

// loadedHeader is a header as decoded by go-ethereum plus the exact RLP it came from.
type loadedHeader struct {
	header *types.Header
	raw    []byte
}

func runHeaderImport(args []string) error {
	fs := flag.NewFlagSet("headerimport", flag.ContinueOnError)
	era1Dir := fs.String("era1", "", "read the headers from this era1 file or the era1 files in this directory (epoch order)")
	headersFile := fs.String("headers", "", "read the headers from a file of concatenated header RLPs")
	count := fs.Int("count", 0, "import at most this many headers after the genesis (0: all)")
	network := fs.String("network", "", "mainnet, sepolia or dev; default: from the genesis hash, else dev")
	genesisFile := fs.String("genesis", "", "take the chain config from this genesis JSON")
	batch := fs.Int("batch", 2048, "headers per ValidateHeaderChain/InsertHeaderChain call")
	dbKind := fs.String("db", "pebble", "pebble (a temporary directory) or memory")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if (*era1Dir == "") == (*headersFile == "") {
		return errors.New("headerimport: give one of --era1 DIR or --headers FILE")
	}
	if *batch < 1 {
		return errors.New("headerimport: --batch must be >= 1")
	}
	limit := -1
	if *count > 0 {
		limit = *count + 1
	}
	var (
		headers []loadedHeader
		err     error
		source  string
	)
	if *era1Dir != "" {
		source = "era1:" + *era1Dir
		headers, err = era1Headers(*era1Dir, *network, limit)
	} else {
		source = "headers:" + *headersFile
		headers, err = fileHeaders(*headersFile, limit)
	}
	if err != nil {
		return err
	}
	if len(headers) == 0 {
		return errors.New("headerimport: no headers")
	}
	genesis := headers[0].header
	if genesis.Number == nil || genesis.Number.Sign() != 0 {
		return fmt.Errorf("headerimport: the first header is #%v: a header chain imports only from genesis (block 0), since go-ethereum needs every header's parent", genesis.Number)
	}
	config, configName, err := chainConfig(*network, *genesisFile, genesis.Hash())
	if err != nil {
		return err
	}

	var kv ethdb.KeyValueStore
	switch *dbKind {
	case "memory":
		kv = memorydb.New()
	case "pebble":
		tmp, err := os.MkdirTemp("", "gethharness-headers-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		if kv, err = pebble.New(filepath.Join(tmp, "chaindata"), 128, 128, "", false); err != nil {
			return err
		}
	default:
		return fmt.Errorf("headerimport: unknown --db %q (expected pebble or memory)", *dbKind)
	}
	db := rawdb.NewDatabase(kv)
	defer db.Close()
	// Header #0 of the input is the genesis: written as geth's genesis setup writes its header.
	genesisHash := genesis.Hash()
	rawdb.WriteHeader(db, genesis)
	rawdb.WriteCanonicalHash(db, genesisHash, 0)
	rawdb.WriteHeadHeaderHash(db, genesisHash)
	rawdb.WriteHeadBlockHash(db, genesisHash)
	rawdb.WriteChainConfig(db, genesisHash, config)

	hc, err := core.NewHeaderChain(db, config, beacon.New(ethash.NewFaker()), func() bool { return false })
	if err != nil {
		return err
	}
	res := &headerImportResult{
		GethVersion: gethVersion(), Source: source, Config: configName, DB: *dbKind, Batch: *batch,
		Genesis: hexHash(genesisHash),
	}
	var validate, write time.Duration
	chain := make([]*types.Header, 0, len(headers)-1)
	for _, h := range headers[1:] {
		chain = append(chain, h.header)
	}
	for len(chain) > 0 {
		part := chain[:min(*batch, len(chain))]
		chain = chain[len(part):]
		t0 := time.Now()
		if i, err := hc.ValidateHeaderChain(part); err != nil {
			return fmt.Errorf("header #%v: %w", part[i].Number, err)
		}
		t1 := time.Now()
		if _, err := hc.InsertHeaderChain(part, t1); err != nil {
			return fmt.Errorf("inserting headers #%v..#%v: %w", part[0].Number, part[len(part)-1].Number, err)
		}
		validate += t1.Sub(t0)
		write += time.Since(t1)
		res.Headers += len(part)
	}
	tip := hc.CurrentHeader()
	res.Tip, res.TipNumber = hexHash(tip.Hash()), tip.Number.Uint64()
	res.ValidateSeconds, res.WriteSeconds = validate.Seconds(), write.Seconds()
	res.Seconds = (validate + write).Seconds()
	if res.Seconds > 0 {
		res.HeadersPerSec = float64(res.Headers) / res.Seconds
	}
	if want := headers[len(headers)-1].header.Hash(); tip.Hash() != want {
		return fmt.Errorf("headerimport: geth's head is %x, the last header imported %x", tip.Hash(), want)
	}
	res.OK = true
	return emit(res)
}

// chainConfig picks the chain config: a genesis JSON's, a named network's, or (for other
// chains) params.AllEthashProtocolChanges, go-ethereum's proof-of-work test config.
func chainConfig(network, genesisFile string, genesisHash common.Hash) (*params.ChainConfig, string, error) {
	if genesisFile != "" {
		genesis, err := networkGenesis("", genesisFile)
		if err != nil {
			return nil, "", err
		}
		if genesis.Config == nil {
			return nil, "", fmt.Errorf("%s has no config", genesisFile)
		}
		return genesis.Config, "genesis:" + genesisFile, nil
	}
	known := map[string]struct {
		hash   common.Hash
		config *params.ChainConfig
	}{
		"mainnet": {params.MainnetGenesisHash, params.MainnetChainConfig},
		"sepolia": {params.SepoliaGenesisHash, params.SepoliaChainConfig},
	}
	if network == "" {
		for name, k := range known {
			if k.hash == genesisHash {
				network = name
			}
		}
	}
	if k, ok := known[network]; ok {
		if k.hash != genesisHash {
			return nil, "", fmt.Errorf("the first header %x is not %s's genesis %x", genesisHash, network, k.hash)
		}
		return k.config, network, nil
	}
	if network != "" && network != "dev" {
		return nil, "", fmt.Errorf("unknown network %q (expected mainnet, sepolia or dev)", network)
	}
	return params.AllEthashProtocolChanges, "dev:AllEthashProtocolChanges", nil
}

// era1Headers reads the headers of DIR's era1 files in epoch order with go-ethereum's raw era1
// iterator (the exact RLP stored) and RLP decoder. limit < 0 means all.
func era1Headers(dir, network string, limit int) ([]loadedHeader, error) {
	var names []string
	if info, err := os.Stat(dir); err == nil && info.Mode().IsRegular() {
		dir, names = filepath.Dir(dir), []string{filepath.Base(dir)} // one era1 file
	} else if names, err = listEra1(dir, network); err != nil {
		return nil, err
	}
	var out []loadedHeader
	for _, name := range names {
		if limit >= 0 && len(out) >= limit {
			break
		}
		err := guard(func() error {
			e, err := onedb.Open(filepath.Join(dir, name))
			if err != nil {
				return err
			}
			defer e.Close()
			it, err := onedb.NewRawIterator(e.(*onedb.Era))
			if err != nil {
				return err
			}
			for (limit < 0 || len(out) < limit) && it.Next() {
				raw, err := io.ReadAll(it.Header)
				if err != nil {
					return fmt.Errorf("block %d: %w", it.Number(), err)
				}
				h := new(types.Header)
				if err := rlp.DecodeBytes(raw, h); err != nil {
					return fmt.Errorf("block %d: %w", it.Number(), err)
				}
				out = append(out, loadedHeader{h, raw})
			}
			return it.Error()
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	return out, nil
}

// fileHeaders reads a file of header RLPs, one after another. limit < 0 means all.
func fileHeaders(path string, limit int) ([]loadedHeader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	stream := rlp.NewStream(bufio.NewReaderSize(f, 1<<20), 0)
	var out []loadedHeader
	for limit < 0 || len(out) < limit {
		raw, err := stream.Raw()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: header %d: %w", path, len(out), err)
		}
		h := new(types.Header)
		if err := rlp.DecodeBytes(raw, h); err != nil {
			return nil, fmt.Errorf("%s: header %d: %w", path, len(out), err)
		}
		out = append(out, loadedHeader{h, raw})
	}
	return out, nil
}

// runHeaders writes the headers of era1 files as a --headers file (their exact RLP bytes).
func runHeaders(args []string) error {
	fs := flag.NewFlagSet("headers", flag.ContinueOnError)
	era1Dir := fs.String("era1", "", "an era1 file or a directory of era1 files (epoch order)")
	network := fs.String("network", "", "only this network's files")
	out := fs.String("out", "", "output file")
	count := fs.Int("count", 0, "at most this many headers (0: all)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *era1Dir == "" || *out == "" {
		return errors.New("headers: --era1 and --out are required")
	}
	limit := -1
	if *count > 0 {
		limit = *count
	}
	headers, err := era1Headers(*era1Dir, *network, limit)
	if err != nil {
		return err
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	for _, h := range headers {
		if _, err := w.Write(h.raw); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	res := map[string]any{"ok": true, "file": *out, "headers": len(headers), "geth_version": gethVersion()}
	if len(headers) > 0 {
		first, last := headers[0].header, headers[len(headers)-1].header
		res["first_number"], res["last_number"] = first.Number.Uint64(), last.Number.Uint64()
		res["first_hash"], res["last_hash"] = hexHash(first.Hash()), hexHash(last.Hash())
	}
	return emit(res)
}
