package main

// Checks flow-go v0.33.1 itself against the vectors of shared/specs/flow-ledger.md §6, so the
// spec that rechain's Rust core is tested on is pinned to the real implementation.

import (
	"bytes"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	prometheusWAL "github.com/onflow/wal/wal"
	"github.com/rs/zerolog"

	"github.com/onflow/flow-go/ledger"
	"github.com/onflow/flow-go/ledger/common/pathfinder"
	"github.com/onflow/flow-go/ledger/complete/mtrie"
	"github.com/onflow/flow-go/ledger/complete/mtrie/trie"
	"github.com/onflow/flow-go/ledger/complete/wal"
)

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func path(t *testing.T, s string) ledger.Path {
	p, err := ledger.ToPath(mustHex(t, s))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func pl(owner, key string, value []byte) *ledger.Payload {
	return ledger.NewPayload(ledger.NewKey([]ledger.KeyPart{
		ledger.NewKeyPart(0, []byte(owner)), ledger.NewKeyPart(2, []byte(key)),
	}), value)
}

func root(t *testing.T, s string) ledger.RootHash {
	h, err := ledger.ToRootHash(mustHex(t, s))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

const (
	emptyHex = "568f4ec740fe3b5de88034cb7b1fbddb41548b068f31aebc8ae9189e429c5749"
	u1Hex    = "e31b266ccd2d953edd950c40e5548de9d9b34e1d9589ff37920a212a908a0c0e"
	u3Hex    = "7e583937806bd83c39d6c18c25780993a0f74ba29a5b6537679e45fcb105a545"
	u4Hex    = "b859be6139eb870894f1dbf7e83248a206f339f97898ceab22e29b3b7e51d355"
	u5Hex    = "b1f3bb0891acc0da65970811040480b3a61b3190f73b8817045274f3ad6877ff"
	u7Hex    = "02278eaf62b6932c7e5f8635f8e08e40932577ca7a0b5cd7575aac3e48e05fb2"
)

func TestEmptyRoot(t *testing.T) {
	if got := hexRoot(trie.EmptyTrieRootHash()); got != emptyHex {
		t.Fatalf("empty root %s", got)
	}
}

func TestRootHashesSpec62(t *testing.T) {
	p1 := path(t, "0000000000000000000000000000000000000000000000000000000000000001")
	p2 := path(t, "8000000000000000000000000000000000000000000000000000000000000000")
	p3 := path(t, "4000000000000000000000000000000000000000000000000000000000000002")
	p4 := path(t, "6000000000000000000000000000000000000000000000000000000000000000")
	f, err := mtrie.NewForest(100, noopMetrics{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	empty := trie.EmptyTrieRootHash()
	cases := []struct {
		name     string
		parent   ledger.RootHash
		paths    []ledger.Path
		payloads []*ledger.Payload
		want     string
		count    uint64
		size     uint64
	}{
		{"U1", empty, []ledger.Path{p1}, []*ledger.Payload{pl("owner1", "key1", []byte{1, 2, 3})}, u1Hex, 1, 27},
		{"U3", empty, []ledger.Path{p1, p2, p3}, []*ledger.Payload{pl("owner1", "key1", []byte{1, 2, 3}), pl("owner2", "key2", []byte("hello")), pl("owner3", "key3", []byte{0xff})}, u3Hex, 3, 81},
		{"U4", root(t, u3Hex), []ledger.Path{p2, p2}, []*ledger.Payload{pl("owner2", "key2", []byte("IGNORED")), pl("owner2", "key2", []byte("world!"))}, u4Hex, 3, 82},
		{"U5", root(t, u4Hex), []ledger.Path{p3}, []*ledger.Payload{pl("owner3", "key3", nil)}, u5Hex, 2, 81},
		{"U7", root(t, u4Hex), []ledger.Path{p3, p4}, []*ledger.Payload{pl("owner3", "key3", nil), pl("owner4", "key4", []byte{0x44})}, u7Hex, 3, 82},
	}
	for _, c := range cases {
		got, err := f.Update(&ledger.TrieUpdate{RootHash: c.parent, Paths: c.paths, Payloads: c.payloads})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if hexRoot(got) != c.want {
			t.Fatalf("%s: root %s, want %s", c.name, hexRoot(got), c.want)
		}
		tr, _ := f.GetTrie(got)
		if tr.AllocatedRegCount() != c.count || tr.AllocatedRegSize() != c.size {
			t.Fatalf("%s: count/size %d/%d, want %d/%d", c.name, tr.AllocatedRegCount(), tr.AllocatedRegSize(), c.count, c.size)
		}
	}
}

func TestRecordBytesSpec63(t *testing.T) {
	p1 := path(t, "0000000000000000000000000000000000000000000000000000000000000001")
	u := &ledger.TrieUpdate{RootHash: trie.EmptyTrieRootHash(), Paths: []ledger.Path{p1}, Payloads: []*ledger.Payload{pl("owner1", "key1", []byte{1, 2, 3})}}
	want := mustHex(t, `0100000b0020568f4ec740fe3b5de88034cb7b1fbddb41548b068f31aebc8ae9
		189e429c57490000000100200000000000000000000000000000000000000000
		000000000000000000000001000000270000001800020000000800006f776e65
		72310000000600026b6579310000000000000003010203`)
	if got := wal.EncodeUpdate(u); !bytes.Equal(got, want) {
		t.Fatalf("U1 record %x", got)
	}
	del := mustHex(t, "020020b1f3bb0891acc0da65970811040480b3a61b3190f73b8817045274f3ad6877ff")
	if got := wal.EncodeDelete(root(t, u5Hex)); !bytes.Equal(got, del) {
		t.Fatalf("delete record %x", got)
	}
}

func TestSplitRecordFramingSpec64(t *testing.T) {
	dir := t.TempDir()
	w, err := prometheusWAL.NewSize(zerolog.Nop(), nil, dir, wal.SegmentSize, false)
	if err != nil {
		t.Fatal(err)
	}
	r := make([]byte, 40000)
	for i := range r {
		r[i] = byte(i)
	}
	if _, err := w.Log([]byte{0xde, 0xad}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Log(r); err != nil {
		t.Fatal(err)
	}
	seg := filepath.Join(dir, "00000000")
	b, _ := os.ReadFile(seg)
	if len(b) != 40023 {
		t.Fatalf("size before close %d", len(b))
	}
	checks := map[int]string{0: "0100022 3c8d151dead", 9: "027ff05cf579dc", 32768: "041c5043f5d8a2"}
	for off, h := range checks {
		want := mustHex(t, strings.ReplaceAll(h, " ", ""))
		if !bytes.Equal(b[off:off+len(want)], want) {
			t.Fatalf("offset %d: %x", off, b[off:off+len(want)])
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(seg)
	if len(b) != 65536 {
		t.Fatalf("size after close %d", len(b))
	}
}

func TestKeyToPathSpec65(t *testing.T) {
	k := ledger.NewKey([]ledger.KeyPart{ledger.NewKeyPart(0, []byte("owner1")), ledger.NewKeyPart(2, []byte("key1"))})
	p, err := pathfinder.KeyToPath(k, 1)
	if err != nil {
		t.Fatal(err)
	}
	if hex.EncodeToString(p[:]) != "a2383358dbf8da8ace240cbf4db7805580d28e1c579b84157fe2a10636b44141" {
		t.Fatalf("path %x", p[:])
	}
}

// The oracle's generator must be deterministic: the interop tests compare its bytes with
// rechain's generator.
func TestGenDeterministic(t *testing.T) {
	a, b := splitmix64{state: 1234567}, splitmix64{state: 1234567}
	if a.next() != 6457827717110365317 {
		t.Fatal("splitmix64 reference value")
	}
	b.next()
	if a.next() != b.next() {
		t.Fatal("splitmix64 not deterministic")
	}
	w1, w2 := workload{rng: splitmix64{state: 3}}, workload{rng: splitmix64{state: 3}}
	for i := 0; i < 20; i++ {
		p1, v1, _ := w1.nextUpdate(7)
		p2, v2, _ := w2.nextUpdate(7)
		for j := range p1 {
			if p1[j] != p2[j] || !v1[j].Equals(v2[j]) {
				t.Fatal("workload not deterministic")
			}
		}
	}
}
