#pragma once
// Two-level collectives for communicators that span hosts with the same
// number of members on each (at least two): shared memory inside a host,
// the network across.
//
//   local: the members on this host (comm rank order)
//   cross: the members with this rank's local index, one per host (host order)
//
// all_reduce: up to TUTTI_TWO_LEVEL_LEADER_BYTES (128 KiB), local reduce to local rank 0,
//   cross all_reduce among those, local broadcast; above, local
//   reduce_scatter, cross all_reduce of each slice (the L cross
//   communicators run in parallel, each on its own slice), local all_gather;
//   a tail of fewer than L elements is all-reduced locally then across.
//   Slices of more than 512 KiB go in pieces (a 32nd of the slice, or an
//   8th where that was timed faster, from 512 KiB to 1 MiB): each piece's
//   cross all_reduce runs asynchronously while the local reduce_scatter of
//   the next piece and the local all_gather of the previous one run.
//   From an eighth of that size to eight times it, both forms are timed and
//   the faster runs (TUTTI_ALGO_TUNING; the members' times are summed by a
//   local then a cross all_reduce of two integers). Below an eighth, the
//   leader form is timed against recursive doubling over the whole
//   communicator (every rank on the network, the ranks of a host through
//   loopback): where the hosts' ranks share few cores, the leader form
//   leaves the other ranks' cores idle while its leaders take turns on
//   theirs, and flat recursive doubling is faster at the smallest sizes
//   (bench/peers/netbed/compare.sh, PER=2 on 4 hosts sharing 2 cores, 8 B and
//   up; docs/tuning.md "Timed choice").
// broadcast: cross broadcast among the ranks with the root's local index,
//   then a local broadcast from each of them.
// all_gather: cross all_gather of each rank's block (each rank receives the
//   blocks of its local index), then a local all_gather of those.
// reduce_scatter: local reduce_scatter of "super-blocks" (super-block l holds
//   the blocks of the ranks with local index l, host by host), then a cross
//   reduce_scatter of the super-block.
// all_to_all (equal blocks): a local all_to_all that gathers at local rank
//   l the host's blocks for the ranks of local index l, then an all_to_all
//   of those across hosts (one flow a host pair and local index).
//
// The medium's context is Hierarchy: the two children, which are internal
// communicators, made at the first two-level
// operation (every member runs it in the same order), with ids derived from
// the parent's; they run their operations inline in the thread that runs
// the parent's, but for the slices form's pieces across hosts (on the cross
// communicator's worker thread, waited for within the operation).

#include <memory>
#include <span>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/tuner.h"
#include "common/scratch.h"
#include "common/thresholds.h"
#include "tutti/communicator.h"

