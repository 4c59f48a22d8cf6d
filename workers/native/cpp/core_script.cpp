// Bitcoin Core's script interpreter over one whole transaction (btc/scripts/interpreter.rs).
//
// Compiled against the Core sources the `bitcoinconsensus` crate vendors and linked with the
// library that crate builds from them, so every input runs through Core's own VerifyScript,
// signature checker and PrecomputedTransactionData. The crate's C API takes one input per call
// and so deserializes the transaction and precomputes its signature hashes once per input: a
// transaction of n inputs costs n^2. Here both happen once per transaction, as Core's
// ConnectBlock does.

#include <primitives/transaction.h>
#include <script/interpreter.h>
#include <script/script_error.h>
#include <span.h>
#include <version.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <ios>
#include <string>
#include <vector>

namespace {

// A read-only stream over the serialized transaction, as Core's deserializer wants one.
class ByteReader
{
public:
    ByteReader(const unsigned char* data, size_t len) : m_data(data), m_remaining(len) {}

    void read(Span<std::byte> dst)
    {
        if (dst.size() > m_remaining) {
            throw std::ios_base::failure("end of data");
        }
        if (!dst.empty()) std::memcpy(dst.data(), m_data, dst.size());
        m_data += dst.size();
        m_remaining -= dst.size();
    }

    template <typename T>
    ByteReader& operator>>(T&& obj)
    {
        ::Unserialize(*this, obj);
        return *this;
    }

    int GetVersion() const { return PROTOCOL_VERSION; }
    size_t remaining() const { return m_remaining; }

private:
    const unsigned char* m_data;
    size_t m_remaining;
};

void copy_text(const std::string& text, char* out, size_t cap)
{
    if (cap == 0) return;
    size_t n = text.size() < cap - 1 ? text.size() : cap - 1;
    std::memcpy(out, text.data(), n);
    out[n] = '\0';
}

} // namespace

// Outcomes of rechain_core_verify_tx (interpreter.rs mirrors them).
enum : int {
    RECHAIN_SCRIPT_OK = 0,
    RECHAIN_SCRIPT_FAILED = 1,      // input *failed_input failed; `error` holds ScriptErrorString
    RECHAIN_TX_UNREADABLE = 2,      // Core's deserializer refused the bytes; `error` says why
    RECHAIN_TX_TRAILING = 3,        // bytes left after the transaction
    RECHAIN_SPENT_MISMATCH = 4,     // spent outputs given != inputs
};

extern "C" int rechain_core_verify_tx(
    const unsigned char* tx_bytes, size_t tx_len,
    const int64_t* amounts, const unsigned char* const* scripts, const size_t* script_lens,
    size_t n_spent, unsigned int flags, uint32_t* failed_input, char* error, size_t error_cap)
{
    try {
        ByteReader stream(tx_bytes, tx_len);
        const CTransaction tx(deserialize, stream);
        if (stream.remaining() != 0) return RECHAIN_TX_TRAILING;
        if (n_spent != tx.vin.size()) return RECHAIN_SPENT_MISMATCH;
        std::vector<CTxOut> spent;
        spent.reserve(n_spent);
        for (size_t i = 0; i < n_spent; ++i) {
            spent.emplace_back(amounts[i], CScript(scripts[i], scripts[i] + script_lens[i]));
        }
        // Once per transaction: the BIP143 and BIP341 midstates every input's sighash shares.
        PrecomputedTransactionData txdata;
        txdata.Init(tx, std::move(spent));
        for (unsigned int i = 0; i < tx.vin.size(); ++i) {
            const CTxOut& prev = txdata.m_spent_outputs[i];
            ScriptError err = SCRIPT_ERR_UNKNOWN_ERROR;
            const TransactionSignatureChecker checker(&tx, i, prev.nValue, txdata, MissingDataBehavior::FAIL);
            if (!VerifyScript(tx.vin[i].scriptSig, prev.scriptPubKey, &tx.vin[i].scriptWitness, flags, checker, &err)) {
                *failed_input = i;
                copy_text(ScriptErrorString(err), error, error_cap);
                return RECHAIN_SCRIPT_FAILED;
            }
        }
        return RECHAIN_SCRIPT_OK;
    } catch (const std::exception& e) {
        copy_text(e.what(), error, error_cap);
        return RECHAIN_TX_UNREADABLE;
    }
}
