#include "algorithms/halving_doubling.h"

#include "algorithms/ring_steps.h"
#include "reduce/reduce.h"

namespace tutti::detail::halving_doubling {

namespace rd = recursive_doubling;

void post_send_chunks(OpContext& ctx, int peer, std::uint32_t step, const char* buf, std::size_t bytes,
                      std::vector<Pending>& out) {
  for (std::size_t k = 0; k < num_chunks(bytes, ctx.chunk_bytes); ++k) {
    ChunkRange c = chunk_at(bytes, ctx.chunk_bytes, k);
    out.push_back(ctx.isend(peer, step, buf + c.offset, c.count));
  }
}

void post_recv_chunks(OpContext& ctx, int peer, std::uint32_t step, char* buf, std::size_t bytes,
                      std::vector<Pending>& out) {
  for (std::size_t k = 0; k < num_chunks(bytes, ctx.chunk_bytes); ++k) {
    ChunkRange c = chunk_at(bytes, ctx.chunk_bytes, k);
    out.push_back(ctx.irecv(peer, step, buf + c.offset, c.count));
  }
}

void send_chunked(OpContext& ctx, int peer, std::uint32_t step, const char* buf, std::size_t bytes) {
  std::vector<Pending> p;
  post_send_chunks(ctx, peer, step, buf, bytes, p);
  ctx.wait_all(p);
}

void recv_chunked(OpContext& ctx, int peer, std::uint32_t step, char* buf, std::size_t bytes) {
  std::vector<Pending> p;
  post_recv_chunks(ctx, peer, step, buf, bytes, p);
  ctx.wait_all(p);
}

namespace {

// Waits for each posted receive chunk of tmp in turn and reduces it into acc.
void reduce_as_arriving(OpContext& ctx, std::vector<Pending>& recvs, char* acc, const char* tmp, std::size_t count,
                        DataType dtype, ReduceOpKind op, bool peer_is_lower) {
  const std::size_t es = dtype_size(dtype), pc = chunk_elems(ctx.chunk_bytes, es);
  for (std::size_t k = 0; k < recvs.size(); ++k) {
    ctx.wait(recvs[k]);
    ChunkRange c = chunk_at(count, pc, k);
    char* a = acc + c.offset * es;
    const char* t = tmp + c.offset * es;
    // A fixed order (lower rank's data first): the kernels are not
    // commutative bit for bit (min(+0,-0), NaN payloads).
    if (peer_is_lower) {
      reduce_pair(a, t, a, c.count, dtype, op);
    } else {
      reduce_inplace(a, t, c.count, dtype, op);
    }
  }
  recvs.clear();
}

void post_recvs_elems(OpContext& ctx, int peer, std::uint32_t step, char* tmp, std::size_t count, std::size_t es,
                      std::vector<Pending>& out) {
  const std::size_t pc = chunk_elems(ctx.chunk_bytes, es);
  for (std::size_t k = 0; k < num_chunks(count, pc); ++k) {
    ChunkRange c = chunk_at(count, pc, k);
    out.push_back(ctx.irecv(peer, step, tmp + c.offset * es, c.count * es));
  }
}

void post_sends_elems(OpContext& ctx, int peer, std::uint32_t step, const char* buf, std::size_t count, std::size_t es,
                      std::vector<Pending>& out) {
  const std::size_t pc = chunk_elems(ctx.chunk_bytes, es);
  for (std::size_t k = 0; k < num_chunks(count, pc); ++k) {
    ChunkRange c = chunk_at(count, pc, k);
    out.push_back(ctx.isend(peer, step, buf + c.offset * es, c.count * es));
  }
}

}  // namespace

void recv_reduce(OpContext& ctx, int peer, std::uint32_t step, char* acc, std::size_t count, DataType dtype,
                 ReduceOpKind op, bool peer_is_lower, char* tmp) {
  std::vector<Pending> recvs;
  post_recvs_elems(ctx, peer, step, tmp, count, dtype_size(dtype), recvs);
  reduce_as_arriving(ctx, recvs, acc, tmp, count, dtype, op, peer_is_lower);
}

void exchange_reduce(OpContext& ctx, int peer, std::uint32_t step, const char* send, std::size_t send_count, char* acc,
                     std::size_t recv_count, DataType dtype, ReduceOpKind op, bool peer_is_lower, char* tmp) {
  const std::size_t es = dtype_size(dtype);
  std::vector<Pending> recvs, sends;
  post_recvs_elems(ctx, peer, step, tmp, recv_count, es, recvs);
  post_sends_elems(ctx, peer, step, send, send_count, es, sends);
  reduce_as_arriving(ctx, recvs, acc, tmp, recv_count, dtype, op, peer_is_lower);
  ctx.wait_all(sends);
}

void reduce_scatter_halving(OpContext& ctx, char* buf, const std::vector<std::size_t>& offs, const rd::Fold& f,
                            DataType dtype, ReduceOpKind op, std::uint32_t step0) {
  const int v = f.vrank;
  const std::size_t es = dtype_size(dtype);
  if (f.p == 1) return;
  // The first round keeps the largest range; later ones keep parts of it.
  const rd::Range first = rd::group(v, f.p / 2);
  // Slot 2: the callers' folds use 0 and 1.
  char* const tmp = ctx.buffer(2, (offs[first.hi] - offs[first.lo]) * es);
  std::uint32_t step = step0;
  for (int mask = f.p / 2; mask >= 1; mask >>= 1, ++step) {
    const int pv = v ^ mask;
    const rd::Range keep = rd::group(v, mask), give = rd::group(pv, mask);
    exchange_reduce(ctx, rd::real_rank(pv, f), step, buf + offs[give.lo] * es, offs[give.hi] - offs[give.lo],
                    buf + offs[keep.lo] * es, offs[keep.hi] - offs[keep.lo], dtype, op, pv < v, tmp);
  }
}

void all_gather_doubling(OpContext& ctx, char* buf, const std::vector<std::size_t>& offs, std::size_t es,
                         const rd::Fold& f, std::uint32_t step0) {
  const int v = f.vrank;
  std::uint32_t step = step0;
  std::vector<Pending> pending;
  for (int mask = 1; mask < f.p; mask <<= 1, ++step) {
    const int pv = v ^ mask;
    const rd::Range mine = rd::group(v, mask), theirs = rd::group(pv, mask);
    const int peer = rd::real_rank(pv, f);
    post_recv_chunks(ctx, peer, step, buf + offs[theirs.lo] * es, (offs[theirs.hi] - offs[theirs.lo]) * es, pending);
    post_send_chunks(ctx, peer, step, buf + offs[mine.lo] * es, (offs[mine.hi] - offs[mine.lo]) * es, pending);
    ctx.wait_all(pending);
  }
}

}  // namespace tutti::detail::halving_doubling
