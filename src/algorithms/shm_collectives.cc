#include "algorithms/shm_collectives.h"

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <span>
#include <vector>

#include "common/dtype.h"
#include "common/stream_copy.h"
#include "reduce/reduce.h"
#include "reduce/reproducible.h"
#include "tutti/error.h"

namespace tutti::detail {
namespace {

ReduceOpKind base_kind(const ReduceOp& op) {
  return (op.kind == ReduceOpKind::Avg || op.kind == ReduceOpKind::PremulSum) ? ReduceOpKind::Sum : op.kind;
}

// Copies `count` elements of this rank's input into shared memory, scaled
// for PremulSum.
void copy_in(char* dst, const char* src, std::size_t count, DataType dtype, const ReduceOp& op) {
  if (op.kind == ReduceOpKind::PremulSum) {
    scale(dst, src, count, dtype, op.scalar);
  } else if (count) {
    std::memcpy(dst, src, count * elem_size(dtype));
  }
}

using Space = ShmGroup::Space;

// Where rank p's input of round k is.
const char* input_of(const ShmGroup& g, int p, std::uint64_t k, Space space, std::size_t offset_bytes) {
  return g.input(p, k, space) + offset_bytes;
}

// out = in[0] op in[1] op ... op in[n-1], waiting for each peer's input.
// This rank's own input is read from `own` where given (it then need not
// have copied that part into its slot), else from its slot.
// float16 and bfloat16 reductions over more than two inputs accumulate in
// float32 and round once (reduce_many); the others reduce pair by pair.
bool accumulates_wide(DataType dtype) { return dtype == DataType::Float16 || dtype == DataType::BFloat16; }
// Every input of an element to one reduce_many call: float16 and bfloat16
// beyond two ranks (rounded once), and reproducible sums (reduce/reproducible.h).
bool all_at_once(int n, DataType dtype, ReduceOpKind op) { return (n > 2 && accumulates_wide(dtype)) || is_repro(op); }

void reduce_all_inputs(ShmGroup& g, std::uint64_t k, std::size_t offset_bytes, char* out, std::size_t count,
                       DataType dtype, ReduceOpKind op, Space space = Space::Slots, const char* own = nullptr) {
  const int n = g.size(), me = g.rank();
  if (count == 0) return;
  auto in = [&](int p) { return p == me && own ? own : input_of(g, p, k, space, offset_bytes); };
  // This rank's own input is in place: it published it.
  if (me != 0) g.wait_input(0, k);
  if (n == 1) {
    std::memcpy(out, in(0), count * elem_size(dtype));
    return;
  }
  if (all_at_once(n, dtype, op)) {
    // Every input first, then one pass that rounds once (reduce_many).
    thread_local std::vector<const void*> ins;
    ins.resize(static_cast<std::size_t>(n));
    for (int p = 0; p < n; ++p) {
      if (p != me && p != 0) g.wait_input(p, k);
      ins[static_cast<std::size_t>(p)] = in(p);
    }
    reduce_many(out, ins.data(), n, count, dtype, op);
    return;
  }
  if (me != 1) g.wait_input(1, k);
  reduce_pair(out, in(0), in(1), count, dtype, op);
  for (int p = 2; p < n; ++p) {
    if (p != me) g.wait_input(p, k);
    reduce_inplace(out, in(p), count, dtype, op);
  }
}

struct Slice {
  std::size_t lo, count;  // elements
};
Slice slice_of(std::size_t count, int n, int r) {
  std::size_t base = count / n, extra = count % n;
  std::size_t lo = r * base + std::min<std::size_t>(r, extra);
  return {lo, base + (static_cast<std::size_t>(r) < extra ? 1 : 0)};
}

// Single copy (process_vm_readv). A collective that reads its peers' buffers
// starts with a round that publishes where its own buffers are, and ends with
// a round that every rank enters only after its last read, so that no rank
// returns (and lets its caller reuse a buffer) while a peer may still read it.
// Asked last, after a collective's other conditions (see single_copy_for).
bool single_copy(const ShmGroup& g, std::size_t block_bytes) { return g.single_copy_for(block_bytes); }
// Collectives where every rank copies blocks from (or to) every peer
// (all_gather, all_to_all, reduce_scatter, all_reduce, reduce) gain from
// single copy at an eighth of the usual block size when every rank has its
// own core: each rank makes one copy per block, all at once, instead of two
// through the segment (docs/tuning.md). Gather and scatter, where one side
// copies alone, and ranks that share cores keep the usual size.
bool single_copy_all_read(const ShmGroup& g, std::size_t block_bytes) {
  return single_copy(g, g.oversubscribed() ? block_bytes : 8 * block_bytes);
}

// Outputs of 16 MiB and more leave the caches anyway: the copying paths
// write them with stores that bypass the caches, sparing the memory the
// reads for ownership. Below that the plain stores win where the cache is
// large (all_gather and all_reduce of 8 MiB on 2 ranks), except for
// reductions when ranks share cores, whose slices then leave the caches
// from 8 MiB. tuttirun -n 2 tutti-bench all_gather / all_reduce -b 4M -e 32M
// (common/thresholds.h; docs/tuning.md "Thresholds inside the library").
bool streams(const ShmGroup& g, std::size_t out_bytes, bool reduction) {
  const ShmThresholds& t = g.thresholds();
  return out_bytes >= (reduction && g.oversubscribed() ? t.stream_bytes_oversubscribed_reduction : t.stream_bytes);
}
// dst = src, bypassing the caches when `stream`.
void copy_out(char* dst, const char* src, std::size_t bytes, bool stream) {
  if (stream)
    stream_copy(dst, src, bytes);
  else
    std::memcpy(dst, src, bytes);
}

std::uint64_t expose(ShmGroup& g, std::initializer_list<const void*> addrs) {
  const std::uint64_t k = g.begin_round(false);
  char* line = g.inline_slot(g.rank(), k);
  for (const void* a : addrs) {
    const auto v = reinterpret_cast<std::uint64_t>(a);
    std::memcpy(line, &v, sizeof v);
    line += sizeof v;
  }
  g.publish_input(k);
  return k;
}

// Address number i that peer p exposed in round k (after wait_input).
std::uint64_t exposed(const ShmGroup& g, int p, std::uint64_t k, int i = 0) {
  std::uint64_t v;
  std::memcpy(&v, g.inline_slot(p, k) + i * sizeof v, sizeof v);
  return v;
}

void finish_reads(ShmGroup& g) {
  const std::uint64_t k = g.begin_round(false);
  g.publish_input(k);
  for (int p = 0; p < g.size(); ++p)
    if (p != g.rank()) g.wait_input(p, k);
}

// gather / all_gather with single copies: every rank exposes its block; a
// reader copies each peer's block into out[peer].
// `own_copy` runs after the reads, while the peers may still be reading.
template <typename OwnCopy>
void read_every_block(ShmGroup& g, const void* send, std::span<char* const> out, std::size_t bytes, bool reader,
                      OwnCopy&& own_copy) {
  const int n = g.size(), r = g.rank();
  const std::uint64_t k = expose(g, {send});
  if (reader) {
    for (int i = 1; i < n; ++i) {
      const int p = (r + i) % n;
      g.wait_input(p, k);
      g.read_peer(p, out[p], exposed(g, p, k), bytes);
    }
  }
  own_copy();
  finish_reads(g);
}

bool disjoint(const void* a, const void* b, std::size_t bytes) {
  const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return x + bytes <= y || y + bytes <= x;
}

// dst = in_0 op in_1 op ... op in_{n-1} (rank order, like reduce_all_inputs)
// over `count` elements, where in_p is `own` for this rank and lies at
// address remote(p) in peer p's memory otherwise, read in chunks through a
// small staging buffer that stays in cache. dst may alias own.
// `done(off, c)` runs after each chunk [off, off + c) of dst is complete.
struct NoChunkHook {
  void operator()(std::size_t, std::size_t) const {}
};
template <typename Remote, typename Done = NoChunkHook>
void reduce_from_peers(ShmGroup& g, Remote remote, const char* own, char* dst, std::size_t count, DataType dtype,
                       ReduceOpKind op, Done done = {}) {
  const int n = g.size(), r = g.rank();
  const std::size_t es = elem_size(dtype);
  const std::size_t chunk = std::max<std::size_t>(1, g.thresholds().one_shot_stage_bytes / es);
  // float16/bfloat16 beyond two ranks: every peer's chunk staged, then
  // reduced at once (reduce_many).
  const bool wide = all_at_once(n, dtype, op);
  thread_local std::vector<char> stage;
  thread_local std::vector<const void*> ins;
  stage.resize((wide ? n + 1 : 3) * chunk * es);
  ins.resize(static_cast<std::size_t>(n));
  char* st[2] = {stage.data(), stage.data() + chunk * es};
  char* own_copy = stage.data() + (wide ? n : 2) * chunk * es;
  for (std::size_t off = 0; off < count; off += chunk) {
    const std::size_t c = std::min(chunk, count - off), b = c * es;
    const char* mine = own + off * es;
    // dst aliases own and ranks before this one overwrite it first: keep a copy.
    if (dst == own && r >= 2) {
      std::memcpy(own_copy, mine, b);
      mine = own_copy;
    }
    auto input = [&](int p, char* buf) -> const char* {
      if (p == r) return mine;
      g.read_peer(p, buf, remote(p) + off * es, b);
      return buf;
    };
    if (wide) {
      for (int p = 0; p < n; ++p) ins[static_cast<std::size_t>(p)] = input(p, stage.data() + p * chunk * es);
      reduce_many(dst + off * es, ins.data(), n, c, dtype, op);
      done(off, c);
      continue;
    }
    const char* a = input(0, st[0]);
    const char* b1 = input(1, st[1]);
    reduce_pair(dst + off * es, a, b1, c, dtype, op);
    for (int p = 2; p < n; ++p) reduce_inplace(dst + off * es, input(p, st[0]), c, dtype, op);
    done(off, c);
  }
}

// Two-shot with single copies: every rank exposes its input; rank r reduces
// slice r reading the others' inputs directly, chunk by chunk through a
// staging buffer, and writes each reduced chunk, still in cache, straight
// into the output of every rank that wants the result (every peer for
// all_reduce, the root for reduce) with process_vm_writev. A last round keeps
// every rank in the call until every peer has read its input and written its
// slice.
void reduce_single_copy(ShmGroup& g, const char* send, char* out, std::size_t count, DataType dtype, const ReduceOp& op,
                        int root) {
  const int n = g.size(), r = g.rank();
  const std::size_t es = elem_size(dtype);
  const Slice mine = slice_of(count, n, r);
  const std::size_t my_lo = mine.lo * es;
  thread_local std::vector<char> scratch;  // a non-root's slice of a reduce
  char* dst;
  if (root < 0 || root == r) {
    dst = out + my_lo;
  } else {
    scratch.resize(mine.count * es);
    dst = scratch.data();
  }
  const std::uint64_t k = expose(g, {send, out});
  // Copied now: the control line is reused by later rounds.
  thread_local std::vector<std::uint64_t> in_at, out_at;
  in_at.assign(n, 0);
  out_at.assign(n, 0);
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    g.wait_input(p, k);
    in_at[p] = exposed(g, p, k, 0);
    out_at[p] = exposed(g, p, k, 1);
  }
  reduce_from_peers(
      g, [&](int p) { return in_at[p] + my_lo; }, send + my_lo, dst, mine.count, dtype, base_kind(op),
      [&](std::size_t off, std::size_t c) {
        char* chunk = dst + off * es;
        if (op.kind == ReduceOpKind::Avg) divide_by(chunk, c, dtype, n);
        for (int i = 1; i < n; ++i) {
          const int p = (r + i) % n;
          if (root < 0 || p == root) g.write_peer(p, out_at[p] + my_lo + off * es, chunk, c * es);
        }
      });
  finish_reads(g);
}

// A region of this rank's memory that an operation run directly reads or
// writes, and its length (the same on every rank).
struct Region {
  const void* at;
  std::size_t bytes;
};

// The first round of an operation run directly on shared allocations, as
// in reduce_direct: tells the others whether this rank's regions lie in the
// group's shared allocations (and `ok_here`, a condition of its own holds),
// and where. Returns true, on every rank alike, when every rank's do; then
// views[p * mine.size() + i] is this rank's address of peer p's region i.
bool direct_agree(ShmGroup& g, std::span<const Region> mine, bool ok_here, std::vector<char*>& views) {
  const int n = g.size(), r = g.rank();
  const std::size_t m = mine.size();
  std::uint64_t said[4] = {};
  bool here = ok_here;
  for (std::size_t i = 0; i < m; ++i) {
    here = here && g.shared().contains(mine[i].at, mine[i].bytes);
    said[1 + i] = reinterpret_cast<std::uint64_t>(mine[i].at);
  }
  said[0] = here ? 1u : 0u;
  const std::uint64_t k = g.begin_round(false);
  std::memcpy(g.inline_slot(r, k), said, sizeof said);
  g.publish_input(k);
  views.assign(static_cast<std::size_t>(n) * m, nullptr);
  bool all = here;
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    g.wait_input(p, k);
    std::uint64_t theirs[4];
    std::memcpy(theirs, g.inline_slot(p, k), sizeof theirs);
    if (!theirs[0]) all = false;
    if (!all) continue;
    for (std::size_t i = 0; i < m; ++i) {
      char* v = g.shared().view(p, theirs[1 + i], mine[i].bytes);
      if (!v)
        throw Error(ErrorKind::Internal,
                    "rank " + std::to_string(p) + "'s buffers lie in shared memory this rank has not mapped");
      views[static_cast<std::size_t>(p) * m + i] = v;
    }
  }
  return all;
}

