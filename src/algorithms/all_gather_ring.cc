// Ring all-gather: n-1 steps; each rank forwards the block it received in
// the previous step. Blocks are received in place and forwarded chunk by
// chunk as they arrive.
#include "algorithms/algorithms.h"
#include "algorithms/ring_steps.h"
#include "patterns/ring.h"

namespace tutti::detail {

void all_gather_ring(OpContext& ctx, std::span<const Block> out, std::size_t es) {
  const int n = ctx.size, r = ctx.rank;
  if (n == 1) return;
  const std::size_t pc = chunk_elems(ctx.chunk_bytes, es);
  const int next = ring::next(r, n), prev = ring::prev(r, n);
  std::vector<std::vector<Pending>> recvs(n);
  std::vector<Pending> sends;
  for (int s = 0; s < n - 1; ++s) {
    const Block& b = out[ring::ag_recv_block(r, s, n)];
    for (std::size_t k = 0; k < num_chunks(b.count, pc); ++k) {
      ChunkRange c = chunk_at(b.count, pc, k);
      recvs[s].push_back(ctx.irecv(prev, static_cast<std::uint32_t>(s), b.ptr + c.offset * es, c.count * es));
    }
  }
  for (int s = 0; s < n - 1; ++s) {
    const Block& b = out[ring::ag_send_block(r, s, n)];
    for (std::size_t k = 0; k < num_chunks(b.count, pc); ++k) {
      ChunkRange c = chunk_at(b.count, pc, k);
      if (s > 0) ctx.wait(recvs[s - 1][k]);  // the chunk we forward arrived in step s-1
      sends.push_back(ctx.isend(next, static_cast<std::uint32_t>(s), b.ptr + c.offset * es, c.count * es));
    }
  }
  ctx.wait_all(recvs[n - 2]);
  ctx.wait_all(sends);
}

}  // namespace tutti::detail
