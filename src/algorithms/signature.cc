#include "algorithms/signature.h"

#include "algorithms/context.h"
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

std::string describe_signature_kind(std::uint64_t sig) { return describe_signature(sig, kNoBytes); }

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
