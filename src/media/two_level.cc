// Two-level collectives and their registry entries (see two_level.h).
#include "media/two_level.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/context.h"
#include "common/log.h"
#include "common/small_vector.h"
#include "common/tags.h"
#include "reduce/reduce.h"

namespace tutti::detail {

bool hierarchy_applies(const std::vector<int>& world, const std::vector<int>& host_of) {
  std::vector<int> hosts;   // host ids in order of first appearance
  std::vector<int> counts;  // members per host
  for (int w : world) {
    const int h = host_of[w];
    auto it = std::find(hosts.begin(), hosts.end(), h);
    if (it == hosts.end()) {
      hosts.push_back(h);
      counts.push_back(1);
    } else {
      ++counts[it - hosts.begin()];
    }
  }
  if (hosts.size() < 2 || counts[0] < 2) return false;
  return std::all_of(counts.begin(), counts.end(), [&](int c) { return c == counts[0]; });
}

namespace {

// One leader per host: the host reduces to it, it all-reduces with the
// other hosts' leaders (fewer, larger network messages; the other ranks
// sleep), and the host hears the result from it.
void leader_form(Hierarchy& h, char* buf, std::size_t count, DataType dtype, const ReduceOp& op) {
  h.local.reduce(buf, buf, count, dtype, op, 0);
  if (h.local.rank() == 0) h.cross.all_reduce(buf, buf, count, dtype, op);
  h.local.broadcast(buf, count, dtype, 0);
}

// Slice l of the buffer: reduced on this host by local rank l, across hosts
// by its cross communicator (L flows per host at once), then gathered on
// the host; a tail of fewer than L elements is all-reduced on the host,
// then across. Large slices go in pieces, each piece's step across hosts
// running (on the cross communicator's worker) while this thread reduces
// the next piece on the host and gathers the previous one, so that the
// link is not idle during the host's steps.
// `pieces`: how many pieces a slice goes in (0: whole), each of 512 KiB to
// 1 MiB.
void slices_form(Hierarchy& h, char* buf, std::size_t count, DataType dtype, const ReduceOp& op, std::size_t pieces) {
  const std::size_t es = dtype_size(dtype), L = static_cast<std::size_t>(h.per_host);
  const std::size_t q = count / L;
  if (q > 0) {
    // Pieces of a 32nd of the slice, from 512 KiB to 1 MiB: on a slow link
    // they bring 4-64 MiB operations closer to the link's rate than whole
    // slices, and at 256 MiB pieces of 1 MiB beat pieces of 4 MiB, more so
    // with the two piece buffers below than with a scratch slice faulted in
    // again by every operation (bench/peers/netbed/compare.sh, PER=2 at
    // --rate 1gbit, 4-256 MiB; docs/performance.md "4 hosts × 2 ranks").
    // Where the CPUs are the limit, fewer pieces (an 8th) cost fewer steps
    // and win at 16 MiB and up (the same at --rate 4gbit).
    const std::size_t piece = pieces == 0 ? q
                                          : std::clamp((q + pieces - 1) / pieces,
                                                       std::max<std::size_t>(1, h.thresholds.least_piece_bytes / es),
                                                       std::max<std::size_t>(1, h.thresholds.most_piece_bytes / es));
    if (piece >= q) {
      char* const slice = h.scratch.get(0, q * es);
      h.local.reduce_scatter(buf, slice, q, dtype, op);
      h.cross.all_reduce(slice, slice, q, dtype, op);
      h.local.all_gather(slice, buf, q, dtype);
    } else {
      // Two piece buffers in turn: piece j's is free again once piece j-2
      // was gathered, which the loop did before piece j's reduce-scatter.
      char* const bufs = h.scratch.get(0, 2 * piece * es);
      auto piece_buf = [&](std::size_t lo) { return bufs + (lo / piece % 2) * piece * es; };
      std::vector<const void*> in(L);
      std::vector<void*> out(L);
      auto gather = [&](std::size_t lo, std::size_t c) {
        for (std::size_t l = 0; l < L; ++l) out[l] = buf + (l * q + lo) * es;
        h.local.all_gather(piece_buf(lo), std::span<void* const>(out), c, dtype);
      };
      // Steps across hosts in flight: the previous piece's, this one's.
      std::array<Work, 2> across;
      std::size_t prev_lo = 0, prev_c = 0;
      try {
        for (std::size_t lo = 0; lo < q; lo += piece) {
          const std::size_t c = std::min(piece, q - lo);
          for (std::size_t l = 0; l < L; ++l) in[l] = buf + (l * q + lo) * es;
          h.local.reduce_scatter(std::span<const void* const>(in), piece_buf(lo), c, dtype, op);
          across[1] = h.cross.iall_reduce(piece_buf(lo), piece_buf(lo), c, dtype, op);
          if (prev_c) {
            across[0].wait();
            gather(prev_lo, prev_c);
          }
          across[0] = std::exchange(across[1], Work());
          prev_lo = lo;
          prev_c = c;
        }
        across[0].wait();
      } catch (...) {
        // Not with a step across hosts still writing into the scratch.
        for (Work& w : across) {
          try {
            w.wait();
          } catch (...) {
          }
        }
        throw;
      }
      gather(prev_lo, prev_c);
    }
  }
  const std::size_t tail = count - q * L;
  if (tail) {
    char* t = buf + q * L * es;
    h.local.all_reduce(t, t, tail, dtype, op);
    h.cross.all_reduce(t, t, tail, dtype, op);
  }
}

}  // namespace

void two_level_all_reduce(Hierarchy& h, const void* send, void* recv, std::size_t count, DataType dtype,
                          const ReduceOp& op, FlatAllReduce flat) {
  const std::size_t es = dtype_size(dtype);
  const std::size_t bytes = count * es;
  char* out = static_cast<char*>(recv);
  if (out != send && count) std::memcpy(out, send, bytes);
  const ReduceOp& cop = op;
  const int n = h.hosts * h.per_host;
  const int preferred = bytes <= h.leader_bytes ? 0 : 1;  // 0: leader form, 1: slices
  const auto slices = [&](std::size_t pieces) {
    slices_form(h, out, count, dtype, cop, pieces);
    h.scratch.trim();
  };
  const auto run = [&](int form) {
    if (form == 0) {
      leader_form(h, out, count, dtype, cop);
    } else {
      slices(h.thresholds.pieces);
    }
  };
  // The members' figures summed over the host, then across hosts.
  const auto sum_members = [&](std::array<std::int64_t, 2>& sums) {
    h.local.all_reduce(sums.data(), sums.data(), 2, DataType::Int64, ReduceOp::SUM);
    h.cross.all_reduce(sums.data(), sums.data(), 2, DataType::Int64, ReduceOp::SUM);
  };
  const auto log_choice = [&](const char* what0, const char* what1) {
    return [&h, bytes, n, what0, what1](const std::array<std::int64_t, 2>& sums, int algo) {
      if (h.local.rank() == 0 && h.cross.rank() == 0)
        TUTTI_LOG(Debug, "two-level all_reduce up to "
                             << Tuner::class_hi(bytes) << " B on " << h.hosts << " x " << h.per_host
                             << " ranks: " << what0 << " " << sums[0] / 1000 / n << " us, " << what1 << " "
                             << sums[1] / 1000 / n << " us (mean of the members' means): " << (algo ? what1 : what0));
    };
  };
  if (flat.run && h.flat && h.flat->covers(bytes)) {
    h.flat->step(bytes, 0, sum_members, log_choice("leader form", "flat recursive doubling"), [&](int algo) {
      if (algo == 0) {
        leader_form(h, out, count, dtype, cop);
      } else {
        flat.run(flat.arg, out, cop.kind);
      }
    });
  } else if (h.forms && h.forms->covers(bytes)) {
    h.forms->step(bytes, preferred, sum_members, log_choice("leader form", "slices"), run);
  } else if (preferred == 1 && h.pieces && h.pieces->covers(bytes)) {
    h.pieces->step(bytes, 1, sum_members, log_choice("slices whole", "slices in pieces"),
                   [&](int algo) { slices(algo == 1 ? h.thresholds.pieces : 0); });
  } else if (preferred == 1 && h.piece_size && h.piece_size->covers(bytes)) {
    h.piece_size->step(bytes, 1, sum_members, log_choice("an 8th of a slice a piece", "a 32nd"),
                       [&](int algo) { slices(algo == 1 ? h.thresholds.pieces : h.thresholds.fewer_pieces); });
  } else {
    run(preferred);
  }
}

namespace {

// Where a rooted operation crosses hosts: the ranks of the root's local
// index, one a host, carry it between the root's host and the others.
struct RootPlace {
  int host, local;  // the root's
  bool crosses;     // this rank is of the root's local index
};
RootPlace root_place(const Hierarchy& h, int root, int rank) {
  const int local = h.local_of_rank[root];
  return {h.host_of_rank[root], local, h.local_of_rank[rank] == local};
}

// Rank r's place among blocks ordered host by host, then by local index.
std::size_t host_major_index(const Hierarchy& h, std::size_t r) {
  return static_cast<std::size_t>(h.host_of_rank[r]) * static_cast<std::size_t>(h.per_host) +
         static_cast<std::size_t>(h.local_of_rank[r]);
}

}  // namespace

void two_level_broadcast(Hierarchy& h, void* buf, std::size_t count, DataType dtype, int root, int rank) {
  const RootPlace at = root_place(h, root, rank);
  if (at.crosses) h.cross.broadcast(buf, count, dtype, at.host);
  h.local.broadcast(buf, count, dtype, at.local);
}

// Each host reduces to its rank of the root's local index (in shared
// memory), then those ranks reduce across hosts to the root.
void two_level_reduce(Hierarchy& h, const void* send, void* recv, std::size_t count, DataType dtype, const ReduceOp& op,
                      int root, int rank) {
  const std::size_t bytes = count * dtype_size(dtype);
  const RootPlace at = root_place(h, root, rank);
  const void* in = send;
  const ReduceOp& cop = op;
  // The host's sum: in the root's buffer on the root, else in scratch.
  char* host_sum = !at.crosses ? nullptr : rank == root ? static_cast<char*>(recv) : h.scratch.get(1, bytes);
  h.local.reduce(in, host_sum, count, dtype, cop, at.local);
  if (at.crosses) h.cross.reduce(host_sum, host_sum, count, dtype, cop, at.host);
  h.scratch.trim();
}

// Each host gathers its blocks (by local index) at its rank of the root's
// local index; those gather the hosts' runs at the root, which places each
// rank's block. The root's link carries what the flat gather's does.
void two_level_gather(Hierarchy& h, const void* send, std::span<char* const> out, std::size_t count, DataType dtype,
                      int root, int rank) {
  const std::size_t bytes = count * dtype_size(dtype);
  if (bytes == 0) return;
  const std::size_t all_bytes = static_cast<std::size_t>(h.hosts) * static_cast<std::size_t>(h.per_host) * bytes;
  const RootPlace at = root_place(h, root, rank);
  const std::size_t L = static_cast<std::size_t>(h.per_host);
  char* const host_blocks = at.crosses ? h.scratch.get(0, L * bytes) : nullptr;
  h.local.gather(send, host_blocks, count, dtype, at.local);
  if (at.crosses) {
    char* const all = rank == root ? h.scratch.get(1, all_bytes) : nullptr;
    h.cross.gather(host_blocks, all, L * count, dtype, at.host);
    for (std::size_t r = 0; rank == root && r < out.size(); ++r)
      std::memcpy(out[r], all + host_major_index(h, r) * bytes, bytes);
  }
  h.scratch.trim();
}

// The root packs the blocks host by host; the ranks of its local index
// scatter the hosts' runs across hosts, then each scatters its run locally.
void two_level_scatter(Hierarchy& h, std::span<const char* const> in, void* recv, std::size_t count, DataType dtype,
                       int root, int rank) {
  const std::size_t bytes = count * dtype_size(dtype);
  if (bytes == 0) return;
  const std::size_t all_bytes = static_cast<std::size_t>(h.hosts) * static_cast<std::size_t>(h.per_host) * bytes;
  const RootPlace at = root_place(h, root, rank);
  char* all = nullptr;
  if (rank == root) {
    all = h.scratch.get(1, all_bytes);
    for (std::size_t r = 0; r < in.size(); ++r) std::memcpy(all + host_major_index(h, r) * bytes, in[r], bytes);
  }
  const std::size_t L = static_cast<std::size_t>(h.per_host);
  char* const host_blocks = at.crosses ? h.scratch.get(0, L * bytes) : nullptr;
  if (at.crosses) h.cross.scatter(all, host_blocks, L * count, dtype, at.host);
  h.local.scatter(host_blocks, recv, count, dtype, at.local);
  h.scratch.trim();
}

void two_level_all_gather(Hierarchy& h, const void* send, std::span<char* const> out, std::size_t count,
                          DataType dtype) {
  const std::size_t bytes = count * dtype_size(dtype);
  const std::size_t H = static_cast<std::size_t>(h.hosts), L = static_cast<std::size_t>(h.per_host);
  // The blocks of this rank's local index, host by host; then those of
  // every local index: gathered[l][hst].
  char* const mine = h.scratch.get(0, H * bytes);
  char* const gathered = h.scratch.get(1, L * H * bytes);
  h.cross.all_gather(send, mine, count, dtype);
  h.local.all_gather(mine, gathered, H * count, dtype);
  for (std::size_t r = 0; r < out.size() && bytes; ++r) {
    const std::size_t l = static_cast<std::size_t>(h.local_of_rank[r]);
    const std::size_t hst = static_cast<std::size_t>(h.host_of_rank[r]);
    std::memcpy(out[r], gathered + (l * H + hst) * bytes, bytes);
  }
  h.scratch.trim();
}

void two_level_reduce_scatter(Hierarchy& h, std::span<const void* const> in, void* recv, std::size_t count,
                              DataType dtype, const ReduceOp& op) {
  const std::size_t es = dtype_size(dtype), bytes = count * es;
  const std::size_t H = static_cast<std::size_t>(h.hosts), L = static_cast<std::size_t>(h.per_host);
  // Super-block l: the blocks of the ranks with local index l, host by host.
  char* const super = h.scratch.get(0, L * H * bytes);
  char* const mine = h.scratch.get(1, H * bytes);
  for (std::size_t r = 0; r < in.size() && bytes; ++r) {
    const std::size_t l = static_cast<std::size_t>(h.local_of_rank[r]);
    const std::size_t hst = static_cast<std::size_t>(h.host_of_rank[r]);
    char* dst = super + (l * H + hst) * bytes;
    std::memcpy(dst, in[r], bytes);
  }
  const ReduceOp& cop = op;
  h.local.reduce_scatter(super, mine, H * count, dtype, cop);
  h.cross.reduce_scatter(mine, recv, count, dtype, cop);
  h.scratch.trim();
}

// Each host first exchanges in shared memory, so that its rank of local
// index l holds every block the host sends to the ranks of local index l;
// those ranks then exchange across hosts, one flow a pair of hosts for each
// local index (L (H - 1) flows leave a host, against L (n - L) for the flat
// exchange), each carrying L blocks.
void two_level_all_to_all(Hierarchy& h, const void* send, void* recv, std::size_t count, DataType dtype) {
  const std::size_t B = count * dtype_size(dtype);
  if (B == 0) return;
  const std::size_t H = static_cast<std::size_t>(h.hosts), L = static_cast<std::size_t>(h.per_host);
  const std::size_t n = H * L;
  const char* const in = static_cast<const char*>(send);
  char* const out = static_cast<char*>(recv);
  // by_local[l][hst]: this rank's block for the rank (hst, l).
  char* const by_local = h.scratch.get(0, n * B);
  for (std::size_t r = 0; r < n; ++r) {
    const std::size_t l = static_cast<std::size_t>(h.local_of_rank[r]);
    const std::size_t hst = static_cast<std::size_t>(h.host_of_rank[r]);
    std::memcpy(by_local + (l * H + hst) * B, in + r * B, B);
  }
  // mixed[l][hst]: the block of this host's rank of local index l for the
  // rank (hst, this rank's local index).
  char* const mixed = h.scratch.get(1, n * B);
  h.local.all_to_all(by_local, mixed, H * count, dtype);
  // by_host[hst][l] = mixed[l][hst] (by_local's buffer, read already).
  char* const by_host = by_local;
  for (std::size_t l = 0; l < L; ++l)
    for (std::size_t hst = 0; hst < H; ++hst) std::memcpy(by_host + (hst * L + l) * B, mixed + (l * H + hst) * B, B);
  // received[hst][l]: the block of the rank (hst, l) for this rank; in
  // place where the communicator's ranks run host by host.
  char* const received = h.host_major ? out : mixed;
  h.cross.all_to_all(by_host, received, L * count, dtype);
  for (std::size_t r = 0; !h.host_major && r < n; ++r)
    std::memcpy(out + r * B, received + host_major_index(h, r) * B, B);
  h.scratch.trim();
}

// ---- the entries ----------------------------------------------------------------------------

namespace {

void all_reduce_two_level(Hierarchy& h, OpContext& x, const OpArgs& a) {
  // Recursive doubling over the whole communicator, timed against the
  // leader form for small sizes (two_level.h).
  struct Flat {
    OpContext& x;
    std::size_t count;
    DataType dtype;
    static void run(void* arg, void* buf, ReduceOpKind kind) {
      Flat& f = *static_cast<Flat*>(arg);
      f.x.set_algo("recursive_doubling");
      all_reduce_recursive_doubling(f.x, buf, f.count, f.dtype, kind);
    }
  } flat{x, a.count, a.dtype};
  two_level_all_reduce(h, a.send, a.recv, a.count, a.dtype, a.op, {&Flat::run, &flat});
}
void broadcast_two_level(Hierarchy& h, OpContext& x, const OpArgs& a) {
  two_level_broadcast(h, a.recv, a.count, a.dtype, a.root, x.rank);
}
void reduce_two_level(Hierarchy& h, OpContext& x, const OpArgs& a) {
  two_level_reduce(h, a.send, a.recv, a.count, a.dtype, a.op, a.root, x.rank);
}
void all_gather_two_level(Hierarchy& h, OpContext&, const OpArgs& a) {
  two_level_all_gather(h, a.send, a.out, a.count, a.dtype);
}
void reduce_scatter_two_level(Hierarchy& h, OpContext&, const OpArgs& a) {
  SmallVector<const void*> in(a.in.begin(), a.in.end());
  two_level_reduce_scatter(h, in, a.recv, a.count, a.dtype, a.op);
}
void all_to_all_two_level(Hierarchy& h, OpContext&, const OpArgs& a) {
  two_level_all_to_all(h, a.send, a.recv, a.count, a.dtype);
}
void gather_two_level(Hierarchy& h, OpContext& x, const OpArgs& a) {
  two_level_gather(h, a.send, a.out, a.count, a.dtype, a.root, x.rank);
}
void scatter_two_level(Hierarchy& h, OpContext& x, const OpArgs& a) {
  two_level_scatter(h, a.in, a.recv, a.count, a.dtype, a.root, x.rank);
}

constexpr std::size_t K = 1024;
// Where the two-level form applies, up to 8 KiB a peer: on 4 x 2 test-bed
// hosts ahead of flat Bruck from 16 B to 1 KiB a peer and level with
// pairwise at 8 KiB; by tutti-sim (hosts with CPUs of their own) ahead of
// Bruck and pairwise or level on 64-16,384 ranks, 8 a host. Above, its two
// copies of the send buffer and the local exchange cost more than its fewer
// flows save on the test-bed's shared cores. (One leader a host, one flow a
// host pair, costs more still there.) docs/tuning.md, "Algorithm selection".
constexpr When kAllToAllTwoLevel[] = {{.max_bytes = 8 * K}};

using C = Collective;
using M = Medium;

const Algorithm kTwoLevel[] = {
    {.collective = C::AllReduce,
     .name = "two_level",
     .summary = "a leader per host (local reduce, all_reduce across, local broadcast) up to "
                "TUTTI_TWO_LEVEL_LEADER_BYTES, else slices: local reduce_scatter, one all_reduce across per local "
                "rank, local all_gather",
     .medium = M::TwoLevel,
     .run_two_level = all_reduce_two_level},
    {.collective = C::Broadcast,
     .name = "two_level",
     .summary = "broadcast across hosts among the ranks of the root's local index, then within each host",
     .medium = M::TwoLevel,
     .run_two_level = broadcast_two_level},
    {.collective = C::Reduce,
     .name = "two_level",
     .summary = "reduce within each host to the rank of the root's local index, then reduce across hosts among "
                "those ranks",
     .medium = M::TwoLevel,
     .run_two_level = reduce_two_level},
    {.collective = C::AllGather,
     .name = "two_level",
     .summary = "all_gather across hosts of each local index's blocks, then a local all_gather",
     .medium = M::TwoLevel,
     .run_two_level = all_gather_two_level},
    {.collective = C::ReduceScatter,
     .name = "two_level",
     .summary = "local reduce_scatter of super-blocks (one per local index), then reduce_scatter across hosts",
     .medium = M::TwoLevel,
     .run_two_level = reduce_scatter_two_level},
    {.collective = C::AllToAll,
     .name = "two_level",
     .summary = "a local all_to_all gathering at local rank l the host's blocks for local index l, then an "
                "all_to_all across hosts among the ranks of each local index (equal blocks only)",
     .medium = M::TwoLevel,
     .run_two_level = all_to_all_two_level,
     .chosen = kAllToAllTwoLevel,
     .equal_blocks_only = true},
    {.collective = C::Gather,
     .name = "two_level",
     .summary = "gather within each host at the rank of the root's local index, then gather of the hosts' blocks "
                "across hosts",
     .medium = M::TwoLevel,
     .run_two_level = gather_two_level},
    {.collective = C::Scatter,
     .name = "two_level",
     .summary = "scatter of the hosts' blocks across hosts from the root, then within each host",
     .medium = M::TwoLevel,
     .run_two_level = scatter_two_level},
};

}  // namespace

std::span<const Algorithm> two_level_algorithms() { return kTwoLevel; }

}  // namespace tutti::detail
