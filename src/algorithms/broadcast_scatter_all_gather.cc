// Van de Geijn's broadcast: the root scatters n nearly equal pieces down a
// binomial tree, then a ring all_gather assembles them everywhere. Each rank
// sends and receives about 2(n-1)/n of the message (a binomial tree sends
// it log2(n) times from the root), so it wins for large messages.
//
// Pieces are numbered by virtual rank v = (r - root) mod n: a binomial
// scatter hands v the contiguous pieces [v, subtree_end(v)) of its subtree.
// Messages smaller than n bytes leave some pieces empty; those are never sent.
#include <algorithm>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/halving_doubling.h"
#include "patterns/binomial.h"

namespace tutti::detail {

void broadcast_scatter_all_gather(OpContext& ctx, void* buf, std::size_t bytes, int root) {
  const int n = ctx.size, r = ctx.rank;
  if (n == 1 || bytes == 0) return;
  namespace hd = halving_doubling;
  char* p = static_cast<char*>(buf);
  const std::size_t base = bytes / n, extra = bytes % n;
  auto offset = [&](int v) {
    return static_cast<std::size_t>(v) * base + std::min(static_cast<std::size_t>(v), extra);
  };
  const int v = binomial::to_virtual(r, root, n);
  const int parent = binomial::parent(r, root, n);
  constexpr std::uint32_t kScatter = 0;
  if (parent >= 0) {
    const int end = binomial::subtree_end(v, n);
    hd::recv_chunked(ctx, parent, kScatter, p + offset(v), offset(end) - offset(v));
  }
  std::vector<Pending> sends;
  for (int child : binomial::children(r, root, n)) {
    const int cv = binomial::to_virtual(child, root, n), end = binomial::subtree_end(cv, n);
    hd::post_send_chunks(ctx, child, kScatter, p + offset(cv), offset(end) - offset(cv), sends);
  }
  ctx.wait_all(sends);
  std::vector<Block> pieces(n);
  for (int q = 0; q < n; ++q) {
    const int qv = binomial::to_virtual(q, root, n);
    pieces[q] = Block{p + offset(qv), offset(qv + 1) - offset(qv)};
  }
  ctx.step_base += 1;
  all_gather_ring(ctx, pieces, 1);
  ctx.step_base -= 1;
}

}  // namespace tutti::detail
