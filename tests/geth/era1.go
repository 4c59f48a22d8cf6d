package main

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/cmd/utils"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core"
	"github.com/ethereum/go-ethereum/core/rawdb"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/eth/ethconfig"
	"github.com/ethereum/go-ethereum/ethdb"
	"github.com/ethereum/go-ethereum/ethdb/pebble"
	"github.com/ethereum/go-ethereum/internal/era"
	"github.com/ethereum/go-ethereum/internal/era/onedb"
	"github.com/ethereum/go-ethereum/trie"
)

type eraBlock struct {
	Number   uint64 `json:"number"`
	Hash     string `json:"hash"`
	TD       string `json:"td"`
	Txs      int    `json:"txs"`
	Uncles   int    `json:"uncles"`
	Receipts int    `json:"receipts"`
	// --detail only: the block's transactions and receipts.
	Transactions   *[]txDetail      `json:"transactions,omitempty"`
	ReceiptDetails *[]receiptDetail `json:"receipt_details,omitempty"`
}

type eraFile struct {
	File                string     `json:"file"`
	Error               *string    `json:"error"`
	Imported            *bool      `json:"imported,omitempty"`
	Epoch               uint64     `json:"epoch"`
	Start               uint64     `json:"start"`
	Count               uint64     `json:"count"`
	BlocksRead          int        `json:"blocks_read"`
	FirstHash           string     `json:"first_hash"`
	LastHash            string     `json:"last_hash"`
	InitialTD           string     `json:"initial_td"`
	FinalTD             string     `json:"final_td"`
	Txs                 int        `json:"txs"`
	Uncles              int        `json:"uncles"`
	Receipts            int        `json:"receipts"`
	Accumulator         string     `json:"accumulator"`
	AccumulatorComputed string     `json:"accumulator_computed"`
	AccumulatorOK       bool       `json:"accumulator_ok"`
	NameOK              bool       `json:"name_ok"`
	Blocks              []eraBlock `json:"blocks,omitempty"`
}

type era1Result struct {
	OK          bool       `json:"ok"`
	Mode        string     `json:"mode"`
	Dir         string     `json:"dir"`
	Network     string     `json:"network"`
	GethVersion string     `json:"geth_version"`
	Files       []*eraFile `json:"files"`
	ImportError *string    `json:"import_error,omitempty"`
	Export      *ereExport `json:"export,omitempty"`
	Datadir     string     `json:"datadir,omitempty"`
	Seconds     float64    `json:"seconds"`
}

func (f *eraFile) fail(err error) {
	msg := f.File + ": " + err.Error()
	f.Error = &msg
}

func (f *eraFile) add(b eraBlock, keep bool) {
	if f.BlocksRead == 0 {
		f.FirstHash = b.Hash
	}
	f.LastHash = b.Hash
	f.BlocksRead++
	f.Txs += b.Txs
	f.Uncles += b.Uncles
	f.Receipts += b.Receipts
	if keep {
		f.Blocks = append(f.Blocks, b)
	}
}

func runEra1(args []string) error {
	fs := flag.NewFlagSet("era1", flag.ContinueOnError)
	dir := fs.String("dir", "", "directory of era1 files")
	network := fs.String("network", "", "mainnet, sepolia or dev (default: every file in read mode, the files' own network in import mode)")
	mode := fs.String("mode", "read", "read (go-ethereum's era1 reader) or import (geth's history import, then core/rawdb)")
	genesis := fs.String("genesis", "", "genesis JSON for import mode (needed for networks other than mainnet and sepolia)")
	datadir := fs.String("datadir", "", "import mode: keep the datadir here (must not exist); default a removed temporary directory")
	blocks := fs.Bool("blocks", true, "list every block")
	detail := fs.Bool("detail", false, "list every block's transactions and receipts (test-size inputs)")
	var export exportFlags
	export.register(fs, "export-ere")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("era1: --dir is required")
	}
	if err := export.check(*mode); err != nil {
		return fmt.Errorf("era1: %w", err)
	}
	names, err := listEra1(*dir, *network)
	if err != nil {
		return err
	}
	start := time.Now()
	res := &era1Result{Mode: *mode, Dir: *dir, Network: *network, GethVersion: gethVersion()}
	switch *mode {
	case "read":
		for _, name := range names {
			res.Files = append(res.Files, readEra1File(filepath.Join(*dir, name), *blocks, *detail))
		}
	case "import":
		if err := importEra1(res, names, *genesis, *datadir, *blocks, *detail, export); err != nil {
			return err
		}
	default:
		return fmt.Errorf("era1: unknown --mode %q (expected read or import)", *mode)
	}
	res.OK = res.ImportError == nil && (res.Export == nil || res.Export.Error == nil)
	for _, f := range res.Files {
		if f.Error != nil {
			res.OK = false
		}
	}
	res.Seconds = time.Since(start).Seconds()
	return emit(res)
}

