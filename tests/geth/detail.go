package main

import (
	"encoding/hex"
	"fmt"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
)

// txDetail is one transaction as --detail lists it.
type txDetail struct {
	Hash  string  `json:"hash"`
	From  string  `json:"from"`
	To    *string `json:"to"`
	Nonce uint64  `json:"nonce"`
	Value string  `json:"value"`
	Type  uint8   `json:"type"`
	Gas   uint64  `json:"gas"`
}

// receiptDetail is one receipt as --detail lists it. A pre-Byzantium receipt carries the
// post-transaction state root instead of a status: status is then null and post_state is set.
type receiptDetail struct {
	Status        *uint64     `json:"status"`
	PostState     *string     `json:"post_state"`
	CumulativeGas uint64      `json:"cumulative_gas"`
	GasUsed       uint64      `json:"gas_used"`
	Logs          []logDetail `json:"logs"`
}

type logDetail struct {
	Address string   `json:"address"`
	Topics  []string `json:"topics"`
	Data    string   `json:"data"`
}

func hexAddress(a common.Address) string { return hex.EncodeToString(a[:]) }

// sender recovers a transaction's sender as go-ethereum does: with the latest signer for the
// chain id the transaction carries (typed and EIP-155 transactions), else with the Homestead
// signer (legacy transactions without a chain id).
func sender(tx *types.Transaction) (common.Address, error) {
	if tx.Protected() {
		return types.Sender(types.LatestSignerForChainID(tx.ChainId()), tx)
	}
	return types.Sender(types.HomesteadSigner{}, tx)
}

// txDetails lists a block's transactions; a sender that cannot be recovered is an error.
func txDetails(txs types.Transactions) (*[]txDetail, error) {
	out := make([]txDetail, 0, len(txs))
	for i, tx := range txs {
		from, err := sender(tx)
		if err != nil {
			return nil, fmt.Errorf("transaction %d (%x): sender: %w", i, tx.Hash(), err)
		}
		d := txDetail{
			Hash:  hexHash(tx.Hash()),
			From:  hexAddress(from),
			Nonce: tx.Nonce(),
			Value: decimal(tx.Value()),
			Type:  tx.Type(),
			Gas:   tx.Gas(),
		}
		if to := tx.To(); to != nil {
			s := hexAddress(*to)
			d.To = &s
		}
		out = append(out, d)
	}
	return &out, nil
}

// receiptDetails lists a block's receipts; gas_used is the difference of cumulative gas.
func receiptDetails(receipts types.Receipts) *[]receiptDetail {
	out := make([]receiptDetail, 0, len(receipts))
	prev := uint64(0)
	for _, r := range receipts {
		d := receiptDetail{
			CumulativeGas: r.CumulativeGasUsed,
			GasUsed:       r.CumulativeGasUsed - prev,
			Logs:          make([]logDetail, 0, len(r.Logs)),
		}
		prev = r.CumulativeGasUsed
		if len(r.PostState) > 0 {
			s := hex.EncodeToString(r.PostState)
			d.PostState = &s
		} else {
			status := r.Status
			d.Status = &status
		}
		for _, l := range r.Logs {
			topics := make([]string, 0, len(l.Topics))
			for _, t := range l.Topics {
				topics = append(topics, hexHash(t))
			}
			d.Logs = append(d.Logs, logDetail{Address: hexAddress(l.Address), Topics: topics, Data: hex.EncodeToString(l.Data)})
		}
		out = append(out, d)
	}
	return &out
}