// Direct, on memory every member can address (Communicator::alloc_shared).
// A first round (direct_agree) tells the others whether this rank's buffers
// lie in the group's shared allocations, and where; if every rank's do:
// - two-shot: rank r reduces slice r of every input, reading the peers'
//   inputs where they are, chunk by chunk into a buffer that stays in cache,
//   and copies each reduced chunk into the output of every rank that wants
//   it (each rank's own output included): a pass over the slice where
//   copying through the segment makes four (docs/architecture.md "Shared
//   buffers"). Only rank r reads or writes slice r of any buffer, each chunk
//   read before it is written, so inputs may be outputs.
// - one-shot: every rank that wants the result reads every input where it
//   is and writes its own output, only its own: where that output is its
//   input, which the peers are reading, it reduces into a buffer of its own
//   and copies it out once every rank is done reading.
// A last round keeps every rank in the call until the others are done with
// its buffers. Every element is reduced in rank order, so every rank gets
// the same bits whichever form runs. Returns false, every rank alike, when
// some rank's buffers are elsewhere: the caller then runs the usual path.
bool reduce_direct(ShmGroup& g, const char* send, char* out, std::size_t count, DataType dtype, const ReduceOp& op,
                   int root, bool one_shot) {
  const int n = g.size(), r = g.rank();
  const std::size_t es = elem_size(dtype), bytes = count * es;
  const bool wants = root < 0 || root == r;
  const bool in_place = wants && out == send;
  const bool apart = out + bytes <= send || send + bytes <= out;
  // A rank that wants no result offers its input twice.
  const Region regions[] = {{send, bytes}, {wants ? out : send, bytes}};
  thread_local std::vector<char*> views;
  if (!direct_agree(g, regions, !wants || in_place || apart, views)) return false;
  thread_local std::vector<const void*> ins;
  ins.resize(static_cast<std::size_t>(n));
  const auto inputs_at = [&](std::size_t at) {
    for (int p = 0; p < n; ++p)
      ins[static_cast<std::size_t>(p)] = (p == r ? send : views[static_cast<std::size_t>(p) * 2]) + at;
    return ins.data();
  };
  const ReduceOpKind kind = base_kind(op);
  const std::size_t chunk = std::max<std::size_t>(1, g.thresholds().two_shot_chunk_bytes / es);
  thread_local std::vector<char> stage;
  if (one_shot) {
    if (wants) {
      char* const dst = in_place ? (stage.resize(bytes), stage.data()) : out;
      for (std::size_t off = 0; off < count; off += chunk) {
        const std::size_t c = std::min(chunk, count - off);
        reduce_many(dst + off * es, inputs_at(off * es), n, c, dtype, kind);
      }
      if (op.kind == ReduceOpKind::Avg) divide_by(dst, count, dtype, n);
      finish_reads(g);
      if (in_place) copy_out(out, dst, bytes, false);
    } else {
      finish_reads(g);
    }
    return true;
  }
  const Slice s = slice_of(count, n, r);
  const bool stream_out = streams(g, bytes, true);
  stage.resize(std::min(chunk, std::max<std::size_t>(s.count, 1)) * es);
  for (std::size_t off = 0; off < s.count; off += chunk) {
    const std::size_t c = std::min(chunk, s.count - off), at = (s.lo + off) * es;
    reduce_many(stage.data(), inputs_at(at), n, c, dtype, kind);
    if (op.kind == ReduceOpKind::Avg) divide_by(stage.data(), c, dtype, n);
    for (int i = 0; i < n; ++i) {
      const int q = (r + i) % n;
      if (root >= 0 && q != root) continue;
      copy_out((q == r ? out : views[static_cast<std::size_t>(q) * 2 + 1]) + at, stage.data(), c * es, stream_out);
    }
  }
  finish_reads(g);
  return true;
}

