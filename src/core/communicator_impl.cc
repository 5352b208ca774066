#include "core/communicator_impl.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "algorithms/algorithms.h"
#include "algorithms/signature.h"
#include "common/log.h"
#include "common/small_vector.h"
#include "common/tags.h"
#include "reduce/reduce.h"

namespace tutti::detail {

namespace {
void fail_for_lost_peer(detail::CommunicatorImpl* c, int world_rank, const std::string& why) {
  auto it = std::find(c->world.begin(), c->world.end(), world_rank);
  if (it == c->world.end()) return;
  const int r = static_cast<int>(it - c->world.begin());
  if (r == c->rank) {
    // Whatever failed it before, later calls say that it was left out.
    c->fail_for_good(ErrorKind::PeerLost,
                     "rank " + std::to_string(r) + ": this rank was declared lost by the others: " + why);
    return;
  }
  std::string msg = "rank " + std::to_string(c->rank) + ": rank " + std::to_string(r) + " of this communicator";
  if (r != world_rank) msg += " (world rank " + std::to_string(world_rank) + ")";
  c->abort(ErrorKind::PeerLost, msg + " is lost: " + why, false);
}
}  // namespace

void JobState::add_comm(detail::CommunicatorImpl* c) {
  std::lock_guard<std::mutex> lock(comms_mu);
  comms.push_back(c);
  for (auto& [peer, why] : lost) fail_for_lost_peer(c, peer, why);
  for (auto& f : failed_comms)
    if (f.comm == c->comm_id) fail_with(c, f.kind, f.why);
}

void JobState::fail_with(detail::CommunicatorImpl* c, ErrorKind kind, const std::string& why) {
  if (kind != ErrorKind::Revoked) {
    c->abort(kind, "rank " + std::to_string(c->rank) + ": " + why, false);
    return;
  }
  // The notice carries the revoking rank's words after "rank <sender>
  // failed: ", and goes on with them unchanged.
  const std::string tail = why.substr(why.find(": ") == std::string::npos ? 0 : why.find(": ") + 2);
  // It names the revoking rank's earlier failure where there was one
  // (Communicator::revoke): passed on whole, and said here unless this
  // rank failed with it already (by that failure's own notice).
  std::string here = tail;
  const std::string revoked = " revoked the communicator", after = " (after: ";
  const std::size_t cut = tail.find(revoked + after);
  ErrorKind earlier_kind;
  std::string earlier;
  if (cut != std::string::npos && tail.back() == ')' && c->root_cause(&earlier_kind, &earlier)) {
    const std::size_t from = cut + revoked.size() + after.size();
    if (earlier.find(tail.substr(from, tail.size() - 1 - from)) != std::string::npos)
      here = tail.substr(0, cut + revoked.size());
  }
  c->revoke("rank " + std::to_string(c->rank) + ": " + here, tail);
}

void JobState::fail_comm(std::uint64_t comm_id, ErrorKind kind, const std::string& why) {
  std::lock_guard<std::mutex> lock(comms_mu);
  failed_comms.push_back({comm_id, kind, why});
  for (detail::CommunicatorImpl* c : comms)
    if (c->comm_id == comm_id) fail_with(c, kind, why);
}

void JobState::remove_comm(detail::CommunicatorImpl* c) {
  std::lock_guard<std::mutex> lock(comms_mu);
  std::erase(comms, c);
}

void JobState::fail_peer(int world_rank, const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(comms_mu);
    lost.emplace_back(world_rank, why);
    for (detail::CommunicatorImpl* c : comms) fail_for_lost_peer(c, world_rank, why);
  }
  std::lock_guard<std::mutex> lock(fault_mu_);
  if (fault_) fault_->poke();
}

FaultService& JobState::fault() {
  std::lock_guard<std::mutex> lock(fault_mu_);
  if (!fault_) fault_ = std::make_unique<FaultService>(*this);
  return *fault_;
}

