#pragma once
// The shared state behind a Communicator handle.
//
// Thread model. Operations are numbered (seq) in the caller's thread at
// submission, in program order. A blocking call on an idle communicator runs
// its algorithm right in the caller's thread. Asynchronous calls (and
// blocking calls issued while async ones are still queued, to keep order)
// go to this communicator's worker thread, started on first use, which runs
// them one at a time in seq order and completes their Works. Socket I/O
// happens on the transport's progress thread (see tcp_transport.h).
//
// Fail-stop. The first error of an operation (other than InvalidArgument,
// which is raised before anything is sent) aborts the communicator: the
// transport fails every pending request of it with the same root cause, and
// every later call fails at once with Error(Aborted) naming that cause.

#include <unistd.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "algorithms/context.h"
#include "algorithms/signature.h"
#include "common/config.h"
#include "common/fork.h"
#include "core/fault.h"
#include "media/shm_medium.h"
#include "media/two_level.h"
#include "plan/planner.h"
#include "reduce/reproducible.h"
#include "trace/flight_recorder.h"
#include "transport/transport.h"
#include "tutti/communicator.h"

namespace tutti::detail {

// What every communicator of one job shares: configuration, store, the
// embedded store server (rank 0) and the transport.
struct JobState {
  Config config;
  std::shared_ptr<Store> store;
  std::unique_ptr<TcpStoreServer> server;
  std::shared_ptr<Transport> transport;
  std::uint64_t job_id = 0;
  // host_of[world rank]: a small id per distinct host.
  std::vector<int> host_of;
  // pid_of[world rank]: its process (meaningful on the same host).
  std::vector<int> pid_of;
  // LOCAL_RANK / LOCAL_WORLD_SIZE from the launcher, or -1.
  int env_local_rank = -1;
  int env_local_size = -1;
  // Every communicator of the job in this process, so that a lost peer
  // fails all that include it (fail_peer, called by the transport). Plain
  // pointers: a communicator leaves the list first thing when destroyed, so
  // fail_peer never owns one (and never runs a destructor on a transport
  // thread).
  std::mutex comms_mu;
  std::vector<detail::CommunicatorImpl*> comms;
  std::vector<std::pair<int, std::string>> lost;  // peers lost so far (a later communicator fails at once)
  void add_comm(detail::CommunicatorImpl* c);
  void remove_comm(detail::CommunicatorImpl* c);
  void fail_peer(int world_rank, const std::string& why);
  // Another member reports that communicator `comm_id` failed there.
  void fail_comm(std::uint64_t comm_id, ErrorKind kind, const std::string& why);
  // Fails `c` with what a member reported (comms_mu held).
  void fail_with(detail::CommunicatorImpl* c, ErrorKind kind, const std::string& why);
  struct CommFailure {
    std::uint64_t comm;
    ErrorKind kind;
    std::string why;
  };
  std::vector<CommFailure> failed_comms;  // for communicators made later
  // Agreements (core/fault.h): the service starts at the first.
  FaultService& fault();
  ~JobState();

 private:
  std::mutex fault_mu_;
  std::unique_ptr<FaultService> fault_;
};

// One queued operation.
struct Task {
  OpContext ctx;  // transport, ids and the description are filled at submit
  std::function<void(OpContext&)> body;
  std::shared_ptr<Completion> done;
  std::uint64_t trace = 0;  // its flight-recorder entry
};

}  // namespace tutti::detail

namespace tutti {

// The implementation of Communicator (include/tutti/communicator.h), and
// not part of the API: hidden in libtutti.so like all of tutti::detail.
struct detail::CommunicatorImpl : std::enable_shared_from_this<detail::CommunicatorImpl>, detail::TraceSource {
  std::shared_ptr<detail::JobState> job;
  std::uint64_t comm_id = 0;
  int rank = 0;
  int size = 1;
  std::vector<int> world;  // comm rank -> world rank
  // The process that made it: a forked child may not use it (common/fork.h).
  const unsigned generation = detail::fork_generation();
  const int owner_pid = static_cast<int>(::getpid());
  std::shared_ptr<const std::vector<int>> world_to_comm;  // world rank -> comm rank or -1
  // Read by the worker thread, set by the user's: atomic.
  std::atomic<std::chrono::milliseconds> timeout{std::chrono::minutes(5)};