// The reduction over all ranks of [off, off+count) of every input, left in
// `out` on every rank (all_reduce) or on `root` only (root >= 0).
void reduce_rounds(ShmGroup& g, const char* send, char* out, std::size_t count, DataType dtype, const ReduceOp& op,
                   int root, std::size_t one_shot_bytes) {
  const int n = g.size(), r = g.rank();
  const std::size_t es = elem_size(dtype);
  const std::size_t per_round = std::max<std::size_t>(1, g.slot_bytes() / es);
  const ReduceOpKind kind = base_kind(op);
  const bool one_shot = count * es <= one_shot_bytes;
  // Single copy reads the peers' inputs through process_vm_readv; once the
  // slices outgrow the caches (sooner when ranks share cores) copying through
  // the segment, where every cross-core read hits a slot still in cache, is
  // faster. Every rank reads and writes, so single copy starts at an eighth
  // of the usual size when ranks have their own cores (docs/tuning.md).
  const std::size_t slice_bytes = count / n * es;
  const bool cache_sized = g.oversubscribed()
                               ? slice_bytes <= g.thresholds().reduce_single_copy_slice_bytes_oversubscribed
                               : slice_bytes < g.thresholds().reduce_single_copy_slice_bytes;
  if (!one_shot && n > 1 && op.kind != ReduceOpKind::PremulSum && cache_sized && single_copy_all_read(g, slice_bytes)) {
    reduce_single_copy(g, send, out, count, dtype, op, root);
    return;
  }
  const bool stream_out = streams(g, count * es, true);
  // Two-shot, a rank reduces its slice into memory of its own: its output
  // where it wants the result, else (a reduce's other ranks) a scratch
  // buffer; then copies it into its output slot if peers want it. The
  // reduction's stores then go to lines no peer holds: writing it straight
  // into the slot the peers read in the slot's previous use (each store
  // taking the line back from the peer's cache) makes 2-rank all_reduces
  // markedly slower (bench/all_reduce_schemes.cc, scheme `slot` against
  // `copy`; docs/performance.md "The one-host targets"). Where the output
  // is the input and this rank's input is reduced after others' (ranks 2
  // and up), the first step would overwrite it: such a rank reduces into
  // its slot.
  const bool own_in_place = !one_shot && op.kind != ReduceOpKind::PremulSum;
  const bool wants = root < 0 || root == r;
  const bool apart = out + count * es <= send || send + count * es <= out;
  const bool into_out = wants && (!own_in_place || apart || (out == send && r < 2));
  thread_local std::vector<char> scratch;
  if (!one_shot && !wants) scratch.resize(std::min(count, per_round) * es);
  for (std::size_t off = 0; off < count; off += per_round) {
    const std::size_t c = std::min(per_round, count - off);
    // One-shot rounds of up to 8 KiB go through the line or the ring: a
    // reduce's senders run ahead of its root.
    const Space space = one_shot ? ShmGroup::space_for(c * es) : Space::Slots;
    const std::uint64_t k = g.begin_round(space);
    const Slice mine = slice_of(c, n, r);
    // Two-shot: the peers read every slice of this rank's input but its
    // own, which it reduces from where it is (PremulSum scales it first).
    if (own_in_place) {
      char* slot = g.input(r, k, space);
      copy_in(slot, send + off * es, mine.lo, dtype, op);
      const std::size_t hi = mine.lo + mine.count;
      copy_in(slot + hi * es, send + (off + hi) * es, c - hi, dtype, op);
    } else {
      copy_in(g.input(r, k, space), send + off * es, c, dtype, op);
    }
    g.publish_input(k);
    if (one_shot) {
      if (wants) reduce_all_inputs(g, k, 0, out + off * es, c, dtype, kind, space);
    } else {
      char* const slot = g.out_slot(r, k) + mine.lo * es;
      char* const dst = into_out ? out + (off + mine.lo) * es : wants ? slot : scratch.data();
      reduce_all_inputs(g, k, mine.lo * es, dst, mine.count, dtype, kind, Space::Slots,
                        own_in_place ? send + (off + mine.lo) * es : nullptr);
      if (root != r && dst != slot && mine.count) std::memcpy(slot, dst, mine.count * es);
      g.publish_output(k);
      if (wants) {
        for (int i = into_out ? 1 : 0; i < n; ++i) {
          int p = (r + i) % n;  // start with our own slice, then the next ranks'
          Slice s = slice_of(c, n, p);
          if (p != r) g.wait_output(p, k);
          if (s.count) copy_out(out + (off + s.lo) * es, g.out_slot(p, k) + s.lo * es, s.count * es, stream_out);
        }
      }
    }
  }
  if (op.kind == ReduceOpKind::Avg && wants) divide_by(out, count, dtype, n);
}