JobState::~JobState() {
  {
    std::unique_ptr<FaultService> f;
    {
      std::lock_guard<std::mutex> lock(fault_mu_);
      f = std::move(fault_);
    }
  }
  // The transport closes peer connections in order; the store server goes last.
  transport.reset();
  store.reset();
  server.reset();
}

}  // namespace tutti::detail

namespace tutti {

using detail::Clock;
using detail::Completion;
using detail::OpContext;
using detail::Task;

detail::CommunicatorImpl::~CommunicatorImpl() {
  if (job) job->remove_comm(this);
  detail::unregister_trace_source(this);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  if (aborted_ && shm_medium_) shm_medium_->abandon();
  for (const auto& [p, a] : plain_shared_) ::munmap(p, a.bytes);
  // Receives still posted on this communicator must not outlive it (their
  // buffers may be freed next), nor may its late messages be kept forever.
  if (job && job->transport)
    job->transport->abort_comm(comm_id, ErrorKind::Aborted,
                               "rank " + std::to_string(rank) + ": the communicator was destroyed");
}

void detail::CommunicatorImpl::cross_check(OpContext& ctx) {
  if (size == 1 || ctx.shm) return;  // shared memory checks every round
  // Steps far above any algorithm's, so the exchange never meets its messages.
  constexpr std::uint32_t kCheckStep = detail::kCrossCheckStep;
  const std::uint64_t mine[2] = {detail::op_signature(ctx), detail::op_signature_bytes(ctx)};
  // The exchange's own messages carry no signature, so that they always
  // meet (and never clash with the operation's own messages of faster
  // ranks), and the comparison below names both operations in full.
  struct Restore {
    detail::OpContext& c;
    ~Restore() { c.sign_messages = true; }
  } restore{ctx};
  ctx.sign_messages = false;
  std::vector<std::uint64_t> theirs(2 * static_cast<std::size_t>(size));
  std::vector<detail::Pending> pending;
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    pending.push_back(ctx.irecv(p, kCheckStep, &theirs[2 * p], sizeof mine));
  }
  for (int p = 0; p < size; ++p)
    if (p != rank) pending.push_back(ctx.isend(p, kCheckStep, mine, sizeof mine));
  ctx.wait_all(pending);
  for (int p = 0; p < size; ++p) {
    if (p == rank) continue;
    const std::uint64_t sig = theirs[2 * p], bytes = theirs[2 * p + 1];
    const bool any = bytes == detail::ShmGroup::kAnyBytes || mine[1] == detail::ShmGroup::kAnyBytes;
    if (sig != mine[0] || (!any && bytes != mine[1]))
      ctx.fail(ErrorKind::Mismatch, ctx.where() + "rank " + std::to_string(p) + " called " +
                                        detail::describe_signature(sig, bytes) +
                                        " at the same point, where this rank called " +
                                        detail::describe_signature(mine[0], mine[1]) + " (TUTTI_DEBUG=detail)");
  }
}

ErrorKind detail::CommunicatorImpl::later_kind() const {
  // Later calls fail with the cause's kind (Aborted after abort() on purpose).
  return abort_kind_;
}

std::optional<Error> detail::CommunicatorImpl::error() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!aborted_) return std::nullopt;
  return Error(later_kind(),
               "rank " + std::to_string(rank) + ": the communicator was aborted earlier: " + abort_reason_);
}

void detail::CommunicatorImpl::refuse_forked_child() const {
  throw Error(ErrorKind::InvalidArgument,
              "rank " + std::to_string(rank) + ": this communicator belongs to process " + std::to_string(owner_pid) +
                  "; process " + std::to_string(::getpid()) +
                  " is a child forked from it and cannot use it (each process makes its own communicator)");
}

void detail::CommunicatorImpl::throw_if_aborted() {
  if (generation != detail::fork_generation()) refuse_forked_child();
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_)
    throw Error(later_kind(),
                "rank " + std::to_string(rank) + ": the communicator was aborted earlier: " + abort_reason_);
}

