// Bruck's all_gather: ceil(log2 n) rounds for any n. Blocks collect in a
// scratch buffer in the order of rank distance (slot i: rank r + i); round k
// sends the first min(2^k, n - 2^k) slots to rank r - 2^k and receives as
// many from r + 2^k behind them. A local rotation puts them in place.
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"
#include "patterns/bruck.h"

namespace tutti::detail {

void all_gather_bruck(OpContext& ctx, std::span<const Block> out, std::size_t es) {
  const int n = ctx.size, r = ctx.rank;
  const std::size_t bytes = out[r].count * es;
  if (n == 1 || bytes == 0) return;
  char* const t = ctx.buffer(0, n * bytes);
  std::memcpy(t, out[r].ptr, bytes);
  for (int k = 0; k < bruck::rounds(n); ++k) {
    const std::size_t len = static_cast<std::size_t>(bruck::ag_count(k, n)) * bytes;
    ctx.sendrecv(bruck::ag_send_to(r, k, n), t, len, bruck::ag_recv_from(r, k, n), t + (std::size_t(1) << k) * bytes,
                 len, static_cast<std::uint32_t>(k));
  }
  for (int i = 1; i < n; ++i) std::memcpy(out[bruck::ag_slot_owner(r, i, n)].ptr, t + i * bytes, bytes);
}

}  // namespace tutti::detail
