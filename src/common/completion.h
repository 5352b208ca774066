#pragma once
// Completion: the one-shot completion flag shared by transport requests and
// Works. Completed by exactly one thread (the one that finishes the
// operation); waited on by any number of threads.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/fork.h"
#include "tutti/error.h"

namespace tutti::detail {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;

// now + timeout, saturating at TimePoint::max() (a huge timeout means "never").
inline TimePoint deadline_after(std::chrono::milliseconds timeout) {
  const TimePoint now = Clock::now();
  if (timeout.count() <= 0) return now;
  if (timeout >= std::chrono::duration_cast<std::chrono::milliseconds>(TimePoint::max() - now)) return TimePoint::max();
  return now + timeout;
}

class Completion {
 public:
  Completion() = default;
  Completion(const Completion&) = delete;
  Completion& operator=(const Completion&) = delete;

  // Marks success. Later calls of complete/fail are ignored (first wins).
  void complete(int source = -1, std::size_t bytes = 0);
  void fail(ErrorKind kind, std::string message);

  bool done() const { return done_.load(std::memory_order_acquire); }
  // Waits until done or `deadline`; returns done().
  bool wait_until(TimePoint deadline) const;

  // Valid once done().
  bool ok() const { return ok_; }
  ErrorKind error_kind() const { return kind_; }
  const std::string& error_message() const { return message_; }
  int source() const { return source_; }
  std::size_t bytes() const { return bytes_; }

  // Deadline for Work::wait() without an explicit timeout, and what to do
  // when a waiter reaches it (the owner aborts, which fails this completion).
  TimePoint deadline = TimePoint::max();
  // The process that started it (common/fork.h): a forked child may not wait.
  unsigned generation = fork_generation();
  std::function<void()> on_deadline;
  // Called by a waiter that finds the operation failed (fail-stop: the owner
  // aborts its communicator).
  std::function<void()> on_error;
  // Maps the transport's world rank in source() to a communicator rank.
  std::shared_ptr<const std::vector<int>> source_map;
  // Prefixed to the error message when thrown at the API.
  std::string context;
  // Set by transports whose requests complete sooner when the waiting
  // thread drives them (shared memory). wait_until calls it first; it makes
  // progress at least once and returns when the request is done, at
  // `deadline`, or when its own spinning budget is spent.
  std::function<void(TimePoint deadline)> drive;

  // Throws tutti::Error if the completion failed.
  void rethrow_if_failed() const;

 private:
  void finish();
  std::atomic<bool> done_{false};
  std::atomic<bool> claimed_{false};
  bool ok_ = false;
  ErrorKind kind_ = ErrorKind::Internal;
  std::string message_;
  int source_ = -1;
  std::size_t bytes_ = 0;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
};

}  // namespace tutti::detail
