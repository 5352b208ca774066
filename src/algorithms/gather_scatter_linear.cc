// Linear gather and scatter: the root posts one receive (send) per rank,
// straight into (out of) place; the transport overlaps them.
#include "algorithms/algorithms.h"

namespace tutti::detail {

void gather_linear(OpContext& ctx, const void* sendbuf, std::span<char* const> out, std::size_t bytes, int root) {
  const int n = ctx.size, r = ctx.rank;
  if (bytes == 0 || n == 1) return;
  if (r != root) {
    ctx.send(root, 0, sendbuf, bytes);
    return;
  }
  std::vector<Pending> recvs;
  for (int p = 0; p < n; ++p)
    if (p != root) recvs.push_back(ctx.irecv(p, 0, out[p], bytes));
  ctx.wait_all(recvs);
}

void scatter_linear(OpContext& ctx, std::span<const char* const> in, void* recvbuf, std::size_t bytes, int root) {
  const int n = ctx.size, r = ctx.rank;
  if (bytes == 0 || n == 1) return;
  if (r != root) {
    ctx.recv(root, 0, recvbuf, bytes);
    return;
  }
  std::vector<Pending> sends;
  for (int p = 0; p < n; ++p)
    if (p != root) sends.push_back(ctx.isend(p, 0, in[p], bytes));
  ctx.wait_all(sends);
}

}  // namespace tutti::detail
