// The shared-memory medium (media/shm_medium.h): its segment, its timed
// choice, alloc_shared's segments and its registry entries.
#include "media/shm_medium.h"

#include <cstdio>

#include "algorithms/shm_collectives.h"
#include "algorithms/signature.h"
#include "common/log.h"
#include "common/small_vector.h"
#include "tutti/error.h"

namespace tutti::detail {

ShmMedium::ShmMedium(Setup s) : s_(std::move(s)) {
  const Config& c = *s_.config;
  if (c.algo_tuning == "off" || s_.size < 2) return;
  using C = Collective;
  // Single copy against copying through the segment, above
  // TUTTI_SHM_CMA_BYTES/16 (the 16 KiB blocks, the least any rule of
  // algorithms/shm_collectives.cc copies once, fall in the first class
  // covered, (8, 16] KiB), where TUTTI_SHM_CMA_BYTES is unset.
  if (!c.shm_cma_set && c.shm_cma_bytes > 0)
    for (int i = 0; i < kCollectives; ++i)
      if (static_cast<C>(i) != C::Barrier)
        tuners_[i] = std::make_unique<Tuner>(c.shm_cma_bytes / 16, SIZE_MAX, Tuner::Figure::Fastest);
  if (c.shm_one_shot_set) return;
  // One-shot against two-shot, where TUTTI_SHM_ONESHOT_BYTES is unset: from
  // a round's one-shot steps up to where the bytes of every rank reducing
  // everything outweigh the second round on any machine we know
  // (docs/tuning.md, "Timed choice in shared memory").
  for (const C which : {C::AllReduce, C::Reduce}) {
    const int i = static_cast<int>(which);
    shots_[i] = std::make_unique<Tuner>(kShotsFrom, kShotsTo, Tuner::Figure::Fastest);
    direct_shots_[i] = std::make_unique<Tuner>(kShotsFrom, kShotsTo, Tuner::Figure::Fastest);
  }
  // In place against copying through the segment on shared allocations, at
  // every size: in place takes one round more.
  for (const C which : {C::AllReduce, C::Broadcast, C::Reduce, C::AllGather, C::ReduceScatter, C::AllToAll})
    direct_[static_cast<int>(which)] = std::make_unique<Tuner>(0, SIZE_MAX, Tuner::Figure::Fastest);
}

ShmMedium::~ShmMedium() = default;

void ShmMedium::create(const OpContext& x) {
  const TimePoint deadline = x.start_tick ? deadline_after(s_.timeout->load()) : x.deadline;
  try {
    group_ = std::make_unique<ShmGroup>(s_.name, s_.rank, s_.size, s_.config->shm_slot_bytes, deadline, s_.aborted,
                                        s_.creator_pid, s_.creator_name);
  } catch (const Error& e) {
    throw Error(e.kind(), x.where() + e.message());
  }
  group_->set_member_pids(s_.pids);
  group_->set_thresholds(s_.thresholds);
  group_->set_abort_flag(s_.aborted);
  published_.store(group_.get(), std::memory_order_release);
}

void ShmMedium::broadcast_failure(ErrorKind kind, const std::string& message) {
  if (ShmGroup* g = published_.load(std::memory_order_acquire)) g->broadcast_failure(kind, message);
}

std::vector<std::int64_t> ShmMedium::words(const OpContext& x, std::int64_t mine) {
  ShmGroup& g = group(x);
  std::vector<std::int64_t> words(static_cast<std::size_t>(s_.size), 0);
  words[static_cast<std::size_t>(s_.rank)] = mine;
  shm_all_reduce(g, words.data(), words.data(), words.size(), DataType::Int64, ReduceOp(ReduceOpKind::Sum),
                 one_shot_bytes());
  return words;
}

void* ShmMedium::alloc_shared(const OpContext& x, const std::vector<std::uint64_t>& sizes,
                              std::shared_ptr<void>* owned) {
  ShmGroup& g = group(x);
  std::size_t total = 0;
  const std::vector<std::size_t> offsets = SharedBuffers::part_offsets(sizes, &total);
  const std::uint64_t serial = g.shared().made() + 1;
  const std::string name = s_.name + "-a" + std::to_string(serial);
  const TimePoint deadline = x.start_tick ? deadline_after(s_.timeout->load()) : x.deadline;
  std::unique_ptr<SharedSegment> seg;
  try {
    seg = std::make_unique<SharedSegment>(name, s_.rank, s_.size, total, total ^ (serial << 48), deadline, s_.aborted,
                                          /*reserve=*/true, s_.creator_pid, s_.creator_name);
  } catch (const Error& e) {
    throw Error(e.kind(), x.where() + e.message());
  }
  // Where each member mapped it.
  std::vector<std::int64_t> bases;
  try {
    bases = words(x, static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(seg->base())));
  } catch (...) {
    seg->abandon();  // a member may never map it: take the name away
    throw;
  }
  // Every member is here, past letting go of what it let go of before.
  g.shared().collect();
  std::vector<std::uint64_t> at(bases.begin(), bases.end());
  if (!owned) return g.shared().add(std::move(seg), std::move(at), offsets, sizes, s_.rank, serial);
  *owned = g.shared().add_owned(std::move(seg), std::move(at), offsets, sizes, s_.rank, serial);
  return owned->get();
}

