module rechain.local/flowgo

go 1.22

require github.com/onflow/flow-go v0.33.1
