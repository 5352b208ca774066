// Work, the completion thread and the store adapter of the torch backend
// (process_group.h says who completes a Work and when).
#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/jit_type.h>
#include <ATen/record_function.h>

#include <algorithm>

#include "../interrupt.h"
#include "process_group.h"

namespace tutti_torch {

using tutti::Error;
using tutti::ErrorKind;
using Clock = std::chrono::steady_clock;
using c10d::OpType;

// ---- store adapter ---------------------------------------------------------------

namespace {
template <class F>
auto store_call(const char* what, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(ErrorKind::PeerLost, std::string("torch store: ") + what + ": " + e.what());
  }
}
}  // namespace

void C10dStore::set(const std::string& key, const tutti::Bytes& value) {
  store_call("set", [&] { store_->set(key, value); });
}
tutti::Bytes C10dStore::get(const std::string& key) {
  wait({key}, timeout());
  return store_call("get", [&] { return store_->get(key); });
}
std::int64_t C10dStore::add(const std::string& key, std::int64_t delta) {
  return store_call("add", [&] { return store_->add(key, delta); });
}
tutti::Bytes C10dStore::compare_set(const std::string& key, const tutti::Bytes& expected, const tutti::Bytes& desired) {
  return store_call("compare_set", [&] { return store_->compareSet(key, expected, desired); });
}
void C10dStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  try {
    store_->wait(keys, timeout);
  } catch (const std::exception& e) {
    // torch's stores raise their own errors at the deadline; a key still
    // missing is a timeout.
    bool all = false;
    try {
      all = store_->check(keys);
    } catch (const std::exception&) {
    }
    if (all) return;
    std::string names;
    for (auto& k : keys) names += (names.empty() ? "" : ", ") + k;
    throw Error(ErrorKind::Timeout,
                "torch store: waited " + std::to_string(timeout.count()) + " ms for " + names + ": " + e.what());
  }
}
bool C10dStore::check(const std::vector<std::string>& keys) {
  return store_call("check", [&] { return store_->check(keys); });
}
bool C10dStore::delete_key(const std::string& key) {
  return store_call("delete_key", [&] { return store_->deleteKey(key); });
}
std::int64_t C10dStore::num_keys() {
  return store_call("num_keys", [&] { return store_->getNumKeys(); });
}

// ---- Work ------------------------------------------------------------------------

const char* event_title(OpType type) {
  switch (type) {
    case OpType::BROADCAST:
      return "tutti:broadcast";
    case OpType::ALLREDUCE:
    case OpType::ALLREDUCE_COALESCED:
      return "tutti:all_reduce";
    case OpType::REDUCE:
      return "tutti:reduce";
    case OpType::ALLGATHER:
    case OpType::ALLGATHER_COALESCED:
      return "tutti:all_gather";
    case OpType::_ALLGATHER_BASE:
      return "tutti:_allgather_base";
    case OpType::GATHER:
      return "tutti:gather";
    case OpType::SCATTER:
      return "tutti:scatter";
    case OpType::REDUCE_SCATTER:
      return "tutti:reduce_scatter";
    case OpType::_REDUCE_SCATTER_BASE:
      return "tutti:_reduce_scatter_base";
    case OpType::ALLTOALL_BASE:
    case OpType::ALLTOALL:
      return "tutti:all_to_all";
    case OpType::SEND:
      return "tutti:send";
    case OpType::RECV:
      return "tutti:recv";
    case OpType::RECVANYSOURCE:
      return "tutti:recvAnySource";
    case OpType::BARRIER:
      return "tutti:barrier";
    case OpType::REDUCE_SCATTER_TENSOR_COALESCED:
      return "tutti:reduce_scatter_tensor_coalesced";
    case OpType::COALESCED:
      return "tutti:coalesced";
    default:
      return "tutti:unknown";
  }
}

const char* profiling_title(OpType type) {
  // No profiler listening: no title, and c10d::Work records nothing.
  return at::hasCallbacks() ? event_title(type) : nullptr;
}

