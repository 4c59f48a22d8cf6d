package main

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"sort"
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
	"github.com/ethereum/go-ethereum/internal/era/execdb"
	"github.com/ethereum/go-ethereum/trie"
)

// execdb's component numbering (header, body, receipts, td, proof): Era.HasComponent takes
// the package's unexported componentType, which an untyped constant converts to. The
// receipts one is checked against Era.HasReceipts on every file, so a renumbering in
// go-ethereum shows as an error instead of a wrong answer.
const (
	ereReceiptsComponent = 2
	ereTDComponent       = 3
)

type ereBlock struct {
	Number      uint64  `json:"number"`
	Hash        string  `json:"hash"`
	TD          *string `json:"td"`
	Txs         int     `json:"txs"`
	Uncles      int     `json:"uncles"`
	Withdrawals int     `json:"withdrawals"`
	Receipts    *int    `json:"receipts"`
	// --detail only: the block's transactions and receipts (receipt_details is absent when
	// the file has no receipts).
	Transactions   *[]txDetail      `json:"transactions,omitempty"`
	ReceiptDetails *[]receiptDetail `json:"receipt_details,omitempty"`
}

type ereFile struct {
	File                string     `json:"file"`
	Error               *string    `json:"error"`
	Imported            *bool      `json:"imported,omitempty"`
	Epoch               uint64     `json:"epoch"`
	Start               uint64     `json:"start"`
	Count               uint64     `json:"count"`
	Components          uint64     `json:"components"`
	HasReceipts         bool       `json:"has_receipts"`
	HasTD               bool       `json:"has_td"`
	BlocksRead          int        `json:"blocks_read"`
	PreMergeBlocks      int        `json:"pre_merge_blocks"`
	FirstHash           string     `json:"first_hash"`
	LastHash            string     `json:"last_hash"`
	InitialTD           *string    `json:"initial_td"`
	FinalTD             *string    `json:"final_td"`
	Txs                 int        `json:"txs"`
	Uncles              int        `json:"uncles"`
	Withdrawals         int        `json:"withdrawals"`
	Receipts            *int       `json:"receipts"`
	Accumulator         *string    `json:"accumulator"`
	AccumulatorComputed *string    `json:"accumulator_computed"`
	AccumulatorOK       *bool      `json:"accumulator_ok"`
	NameOK              bool       `json:"name_ok"`
	Blocks              []ereBlock `json:"blocks,omitempty"`
}

type ereExportFile struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

type ereExport struct {
	Dir   string `json:"dir"`
	Via   string `json:"via"`
	First uint64 `json:"first"`
	Last  uint64 `json:"last"`
	// HeadBlock is the chain's current (full) block when the export starts; ExportHistory
	// lowers last to it ("Last block beyond head, setting last = head"), the loop does not.
	HeadBlock     uint64          `json:"head_block"`
	EffectiveLast uint64          `json:"effective_last"`
	Error         *string         `json:"error"`
	Files         []ereExportFile `json:"files"`
	Checksums     []string        `json:"checksums"`
}

type ereResult struct {
	OK          bool       `json:"ok"`
	Mode        string     `json:"mode"`
	Dir         string     `json:"dir"`
	Network     string     `json:"network"`
	GethVersion string     `json:"geth_version"`
	Files       []*ereFile `json:"files"`
	ImportError *string    `json:"import_error,omitempty"`
	Head        *uint64    `json:"head,omitempty"`
	Export      *ereExport `json:"export,omitempty"`
	Datadir     string     `json:"datadir,omitempty"`
	Seconds     float64    `json:"seconds"`
	// Mode import: the ImportHistory call alone (checksums, reading, decoding, inserting).
	ImportSeconds *float64 `json:"import_seconds,omitempty"`
}

type ereOptions struct {
	genesis, datadir string
	blocks, detail   bool
	export           exportFlags
}

// exportFlags are the export flags of `ere` and `era1` (both modes import): Ere files of the
// imported blocks first..last.
type exportFlags struct {
	dir, via    string
	first, last int64
}

func (x *exportFlags) register(fs *flag.FlagSet, dirFlag string) {
	fs.StringVar(&x.dir, dirFlag, "", "import mode: then export blocks --first..--last as Ere files into this directory (geth's ExportHistory)")
	fs.Int64Var(&x.first, "first", 0, "first block to export")
	fs.Int64Var(&x.last, "last", -1, "last block to export (default: the last block imported)")
	fs.StringVar(&x.via, "export-via", "history", "history (utils.ExportHistory) or loop (its per-block loop, without its clamp of --last to the current block)")
}

