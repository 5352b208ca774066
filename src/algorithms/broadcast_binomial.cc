// Binomial-tree broadcast, chunked: every chunk is forwarded to the children
// as soon as it has arrived, so large messages stream down the tree.
#include "algorithms/algorithms.h"
#include "algorithms/ring_steps.h"
#include "patterns/binomial.h"

namespace tutti::detail {

void broadcast_binomial(OpContext& ctx, void* buf, std::size_t bytes, int root) {
  const int n = ctx.size, r = ctx.rank;
  if (n == 1 || bytes == 0) return;
  char* p = static_cast<char*>(buf);
  const int parent = binomial::parent(r, root, n);
  const std::vector<int> children = binomial::children(r, root, n);
  const std::size_t pc = ctx.chunk_bytes;
  const std::size_t nch = num_chunks(bytes, pc);
  std::vector<Pending> recvs, sends;
  if (parent >= 0) {
    for (std::size_t k = 0; k < nch; ++k) {
      ChunkRange c = chunk_at(bytes, pc, k);
      recvs.push_back(ctx.irecv(parent, 0, p + c.offset, c.count));
    }
  }
  for (std::size_t k = 0; k < nch; ++k) {
    ChunkRange c = chunk_at(bytes, pc, k);
    if (parent >= 0) ctx.wait(recvs[k]);
    for (int child : children) sends.push_back(ctx.isend(child, 0, p + c.offset, c.count));
  }
  ctx.wait_all(sends);
}

}  // namespace tutti::detail
