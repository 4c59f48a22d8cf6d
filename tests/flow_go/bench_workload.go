package main

// A benchmark workload that is not rechain's generator (gen.go mirrors rechain's gen.rs draw
// for draw; this shares nothing with either), for benchmarks/flow_replay.py --independent:
//
//	flowgo gen-bench --out DIR --registers-updated N [--per-update 50] [--overwrite 0.2]
//	                 [--seed S] [--segment-size B]
//	flowgo replay-marks --wal DIR --marks U1,U2,... [--forest-capacity C]
//
// gen-bench writes, through flow-go's own DiskWAL.RecordUpdate, updates of --per-update
// registers each until N register writes are recorded. Each write overwrites a register
// already in the trie with probability --overwrite (uniform over the registers so far, none
// twice in one update) and otherwise creates one. New registers belong to Flow-like accounts:
// an 8-byte address (a new account one time in four, else an existing one, skewed towards the
// oldest, as popular contracts are), the first registers of an account named as Flow's are
// ("account_status", "public_key_0", "storage", "contract_names"), the rest atree slab keys
// ("$" and an 8-byte big-endian slab index). Value sizes follow a rough storage-slab mix:
// half 1-64 bytes, 40% 65-512, 9% 513-2048, 1% 2049-8192 (mean about 300). No deletes. The
// PRNG is Go's math/rand/v2 ChaCha8. Parent roots come from flow-go's mtrie.Forest. It prints
// the final root and, per segment, the updates, register writes, distinct registers and root
// at its end, so that any prefix of whole segments is a WAL whose root is known.
//
// replay-marks is the `replay` subcommand with the elapsed seconds, root and the process's
// peak RSS (VmHWM) taken when the update count reaches each mark: one replay of the largest
// WAL gives flow-go's time to every prefix of it.

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/onflow/flow-go/ledger"
	"github.com/onflow/flow-go/ledger/common/pathfinder"
	"github.com/onflow/flow-go/ledger/complete/mtrie"
	"github.com/onflow/flow-go/ledger/complete/mtrie/trie"
	"github.com/onflow/flow-go/ledger/complete/wal"
)

var namedKeys = []string{"account_status", "public_key_0", "storage", "contract_names"}

type benchAccount struct {
	address [8]byte
	keys    uint64 // registers created so far
}

type benchWorkload struct {
	rng       *rand.Rand
	overwrite float64
	accounts  []benchAccount
	known     []register
}

func (w *benchWorkload) valueSize() int {
	u := w.rng.Float64()
	switch {
	case u < 0.50:
		return 1 + w.rng.IntN(64)
	case u < 0.90:
		return 65 + w.rng.IntN(448)
	case u < 0.99:
		return 513 + w.rng.IntN(1536)
	default:
		return 2049 + w.rng.IntN(6144)
	}
}

func (w *benchWorkload) value() []byte {
	v := make([]byte, w.valueSize())
	for i := 0; i < len(v); i += 8 {
		x := w.rng.Uint64()
		for k := 0; k < 8 && i+k < len(v); k++ {
			v[i+k] = byte(x >> (8 * k))
		}
	}
	return v
}

func (w *benchWorkload) newRegister() (register, error) {
	n := len(w.accounts)
	var a *benchAccount
	if n == 0 || w.rng.IntN(4) == 0 {
		var acc benchAccount
		binary.BigEndian.PutUint64(acc.address[:], w.rng.Uint64())
		w.accounts = append(w.accounts, acc)
		a = &w.accounts[n]
	} else {
		u := w.rng.Float64()
		a = &w.accounts[int(float64(n)*u*u)]
	}
	var key []byte
	if a.keys < uint64(len(namedKeys)) {
		key = []byte(namedKeys[a.keys])
	} else {
		key = make([]byte, 9)
		key[0] = '$'
		binary.BigEndian.PutUint64(key[1:], a.keys-uint64(len(namedKeys))+1)
	}
	a.keys++
	k := ledger.NewKey([]ledger.KeyPart{
		ledger.NewKeyPart(0, append([]byte(nil), a.address[:]...)),
		ledger.NewKeyPart(2, key),
	})
	path, err := pathfinder.KeyToPath(k, 1)
	if err != nil {
		return register{}, err
	}
	return register{path: path, key: k}, nil
}