bool detail::CommunicatorImpl::root_cause(ErrorKind* kind, std::string* reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!aborted_) return false;
  *kind = abort_kind_;
  *reason = abort_reason_;
  return true;
}

void detail::CommunicatorImpl::abort(ErrorKind kind, const std::string& message, bool tell_members) {
  std::deque<Task> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_) return;
    aborted_ = true;
    busy_.fetch_or(kAborted);
    aborted_flag.store(true);
    abort_kind_ = kind;
    abort_reason_ = message;
    dropped.swap(queue_);
    busy_.fetch_and(~kQueued);
  }
  TUTTI_LOG(Warn, "communicator aborted: " << message);
  job->transport->abort_comm(comm_id, kind, message);
  // Two-level operations wait in the children: they fail with the same cause.
  if (detail::Hierarchy* h = hier_published_.load(std::memory_order_acquire)) {
    h->local.impl_->abort(kind, message, false);
    h->cross.impl_->abort(kind, message, false);
  }
  // Every member waiting in shared memory learns the cause (not an abort on purpose).
  if (kind != ErrorKind::Aborted && shm_medium_) shm_medium_->broadcast_failure(kind, message);
  if (kind != ErrorKind::Aborted && tell_members) job->transport->notify_comm_failed(comm_id, world, kind, message);
  for (Task& t : dropped) recorder.end(t.trace, false, "queued when the communicator was aborted: " + message);
  const ErrorKind later = kind;
  for (Task& t : dropped)
    t.done->fail(later, "rank " + std::to_string(rank) + ": " + t.ctx.describe() +
                            " was queued when the communicator was aborted: " + message);
  cv_.notify_all();
  // An operation failed (not an abort or a revocation on purpose): leave the flight record.
  if (kind != ErrorKind::Aborted && kind != ErrorKind::Revoked) detail::dump_traces(message);
}

bool detail::CommunicatorImpl::begin_inline() {
  if (generation != detail::fork_generation()) refuse_forked_child();
  std::uint32_t idle = 0;
  if (busy_.compare_exchange_strong(idle, kRunning, std::memory_order_acquire)) return true;
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_)
    throw Error(later_kind(),
                "rank " + std::to_string(rank) + ": the communicator was aborted earlier: " + abort_reason_);
  return false;
}

void detail::CommunicatorImpl::end_inline() {
  // The worker waits (under mu_) only for queued tasks: wake it if any.
  if ((busy_.fetch_and(~kRunning, std::memory_order_acq_rel) & kQueued) == 0) return;
  { std::lock_guard<std::mutex> lock(mu_); }
  cv_.notify_all();
}

void detail::CommunicatorImpl::fail_inline(const OpContext& ctx, std::uint64_t trace) {
  try {
    throw;
  } catch (const Error& e) {
    recorder.end(trace, false, e.message());
    if (e.kind() != ErrorKind::InvalidArgument && e.kind() != ErrorKind::Aborted) abort(e.kind(), e.message());
    // Woken by an abort with a cause (a lost peer, another op's failure):
    // report that cause.
    ErrorKind kind;
    std::string reason;
    if (e.kind() == ErrorKind::Aborted && root_cause(&kind, &reason)) throw Error(kind, ctx.where() + reason);
    throw;
  } catch (const std::exception& e) {
    std::string msg = ctx.where() + "internal error: " + e.what();
    recorder.end(trace, false, msg);
    abort(ErrorKind::Internal, msg);
    throw Error(ErrorKind::Internal, msg);
  }
}

// Every member's `mine`, by rank: through the segment in shared memory, else
// an all_gather over the network under the operation's context.
std::vector<std::int64_t> detail::CommunicatorImpl::member_words(OpContext& x, std::int64_t mine) {
  if (size > 1 && shares_memory()) return shm_medium_->words(x, mine);
  std::vector<std::int64_t> words(size, 0);
  words[rank] = mine;
  if (size > 1) {
    detail::SmallVector<detail::Block> out;
    for (std::int64_t& w : words) out.push_back(detail::Block{reinterpret_cast<char*>(&w), 1});
    detail::all_gather_ring(x, out, sizeof(std::int64_t));
  }
  return words;
}

