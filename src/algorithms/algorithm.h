#pragma once
// What an algorithm is, for the registry (plan/registry.h) and the media
// that declare the algorithms (media/: shared memory, network, two levels):
// the collective it implements, its name, its medium, the function that
// runs it against that medium's context, and when the table chooses it.

#include <climits>
#include <cstddef>
#include <cstdint>
#include <span>

#include "tutti/types.h"

namespace tutti::detail {

struct OpContext;
class Tuner;
class ShmMedium;
struct Hierarchy;

enum class Collective : std::uint8_t {
  AllReduce,
  Broadcast,
  Reduce,
  AllGather,
  ReduceScatter,
  AllToAll,
  Gather,
  Scatter,
  Barrier,
};
inline constexpr int kCollectives = 9;
const char* collective_name(Collective c);
// The collective named `name` ("all_reduce", ...); false when none is.
bool find_collective(std::string_view name, Collective* out);

enum class Medium : std::uint8_t {
  SharedMemory,  // every member on one host, through the communicator's segment
  Network,       // point-to-point messages of the transport (TCP, or shared memory for p2p)
  TwoLevel,      // shared memory within each host, the network across (media/two_level.h)
};
const char* medium_name(Medium m);

// Symbolic byte bounds of a rule: TUTTI_SMALL_BYTES and just above it.
inline constexpr std::size_t kSmallBytes = ~std::size_t(0) - 1;
inline constexpr std::size_t kAboveSmall = ~std::size_t(0) - 2;
inline constexpr std::size_t kNoLimit = ~std::size_t(0);

// When the table chooses an algorithm by default: every field must hold
// (an unknown shape, 0, holds for every entry). Bytes are per rank: the
// buffer of all_reduce, broadcast and reduce, one rank's block of all_gather,
// gather, scatter and reduce_scatter, the block a rank sends each peer in
// all_to_all (all_to_all_v: its send buffer over the rank count).
struct When {
  std::size_t min_bytes = 0;
  std::size_t max_bytes = kNoLimit;
  int min_ranks = 0, max_ranks = INT_MAX;
  int min_hosts = 0, max_hosts = INT_MAX;
  int max_ranks_per_host = INT_MAX;
  bool pow2_ranks = false;  // the number of ranks is a power of two
  // At least this many bytes for each rank of the communicator (a chain
  // pays its n - 2 links' worth of chunks to fill).
  std::size_t min_bytes_per_rank = 0;
};

// An operation's buffers, as the communicator validated them; each
// collective uses its own fields.
struct OpArgs {
  const void* send = nullptr;  // reduce, all_reduce, gather, all_gather, all_to_all
  void* recv = nullptr;        // reduce (root), all_reduce, scatter, reduce_scatter, all_to_all; broadcast's buffer
  std::size_t count = 0;       // elements per rank (per block where there are blocks)
  std::size_t bytes = 0;       // count in bytes
  DataType dtype = DataType::Float32;
  ReduceOp op = {};
  int root = -1;
  std::span<char* const> out = {};       // gather (root), all_gather: where rank r's block goes
  std::span<const char* const> in = {};  // scatter (root), reduce_scatter: block r's input
  // all_to_all with per-peer sizes (empty: equal blocks of `bytes`): bytes
  // and displacements per peer, the send buffer's extent, and whether the
  // two buffers overlap.
  std::span<const std::size_t> send_bytes = {}, send_displs = {}, recv_bytes = {}, recv_displs = {};
  std::size_t send_extent = 0;
  bool overlap = false;
};

struct Algorithm;
// What to run, as the planner decided: the algorithm, and for a timed
// choice the tuner and the two algorithms it chooses between (alternative 0
// is `algorithm`, the table's choice).
struct Plan {
  const Algorithm* algorithm = nullptr;
  Tuner* tuner = nullptr;
  const Algorithm* alternative = nullptr;
};

// What runs an algorithm, by medium: each runs against its medium's own
// context (the engine hands it over, core/communicator_impl.h run_plan).
using NetworkRunFn = void (*)(OpContext& x, const OpArgs& a, const Plan& plan);
using ShmRunFn = void (*)(ShmMedium& m, OpContext& x, const OpArgs& a);
using TwoLevelRunFn = void (*)(Hierarchy& h, OpContext& x, const OpArgs& a);
// The network all_reduce's own step, in place on buf (timed choices call it).
using AllReduceKernel = void (*)(OpContext& x, void* buf, std::size_t count, DataType dtype, ReduceOpKind op);

struct Algorithm {
  Collective collective;
  const char* name;
  const char* summary;  // one line: its steps, for docs/algorithms.md
  Medium medium;
  // Exactly the one of its medium is set.
  NetworkRunFn run_network = nullptr;
  ShmRunFn run_shm = nullptr;
  TwoLevelRunFn run_two_level = nullptr;
  // The table's rules: a collective's algorithms are tried in declaration
  // order and the first with a rule that holds is chosen; `fallback` is
  // chosen where no rule of its collective holds. None: TUTTI_ALGO only.
  std::span<const When> chosen = {};
  bool fallback = false;
  // Runs only where every rank sends every other the same number of bytes
  // (all_to_all's Bruck); all_to_all_v runs the fallback instead.
  bool equal_blocks_only = false;
  AllReduceKernel kernel = nullptr;  // network all_reduce algorithms
  // Applies Avg and PremulSum itself, inside its passes over the data
  // (shared memory's collectives scale while copying the input in and
  // divide the chunks they finish). Elsewhere the engine runs them as Sum
  // with their steps around (core/communicator_impl.cc, run_plan_lowered).
  bool fuses_avg_premul = false;
};

// Names the running operation reports beside its algorithm's, for shared
// memory's variants.
inline constexpr const char* kShmCopyName = "shm_copy";      // copying through the segment where single copy applied
inline constexpr const char* kShmDirectName = "shm_direct";  // run on Communicator::alloc_shared memory

}  // namespace tutti::detail
