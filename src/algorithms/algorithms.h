#pragma once
// Collective algorithms, one file each, written against OpContext only.
//
// Reduce ops reaching an algorithm are Sum/Product/Min/Max/BAnd/BOr/BXor:
// the network medium (media/network.cc) applies Avg's division and
// PremulSum's scaling around them.
// Buffers are block lists so that list forms (torch's tensor lists) and
// contiguous forms share one implementation.

#include <cstddef>
#include <span>
#include <vector>

#include "algorithms/context.h"
#include "tutti/types.h"

namespace tutti::detail {

struct Block {
  char* ptr;
  std::size_t count;  // elements
};
struct ConstBlock {
  const char* ptr;
  std::size_t count;
};

// buf holds the input and receives the result (the network medium copies sendbuf in).
void all_reduce_recursive_doubling(OpContext& ctx, void* buf, std::size_t count, DataType dtype, ReduceOpKind op);
void all_reduce_ring(OpContext& ctx, void* buf, std::size_t count, DataType dtype, ReduceOpKind op);
void all_reduce_rabenseifner(OpContext& ctx, void* buf, std::size_t count, DataType dtype, ReduceOpKind op);

void broadcast_binomial(OpContext& ctx, void* buf, std::size_t bytes, int root);
void broadcast_chain(OpContext& ctx, void* buf, std::size_t bytes, int root);
void broadcast_scatter_all_gather(OpContext& ctx, void* buf, std::size_t bytes, int root);
// recvbuf used on root only.
void reduce_binomial(OpContext& ctx, const void* sendbuf, void* recvbuf, std::size_t count, DataType dtype,
                     ReduceOpKind op, int root);
void reduce_chain(OpContext& ctx, const void* sendbuf, void* recvbuf, std::size_t count, DataType dtype,
                  ReduceOpKind op, int root);

// out[r] must already hold this rank's contribution (the network medium copies it).
void all_gather_ring(OpContext& ctx, std::span<const Block> out, std::size_t elem_size);
void all_gather_bruck(OpContext& ctx, std::span<const Block> out, std::size_t elem_size);
void all_gather_recursive_doubling(OpContext& ctx, std::span<const Block> out, std::size_t elem_size);
// in[b]: this rank's input for block b (n blocks); the reduction of block
// `rank` is written to out (out may alias in[rank]).
void reduce_scatter_ring(OpContext& ctx, std::span<const ConstBlock> in, void* out, DataType dtype, ReduceOpKind op);
void reduce_scatter_recursive_halving(OpContext& ctx, std::span<const ConstBlock> in, void* out, DataType dtype,
                                      ReduceOpKind op);
// Same, but in place: blocks[b] are this rank's inputs and scratch; the
// result for block `rank` ends in blocks[rank]. Other blocks are clobbered.
void reduce_scatter_ring_inplace(OpContext& ctx, std::span<const Block> blocks, DataType dtype, ReduceOpKind op);

// Byte counts and displacements per peer.
void all_to_all_pairwise(OpContext& ctx, const char* sendbuf, std::span<const std::size_t> send_bytes,
                         std::span<const std::size_t> send_displs, char* recvbuf,
                         std::span<const std::size_t> recv_bytes, std::span<const std::size_t> recv_displs);

// Equal blocks of `block` bytes only; recvbuf may alias sendbuf.
void all_to_all_bruck(OpContext& ctx, const char* sendbuf, char* recvbuf, std::size_t block);

// Root receives block r into out[r] (out[root] must already hold its own).
void gather_linear(OpContext& ctx, const void* sendbuf, std::span<char* const> out, std::size_t bytes, int root);
void scatter_linear(OpContext& ctx, std::span<const char* const> in, void* recvbuf, std::size_t bytes, int root);

void barrier_dissemination(OpContext& ctx);

}  // namespace tutti::detail
