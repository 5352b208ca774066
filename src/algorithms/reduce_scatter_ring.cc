// Ring reduce-scatter: n-1 steps; at each, a rank receives a partial block
// from its predecessor, reduces its own input into it and forwards it. Each
// step is cut into chunks; a chunk is forwarded as soon as it is reduced.
// Chunks are received into a window of chunk-sized slots, posted up to the
// window ahead of the chunk being reduced (across steps), so receiving,
// reducing and sending overlap while the scratch memory stays bounded.
#include <algorithm>
#include <cstring>

#include "algorithms/algorithms.h"
#include "algorithms/ring_steps.h"
#include "patterns/ring.h"
#include "reduce/reduce.h"

namespace tutti::detail {
namespace {

// Bytes of the receive window (at most kMaxSlots chunks, at least 2). One
// slot per chunk of a whole step would make a 256 MiB all_reduce on 4 ranks
// allocate two 64 MiB blocks and fault them in again at every operation
// (past Scratch::kKeepBytes), markedly slower between 4 test-bed hosts at
// 1 Gbit/s than with the memory kept (bench/peers/netbed/compare.sh, PER=1,
// MAXB=256M; docs/performance.md "4 hosts × 1 rank").
constexpr std::size_t kWindowBytes = std::size_t(16) << 20;
constexpr std::size_t kMaxSlots = 64;

// input(b): this rank's contribution to block b. acc(b, s): where the partial
// result of block b is written at step s (the last step writes the result).
template <class InputFn, class AccFn>
void ring_reduce_scatter(OpContext& ctx, const std::vector<std::size_t>& counts, DataType dtype, ReduceOpKind op,
                         InputFn input, AccFn acc) {
  const int n = ctx.size, r = ctx.rank;
  const std::size_t es = dtype_size(dtype);
  const std::size_t pc = chunk_elems(ctx.chunk_bytes, es);
  const int next = ring::next(r, n), prev = ring::prev(r, n);
  // The chunks this rank receives, in order: every chunk of step 0, then of
  // step 1, ... Chunk j lands in slot j % slots; it is posted once chunk
  // j - slots has been reduced.
  std::size_t total = 0;
  for (int s = 0; s < n - 1; ++s) total += num_chunks(counts[ring::rs_recv_block(r, s, n)], pc);
  // (At least one: a rank with nothing to receive still sends its block.)
  const std::size_t slots = std::max<std::size_t>(
      1, std::min(total, std::clamp<std::size_t>(kWindowBytes / (pc * es), std::size_t{2}, kMaxSlots)));
  char* tmp = ctx.buffer(0, slots * pc * es);
  std::vector<Pending> recvs(slots);
  int post_step = 0;  // where the next receive to post lies
  std::size_t post_chunk = 0;
  std::size_t posted = 0;  // receives posted so far
  auto post_next = [&] {
    while (post_step < n - 1 && post_chunk == num_chunks(counts[ring::rs_recv_block(r, post_step, n)], pc)) {
      ++post_step;
      post_chunk = 0;
    }
    if (post_step == n - 1) return;
    const ChunkRange c = chunk_at(counts[ring::rs_recv_block(r, post_step, n)], pc, post_chunk++);
    const std::size_t slot = posted++ % slots;
    recvs[slot] = ctx.irecv(prev, static_cast<std::uint32_t>(post_step), tmp + slot * pc * es, c.count * es);
  };
  // Receives first: a neighbour's first chunks that arrive before their
  // receive is posted are buffered and copied once more.
  for (std::size_t i = 0; i < slots; ++i) post_next();
  std::vector<std::vector<Pending>> sends(n);
  {
    int sb = ring::rs_send_block(r, 0, n);
    for (std::size_t k = 0; k < num_chunks(counts[sb], pc); ++k) {
      ChunkRange c = chunk_at(counts[sb], pc, k);
      sends[0].push_back(ctx.isend(next, 0, input(sb) + c.offset * es, c.count * es));
    }
  }
  std::size_t reduced = 0;
  for (int s = 0; s < n - 1; ++s) {
    // acc(., s) may reuse the memory that step s-1's sends are reading.
    if (s >= 1) ctx.wait_all(sends[s - 1]);
    int rb = ring::rs_recv_block(r, s, n);
    char* dst = acc(rb, s);
    const char* mine = input(rb);
    for (std::size_t k = 0; k < num_chunks(counts[rb], pc); ++k) {
      ChunkRange c = chunk_at(counts[rb], pc, k);
      const std::size_t slot = reduced++ % slots;
      ctx.wait(recvs[slot]);
      reduce_pair(dst + c.offset * es, mine + c.offset * es, tmp + slot * pc * es, c.count, dtype, op);
      post_next();  // into the slot just reduced
      if (s + 1 < n - 1)
        sends[s + 1].push_back(ctx.isend(next, static_cast<std::uint32_t>(s + 1), dst + c.offset * es, c.count * es));
    }
  }
  for (auto& v : sends) ctx.wait_all(v);
}

}  // namespace

void reduce_scatter_ring(OpContext& ctx, std::span<const ConstBlock> in, void* out, DataType dtype, ReduceOpKind op) {
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
