#pragma once
// What a listening server (the TCP store, a rank's peer listener) allows
// connections that have not yet proved they hold the job's secret, so that a
// stranger who opens connections without end cannot take the job down:
//
// - at most `total` of them are held at once, and at most `per_source` from
//   one address; past that, a newcomer pushes out the oldest silent one
//   (connected `young` ago or more, nothing sent: a client of the job sends
//   its hello at once), and only past twice the limits the oldest one
//   whatever its age or what it did (a store client closed before the
//   server answered tries again);
// - under pressure (more than half of `total` held) a silent connection is
//   closed after `silent`; every one is closed after `budget`;
// - `total` is a small share of the process's descriptor limit, so the job
//   keeps the rest for its own sockets and shared memory.
//
// The server tells the gate what happens to each connection; the gate says
// which to close. Not thread-safe: one server thread owns it.

#include <chrono>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace tutti::detail {

class StrangerGate {
 public:
  using Clock = std::chrono::steady_clock;
  using TimePoint = Clock::time_point;

  struct Limits {
    std::size_t total;
    std::size_t per_source;
    std::chrono::milliseconds silent;
    std::chrono::milliseconds budget;
    std::chrono::milliseconds young{500};  // never pushed out for silence before this age
  };
  // From this process's descriptor limit (RLIMIT_NOFILE): an eighth of it,
  // between 16 and 1,024; half of that from one address; 2 s of silence
  // under pressure; `budget` in all.
  static Limits default_limits(std::chrono::milliseconds budget);

  // `has_spoken(context, id)`: whether the connection has bytes waiting (a
  // peek), for connections the gate has not been told of yet; may be null.
  using HasSpoken = bool (*)(void* context, std::uint64_t id);
  StrangerGate(Limits limits, HasSpoken has_spoken, void* context);

  // A connection accepted from `source` (its address, without the port)
  // waits to authenticate. Returns the connections to close now, perhaps
  // `id` itself.
  std::vector<std::uint64_t> admit(std::uint64_t id, const std::string& source, TimePoint now);
  // It sent its first bytes.
  void spoke(std::uint64_t id);
  // It authenticated, or is closed: no longer the gate's.
  void leave(std::uint64_t id);
  // The connections past their time, to close now.
  std::vector<std::uint64_t> expired(TimePoint now);
  // When expired() has something to say next (TimePoint::max(): never).
  TimePoint next_deadline() const;

  std::size_t held() const { return entries_.size(); }
  const Limits& limits() const { return limits_; }
  // Connections closed by the gate since the last call (for a log line that
  // says how many, not one line per stranger).
  std::size_t take_closed_count();

 private:
  struct Entry {
    std::string source;
    TimePoint since;
    bool spoke = false;
  };
  bool pressure() const { return entries_.size() * 2 > limits_.total; }
  // The oldest entry (of `source` when not empty) that is silent (or any,
  // when `silent_only` is false); 0 when none.
  std::uint64_t oldest(const std::string* source, bool silent_only, TimePoint born_before = TimePoint::max());
  void close(std::uint64_t id, std::vector<std::uint64_t>& out);

  Limits limits_;
  HasSpoken has_spoken_;
  void* context_;
  std::unordered_map<std::uint64_t, Entry> entries_;
  std::set<std::pair<TimePoint, std::uint64_t>> by_age_;
  std::map<std::string, std::size_t> per_source_;
  std::size_t closed_ = 0;
};

}  // namespace tutti::detail
