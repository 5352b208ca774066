// Binomial-tree reduce, chunked: each rank reduces its children's partial
// results into its own, chunk by chunk, and passes each finished chunk to its
// parent while the next chunk is still arriving.
#include <algorithm>
#include <cstring>

#include "algorithms/algorithms.h"
#include "algorithms/ring_steps.h"
#include "patterns/binomial.h"
#include "reduce/reduce.h"

namespace tutti::detail {

void reduce_binomial(OpContext& ctx, const void* sendbuf, void* recvbuf, std::size_t count, DataType dtype,
                     ReduceOpKind op, int root) {
  const int n = ctx.size, r = ctx.rank;
  const std::size_t es = dtype_size(dtype), bytes = count * es;
  if (bytes == 0) return;
  // A non-root reduces into a copy of its input (scratch slot 0).
  char* acc = r == root ? static_cast<char*>(recvbuf) : ctx.buffer(0, bytes);
  if (acc != sendbuf) std::memcpy(acc, sendbuf, bytes);
  if (n == 1) return;
  const int parent = binomial::parent(r, root, n);
  const std::vector<int> children = binomial::children(r, root, n);
  const std::size_t pc = chunk_elems(ctx.chunk_bytes, es);
  const std::size_t nch = num_chunks(count, pc);
  const std::size_t nc = children.size();
  // Two chunk buffers per child (scratch slot 1), each as large as a chunk
  // or the message: chunk k+1 arrives while chunk k is reduced.
  const std::size_t slot_bytes = std::min(pc, count) * es;
  char* const tmp = ctx.buffer(1, 2 * nc * slot_bytes);
  auto slot = [&](std::size_t child, std::size_t k) { return tmp + ((k % 2) * nc + child) * slot_bytes; };
  std::vector<std::vector<Pending>> recvs(nch);
  auto post = [&](std::size_t k) {
    ChunkRange c = chunk_at(count, pc, k);
    for (std::size_t i = 0; i < nc; ++i) recvs[k].push_back(ctx.irecv(children[i], 0, slot(i, k), c.count * es));
  };
  std::vector<Pending> sends;
  if (nch > 0) post(0);
  for (std::size_t k = 0; k < nch; ++k) {
    if (k + 1 < nch) post(k + 1);
    ChunkRange c = chunk_at(count, pc, k);
    for (std::size_t i = 0; i < nc; ++i) {
      ctx.wait(recvs[k][i]);
      reduce_inplace(acc + c.offset * es, slot(i, k), c.count, dtype, op);
    }
    if (parent >= 0) sends.push_back(ctx.isend(parent, 0, acc + c.offset * es, c.count * es));
  }
  ctx.wait_all(sends);
}

}  // namespace tutti::detail
