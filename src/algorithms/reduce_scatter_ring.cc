// Ring reduce-scatter: n-1 steps; at each, a rank receives a partial block
// from its predecessor, reduces its own input into it and forwards it. Each
// step is cut into chunks; a chunk is forwarded as soon as it is reduced, and
// the next step's receives are posted before this step's reductions, so
// receiving, reducing and sending overlap.
#include <algorithm>
#include <cstring>

#include "algorithms/algorithms.h"
#include "algorithms/ring_steps.h"
#include "patterns/ring.h"
#include "reduce/reduce.h"

namespace tutti::detail {
namespace {

// input(b): this rank's contribution to block b. acc(b, s): where the partial
// result of block b is written at step s (the last step writes the result).
template <class InputFn, class AccFn>
void ring_reduce_scatter(OpContext& ctx, const std::vector<std::size_t>& counts, DataType dtype, ReduceOpKind op,
                         InputFn input, AccFn acc) {
  const int n = ctx.size, r = ctx.rank;
  const std::size_t es = dtype_size(dtype);
  const std::size_t pc = chunk_elems(ctx.chunk_bytes, es);
  const int next = ring::next(r, n), prev = ring::prev(r, n);
  const std::size_t maxc = *std::max_element(counts.begin(), counts.end());
  // Slots 0 and 1 (reduce_scatter_ring's own partial results use 2 and 3).
  char* tmp[2] = {ctx.buffer(0, maxc * es), ctx.buffer(1, maxc * es)};
  std::vector<Pending> recvs[2];
  std::vector<std::vector<Pending>> sends(n);

  auto post_recvs = [&](int s) {
    int rb = ring::rs_recv_block(r, s, n);
    for (std::size_t k = 0; k < num_chunks(counts[rb], pc); ++k) {
      ChunkRange c = chunk_at(counts[rb], pc, k);
      recvs[s % 2].push_back(ctx.irecv(prev, static_cast<std::uint32_t>(s), tmp[s % 2] + c.offset * es,
                                       c.count * es));
    }
  };
  // Receives first: a neighbour's first chunks that arrive before their
  // receive is posted are buffered and copied once more.
  post_recvs(0);
  {
    int sb = ring::rs_send_block(r, 0, n);
    for (std::size_t k = 0; k < num_chunks(counts[sb], pc); ++k) {
      ChunkRange c = chunk_at(counts[sb], pc, k);
      sends[0].push_back(ctx.isend(next, 0, input(sb) + c.offset * es, c.count * es));
    }
  }
  for (int s = 0; s < n - 1; ++s) {
    if (s + 1 < n - 1) post_recvs(s + 1);
    // acc(., s) may reuse the memory that step s-1's sends are reading.
    if (s >= 1) ctx.wait_all(sends[s - 1]);
    int rb = ring::rs_recv_block(r, s, n);
    char* dst = acc(rb, s);
    const char* mine = input(rb);
    for (std::size_t k = 0; k < recvs[s % 2].size(); ++k) {
      ChunkRange c = chunk_at(counts[rb], pc, k);
      ctx.wait(recvs[s % 2][k]);
      reduce_pair(dst + c.offset * es, mine + c.offset * es, tmp[s % 2] + c.offset * es, c.count, dtype, op);
      if (s + 1 < n - 1)
        sends[s + 1].push_back(ctx.isend(next, static_cast<std::uint32_t>(s + 1), dst + c.offset * es, c.count * es));
    }
    recvs[s % 2].clear();
  }
  for (auto& v : sends) ctx.wait_all(v);
}

}  // namespace

void reduce_scatter_ring(OpContext& ctx, std::span<const ConstBlock> in, void* out, DataType dtype,
                         ReduceOpKind op) {
  const int n = ctx.size;
  const std::size_t es = dtype_size(dtype);
  const std::size_t count = in[ctx.rank].count;
  if (n == 1) {
    if (count && out != in[0].ptr) std::memmove(out, in[0].ptr, count * es);
    return;
  }
  if (count == 0) return;
  std::vector<std::size_t> counts(n, count);
  char* slots[2] = {ctx.buffer(2, count * es), ctx.buffer(3, count * es)};
  ring_reduce_scatter(
      ctx, counts, dtype, op, [&](int b) { return in[b].ptr; },
      [&](int, int s) { return s == n - 2 ? static_cast<char*>(out) : slots[s % 2]; });
}

void reduce_scatter_ring_inplace(OpContext& ctx, std::span<const Block> blocks, DataType dtype, ReduceOpKind op) {
  const int n = ctx.size;
  if (n == 1) return;
  std::vector<std::size_t> counts(n);
  for (int b = 0; b < n; ++b) counts[b] = blocks[b].count;
  ring_reduce_scatter(
      ctx, counts, dtype, op, [&](int b) { return static_cast<const char*>(blocks[b].ptr); },
      [&](int b, int) { return blocks[b].ptr; });
}

}  // namespace tutti::detail
