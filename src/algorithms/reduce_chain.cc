// Pipelined chain reduce: root-1 -> root-2 -> ... -> root+1 -> root (the
// broadcast chain reversed), in chunks of an eighth of the message (16 KiB
// to the op's chunk size: chain::reduce_chunk_elems). Each rank
// receives a chunk's partial result from its successor, reduces its own
// input into it and passes the chunk on while the next ones arrive. Every
// link carries the data once, so for large messages the time approaches one
// transfer of the message plus (n - 2) chunk times; the root receives S,
// where a binomial tree's root receives log2 p times S. A rank works in
// kSlots chunk buffers, whatever the message's size: no copy of its input.
#include <algorithm>
#include <cstring>

#include "algorithms/algorithms.h"
#include "algorithms/ring_steps.h"
#include "patterns/chain.h"
#include "reduce/reduce.h"

namespace tutti::detail {

void reduce_chain(OpContext& ctx, const void* sendbuf, void* recvbuf, std::size_t count, DataType dtype,
                  ReduceOpKind op, int root) {
  const int n = ctx.size, r = ctx.rank;
  const std::size_t es = dtype_size(dtype), bytes = count * es;
  if (bytes == 0) return;
  const char* in = static_cast<const char*>(sendbuf);
  if (n == 1) {
    if (recvbuf != sendbuf) std::memcpy(recvbuf, sendbuf, bytes);
    return;
  }
  const int from = chain::next(r, root, n);  // -1: the chain's far end
  const int to = chain::prev(r, root, n);    // -1: the root
  const std::size_t pc = chain::reduce_chunk_elems(count, es, ctx.chunk_bytes), nch = num_chunks(count, pc);
  if (from < 0) {  // the far end sends its input as it is
    std::vector<Pending> sends;
    for (std::size_t k = 0; k < nch; ++k) {
      const ChunkRange c = chunk_at(count, pc, k);
      sends.push_back(ctx.isend(to, 0, in + c.offset * es, c.count * es));
    }
    ctx.wait_all(sends);
    return;
  }
  // Chunk k arrives in slot k % kSlots, is reduced there (own input first,
  // as the binomial tree does) and leaves from it; the slot takes chunk
  // k + kSlots once that send is done.
  constexpr std::size_t kSlots = 4;
  const std::size_t slot_bytes = std::min(pc, count) * es;
  char* const tmp = ctx.buffer(0, std::min(kSlots, nch) * slot_bytes);
  auto slot = [&](std::size_t k) { return tmp + (k % kSlots) * slot_bytes; };
  std::vector<Pending> recvs(nch), sends(to >= 0 ? nch : 0);
  auto post = [&](std::size_t k) {
    if (to >= 0 && k >= kSlots) ctx.wait(sends[k - kSlots]);
    recvs[k] = ctx.irecv(from, 0, slot(k), chunk_at(count, pc, k).count * es);
  };
  post(0);
  for (std::size_t k = 0; k < nch; ++k) {
    if (k + 1 < nch) post(k + 1);
    const ChunkRange c = chunk_at(count, pc, k);
    ctx.wait(recvs[k]);
    if (to < 0) {
      reduce_pair(static_cast<char*>(recvbuf) + c.offset * es, in + c.offset * es, slot(k), c.count, dtype, op);
    } else {
      reduce_pair(slot(k), in + c.offset * es, slot(k), c.count, dtype, op);
      sends[k] = ctx.isend(to, 0, slot(k), c.count * es);
    }
  }
  if (to >= 0) {
    std::vector<Pending> left(sends.begin() + static_cast<std::ptrdiff_t>(nch - std::min(kSlots, nch)), sends.end());
    ctx.wait_all(left);
  }
}

}  // namespace tutti::detail