// Per-destination share of a round's input and output slot, which
// scatter, reduce_scatter and all_to_all fill as one area from in_slot (they
// publish no output; the parity is free for both once every peer began the
// previous round): a multiple of 16 bytes, so any element size divides it.
// Pieces twice a slot's share take fewer rounds, each a wait for every peer,
// and are faster than one share where ranks share cores (tuttirun -n 4
// tutti-bench all_to_all -b 2M -e 2M on 2 cores, against a build with
// pieces of one share).
std::size_t piece_bytes(const ShmGroup& g) { return 2 * g.slot_bytes() / g.size() / 16 * 16; }

}  // namespace

bool shm_reduce_direct(ShmGroup& g, const void* send, void* recv, std::size_t count, DataType dtype, const ReduceOp& op,
                       int root, bool one_shot) {
  if (g.shared().empty() || g.size() < 2 || op.kind == ReduceOpKind::PremulSum) [[likely]]
    return false;
  g.shared().collect();
  return reduce_direct(g, static_cast<const char*>(send), static_cast<char*>(recv), count, dtype, op, root, one_shot);
}

bool shm_broadcast_direct(ShmGroup& g, void* buf, std::size_t bytes, int root) {
  if (g.shared().empty() || g.size() < 2) [[likely]]
    return false;
  g.shared().collect();
  thread_local std::vector<char*> views;
  const Region mine[] = {{buf, bytes}};
  if (!direct_agree(g, mine, true, views)) return false;
  // Every receiver copies the root's buffer; the root waits in the last round.
  if (g.rank() != root)
    copy_out(static_cast<char*>(buf), views[static_cast<std::size_t>(root)], bytes, streams(g, bytes, false));
  finish_reads(g);
  return true;
}