  std::uint64_t next_seq = 1;
  // Communicator::set_reproducible, read where operations are submitted.
  std::atomic<bool> reproducible{false};
  // Point-to-point ops are numbered apart (send #k, recv #k) for messages;
  // they do not take collective sequence numbers.
  std::uint64_t sends_posted = 0;
  std::uint64_t recvs_posted = 0;
  std::uint64_t groups_created = 0;

  ~CommunicatorImpl() override;

  // What algorithms work in, kept between operations (trimmed after each).
  detail::Scratch scratch;
  // The last operations (TUTTI_TRACE_BUFFER of them), for the flight recorder.
  detail::FlightRecorder recorder{0};
  std::string trace_json() const override { return recorder.json(comm_id, rank, size, world); }

  // Every member on one host: shared-memory collectives apply.
  bool single_host = false;
  // Spans hosts with the same number (>= 2) of members on each: every
  // collective but the barrier (all_to_all up to 8 KiB a peer) runs in two levels
  // (media/two_level.h), through children made at the first such operation.
  bool two_level = false;
  detail::Hierarchy& hierarchy();
  // What each operation runs (plan/planner.h); set_topology() configures
  // it, and single_host and two_level, from the job's host map and `world`;
  // `copies`: communicators that run the same operation over each host's
  // link at once (Shape::copies).
  detail::Planner planner;
  void set_topology(int copies = 1);
  // The shared-memory medium (media/shm_medium.h), made by set_topology()
  // for a communicator on one host (it maps nothing until its first
  // operation), else null; it does not change once operations run.
  detail::ShmMedium* shm_medium() const { return shm_medium_.get(); }

