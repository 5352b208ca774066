// Rabenseifner's all_reduce: reduce-scatter by recursive halving, then
// all-gather by recursive doubling, over p = 2^floor(log2 n) participants
// (the first 2(n - p) ranks fold in pairs first, as recursive doubling
// does). Each rank moves about 2(p-1)/p of the data in 2 log2(p) rounds: the
// bandwidth of the ring with logarithmic latency.
#include <algorithm>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/halving_doubling.h"
#include "patterns/recursive_doubling.h"

namespace tutti::detail {

void all_reduce_rabenseifner(OpContext& ctx, void* buf, std::size_t count, DataType dtype, ReduceOpKind op) {
  const int n = ctx.size, r = ctx.rank;
  if (n == 1 || count == 0) return;
  namespace rd = recursive_doubling;
  namespace hd = halving_doubling;
  const std::size_t es = dtype_size(dtype), bytes = count * es;
  // Up to 512 KiB each step goes in units of small_pipe_bytes (32 KiB across
  // hosts, 64 KiB within one), faster at 256 and 512 KiB than one message per
  // step (bench/peers/netbed/compare.sh, PER=1, 64K-512K; within one host
  // TUTTI_TRANSPORT=tcp bench/peers/compare.py all_reduce 4 -b 64K -e 512K;
  // common/thresholds.h, docs/tuning.md "TUTTI_CHUNK_BYTES"); larger
  // operations keep chunk_bytes (smaller units cost there).
  const std::size_t saved_chunk = ctx.chunk_bytes;
  if (bytes <= ctx.small_pipe_max_bytes) ctx.chunk_bytes = std::min(ctx.chunk_bytes, ctx.small_pipe_bytes);
  struct Restore {
    OpContext& c;
    std::size_t v;
    ~Restore() { c.chunk_bytes = v; }
  } restore{ctx, saved_chunk};
  char* p = static_cast<char*>(buf);
  const rd::Fold f = rd::fold(r, n);
  const auto rounds = static_cast<std::uint32_t>(hd::log2_exact(f.p));
  const std::uint32_t kFoldIn = 0, kFoldOut = 1, kHalving = 2, kDoubling = kHalving + rounds;
  if (f.vrank < 0) {
    hd::send_chunked(ctx, r + 1, kFoldIn, p, bytes);
    hd::recv_chunked(ctx, r + 1, kFoldOut, p, bytes);
    return;
  }
  if (r < 2 * f.rem) {
    hd::recv_reduce(ctx, r - 1, kFoldIn, p, count, dtype, op, true, ctx.buffer(0, bytes));
  }
  // Participant v's share: the v-th of p nearly equal element ranges.
  std::vector<std::size_t> offs(f.p + 1);
  const std::size_t base = count / f.p, extra = count % f.p;
  for (int v = 0; v < f.p; ++v) offs[v + 1] = offs[v] + base + (static_cast<std::size_t>(v) < extra ? 1 : 0);
  hd::reduce_scatter_halving(ctx, p, offs, f, dtype, op, kHalving);
  hd::all_gather_doubling(ctx, p, offs, es, f, kDoubling);
  if (r < 2 * f.rem) hd::send_chunked(ctx, r - 1, kFoldOut, p, bytes);
}

}  // namespace tutti::detail
