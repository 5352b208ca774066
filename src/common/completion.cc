#include "common/completion.h"

#include <thread>

#include "tutti/work.h"

namespace tutti::detail {

void Completion::complete(int source, std::size_t bytes) {
  if (claimed_.exchange(true)) return;
  ok_ = true;
  source_ = source;
  bytes_ = bytes;
  finish();
}

void Completion::fail(ErrorKind kind, std::string message) {
  if (claimed_.exchange(true)) return;
  ok_ = false;
  kind_ = kind;
  message_ = std::move(message);
  finish();
}

void Completion::finish() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

bool Completion::wait_until(TimePoint deadline) const {
  // Spin briefly: on an idle machine the answer often arrives within
  // microseconds, and sleeping costs a context switch each way.
  if (drive && !done()) drive(deadline);
  for (int i = 0; i < 200; ++i) {
    if (done()) return true;
    if (i >= 50) std::this_thread::yield();
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (deadline == TimePoint::max()) {
    cv_.wait(lock, [this] { return done(); });
    return true;
  }
  return cv_.wait_until(lock, deadline, [this] { return done(); });
}

void Completion::rethrow_if_failed() const {
  if (!ok_) throw Error(kind_, context + message_);
}

}  // namespace tutti::detail

namespace tutti {

bool Work::test() const {
  // A forked child must not drive its parent's transport: it would read the
  // parent's messages off their shared sockets.
  if (c_ && !c_->done() && c_->drive && c_->generation == detail::fork_generation())
    c_->drive(detail::TimePoint::min());
  return !c_ || c_->done();
}

namespace {
void check_process(const detail::Completion& c) {
  if (c.generation != detail::fork_generation())
    throw Error(ErrorKind::InvalidArgument,
                "this operation was started by the process this one was forked from; a forked child cannot wait for "
                "it (each process makes its own communicator)");
}
}  // namespace

void Work::wait() const {
  if (!c_) return;
  check_process(*c_);
  if (!c_->wait_until(c_->deadline)) {
    if (c_->on_deadline) c_->on_deadline();
    // The owner's abort fails the completion; wait for that to land.
    c_->wait_until(detail::Clock::now() + std::chrono::seconds(10));
    if (!c_->done())
      throw Error(ErrorKind::Timeout,
                  "Timed out waiting for the operation, which did not complete before its deadline");
  }
  if (!c_->ok() && c_->on_error) c_->on_error();
  c_->rethrow_if_failed();
}

bool Work::wait(std::chrono::milliseconds timeout) const {
  if (!c_) return true;
  check_process(*c_);
  auto limit = detail::deadline_after(timeout);
  if (limit >= c_->deadline) {
    wait();
    return true;
  }
  if (!c_->wait_until(limit)) return false;
  if (!c_->ok() && c_->on_error) c_->on_error();
  c_->rethrow_if_failed();
  return true;
}

std::exception_ptr Work::exception() const {
  if (!c_ || !c_->done() || c_->ok()) return nullptr;
  return std::make_exception_ptr(Error(c_->error_kind(), c_->context + c_->error_message()));
}

int Work::source() const {
  if (!c_ || !c_->done() || c_->source() < 0) return -1;
  if (c_->source_map) return (*c_->source_map)[c_->source()];
  return c_->source();
}
std::size_t Work::bytes() const { return (c_ && c_->done()) ? c_->bytes() : 0; }

}  // namespace tutti
