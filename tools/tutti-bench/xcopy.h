#pragma once
// The physical limit of one-host collectives: how fast one process copies
// out a buffer that another process has just written into shared memory.
// Measured between ranks 0 (writer) and 1 (reader) in the same run as the
// collective, so the two figures compare on the same machine state.

#include <cstddef>

#include <tutti/tutti.h>

namespace tutti_bench {

// Every rank calls it (the others only take part in the barriers). Returns,
// on every rank, the reader's copy bandwidth in GB/s (bytes / mean copy
// time), or 0 when the world has one rank. Owns and removes its segment.
double cross_process_copy_gbps(tutti::Communicator& comm, std::size_t bytes, int iters);

}  // namespace tutti_bench
