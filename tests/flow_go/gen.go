package main

// Deterministic workload shared with rechain's generator (workers/native/src/flow/gen.rs).
// Both sides must draw from the PRNG in exactly the same order, so that the same
// (updates, registers-per-update, seed, segment-size) gives byte-identical WAL segments.
//
// PRNG: splitmix64 with state = seed.
// For every update, for j in 0..K, r = next() % 100:
//   known != empty && r < 25  -> overwrite:  reg = known[next() % len(known)], value = randValue()
//   known != empty && r < 35  -> delete:     reg = known[next() % len(known)], empty value
//   j > 0 && r < 38           -> duplicate:  reg = entries[next() % j].reg,   value = randValue()
//   otherwise                 -> new register: owner = bytes(8), key = bytes(1 + next() % 32),
//                                path = pathfinder v1 (SHA3-256 of "/0/<owner>/2/<key>"),
//                                appended to known, value = randValue()
// randValue: a = next(), b = next(); n = 1 + a % 6000 if b % 64 == 0 else 1 + a % 256; bytes(n)
// bytes(n): 8 bytes per next() call, little-endian, the last call truncated.

import (
	"github.com/onflow/flow-go/ledger"
	"github.com/onflow/flow-go/ledger/common/pathfinder"
)

type splitmix64 struct{ state uint64 }

func (s *splitmix64) next() uint64 {
	s.state += 0x9E3779B97F4A7C15
	z := s.state
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

func (s *splitmix64) bytes(n int) []byte {
	out := make([]byte, n)
	for i := 0; i < n; i += 8 {
		x := s.next()
		for k := 0; k < 8 && i+k < n; k++ {
			out[i+k] = byte(x >> (8 * k))
		}
	}
	return out
}

func (s *splitmix64) value() []byte {
	a := s.next()
	b := s.next()
	n := 1 + int(a%256)
	if b%64 == 0 {
		n = 1 + int(a%6000)
	}
	return s.bytes(n)
}

type register struct {
	path ledger.Path
	key  ledger.Key
}

type workload struct {
	rng   splitmix64
	known []register
}

// nextUpdate draws the paths and payloads of one update (parent root set by the caller).
func (w *workload) nextUpdate(k int) ([]ledger.Path, []*ledger.Payload, error) {
	paths := make([]ledger.Path, 0, k)
	payloads := make([]*ledger.Payload, 0, k)
	regs := make([]register, 0, k)
	for j := 0; j < k; j++ {
		r := w.rng.next() % 100
		var reg register
		var value []byte
		switch {
		case len(w.known) > 0 && r < 25:
			reg = w.known[w.rng.next()%uint64(len(w.known))]
			value = w.rng.value()
		case len(w.known) > 0 && r < 35:
			reg = w.known[w.rng.next()%uint64(len(w.known))]
			value = []byte{}
		case j > 0 && r < 38:
			reg = regs[w.rng.next()%uint64(j)]
			value = w.rng.value()
		default:
			owner := w.rng.bytes(8)
			keyLen := 1 + int(w.rng.next()%32)
			key := w.rng.bytes(keyLen)
			reg.key = ledger.NewKey([]ledger.KeyPart{ledger.NewKeyPart(0, owner), ledger.NewKeyPart(2, key)})
			path, err := pathfinder.KeyToPath(reg.key, 1)
			if err != nil {
				return nil, nil, err
			}
			reg.path = path
			w.known = append(w.known, reg)
			value = w.rng.value()
		}
		regs = append(regs, reg)
		paths = append(paths, reg.path)
		payloads = append(payloads, ledger.NewPayload(reg.key, value))
	}
	return paths, payloads, nil
}