bool shm_all_gather_direct(ShmGroup& g, const void* send, std::span<char* const> out, std::size_t bytes) {
  const int n = g.size(), r = g.rank();
  if (g.shared().empty() || n < 2) [[likely]]
    return false;
  g.shared().collect();
  bool contiguous = true;  // one output buffer (all_gather_into_tensor)
  for (int p = 0; p < n; ++p) contiguous = contiguous && out[p] == out[0] + p * bytes;
  thread_local std::vector<char*> views;
  const Region mine[] = {{send, bytes}, {out[0], n * bytes}};
  if (!direct_agree(g, mine, contiguous, views)) return false;
  // Each peer's block from its send buffer, its own last. A rank gathering
  // in place (its send buffer its own block) is read there, and writes only
  // the other blocks.
  const bool stream = streams(g, bytes * n, false);
  for (int i = 1; i <= n; ++i) {
    const int p = (r + i) % n;
    const char* from = p == r ? static_cast<const char*>(send) : views[static_cast<std::size_t>(p) * 2];
    if (out[p] != from) copy_out(out[p], from, bytes, stream);
  }
  finish_reads(g);
  return true;
}

bool shm_reduce_scatter_direct(ShmGroup& g, std::span<const char* const> in, void* recv, std::size_t count,
                               DataType dtype, const ReduceOp& op) {
  const int n = g.size(), r = g.rank();
  const std::size_t es = elem_size(dtype), bytes = count * es;
  if (g.shared().empty() || n < 2 || op.kind == ReduceOpKind::PremulSum) [[likely]]
    return false;
  g.shared().collect();
  char* out = static_cast<char*>(recv);
  bool ok = true;  // one input buffer, and the output its own block or apart from it
  for (int p = 0; p < n; ++p) ok = ok && in[p] == in[0] + p * bytes;
  ok = ok && (out == in[r] || disjoint(out, in[0], n * bytes));
  thread_local std::vector<char*> views;
  const Region mine[] = {{in[0], n * bytes}, {recv, bytes}};
  if (!direct_agree(g, mine, ok, views)) return false;
  // Block r of every rank's input, chunk by chunk into a buffer that stays
  // in cache, then into the output: each chunk read before it is written.
  const ReduceOpKind kind = base_kind(op);
  const bool stream_out = streams(g, bytes, true);
  const std::size_t chunk = std::max<std::size_t>(1, g.thresholds().two_shot_chunk_bytes / es);
  thread_local std::vector<char> stage;
  thread_local std::vector<const void*> ins;
  stage.resize(std::min(chunk, std::max<std::size_t>(count, 1)) * es);
  ins.resize(static_cast<std::size_t>(n));
  for (std::size_t off = 0; off < count; off += chunk) {
    const std::size_t c = std::min(chunk, count - off), at = r * bytes + off * es;
    for (int p = 0; p < n; ++p)
      ins[static_cast<std::size_t>(p)] = (p == r ? in[0] : views[static_cast<std::size_t>(p) * 2]) + at;
    reduce_many(stage.data(), ins.data(), n, c, dtype, kind);
    if (op.kind == ReduceOpKind::Avg) divide_by(stage.data(), c, dtype, n);
    copy_out(out + off * es, stage.data(), c * es, stream_out);
  }
  finish_reads(g);
  return true;
}

bool shm_all_to_all_direct(ShmGroup& g, const void* send, void* recv, std::size_t block_bytes) {
  const int n = g.size(), r = g.rank();
  const std::size_t all = block_bytes * n;
  if (g.shared().empty() || n < 2) [[likely]]
    return false;
  g.shared().collect();
  char* out = static_cast<char*>(recv);
  thread_local std::vector<char*> views;
  const Region mine[] = {{send, all}, {recv, all}};
  // In place, a rank would overwrite blocks its peers still read.
  if (!direct_agree(g, mine, disjoint(send, recv, all), views)) return false;
  const bool stream = streams(g, all, false);
  for (int i = 0; i < n; ++i) {
    const int p = (r + i) % n;
    const char* from = p == r ? static_cast<const char*>(send) : views[static_cast<std::size_t>(p) * 2];
    copy_out(out + p * block_bytes, from + r * block_bytes, block_bytes, stream);
  }
  finish_reads(g);
  return true;
}

void shm_all_reduce(ShmGroup& g, const void* send, void* recv, std::size_t count, DataType dtype, const ReduceOp& op,
                    std::size_t one_shot_bytes) {
  // A one-shot all_reduce has every member read every input: n^2 waits.
  // In a large group, a reduce to member 0 and a broadcast from it instead
  // (common/thresholds.h, flat_members_max).
  if (g.size() > g.thresholds().flat_members_max && count * elem_size(dtype) <= one_shot_bytes) {
    reduce_rounds(g, static_cast<const char*>(send), static_cast<char*>(recv), count, dtype, op, 0, one_shot_bytes);
    shm_broadcast(g, recv, count * elem_size(dtype), 0);
    return;
  }
  reduce_rounds(g, static_cast<const char*>(send), static_cast<char*>(recv), count, dtype, op, -1, one_shot_bytes);
}

void shm_reduce(ShmGroup& g, const void* send, void* recv, std::size_t count, DataType dtype, const ReduceOp& op,
                int root, std::size_t one_shot_bytes) {
  reduce_rounds(g, static_cast<const char*>(send), static_cast<char*>(recv), count, dtype, op, root, one_shot_bytes);
}