// listEra1 lists DIR's *.era1 files (of the network, if given) in name order, i.e. epoch order.
func listEra1(dir, network string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || filepath.Ext(name) != ".era1" {
			continue
		}
		if network != "" && !strings.HasPrefix(name, network+"-") {
			continue
		}
		names = append(names, name)
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no era1 files in %s", dir)
	}
	return names, nil
}

// fileNetwork is the network part of an era1 file name (<network>-<epoch>-<root>.era1).
func fileNetwork(name string) string {
	network, _, _ := strings.Cut(name, "-")
	return network
}

func readEra1File(path string, keepBlocks, detail bool) *eraFile {
	res := &eraFile{File: filepath.Base(path)}
	if err := guard(func() error { return readEra1(path, res, keepBlocks, detail) }); err != nil {
		res.fail(err)
	}
	return res
}

// readEra1 iterates a file with go-ethereum's era1 reader and makes the checks of go-ethereum's
// `era verify` (tx and receipt roots, recomputed accumulator) and a few more.
func readEra1(path string, res *eraFile, keepBlocks, detail bool) error {
	e, err := onedb.Open(path)
	if err != nil {
		return err
	}
	defer e.Close()
	res.Start, res.Count = e.Start(), e.Count()
	res.Epoch = res.Start / uint64(era.MaxSize)
	stored, err := e.Accumulator()
	if err != nil {
		return fmt.Errorf("reading the accumulator: %w", err)
	}
	res.Accumulator = hexHash(stored)
	res.NameOK = res.File == onedb.Filename(fileNetwork(res.File), int(res.Epoch), stored)
	initial, err := e.InitialTD()
	if err != nil {
		return fmt.Errorf("reading the initial total difficulty: %w", err)
	}
	res.InitialTD = decimal(initial)
	it, err := e.Iterator()
	if err != nil {
		return fmt.Errorf("making the iterator: %w", err)
	}
	tdIt, ok := it.(*onedb.Iterator)
	if !ok {
		return fmt.Errorf("unexpected iterator type %T", it)
	}
	var (
		hashes   []common.Hash
		tds      []*big.Int
		prevTD   = new(big.Int).Set(initial)
		prevHash common.Hash
	)
	for it.Next() {
		n := it.Number()
		block, receipts, err := it.BlockAndReceipts()
		if err != nil {
			return fmt.Errorf("block %d: %w", n, err)
		}
		td, err := tdIt.TotalDifficulty()
		if err != nil {
			return fmt.Errorf("block %d: total difficulty: %w", n, err)
		}
		hash := block.Hash()
		b := eraBlock{
			Number: n, Hash: hexHash(hash), TD: decimal(td),
			Txs: len(block.Transactions()), Uncles: len(block.Uncles()), Receipts: len(receipts),
		}
		if detail {
			if b.Transactions, err = txDetails(block.Transactions()); err != nil {
				return fmt.Errorf("block %d: %w", n, err)
			}
			b.ReceiptDetails = receiptDetails(receipts)
		}
		res.add(b, keepBlocks)
		res.FinalTD = decimal(td)
		if block.NumberU64() != n {
			return fmt.Errorf("block %d: the header says number %d", n, block.NumberU64())
		}
		if n > res.Start && block.ParentHash() != prevHash {
			return fmt.Errorf("block %d: parent hash %x is not the previous block's hash %x", n, block.ParentHash(), prevHash)
		}
		if want := new(big.Int).Add(prevTD, block.Difficulty()); td.Cmp(want) != 0 {
			return fmt.Errorf("block %d: total difficulty %v, want previous %v + difficulty %v = %v", n, td, prevTD, block.Difficulty(), want)
		}
		if got := types.DeriveSha(block.Transactions(), trie.NewStackTrie(nil)); got != block.TxHash() {
			return fmt.Errorf("block %d: tx root mismatch: header %x, computed %x", n, block.TxHash(), got)
		}
		if got := types.DeriveSha(receipts, trie.NewStackTrie(nil)); got != block.ReceiptHash() {
			return fmt.Errorf("block %d: receipt root mismatch: header %x, computed %x", n, block.ReceiptHash(), got)
		}
		if got := types.CalcUncleHash(block.Uncles()); got != block.UncleHash() {
			return fmt.Errorf("block %d: uncle hash mismatch: header %x, computed %x", n, block.UncleHash(), got)
		}
		if len(receipts) != len(block.Transactions()) {
			return fmt.Errorf("block %d: %d receipts for %d transactions", n, len(receipts), len(block.Transactions()))
		}
		// The accumulator covers pre-merge blocks only (difficulty > 0), as in go-ethereum.
		if block.Difficulty().Sign() > 0 {
			hashes = append(hashes, hash)
			tds = append(tds, td)
		}
		prevTD, prevHash = td, hash
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("block %d: %w", it.Number(), err)
	}
	if uint64(res.BlocksRead) != res.Count {
		return fmt.Errorf("the block index lists %d blocks, the iterator gave %d", res.Count, res.BlocksRead)
	}
	return checkAccumulator(res, stored, hashes, tds)
}

