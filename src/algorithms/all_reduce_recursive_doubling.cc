// Recursive doubling all_reduce: log2(p) rounds of full-buffer exchanges;
// best for small messages, where latency dominates.
#include <vector>

#include "algorithms/algorithms.h"
#include "patterns/recursive_doubling.h"
#include "reduce/reduce.h"

namespace tutti::detail {

void all_reduce_recursive_doubling(OpContext& ctx, void* buf, std::size_t count, DataType dtype, ReduceOpKind op) {
  const int n = ctx.size, r = ctx.rank;
  const std::size_t bytes = count * dtype_size(dtype);
  if (n == 1 || bytes == 0) return;
  char* const tmp = ctx.buffer(0, bytes);
  namespace rd = recursive_doubling;
  const rd::Fold f = rd::fold(r, n);
  enum : std::uint32_t { kFoldIn = 0, kFoldOut = 1, kRound0 = 2 };
  if (f.vrank < 0) {
    // Folded out: hand our data to the odd neighbour, get the result back.
    ctx.send(r + 1, kFoldIn, buf, bytes);
    ctx.recv(r + 1, kFoldOut, buf, bytes);
    return;
  }
  if (r < 2 * f.rem) {
    ctx.recv(r - 1, kFoldIn, tmp, bytes);
    reduce_inplace(buf, tmp, count, dtype, op);
  }
  std::uint32_t round = 0;
  for (int mask = 1; mask < f.p; mask <<= 1, ++round) {
    int peer = rd::partner(f.vrank, mask, f);
    ctx.sendrecv(peer, buf, bytes, peer, tmp, bytes, kRound0 + round);
    // Both partners reduce (lower participant) op (higher participant): the
    // kernels are not commutative bit for bit (min(+0,-0), NaN payloads), so
    // a fixed order is what leaves identical bits on every rank.
    if (f.vrank < (f.vrank ^ mask)) {
      reduce_inplace(buf, tmp, count, dtype, op);
    } else {
      reduce_pair(buf, tmp, buf, count, dtype, op);
    }
  }
  if (r < 2 * f.rem) ctx.send(r - 1, kFoldOut, buf, bytes);
}

}  // namespace tutti::detail
