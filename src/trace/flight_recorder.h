#pragma once
// The flight recorder: the last N operations of each communicator
// (TUTTI_TRACE_BUFFER), with sequence number, kind, sizes, peers, state and
// timestamps, written as JSON when an operation fails or times out, on
// SIGUSR1, and through Communicator::dump_trace(). tools/tutti-trace reads
// the dumps of every rank and tells which ranks are stuck in which op and
// which never entered it.
//
// Cost on the latency path: a few relaxed stores and two time-stamp counter
// reads per operation, no lock, no allocation (an error message is the
// exception).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/completion.h"
#include "common/ticks.h"

namespace tutti::detail {

struct OpContext;

class FlightRecorder {
 public:
  enum class State : std::uint8_t { Queued, Running, Done, Failed, Posted };

  explicit FlightRecorder(std::size_t capacity) : entries_(capacity) {}
  // Before first use only.
  void set_capacity(std::size_t capacity) { entries_ = std::vector<Entry>(capacity); }
  bool enabled() const { return !entries_.empty(); }

  // A collective: recorded when submitted (Queued, or Running when it runs
  // at once). Returns a handle for the later calls. begin and posted are
  // called by the thread that issues the communicator's operations (one at
  // a time), running and end by the thread that runs them; a dump may read
  // concurrently, so fields are atomics (plain moves on x86) and only the
  // rare parts (an error message, a request) take the mutex.
  // `now`: ticks() at the start, when the caller has read it already.
  std::uint64_t begin(const OpContext& ctx, State state, std::int64_t now = 0);
  void running(std::uint64_t handle);
  // The algorithm an operation runs, where it is chosen as it runs (the
  // tuned all_reduce, algorithms/tuner.h); by the thread running it.
  void set_algo(std::uint64_t handle, const char* algo) {
    if (Entry* e = find(handle)) e->algo.store(algo, std::memory_order_relaxed);
  }
  // set_algo for OpContext::record_algo (algorithms see no more of the recorder).
  static void record_algo(void* self, std::uint64_t handle, const char* algo) {
    static_cast<FlightRecorder*>(self)->set_algo(handle, algo);
  }
  void end(std::uint64_t handle, bool ok, const std::string& error = {});
  // end(handle, true), inline: the latency path.
  void done(std::uint64_t handle) {
    if (Entry* e = find(handle)) {
      e->ended.store(ticks(), std::memory_order_relaxed);
      e->state.store(State::Done, std::memory_order_release);
    }
  }
  // A point-to-point request: its state is read from the request when dumped.
  void posted(const char* op, std::uint64_t number, int peer, int tag, std::size_t bytes, const char* dtype,
              const std::shared_ptr<Completion>& req);

  // {"id": ..., "rank": ..., "size": ..., "world_ranks": [...], "ops": [...]}, oldest op first.
  std::string json(std::uint64_t comm_id, int rank, int size, const std::vector<int>& world) const;

 private:
  template <class T>
  using A = std::atomic<T>;
  struct Entry {
    A<std::uint64_t> handle{0};  // 0: unused
    A<std::uint64_t> seq{0};     // collective sequence number, or the send/recv number
    A<const char*> op{""}, algo{""}, dtype{nullptr}, redop{nullptr};
    A<std::size_t> bytes{0};
    A<int> root{-1}, peer{-1}, tag{-1};
    A<State> state{State::Queued};
    A<std::int64_t> enqueued{0}, started{0}, ended{0};  // ticks() (common/ticks.h), converted when dumped
    std::string error;                                  // under mu_
    std::weak_ptr<Completion> request;                  // under mu_
  };
  Entry* find(std::uint64_t handle) {
    if (handle == 0) return nullptr;
    Entry& e = entries_[handle % entries_.size()];
    return e.handle.load(std::memory_order_relaxed) == handle ? &e : nullptr;
  }
  Entry& claim();
  mutable std::mutex mu_;
  std::vector<Entry> entries_;
  A<std::uint64_t> next_{1};
};

// Something whose recorder belongs in the process's dump (a communicator).
class TraceSource {
 public:
  virtual ~TraceSource() = default;
  virtual std::string trace_json() const = 0;
};

// Process-wide: every live communicator's recorder, dumped together into
// <dir>/tutti-trace-<job>-<world rank>.json. configure_traces is called at
// init (the first call wins); it also makes SIGUSR1 dump, when the signal
// still has its default action. Returns the path written, or "" when
// writing failed or tracing is off.
void configure_traces(std::uint64_t job_id, int world_rank, const std::string& dir, bool enabled);
// Plain pointers: a source unregisters itself first thing when destroyed,
// and a dump holds the registry's lock while it reads them, so a dump never
// owns (and never destroys) a communicator.
void register_trace_source(const TraceSource* source);
void unregister_trace_source(const TraceSource* source);
std::string dump_traces(const std::string& reason);

}  // namespace tutti::detail
