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
// What every message of the operation carries (OpContext::signature): the
// same high half, and a hash of the root and the byte count in the low one,
// so that a count that differs by one element is found even where every
// message happens to have the length its receiver expects.
std::uint64_t message_signature(const OpContext& ctx);
// The byte count members must agree on, or ~0 where they may differ
// (all_to_all_v).
std::uint64_t op_signature_bytes(const OpContext& ctx);
// "all_reduce (4096 B, float32, sum)": the names are recovered by trying
// every known kind, dtype and reduce op.
std::string describe_signature(std::uint64_t sig, std::uint64_t bytes);
// A message signature in words: "all_reduce (float32, sum)". Against this
// rank's own (`against`, not 0): "X where this rank runs Y", where the root
// or byte count of the sender's operation, hashed in its signature, is
// recovered by trying this rank's with another root, or with a byte count
// near this rank's (this rank's operations' roots and byte counts are kept
// for this: message_signature).
std::string describe_signature_kind(std::uint64_t sig, std::uint64_t against = 0);

}  // namespace tutti::detail
