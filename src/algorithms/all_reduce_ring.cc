// Ring all_reduce = ring reduce-scatter (in place) + ring all-gather over n
// nearly equal blocks of the buffer; each rank moves 2(n-1)/n of the data,
// which is optimal for large messages.
#include "algorithms/algorithms.h"

namespace tutti::detail {

void all_reduce_ring(OpContext& ctx, void* buf, std::size_t count, DataType dtype, ReduceOpKind op) {
  const int n = ctx.size;
  if (n == 1 || count == 0) return;
  const std::size_t es = dtype_size(dtype);
  std::vector<Block> blocks(n);
  std::size_t base = count / n, extra = count % n, off = 0;
  for (int b = 0; b < n; ++b) {
    std::size_t c = base + (static_cast<std::size_t>(b) < extra ? 1 : 0);
    blocks[b] = Block{static_cast<char*>(buf) + off * es, c};
    off += c;
  }
  reduce_scatter_ring_inplace(ctx, blocks, dtype, op);
  ctx.step_base += static_cast<std::uint32_t>(n);
  all_gather_ring(ctx, blocks, es);
  ctx.step_base -= static_cast<std::uint32_t>(n);
}

}  // namespace tutti::detail