func checkAccumulator(res *eraFile, stored common.Hash, hashes []common.Hash, tds []*big.Int) error {
	got, err := era.ComputeAccumulator(hashes, tds)
	if err != nil {
		return fmt.Errorf("computing the accumulator: %w", err)
	}
	res.AccumulatorComputed = hexHash(got)
	res.AccumulatorOK = got == stored
	if !res.AccumulatorOK {
		return fmt.Errorf("accumulator mismatch: stored %x, computed %x", stored, got)
	}
	return nil
}

// importEra1 runs geth's history import over the files that form a chain from epoch 0 and
// reads the result back from the database.
func importEra1(res *era1Result, names []string, genesisFile, keepDir string, keepBlocks, detail bool, export exportFlags) error {
	if res.Network == "" {
		res.Network = fileNetwork(names[0])
		for _, name := range names {
			if fileNetwork(name) != res.Network {
				return fmt.Errorf("era1 files of several networks in %s: pass --network", res.Dir)
			}
		}
	}
	genesis, err := networkGenesis(res.Network, genesisFile)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "gethharness-import-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	datadir := filepath.Join(tmp, "datadir")
	if keepDir != "" {
		if _, err := os.Stat(keepDir); err == nil {
			return fmt.Errorf("--datadir %s already exists", keepDir)
		}
		datadir, res.Datadir = keepDir, keepDir
	}

	// geth's history import takes a directory with epochs 0, 1, 2, ... and a checksums.txt.
	staging := filepath.Join(tmp, "era1")
	if err := os.Mkdir(staging, 0o755); err != nil {
		return err
	}
	var sums []string
	for _, name := range names {
		abs, err := filepath.Abs(filepath.Join(res.Dir, name))
		if err != nil {
			return err
		}
		if err := os.Symlink(abs, filepath.Join(staging, name)); err != nil {
			return err
		}
	}
	importable := names
	var gapErr error
	if _, err := era.ReadDir(staging, res.Network); err != nil {
		gapErr = err
		importable = nil
		for i, name := range names {
			parts := strings.Split(name, "-")
			if len(parts) < 3 {
				break
			}
			if epoch, perr := strconv.Atoi(parts[1]); perr != nil || epoch != i {
				break
			}
			importable = append(importable, name)
		}
		for _, name := range names[len(importable):] {
			if err := os.Remove(filepath.Join(staging, name)); err != nil {
				return err
			}
		}
	}
	for _, name := range importable {
		sum, err := fileSHA256(filepath.Join(staging, name))
		if err != nil {
			return err
		}
		sums = append(sums, sum)
	}
	if err := os.WriteFile(filepath.Join(staging, "checksums.txt"), []byte(strings.Join(sums, "\n")+"\n"), 0o644); err != nil {
		return err
	}

	files := make([]*eraFile, len(names))
	for i, name := range names {
		f := &eraFile{File: name}
		imported := false
		f.Imported = &imported
		files[i] = f
		res.Files = append(res.Files, f)
		if err := guard(func() error { return readEra1Meta(filepath.Join(res.Dir, name), f) }); err != nil {
			f.fail(err)
		}
		if i >= len(importable) {
			f.fail(fmt.Errorf("not imported: geth's history import starts at genesis and takes epochs 0, 1, 2, ... of one network (%v)", gapErr))
		}
	}
	if len(importable) == 0 {
		return nil
	}

	chaindata := filepath.Join(datadir, "chaindata")
	kv, err := pebble.New(chaindata, 64, 64, "", false)
	if err != nil {
		return err
	}
	db, err := rawdb.Open(kv, rawdb.OpenOptions{Ancient: filepath.Join(chaindata, "ancient")})
	if err != nil {
		kv.Close()
		return err
	}
	defer db.Close()
	engine, err := ethconfig.CreateConsensusEngine(genesis.Config, db)
	if err != nil {
		return err
	}
	chain, err := core.NewBlockChain(db, genesis, engine, core.DefaultConfig())
	if err != nil {
		return err
	}
	importErr := guard(func() error { return utils.ImportHistory(chain, staging, res.Network, onedb.From) })
	if importErr != nil {
		msg := importErr.Error()
		res.ImportError = &msg
	}
	if export.dir != "" {
		res.Export = exportEre(chain, res.Network, export, chain.CurrentSnapBlock().Number.Uint64())
	}
	chain.Stop()
	return readImported(db, files[:len(importable)], importErr, keepBlocks, detail)
}

