package main

// The stats subcommand: the oracle of `rechain flow checkpoint stats`. The checkpoint is read
// by flow-go's own reader (wal.LoadCheckpoint) and walked with its own iterator
// (flattener.NewUniqueNodeIterator, as complete.CollectStats walks it); a node's depth is
// 256 - Node.Height(); owners and keys come from Payload.Key() (key parts 0 and 1, as
// checkpoint-collect-stats takes them). Register kinds follow checkpoint-collect-stats'
// getRegisterType of flow-go master, written out here from its constants (v0.33.1 predates
// most of them).

import (
	"encoding/hex"
	"flag"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/rs/zerolog"

	"github.com/onflow/flow-go/ledger/complete/mtrie/flattener"
	"github.com/onflow/flow-go/ledger/complete/mtrie/node"
	"github.com/onflow/flow-go/ledger/complete/wal"
	"github.com/onflow/flow-go/model/flow"
)

type sizes struct {
	Registers     uint64 `json:"registers"`
	KeyBytes      uint64 `json:"key_bytes"`
	ValueBytes    uint64 `json:"value_bytes"`
	MinValueBytes uint64 `json:"min_value_bytes"`
	MaxValueBytes uint64 `json:"max_value_bytes"`
}

func (s *sizes) add(key, value uint64) {
	if s.Registers == 0 || value < s.MinValueBytes {
		s.MinValueBytes = value
	}
	if value > s.MaxValueBytes {
		s.MaxValueBytes = value
	}
	s.Registers++
	s.KeyBytes += key
	s.ValueBytes += value
}

type trieStats struct {
	Root         string `json:"root"`
	LeafNodes    uint64 `json:"leaf_nodes"`
	InterimNodes uint64 `json:"interim_nodes"`
	Registers    uint64 `json:"registers"`
	KeyBytes     uint64 `json:"key_bytes"`
	ValueBytes   uint64 `json:"value_bytes"`
	MaxDepth     int    `json:"max_depth"`
	// depth -> [leaves, interim nodes]
	Depths map[string][2]uint64 `json:"depths"`
	Kinds  map[string]*sizes    `json:"kinds"`
	// hex owner -> counts
	Owners map[string]*sizes `json:"owners"`
}

var storageDomains = map[string]bool{
	"storage": true, "private": true, "public": true, "contract": true, "inbox": true,
	"cap_con": true, "cap_tag": true, "path_cap": true, "acc_cap": true,
}

func registerKind(k string) string {
	if strings.HasPrefix(k, "$") {
		return "atree slab"
	}
	if storageDomains[k] {
		return "domain " + k
	}
	switch k {
	case "stored":
		return "account"
	case flow.ContractNamesKey:
		return "contract names"
	case flow.AccountStatusKey:
		return "account status"
	case flow.AddressStateKey:
		return "address generator state"
	case "AccountsStorageIDKey":
		return "account storage ID"
	case "CodesStorageIDKey":
		return "code storage ID"
	case "LatestBlock":
		return "latest block"
	case "LatestBlockProposal":
		return "latest block proposal"
	}
	switch {
	case k == flow.UUIDKeyPrefix || strings.HasPrefix(k, flow.UUIDKeyPrefix+"_"):
		return "uuid generator state"
	case strings.HasPrefix(k, flow.PublicKeyKeyPrefix):
		return "legacy public key"
	case k == "apk_0":
		return "account public key 0"
	case strings.HasPrefix(k, "pk_b"):
		return "batch public key"
	case strings.HasPrefix(k, "sn_"):
		return "sequence number"
	case strings.HasPrefix(k, flow.CodeKeyPrefix):
		return "contract content"
	case strings.HasPrefix(k, "BlockHashListBucket"):
		return "block hash list bucket"
	case strings.HasPrefix(k, "BlockHashListMeta"):
		return "block hash list meta"
	}
	return "others"
}

func runStats(args []string) error {
	fs := flag.NewFlagSet("stats", flag.ContinueOnError)
	dir := fs.String("dir", "", "checkpoint directory")
	file := fs.String("file", "", "checkpoint (header) file name")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" || *file == "" {
		return fmt.Errorf("stats: --dir and --file are required")
	}
	tries, err := wal.LoadCheckpoint(filepath.Join(*dir, *file), zerolog.Nop())
	if err != nil {
		return err
	}
	out := make([]trieStats, 0, len(tries))
	for _, t := range tries {
		s := trieStats{
			Root:   hexRoot(t.RootHash()),
			Depths: map[string][2]uint64{},
			Kinds:  map[string]*sizes{},
			Owners: map[string]*sizes{},
		}
		// Each trie on its own: a fresh visited map, so shared nodes count in every trie.
		for it := flattener.NewUniqueNodeIterator(t.RootNode(), map[*node.Node]uint64{}); it.Next(); {
			n := it.Value()
			depth := 256 - n.Height()
			if depth > s.MaxDepth {
				s.MaxDepth = depth
			}
			d := s.Depths[strconv.Itoa(depth)]
			if !n.IsLeaf() {
				s.InterimNodes++
				d[1]++
				s.Depths[strconv.Itoa(depth)] = d
				continue
			}
			s.LeafNodes++
			d[0]++
			s.Depths[strconv.Itoa(depth)] = d
			p := n.Payload()
			key, err := p.Key()
			if err != nil {
				return err
			}
			if len(key.KeyParts) < 2 {
				return fmt.Errorf("stats: payload key with %d parts", len(key.KeyParts))
			}
			kb, vb := uint64(len(p.EncodedKey())), uint64(len(p.Value()))
			if vb > 0 {
				s.Registers++
			}
			s.KeyBytes += kb
			s.ValueBytes += vb
			kind := registerKind(string(key.KeyParts[1].Value))
			if s.Kinds[kind] == nil {
				s.Kinds[kind] = &sizes{}
			}
			s.Kinds[kind].add(kb, vb)
			owner := hex.EncodeToString(key.KeyParts[0].Value)
			if s.Owners[owner] == nil {
				s.Owners[owner] = &sizes{}
			}
			s.Owners[owner].add(kb, vb)
		}
		out = append(out, s)
	}
	return emit(map[string]any{"tries": out})
}