void shm_broadcast(ShmGroup& g, void* buf, std::size_t bytes, int root) {
  const int r = g.rank();
  char* p = static_cast<char*>(buf);
  // With a core for every rank, root and receivers copy in parallel, which
  // pays from a quarter of the usual block size on (docs/tuning.md). Ranks
  // that share cores copy through the segment from 128 KiB, which is faster
  // there than single copy from 512 KiB up (tuttirun -n 4 tutti-bench
  // broadcast -b 64K -e 32M on 2 cores, against a build with
  // broadcast_copy_bytes_oversubscribed raised; common/thresholds.h).
  const bool cache_sized = !g.oversubscribed() || bytes < g.thresholds().broadcast_copy_bytes_oversubscribed;
  if (cache_sized && single_copy(g, g.oversubscribed() ? bytes : 4 * bytes)) {
    // The root copies too: the message is cut into n parts (whole pages);
    // receiver q reads every part from the root but part q, which the root
    // writes into it. Every rank then copies (n-1)/n of the message.
    const int n = g.size();
    const std::size_t part = (bytes / n + 4095) / 4096 * 4096;
    auto part_of = [&](int j) -> Slice {
      const std::size_t lo = std::min(bytes, j * part);
      return {lo, (j == n - 1 ? bytes : std::min(bytes, lo + part)) - lo};
    };
    const std::uint64_t k = expose(g, {buf});
    if (r == root) {
      for (int i = 1; i < n; ++i) {
        const int q = (r + i) % n;
        const Slice s = part_of(q);
        g.wait_input(q, k);
        if (s.count) g.write_peer(q, exposed(g, q, k) + s.lo, p + s.lo, s.count);
      }
    } else {
      g.wait_input(root, k);
      const std::uint64_t from = exposed(g, root, k);
      for (int i = 1; i < n; ++i) {
        const int j = (r + i) % n;  // every part but this rank's own
        const Slice s = part_of(j);
        if (s.count) g.read_peer(root, p + s.lo, from + s.lo, s.count);
      }
    }
    finish_reads(g);
    return;
  }
  if (const Space space = ShmGroup::space_for(bytes); bytes > 0 && space != Space::Slots) {
    // One round, in the control line or the ring: the root runs ahead.
    const std::uint64_t k = g.begin_round(space);
    if (bytes <= ShmGroup::kPackedBytes) {
      // Four rounds to a cache line (ShmGroup::publish_packed).
      if (r == root) {
        g.publish_packed(k, p, bytes);
      } else {
        g.publish_input(k);
        g.wait_packed(root, k, p, bytes);
      }
      return;
    }
    if (r == root) std::memcpy(g.input(r, k, space), p, bytes);
    g.publish_input(k);
    if (r != root) {
      g.wait_input(root, k);
      std::memcpy(p, g.input(root, k, space), bytes);
    }
    return;
  }
  const std::size_t S = g.slot_bytes();
  for (std::size_t off = 0; off < bytes; off += S) {
    const std::size_t c = std::min(S, bytes - off);
    const std::uint64_t k = g.begin_round();
    if (r == root) std::memcpy(g.in_slot(r, k), p + off, c);
    g.publish_input(k);
    if (r != root) {
      g.wait_input(root, k);
      std::memcpy(p + off, g.in_slot(root, k), c);
    }
  }
}

void shm_gather(ShmGroup& g, const void* send, std::span<char* const> out, std::size_t bytes, int root) {
  const int n = g.size(), r = g.rank();
  const char* s = static_cast<const char*>(send);
  if (single_copy(g, bytes)) {
    read_every_block(g, send, out, bytes, r == root, [] {});
    return;
  }
  const std::size_t S = g.slot_bytes();
  for (std::size_t off = 0; off < bytes; off += S) {
    const std::size_t c = std::min(S, bytes - off);
    // Senders of up to 8 KiB run ahead of the root (line or ring).
    const Space space = ShmGroup::space_for(c);
    const std::uint64_t k = g.begin_round(space);
    if (r != root) std::memcpy(g.input(r, k, space), s + off, c);
    g.publish_input(k);
    if (r == root) {
      for (int i = 1; i < n; ++i) {
        int p = (r + i) % n;
        g.wait_input(p, k);
        std::memcpy(out[p] + off, g.input(p, k, space), c);
      }
    }
  }
}

void shm_all_gather(ShmGroup& g, const void* send, std::span<char* const> out, std::size_t bytes) {
  const int n = g.size(), r = g.rank();
  const char* s = static_cast<const char*>(send);
  // Ranks that share cores read from memory what the segment would serve
  // from cache: from 8 MiB gathered, copying through it is faster
  // (tuttirun -n 4 tutti-bench all_gather -b 64K -e 32M on 2 cores;
  // common/thresholds.h, docs/tuning.md).
  const bool cache_sized = !g.oversubscribed() || bytes * n < g.thresholds().all_gather_copy_bytes_oversubscribed;
  char* own = out[r];
  const bool copy_own = bytes && own != s;
  if (cache_sized && single_copy_all_read(g, bytes)) {
    // Its own block last, while the peers read theirs: it reads the send
    // buffer from its cache.
    read_every_block(g, send, out, bytes, true, [&] {
      if (copy_own) std::memmove(own, s, bytes);
    });
    return;
  }
  const std::size_t S = g.slot_bytes();
  const bool stream_out = streams(g, bytes * n, false);
  // Its own block chunk by chunk, each right after it went into the slot
  // (one read of the send buffer), unless the two overlap.
  const bool own_by_chunk = copy_own && disjoint(own, s, bytes);
  if (copy_own && !own_by_chunk) std::memmove(own, s, bytes);
  for (std::size_t off = 0; off < bytes; off += S) {
    const std::size_t c = std::min(S, bytes - off);
    const Space space = ShmGroup::space_for(c);
    const std::uint64_t k = g.begin_round(space);
    std::memcpy(g.input(r, k, space), s + off, c);
    g.publish_input(k);
    if (own_by_chunk) copy_out(own + off, s + off, c, stream_out);
    for (int i = 1; i < n; ++i) {
      int p = (r + i) % n;
      g.wait_input(p, k);
      copy_out(out[p] + off, g.input(p, k, space), c, stream_out);
    }
  }
}

