// Pairwise-exchange all_to_all: every receive is posted first, then the
// sends go out in pairwise order (step s: to r+s), so that no two ranks hit
// the same destination at once and every message lands in place.
#include <cstring>

#include "algorithms/algorithms.h"
#include "patterns/pairwise.h"

namespace tutti::detail {

void all_to_all_pairwise(OpContext& ctx, const char* sendbuf, std::span<const std::size_t> send_bytes,
                         std::span<const std::size_t> send_displs, char* recvbuf,
                         std::span<const std::size_t> recv_bytes, std::span<const std::size_t> recv_displs) {
  const int n = ctx.size, r = ctx.rank;
  if (send_bytes[r] != recv_bytes[r])
    throw Error(ErrorKind::InvalidArgument, ctx.where() + "sends " + std::to_string(send_bytes[r]) +
                                                " bytes to itself but expects " + std::to_string(recv_bytes[r]));
  if (send_bytes[r]) std::memmove(recvbuf + recv_displs[r], sendbuf + send_displs[r], send_bytes[r]);
  std::vector<Pending> pending;
  pending.reserve(2 * n);
  for (int s = 1; s < n; ++s) {
    int from = pairwise::recv_from(r, s, n);
    pending.push_back(ctx.irecv(from, 0, recvbuf + recv_displs[from], recv_bytes[from]));
  }
  for (int s = 1; s < n; ++s) {
    int to = pairwise::send_to(r, s, n);
    pending.push_back(ctx.isend(to, 0, sendbuf + send_displs[to], send_bytes[to]));
  }
  ctx.wait_all(pending);
}

}  // namespace tutti::detail
