#pragma once
// Operation signatures: what every member of a communicator must agree on
// for a collective (kind, dtype, reduce op, root) packed into 64 bits, plus
// its byte count, so that ranks that call different operations at the same
// point find out (Mismatch naming both) instead of exchanging garbage.

#include <cstdint>
#include <string>

namespace tutti::detail {

struct OpContext;

// hash32(kind, dtype, reduce op) << 32 | (root + 1).
std::uint64_t op_signature(const OpContext& ctx);
// The byte count members must agree on, or ~0 where they may differ
// (all_to_all_v).
std::uint64_t op_signature_bytes(const OpContext& ctx);
// "all_reduce (4096 B, float32, sum)": the names are recovered by trying
// every known kind, dtype and reduce op.
std::string describe_signature(std::uint64_t sig, std::uint64_t bytes);
// The same without a byte count (messages carry only the signature).
std::string describe_signature_kind(std::uint64_t sig);

}  // namespace tutti::detail