void shm_scatter(ShmGroup& g, std::span<const char* const> in, void* recv, std::size_t bytes, int root) {
  const int n = g.size(), r = g.rank();
  char* out = static_cast<char*>(recv);
  if (single_copy(g, bytes)) {
    // The root lists where each rank's block is, in its input slot.
    const std::uint64_t k = g.begin_round();
    if (r == root)
      for (int p = 0; p < n; ++p) {
        const auto a = reinterpret_cast<std::uint64_t>(in[p]);
        std::memcpy(g.in_slot(r, k) + p * sizeof a, &a, sizeof a);
      }
    g.publish_input(k);
    if (r != root) {
      g.wait_input(root, k);
      std::uint64_t a;
      std::memcpy(&a, g.in_slot(root, k) + r * sizeof a, sizeof a);
      g.read_peer(root, out, a, bytes);
    }
    finish_reads(g);
    return;
  }
  if (bytes > 0 && bytes * n <= ShmGroup::kRingBytes) {
    // One round in the line or the ring: the root runs ahead.
    const Space space = ShmGroup::space_for(bytes * n);
    const std::uint64_t k = g.begin_round(space);
    if (r == root)
      for (int p = 0; p < n; ++p)
        if (p != root) std::memcpy(g.input(r, k, space) + p * bytes, in[p], bytes);
    g.publish_input(k);
    if (r != root) {
      g.wait_input(root, k);
      std::memcpy(out, g.input(root, k, space) + r * bytes, bytes);
    }
    return;
  }
  const std::size_t P = piece_bytes(g);
  for (std::size_t off = 0; off < bytes; off += P) {
    const std::size_t c = std::min(P, bytes - off);
    const std::uint64_t k = g.begin_round();
    if (r == root)
      for (int p = 0; p < n; ++p)
        if (p != root) std::memcpy(g.in_slot(r, k) + p * P, in[p] + off, c);
    g.publish_input(k);
    if (r != root) {
      g.wait_input(root, k);
      std::memcpy(out + off, g.in_slot(root, k) + r * P, c);
    }
  }
}

void shm_reduce_scatter(ShmGroup& g, std::span<const char* const> in, void* recv, std::size_t count, DataType dtype,
                        const ReduceOp& op) {
  const int n = g.size(), r = g.rank();
  const std::size_t es = elem_size(dtype);
  const std::size_t per = std::max<std::size_t>(1, piece_bytes(g) / es);
  const std::size_t P = per * es;
  const ReduceOpKind kind = base_kind(op);
  char* out = static_cast<char*>(recv);
  if (n > 1 && op.kind != ReduceOpKind::PremulSum && single_copy_all_read(g, count * es)) {
    // Every rank lists where its block for each rank lies; rank r reduces
    // block r of every input, read straight from its owner.
    const std::uint64_t k = g.begin_round();
    for (int p = 0; p < n; ++p) {
      const auto a = reinterpret_cast<std::uint64_t>(in[p]);
      std::memcpy(g.in_slot(r, k) + p * sizeof a, &a, sizeof a);
    }
    g.publish_input(k);
    std::vector<std::uint64_t> from(n);
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      g.wait_input(p, k);
      std::memcpy(&from[p], g.in_slot(p, k) + r * sizeof from[p], sizeof from[p]);
    }
    reduce_from_peers(
        g, [&](int p) { return from[p]; }, in[r], out, count, dtype, kind);
    if (op.kind == ReduceOpKind::Avg) divide_by(out, count, dtype, n);
    finish_reads(g);
    return;
  }
  // The peers read every block but this rank's own, which it reduces from
  // where it is (PremulSum scales it first), unless the output is that
  // block and others' are reduced into it first (ranks 2 and up).
  const char* const own = in[r];
  const bool apart = out + count * es <= own || own + count * es <= out;
  const bool own_in_place = op.kind != ReduceOpKind::PremulSum && (apart || (out == own && r < 2));
  for (std::size_t off = 0; off < count; off += per) {
    const std::size_t c = std::min(per, count - off);
    const std::uint64_t k = g.begin_round();
    for (int p = 0; p < n; ++p)
      if (p != r || !own_in_place) copy_in(g.in_slot(r, k) + p * P, in[p] + off * es, c, dtype, op);
    g.publish_input(k);
    reduce_all_inputs(g, k, r * P, out + off * es, c, dtype, kind, Space::Slots,
                      own_in_place ? own + off * es : nullptr);
  }
  if (op.kind == ReduceOpKind::Avg) divide_by(out, count, dtype, n);
}

