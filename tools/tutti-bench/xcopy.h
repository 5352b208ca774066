#pragma once
// The physical limits of one-host collectives, measured between ranks 0 and
// 1 in the same run as the collective, so that the figures compare on the
// same machine state:
//  - copy: how fast one process copies out a buffer that another process
//    has just written into shared memory (the other one idle);
//  - exchange: both copy at once, each a buffer the other has just written.
//    That moves what a 2-rank all_reduce of the same size must move at
//    least: each rank's output depends on every byte of the other's input
//    (S bytes in) and is S bytes written. It is a reference, not a proof:
//    as far as memcpy is the fastest mover and the caches hold what they
//    held here, the all_reduce's busbw (= algbw on 2 ranks) stays below the
//    exchange's rate per rank.

#include <tutti/tutti.h>

#include <cstddef>

namespace tutti_bench {

struct CrossCopy {
  double copy_gbps = 0;      // bytes / mean copy time, one reader
  double exchange_gbps = 0;  // bytes / mean time of both copying at once (the slower rank's)
};

// Every rank calls it (the others only take part in the barriers). Returns
// the figures on every rank, zeros when the world has one rank. Owns and
// removes its segment.
CrossCopy cross_process_copy(tutti::Communicator& comm, std::size_t bytes, int iters);

}  // namespace tutti_bench