  // A context for the next operation (takes its sequence number).
  detail::OpContext make_context(const char* op_name, std::size_t bytes) {
    // Before anything is planned: planning may take locks that the
    // parent's threads held at the fork.
    if (generation != detail::fork_generation()) refuse_forked_child();
    detail::OpContext c;
    c.transport = job->transport.get();
    c.comm_id = comm_id;
    c.seq = next_seq++;
    c.rank = rank;
    c.size = size;
    c.world = &world;
    c.chunk_bytes = planner.chunk_bytes();
    c.small_pipe_bytes = planner.small_pipe_bytes();
    c.small_pipe_max_bytes = planner.thresholds().network.small_pipe_max_bytes;
    c.scratch = &scratch;
    c.op_name = op_name;
    c.bytes = bytes;
    return c;
  }
  // Runs the planned algorithm against its medium's context. Avg and
  // PremulSum are applied here, once, as Sum with a step before (PremulSum
  // scales the input) and after (Avg divides the result), for every
  // algorithm that does not fuse them into its own passes
  // (Algorithm::fuses_avg_premul).
  [[gnu::always_inline]] void run_plan(detail::OpContext& x, const detail::OpArgs& a, const detail::Plan& p) {
    const detail::Algorithm& alg = *p.algorithm;
    if ((a.op.kind == ReduceOpKind::Avg || a.op.kind == ReduceOpKind::PremulSum) && !alg.fuses_avg_premul)
        [[unlikely]] {
      run_plan_lowered(x, a, p);
      return;
    }
    run_medium(x, a, p);
  }
  [[gnu::always_inline]] void run_medium(detail::OpContext& x, const detail::OpArgs& a, const detail::Plan& p) {
    const detail::Algorithm& alg = *p.algorithm;
    switch (alg.medium) {
      case detail::Medium::SharedMemory:
        alg.run_shm(*shm_medium_, x, a);
        return;
      case detail::Medium::TwoLevel:
        alg.run_two_level(hierarchy(), x, a);
        return;
      case detail::Medium::Network:
        alg.run_network(x, a, p);
        return;
    }
  }
  void run_plan_lowered(detail::OpContext& x, const detail::OpArgs& a, const detail::Plan& p);
  // Reproducible sums (reduce/reproducible.h): whether an operation of
  // (dtype, op) runs them now, and the operation that does: `which` is
  // AllReduce, Reduce or ReduceScatter. Its phases (an all_to_all of
  // slices, or an all_gather or gather where the message is small; then the
  // results' all_gather or gather) are collectives of their own under
  // sequence numbers the operation reserves.
  bool reproducible_for(DataType dtype, const ReduceOp& op) const {
    return reproducible.load(std::memory_order_relaxed) && size > 1 && detail::reproducible_covers(dtype, op.kind);
  }
  static constexpr int kReproPhases = 2;
  // Up to this many bytes of every member's contributions together, each
  // rank that wants the result gathers all of them (one phase).
  static constexpr std::size_t kReproGatherBytes = 64 << 10;
  // `args()` gives the operation's arguments (it holds what they point to).
  template <class MakeArgs>
  Work run_reproducible(detail::OpContext c, detail::Collective which, MakeArgs args, bool blocking) {
    c.algo = "reproducible";
    c.shm = false;  // its phases may run in any medium: a deadline, not a start tick
    next_seq += kReproPhases;
    return run(
        std::move(c), [this, which, args](detail::OpContext& x) { reproducible_sum(x, args(), which); }, blocking);
  }
  void reproducible_sum(detail::OpContext& x, const detail::OpArgs& a, detail::Collective which);
  // Its buffers, kept between operations: every contribution of its
  // elements, a padded or contiguous copy of the input, the results.
  std::vector<char> repro_in, repro_stage, repro_out;
  // The plan of an operation (plan/planner.h), named in its context.
  detail::Plan plan(detail::OpContext& c, detail::Collective collective, std::size_t bytes) const {
    detail::Plan p = planner.plan(collective, bytes);
    c.algo = p.algorithm->name;
    c.shm = p.algorithm->medium == detail::Medium::SharedMemory;
    return p;
  }

  // Runs an operation. Blocking on an idle communicator: right here in the
  // caller's thread, no allocation, no hand-off. Otherwise through submit().
  template <class F>
  Work run(detail::OpContext ctx, F&& body, bool blocking) {
    if (blocking && begin_inline()) {
      const std::int64_t now = detail::ticks();
      // Shared-memory waits work out the deadline from the start tick only
      // if they have to sleep (ShmGroup::set_start): no clock read here.
      if (ctx.shm && !job->config.debug_detail) {
        ctx.start_tick = now;
      } else {
        ctx.deadline = detail::deadline_after(timeout.load());
      }
      const std::uint64_t trace = recorder.begin(ctx, detail::FlightRecorder::State::Running, now);
      ctx.recorder = &recorder;
      ctx.record_algo = &detail::FlightRecorder::record_algo;
      ctx.trace = trace;
      try {
        if (job->config.debug_detail) cross_check(ctx);
        body(ctx);
        if (ctx.shm && shm_medium_) shm_medium_->check_remote_failure();
      } catch (...) {
        end_inline();
        fail_inline(ctx, trace);
      }
      scratch.trim();
      end_inline();
      recorder.done(trace);
      return Work();
    }
    return submit(std::move(ctx), std::function<void(detail::OpContext&)>(std::forward<F>(body)), blocking);
  }
  // Runs an operation: inline when idle and `blocking`, else on the worker.
  // Blocking: waits and throws the op's error. Async: returns its Work.
  Work submit(detail::OpContext ctx, std::function<void(detail::OpContext&)> body, bool blocking);

