#pragma once
// Collectives designed for shared memory: every member maps one segment
// (ShmGroup) and reads its peers' published data directly. They run in the
// caller's thread; nothing goes through a progress thread.
//
// Reductions take the full ReduceOp: PremulSum scales while copying the
// input in, Avg divides the result, so each is applied exactly once. Every
// element of a result is reduced in rank order by exactly one rank (or by
// every rank in the same order), so all ranks get identical bits.

#include <cstddef>
#include <span>
#include <vector>

#include "shm/shm_group.h"
#include "tutti/types.h"

namespace tutti::detail {

// one_shot_bytes: up to this many bytes every rank reduces everything
// itself (one synchronization per chunk); above, each rank reduces a slice
// and all gather the slices (two-shot).
void shm_all_reduce(ShmGroup& g, const void* send, void* recv, std::size_t count, DataType dtype, const ReduceOp& op,
                    std::size_t one_shot_bytes);
// all_reduce (root < 0) or reduce on memory from Communicator::alloc_shared:
// when the group has such memory (and the op is not PremulSum), a first
// round tells whether every rank's buffers lie in it; if so the operation
// runs directly on them, one-shot (every rank that wants the result reads
// every input) or two-shot (each rank a slice; docs/architecture.md
// "Shared buffers") and this returns true, on every member alike; else
// false, and the caller runs the usual path.
bool shm_reduce_direct(ShmGroup& g, const void* send, void* recv, std::size_t count, DataType dtype, const ReduceOp& op,
                       int root, bool one_shot);
void shm_reduce(ShmGroup& g, const void* send, void* recv, std::size_t count, DataType dtype, const ReduceOp& op,
                int root, std::size_t one_shot_bytes);
// The same for broadcast, all_gather (one output buffer), reduce_scatter
// (one input buffer; not PremulSum) and all_to_all (equal blocks, not in
// place): every rank reads its peers' buffers where they lie. True where
// it ran, on every member alike.
bool shm_broadcast_direct(ShmGroup& g, void* buf, std::size_t bytes, int root);
bool shm_all_gather_direct(ShmGroup& g, const void* send, std::span<char* const> out, std::size_t bytes);
bool shm_reduce_scatter_direct(ShmGroup& g, std::span<const char* const> in, void* recv, std::size_t count,
                               DataType dtype, const ReduceOp& op);
bool shm_all_to_all_direct(ShmGroup& g, const void* send, void* recv, std::size_t block_bytes);
void shm_broadcast(ShmGroup& g, void* buf, std::size_t bytes, int root);
// out[r]: where rank r's block lands (root only for gather); all_gather
// copies its own block (send to out[rank]) too, gather leaves it to the caller.
void shm_gather(ShmGroup& g, const void* send, std::span<char* const> out, std::size_t bytes, int root);
void shm_all_gather(ShmGroup& g, const void* send, std::span<char* const> out, std::size_t bytes);
void shm_scatter(ShmGroup& g, std::span<const char* const> in, void* recv, std::size_t bytes, int root);
void shm_reduce_scatter(ShmGroup& g, std::span<const char* const> in, void* recv, std::size_t count, DataType dtype,
                        const ReduceOp& op);
// Equal blocks of block_bytes, back to back in both buffers (may be the
// same buffer).
void shm_all_to_all(ShmGroup& g, const void* send, void* recv, std::size_t block_bytes);
// Byte counts and displacements per peer; a first round agrees on the
// number of rounds.
void shm_all_to_all_v(ShmGroup& g, const char* send, std::span<const std::size_t> send_bytes,
                      std::span<const std::size_t> send_displs, char* recv, std::span<const std::size_t> recv_bytes,
                      std::span<const std::size_t> recv_displs);
void shm_barrier(ShmGroup& g);

}  // namespace tutti::detail
