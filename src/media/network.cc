// The network medium: the algorithms of src/algorithms/ over the
// transport's point-to-point messages (TCP, or shared memory for
// point-to-point where the job is on one host), their table rules and the
// timed choices between two of them (the planner's tuners, plan/planner.h).
#include "media/network.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <string_view>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/context.h"
#include "algorithms/tuner.h"
#include "common/log.h"
#include "common/small_vector.h"
#include "common/tags.h"
#include "reduce/reduce.h"

namespace tutti::detail {
namespace {

// The plan's tuner picks between its two algorithms as it runs
// (algorithms/tuner.h): a trial (timed), the exchange of the members' trial
// times and the choice, or the chosen one; `run(a)` runs alternative a
// (0: the plan's algorithm, 1: its alternative). Every member takes the
// same path: the tuner's state follows the communicator's operations, run
// in order.
template <class Run>
void timed(const Plan& p, OpContext& x, Run&& run) {
  const Algorithm* const alt[2] = {p.algorithm, p.alternative};
  p.tuner->step(
      x.bytes, 0,
      [&](std::array<std::int64_t, 2>& sums) {
        x.step_base += kTunerStepBase;
        all_reduce_recursive_doubling(x, sums.data(), 2, DataType::Int64,
                                      p.tuner->slowest() ? ReduceOpKind::Max : ReduceOpKind::Sum);
        x.step_base -= kTunerStepBase;
      },
      [&](const std::array<std::int64_t, 2>& sums, int algo) {
        if (x.rank != 0) return;
        const bool slowest = p.tuner->slowest();
        const std::int64_t per = 1000 * (slowest ? 1 : x.size);
        TUTTI_LOG(Debug, collective_name(alt[0]->collective)
                             << " up to " << Tuner::class_hi(x.bytes) << " B on " << x.size << " ranks: "
                             << alt[0]->name << " " << sums[0] / per << " us, " << alt[1]->name << " " << sums[1] / per
                             << " us (" << (slowest ? "the slowest member's mean" : "mean of the members' means")
                             << "): " << alt[algo]->name);
      },
      [&](int a) {
        x.set_algo(alt[a]->name);
        run(a, *alt[a]);
      },
      [&] {
        x.step_base += kTunerStepBase;
        barrier_dissemination(x);
        x.step_base -= kTunerStepBase;
      });
}

// Every network all_reduce: the input into the result buffer, then the
// algorithm's kernel in place (or the plan's timed choice). Reductions get
// the base ops alone (the engine runs Avg and PremulSum as Sum with their
// steps around: core/communicator_impl.cc, run_plan_lowered).
void all_reduce_network(OpContext& x, const OpArgs& a, const Plan& p) {
  if (a.recv != a.send && a.bytes) std::memcpy(a.recv, a.send, a.bytes);
  if (p.tuner) {
    timed(p, x, [&](int, const Algorithm& alg) { alg.kernel(x, a.recv, a.count, a.dtype, a.op.kind); });
  } else {
    p.algorithm->kernel(x, a.recv, a.count, a.dtype, a.op.kind);
  }
}

// ---- broadcast, reduce, all_gather, reduce_scatter ------------------------------------

template <void (*F)(OpContext&, void*, std::size_t, int)>
void broadcast_network(OpContext& x, const OpArgs& a, const Plan& p) {
  if (p.tuner) {
    timed(p, x, [&](int, const Algorithm& alg) { alg.run_network(x, a, Plan{&alg}); });
  } else {
    F(x, a.recv, a.bytes, a.root);
  }
}

template <void (*F)(OpContext&, const void*, void*, std::size_t, DataType, ReduceOpKind, int)>
void reduce_network(OpContext& x, const OpArgs& a, const Plan&) {
  F(x, a.send, a.recv, a.count, a.dtype, a.op.kind, a.root);
}

template <void (*F)(OpContext&, std::span<const Block>, std::size_t)>
void all_gather_network(OpContext& x, const OpArgs& a, const Plan&) {
  SmallVector<Block> out;
  for (char* p : a.out) out.push_back(Block{p, a.count});
  if (a.bytes && out[x.rank].ptr != a.send) std::memmove(out[x.rank].ptr, a.send, a.bytes);
  F(x, out, dtype_size(a.dtype));
}

template <void (*F)(OpContext&, std::span<const ConstBlock>, void*, DataType, ReduceOpKind)>
void reduce_scatter_network(OpContext& x, const OpArgs& a, const Plan&) {
  SmallVector<ConstBlock> blocks;
  for (int b = 0; b < x.size; ++b) blocks.push_back(ConstBlock{a.in[b], a.count});
  F(x, blocks, a.recv, a.dtype, a.op.kind);
}

// ---- all_to_all ---------------------------------------------------------------------

// Per-peer sizes (all_to_all with equal blocks goes through all_to_all_v
// where the table runs pairwise).
void all_to_all_pairwise_run(OpContext& x, const OpArgs& a, const Plan&) {
  // Receives land while sends still read: in place, send from a copy.
  std::vector<char> copy;
  const char* src = static_cast<const char*>(a.send);
  if (a.overlap) {
    copy.assign(src, src + a.send_extent);
    src = copy.data();
  }
  all_to_all_pairwise(x, src, a.send_bytes, a.send_displs, static_cast<char*>(a.recv), a.recv_bytes, a.recv_displs);
}
// Equal blocks of a.bytes; timed against pairwise where the plan says so.
void all_to_all_bruck_run(OpContext& x, const OpArgs& a, const Plan& p) {
  if (!p.tuner) {
    all_to_all_bruck(x, static_cast<const char*>(a.send), static_cast<char*>(a.recv), a.bytes);
    return;
  }
  timed(p, x, [&](int alt, const Algorithm& alg) {
    if (alt == 0) {
      all_to_all_bruck(x, static_cast<const char*>(a.send), static_cast<char*>(a.recv), a.bytes);
      return;
    }
    // Pairwise, with equal blocks as per-peer tables.
    const auto n = static_cast<std::size_t>(x.size);
    SmallVector<std::size_t> bytes(n, a.bytes), displs(n, 0);
    for (std::size_t i = 0; i < n; ++i) displs[i] = i * a.bytes;
    OpArgs v = a;
    v.send_bytes = bytes;
    v.send_displs = displs;
    v.recv_bytes = bytes;
    v.recv_displs = displs;
    v.send_extent = n * a.bytes;
    const char* s0 = static_cast<const char*>(a.send);
    const char* r0 = static_cast<const char*>(a.recv);
    v.overlap = v.send_extent && s0 < r0 + v.send_extent && r0 < s0 + v.send_extent;
    alg.run_network(x, v, Plan{&alg});
  });
}

// ---- gather, scatter, barrier -----------------------------------------------------------

void gather_linear_run(OpContext& x, const OpArgs& a, const Plan&) { gather_linear(x, a.send, a.out, a.bytes, a.root); }
void scatter_linear_run(OpContext& x, const OpArgs& a, const Plan&) {
  scatter_linear(x, a.in, a.recv, a.bytes, a.root);
}
void barrier_dissemination_run(OpContext& x, const OpArgs&, const Plan&) { barrier_dissemination(x); }

// ---- the entries and their rules ------------------------------------------------------
// The rules come from measurements on loopback and on the namespace
// test-bed (docs/tuning.md says which).

constexpr std::size_t K = 1024;
constexpr When kAllReduceRecursiveDoubling[] = {{.max_bytes = kSmallBytes}};
// Up to 4 ranks on one host Rabenseifner stays ahead of the ring at every size.
// Across 512 hosts or more (a power of two: no fold) the ring's 2 (p - 1)
// steps cost more than its pipeline saves: by tutti-sim Rabenseifner leads
// at 8-16 MiB on 512 and at 8-64 MiB on 2,048 (the two-level form's step
// across hosts at 4,096 and 16,384 ranks; docs/performance.md, "At scale:
// the simulator").
constexpr When kAllReduceRabenseifner[] = {
    {.min_bytes = kAboveSmall, .max_bytes = 4 * K * K},
    {.min_bytes = kAboveSmall, .max_ranks = 4, .max_hosts = 1},
    {.min_bytes = kAboveSmall, .min_ranks = 512, .min_hosts = 2, .pow2_ranks = true}};
// Across hosts a binomial root sends the message log2 p times, scatter +
// all_gather about 2 S a rank in log2 p + p - 1 rounds: it is faster once
// S beta (log2 p - 2) > p alpha, from 32 KiB on 4-16 hosts of the test-bed
// (4 KiB a rank: 64 KiB on 16), and, by tutti-sim
// (hosts with CPUs of their own, where a round costs less than on the
// test-bed's shared ones), from 256 B a rank on up to 128 hosts and 128 B
// beyond (docs/perf/sim/scale.md). The
// pipelined chain runs at line rate once the message outgrows its fill,
// n - 2 chunks: from 128 KiB a rank (4, 8, 16 hosts: faster than scatter +
// all_gather from 512 KiB, 1 MiB, 2 MiB). Elsewhere binomial, the
// fallback, timed against scatter + all_gather above 2 KiB up to 256 KiB
// (planner.cc): on 4 test-bed hosts scatter + all_gather leads at
// 8-32 KiB. docs/tuning.md, "Algorithm selection" and "Timed choice".
constexpr When kBroadcastBinomial[] = {{.max_bytes = 256 * K, .max_hosts = 1}, {.max_bytes = 32 * K}};
constexpr When kBroadcastChain[] = {
    {.min_bytes = 256 * K + 1, .min_ranks = 3, .min_hosts = 2, .min_bytes_per_rank = 128 * K}};
constexpr When kBroadcastScatterAllGather[] = {
    {.min_bytes = 256 * K + 1, .min_ranks = 3, .max_hosts = 1},
    {.min_bytes = 32 * K + 1, .min_ranks = 3, .max_ranks = 16, .min_hosts = 2, .min_bytes_per_rank = 4 * K},
    {.min_bytes = 32 * K + 1, .min_ranks = 17, .max_ranks = 128, .min_hosts = 2, .min_bytes_per_rank = 256},
    {.min_bytes = 32 * K + 1, .min_ranks = 129, .min_hosts = 2, .min_bytes_per_rank = 128}};
// A reduce's binomial root receives the message log2 p times, the
// pipelined chain's once, after a fill of n - 2 chunks (an eighth of the
// message, 16 KiB to 256 KiB: chain::reduce_chunk_elems). Alone, by
// tutti-sim, the chain is level at 32 KiB on 3-4 ranks, ahead from 64 KiB
// on up to 12 and from 128 KiB on up to 16, and from 64 KiB a rank (and
// 256 KiB) on more, where its fill grows with n; back to back its root
// receives the message once where the binomial root receives it log2 p
// times. On 4 test-bed hosts it leads the binomial tree at 256 KiB and
// from 2 MiB (docs/performance.md, "4 hosts × 1 rank").
constexpr When kReduceChain[] = {
    {.min_bytes = 32 * K, .min_ranks = 3, .max_ranks = 4, .min_hosts = 2},
    {.min_bytes = 64 * K, .min_ranks = 5, .max_ranks = 12, .min_hosts = 2},
    {.min_bytes = 128 * K, .min_ranks = 13, .max_ranks = 16, .min_hosts = 2},
    {.min_bytes = 256 * K + 1, .min_ranks = 3, .min_hosts = 2, .min_bytes_per_rank = 64 * K}};
constexpr When kAllGatherBruck[] = {{.max_bytes = 8 * K, .min_ranks = 8}};
constexpr When kAllGatherRecursiveDoubling[] = {{.max_bytes = 256 * K}};
// Up to 8 KiB a rank; up to 32 KiB on a power of two (no fold): ahead of
// the ring or level from 8 to 32 KiB a rank on 4 and 8 ranks over loopback
// TCP and on 4 and 8 test-bed hosts with 1 Gbit/s links, and by tutti-sim
// at 16-32 KiB across 8-2,048 hosts. Above, the ring: it reduces in place
// where halving first copies every block into one accumulator, and its
// flows run one way between two hosts, where halving's exchanges run both
// ways at once; on 4 test-bed hosts the ring is level or ahead from 64 KiB
// a rank, and ahead as the step across hosts of the two-level form on
// 4 x 2 from 512 KiB (bench/peers/netbed/compare.sh; docs/tuning.md,
// "Algorithm selection").
constexpr When kReduceScatterRecursiveHalving[] = {{.max_bytes = 8 * K}, {.max_bytes = 32 * K, .pow2_ranks = true}};
// Bytes a peer. Bruck sends each block log2 p / 2 times, pairwise once in
// one of 2 (p - 1) messages a rank: on one host (TCP loopback, 4 and 8
// ranks) Bruck leads up to 4-16 KiB a peer, across 1 Gbit/s hosts (4-16 on
// the test-bed) up to 1-4 KiB; beyond 32 ranks up to 128 B on up to 64,
// 64 B on up to 4,096 and 32 B beyond (tutti-sim, 48-16,384 ranks, 8 a
// host: docs/perf/sim/scale.md; with the Intel VM's fit pairwise leads at
// the top of each range, so Bruck is timed against it above 16 B a peer:
// planner.cc). docs/tuning.md, "Algorithm selection".
constexpr When kAllToAllBruck[] = {{.max_bytes = 4 * K, .max_hosts = 1},
                                   {.max_bytes = 2 * K, .max_ranks = 32},
                                   {.max_bytes = 128, .max_ranks = 64},
                                   {.max_bytes = 64, .max_ranks = 4096},
                                   {.max_bytes = 32}};

using C = Collective;
using M = Medium;

constexpr Algorithm kNetwork[] = {
    {.collective = C::AllReduce,
     .name = "recursive_doubling",
     .summary = "log2 p exchanges of the whole message with partners at distance 1, 2, 4, ...",
     .medium = M::Network,
     .run_network = all_reduce_network,
     .chosen = kAllReduceRecursiveDoubling,
     .kernel = all_reduce_recursive_doubling},
    {.collective = C::AllReduce,
     .name = "rabenseifner",
     .summary = "reduce_scatter by recursive halving, then all_gather by recursive doubling: 2 (p-1)/p S per rank",
     .medium = M::Network,
     .run_network = all_reduce_network,
     .chosen = kAllReduceRabenseifner,
     .kernel = all_reduce_rabenseifner},
    {.collective = C::AllReduce,
     .name = "ring",
     .summary = "pipelined ring reduce_scatter then ring all_gather in chunks: 2 (p-1)/p S per rank",
     .medium = M::Network,
     .run_network = all_reduce_network,
     .fallback = true,
     .kernel = all_reduce_ring},
    {.collective = C::Broadcast,
     .name = "binomial",
     .summary = "binomial tree from the root: log2 p rounds of the whole message",
     .medium = M::Network,
     .run_network = broadcast_network<broadcast_binomial>,
     .chosen = kBroadcastBinomial,
     .fallback = true},
    {.collective = C::Broadcast,
     .name = "chain",
     .summary = "pipelined chain from the root in TUTTI_CHUNK_BYTES chunks: each rank receives S once",
     .medium = M::Network,
     .run_network = broadcast_network<broadcast_chain>,
     .chosen = kBroadcastChain},
    {.collective = C::Broadcast,
     .name = "scatter_all_gather",
     .summary = "binomial scatter of p pieces, then ring all_gather: about 2 S per rank",
     .medium = M::Network,
     .run_network = broadcast_network<broadcast_scatter_all_gather>,
     .chosen = kBroadcastScatterAllGather},
    {.collective = C::Reduce,
     .name = "binomial",
     .summary = "binomial tree towards the root, chunked: log2 p rounds",
     .medium = M::Network,
     .run_network = reduce_network<reduce_binomial>,
     .fallback = true},
    {.collective = C::Reduce,
     .name = "chain",
     .summary = "pipelined chain towards the root in eighths of the message (16 KiB to TUTTI_CHUNK_BYTES): each "
                "rank receives S once",
     .medium = M::Network,
     .run_network = reduce_network<reduce_chain>,
     .chosen = kReduceChain},
    {.collective = C::AllGather,
     .name = "bruck",
     .summary = "ceil(log2 p) rounds doubling the blocks held, then a local rotation",
     .medium = M::Network,
     .run_network = all_gather_network<all_gather_bruck>,
     .chosen = kAllGatherBruck},
    {.collective = C::AllGather,
     .name = "recursive_doubling",
     .summary = "log2 p exchanges doubling the blocks held (any p: the extra ranks fold in)",
     .medium = M::Network,
     .run_network = all_gather_network<all_gather_recursive_doubling>,
     .chosen = kAllGatherRecursiveDoubling},
    {.collective = C::AllGather,
     .name = "ring",
     .summary = "p-1 steps passing one block to the right: (p-1)/p of the result per rank",
     .medium = M::Network,
     .run_network = all_gather_network<all_gather_ring>,
     .fallback = true},
    {.collective = C::ReduceScatter,
     .name = "recursive_halving",
     .summary = "log2 p exchanges of half the remaining blocks",
     .medium = M::Network,
     .run_network = reduce_scatter_network<reduce_scatter_recursive_halving>,
     .chosen = kReduceScatterRecursiveHalving},
    {.collective = C::ReduceScatter,
     .name = "ring",
     .summary = "p-1 steps passing one partial block to the right",
     .medium = M::Network,
     .run_network = reduce_scatter_network<reduce_scatter_ring>,
     .fallback = true},
    {.collective = C::AllToAll,
     .name = "bruck",
     .summary = "ceil(log2 p) rounds of the blocks whose destination has bit k set (equal blocks only)",
     .medium = M::Network,
     .run_network = all_to_all_bruck_run,
     .chosen = kAllToAllBruck,
     .equal_blocks_only = true},
    {.collective = C::AllToAll,
     .name = "pairwise",
     .summary = "p-1 steps, exchanging with rank + k and rank - k at step k",
     .medium = M::Network,
     .run_network = all_to_all_pairwise_run,
     .fallback = true},
    {.collective = C::Gather,
     .name = "linear",
     .summary = "every rank sends its block to the root",
     .medium = M::Network,
     .run_network = gather_linear_run,
     .fallback = true},
    {.collective = C::Scatter,
     .name = "linear",
     .summary = "the root sends every rank its block",
     .medium = M::Network,
     .run_network = scatter_linear_run,
     .fallback = true},
    {.collective = C::Barrier,
     .name = "dissemination",
     .summary = "ceil(log2 p) rounds, sending to rank + 2^k and receiving from rank - 2^k",
     .medium = M::Network,
     .run_network = barrier_dissemination_run,
     .fallback = true},
};

// The entry of kNetwork for (collective, name): evaluated while compiling,
// so a name without an entry fails the build.
consteval const Algorithm* entry(Collective c, std::string_view name) {
  for (const Algorithm& a : kNetwork)
    if (a.collective == c && name == a.name) return &a;
  throw "no such network algorithm";  // not a constant expression: a build error
}

// The timed choices' ranges, from the settings and the thresholds (docs/tuning.md, "Timed choices").
bool small_all_reduce(const Config& c, const NetworkThresholds&, std::size_t* lo, std::size_t* hi) {
  // From a 32nd of TUTTI_SMALL_BYTES: with the test-bed's fitted round
  // latency, Rabenseifner leads from a few KiB on 8-2,048 hosts with
  // 1 Gbit/s links by tutti-sim (docs/performance.md, "At scale: the
  // simulator").
  *lo = c.small_bytes / 32;
  *hi = c.small_bytes;
  return c.small_bytes >= 16;
}
bool large_all_reduce(const Config& c, const NetworkThresholds& t, std::size_t* lo, std::size_t* hi) {
  *lo = std::max(c.small_bytes, t.ring_choice_low_bytes);
  *hi = t.ring_choice_high_bytes;
  return c.small_bytes >= 16 && c.small_bytes < t.ring_choice_high_bytes;
}
bool broadcast_range(const Config&, const NetworkThresholds& t, std::size_t* lo, std::size_t* hi) {
  *lo = t.broadcast_choice_low_bytes;
  *hi = t.broadcast_choice_high_bytes;
  return true;
}
bool all_to_all_range(const Config&, const NetworkThresholds& t, std::size_t* lo, std::size_t* hi) {
  *lo = t.all_to_all_choice_low_bytes;  // wherever the table runs Bruck (up to 4 KiB a peer)
  *hi = SIZE_MAX;
  return true;
}

// Trials in runs, the first of each untimed (tuner.h, MeanAfterFirst);
// broadcast's after a barrier, the slowest member's figure counting
// (SlowestRun: its root does not wait for the receivers).
constexpr TimedPair kTimed[] = {
    {entry(C::AllReduce, "recursive_doubling"), entry(C::AllReduce, "rabenseifner"), Tuner::Figure::MeanAfterFirst,
     small_all_reduce},
    {entry(C::AllReduce, "rabenseifner"), entry(C::AllReduce, "ring"), Tuner::Figure::MeanAfterFirst, large_all_reduce},
    {entry(C::Broadcast, "binomial"), entry(C::Broadcast, "scatter_all_gather"), Tuner::Figure::SlowestRun,
     broadcast_range},
    {entry(C::AllToAll, "bruck"), entry(C::AllToAll, "pairwise"), Tuner::Figure::MeanAfterFirst, all_to_all_range},
};

}  // namespace

std::span<const Algorithm> network_algorithms() { return kNetwork; }
std::span<const TimedPair> network_timed_pairs() { return kTimed; }

}  // namespace tutti::detail