WorkTutti::WorkTutti(int rank, OpType type, const char* title, const std::vector<at::Tensor>& inputs,
                     std::vector<at::Tensor> outputs, std::vector<at::Tensor> keep, std::function<void()> after,
                     std::optional<Clock::time_point> deadline, std::uint64_t seq)
    : c10d::Work(rank, type, title, title ? std::optional<std::vector<at::Tensor>>(inputs) : std::nullopt),
      outputs_(std::move(outputs)),
      keep_(std::move(keep)),
      after_(std::move(after)),
      deadline_(deadline),
      seq_(seq) {}

WorkTutti::~WorkTutti() = default;

void WorkTutti::fail(std::exception_ptr e) {
  {
    std::lock_guard<std::mutex> g(finish_mu_);
    if (!error_) error_ = e;
  }
  complete();
}

bool WorkTutti::poll(bool mark_future) {
  if (done_.load(std::memory_order_acquire)) return true;
  for (auto& w : works_)
    if (!w.test()) return false;
  for (auto& p : parts_)
    if (!p->poll()) return false;
  complete(mark_future);
  return true;
}

bool WorkTutti::wait_until(Clock::time_point until, bool mark_future) {
  if (done_.load(std::memory_order_acquire)) return true;
  for (auto& p : parts_)
    if (!p->wait_until(until)) return false;
  for (auto& w : works_) {
    try {
      if (until == Clock::time_point::max()) {
        w.wait();
      } else {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
        if (left.count() < 0) left = std::chrono::milliseconds(0);
        if (!w.wait(left)) return false;
      }
    } catch (...) {
      // Collected by complete().
    }
  }
  complete(mark_future);
  return true;
}

void WorkTutti::complete(bool mark_future) {
  std::unique_lock<std::mutex> g(finish_mu_);
  if (done_.load(std::memory_order_acquire)) return;
  std::exception_ptr e = error_;
  for (auto& w : works_) {
    try {
      w.wait();  // done already: returns at once, or rethrows the error
    } catch (...) {
      if (!e) e = std::current_exception();
    }
  }
  if (!works_.empty()) source_ = works_[0].source();
  for (auto& p : parts_) {
    p->wait_until(Clock::time_point::max());  // done already
    if (!e && p->error_) e = p->error_;
  }
  if (!e && after_) {
    try {
      after_();
    } catch (...) {
      e = std::current_exception();
    }
  }
  after_ = nullptr;
  keep_.clear();
  error_ = e;
  done_.store(true, std::memory_order_release);
  g.unlock();
  finish(e);
  if (mark_future) complete_future();
}

void WorkTutti::complete_future() {
  c10::intrusive_ptr<c10::ivalue::Future> f;
  {
    std::lock_guard<std::mutex> g(finish_mu_);
    if (!future_ || !done_.load(std::memory_order_acquire)) return;
    f = future_;
  }
  if (future_marked_.exchange(true)) return;
  if (error_) {
    f->setError(error_);
  } else {
    f->markCompleted(c10::IValue(outputs_));
  }
}

bool WorkTutti::isCompleted() { return poll(); }

bool WorkTutti::isSuccess() const { return done_.load(std::memory_order_acquire) && !error_; }

std::exception_ptr WorkTutti::exception() const { return done_.load(std::memory_order_acquire) ? error_ : nullptr; }

int WorkTutti::sourceRank() const {
  if (!done_.load(std::memory_order_acquire)) return -1;
  return source_;
}

std::vector<at::Tensor> WorkTutti::result() { return outputs_; }

bool WorkTutti::wait(std::chrono::milliseconds timeout) {
  Clock::time_point until = Clock::time_point::max();
  bool by_op = false;
  if (timeout.count() > 0) until = Clock::now() + timeout;
  if (deadline_ && *deadline_ < until) {
    until = *deadline_;
    by_op = true;
  }
  bool done = false;
  tutti_python::interrupt::wait_in_nogil(on_abort, [&] { done = wait_until(until); });
  if (!done)
    throw Error(ErrorKind::Timeout, "rank " + std::to_string(rank_) + ": Timed out waiting for " +
                                        (event_title(opType_) + 6) + ", which did not finish within " +
                                        (by_op ? std::string("the operation's timeout")
                                               : "the wait's timeout of " + std::to_string(timeout.count()) + " ms"));
  if (error_) std::rethrow_exception(error_);
  return true;
}

