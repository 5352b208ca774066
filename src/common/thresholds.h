#pragma once
// Every size at which an algorithm changes the way it runs, in one place.
// The planner (plan/planner.h) owns a Thresholds per communicator and hands
// the algorithms the part they need: the shared-memory collectives read
// ShmGroup::thresholds(), the two-level forms Hierarchy::thresholds, the
// network algorithms OpContext. Settings that users may change (TUTTI_*)
// are in common/settings.cc instead; these are the library's own.
//
// Each value names the benchmark that measures it; docs/tuning.md says when
// one would change it.

#include <cstddef>

namespace tutti::detail {

// Shared-memory collectives (algorithms/shm_collectives.cc). "Oversubscribed"
// is ShmGroup::oversubscribed(): the group's ranks share cores.
struct ShmThresholds {
  // Outputs of at least this many bytes are written with stores that bypass
  // the caches (reductions whose ranks share cores: from the second value).
  // tutti-bench all_gather / all_reduce -b 4M -e 32M, 2 ranks.
  std::size_t stream_bytes = std::size_t{16} << 20;
  std::size_t stream_bytes_oversubscribed_reduction = std::size_t{8} << 20;
  // all_reduce and reduce read their slice straight from the peers (single
  // copy) while a rank's slice is below this (at most the second value when
  // ranks share cores); above, they copy through the segment.
  // tutti-bench all_reduce -b 1M -e 64M --xcopy, 2 and 4 ranks.
  std::size_t reduce_single_copy_slice_bytes = std::size_t{8} << 20;
  std::size_t reduce_single_copy_slice_bytes_oversubscribed = std::size_t{512} << 10;
  // When ranks share cores: broadcast copies through the segment from this
  // message size, all_gather from this gathered size, all_to_all from this
  // size a rank (n blocks). tutti-bench broadcast / all_gather / all_to_all
  // -b 64K -e 32M, 4 ranks on 2 cores.
  std::size_t broadcast_copy_bytes_oversubscribed = std::size_t{128} << 10;
  std::size_t all_gather_copy_bytes_oversubscribed = std::size_t{8} << 20;
  std::size_t all_to_all_copy_bytes_oversubscribed = std::size_t{512} << 10;
  // Pipelining units: the one-shot reduction's staging chunk and the
  // two-shot reduction's chunk (bench/reduce_bench.cc, the cache sizes).
  std::size_t one_shot_stage_bytes = std::size_t{256} << 10;
  std::size_t two_shot_chunk_bytes = std::size_t{64} << 10;
  // Up to this many members a barrier, a one-shot all_reduce and the
  // group's own agreements have every member wait for every other (one
  // hop); above, the members meet at member 0, which then releases them
  // (two hops, but n waits in all instead of n^2, each a context switch
  // when members outnumber the cores). On 2 cores the two are level at 64
  // and 65 members (tuttirun -n 64 / -n 65 tutti-bench barrier, and
  // all_reduce -b 8 -e 8), and at 1,024 members the gathered form is far
  // ahead (bench/startup/run.sh).
  int flat_members_max = 64;
};

// Two-level all_reduce (media/two_level.cc).
struct TwoLevelThresholds {
  // The slices form's pieces go from this many bytes to the next.
  std::size_t least_piece_bytes = std::size_t{512} << 10;
  std::size_t most_piece_bytes = std::size_t{1} << 20;
  // Up to this size the slices form runs whole or in pieces, whichever was
  // faster; above, in pieces (a trial of the slower way costs seconds on a
  // slow link). bench/peers/netbed/compare.sh, 4 x 2 at 1 and 4 Gbit/s.
  std::size_t most_tuned_pieces_bytes = std::size_t{16} << 20;
  // How many pieces a slice goes in, by default and the count timed against it.
  std::size_t pieces = 32;
  std::size_t fewer_pieces = 8;
};

// Network algorithms (algorithms/*.cc, through OpContext).
struct NetworkThresholds {
  // Rabenseifner pipelines its steps up to this size in the smaller unit
  // below (algorithms/all_reduce_rabenseifner.cc).
  std::size_t small_pipe_max_bytes = std::size_t{512} << 10;
  // That unit within one host and across hosts (at most TUTTI_CHUNK_BYTES).
  // TUTTI_TRANSPORT=tcp bench/peers/compare.py all_reduce 4 -b 64K -e 512K;
  // bench/peers/netbed/compare.sh, 4 x 1 at 1 Gbit/s.
  std::size_t small_pipe_bytes_one_host = std::size_t{64} << 10;
  std::size_t small_pipe_bytes_hosts = std::size_t{32} << 10;
  // The all_reduce timed choice between Rabenseifner and the ring covers
  // sizes above max(TUTTI_SMALL_BYTES, the first value) up to the second.
  std::size_t ring_choice_low_bytes = std::size_t{512} << 10;
  std::size_t ring_choice_high_bytes = std::size_t{4} << 20;
  // The broadcast timed choice (binomial against scatter + all_gather, where
  // the table runs binomial) covers sizes above the first value up to the
  // second; the all_to_all one (Bruck against pairwise, where the table runs
  // Bruck) blocks a peer above the third. By tutti-sim, scatter + all_gather
  // leads from 4 KiB on 8 hosts up to 128 KiB on 2,048, and pairwise from
  // 32 B a peer, at the top of Bruck's range, on 64-16,384 ranks (the
  // two-level forms' steps across hosts; docs/perf/sim/scale.md). On 4
  // test-bed hosts at 1 Gbit/s scatter + all_gather leads at 8-32 KiB, and
  // pairwise across at 8 KiB on 4 x 2 (docs/tuning.md, "Timed choice", has
  // the table).
  std::size_t broadcast_choice_low_bytes = std::size_t{2} << 10;
  std::size_t broadcast_choice_high_bytes = std::size_t{256} << 10;
  std::size_t all_to_all_choice_low_bytes = 16;
};

struct Thresholds {
  ShmThresholds shm;
  TwoLevelThresholds two_level;
  NetworkThresholds network;
};

}  // namespace tutti::detail