func (w *benchWorkload) nextUpdate(k int) ([]ledger.Path, []*ledger.Payload, int, error) {
	paths := make([]ledger.Path, 0, k)
	payloads := make([]*ledger.Payload, 0, k)
	seen := make(map[ledger.Path]struct{}, k)
	created := 0
	for j := 0; j < k; j++ {
		var reg register
		overwrite := len(w.known) > 0 && w.rng.Float64() < w.overwrite
		if overwrite {
			// A register not yet in this update (retry a few times, else create one).
			overwrite = false
			for try := 0; try < 8; try++ {
				reg = w.known[w.rng.IntN(len(w.known))]
				if _, dup := seen[reg.path]; !dup {
					overwrite = true
					break
				}
			}
		}
		if !overwrite {
			var err error
			if reg, err = w.newRegister(); err != nil {
				return nil, nil, 0, err
			}
			if _, dup := seen[reg.path]; dup { // a path collision: vanishingly rare
				j--
				continue
			}
			w.known = append(w.known, reg)
			created++
		}
		seen[reg.path] = struct{}{}
		paths = append(paths, reg.path)
		payloads = append(payloads, ledger.NewPayload(reg.key, w.value()))
	}
	return paths, payloads, created, nil
}

type benchSegment struct {
	Segment         int    `json:"segment"`
	Updates         int    `json:"updates"`
	RegisterUpdates int    `json:"register_updates"`
	Registers       int    `json:"registers"`
	Root            string `json:"root"`
	// flow-go's mtrie.Forest.Update of every record so far, wall and process CPU seconds
	// inside it: a replay's work less reading the WAL.
	UpdateSeconds    float64 `json:"update_seconds"`
	UpdateCPUSeconds float64 `json:"update_cpu_seconds"`
}

type benchGenResult struct {
	FinalRoot       string         `json:"final_root"`
	Updates         int            `json:"updates"`
	RegisterUpdates int            `json:"register_updates"`
	Registers       uint64         `json:"registers"`
	RegSize         uint64         `json:"reg_size"`
	Accounts        int            `json:"accounts"`
	PerUpdate       int            `json:"per_update"`
	Overwrite       float64        `json:"overwrite"`
	SegmentSize     int            `json:"segment_size"`
	Segments        []benchSegment `json:"segments"`
	ElapsedSeconds  float64        `json:"elapsed_seconds"`
}

func runGenBench(args []string) error {
	fs := flag.NewFlagSet("gen-bench", flag.ContinueOnError)
	out := fs.String("out", "", "output WAL directory (created; must hold no segments)")
	total := fs.Int("registers-updated", 150000, "register writes to record in all")
	perUpdate := fs.Int("per-update", 50, "register writes per update")
	overwrite := fs.Float64("overwrite", 0.2, "share of writes that overwrite an existing register")
	seed := fs.Uint64("seed", 1, "PRNG seed")
	segSize := fs.Int("segment-size", wal.SegmentSize, "WAL segment size in bytes (multiple of 32 KiB)")
	capacity := fs.Int("forest-capacity", 500, "mtrie.Forest capacity")
	progressPath := fs.String("progress", "", "write each finished segment's record here (JSON lines)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || *perUpdate < 1 || *overwrite < 0 || *overwrite >= 1 {
		return fmt.Errorf("gen-bench: --out, --per-update >= 1 and 0 <= --overwrite < 1 are required")
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return err
	}
	if names, err := segmentNames(*out); err != nil {
		return err
	} else if len(names) > 0 {
		return fmt.Errorf("gen-bench: %s already holds WAL segments", *out)
	}
	diskWAL, err := wal.NewDiskWAL(zerolog.Nop(), nil, noopMetrics{}, *out, *capacity, pathfinder.PathByteSize, *segSize)
	if err != nil {
		return err
	}
	forest, err := mtrie.NewForest(*capacity, noopMetrics{}, nil)
	if err != nil {
		return err
	}
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], *seed)
	copy(key[8:], "rechain-bench-workload")
	w := benchWorkload{rng: rand.New(rand.NewChaCha8(key)), overwrite: *overwrite}
	res := benchGenResult{PerUpdate: *perUpdate, Overwrite: *overwrite, SegmentSize: *segSize}
	root := trie.EmptyTrieRootHash()
	start := time.Now()
	last := -1
	var updateS, updateCPU float64
	// Each segment's record as the next one starts (JSON lines), for a watcher.
	var progress *json.Encoder
	if *progressPath != "" {
		f, err := os.Create(*progressPath)
		if err != nil {
			return err
		}
		defer f.Close()
		progress = json.NewEncoder(f)
	}
	for res.RegisterUpdates < *total {
		k := min(*perUpdate, *total-res.RegisterUpdates)
		paths, payloads, _, err := w.nextUpdate(k)
		if err != nil {
			return err
		}
		u := &ledger.TrieUpdate{RootHash: root, Paths: paths, Payloads: payloads}
		seg, _, err := diskWAL.RecordUpdate(u)
		if err != nil {
			return err
		}
		t0, c0 := time.Now(), cpuSeconds()
		if root, err = forest.Update(u); err != nil {
			return fmt.Errorf("update %d: %w", res.Updates, err)
		}
		updateS += time.Since(t0).Seconds()
		updateCPU += cpuSeconds() - c0
		res.Updates++
		res.RegisterUpdates += k
		if seg != last {
			if len(res.Segments) > 0 && progress != nil {
				if err := progress.Encode(res.Segments[len(res.Segments)-1]); err != nil {
					return err
				}
			}
			res.Segments = append(res.Segments, benchSegment{Segment: seg})
			last = seg
		}
		s := &res.Segments[len(res.Segments)-1]
		s.Updates, s.RegisterUpdates, s.Registers = res.Updates, res.RegisterUpdates, len(w.known)
		s.Root = hexRoot(root)
		s.UpdateSeconds, s.UpdateCPUSeconds = updateS, updateCPU
	}
	<-diskWAL.Done()
	res.ElapsedSeconds = time.Since(start).Seconds()
	t, err := forest.GetTrie(root)
	if err != nil {
		return err
	}
	res.FinalRoot = hexRoot(root)
	res.Registers = t.AllocatedRegCount()
	res.RegSize = t.AllocatedRegSize()
	res.Accounts = len(w.accounts)
	if res.Registers != uint64(len(w.known)) {
		return fmt.Errorf("gen-bench: the trie holds %d registers, the workload made %d", res.Registers, len(w.known))
	}
	return emit(res)
}

