#pragma once
// Work: the handle of an asynchronous operation.

#include <chrono>
#include <cstddef>
#include <exception>
#include <memory>

namespace tutti {
namespace detail {
class Completion;  // tutti's own (src/common/completion.h): hidden
}
}  // namespace tutti

// What the public headers declare is libtutti.so's interface: exported,
// while everything else in the library is hidden (-fvisibility=hidden).
#pragma GCC visibility push(default)

namespace tutti {

// Returned by every asynchronous call (isend, irecv, iall_reduce, ...).
//
// Buffer rule: the buffers passed to the call belong to tutti until the Work
// has completed (test() returned true or wait() returned); the caller must not
// read, write or free them before that. A Work is a cheap, copyable handle;
// copies refer to the same operation. Waiting from several threads is allowed.
class Work {
 public:
  Work() = default;  // an empty handle: already complete, never fails
  explicit Work(std::shared_ptr<detail::Completion> c) : c_(std::move(c)) {}

  // True once the operation has finished, successfully or not. Never throws.
  bool test() const;
  bool is_completed() const { return test(); }
  // Waits until the operation finishes and rethrows its error, if any. The
  // wait is bounded by the operation's deadline (the communicator timeout):
  // past it the operation fails with Error(Timeout).
  void wait() const;
  // Waits at most `timeout`; returns false if the operation is still running
  // (it goes on), true if it finished (and rethrows its error, if any).
  bool wait(std::chrono::milliseconds timeout) const;
  // The operation's error, or null if it succeeded or is still running.
  std::exception_ptr exception() const;
  // For receives: the rank (in the communicator) the message came from,
  // useful with kAnySource; -1 before completion. For other ops: -1.
  int source() const;
  // For receives: the number of bytes received.
  std::size_t bytes() const;

 private:
  std::shared_ptr<detail::Completion> c_;
};

}  // namespace tutti

#pragma GCC visibility pop
