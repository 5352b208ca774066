#pragma once
// The shared-memory medium of a communicator whose members are all on one
// host. It owns:
//   - the communicator's segment (ShmGroup), mapped at the first
//     shared-memory operation (every member runs it in the same order);
//   - the timed choice of single copy against copying through the segment
//     (algorithms/tuner.h; TUTTI_ALGO_TUNING, TUTTI_SHM_CMA_BYTES);
//   - the segments of Communicator::alloc_shared;
//   - its registry entries (shm_algorithms()), which run the collectives of
//     algorithms/shm_collectives.h against it.
// The engine (core/communicator_impl.h) makes it where the members share
// memory and hands it to the algorithms; nothing here knows the engine.

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/context.h"
#include "algorithms/signature.h"
#include "algorithms/tuner.h"
#include "common/config.h"
#include "common/thresholds.h"
#include "shm/shm_group.h"

namespace tutti::detail {

class ShmMedium {
 public:
  struct Setup {
    std::string name;  // the segment's name, unique on the host; alloc_shared's add "-a<n>"
    int rank = 0;
    int size = 1;
    std::vector<int> pids;  // each member's process
    int creator_pid = 0;    // member 0's process (it creates the segments) and its name in messages
    std::string creator_name;
    const Config* config = nullptr;  // outlives the medium
    ShmThresholds thresholds;
    // The engine's: set once it aborted (waits poll it), and its timeout
    // (Communicator::set_timeout may change it between operations).
    const std::atomic<bool>* aborted = nullptr;
    const std::atomic<std::chrono::milliseconds>* timeout = nullptr;
  };
  explicit ShmMedium(Setup s);
  ~ShmMedium();
  ShmMedium(const ShmMedium&) = delete;
  ShmMedium& operator=(const ShmMedium&) = delete;

  // The segment, set up for operation `x` (its deadline, its description in
  // errors and its signature, which every round carries).
  ShmGroup& group(const OpContext& x) {
    const bool fresh = !group_;
    if (fresh) [[unlikely]]
      create(x);
    ShmGroup& g = *group_;
    if (x.start_tick) {
      g.set_start(x.start_tick, s_.timeout->load(std::memory_order_relaxed));
    } else {
      g.set_deadline(x.deadline);
    }
    g.set_context(&describe_context, &x);
    // The names are static strings: hash them again only when they change.
    if (x.op_name != sig_cache_.op || x.dtype_name != sig_cache_.dtype || x.redop_name != sig_cache_.redop ||
        x.root != sig_cache_.root) [[unlikely]]
      cache_signature(x);
    g.set_signature(sig_cache_.sig, op_signature_bytes(x), describe_signature);
    // Collective, and carries this operation's signature.
    if (fresh) [[unlikely]]
      g.negotiate_cma(s_.config->shm_cma_bytes);
    return g;
  }

  // Runs the shared-memory collective of operation `x` (every member calls
  // it with the same x.bytes):
  // - `direct(g, one_shot)`, where the group has shared allocations: reads
  //   the peers' buffers where they lie, if every member's are in them
  //   (returns true on every member alike where it ran; `one_shot`: the
  //   reductions' form);
  // - else `run(g, one_shot_bytes)`, through the segment.
  // Each choice (in place or copying, one-shot or two-shot, single copy or
  // copying) is timed per size class (algorithms/tuner.h) where
  // TUTTI_ALGO_TUNING allows and the setting that fixes it is unset;
  // otherwise the rule: shared allocations in place, one-shot up to
  // TUTTI_SHM_ONESHOT_BYTES, single copy from TUTTI_SHM_CMA_BYTES.
  struct NoDirect {
    bool operator()(ShmGroup&, bool) const { return false; }
  };
  template <class Run, class Direct = NoDirect>
  void run(OpContext& x, Collective which, Run&& run, Direct&& direct = {}) {
    ShmGroup& g = group(x);
    if constexpr (!std::is_same_v<std::decay_t<Direct>, NoDirect>) {
      if (!g.shared().empty() && s_.size >= 2 && x.bytes) [[unlikely]] {
        const int i = static_cast<int>(which);
        const Pick d = pick(x, direct_[i].get(), 0, "in place", "copying", true);
        // While a choice is on trial, the choices within it hold (they are
        // timed between its trials): each trial times one thing.
        const bool settled = !d.tuner;
        if (d.algo == 0) {
          const Pick f =
              pick(x, direct_shots_[i].get(), x.bytes <= one_shot_bytes() ? 0 : 1, "one-shot", "two-shot", settled);
          if (direct(g, f.algo == 0)) {
            done(f, x.bytes);
            done(d, x.bytes);
            x.set_algo(kShmDirectName);
            return;
          }
        } else if (!settled) {
          copying(x, g, which, run, false);
          done(d, x.bytes);
          return;
        }
      }
    }
    copying(x, g, which, run, true);
  }