void* detail::CommunicatorImpl::alloc_shared(OpContext& x, std::size_t bytes, std::shared_ptr<void>* owned) {
  // Every member's size (so that a request too large fails on every rank),
  // then, in shared memory, one segment with every member's part.
  const std::vector<std::int64_t> words = member_words(x, static_cast<std::int64_t>(bytes));
  for (int p = 0; p < size; ++p)
    if (words[p] < 0 || static_cast<std::uint64_t>(words[p]) > detail::SharedBuffers::kMaxPartBytes)
      throw Error(ErrorKind::InvalidArgument, x.where() + "alloc_shared: rank " + std::to_string(p) + " asks for " +
                                                  std::to_string(static_cast<std::uint64_t>(words[p])) +
                                                  " bytes, more than the " +
                                                  std::to_string(detail::SharedBuffers::kMaxPartBytes) + " a rank may");
  if (!shares_memory() || size == 1) {
    void* p =
        ::mmap(nullptr, std::max<std::size_t>(bytes, 1), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
      throw Error(ErrorKind::Internal,
                  x.where() + "cannot allocate " + std::to_string(bytes) + " bytes: " + std::strerror(errno));
    if (owned) {
      *owned = std::shared_ptr<void>(p, [len = std::max<std::size_t>(bytes, 1)](void* q) { ::munmap(q, len); });
      return p;
    }
    plain_shared_[p] = PlainShared{std::max<std::size_t>(bytes, 1), ++plain_made_};
    return p;
  }
  return shm_medium_->alloc_shared(x, std::vector<std::uint64_t>(words.begin(), words.end()), owned);
}

void detail::CommunicatorImpl::free_shared(OpContext& x, void* ptr) {
  const bool segments = shares_memory() && size > 1;
  const auto plain = plain_shared_.find(ptr);
  // Every member names the same allocation (its number on this
  // communicator, 0 for none), or all fail.
  const std::uint64_t serial = segments                       ? shm_medium_->serial_of(x, ptr)
                               : plain != plain_shared_.end() ? plain->second.serial
                                                              : 0;
  const std::vector<std::int64_t> words = member_words(x, static_cast<std::int64_t>(serial));
  const bool same = std::all_of(words.begin(), words.end(), [&](std::int64_t w) { return w == words[0]; });
  if (!same || words[0] == 0) {
    if (size == 1)
      throw Error(ErrorKind::InvalidArgument, x.where() + "free_shared: this pointer did not come from alloc_shared");
    std::string each;
    for (int p = 0; p < size; ++p)
      each += (p ? ", rank " : "rank ") + std::to_string(p) +
              (words[p] == 0 ? " a pointer alloc_shared did not return" : " allocation #" + std::to_string(words[p]));
    throw Error(ErrorKind::InvalidArgument,
                x.where() + "free_shared: the ranks must free what one alloc_shared call returned them: " + each);
  }
  if (segments) {
    shm_medium_->free_shared(x, serial);
  } else {
    ::munmap(plain->first, plain->second.bytes);
    plain_shared_.erase(plain);
  }
}

void detail::CommunicatorImpl::run_plan_lowered(OpContext& x, const detail::OpArgs& a, const detail::Plan& p) {
  detail::OpArgs sum = a;
  sum.op = ReduceOp(ReduceOpKind::Sum);
  const detail::Collective c = p.algorithm->collective;
  std::vector<char> scaled;             // PremulSum's scaled input (reduce, reduce_scatter)
  detail::SmallVector<const char*> in;  // reduce_scatter's scaled blocks
  if (a.op.kind == ReduceOpKind::PremulSum) {
    switch (c) {
      case detail::Collective::AllReduce:
        // Into the result buffer, which the algorithm then reduces in place.
        detail::scale(a.recv, a.send, a.count, a.dtype, a.op.scalar);
        sum.send = a.recv;
        break;
      case detail::Collective::Reduce:
        scaled.resize(a.bytes);
        detail::scale(scaled.data(), a.send, a.count, a.dtype, a.op.scalar);
        sum.send = scaled.data();
        break;
      case detail::Collective::ReduceScatter:
        scaled.resize(a.bytes * a.in.size());
        for (std::size_t b = 0; b < a.in.size(); ++b) {
          detail::scale(scaled.data() + b * a.bytes, a.in[b], a.count, a.dtype, a.op.scalar);
          in.push_back(scaled.data() + b * a.bytes);
        }
        sum.in = in;
        break;
      default:
        throw Error(ErrorKind::Internal, x.where() + "PremulSum reached " + detail::collective_name(c));
    }
  }
  run_medium(x, sum, p);
  // reduce's result is the root's alone.
  if (a.op.kind == ReduceOpKind::Avg && (c != detail::Collective::Reduce || x.rank == a.root))
    detail::divide_by(a.recv, a.count, a.dtype, size);
}

void detail::CommunicatorImpl::reproducible_sum(OpContext& x, const detail::OpArgs& a, detail::Collective which) {
  using detail::Collective;
  const std::size_t n = static_cast<std::size_t>(size), me = static_cast<std::size_t>(rank);
  const std::size_t es = dtype_size(a.dtype), count = a.count;
  if (count == 0) return;
  const bool avg = a.op.kind == ReduceOpKind::Avg;
  const detail::Plan plan = planner.plan(which, a.bytes);
  if (size == 2 && !avg) {
    // Two contributions: every algorithm adds them in one IEEE addition,
    // commutative and rounded once, which is the exact sum rounded once.
    // The 16-bit types add in float32 and round to their own precision:
    // where the exponents lie within 15 (bfloat16; float16: 13) of each
    // other float32 holds the sum exactly, and further apart the smaller
    // is too small to bring the sum near a midpoint of the type's grid, so
    // that the second rounding is the only one that counts
    // (ReproSum.TwoSixteenBitContributionsTakeTheUsualSum). Avg divides a
    // rounded sum.
    x.algo = plan.algorithm->name;
    run_plan(x, a, plan);
    x.set_algo("reproducible_pair");
    return;
  }
  if (plan.algorithm->medium == detail::Medium::SharedMemory) {
    // There every input of an element meets in one reduce_many call: the
    // collective runs as it is, with the reproducible sum as its kernel.
    // Its signature says so: a member not in the mode meets a mismatch.
    detail::OpArgs r = a;
    r.op = ReduceOp(avg ? detail::kReproAvg : detail::kReproSum);
    x.redop_name = avg ? "avg (reproducible)" : "sum (reproducible)";
    x.sig_cache = 0;
    x.algo = plan.algorithm->name;
    run_plan(x, r, plan);
    x.set_algo("reproducible_shm");
    return;
  }
  // Each phase is a collective of its own, under a sequence number the
  // operation reserved, with its own signature, and the algorithm the
  // planner picks (or TUTTI_ALGO forces, or the tuner times) for it.
  const std::uint64_t seq0 = x.seq;
  const char *const op0 = x.op_name, *const dtype0 = x.dtype_name, *const redop0 = x.redop_name;
  const std::size_t bytes0 = x.bytes;
  const int root0 = x.root;
  struct Restore {
    OpContext& x;
    std::uint64_t seq;
    const char *op, *dtype, *redop;
    std::size_t bytes;
    int root;
    ~Restore() {
      x.seq = seq;
      x.op_name = op;
      x.dtype_name = dtype;
      x.redop_name = redop;
      x.bytes = bytes;
      x.root = root;
      x.sig_cache = 0;
      x.set_algo("reproducible");
    }
  } restore{x, seq0, op0, dtype0, redop0, bytes0, root0};
  int k = 0;
  const auto phase = [&](const char* name, Collective c, detail::OpArgs args, std::size_t plan_bytes) {
    x.seq = seq0 + static_cast<std::uint64_t>(++k);
    x.op_name = name;
    x.bytes = plan_bytes;
    x.redop_name = "reproducible";
    x.root = args.root;
    x.sig_cache = 0;
    detail::Plan p = planner.plan(c, plan_bytes);
    detail::SmallVector<std::size_t> sb, sd;
    if (c == Collective::AllToAll && p.algorithm->medium == detail::Medium::Network &&
        !p.algorithm->equal_blocks_only) {
      // Pairwise runs the per-peer form.
      for (std::size_t i = 0; i < n; ++i) {
        sb.push_back(args.bytes);
        sd.push_back(i * args.bytes);
      }
      args.send_bytes = args.recv_bytes = sb;
      args.send_displs = args.recv_displs = sd;
      args.send_extent = n * args.bytes;
    }
    x.algo = p.algorithm->name;
    run_plan(x, args, p);
  };
  // Blocks of n buffers, for the phases' lists.
  const auto blocks_of = [&](char* base, std::size_t block) {
    detail::SmallVector<char*> v;
    for (std::size_t i = 0; i < n; ++i) v.push_back(base + i * block);
    return v;
  };
  detail::SmallVector<const void*> ins;
  if (which == Collective::ReduceScatter) {
    // Block r of every rank's input to rank r, then its sum.
    const std::size_t block = count * es;
    repro_in.resize(n * block);
    const bool contiguous = [&] {
      for (std::size_t i = 0; i < n; ++i)
        if (a.in[i] != a.in[0] + i * block) return false;
      return true;
    }();
    const char* send = a.in[0];
    if (!contiguous) {
      repro_stage.resize(n * block);
      for (std::size_t i = 0; i < n; ++i) std::memcpy(repro_stage.data() + i * block, a.in[i], block);
      send = repro_stage.data();
    }
    phase("all_to_all", Collective::AllToAll,
          {.send = send, .recv = repro_in.data(), .count = count, .bytes = block, .dtype = a.dtype}, block);
    for (std::size_t i = 0; i < n; ++i) ins.push_back(repro_in.data() + i * block);
    detail::repro_sum(a.recv, ins.data(), size, count, a.dtype, avg);
    return;
  }
  const bool reduce = which == Collective::Reduce;
  const bool wants = !reduce || rank == a.root;
  if (count * es * n <= kReproGatherBytes) {
    // Small: every contribution of every element to each rank that wants
    // the result (all_gather, or gather to the root), which sums them all.
    const std::size_t block = count * es;
    repro_in.resize(n * block);
    const auto out = blocks_of(repro_in.data(), block);
    if (reduce) {
      phase("gather", Collective::Gather,
            {.send = a.send, .count = count, .bytes = block, .dtype = a.dtype, .root = a.root, .out = out}, block);
      if (wants && repro_in.data() + me * block != a.send) std::memcpy(repro_in.data() + me * block, a.send, block);
    } else {
      phase("all_gather", Collective::AllGather,
            {.send = a.send, .count = count, .bytes = block, .dtype = a.dtype, .out = out}, block);
    }
    if (!wants) return;
    for (std::size_t i = 0; i < n; ++i) ins.push_back(repro_in.data() + i * block);
    detail::repro_sum(a.recv, ins.data(), size, count, a.dtype, avg);
    return;
  }
  // Large: slice r of every rank's input to rank r (all_to_all), its sum,
  // and the summed slices to every rank (all_gather) or to the root
  // (gather). Slices of ceil(count / n) elements; the last ones padded.
  const std::size_t slice = (count + n - 1) / n, sb = slice * es;
  const bool even = slice * n == count;
  const char* send = static_cast<const char*>(a.send);
  if (!even) {
    repro_stage.assign(n * sb, 0);
    std::memcpy(repro_stage.data(), a.send, count * es);
    send = repro_stage.data();
  }
  repro_in.resize(n * sb);
  phase("all_to_all", Collective::AllToAll,
        {.send = send, .recv = repro_in.data(), .count = slice, .bytes = sb, .dtype = a.dtype}, sb);
  // The results: straight into the output where slices fill it exactly.
  char* const result = even && wants ? static_cast<char*>(a.recv) : (repro_out.resize(n * sb), repro_out.data());
  for (std::size_t i = 0; i < n; ++i) ins.push_back(repro_in.data() + i * sb);
  detail::repro_sum(result + me * sb, ins.data(), size, slice, a.dtype, avg);
  const auto out = blocks_of(result, sb);
  if (reduce) {
    phase("gather", Collective::Gather,
          {.send = result + me * sb, .count = slice, .bytes = sb, .dtype = a.dtype, .root = a.root, .out = out}, sb);
  } else {
    phase("all_gather", Collective::AllGather,
          {.send = result + me * sb, .count = slice, .bytes = sb, .dtype = a.dtype, .out = out}, sb);
  }
  if (wants && result != a.recv) std::memcpy(a.recv, result, count * es);
}

void detail::CommunicatorImpl::set_topology(int copies) {
  std::vector<int> per_host;  // members per host index
  for (int w : world) {
    const auto h = static_cast<std::size_t>(job->host_of[w]);
    if (per_host.size() <= h) per_host.resize(h + 1, 0);
    ++per_host[h];
  }
  detail::Shape shape;
  shape.ranks = size;
  shape.hosts = static_cast<int>(std::count_if(per_host.begin(), per_host.end(), [](int c) { return c > 0; }));
  shape.ranks_per_host = per_host.empty() ? 1 : *std::max_element(per_host.begin(), per_host.end());
  shape.single_host = shape.hosts <= 1;
  shape.two_level = !shape.single_host && detail::hierarchy_applies(world, job->host_of);
  shape.copies = copies;
  single_host = shape.single_host;
  two_level = shape.two_level;
  planner.configure(job->config, shape);
  shm_medium_.reset();
  if (single_host) {
    // Member 0 creates the segments; the others wait for it.
    const std::size_t creator = static_cast<std::size_t>(world[0]);
    detail::ShmMedium::Setup m;
    char ids[40];
    std::snprintf(ids, sizeof ids, "-%016llx-%016llx", static_cast<unsigned long long>(job->job_id),
                  static_cast<unsigned long long>(comm_id));
    m.name = "/" + job->config.shm_prefix + ids;
    m.rank = rank;
    m.size = size;
    for (int w : world) m.pids.push_back(static_cast<std::size_t>(w) < job->pid_of.size() ? job->pid_of[w] : 0);
    m.creator_pid = creator < job->pid_of.size() ? job->pid_of[creator] : 0;
    m.creator_name = "rank " + std::to_string(world[0]);
    m.config = &job->config;
    m.thresholds = planner.thresholds().shm;
    m.aborted = &aborted_flag;
    m.timeout = &timeout;
    shm_medium_ = std::make_unique<detail::ShmMedium>(std::move(m));
  }
}

void detail::CommunicatorImpl::run_task(Task& t) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_) {
      recorder.end(t.trace, false, "the communicator was aborted earlier: " + abort_reason_);
      t.done->fail(later_kind(), "rank " + std::to_string(rank) + ": " + t.ctx.describe() +
                                     ": the communicator was aborted earlier: " + abort_reason_);
      return;
    }
  }
  t.ctx.deadline = detail::deadline_after(timeout.load());
  t.ctx.recorder = &recorder;
  t.ctx.record_algo = &detail::FlightRecorder::record_algo;
  t.ctx.trace = t.trace;
  recorder.running(t.trace);
  try {
    if (job->config.debug_detail) cross_check(t.ctx);
    t.body(t.ctx);
    if (t.ctx.shm && shm_medium_) shm_medium_->check_remote_failure();  // (see ShmGroup::check_remote_failure)
    scratch.trim();
    recorder.end(t.trace, true);
    t.done->complete();
  } catch (const Error& e) {
    recorder.end(t.trace, false, e.message());
    if (e.kind() != ErrorKind::InvalidArgument && e.kind() != ErrorKind::Aborted) abort(e.kind(), e.message());
    ErrorKind kind;
    std::string reason;
    if (e.kind() == ErrorKind::Aborted && root_cause(&kind, &reason)) {
      t.done->fail(kind, t.ctx.where() + reason);
    } else {
      t.done->fail(e.kind(), e.message());
    }
  } catch (const std::exception& e) {
    std::string msg = t.ctx.where() + "internal error: " + e.what();
    recorder.end(t.trace, false, msg);
    abort(ErrorKind::Internal, msg);
    t.done->fail(ErrorKind::Internal, msg);
  }
}