std::uint64_t ShmMedium::serial_of(const OpContext& x, void* ptr) { return group(x).shared().serial_of(ptr); }

void ShmMedium::free_shared(const OpContext& x, std::uint64_t serial) { group(x).shared().remove(serial); }

ShmMedium::Pick ShmMedium::pick(const OpContext& x, Tuner* t, int preferred, const char* what0, const char* what1,
                                bool settled) {
  Pick p;
  p.algo = preferred;
  if (t && t->covers(x.bytes) && !settled) {
    if (t->chosen(x.bytes) >= 0) p.algo = t->chosen(x.bytes);
  } else if (t && t->covers(x.bytes)) {
    Tuner::Step s = t->next(x.bytes, preferred);
    if (s.agree) {
      std::array<std::int64_t, 2> figures = t->means(x.bytes);
      least(*group_, figures);
      s.algo = t->decide(x.bytes, figures, preferred);
      log_choice(x, figures, s.algo, what0, what1);
    }
    p.algo = s.algo;
    if (s.timed) p.tuner = t;
  }
  p.t0 = std::chrono::steady_clock::now();
  return p;
}

void ShmMedium::done(const Pick& p, std::size_t bytes) {
  if (p.tuner)
    p.tuner->record(
        bytes, p.algo,
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - p.t0).count());
}

void ShmMedium::least(ShmGroup& g, std::array<std::int64_t, 2>& figures) {
  shm_all_reduce(g, figures.data(), figures.data(), figures.size(), DataType::Int64, ReduceOp(ReduceOpKind::Min),
                 one_shot_bytes());
}

void ShmMedium::log_choice(const OpContext& x, const std::array<std::int64_t, 2>& figures, int algo, const char* what0,
                           const char* what1) const {
  if (x.rank == 0)
    TUTTI_LOG(Debug, x.op_name << " up to " << Tuner::class_hi(x.bytes) << " B on " << x.size
                               << " ranks in shared memory: " << what0 << " " << figures[0] / 1000.0 << " us, " << what1
                               << " " << figures[1] / 1000.0
                               << " us (the fastest trial of any member): " << (algo ? what1 : what0));
}

void ShmMedium::cache_signature(const OpContext& x) {
  sig_cache_ = {x.op_name, x.dtype_name, x.redop_name, x.root, op_signature(x)};
}

std::string ShmMedium::describe_context(const void* x) { return static_cast<const OpContext*>(x)->where(); }

// ---- the entries ----------------------------------------------------------------------------