// readEra1Meta reads what the import does not keep: the file's range and stored accumulator.
func readEra1Meta(path string, f *eraFile) error {
	e, err := onedb.Open(path)
	if err != nil {
		return err
	}
	defer e.Close()
	f.Start, f.Count = e.Start(), e.Count()
	f.Epoch = f.Start / uint64(era.MaxSize)
	stored, err := e.Accumulator()
	if err != nil {
		return fmt.Errorf("reading the accumulator: %w", err)
	}
	f.Accumulator = hexHash(stored)
	f.NameOK = f.File == onedb.Filename(fileNetwork(f.File), int(f.Epoch), stored)
	return nil
}

// readImported reads the imported chain back with core/rawdb, file by file. TD is the running
// sum of the stored headers' difficulties (go-ethereum >= 1.15 keeps no TD).
func readImported(db ethdb.Reader, files []*eraFile, importErr error, keepBlocks, detail bool) error {
	td := new(big.Int)
	n := uint64(0)
	for i, f := range files {
		if err := readImportedFile(db, f, &n, td, importErr, keepBlocks, detail); err != nil {
			if f.Error == nil {
				f.fail(err)
			}
			for _, later := range files[i+1:] {
				if later.Error == nil {
					later.fail(fmt.Errorf("not read back: %s failed", f.File))
				}
			}
			return nil
		}
		imported := true
		f.Imported = &imported
	}
	return nil
}

