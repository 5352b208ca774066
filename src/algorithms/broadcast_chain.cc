// Pipelined chain broadcast: root -> root+1 -> ... -> root-1, in chunks of
// the op's chunk size; each rank forwards a chunk as soon as it arrives.
// Every link carries the data once, so for large messages the time
// approaches one transfer of the message plus (n - 2) chunk times.
#include "algorithms/algorithms.h"
#include "algorithms/ring_steps.h"
#include "patterns/chain.h"

namespace tutti::detail {

void broadcast_chain(OpContext& ctx, void* buf, std::size_t bytes, int root) {
  const int n = ctx.size, r = ctx.rank;
  if (n == 1 || bytes == 0) return;
  char* p = static_cast<char*>(buf);
  const int prev = chain::prev(r, root, n), next = chain::next(r, root, n);
  const std::size_t pc = ctx.chunk_bytes, nch = num_chunks(bytes, pc);
  std::vector<Pending> recvs, sends;
  if (prev >= 0)
    for (std::size_t k = 0; k < nch; ++k) {
      ChunkRange c = chunk_at(bytes, pc, k);
      recvs.push_back(ctx.irecv(prev, 0, p + c.offset, c.count));
    }
  for (std::size_t k = 0; k < nch; ++k) {
    ChunkRange c = chunk_at(bytes, pc, k);
    if (prev >= 0) ctx.wait(recvs[k]);
    if (next >= 0) sends.push_back(ctx.isend(next, 0, p + c.offset, c.count));
  }
  ctx.wait_all(sends);
}

}  // namespace tutti::detail