func (x *exportFlags) check(mode string) error {
	if x.dir != "" && mode != "import" {
		return errors.New("exporting needs --mode import")
	}
	if x.via != "history" && x.via != "loop" {
		return fmt.Errorf("unknown --export-via %q (expected history or loop)", x.via)
	}
	if x.first < 0 {
		return errors.New("--first must not be negative")
	}
	return nil
}

func (f *ereFile) fail(err error) {
	msg := f.File + ": " + err.Error()
	f.Error = &msg
}

func (f *ereFile) add(b ereBlock, difficulty *big.Int, keep bool) {
	if f.BlocksRead == 0 {
		f.FirstHash = b.Hash
	}
	f.LastHash = b.Hash
	f.BlocksRead++
	if difficulty.Sign() > 0 {
		f.PreMergeBlocks++
	}
	f.Txs += b.Txs
	f.Uncles += b.Uncles
	f.Withdrawals += b.Withdrawals
	if b.Receipts != nil {
		if f.Receipts == nil {
			f.Receipts = new(int)
		}
		*f.Receipts += *b.Receipts
	}
	if b.TD != nil {
		f.FinalTD = b.TD
	}
	if keep {
		f.Blocks = append(f.Blocks, b)
	}
}

func runEre(args []string) error {
	fs := flag.NewFlagSet("ere", flag.ContinueOnError)
	dir := fs.String("dir", "", "directory of Ere files")
	network := fs.String("network", "", "network name: the files' name prefix (<network>-<epoch>-...ere)")
	mode := fs.String("mode", "read", "read (go-ethereum's Ere reader) or import (geth's history import, then core/rawdb)")
	var o ereOptions
	fs.StringVar(&o.genesis, "genesis", "", "genesis JSON for import mode (needed for networks other than mainnet and sepolia)")
	fs.StringVar(&o.datadir, "datadir", "", "import mode: keep the datadir here (must not exist); default a removed temporary directory")
	o.export.register(fs, "export")
	fs.BoolVar(&o.blocks, "blocks", true, "list every block")
	fs.BoolVar(&o.detail, "detail", false, "list every block's transactions and receipts (test-size inputs)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" || *network == "" {
		return errors.New("ere: --dir and --network are required")
	}
	if err := o.export.check(*mode); err != nil {
		return fmt.Errorf("ere: %w", err)
	}
	names, err := listEre(*dir, *network)
	if err != nil {
		return err
	}
	start := time.Now()
	res := &ereResult{Mode: *mode, Dir: *dir, Network: *network, GethVersion: gethVersion()}
	switch *mode {
	case "read":
		for _, name := range names {
			res.Files = append(res.Files, readEreFile(filepath.Join(*dir, name), *network, o))
		}
	case "import":
		if err := importEre(res, names, o); err != nil {
			return err
		}
	default:
		return fmt.Errorf("ere: unknown --mode %q (expected read or import)", *mode)
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

// listEre lists DIR's *.ere files of the network in name order, i.e. epoch order.
func listEre(dir, network string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() && filepath.Ext(name) == ".ere" && strings.HasPrefix(name, network+"-") {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no %s-*.ere files in %s", network, dir)
	}
	sort.Strings(names)
	return names, nil
}

func readEreFile(path, network string, o ereOptions) *ereFile {
	res := &ereFile{File: filepath.Base(path)}
	if err := guard(func() error { return readEre(path, network, res, o) }); err != nil {
		res.fail(err)
	}
	return res
}

// ereComponents is the index's component count: the trailer's second-to-last u64 (the last
// is the block count). execdb keeps it unexported.
func ereComponents(path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if info.Size() < 16 {
		return 0, fmt.Errorf("%d bytes: too short for an Ere index", info.Size())
	}
	var b [8]byte
	if _, err := f.ReadAt(b[:], info.Size()-16); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

// readEreMeta opens a file with execdb.Open and fills in what its index and records say:
// range, components, whether receipts and TDs are present, the accumulator and the name check.
func readEreMeta(path, network string, f *ereFile) (*execdb.Era, error) {
	e, err := execdb.Open(path)
	if err != nil {
		return nil, err
	}
	f.Start, f.Count = e.Start(), e.Count()
	f.Epoch = f.Start / uint64(era.MaxSize)
	f.HasReceipts = e.HasReceipts()
	f.HasTD = e.HasComponent(ereTDComponent)
	if e.HasComponent(ereReceiptsComponent) != f.HasReceipts {
		e.Close()
		return nil, errors.New("execdb's component numbering changed: update ereReceiptsComponent and ereTDComponent")
	}
	if f.Components, err = ereComponents(path); err != nil {
		e.Close()
		return nil, fmt.Errorf("reading the index trailer: %w", err)
	}
	acc, err := e.Accumulator()
	switch {
	case errors.Is(err, io.EOF):
		// No accumulator record: a post-merge epoch (or a file written without one).
	case err != nil:
		e.Close()
		return nil, fmt.Errorf("reading the accumulator: %w", err)
	default:
		s := hexHash(acc)
		f.Accumulator = &s
	}
	last, err := e.GetHeader(f.Start + f.Count - 1)
	if err != nil {
		e.Close()
		return nil, fmt.Errorf("reading the last header: %w", err)
	}
	f.NameOK = f.File == execdb.Filename(network, int(f.Epoch), last.Hash())
	return e, nil
}

// readEre iterates a file with go-ethereum's Ere iterator and makes the checks of
// go-ethereum's `era verify` (tx and receipt roots, recomputed accumulator) and a few more.
func readEre(path, network string, res *ereFile, o ereOptions) error {
	e, err := readEreMeta(path, network, res)
	if err != nil {
		return err
	}
	defer e.Close()
	var prevTD *big.Int
	if res.HasTD {
		if prevTD, err = e.InitialTD(); err != nil {
			return fmt.Errorf("reading the initial total difficulty: %w", err)
		}
		s := decimal(prevTD)
		res.InitialTD = &s
	}
	it, err := e.Iterator()
	if err != nil {
		return fmt.Errorf("making the iterator: %w", err)
	}
	tdIt, ok := it.(*execdb.Iterator)
	if !ok {
		return fmt.Errorf("unexpected iterator type %T", it)
	}
	var (
		hashes   []common.Hash
		tds      []*big.Int
		prevHash common.Hash
	)
	for it.Next() {
		n := it.Number()
		block, err := it.Block()
		if err != nil {
			return fmt.Errorf("block %d: %w", n, err)
		}
		hash := block.Hash()
		b := ereBlock{
			Number: n, Hash: hexHash(hash),
			Txs: len(block.Transactions()), Uncles: len(block.Uncles()), Withdrawals: len(block.Withdrawals()),
		}
		var receipts types.Receipts
		if res.HasReceipts {
			// The slim receipts carry no bloom: the iterator recomputes it (types.CreateBloom),
			// so the receipts root below is over full receipts.
			if receipts, err = it.Receipts(); err != nil {
				return fmt.Errorf("block %d: %w", n, err)
			}
			count := len(receipts)
			b.Receipts = &count
		}
		var td *big.Int
		if res.HasTD {
			if td, err = tdIt.TotalDifficulty(); err != nil {
				return fmt.Errorf("block %d: total difficulty: %w", n, err)
			}
			s := decimal(td)
			b.TD = &s
		}
		if o.detail {
			if b.Transactions, err = txDetails(block.Transactions()); err != nil {
				return fmt.Errorf("block %d: %w", n, err)
			}
			if res.HasReceipts {
				b.ReceiptDetails = receiptDetails(receipts)
			}
		}
		res.add(b, block.Difficulty(), o.blocks)
		if err := checkEreBlock(block, receipts, res, n, prevHash, prevTD, td); err != nil {
			return err
		}
		// The accumulator covers pre-merge blocks only (difficulty > 0), as in go-ethereum.
		if block.Difficulty().Sign() > 0 && td != nil {
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
	return checkEreAccumulator(res, hashes, tds)
}

// checkEreBlock makes the per-block checks: number, parent link, TD = previous TD +
// difficulty (post-merge blocks of a transition epoch keep the final TD), tx, uncle,
// withdrawals and receipt roots.
func checkEreBlock(block *types.Block, receipts types.Receipts, f *ereFile, n uint64, prevHash common.Hash, prevTD, td *big.Int) error {
	if block.NumberU64() != n {
		return fmt.Errorf("block %d: the header says number %d", n, block.NumberU64())
	}
	if n > f.Start && block.ParentHash() != prevHash {
		return fmt.Errorf("block %d: parent hash %x is not the previous block's hash %x", n, block.ParentHash(), prevHash)
	}
	if td != nil {
		if want := new(big.Int).Add(prevTD, block.Difficulty()); td.Cmp(want) != 0 {
			return fmt.Errorf("block %d: total difficulty %v, want previous %v + difficulty %v = %v", n, td, prevTD, block.Difficulty(), want)
		}
	}
	if got := types.DeriveSha(block.Transactions(), trie.NewStackTrie(nil)); got != block.TxHash() {
		return fmt.Errorf("block %d: tx root mismatch: header %x, computed %x", n, block.TxHash(), got)
	}
	if got := types.CalcUncleHash(block.Uncles()); got != block.UncleHash() {
		return fmt.Errorf("block %d: uncle hash mismatch: header %x, computed %x", n, block.UncleHash(), got)
	}
	if wh := block.Header().WithdrawalsHash; wh != nil {
		if block.Withdrawals() == nil {
			return fmt.Errorf("block %d: the header has a withdrawals root, the body no withdrawals", n)
		}
		if got := types.DeriveSha(block.Withdrawals(), trie.NewStackTrie(nil)); got != *wh {
			return fmt.Errorf("block %d: withdrawals root mismatch: header %x, computed %x", n, *wh, got)
		}
	} else if block.Withdrawals() != nil {
		return fmt.Errorf("block %d: withdrawals in a body whose header has no withdrawals root", n)
	}
	if f.HasReceipts {
		if got := types.DeriveSha(receipts, trie.NewStackTrie(nil)); got != block.ReceiptHash() {
			return fmt.Errorf("block %d: receipt root mismatch: header %x, computed %x", n, block.ReceiptHash(), got)
		}
	}
	return nil
}

// checkEreAccumulator recomputes the accumulator of a file that has one, over its pre-merge
// blocks' (hash, TD) records.
func checkEreAccumulator(f *ereFile, hashes []common.Hash, tds []*big.Int) error {
	if f.Accumulator == nil {
		return nil
	}
	got, err := era.ComputeAccumulator(hashes, tds)
	if err != nil {
		return fmt.Errorf("computing the accumulator: %w", err)
	}
	s := hexHash(got)
	ok := s == *f.Accumulator
	f.AccumulatorComputed, f.AccumulatorOK = &s, &ok
	if !ok {
		return fmt.Errorf("accumulator mismatch: stored %s, computed %s", *f.Accumulator, s)
	}
	return nil
}

// importEre runs geth's history import (ImportHistory with execdb.From) over DIR, reads the
// result back from the database and, with --export, exports it again with ExportHistory.
func importEre(res *ereResult, names []string, o ereOptions) error {
	genesis, err := networkGenesis(res.Network, o.genesis)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "gethharness-ere-import-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	datadir := filepath.Join(tmp, "datadir")
	if o.datadir != "" {
		if _, err := os.Stat(o.datadir); err == nil {
			return fmt.Errorf("--datadir %s already exists", o.datadir)
		}
		datadir, res.Datadir = o.datadir, o.datadir
	}

	// geth's import reads a directory and writes nothing into it but wants a checksums.txt:
	// a staging directory holds links to every era file of DIR (any network, .era1 too, so
	// geth's era.ReadDir sees what DIR holds) and the checksums of the files it would import.
	staging := filepath.Join(tmp, "era")
	if err := os.Mkdir(staging, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(res.Dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		ext := filepath.Ext(e.Name())
		if e.IsDir() || (ext != ".ere" && ext != ".era1") {
			continue
		}
		abs, err := filepath.Abs(filepath.Join(res.Dir, e.Name()))
		if err != nil {
			return err
		}
		if err := os.Symlink(abs, filepath.Join(staging, e.Name())); err != nil {
			return err
		}
	}
	var sums []string
	if listed, err := era.ReadDir(staging, res.Network); err == nil {
		for _, name := range listed {
			sum, err := fileSHA256(filepath.Join(staging, name))
			if err != nil {
				return err
			}
			sums = append(sums, sum)
		}
	} // else ImportHistory fails on the same era.ReadDir call, with go-ethereum's message.
	if err := os.WriteFile(filepath.Join(staging, "checksums.txt"), []byte(strings.Join(sums, "\n")+"\n"), 0o644); err != nil {
		return err
	}

	for _, name := range names {
		f := &ereFile{File: name}
		imported := false
		f.Imported = &imported
		res.Files = append(res.Files, f)
		if err := guard(func() error {
			e, err := readEreMeta(filepath.Join(res.Dir, name), res.Network, f)
			if err == nil {
				e.Close()
			}
			return err
		}); err != nil {
			f.fail(err)
		}
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
	defer chain.Stop()
	importStart := time.Now()
	importErr := guard(func() error { return utils.ImportHistory(chain, staging, res.Network, execdb.From) })
	importSeconds := time.Since(importStart).Seconds()
	res.ImportSeconds = &importSeconds
	if importErr != nil {
		msg := importErr.Error()
		res.ImportError = &msg
	}
	head := chain.CurrentSnapBlock().Number.Uint64()
	res.Head = &head
	readImportedEre(db, res.Dir, res.Files, importErr, o)
	if o.export.dir != "" {
		res.Export = exportEre(chain, res.Network, o.export, head)
	}
	return nil
}

// readImportedEre reads the imported chain back with core/rawdb, file by file. TD is the
// running sum of the stored headers' difficulties (go-ethereum >= 1.15 keeps no TD).
func readImportedEre(db ethdb.Reader, dir string, files []*ereFile, importErr error, o ereOptions) {
	td := new(big.Int)
	n := uint64(0)
	for i, f := range files {
		if f.Error == nil {
			err := guard(func() error { return readImportedEreFile(db, filepath.Join(dir, f.File), f, &n, td, o) })
			if err == nil {
				imported := true
				f.Imported = &imported
				continue
			}
			if importErr != nil {
				err = fmt.Errorf("%w (the import failed: %v)", err, importErr)
			}
			f.fail(err)
		}
		// The chain read back stops at the first file that failed.
		for _, later := range files[i+1:] {
			if later.Error == nil {
				later.fail(fmt.Errorf("not read back: %s failed", f.File))
			}
		}
		return
	}
}

// The database's blocks are compared with the file's headers: geth's history import skips
// block 0 and keeps the genesis it was started with, whatever the file holds.
func readImportedEreFile(db ethdb.Reader, path string, f *ereFile, n *uint64, td *big.Int, o ereOptions) error {
	if *n != f.Start {
		return fmt.Errorf("starts at block %d, not at the next block of the chain read back (%d)", f.Start, *n)
	}
	e, err := execdb.Open(path)
	if err != nil {
		return err
	}
	defer e.Close()
	var (
		hashes []common.Hash
		tds    []*big.Int
	)
	s := td.String()
	f.InitialTD = &s
	for ; *n < f.Start+f.Count; *n++ {
		d, err := readDBBlock(db, *n, o.detail)
		if err != nil {
			return err
		}
		header, err := e.GetHeader(*n)
		if err != nil {
			return fmt.Errorf("block %d: reading the file's header: %w", *n, err)
		}
		if header.Hash() != d.hash {
			return fmt.Errorf("block %d: the database holds %x, the file %x", *n, d.hash, header.Hash())
		}
		td.Add(td, d.header.Difficulty)
		tdStr := td.String()
		count := len(d.receipts)
		b := ereBlock{
			Number: *n, Hash: hexHash(d.hash), TD: &tdStr,
			Txs: len(d.body.Transactions), Uncles: len(d.body.Uncles), Withdrawals: len(d.body.Withdrawals),
			Receipts: &count, Transactions: d.txs, ReceiptDetails: d.receiptDetails,
		}
		f.add(b, d.header.Difficulty, o.blocks)
		if d.header.Difficulty.Sign() > 0 {
			hashes = append(hashes, d.hash)
			tds = append(tds, new(big.Int).Set(td))
		}
	}
	return checkEreAccumulator(f, hashes, tds)
}

// exportEre exports blocks first..last of the imported chain as Ere files (execdb.NewBuilder).
// geth names the files after the chain id's network name ("unknown" for a private chain): the
// harness gives the network named on the command line instead.
func exportEre(chain *core.BlockChain, network string, o exportFlags, head uint64) *ereExport {
	last := head
	if o.last >= 0 {
		last = uint64(o.last)
	}
	x := &ereExport{
		Dir: o.dir, Via: o.via, First: uint64(o.first), Last: last,
		HeadBlock: chain.CurrentBlock().Number.Uint64(), EffectiveLast: last, Files: []ereExportFile{},
	}
	filename := func(_ string, epoch int, h common.Hash) string { return execdb.Filename(network, epoch, h) }
	var err error
	if o.via == "history" {
		if x.HeadBlock < last {
			x.EffectiveLast = x.HeadBlock
		}
		err = guard(func() error {
			return utils.ExportHistory(chain, o.dir, x.First, x.Last, execdb.NewBuilder, filename)
		})
	} else {
		err = guard(func() error { return exportLoop(chain, o.dir, x.First, x.Last, filename) })
	}
	if err != nil {
		msg := err.Error()
		x.Error = &msg
	}
	entries, rerr := os.ReadDir(o.dir)
	if rerr != nil {
		if err == nil {
			msg := rerr.Error()
			x.Error = &msg
		}
		return x
	}
	for _, e := range entries {
		if e.IsDir() || filepath.Ext(e.Name()) != ".ere" {
			continue
		}
		path := filepath.Join(o.dir, e.Name())
		data, ferr := os.ReadFile(path)
		if ferr != nil {
			msg := ferr.Error()
			x.Error = &msg
			continue
		}
		sum := sha256.Sum256(data)
		x.Files = append(x.Files, ereExportFile{Name: e.Name(), Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])})
	}
	if sums, serr := os.ReadFile(filepath.Join(o.dir, "checksums.txt")); serr == nil {
		x.Checksums = strings.Fields(string(sums))
	}
	return x
}

// exportLoop is go-ethereum v1.17.10's utils.ExportHistory (cmd/utils/cmd.go) without its
// first step, which lowers last to chain.CurrentBlock(): a history import (InsertReceiptChain)
// moves only the snap-sync head, the current block stays at genesis until the state is
// synced, so ExportHistory of an imported history without state writes block 0 only. The
// rest is ExportHistory's: the same chain accessors (GetBlockByNumber, GetReceiptsByHash),
// the TD summed from genesis for pre-merge blocks (nil after the merge), the builder fed
// block by block, one file per 8,192 blocks from first, named by the builder's identifier,
// and checksums.txt.
func exportLoop(bc *core.BlockChain, dir string, first, last uint64, filename func(string, int, common.Hash) string) error {
	if err := os.MkdirAll(dir, os.ModePerm); err != nil {
		return fmt.Errorf("error creating output directory: %w", err)
	}
	var (
		td        = new(big.Int)
		checksums []string
	)
	b := bc.GetBlockByNumber(first)
	if b == nil {
		return fmt.Errorf("block #%d not found", first)
	}
	if first > 0 && b.Difficulty().Sign() != 0 {
		for i := uint64(0); i < first; i++ {
			b := bc.GetBlockByNumber(i)
			if b == nil {
				return fmt.Errorf("block #%d not found while computing initial TD", i)
			}
			td.Add(td, b.Difficulty())
		}
	}
	for batch := first; batch <= last; batch += uint64(era.MaxSize) {
		idx := int(batch / uint64(era.MaxSize))
		tmpPath := filepath.Join(dir, filename("", idx, common.Hash{}))
		if err := func() error {
			f, err := os.Create(tmpPath)
			if err != nil {
				return err
			}
			defer f.Close()
			builder := execdb.NewBuilder(f)
			for j := uint64(0); j < uint64(era.MaxSize) && batch+j <= last; j++ {
				n := batch + j
				block := bc.GetBlockByNumber(n)
				if block == nil {
					return fmt.Errorf("block #%d not found", n)
				}
				receipts := bc.GetReceiptsByHash(block.Hash())
				if receipts == nil {
					return fmt.Errorf("receipts for #%d missing", n)
				}
				var blockTD *big.Int
				if block.Difficulty().Sign() != 0 {
					td.Add(td, block.Difficulty())
					blockTD = new(big.Int).Set(td)
				}
				if err := builder.Add(block, receipts, blockTD); err != nil {
					return err
				}
			}
			id, err := builder.Finalize()
			if err != nil {
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			sum, err := fileSHA256(tmpPath)
			if err != nil {
				return err
			}
			checksums = append(checksums, sum)
			return os.Rename(tmpPath, filepath.Join(dir, filename("", idx, id)))
		}(); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, "checksums.txt"), []byte(strings.Join(checksums, "\n")), os.ModePerm)
}
