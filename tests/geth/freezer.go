package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/rawdb"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethdb"
	"github.com/ethereum/go-ethereum/ethdb/memorydb"
	"github.com/ethereum/go-ethereum/rlp"
)

type freezerBlock struct {
	Number        uint64  `json:"number"`
	Hash          string  `json:"hash"`
	HeaderRLPHash string  `json:"header_rlp_hash"`
	HeaderHash    string  `json:"header_hash"`
	ParentHash    string  `json:"parent_hash"`
	HashOK        bool    `json:"hash_ok"`
	Txs           *int    `json:"txs"`
	Uncles        *int    `json:"uncles"`
	Receipts      *int    `json:"receipts"`
	Error         *string `json:"error"`
	// --detail only: the block's transactions and receipts.
	Transactions   *[]txDetail      `json:"transactions,omitempty"`
	ReceiptDetails *[]receiptDetail `json:"receipt_details,omitempty"`
}

type freezerResult struct {
	OK            bool           `json:"ok"`
	Dir           string         `json:"dir"`
	ChainDir      string         `json:"chain_dir"`
	GethVersion   string         `json:"geth_version"`
	Opened        string         `json:"opened"`
	ReadonlyError *string        `json:"readonly_error"`
	Tables        []string       `json:"tables"`
	Ancients      uint64         `json:"ancients"`
	BlockDataTail uint64         `json:"blockdata_tail"`
	Errors        int            `json:"errors"`
	Blocks        []freezerBlock `json:"blocks,omitempty"`
}

func runFreezer(args []string) error {
	fs := flag.NewFlagSet("freezer", flag.ContinueOnError)
	dir := fs.String("dir", "", "ancient directory (holding chain/) or a chain freezer directory")
	inPlace := fs.Bool("in-place", false, "open DIR itself read-only instead of a copy (needs a writable DIR for geth's FLOCK; no read-write fallback)")
	blocks := fs.Bool("blocks", true, "list every block")
	detail := fs.Bool("detail", false, "list every block's transactions and receipts (test-size inputs)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("freezer: --dir is required")
	}
	// geth's own resolution: <ancient>/chain if it exists, else the legacy layout (tables in
	// <ancient> itself).
	chainDir := *dir
	if info, err := os.Stat(filepath.Join(*dir, "chain")); err == nil && info.IsDir() {
		chainDir = filepath.Join(*dir, "chain")
	}
	res := &freezerResult{Dir: *dir, ChainDir: chainDir, GethVersion: gethVersion()}
	tables, err := freezerTables(chainDir)
	if err != nil {
		return err
	}
	res.Tables = tables

	ancient := *dir
	if !*inPlace {
		tmp, err := os.MkdirTemp("", "gethharness-freezer-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		ancient = filepath.Join(tmp, "ancient")
		if err := copyFiles(chainDir, filepath.Join(ancient, "chain")); err != nil {
			return err
		}
	}
	db, err := rawdb.Open(memorydb.New(), rawdb.OpenOptions{Ancient: ancient, ReadOnly: true})
	res.Opened = "readonly"
	if err != nil {
		msg := err.Error()
		res.ReadonlyError = &msg
		if *inPlace {
			return fmt.Errorf("go-ethereum cannot open %s read-only: %w", chainDir, err)
		}
		db, err = rawdb.Open(memorydb.New(), rawdb.OpenOptions{Ancient: ancient})
		if err != nil {
			return fmt.Errorf("go-ethereum cannot open %s read-only (%s) nor read-write: %w", chainDir, msg, err)
		}
		res.Opened = "readwrite-copy"
	}
	defer db.Close()
	if res.Ancients, err = db.Ancients(); err != nil {
		return err
	}
	if res.BlockDataTail, err = db.Tail(rawdb.ChainFreezerBlockDataGroup); err != nil {
		return err
	}
	for n := uint64(0); n < res.Ancients; n++ {
		var b freezerBlock
		if err := guard(func() error { b = readFreezerBlock(db, n, *detail); return nil }); err != nil {
			msg := err.Error()
			b = freezerBlock{Number: n, Error: &msg}
		}
		if b.Error != nil {
			res.Errors++
		}
		if *blocks {
			res.Blocks = append(res.Blocks, b)
		}
	}
	res.OK = res.Errors == 0
	return emit(res)
}

// readFreezerBlock reads item n of the chain tables through core/rawdb's accessors.
func readFreezerBlock(db ethdb.Database, n uint64, detail bool) freezerBlock {
	b := freezerBlock{Number: n}
	fail := func(format string, args ...any) freezerBlock {
		msg := fmt.Sprintf(format, args...)
		b.Error = &msg
		return b
	}
	hash := rawdb.ReadCanonicalHash(db, n)
	b.Hash = hexHash(hash)
	raw, err := db.Ancient(rawdb.ChainFreezerHeaderTable, n)
	if err != nil {
		return fail("header: %v", err)
	}
	b.HeaderRLPHash = hexHash(crypto.Keccak256Hash(raw))
	var header types.Header
	if err := rlp.DecodeBytes(raw, &header); err != nil {
		return fail("header: %v", err)
	}
	b.HeaderHash = hexHash(header.Hash())
	b.ParentHash = hexHash(header.ParentHash)
	// rawdb.ReadHeader returns a frozen header only if its RLP hashes to the canonical hash.
	b.HashOK = hash != (common.Hash{}) && b.HeaderRLPHash == b.Hash && b.HeaderHash == b.Hash &&
		header.Number != nil && header.Number.Uint64() == n && rawdb.ReadHeader(db, hash, n) != nil
	if !b.HashOK {
		return fail("hashes table %s, header RLP hashes to %s, decoded header to %s (number %v)", b.Hash, b.HeaderRLPHash, b.HeaderHash, header.Number)
	}
	body := rawdb.ReadBody(db, hash, n)
	if body == nil {
		return fail("no body (rawdb.ReadBody)")
	}
	txs, uncles := len(body.Transactions), len(body.Uncles)
	b.Txs, b.Uncles = &txs, &uncles
	if len(rawdb.ReadReceiptsRLP(db, hash, n)) == 0 {
		return fail("no receipts (rawdb.ReadReceiptsRLP)")
	}
	receipts := rawdb.ReadRawReceipts(db, hash, n)
	if receipts == nil {
		return fail("receipts do not decode (rawdb.ReadRawReceipts)")
	}
	count := len(receipts)
	b.Receipts = &count
	if count != txs {
		return fail("%d receipts for %d transactions", count, txs)
	}
	if detail {
		if b.Transactions, err = txDetails(body.Transactions); err != nil {
			return fail("%v", err)
		}
		b.ReceiptDetails = receiptDetails(receipts)
	}
	return b
}

// freezerTables names the tables of a freezer directory (from their index files).
func freezerTables(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var tables []string
	for _, e := range entries {
		name := e.Name()
		if ext := filepath.Ext(name); !e.IsDir() && (ext == ".cidx" || ext == ".ridx") {
			tables = append(tables, strings.TrimSuffix(name, ext))
		}
	}
	if len(tables) == 0 {
		return nil, fmt.Errorf("%s holds no freezer tables (*.cidx, *.ridx)", dir)
	}
	sort.Strings(tables)
	return tables, nil
}

// copyFiles copies the regular files of src (not its subdirectories) into dst.
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
		if err := copyFile(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