  // The timed choices (algorithms/tuner.h), or null where there is none:
  // single copy against copying (`tuner`), one-shot against two-shot for
  // all_reduce and reduce through the segment or in place (`shot_tuner`),
  // in place against copying on shared allocations (`direct_tuner`).
  const Tuner* tuner(Collective which) const { return tuners_[static_cast<int>(which)].get(); }
  const Tuner* shot_tuner(Collective which, bool in_place) const {
    return (in_place ? direct_shots_ : shots_)[static_cast<int>(which)].get();
  }
  const Tuner* direct_tuner(Collective which) const { return direct_[static_cast<int>(which)].get(); }
  // TUTTI_SHM_ONESHOT_BYTES: up to this size every member reduces
  // everything (the rule, where it is not timed).
  std::size_t one_shot_bytes() const { return s_.config->shm_one_shot_bytes; }
  // Every member's `mine`, by rank (an all_reduce of one word each through
  // the segment, within operation `x`).
  std::vector<std::int64_t> words(const OpContext& x, std::int64_t mine);

  // Communicator::alloc_shared within operation `x`: one segment holding
  // each member's part (`sizes`, agreed by every member); returns this
  // member's part.
  // With `owned`: an allocation each member lets go of on its own
  // (shared_buffers.h), whose handle is left there.
  void* alloc_shared(const OpContext& x, const std::vector<std::uint64_t>& sizes,
                     std::shared_ptr<void>* owned = nullptr);
  // The number (from 1) of the allocation `ptr` starts, or 0 for none.
  std::uint64_t serial_of(const OpContext& x, void* ptr);
  void free_shared(const OpContext& x, std::uint64_t serial);

  // From any thread, once the engine aborted with a cause: every member
  // waiting in the segment learns it.
  void broadcast_failure(ErrorKind kind, const std::string& message);
  // Throws a failure another member recorded (run after every operation:
  // ShmGroup::check_remote_failure).
  void check_remote_failure() {
    if (group_) group_->check_remote_failure();
  }
  // At the engine's destruction after an abort: the names go, whatever the
  // other members still map.
  void abandon() {
    if (group_) group_->abandon();
  }

 private:
  void create(const OpContext& x);
  // One timed choice for operation `x`, every member alike: the
  // alternative to run (`preferred`, the rule's, where `t` is null or does
  // not cover x.bytes), and from when it is timed; done() records its time
  // where it is a trial. what0/what1 name the alternatives in the log.
  struct Pick {
    Tuner* tuner = nullptr;  // set where the time counts
    int algo = 0;
    std::chrono::steady_clock::time_point t0;
  };
  // With `settled` false (a choice around it is on trial) it holds: the
  // tuner's last choice, else `preferred`, without a step.
  Pick pick(const OpContext& x, Tuner* t, int preferred, const char* what0, const char* what1, bool settled);
  static void done(const Pick& p, std::size_t bytes);
  // Through the segment: one-shot or two-shot (reductions), single copy or
  // copying; `settled`: as pick's.
  template <class Run>
  void copying(OpContext& x, ShmGroup& g, Collective which, Run& run, bool settled) {
    const int i = static_cast<int>(which);
    const Pick f = pick(x, shots_[i].get(), x.bytes <= one_shot_bytes() ? 0 : 1, "one-shot", "two-shot", settled);
    const bool one_shot = reduces(which) && f.algo == 0;
    const std::size_t one_shot_bytes = one_shot ? SIZE_MAX : 0;
    Tuner* t = tuners_[i].get();
    if (one_shot || !t || !t->covers(x.bytes) || !g.single_copy_agreed()) [[likely]] {
      run(g, one_shot_bytes);
      done(f, x.bytes);
      return;
    }
    struct Restore {
      ShmGroup& g;
      ~Restore() { g.set_copy_only(false); }
    };
    const auto run_cma = [&](int algo) {
      Restore restore{g};
      g.set_copy_only(algo == 1);
      if (algo == 1) x.set_algo(kShmCopyName);
      run(g, one_shot_bytes);
      // Where the rules would not have copied once either, it ran them.
      if (algo == 1 && !g.declined()) x.set_algo("shm");
    };
    if (settled && !f.tuner) {
      t->step(
          x.bytes, 0, [&](std::array<std::int64_t, 2>& figures) { least(g, figures); },
          [&](const std::array<std::int64_t, 2>& figures, int algo) {
            log_choice(x, figures, algo, "single copy", "copying");
          },
          run_cma);
    } else {
      run_cma(std::max(t->chosen(x.bytes), 0));
    }
    done(f, x.bytes);
  }
  // The sizes (bytes, (from, to]) where one-shot and two-shot are timed.
  static constexpr std::size_t kShotsFrom = 512, kShotsTo = std::size_t(1) << 20;
  static bool reduces(Collective which) { return which == Collective::AllReduce || which == Collective::Reduce; }
  void least(ShmGroup& g, std::array<std::int64_t, 2>& figures);
  void log_choice(const OpContext& x, const std::array<std::int64_t, 2>& figures, int algo, const char* what0,
                  const char* what1) const;
  void cache_signature(const OpContext& x);
  static std::string describe_context(const void* x);

  Setup s_;
  std::unique_ptr<ShmGroup> group_;
  std::atomic<ShmGroup*> published_{nullptr};  // group_, for broadcast_failure from other threads
  std::array<std::unique_ptr<Tuner>, kCollectives> tuners_, shots_, direct_shots_, direct_;
  struct {
    const char *op = nullptr, *dtype = nullptr, *redop = nullptr;
    int root = -2;
    std::uint64_t sig = 0;
  } sig_cache_;  // the last operation's signature (used by the thread running operations)
};

// The shared-memory medium's algorithms, one a collective, in the
// collectives' order (plan/registry.cc puts every medium's together).
std::span<const Algorithm> shm_algorithms();

}  // namespace tutti::detail
