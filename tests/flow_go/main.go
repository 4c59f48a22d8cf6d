// Command flowgo is rechain's interop oracle: it runs flow-go v0.33.1's own LedgerWAL writer
// (DiskWAL.RecordUpdate on top of onflow/wal) and replay (DiskWAL.Replay into an mtrie.Forest),
// so rechain's Rust reader, MTrie and writer can be checked against the real thing.
//
//	flowgo gen --out DIR --updates N --registers-per-update K --seed S [--segment-size B]
//	flowgo replay --wal DIR [--forest-capacity C] [--roots=false]
//	flowgo checkpoint --wal DIR --out DIR [--name checkpoint.00000000] [--tries last|all]
//	flowgo read-checkpoint --dir DIR --file NAME [--verify]
//	flowgo rewrite-checkpoint --dir DIR --file NAME --out DIR [--name NAME] [--version 5|6]
//	flowgo stats --dir DIR --file NAME
//
// Both print one JSON object on stdout; root hashes are lower-case hex.
package main

import (
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/onflow/flow-go/ledger"
	"github.com/onflow/flow-go/ledger/common/pathfinder"
	"github.com/onflow/flow-go/ledger/complete/mtrie"
	"github.com/onflow/flow-go/ledger/complete/mtrie/trie"
	"github.com/onflow/flow-go/ledger/complete/wal"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: flowgo gen|replay [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "gen":
		err = runGen(os.Args[2:])
	case "replay":
		err = runReplay(os.Args[2:])
	case "checkpoint":
		err = runCheckpoint(os.Args[2:])
	case "read-checkpoint":
		err = runReadCheckpoint(os.Args[2:])
	case "rewrite-checkpoint":
		err = runRewriteCheckpoint(os.Args[2:])
	case "stats":
		err = runStats(os.Args[2:])
	case "gen-bench":
		err = runGenBench(os.Args[2:])
	case "replay-marks":
		err = runReplayMarks(os.Args[2:])
	default:
		err = fmt.Errorf("unknown subcommand %q (expected gen, replay, checkpoint, read-checkpoint, rewrite-checkpoint or stats)", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "flowgo:", err)
		os.Exit(1)
	}
}

func hexRoot(h ledger.RootHash) string { return hex.EncodeToString(h[:]) }

func emit(v any) error {
	enc := json.NewEncoder(os.Stdout)
	return enc.Encode(v)
}

type genResult struct {
	EmptyRoot   string   `json:"empty_root"`
	Roots       []string `json:"roots"`
	FinalRoot   string   `json:"final_root"`
	Updates     int      `json:"updates"`
	Registers   uint64   `json:"registers"`
	RegSize     uint64   `json:"reg_size"`
	Segments    []string `json:"segments"`
	SegmentSize int      `json:"segment_size"`
}

func runGen(args []string) error {
	fs := flag.NewFlagSet("gen", flag.ContinueOnError)
	out := fs.String("out", "", "output WAL directory (created; must hold no segments)")
	updates := fs.Int("updates", 100, "number of updates (WAL records)")
	perUpdate := fs.Int("registers-per-update", 10, "register writes per update")
	seed := fs.Uint64("seed", 1, "PRNG seed")
	segSize := fs.Int("segment-size", wal.SegmentSize, "WAL segment size in bytes (multiple of 32 KiB)")
	capacity := fs.Int("forest-capacity", 500, "mtrie.Forest capacity")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" {
		return fmt.Errorf("gen: --out is required")
	}
	if *perUpdate < 1 {
		return fmt.Errorf("gen: --registers-per-update must be >= 1")
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	if names, err := segmentNames(*out); err != nil {
		return err
	} else if len(names) > 0 {
		return fmt.Errorf("gen: %s already holds WAL segments", *out)
	}

	diskWAL, err := wal.NewDiskWAL(zerolog.Nop(), nil, noopMetrics{}, *out, *capacity, pathfinder.PathByteSize, *segSize)
	if err != nil {
		return err
	}
	forest, err := mtrie.NewForest(*capacity, noopMetrics{}, nil)
	if err != nil {
		return err
	}
	w := workload{rng: splitmix64{state: *seed}}
	root := trie.EmptyTrieRootHash()
	res := genResult{EmptyRoot: hexRoot(root), Roots: make([]string, 0, *updates), SegmentSize: *segSize}
	for i := 0; i < *updates; i++ {
		paths, payloads, err := w.nextUpdate(*perUpdate)
		if err != nil {
			return err
		}
		u := &ledger.TrieUpdate{RootHash: root, Paths: paths, Payloads: payloads}
		if _, _, err := diskWAL.RecordUpdate(u); err != nil {
			return err
		}
		root, err = forest.Update(u)
		if err != nil {
			return fmt.Errorf("update %d: %w", i, err)
		}
		res.Roots = append(res.Roots, hexRoot(root))
	}
	<-diskWAL.Done()
	t, err := forest.GetTrie(root)
	if err != nil {
		return err
	}
	res.FinalRoot = hexRoot(root)
	res.Updates = *updates
	res.Registers = t.AllocatedRegCount()
	res.RegSize = t.AllocatedRegSize()
	if res.Segments, err = segmentNames(*out); err != nil {
		return err
	}
	return emit(res)
}