Work detail::CommunicatorImpl::submit(OpContext ctx, std::function<void(OpContext&)> body, bool blocking) {
  throw_if_aborted();
  Task t{std::move(ctx), std::move(body), std::make_shared<Completion>()};
  t.trace = recorder.begin(t.ctx, detail::FlightRecorder::State::Queued);
  bool inline_run = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::uint32_t idle = 0;
    if (blocking && busy_.compare_exchange_strong(idle, kRunning, std::memory_order_acquire)) {
      inline_run = true;
    } else {
      // No deadline on the Work itself: the op enforces its own once it runs
      // (every wait in an algorithm is bounded), and time spent queued behind
      // earlier ops must not count against it.
      queue_.push_back(t);
      busy_.fetch_or(kQueued);
      if (!worker_.joinable()) worker_ = std::thread([this] { worker_loop(); });
    }
  }
  if (inline_run) {
    run_task(t);
    end_inline();
    t.done->rethrow_if_failed();
    return Work();
  }
  cv_.notify_all();
  Work w(t.done);
  if (blocking) {
    w.wait();
    return Work();
  }
  return w;
}

void detail::CommunicatorImpl::worker_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return (stopping_ && queue_.empty()) || (!queue_.empty() && !(busy_.load() & kRunning)); });
    if (queue_.empty()) return;
    // With tasks queued no caller claims the communicator (kQueued is set):
    // only this thread, under mu_, may.
    busy_.fetch_or(kRunning);
    Task t = std::move(queue_.front());
    queue_.pop_front();
    if (queue_.empty()) busy_.fetch_and(~kQueued);
    lock.unlock();
    run_task(t);
    lock.lock();
    busy_.fetch_and(~kRunning);
    if (queue_.empty()) cv_.notify_all();  // quiesce() may wait for this
  }
}

