#include "algorithms/signature.h"

#include <atomic>

#include "algorithms/context.h"
#include "common/tags.h"
#include "tutti/types.h"

namespace tutti::detail {
namespace {

const char* const kKinds[] = {"all_reduce",     "reduce",     "broadcast",    "gather",  "all_gather",   "scatter",
                              "reduce_scatter", "all_to_all", "all_to_all_v", "barrier", "alloc_shared", "free_shared"};

std::uint32_t fnv(std::uint32_t h, const char* s) {
  if (s)
    for (; *s; ++s) h = (h ^ static_cast<unsigned char>(*s)) * 16777619u;
  return (h ^ '|') * 16777619u;
}

std::uint32_t hash_names(const char* kind, const char* dtype, const char* redop) {
  return fnv(fnv(fnv(2166136261u, kind), dtype), redop);
}

constexpr std::uint64_t kNoBytes = ~std::uint64_t(1);

}  // namespace

namespace {

constexpr std::uint64_t kHigh = ~std::uint64_t(0xffffffffu);

std::uint64_t message_sig(std::uint64_t high, std::int64_t root, std::uint64_t bytes) {
  const std::uint64_t low = mix64(static_cast<std::uint64_t>(root + 1) * 0x9e3779b97f4a7c15ull ^ mix64(bytes));
  return (high & kHigh) | (low & 0xffffffffu) | 1;
}

// This rank's recent message signatures with their roots and byte counts,
// for describing a mismatch: a slot per signature hash, written once per
// operation (relaxed stores; a torn read only loses a description).
struct Recent {
  std::atomic<std::uint64_t> sig{0}, bytes{0};
  std::atomic<std::int64_t> root{0};
};
Recent g_recent[64];

Recent& slot(std::uint64_t sig) { return g_recent[(sig ^ (sig >> 29)) & 63]; }

bool recall(std::uint64_t sig, std::int64_t& root, std::uint64_t& bytes) {
  Recent& r = slot(sig);
  if (r.sig.load(std::memory_order_acquire) != sig) return false;
  root = r.root.load(std::memory_order_relaxed);
  bytes = r.bytes.load(std::memory_order_relaxed);
  return r.sig.load(std::memory_order_acquire) == sig;
}

// "all_reduce (16 B, float32, sum)" from the names of `high` and a root and
// byte count.
std::string with_root_and_bytes(std::uint64_t high, std::int64_t root, std::uint64_t bytes) {
  return describe_signature((high & kHigh) | static_cast<std::uint32_t>(root + 1), bytes);
}

}  // namespace

std::string describe_signature_kind(std::uint64_t sig, std::uint64_t against) {
  std::int64_t root = 0;
  std::uint64_t bytes = 0;
  // One of this rank's own (a stale message's operation): in full.
  const std::string theirs =
      recall(sig, root, bytes) ? with_root_and_bytes(sig, root, bytes) : describe_signature(sig & kHigh, kNoBytes);
  if (!against) return theirs;
  if (!recall(against, root, bytes))
    return theirs + " where this rank called " + describe_signature(against & kHigh, kNoBytes);
  const std::string mine = with_root_and_bytes(against, root, bytes);
  if ((sig & kHigh) != (against & kHigh)) {
    // Another kind, dtype or reduce op: with this rank's count, and its root
    // or none?
    for (const std::int64_t r : {root, std::int64_t(-1)})
      if (message_sig(sig, r, bytes) == sig)
        return with_root_and_bytes(sig, r, bytes) + " where this rank called " + mine;
    return theirs + " where this rank called " + mine;
  }
  // The same kind, dtype and reduce op: another root (of the first 65,536
  // ranks) or another byte count (within 4 KiB of this rank's).
  for (std::int64_t r = -1; r < 65536; ++r)
    if (message_sig(sig, r, bytes) == sig)
      return with_root_and_bytes(sig, r, bytes) + " where this rank called " + mine;
  for (std::uint64_t d = 1; d <= 4096; ++d) {
    if (message_sig(sig, root, bytes + d) == sig)
      return with_root_and_bytes(sig, root, bytes + d) + " where this rank called " + mine;
    if (d <= bytes && message_sig(sig, root, bytes - d) == sig)
      return with_root_and_bytes(sig, root, bytes - d) + " where this rank called " + mine;
  }
  return theirs + " with another byte count or root, where this rank called " + mine;
}

std::uint64_t message_signature(const OpContext& ctx) {
  const std::uint64_t bytes = op_signature_bytes(ctx);
  const std::uint64_t sig = message_sig(op_signature(ctx), ctx.root, bytes);
  Recent& r = slot(sig);
  r.sig.store(0, std::memory_order_relaxed);
  r.root.store(ctx.root, std::memory_order_relaxed);
  r.bytes.store(bytes, std::memory_order_relaxed);
  r.sig.store(sig, std::memory_order_release);
  return sig;
}

std::uint64_t op_signature(const OpContext& ctx) {
  return static_cast<std::uint64_t>(hash_names(ctx.op_name, ctx.dtype_name, ctx.redop_name)) << 32 |
         static_cast<std::uint32_t>(ctx.root + 1);
}

std::uint64_t op_signature_bytes(const OpContext& ctx) { return ctx.varying_sizes ? ~std::uint64_t(0) : ctx.bytes; }

std::string describe_signature(std::uint64_t sig, std::uint64_t bytes) {
  const auto h = static_cast<std::uint32_t>(sig >> 32);
  std::string text;
  for (const char* kind : kKinds) {
    for (int d = -1; d < kNumDataTypes && text.empty(); ++d) {
      const char* dtype = d < 0 ? nullptr : dtype_name(static_cast<DataType>(d));
      for (int k = -1; k < kNumReduceOps && text.empty(); ++k) {
        const char* redop = k < 0 ? nullptr : reduce_op_name(static_cast<ReduceOpKind>(k));
        if (hash_names(kind, dtype, redop) != h) continue;
        text = std::string(kind) + " (";
        if (bytes != kNoBytes)
          text += bytes == ~std::uint64_t(0) ? std::string("sizes vary") : std::to_string(bytes) + " B";
        std::string rest;
        if (dtype) rest += std::string(", ") + dtype;
        if (redop) rest += std::string(", ") + redop;
        const auto root = static_cast<std::uint32_t>(sig);
        if (root != 0) rest += ", root " + std::to_string(root - 1);
        if (bytes == kNoBytes && !rest.empty()) rest.erase(0, 2);
        text += rest + ")";
        if (text.back() == ')' && text[text.size() - 2] == '(') text.resize(text.size() - 3);  // " ()"
      }
    }
    if (!text.empty()) break;
  }
  return text.empty() ? "an operation this rank does not know" : text;
}

}  // namespace tutti::detail