type replayResult struct {
	FinalRoot      string   `json:"final_root"`
	Roots          []string `json:"roots,omitempty"`
	Updates        int      `json:"updates"`
	Deletes        int      `json:"deletes"`
	Registers      uint64   `json:"registers"`
	RegSize        uint64   `json:"reg_size"`
	ForestTries    int      `json:"forest_tries"`
	ElapsedSeconds float64  `json:"elapsed_seconds"`
}

// openForReplay opens the WAL in dir with an empty forest of the given capacity. NewDiskWAL
// opens a fresh segment (last+1) for writing, as a node does on start, so the WAL is opened in a
// scratch directory of symlinks and the input directory is left exactly as it was. done closes
// the WAL and removes the scratch directory.
func openForReplay(dir string, capacity int) (*wal.DiskWAL, *mtrie.Forest, func(), error) {
	scratch, err := os.MkdirTemp("", "flowgo-replay-")
	if err != nil {
		return nil, nil, nil, err
	}
	fail := func(err error) (*wal.DiskWAL, *mtrie.Forest, func(), error) {
		os.RemoveAll(scratch)
		return nil, nil, nil, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fail(err)
	}
	for _, e := range entries {
		src, err := filepath.Abs(filepath.Join(dir, e.Name()))
		if err != nil {
			return fail(err)
		}
		if err := os.Symlink(src, filepath.Join(scratch, e.Name())); err != nil {
			return fail(err)
		}
	}
	diskWAL, err := wal.NewDiskWAL(zerolog.Nop(), nil, noopMetrics{}, scratch, capacity, pathfinder.PathByteSize, wal.SegmentSize)
	if err != nil {
		return fail(err)
	}
	forest, err := mtrie.NewForest(capacity, noopMetrics{}, nil)
	if err != nil {
		<-diskWAL.Done()
		return fail(err)
	}
	return diskWAL, forest, func() { <-diskWAL.Done(); os.RemoveAll(scratch) }, nil
}

func runReplay(args []string) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	dir := fs.String("wal", "", "WAL directory (segments and checkpoints); not modified")
	capacity := fs.Int("forest-capacity", 500, "mtrie.Forest capacity (flow-go's --mtrie-cache-size default is 500)")
	withRoots := fs.Bool("roots", true, "list the root after every update")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		return fmt.Errorf("replay: --wal is required")
	}
	diskWAL, forest, done, err := openForReplay(*dir, *capacity)
	if err != nil {
		return err
	}
	defer done()
	res := replayResult{}
	last := trie.EmptyTrieRootHash()
	start := time.Now()
	// The same callbacks as DiskWAL.ReplayOnForest, plus bookkeeping of the roots.
	err = diskWAL.Replay(
		func(tries []*trie.MTrie) error {
			return forest.AddTries(tries)
		},
		func(update *ledger.TrieUpdate) error {
			root, err := forest.Update(update)
			if err != nil {
				return err
			}
			res.Updates++
			last = root
			if *withRoots {
				res.Roots = append(res.Roots, hexRoot(root))
			}
			return nil
		},
		func(ledger.RootHash) error {
			res.Deletes++
			return nil
		},
	)
	res.ElapsedSeconds = time.Since(start).Seconds()
	if err != nil {
		return err
	}
	root := last
	t, err := forest.GetTrie(root)
	if err != nil {
		return err
	}
	res.FinalRoot = hexRoot(root)
	res.Registers = t.AllocatedRegCount()
	res.RegSize = t.AllocatedRegSize()
	res.ForestTries = forest.Size()
	return emit(res)
}

// segmentNames lists WAL segment files the way onflow/wal does (whole name parses as an int).
func segmentNames(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err == nil {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// noopMetrics satisfies module.LedgerMetrics and module.WALMetrics without pulling in
// flow-go's metrics package.
type noopMetrics struct{}

func (noopMetrics) ForestApproxMemorySize(uint64)       {}
func (noopMetrics) ForestNumberOfTrees(uint64)          {}
func (noopMetrics) LatestTrieRegCount(uint64)           {}
func (noopMetrics) LatestTrieRegCountDiff(int64)        {}
func (noopMetrics) LatestTrieRegSize(uint64)            {}
func (noopMetrics) LatestTrieRegSizeDiff(int64)         {}
func (noopMetrics) LatestTrieMaxDepthTouched(uint16)    {}
func (noopMetrics) UpdateCount()                        {}
func (noopMetrics) ProofSize(uint32)                    {}
func (noopMetrics) UpdateValuesNumber(uint64)           {}
func (noopMetrics) UpdateValuesSize(uint64)             {}
func (noopMetrics) UpdateDuration(time.Duration)        {}
func (noopMetrics) UpdateDurationPerItem(time.Duration) {}
func (noopMetrics) ReadValuesNumber(uint64)             {}
func (noopMetrics) ReadValuesSize(uint64)               {}
func (noopMetrics) ReadDuration(time.Duration)          {}
func (noopMetrics) ReadDurationPerItem(time.Duration)   {}