  // Fail-stop.
  // `tell_members`: an error of this rank (not one it learned from another
  // member, nor a lost peer everyone learns of anyway) is sent to the other
  // members, so that they fail with it at once.
  void abort(ErrorKind kind, const std::string& message, bool tell_members = true);
  // Communicator::revoke, here or told by another member: aborts with
  // Revoked and passes `wire` (the revoking rank's words) on to the members.
  void revoke(const std::string& message, const std::string& wire);
  // Aborts with (kind, message) without telling the members; when it was
  // aborted already, later calls fail with this kind from now on, the
  // message naming the earlier cause too.
  void fail_for_good(ErrorKind kind, const std::string& message);
  // Waits until no operation of this communicator is queued or running
  // (or it is aborted): agree and shrink come after what was issued before.
  void quiesce();
  std::uint64_t agreements = 0;  // agree and shrink calls so far
  // Set once abort() ran; shared-memory waits poll it.
  std::atomic<bool> aborted_flag{false};
  void throw_if_aborted();
  // A forked child holds a copy of its parent's communicator, whose threads,
  // connections and place in the job are the parent's: it must not act as
  // the rank (its data would join the parent's operations). Every call
  // checks (throw_if_aborted, begin_inline) and throws this.
  [[noreturn]] void refuse_forked_child() const;
  // TUTTI_DEBUG=detail: every member sends every other the operation's
  // signature and byte count; any difference is a Mismatch.
  void cross_check(detail::OpContext& ctx);
  // The kind later calls fail with, and the cause of the abort (false when
  // none; an abort() on purpose names its reason): both under mu_ / take it.
  ErrorKind later_kind() const;
  // What later calls throw, or nothing while it works (takes mu_).
  std::optional<Error> error();
  bool root_cause(ErrorKind* kind, std::string* reason);

 private:
  void run_task(detail::Task& t);
  bool begin_inline();
  void end_inline();
  // Called from a catch block: aborts as fail-stop requires, then rethrows.
  [[noreturn]] void fail_inline(const detail::OpContext& ctx, std::uint64_t trace);

 public:
  // Communicator::alloc_shared / alloc_shared_owned (`owned` set) /
  // free_shared inside their operation.
  void* alloc_shared(detail::OpContext& x, std::size_t bytes, std::shared_ptr<void>* owned = nullptr);
  void free_shared(detail::OpContext& x, void* ptr);
  // Whether this communicator's collectives run in shared memory.
  bool shares_memory() const { return single_host && job->config.transport != detail::Config::Transport::Tcp; }

 private:
  std::vector<std::int64_t> member_words(detail::OpContext& x, std::int64_t mine);
  // alloc_shared's ordinary memory (communicators not in shared memory):
  // its length and its number among this communicator's allocations.
  struct PlainShared {
    std::size_t bytes;
    std::uint64_t serial;
  };
  std::map<void*, PlainShared> plain_shared_;
  std::uint64_t plain_made_ = 0;
  std::unique_ptr<detail::ShmMedium> shm_medium_;
  std::unique_ptr<detail::Hierarchy> hier_;
  std::atomic<detail::Hierarchy*> hier_published_{nullptr};  // hier_, for abort() from other threads
  void worker_loop();

  // Whether the communicator is busy, readable without mu_: a blocking call
  // on an idle communicator claims it with one compare-and-swap from 0
  // (begin_inline). Changed under mu_ except for that claim and its release
  // (end_inline); kQueued mirrors !queue_.empty(), kAborted aborted_.
  static constexpr std::uint32_t kRunning = 1, kQueued = 2, kAborted = 4;
  std::atomic<std::uint32_t> busy_{0};

  std::mutex mu_;  // guards everything below
  std::condition_variable cv_;
  std::deque<detail::Task> queue_;
  bool stopping_ = false;
  std::thread worker_;
  bool aborted_ = false;
  bool revoked_ = false;
  ErrorKind abort_kind_ = ErrorKind::Aborted;
  std::string abort_reason_;
};

// A sub-communicator of `parent` with id `id` and the given members (parent
// ranks, in the child's rank order); registered with the job (core/groups.cc).
std::shared_ptr<detail::CommunicatorImpl> make_child_impl(detail::CommunicatorImpl& parent, std::uint64_t id,
                                                          const std::vector<int>& members_parent_ranks);

}  // namespace tutti