namespace {

// Where each block of an all_to_all lies: equal blocks back to back, or the
// v form's per-peer byte counts and displacements.
struct EqualBlocks {
  std::size_t block;
  std::size_t send_bytes(int) const { return block; }
  std::size_t recv_bytes(int) const { return block; }
  std::size_t send_displ(int p) const { return p * block; }
  std::size_t recv_displ(int p) const { return p * block; }
};
struct VarBlocks {
  std::span<const std::size_t> sb, sd, rb, rd;
  std::size_t send_bytes(int p) const { return sb[p]; }
  std::size_t recv_bytes(int p) const { return rb[p]; }
  std::size_t send_displ(int p) const { return sd[p]; }
  std::size_t recv_displ(int p) const { return rd[p]; }
};

// global_max: the largest block of any rank (every rank passes the same).
template <typename Layout>
void all_to_all_blocks(ShmGroup& g, const char* send, char* recv, const Layout& L, std::size_t global_max) {
  const int n = g.size(), r = g.rank();
  const std::size_t P = piece_bytes(g);
  std::uint64_t k;
  // Ranks that share cores copy through the segment from 512 KiB a rank:
  // with pieces of two slots' share, fewer rounds than single copy's
  // reads and waits, and faster from 512 KiB to 8 MiB at least (tuttirun -n 4
  // tutti-bench all_to_all -b 64K -e 32M on 2 cores, against a build with
  // all_to_all_copy_bytes_oversubscribed raised; common/thresholds.h), and
  // switching between the two in the timed choice's trials costs more than
  // it saves there.
  const bool cache_sized = !g.oversubscribed() || global_max * n < g.thresholds().all_to_all_copy_bytes_oversubscribed;
  if (cache_sized && single_copy_all_read(g, global_max)) {
    // Every rank lists (address, bytes) of its block for each destination in
    // its input slot; each reads its blocks straight from the senders.
    k = g.begin_round();
    char* table = g.in_slot(r, k);
    for (int p = 0; p < n; ++p) {
      const std::uint64_t entry[2] = {reinterpret_cast<std::uint64_t>(send + L.send_displ(p)), L.send_bytes(p)};
      std::memcpy(table + p * sizeof entry, entry, sizeof entry);
    }
    g.publish_input(k);
    // In place, a peer may still read the block this rank is about to
    // receive over: receive into a copy, and move it after the last read.
    std::size_t send_end = 0, recv_end = 0;
    for (int p = 0; p < n; ++p) {
      send_end = std::max(send_end, L.send_displ(p) + L.send_bytes(p));
      recv_end = std::max(recv_end, L.recv_displ(p) + L.recv_bytes(p));
    }
    const bool overlap = send < recv + recv_end && recv < send + send_end;
    std::vector<char> staging;
    char* dst = recv;
    if (overlap) {
      staging.resize(recv_end);
      dst = staging.data();
    }
    for (int i = 0; i < n; ++i) {
      const int p = (r + i) % n;
      if (p == r) {
        if (L.recv_bytes(r)) std::memcpy(dst + L.recv_displ(r), send + L.send_displ(r), L.recv_bytes(r));
        continue;
      }
      g.wait_input(p, k);
      std::uint64_t entry[2];
      std::memcpy(entry, g.in_slot(p, k) + r * sizeof entry, sizeof entry);
      if (entry[1] != L.recv_bytes(p))
        throw Error(ErrorKind::Mismatch, "rank " + std::to_string(r) + ": all_to_all expects " +
                                             std::to_string(L.recv_bytes(p)) + " bytes from rank " + std::to_string(p) +
                                             ", which sends " + std::to_string(entry[1]));
      if (entry[1]) g.read_peer(p, dst + L.recv_displ(p), entry[0], entry[1]);
    }
    finish_reads(g);
    if (overlap)
      for (int p = 0; p < n; ++p)
        if (L.recv_bytes(p)) std::memcpy(recv + L.recv_displ(p), dst + L.recv_displ(p), L.recv_bytes(p));
    return;
  }
  // Small exchanges fit one control line: one inline round, pieces packed
  // at a stride of global_max bytes.
  const bool inline_data = global_max > 0 && global_max * n <= ShmGroup::kInlineBytes;
  const std::size_t stride = inline_data ? global_max : P;
  for (std::size_t off = 0; off < global_max; off += stride) {
    k = g.begin_round(!inline_data);
    char* mine = inline_data ? g.inline_slot(r, k) : g.in_slot(r, k);
    for (int p = 0; p < n; ++p) {
      if (p == r || off >= L.send_bytes(p)) continue;
      std::memcpy(mine + p * stride, send + L.send_displ(p) + off, std::min(stride, L.send_bytes(p) - off));
    }
    g.publish_input(k);
    for (int i = 0; i < n; ++i) {
      int p = (r + i) % n;
      if (off >= L.recv_bytes(p)) continue;
      const std::size_t c = std::min(stride, L.recv_bytes(p) - off);
      if (p == r) {
        std::memmove(recv + L.recv_displ(r) + off, send + L.send_displ(r) + off, c);
        continue;
      }
      g.wait_input(p, k);
      const char* theirs = inline_data ? g.inline_slot(p, k) : g.in_slot(p, k);
      std::memcpy(recv + L.recv_displ(p) + off, theirs + r * stride, c);
    }
  }
}

}  // namespace

void shm_all_to_all(ShmGroup& g, const void* send, void* recv, std::size_t block_bytes) {
  all_to_all_blocks(g, static_cast<const char*>(send), static_cast<char*>(recv), EqualBlocks{block_bytes}, block_bytes);
}

void shm_all_to_all_v(ShmGroup& g, const char* send, std::span<const std::size_t> send_bytes,
                      std::span<const std::size_t> send_displs, char* recv, std::span<const std::size_t> recv_bytes,
                      std::span<const std::size_t> recv_displs) {
  const int n = g.size(), r = g.rank();
  if (send_bytes[r] != recv_bytes[r])
    throw Error(ErrorKind::InvalidArgument, "rank " + std::to_string(r) + ": all_to_all sends " +
                                                std::to_string(send_bytes[r]) + " bytes to itself but expects " +
                                                std::to_string(recv_bytes[r]));
  // A first round publishes every rank's largest outgoing block, so that
  // all agree on the number of rounds.
  std::size_t my_max = *std::max_element(send_bytes.begin(), send_bytes.end());
  const std::uint64_t k = g.begin_round(false);
  std::memcpy(g.inline_slot(r, k), &my_max, sizeof my_max);
  g.publish_input(k);
  std::size_t global_max = 0;
  for (int p = 0; p < n; ++p) {
    g.wait_input(p, k);
    std::size_t v;
    std::memcpy(&v, g.inline_slot(p, k), sizeof v);
    global_max = std::max(global_max, v);
  }
  all_to_all_blocks(g, send, recv, VarBlocks{send_bytes, send_displs, recv_bytes, recv_displs}, global_max);
}

void shm_barrier(ShmGroup& g) { g.and_over_members(0); }

}  // namespace tutti::detail