type replayMark struct {
	Updates        int     `json:"updates"`
	ElapsedSeconds float64 `json:"elapsed_seconds"`
	Root           string  `json:"root"`
	PeakRSSBytes   int64   `json:"peak_rss_bytes"`
	CPUSeconds     float64 `json:"cpu_seconds"`
}

type replayMarksResult struct {
	FinalRoot      string       `json:"final_root"`
	Updates        int          `json:"updates"`
	Registers      uint64       `json:"registers"`
	ElapsedSeconds float64      `json:"elapsed_seconds"`
	CPUSeconds     float64      `json:"cpu_seconds"`
	Stopped        bool         `json:"stopped"`
	Marks          []replayMark `json:"marks"`
}

// cpuSeconds is the process's user + system CPU time so far.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

var errStopped = errors.New("time limit reached")

// vmHWM is the process's peak resident set so far, in bytes (0 if unknown).
func vmHWM() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

func runReplayMarks(args []string) error {
	fs := flag.NewFlagSet("replay-marks", flag.ContinueOnError)
	dir := fs.String("wal", "", "WAL directory (segments only); not modified")
	marksArg := fs.String("marks", "", "comma-separated update counts to take a mark at")
	capacity := fs.Int("forest-capacity", 500, "mtrie.Forest capacity")
	limit := fs.Float64("stop-after-seconds", 0, "stop replaying after this long (0: never); the marks reached are kept")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var marks []int
	for _, m := range strings.Split(*marksArg, ",") {
		if m == "" {
			continue
		}
		n, err := strconv.Atoi(m)
		if err != nil {
			return fmt.Errorf("replay-marks: bad mark %q", m)
		}
		marks = append(marks, n)
	}
	sort.Ints(marks)
	diskWAL, forest, done, err := openForReplay(*dir, *capacity)
	if err != nil {
		return err
	}
	defer done()
	res := replayMarksResult{}
	last := trie.EmptyTrieRootHash()
	start := time.Now()
	err = diskWAL.Replay(
		func(tries []*trie.MTrie) error { return forest.AddTries(tries) },
		func(update *ledger.TrieUpdate) error {
			root, err := forest.Update(update)
			if err != nil {
				return err
			}
			res.Updates++
			last = root
			if len(res.Marks) < len(marks) && res.Updates == marks[len(res.Marks)] {
				res.Marks = append(res.Marks, replayMark{
					Updates:        res.Updates,
					ElapsedSeconds: time.Since(start).Seconds(),
					Root:           hexRoot(root),
					PeakRSSBytes:   vmHWM(),
					CPUSeconds:     cpuSeconds(),
				})
			}
			if *limit > 0 && time.Since(start).Seconds() > *limit {
				return errStopped
			}
			return nil
		},
		func(ledger.RootHash) error { return nil },
	)
	res.ElapsedSeconds = time.Since(start).Seconds()
	res.CPUSeconds = cpuSeconds()
	if errors.Is(err, errStopped) {
		res.Stopped, err = true, nil
	}
	if err != nil {
		return err
	}
	t, err := forest.GetTrie(last)
	if err != nil {
		return err
	}
	res.FinalRoot = hexRoot(last)
	res.Registers = t.AllocatedRegCount()
	return emit(res)
}