func readImportedFile(db ethdb.Reader, f *eraFile, n *uint64, td *big.Int, importErr error, keepBlocks, detail bool) error {
	if f.Error != nil {
		return errors.New(*f.Error)
	}
	var (
		hashes []common.Hash
		tds    []*big.Int
	)
	f.InitialTD = td.String()
	for ; *n < f.Start+f.Count; *n++ {
		b, diff, err := readImportedBlock(db, *n, detail)
		if err != nil {
			if importErr != nil {
				err = fmt.Errorf("%w (the import failed: %v)", err, importErr)
			}
			return err
		}
		td.Add(td, diff)
		b.TD = td.String()
		f.add(b, keepBlocks)
		f.FinalTD = b.TD
		if diff.Sign() > 0 {
			hashes = append(hashes, common.HexToHash(b.Hash))
			tds = append(tds, new(big.Int).Set(td))
		}
	}
	return checkAccumulator(f, common.HexToHash(f.Accumulator), hashes, tds)
}

// readImportedBlock reads canonical block n from the database: hash, header, body, receipts.
func readImportedBlock(db ethdb.Reader, n uint64, detail bool) (eraBlock, *big.Int, error) {
	d, err := readDBBlock(db, n, detail)
	if err != nil {
		return eraBlock{}, nil, err
	}
	return eraBlock{
		Number: n, Hash: hexHash(d.hash),
		Txs: len(d.body.Transactions), Uncles: len(d.body.Uncles), Receipts: len(d.receipts),
		Transactions: d.txs, ReceiptDetails: d.receiptDetails,
	}, d.header.Difficulty, nil
}

// dbBlock is a canonical block as core/rawdb reads it from a database go-ethereum wrote.
type dbBlock struct {
	hash           common.Hash
	header         *types.Header
	body           *types.Body
	receipts       types.Receipts
	txs            *[]txDetail      // --detail only
	receiptDetails *[]receiptDetail // --detail only
}

// readDBBlock reads canonical block n: hash, header, body, receipts (and their details).
func readDBBlock(db ethdb.Reader, n uint64, detail bool) (*dbBlock, error) {
	hash := rawdb.ReadCanonicalHash(db, n)
	if hash == (common.Hash{}) {
		return nil, fmt.Errorf("block %d: no canonical hash in the database", n)
	}
	header := rawdb.ReadHeader(db, hash, n)
	if header == nil {
		return nil, fmt.Errorf("block %d: no header %x in the database", n, hash)
	}
	if got := header.Hash(); got != hash {
		return nil, fmt.Errorf("block %d: header hashes to %x, canonical hash %x", n, got, hash)
	}
	body := rawdb.ReadBody(db, hash, n)
	if body == nil {
		return nil, fmt.Errorf("block %d: no body in the database", n)
	}
	if len(rawdb.ReadReceiptsRLP(db, hash, n)) == 0 {
		return nil, fmt.Errorf("block %d: no receipts in the database", n)
	}
	receipts := rawdb.ReadRawReceipts(db, hash, n)
	if receipts == nil {
		return nil, fmt.Errorf("block %d: receipts in the database do not decode", n)
	}
	d := &dbBlock{hash: hash, header: header, body: body, receipts: receipts}
	if detail {
		var err error
		if d.txs, err = txDetails(body.Transactions); err != nil {
			return nil, fmt.Errorf("block %d: %w", n, err)
		}
		d.receiptDetails = receiptDetails(receipts)
	}
	return d, nil
}

// networkGenesis is the genesis import mode starts from: a genesis JSON file, else the network's.
func networkGenesis(network, genesisFile string) (*core.Genesis, error) {
	if genesisFile != "" {
		data, err := os.ReadFile(genesisFile)
		if err != nil {
			return nil, err
		}
		genesis := new(core.Genesis)
		if err := json.Unmarshal(data, genesis); err != nil {
			return nil, fmt.Errorf("%s: %w", genesisFile, err)
		}
		return genesis, nil
	}
	switch network {
	case "mainnet":
		return core.DefaultGenesisBlock(), nil
	case "sepolia":
		return core.DefaultSepoliaGenesisBlock(), nil
	}
	return nil, fmt.Errorf("no genesis known for network %q: pass --genesis FILE", network)
}

// fileSHA256 is a file's SHA-256 as geth's checksums.txt spells it (0x + hex).
func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return common.BytesToHash(h.Sum(nil)).Hex(), nil
}
