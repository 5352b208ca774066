// Recursive-halving reduce_scatter: log2(p) rounds, each halving the data a
// rank still holds partial results for. Non-powers of two fold first: the
// first 2(n - p) ranks pair up, the even one handing all its input to the
// odd one, which then stands for both ranks' blocks and hands the even
// rank its result at the end.
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/halving_doubling.h"
#include "patterns/recursive_doubling.h"

namespace tutti::detail {

void reduce_scatter_recursive_halving(OpContext& ctx, std::span<const ConstBlock> in, void* out, DataType dtype,
                                      ReduceOpKind op) {
  const int n = ctx.size, r = ctx.rank;
  const std::size_t es = dtype_size(dtype);
  const std::size_t count = in[r].count, bytes = count * es;
  if (n == 1) {
    if (bytes && out != in[0].ptr) std::memmove(out, in[0].ptr, bytes);
    return;
  }
  if (count == 0) return;
  namespace rd = recursive_doubling;
  namespace hd = halving_doubling;
  // One contiguous accumulator of every block (out may alias in[r]).
  char* const acc = ctx.buffer(0, n * bytes);
  for (int b = 0; b < n; ++b) std::memcpy(acc + b * bytes, in[b].ptr, bytes);
  const rd::Fold f = rd::fold(r, n);
  const std::uint32_t kFoldIn = 0, kFoldOut = 1, kHalving = 2;
  if (f.vrank < 0) {
    hd::send_chunked(ctx, r + 1, kFoldIn, acc, n * bytes);
    hd::recv_chunked(ctx, r + 1, kFoldOut, static_cast<char*>(out), bytes);
    return;
  }
  if (r < 2 * f.rem) {
    hd::recv_reduce(ctx, r - 1, kFoldIn, acc, n * count, dtype, op, true, ctx.buffer(1, n * bytes));
  }
  // Participant v holds the blocks of the real ranks it stands for.
  std::vector<std::size_t> offs(f.p + 1);
  for (int v = 0; v <= f.p; ++v) offs[v] = static_cast<std::size_t>(rd::first_real(v, f)) * count;
  hd::reduce_scatter_halving(ctx, acc, offs, f, dtype, op, kHalving);
  if (r < 2 * f.rem) hd::send_chunked(ctx, r - 1, kFoldOut, acc + (r - 1) * bytes, bytes);
  std::memcpy(out, acc + r * bytes, bytes);
}

}  // namespace tutti::detail