namespace tutti::detail {

struct Hierarchy {
  Communicator local;
  Communicator cross;
  int hosts = 0;                   // cross size
  int per_host = 0;                // local size
  std::vector<int> host_of_rank;   // comm rank -> host index (0..hosts-1)
  std::vector<int> local_of_rank;  // comm rank -> local index
  bool host_major = false;         // rank r is host r / per_host's local index r % per_host
  Scratch scratch;                 // the operations' own buffers (trimmed after each)
  // The all_reduce size up to which one leader per host talks across hosts
  // (TUTTI_TWO_LEVEL_LEADER_BYTES).
  std::size_t leader_bytes = 0;
  // The slices form's piece sizes and counts (the planner's).
  TwoLevelThresholds thresholds;
  // The timed choices below are made by the planner (Planner::two_level_choices).
  // From leader_bytes/8 to leader_bytes*8, the leader and slices forms are
  // timed against each other (algorithms/tuner.h; 0 the leader form, 1 the
  // slices; null with TUTTI_ALGO_TUNING=off).
  std::unique_ptr<Tuner> forms;
  // Above the sizes `forms` covers, from slices of 512 KiB a rank up to
  // slices of 4 MiB (at most 16 MiB), the slices form whole (0) or in pieces
  // (1) (null with
  // TUTTI_ALGO_TUNING=off: in pieces). The pieces keep a slow link busy
  // while the host reduces and gathers, and win there; where the CPUs are
  // the limit (a faster link) their extra steps cost more than they hide,
  // and whole slices win (bench/peers/netbed/compare.sh, PER=2, 4 MiB at
  // --rate 1gbit and 4gbit; docs/tuning.md "Timed choice").
  std::unique_ptr<Tuner> pieces;
  // Above that, up to slices of 32 MiB, pieces of an 8th of the slice (0)
  // against a 32nd (1), each from 512 KiB to 1 MiB (null with
  // TUTTI_ALGO_TUNING=off: a 32nd). Where the CPUs are the limit each
  // piece's steps cost more than the pipeline's start and end, and an 8th
  // wins at 16 and 32 MiB; on a slow link a 32nd keeps it busier and an
  // 8th is slightly slower (bench/peers/netbed/compare.sh, PER=2 at --rate
  // 4gbit and 1gbit; docs/tuning.md "Timed choice").
  std::unique_ptr<Tuner> piece_size;
  // Up to leader_bytes/8, the leader form (0) against recursive doubling
  // over the whole communicator (1) (null with TUTTI_ALGO_TUNING=off or an
  // all_reduce algorithm named in TUTTI_ALGO).
  std::unique_ptr<Tuner> flat;
};

// The parent communicator's own network all_reduce, in place on `buf`
// (which holds this rank's input), for two_level_all_reduce's timed choice.
struct FlatAllReduce {
  void (*run)(void* arg, void* buf, ReduceOpKind op) = nullptr;
  void* arg = nullptr;
};

// True when `world` (comm rank -> world rank) spans at least two hosts with
// the same number (>= 2) of members on each; host_of maps world ranks to hosts.
bool hierarchy_applies(const std::vector<int>& world, const std::vector<int>& host_of);

// The operations, run inside the parent's operation. Reductions get the
// base ops alone (the engine runs Avg and PremulSum as Sum with their steps
// around: core/communicator_impl.cc, run_plan_lowered).
void two_level_all_reduce(Hierarchy& h, const void* send, void* recv, std::size_t count, DataType dtype,
                          const ReduceOp& op, FlatAllReduce flat = {});
void two_level_broadcast(Hierarchy& h, void* buf, std::size_t count, DataType dtype, int root, int rank);
// recv used on root only; it may be `send`.
void two_level_reduce(Hierarchy& h, const void* send, void* recv, std::size_t count, DataType dtype, const ReduceOp& op,
                      int root, int rank);
// out[r] (root only): where rank r's block goes (out[root] may be `send`).
void two_level_gather(Hierarchy& h, const void* send, std::span<char* const> out, std::size_t count, DataType dtype,
                      int root, int rank);
// in[r] (root only): rank r's block (in[root] may be `recv`).
void two_level_scatter(Hierarchy& h, std::span<const char* const> in, void* recv, std::size_t count, DataType dtype,
                       int root, int rank);
// out[r]: where rank r's block goes (out[rank] may be `send`).
void two_level_all_gather(Hierarchy& h, const void* send, std::span<char* const> out, std::size_t count,
                          DataType dtype);
// in[r]: this rank's input block for rank r; recv may alias one of them.
void two_level_reduce_scatter(Hierarchy& h, std::span<const void* const> in, void* recv, std::size_t count,
                              DataType dtype, const ReduceOp& op);
// Equal blocks of `count` elements; recv may be `send`.
void two_level_all_to_all(Hierarchy& h, const void* send, void* recv, std::size_t count, DataType dtype);

// The two-level medium's algorithms, in the collectives' order
// (plan/registry.cc puts every medium's together).
std::span<const Algorithm> two_level_algorithms();

}  // namespace tutti::detail