void WorkTutti::abort() {
  if (on_abort) on_abort("Work.abort() called");
}

c10::intrusive_ptr<c10::ivalue::Future> WorkTutti::getFuture() {
  std::unique_lock<std::mutex> g(finish_mu_);
  if (!future_) future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
  auto f = future_;
  const bool done = done_.load(std::memory_order_acquire);
  g.unlock();
  if (done) {
    complete_future();
  } else if (auto w = watcher.lock()) {
    w->watch(c10::intrusive_ptr<WorkTutti>::reclaim_copy(this));
  } else {
    wait_until(Clock::time_point::max());
  }
  return f;
}

// ---- completion thread -------------------------------------------------------------

Watcher::~Watcher() { stop(); }

void Watcher::watch(c10::intrusive_ptr<WorkTutti> work) {
  std::lock_guard<std::mutex> g(mu_);
  watched_.push_back(std::move(work));
  // The thread keeps the Watcher alive until its loop ends.
  if (!thread_.joinable()) thread_ = std::thread([self = shared_from_this()] { self->loop(); });
  cv_.notify_one();
}

bool Watcher::idle() {
  std::lock_guard<std::mutex> g(mu_);
  return watched_.empty() && to_mark_.empty();
}

void Watcher::stop() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  const auto me = std::this_thread::get_id();
  auto end = [me](std::thread& t) {
    if (!t.joinable()) return;
    if (t.get_id() == me) {
      t.detach();  // the thread's own last reference, or a callback that stops its backend
    } else {
      t.join();
    }
  };
  end(thread_);  // every watched Work finished and posted
  std::vector<std::thread> markers;
  {
    std::lock_guard<std::mutex> g(mu_);
    markers_stop_ = true;
    markers.swap(markers_);
  }
  mark_cv_.notify_all();
  for (auto& t : markers) end(t);  // each marks what is left first
}

void Watcher::post(c10::intrusive_ptr<WorkTutti> work) {
  to_mark_.push_back(std::move(work));
  if (free_markers_ == 0 && markers_.size() < kMaxMarkers) {
    markers_.emplace_back([self = shared_from_this()] { self->mark_loop(); });
  } else {
    mark_cv_.notify_one();
  }
}

void Watcher::mark_loop() {
  std::unique_lock<std::mutex> g(mu_);
  for (;;) {
    while (to_mark_.empty() && !markers_stop_) {
      ++free_markers_;
      mark_cv_.wait(g);
      --free_markers_;
    }
    if (to_mark_.empty()) return;
    c10::intrusive_ptr<WorkTutti> w = std::move(to_mark_.front());
    to_mark_.pop_front();
    g.unlock();
    w->complete_future();  // runs the future's callbacks, which may wait for later Works
    w.reset();
    g.lock();
  }
}

void Watcher::loop() {
  for (;;) {
    std::vector<c10::intrusive_ptr<WorkTutti>> snap;
    bool stopping;
    {
      std::unique_lock<std::mutex> g(mu_);
      cv_.wait(g, [&] { return stop_ || !watched_.empty(); });
      if (watched_.empty()) return;
      snap.assign(watched_.begin(), watched_.end());
      stopping = stop_;
    }
    // Usually the oldest finishes first: sleep on it, a slice at a time, so
    // that later Works that finish earlier (a pending receive ahead of a
    // collective) are seen too.
    snap.front()->wait_until(stopping ? Clock::time_point::max() : Clock::now() + std::chrono::milliseconds(10), false);
    std::vector<WorkTutti*> finished;
    for (auto& w : snap)
      if (w->poll(false)) finished.push_back(w.get());
    std::lock_guard<std::mutex> g(mu_);
    std::deque<c10::intrusive_ptr<WorkTutti>> left;
    for (auto& w : watched_) {
      if (std::find(finished.begin(), finished.end(), w.get()) == finished.end()) {
        left.push_back(std::move(w));
      } else {
        post(std::move(w));
      }
    }
    watched_.swap(left);
  }
}

}  // namespace tutti_torch
