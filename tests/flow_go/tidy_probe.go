package main

import (
	_ "github.com/onflow/flow-go/ledger"
	_ "github.com/onflow/flow-go/ledger/common/pathfinder"
	_ "github.com/onflow/flow-go/ledger/complete/mtrie"
	_ "github.com/onflow/flow-go/ledger/complete/wal"
	_ "github.com/onflow/wal/wal"
	_ "github.com/rs/zerolog"
)

func main() {}