namespace {

void all_reduce_shm(ShmMedium& m, OpContext& x, const OpArgs& a) {
  m.run(
      x, Collective::AllReduce,
      [&](ShmGroup& g, std::size_t one_shot) { shm_all_reduce(g, a.send, a.recv, a.count, a.dtype, a.op, one_shot); },
      [&](ShmGroup& g, bool one_shot) {
        return shm_reduce_direct(g, a.send, a.recv, a.count, a.dtype, a.op, -1, one_shot);
      });
}
void broadcast_shm(ShmMedium& m, OpContext& x, const OpArgs& a) {
  m.run(
      x, Collective::Broadcast, [&](ShmGroup& g, std::size_t) { shm_broadcast(g, a.recv, a.bytes, a.root); },
      [&](ShmGroup& g, bool) { return shm_broadcast_direct(g, a.recv, a.bytes, a.root); });
}
void reduce_shm(ShmMedium& m, OpContext& x, const OpArgs& a) {
  m.run(
      x, Collective::Reduce,
      [&](ShmGroup& g, std::size_t one_shot) {
        shm_reduce(g, a.send, a.recv, a.count, a.dtype, a.op, a.root, one_shot);
      },
      [&](ShmGroup& g, bool one_shot) {
        return shm_reduce_direct(g, a.send, a.recv, a.count, a.dtype, a.op, a.root, one_shot);
      });
}
void all_gather_shm(ShmMedium& m, OpContext& x, const OpArgs& a) {
  // Copies its own block too.
  m.run(
      x, Collective::AllGather, [&](ShmGroup& g, std::size_t) { shm_all_gather(g, a.send, a.out, a.bytes); },
      [&](ShmGroup& g, bool) { return shm_all_gather_direct(g, a.send, a.out, a.bytes); });
}
void reduce_scatter_shm(ShmMedium& m, OpContext& x, const OpArgs& a) {
  m.run(
      x, Collective::ReduceScatter,
      [&](ShmGroup& g, std::size_t) { shm_reduce_scatter(g, a.in, a.recv, a.count, a.dtype, a.op); },
      [&](ShmGroup& g, bool) { return shm_reduce_scatter_direct(g, a.in, a.recv, a.count, a.dtype, a.op); });
}
void all_to_all_shm(ShmMedium& m, OpContext& x, const OpArgs& a) {
  if (a.send_bytes.empty()) {
    // Equal blocks: no per-peer tables.
    m.run(
        x, Collective::AllToAll, [&](ShmGroup& g, std::size_t) { shm_all_to_all(g, a.send, a.recv, a.bytes); },
        [&](ShmGroup& g, bool) { return shm_all_to_all_direct(g, a.send, a.recv, a.bytes); });
  } else {
    shm_all_to_all_v(m.group(x), static_cast<const char*>(a.send), a.send_bytes, a.send_displs,
                     static_cast<char*>(a.recv), a.recv_bytes, a.recv_displs);
  }
}
void gather_shm(ShmMedium& m, OpContext& x, const OpArgs& a) {
  m.run(x, Collective::Gather, [&](ShmGroup& g, std::size_t) { shm_gather(g, a.send, a.out, a.bytes, a.root); });
}
void scatter_shm(ShmMedium& m, OpContext& x, const OpArgs& a) {
  m.run(x, Collective::Scatter, [&](ShmGroup& g, std::size_t) { shm_scatter(g, a.in, a.recv, a.bytes, a.root); });
}
void barrier_shm(ShmMedium& m, OpContext& x, const OpArgs&) { shm_barrier(m.group(x)); }

using C = Collective;
using M = Medium;

const Algorithm kShm[] = {
    {.collective = C::AllReduce,
     .name = "shm",
     .summary = "one-shot (every rank reduces every input) or two-shot (each rank reduces a slice, then every rank "
                "gathers the slices), timed per size; on shared allocations in place",
     .medium = M::SharedMemory,
     .run_shm = all_reduce_shm,
     .fuses_avg_premul = true},
    {.collective = C::Broadcast,
     .name = "shm",
     .summary = "the root publishes chunks in its slots, the others copy them (or read the root's buffer directly)",
     .medium = M::SharedMemory,
     .run_shm = broadcast_shm,
     .fuses_avg_premul = true},
    {.collective = C::Reduce,
     .name = "shm",
     .summary = "as all_reduce in shared memory, the result written at the root only",
     .medium = M::SharedMemory,
     .run_shm = reduce_shm,
     .fuses_avg_premul = true},
    {.collective = C::AllGather,
     .name = "shm",
     .summary = "every rank publishes its block, every rank copies every other's (or reads it directly)",
     .medium = M::SharedMemory,
     .run_shm = all_gather_shm,
     .fuses_avg_premul = true},
    {.collective = C::ReduceScatter,
     .name = "shm",
     .summary = "each rank reduces its own block from every rank's input",
     .medium = M::SharedMemory,
     .run_shm = reduce_scatter_shm,
     .fuses_avg_premul = true},
    {.collective = C::AllToAll,
     .name = "shm",
     .summary = "each rank publishes its blocks for every peer, every rank copies its own (or reads them directly)",
     .medium = M::SharedMemory,
     .run_shm = all_to_all_shm,
     .fuses_avg_premul = true},
    {.collective = C::Gather,
     .name = "shm",
     .summary = "every rank publishes its block, the root copies them",
     .medium = M::SharedMemory,
     .run_shm = gather_shm,
     .fuses_avg_premul = true},
    {.collective = C::Scatter,
     .name = "shm",
     .summary = "the root publishes the blocks, every rank copies its own",
     .medium = M::SharedMemory,
     .run_shm = scatter_shm,
     .fuses_avg_premul = true},
    {.collective = C::Barrier,
     .name = "shm",
     .summary = "a counter in the segment and a futex",
     .medium = M::SharedMemory,
     .run_shm = barrier_shm,
     .fuses_avg_premul = true},
};

}  // namespace

std::span<const Algorithm> shm_algorithms() { return kShm; }

}  // namespace tutti::detail
