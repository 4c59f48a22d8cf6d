package main

// Checkpoint subcommands of the oracle: flow-go v0.33.1's own checkpoint writer
// (wal.StoreCheckpointV6Concurrently) and reader (wal.LoadCheckpoint, which dispatches on the
// version and reads v6 with OpenAndReadCheckpointV6's code path).

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/rs/zerolog"

	"github.com/onflow/flow-go/ledger"
	"github.com/onflow/flow-go/ledger/common/pathfinder"
	"github.com/onflow/flow-go/ledger/complete/mtrie"
	"github.com/onflow/flow-go/ledger/complete/mtrie/trie"
	"github.com/onflow/flow-go/ledger/complete/wal"
)

type trieInfo struct {
	Root     string `json:"root"`
	RegCount uint64 `json:"reg_count"`
	RegSize  uint64 `json:"reg_size"`
	// Only with --verify: non-empty payloads counted by walking the trie, and whether every
	// node hash recomputes (MTrie.IsAValidTrie).
	Registers *int  `json:"registers,omitempty"`
	Valid     *bool `json:"valid,omitempty"`
}

func describe(tries []*trie.MTrie, verify bool) []trieInfo {
	out := make([]trieInfo, 0, len(tries))
	for _, t := range tries {
		ti := trieInfo{Root: hexRoot(t.RootHash()), RegCount: t.AllocatedRegCount(), RegSize: t.AllocatedRegSize()}
		if verify {
			n := 0
			for _, p := range t.AllPayloads() {
				if !p.IsEmpty() {
					n++
				}
			}
			valid := t.IsAValidTrie()
			ti.Registers, ti.Valid = &n, &valid
		}
		out = append(out, ti)
	}
	return out
}

// replayForest rebuilds a forest from a WAL directory with DiskWAL.Replay (in a scratch
// directory of symlinks, so the input stays untouched) and returns it with the last root.
func replayForest(dir string, capacity int) (*mtrie.Forest, ledger.RootHash, error) {
	last := trie.EmptyTrieRootHash()
	scratch, err := os.MkdirTemp("", "flowgo-cp-")
	if err != nil {
		return nil, last, err
	}
	defer os.RemoveAll(scratch)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, last, err
	}
	for _, e := range entries {
		src, err := filepath.Abs(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, last, err
		}
		if err := os.Symlink(src, filepath.Join(scratch, e.Name())); err != nil {
			return nil, last, err
		}
	}
	diskWAL, err := wal.NewDiskWAL(zerolog.Nop(), nil, noopMetrics{}, scratch, capacity, pathfinder.PathByteSize, wal.SegmentSize)
	if err != nil {
		return nil, last, err
	}
	defer func() { <-diskWAL.Done() }()
	forest, err := mtrie.NewForest(capacity, noopMetrics{}, nil)
	if err != nil {
		return nil, last, err
	}
	err = diskWAL.Replay(
		func(tries []*trie.MTrie) error { return forest.AddTries(tries) },
		func(u *ledger.TrieUpdate) error {
			root, err := forest.Update(u)
			last = root
			return err
		},
		func(ledger.RootHash) error { return nil },
	)
	return forest, last, err
}

type checkpointResult struct {
	Tries        []trieInfo `json:"tries"`
	Files        []string   `json:"files"`
	StoreSeconds float64    `json:"store_seconds"`
}

func runCheckpoint(args []string) error {
	fs := flag.NewFlagSet("checkpoint", flag.ContinueOnError)
	walDir := fs.String("wal", "", "WAL directory to replay (not modified)")
	out := fs.String("out", "", "output directory for the checkpoint")
	name := fs.String("name", "checkpoint.00000000", "checkpoint file name")
	which := fs.String("tries", "last", "last: the final trie only; all: every trie of the forest, oldest first")
	capacity := fs.Int("forest-capacity", 500, "mtrie.Forest capacity")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *walDir == "" || *out == "" {
		return fmt.Errorf("checkpoint: --wal and --out are required")
	}
	forest, last, err := replayForest(*walDir, *capacity)
	if err != nil {
		return err
	}
	var tries []*trie.MTrie
	switch *which {
	case "last":
		t, err := forest.GetTrie(last)
		if err != nil {
			return err
		}
		tries = []*trie.MTrie{t}
	case "all":
		if tries, err = forest.GetTries(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("checkpoint: --tries must be last or all")
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	start := time.Now()
	if err := wal.StoreCheckpointV6Concurrently(tries, *out, *name, zerolog.Nop()); err != nil {
		return err
	}
	res := checkpointResult{Tries: describe(tries, false), StoreSeconds: time.Since(start).Seconds()}
	entries, err := os.ReadDir(*out)
	if err != nil {
		return err
	}
	for _, e := range entries {
		res.Files = append(res.Files, e.Name())
	}
	return emit(res)
}

type readResult struct {
	Tries          []trieInfo `json:"tries"`
	ElapsedSeconds float64    `json:"elapsed_seconds"`
}

func runReadCheckpoint(args []string) error {
	fs := flag.NewFlagSet("read-checkpoint", flag.ContinueOnError)
	dir := fs.String("dir", "", "checkpoint directory")
	file := fs.String("file", "", "checkpoint (header) file name, e.g. checkpoint.00000042")
	verify := fs.Bool("verify", false, "also count registers and recompute every node hash")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" || *file == "" {
		return fmt.Errorf("read-checkpoint: --dir and --file are required")
	}
	start := time.Now()
	tries, err := wal.LoadCheckpoint(filepath.Join(*dir, *file), zerolog.Nop())
	if err != nil {
		return err
	}
	elapsed := time.Since(start).Seconds()
	return emit(readResult{Tries: describe(tries, *verify), ElapsedSeconds: elapsed})
}

type rewriteResult struct {
	Tries        []trieInfo `json:"tries"`
	LoadSeconds  float64    `json:"load_seconds"`
	StoreSeconds float64    `json:"store_seconds"`
}

// runRewriteCheckpoint loads a checkpoint and stores its tries again (timed separately): the
// write half of the checkpoint benchmark.
func runRewriteCheckpoint(args []string) error {
	fs := flag.NewFlagSet("rewrite-checkpoint", flag.ContinueOnError)
	dir := fs.String("dir", "", "checkpoint directory")
	file := fs.String("file", "", "checkpoint file name")
	out := fs.String("out", "", "output directory")
	name := fs.String("name", "", "output checkpoint name (default: the input name)")
	version := fs.Int("version", 6, "6: StoreCheckpointV6Concurrently; 5: StoreCheckpointV5 (one file)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" || *file == "" || *out == "" {
		return fmt.Errorf("rewrite-checkpoint: --dir, --file and --out are required")
	}
	if *name == "" {
		*name = *file
	}
	start := time.Now()
	tries, err := wal.LoadCheckpoint(filepath.Join(*dir, *file), zerolog.Nop())
	if err != nil {
		return err
	}
	loaded := time.Since(start).Seconds()
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	start = time.Now()
	switch *version {
	case 6:
		err = wal.StoreCheckpointV6Concurrently(tries, *out, *name, zerolog.Nop())
	case 5:
		err = wal.StoreCheckpointV5(*out, *name, zerolog.Nop(), tries...)
	default:
		err = fmt.Errorf("rewrite-checkpoint: --version must be 5 or 6")
	}
	if err != nil {
		return err
	}
	return emit(rewriteResult{Tries: describe(tries, false), LoadSeconds: loaded, StoreSeconds: time.Since(start).Seconds()})
}