void detail::CommunicatorImpl::quiesce() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return aborted_ || (queue_.empty() && !(busy_.load() & kRunning)); });
}

void detail::CommunicatorImpl::fail_for_good(ErrorKind kind, const std::string& message) {
  abort(kind, message, false);
  // Failed earlier: later calls now report this, after the first cause.
  std::lock_guard<std::mutex> lock(mu_);
  if (abort_kind_ != kind) {
    abort_reason_ = message + " (after: " + abort_reason_ + ")";
    abort_kind_ = kind;
  }
}

void detail::CommunicatorImpl::revoke(const std::string& message, const std::string& wire) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (revoked_) return;
    revoked_ = true;
  }
  fail_for_good(ErrorKind::Revoked, message);
  // Every member learns it within about log2(p) hops: each rank that learns
  // it passes it on, once, to the members it is connected to and to its
  // neighbours in a ring and a hypercube of the members (rank XOR 2^k),
  // connecting to them if need be.
  std::vector<int> near;
  auto add = [&](int r) {
    if (r >= 0 && r < size && r != rank) near.push_back(world[static_cast<std::size_t>(r)]);
  };
  add((rank + 1) % size);
  add((rank + size - 1) % size);
  for (int bit = 1; bit < size; bit <<= 1) add(rank ^ bit);
  job->transport->notify_comm_failed(comm_id, world, ErrorKind::Revoked, wire);
  job->transport->notify_comm_failed(comm_id, near, ErrorKind::Revoked, wire, true);
}

}  // namespace tutti
