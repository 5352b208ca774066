#pragma once
// The pieces shared by Rabenseifner's all_reduce, the recursive-halving
// reduce_scatter and the recursive-doubling all_gather: the non-power-of-two
// fold and the halving / doubling rounds over the p participants, on one
// contiguous buffer split into p participant ranges.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "algorithms/context.h"
#include "patterns/recursive_doubling.h"
#include "tutti/types.h"

namespace tutti::detail::halving_doubling {

// Receives `count` elements from `peer` in chunks and reduces each into acc
// as it arrives: acc = received (op) acc when the peer is the lower rank,
// acc (op) received otherwise. tmp holds at least min(count, chunk) elements.
void recv_reduce(OpContext& ctx, int peer, std::uint32_t step, char* acc, std::size_t count, DataType dtype,
                 ReduceOpKind op, bool peer_is_lower, char* tmp);

// Sends [send, send + send_count) to peer and reduces what the peer sends
// ([acc, acc + recv_count)) into acc, chunk by chunk.
void exchange_reduce(OpContext& ctx, int peer, std::uint32_t step, const char* send, std::size_t send_count, char* acc,
                     std::size_t recv_count, DataType dtype, ReduceOpKind op, bool peer_is_lower, char* tmp);

// Reduce-scatter by recursive halving among the participants of f. offs
// holds p + 1 element offsets: participant v's range is [offs[v], offs[v+1]).
// On return participant f.vrank holds the full reduction of its range in buf
// (the rest of buf is scratch). Uses steps step0 .. step0 + log2(p) - 1.
void reduce_scatter_halving(OpContext& ctx, char* buf, const std::vector<std::size_t>& offs,
                            const recursive_doubling::Fold& f, DataType dtype, ReduceOpKind op, std::uint32_t step0);

// All-gather by recursive doubling among the participants of f: on entry
// participant v holds its range of buf, on return every range. Uses steps
// step0 .. step0 + log2(p) - 1.
void all_gather_doubling(OpContext& ctx, char* buf, const std::vector<std::size_t>& offs, std::size_t elem_size,
                         const recursive_doubling::Fold& f, std::uint32_t step0);

// Posts `bytes` as chunks of the op's chunk size (nothing for 0 bytes);
// both ends of a transfer cut it the same way.
void post_send_chunks(OpContext& ctx, int peer, std::uint32_t step, const char* buf, std::size_t bytes,
                      std::vector<Pending>& out);
void post_recv_chunks(OpContext& ctx, int peer, std::uint32_t step, char* buf, std::size_t bytes,
                      std::vector<Pending>& out);
void send_chunked(OpContext& ctx, int peer, std::uint32_t step, const char* buf, std::size_t bytes);
void recv_chunked(OpContext& ctx, int peer, std::uint32_t step, char* buf, std::size_t bytes);

inline int log2_exact(int p) {
  int k = 0;
  while ((1 << k) < p) ++k;
  return k;
}

}  // namespace tutti::detail::halving_doubling
