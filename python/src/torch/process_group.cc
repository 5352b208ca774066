#include "process_group.h"

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/jit_type.h>
#include <ATen/record_function.h>
#include <Python.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <stdexcept>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <type_traits>

#include "sparse_all_reduce.h"

namespace tutti_torch {

using tutti::DataType;
using tutti::Error;
using tutti::ErrorKind;
using Clock = std::chrono::steady_clock;
using c10d::OpType;

namespace {

[[noreturn]] void invalid(const char* op, const std::string& what) {
  throw Error(ErrorKind::InvalidArgument, std::string("ProcessGroupTutti.") + op + ": " + what);
}

DataType dtype_of(const at::Tensor& t, const char* op) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return DataType::Float32;
    case at::kDouble:
      return DataType::Float64;
    case at::kHalf:
      return DataType::Float16;
    case at::kBFloat16:
      return DataType::BFloat16;
    case at::kChar:
      return DataType::Int8;
    case at::kByte:
      return DataType::UInt8;
    case at::kShort:
      return DataType::Int16;
    case at::kInt:
      return DataType::Int32;
    case at::kLong:
      return DataType::Int64;
    case at::kBool:
      return DataType::Bool;
    case at::kComplexFloat:
      return DataType::Complex64;
    case at::kComplexDouble:
      return DataType::Complex128;
    default:
      invalid(op, std::string("tensors of dtype ") + c10::toString(t.scalar_type()) + " have no tutti data type");
  }
}

std::string layout_name(const at::Tensor& t) {
  std::ostringstream o;
  o << t.layout();
  return o.str();
}

// `what` names the argument in the message ("the tensor", "output 2", ...).
void check_tensor(const at::Tensor& t, const char* op, const std::string& what) {
  if (!t.defined()) invalid(op, what + " is undefined");
  if (t.device().type() != c10::DeviceType::CPU)
    invalid(op, what + " is on device " + t.device().str() + "; tutti moves CPU tensors");
  if (t.layout() != c10::kStrided)
    invalid(op, what + " has layout " + layout_name(t) + "; tutti moves dense (strided) tensors here");
}

at::Tensor& single(std::vector<at::Tensor>& v, const char* op, const std::string& what) {
  if (v.size() != 1)
    invalid(op, "expects one tensor per process, got " + std::to_string(v.size()) +
                    " (lists of several tensors are for multi-device collectives)");
  check_tensor(v[0], op, what);
  return v[0];
}

std::size_t count_of(const at::Tensor& t) { return static_cast<std::size_t>(t.numel()); }
std::size_t bytes_of(const at::Tensor& t) { return static_cast<std::size_t>(t.numel()) * t.element_size(); }

void same_kind(const at::Tensor& a, const at::Tensor& b, const char* op, const std::string& what) {
  if (a.scalar_type() != b.scalar_type())
    invalid(op, what + " has dtype " + c10::toString(b.scalar_type()) + ", expected " + c10::toString(a.scalar_type()));
}
void same_numel(std::size_t want, const at::Tensor& b, const char* op, const std::string& what) {
  if (count_of(b) != want)
    invalid(op, what + " has " + std::to_string(b.numel()) + " elements, expected " + std::to_string(want));
}

tutti::ReduceOp reduce_op(const c10d::ReduceOp& op, const char* name) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return tutti::ReduceOpKind::Sum;
    case c10d::ReduceOp::AVG:
      return tutti::ReduceOpKind::Avg;
    case c10d::ReduceOp::PRODUCT:
      return tutti::ReduceOpKind::Product;
    case c10d::ReduceOp::MIN:
      return tutti::ReduceOpKind::Min;
    case c10d::ReduceOp::MAX:
      return tutti::ReduceOpKind::Max;
    case c10d::ReduceOp::BAND:
      return tutti::ReduceOpKind::BAnd;
    case c10d::ReduceOp::BOR:
      return tutti::ReduceOpKind::BOr;
    case c10d::ReduceOp::BXOR:
      return tutti::ReduceOpKind::BXor;
    case c10d::ReduceOp::PREMUL_SUM: {
      // PREMUL_SUM's factor travels in the op's supplement (the only
      // supplement torch has), a double or a one-element tensor.
      auto* s = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
      if (!s) invalid(name, "PREMUL_SUM without its factor (make it with torch.distributed._make_nccl_premul_sum)");
      double f = s->double_factor;
      if (s->tensor_factor.defined()) {
        const at::Tensor& ft = s->tensor_factor;
        if (ft.numel() != 1) invalid(name, "PREMUL_SUM's factor tensor must hold one element");
        f = ft.to(c10::kCPU).to(at::kDouble).item<double>();
      }
      return tutti::ReduceOp::premul_sum(f);
    }
    default:
      invalid(name, "unknown reduce op " + std::to_string(static_cast<int>(op.op_)));
  }
}

void check_op(const tutti::ReduceOp& op, DataType dt, const char* name) {
  std::string why = tutti::reduce_op_invalid_reason(dt, op);
  if (!why.empty()) invalid(name, why);
}

// Contiguous stand-ins for tensors that are not, and the copies back.
struct Stage {
  std::vector<at::Tensor> keep;                         // every tensor the operation touches
  std::vector<std::pair<at::Tensor, at::Tensor>> back;  // (caller's, staging): copied after the operation

  at::Tensor in(const at::Tensor& t) {
    keep.push_back(t);
    if (t.is_contiguous()) return t;
    at::Tensor c = t.contiguous();
    keep.push_back(c);
    return c;
  }
  at::Tensor out(const at::Tensor& t) {
    keep.push_back(t);
    if (t.is_contiguous()) return t;
    at::Tensor c = at::empty(t.sizes(), t.options());
    keep.push_back(c);
    back.emplace_back(t, c);
    return c;
  }
  at::Tensor inout(const at::Tensor& t) {
    keep.push_back(t);
    if (t.is_contiguous()) return t;
    at::Tensor c = t.contiguous();
    keep.push_back(c);
    back.emplace_back(t, c);
    return c;
  }
  // Flattens `ts` (one dtype) into one new contiguous tensor.
  at::Tensor flat_in(const std::vector<at::Tensor>& ts) {
    std::int64_t total = 0;
    for (auto& t : ts) total += t.numel();
    at::Tensor f = at::empty({total}, ts.at(0).options().memory_format(std::nullopt));
    std::int64_t off = 0;
    for (auto& t : ts) {
      keep.push_back(t);
      if (t.numel()) f.narrow(0, off, t.numel()).view(t.sizes()).copy_(t);
      off += t.numel();
    }
    keep.push_back(f);
    return f;
  }
  // Copies slices of `flat` (from `offset`) into `ts` after the operation.
  void flat_back(const at::Tensor& flat, std::int64_t offset, const std::vector<at::Tensor>& ts) {
    for (auto& t : ts) {
      keep.push_back(t);
      if (t.numel()) back.emplace_back(t, flat.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  }
  std::function<void()> after() {
    if (back.empty()) return nullptr;
    return [b = back] {
      for (auto& [user, staged] : b) user.copy_(staged);
    };
  }
};

std::size_t parse_bytes(const char* name, const char* v, std::size_t dflt) {
  if (!v || !*v) return dflt;
  char* end = nullptr;
  unsigned long long n = std::strtoull(v, &end, 10);
  if (end == v) throw Error(ErrorKind::InvalidArgument, std::string(name) + ": '" + v + "' is not a size");
  std::string suffix(end);
  if (suffix == "K" || suffix == "k")
    n <<= 10;
  else if (suffix == "M" || suffix == "m")
    n <<= 20;
  else if (suffix == "G" || suffix == "g")
    n <<= 30;
  else if (!suffix.empty())
    throw Error(ErrorKind::InvalidArgument, std::string(name) + ": '" + v + "' is not a size (K, M or G suffix)");
  return static_cast<std::size_t>(n);
}

// Sets a communicator's timeout for the calls made in its scope (inline
// operations read it when they start).
struct TimeoutScope {
  tutti::Communicator& c;
  std::chrono::milliseconds saved{0};
  bool set = false;
  TimeoutScope(tutti::Communicator& comm, std::chrono::milliseconds t) : c(comm) {
    if (t.count() > 0) {
      saved = c.timeout();
      c.set_timeout(t);
      set = true;
    }
  }
  ~TimeoutScope() {
    if (set) c.set_timeout(saved);
  }
};

// monitoredBarrier's tags: this | a counter of 24 bits.
constexpr int kMonitoredBarrierTag = 0x7f000000;

// Lengths and offsets (elements) of all_to_all blocks along dimension 0.
void split_lengths(const at::Tensor& t, const std::vector<int64_t>& splits, int n, const char* what,
                   std::vector<std::size_t>& counts, std::vector<std::size_t>& displs) {
  const std::int64_t dim0 = t.dim() ? t.size(0) : 1;
  const std::int64_t row = dim0 ? t.numel() / dim0 : 1;
  counts.assign(n, 0);
  displs.assign(n, 0);
  std::int64_t each = 0;
  if (splits.empty()) {
    if (dim0 % n != 0)
      invalid("alltoall_base", std::string(what) + "'s first dimension (" + std::to_string(dim0) +
                                   ") does not split evenly among " + std::to_string(n) + " ranks");
    each = dim0 / n;
  } else {
    if (static_cast<int>(splits.size()) != n)
      invalid("alltoall_base", std::string(what) + " split sizes have " + std::to_string(splits.size()) +
                                   " entries, the group has " + std::to_string(n) + " ranks");
    std::int64_t sum = 0;
    for (auto s : splits) {
      if (s < 0) invalid("alltoall_base", std::string(what) + " split sizes must not be negative");
      sum += s;
    }
    if (sum != dim0)
      invalid("alltoall_base", std::string(what) + " split sizes add up to " + std::to_string(sum) +
                                   ", its first dimension is " + std::to_string(dim0));
  }
  std::size_t off = 0;
  for (int i = 0; i < n; ++i) {
    counts[i] = static_cast<std::size_t>(row * (splits.empty() ? each : splits[i]));
    displs[i] = off;
    off += counts[i];
  }
}

}  // namespace

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

namespace {
// "tutti:<op>": the profiler event's title; without the prefix, the
// operation's name in messages.
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
}  // namespace

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

bool WorkTutti::poll() {
  if (done_.load(std::memory_order_acquire)) return true;
  for (auto& w : works_)
    if (!w.test()) return false;
  for (auto& p : parts_)
    if (!p->poll()) return false;
  complete();
  return true;
}

bool WorkTutti::wait_until(Clock::time_point until) {
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
  complete();
  return true;
}

void WorkTutti::complete() {
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
  complete_future();
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
  if (!wait_until(until))
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
  return watched_.empty();
}

void Watcher::stop() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  if (!thread_.joinable()) return;
  if (thread_.get_id() == std::this_thread::get_id()) {
    thread_.detach();  // the thread's own last reference: its loop has ended
  } else {
    thread_.join();
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
    snap.front()->wait_until(stopping ? Clock::time_point::max() : Clock::now() + std::chrono::milliseconds(10));
    std::vector<WorkTutti*> finished;
    for (auto& w : snap)
      if (w->poll()) finished.push_back(w.get());
    std::lock_guard<std::mutex> g(mu_);
    watched_.erase(std::remove_if(watched_.begin(), watched_.end(),
                                  [&](const c10::intrusive_ptr<WorkTutti>& w) {
                                    return std::find(finished.begin(), finished.end(), w.get()) != finished.end();
                                  }),
                   watched_.end());
  }
}

// ---- process group -----------------------------------------------------------------

ProcessGroupTutti::ProcessGroupTutti(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                     std::chrono::milliseconds timeout, std::string group_name)
    : c10d::Backend(rank, size), group_name_(std::move(group_name)), timeout_(timeout) {
  inline_bytes_ = parse_bytes("TUTTI_TORCH_INLINE_BYTES", std::getenv("TUTTI_TORCH_INLINE_BYTES"), 256 << 10);
  // torch says everything: the store, this rank in the group and the
  // group's size. Nothing in the environment is read for them (RANK or
  // WORLD_SIZE of another level, a sub-group's rank). Where the store is a
  // TCPStore, its host is the route hint for the address peers connect to.
  tutti::InitOptions o;
  o.rank = rank;
  o.world_size = size;
  o.store = std::make_shared<C10dStore>(store);
  o.timeout = timeout;
  c10d::Store* s = store.get();
  while (auto* prefixed = dynamic_cast<c10d::PrefixStore*>(s)) s = prefixed->getUnderlyingStore().get();
  if (auto* tcp = dynamic_cast<c10d::TCPStore*>(s)) {
    o.master_addr = tcp->getHost();
    o.master_port = tcp->getPort();
  }
  comm_ = tutti::init(o);
  init();
}

ProcessGroupTutti::ProcessGroupTutti(tutti::Communicator comm, std::chrono::milliseconds timeout,
                                     std::string group_name)
    : c10d::Backend(comm.rank(), comm.size()),
      comm_(std::move(comm)),
      group_name_(std::move(group_name)),
      timeout_(timeout) {
  inline_bytes_ = parse_bytes("TUTTI_TORCH_INLINE_BYTES", std::getenv("TUTTI_TORCH_INLINE_BYTES"), 256 << 10);
  comm_.set_timeout(timeout);
  init();
}

tutti::Communicator ProcessGroupTutti::live(const char* op) {
  std::lock_guard<std::mutex> g(mu_);
  if (!comm_.valid())
    throw Error(ErrorKind::Aborted, "rank " + std::to_string(rank_) + ": " + op + ": " +
                                        (released_ ? released_->message() : std::string("the group was shut down")));
  return comm_;
}

tutti::Communicator ProcessGroupTutti::communicator() {
  std::lock_guard<std::mutex> g(mu_);
  return comm_;
}

std::optional<tutti::Error> ProcessGroupTutti::failure() const {
  tutti::Communicator c;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!comm_.valid()) return released_;
    c = comm_;
  }
  return c.error();
}

std::exception_ptr ProcessGroupTutti::error() const {
  std::optional<tutti::Error> e = failure();
  return e ? std::make_exception_ptr(*e) : nullptr;
}

c10d::ErrorType ProcessGroupTutti::getError() {
  std::optional<tutti::Error> e = failure();
  if (!e) return c10d::ErrorType::SUCCESS;
  switch (e->kind()) {
    case ErrorKind::Timeout:
      return c10d::ErrorType::TIMEOUT;
    case ErrorKind::PeerLost:
    case ErrorKind::Revoked:
      return c10d::ErrorType::REMOTE_ERROR;
    default:
      return c10d::ErrorType::COMM_ERROR;
  }
}

c10::intrusive_ptr<c10d::Backend::Options> ProcessGroupTutti::getBackendOptions() {
  auto o = c10::make_intrusive<Options>("tutti", timeout_);
  o->group_name = group_name_;
  return o;
}

void ProcessGroupTutti::setTimeout(std::chrono::milliseconds timeout) {
  // After the operation being posted (an inline one sets the
  // communicator's timeout for its own run, and puts it back).
  std::lock_guard<std::mutex> p(post_mu_);
  std::lock_guard<std::mutex> g(mu_);
  timeout_ = timeout;
  if (comm_.valid()) comm_.set_timeout(timeout);
}

c10::intrusive_ptr<ProcessGroupTutti> ProcessGroupTutti::shrink_alive() {
  std::lock_guard<std::mutex> p(post_mu_);
  return c10::make_intrusive<ProcessGroupTutti>(live("shrink").shrink(), timeout_, group_name_ + ":shrunk");
}

c10::intrusive_ptr<ProcessGroupTutti> ProcessGroupTutti::derive(const std::vector<int>& ranks,
                                                                std::chrono::milliseconds timeout,
                                                                const std::string& group_name) {
  std::optional<tutti::Communicator> c;
  {
    std::lock_guard<std::mutex> p(post_mu_);
    tutti::Communicator parent = live("new_group");
    if (std::find(ranks.begin(), ranks.end(), rank_) == ranks.end()) return nullptr;
    // Every member of a group takes part in making it, and only members
    // count here: the k-th group of exactly these members is the same
    // group on each of them. (torch's names for it may differ between
    // ranks: split_group hashes in how many groups a rank has.)
    std::string key;
    for (int r : ranks) key += std::to_string(r) + ",";
    const std::uint64_t k = ++made_[key];
    c = parent.new_group(ranks, "members " + key + " #" + std::to_string(k));
  }
  return c10::make_intrusive<ProcessGroupTutti>(std::move(*c), timeout, group_name);
}

c10::intrusive_ptr<c10d::Backend> ProcessGroupTutti::split(const c10::intrusive_ptr<c10d::Store>& /*store*/,
                                                           const std::vector<int>& ranks,
                                                           const c10::intrusive_ptr<Options>& opts) {
  const auto timeout = opts && opts->timeout.count() > 0 ? opts->timeout : timeout_;
  return derive(ranks, timeout, opts ? opts->group_name : std::string());
}

c10::intrusive_ptr<c10d::Backend> ProcessGroupTutti::shrink(const std::vector<int64_t>& ranks_to_exclude,
                                                            int shrink_flags,
                                                            const c10::intrusive_ptr<Options>& opts_override) {
  std::vector<bool> out(static_cast<std::size_t>(size_), false);
  for (auto r : ranks_to_exclude) {
    if (r < 0 || r >= size_)
      invalid("shrink",
              "rank " + std::to_string(r) + " to exclude is not in the group (size " + std::to_string(size_) + ")");
    out[static_cast<std::size_t>(r)] = true;
  }
  if (out[static_cast<std::size_t>(rank_)])
    invalid("shrink", "rank " + std::to_string(rank_) + " is among the ranks to exclude: only the others call it");
  std::vector<int> keep;
  for (int r = 0; r < size_; ++r)
    if (!out[static_cast<std::size_t>(r)]) keep.push_back(r);
  if (shrink_flags & 1) abort("shrink_group(SHRINK_ABORT) called");
  const auto timeout = opts_override && opts_override->timeout.count() > 0 ? opts_override->timeout : timeout_;
  // Made by the members that stay, from this group's communicator, failed
  // or aborted as it may be.
  return derive(keep, timeout, group_name_ + ":shrunk");
}

void ProcessGroupTutti::release(const std::string& reason, bool abort_always) {
  tutti::Communicator c;
  bool pending;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!comm_.valid()) return;
    c = std::move(comm_);
    comm_ = tutti::Communicator();
    released_ = Error(ErrorKind::Aborted, "rank " + std::to_string(rank_) + ": " + reason);
    coalescing_ = false;
    coalesced_.clear();
    pending = !stale_.empty();
  }
  // Operations still running fail (Aborted) rather than keep the completion
  // thread waiting for their deadlines. (An abort is logged: a group whose
  // work is done goes quietly.)
  if (abort_always || pending || !watcher_->idle()) c.abort(reason);
  // The completion thread may be running a future's Python callback, which
  // needs the GIL: let go of it while waiting for the thread.
  PyThreadState* saved = (Py_IsInitialized() && PyGILState_Check()) ? PyEval_SaveThread() : nullptr;
  watcher_->stop();
  if (saved) PyEval_RestoreThread(saved);
  std::lock_guard<std::mutex> g(mu_);
  stale_.clear();
}

void ProcessGroupTutti::abort(const std::string& reason) {
  tutti::Communicator c = communicator();
  if (c.valid()) c.abort(reason);
}

void ProcessGroupTutti::abort() {
  // torch's abort ends the group: fail what is pending, let go of it.
  release("abort() called", true);
}

void ProcessGroupTutti::shutdown() { release("the process group was destroyed", false); }

ProcessGroupTutti::~ProcessGroupTutti() { release("the process group was destroyed", false); }

c10::intrusive_ptr<WorkTutti> ProcessGroupTutti::make_work(OpType type, const std::vector<at::Tensor>& inputs,
                                                           std::vector<at::Tensor> outputs,
                                                           std::vector<at::Tensor> keep, std::function<void()> after,
                                                           std::chrono::milliseconds timeout) {
  std::optional<Clock::time_point> deadline;
  if (timeout.count() > 0) deadline = Clock::now() + timeout;
  const std::uint64_t seq = seq_.fetch_add(1, std::memory_order_relaxed) + 1;
  auto w = c10::make_intrusive<WorkTutti>(rank_, type, profiling_title(type), inputs, std::move(outputs),
                                          std::move(keep), std::move(after), deadline, seq);
  // A Work does not keep the backend (nor its communicator) alive.
  w->on_abort =
      [self = c10::weak_intrusive_ptr<ProcessGroupTutti>(
           c10::intrusive_ptr<ProcessGroupTutti>::unsafe_reclaim_from_nonowning(this))](const std::string& why) {
        if (auto pg = self.lock()) pg->abort(why);
      };
  w->watcher = watcher_;
  return w;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTutti::coalesce(c10::intrusive_ptr<WorkTutti> w) {
  std::lock_guard<std::mutex> g(mu_);
  if (coalescing_) coalesced_.push_back(w);
  return w;
}

void ProcessGroupTutti::startCoalescing() {
  std::lock_guard<std::mutex> g(mu_);
  if (coalescing_) invalid("startCoalescing", "called twice without endCoalescing between");
  coalescing_ = true;
  coalesced_.clear();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTutti::endCoalescing() {
  std::vector<c10::intrusive_ptr<WorkTutti>> parts;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!coalescing_) invalid("endCoalescing", "called without startCoalescing");
    coalescing_ = false;
    parts.swap(coalesced_);
  }
  std::vector<at::Tensor> outputs;
  for (auto& p : parts)
    for (auto& t : p->outputs_) outputs.push_back(t);
  auto w = c10::make_intrusive<WorkTutti>(rank_, OpType::COALESCED, nullptr, std::vector<at::Tensor>{},
                                          std::move(outputs), std::vector<at::Tensor>{}, nullptr, std::nullopt,
                                          seq_.load(std::memory_order_relaxed));
  w->parts_ = std::move(parts);
  w->watcher = watcher_;
  w->on_abort =
      [self = c10::weak_intrusive_ptr<ProcessGroupTutti>(
           c10::intrusive_ptr<ProcessGroupTutti>::unsafe_reclaim_from_nonowning(this))](const std::string& why) {
        if (auto pg = self.lock()) pg->abort(why);
      };
  w->poll();
  return w;
}

template <class Blocking, class Async>
c10::intrusive_ptr<c10d::Work> ProcessGroupTutti::run(OpType type, const std::vector<at::Tensor>& inputs,
                                                      std::size_t bytes, std::chrono::milliseconds timeout,
                                                      Blocking&& blocking, Async&& async,
                                                      std::vector<at::Tensor> outputs, std::vector<at::Tensor> keep,
                                                      std::function<void()> after) {
  // The Work exists before the operation starts: its profiler event (begun
  // by c10d::Work) spans the operation, and ends when the Work finishes.
  if constexpr (!std::is_same_v<std::decay_t<Blocking>, std::nullptr_t>) {
    if (bytes <= inline_bytes_) {
      // Runs here; finished when it returns, so nothing is kept alive.
      auto w = make_work(type, inputs, std::move(outputs), {}, std::move(after), std::chrono::milliseconds(0));
      std::exception_ptr err;
      {
        std::lock_guard<std::mutex> g(post_mu_);
        try {
          tutti::Communicator c = live(event_title(type) + 6);
          TimeoutScope ts(c, timeout);
          blocking(c);
        } catch (const Error& e) {
          if (e.kind() == ErrorKind::InvalidArgument) throw;
          err = std::current_exception();
        }
      }
      if (err) {
        w->fail(err);
      } else {
        w->poll();
      }
      return coalesce(std::move(w));
    }
  }
  auto w = make_work(type, inputs, std::move(outputs), std::move(keep), std::move(after), timeout);
  {
    std::lock_guard<std::mutex> g(post_mu_);
    try {
      tutti::Communicator c = live(event_title(type) + 6);
      w->works_ = async(c);
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::InvalidArgument) throw;
      w->fail(std::current_exception());
    }
  }
  return coalesce(std::move(w));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTutti::broadcast(std::vector<at::Tensor>& tensors,
                                                            const c10d::BroadcastOptions& opts) {
  const char* op = "broadcast";
  at::Tensor& t = single(tensors, op, "the tensor");
  const DataType dt = dtype_of(t, op);
  if (opts.rootTensor != 0) invalid(op, "rootTensor must be 0 (one tensor per process)");
  const int root = static_cast<int>(opts.rootRank);
  Stage st;
  at::Tensor b = root == rank_ ? st.in(t) : st.inout(t);
  void* p = b.data_ptr();
  const std::size_t n = count_of(b);
  return run(
      OpType::BROADCAST, {t}, bytes_of(b), opts.timeout, [&](tutti::Communicator& c) { c.broadcast(p, n, dt, root); },
      [&](tutti::Communicator& c) { return std::vector<tutti::Work>{c.ibroadcast(p, n, dt, root)}; }, {t},
      std::move(st.keep), st.after());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTutti::allreduce(std::vector<at::Tensor>& tensors,
                                                            const c10d::AllreduceOptions& opts) {
  const char* op = "allreduce";
  if (tensors.size() == 1 && tensors[0].defined() && tensors[0].is_sparse()) return allreduce_sparse(tensors, opts);
  at::Tensor& t = single(tensors, op, "the tensor");
  const DataType dt = dtype_of(t, op);
  const tutti::ReduceOp rop = reduce_op(opts.reduceOp, op);
  check_op(rop, dt, op);
  Stage st;
  at::Tensor b = st.inout(t);
  void* p = b.data_ptr();
  const std::size_t n = count_of(b);
  return run(
      OpType::ALLREDUCE, {t}, bytes_of(b), opts.timeout,
      [&](tutti::Communicator& c) { c.all_reduce(p, p, n, dt, rop); },
      [&](tutti::Communicator& c) { return std::vector<tutti::Work>{c.iall_reduce(p, p, n, dt, rop)}; }, {t},
      std::move(st.keep), st.after());
}

// Sparse COO tensors: SUM and AVG (a sum of the ranks' entries; the other
// reductions would need the zeros a sparse tensor leaves out). Runs in the
// calling thread whatever its size, and returns a finished Work.
c10::intrusive_ptr<c10d::Work> ProcessGroupTutti::allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                                   const c10d::AllreduceOptions& opts) {
  const char* op = "allreduce";
  if (tensors.size() != 1) invalid(op, "expects one tensor per process, got " + std::to_string(tensors.size()));
  at::Tensor& t = tensors[0];
  if (!t.defined()) invalid(op, "the tensor is undefined");
  if (t.device().type() != c10::DeviceType::CPU)
    invalid(op, "tutti moves CPU tensors; the tensor is on " + t.device().str());
  if (!t.is_sparse()) invalid(op, "allreduce_sparse takes a sparse COO tensor, the tensor is " + layout_name(t));
  const DataType dt = dtype_of(t, op);
  const tutti::ReduceOp rop = reduce_op(opts.reduceOp, op);
  if (rop.kind != tutti::ReduceOpKind::Sum && rop.kind != tutti::ReduceOpKind::Avg)
    invalid(op,
            "sparse tensors are reduced with SUM or AVG only (the other reductions would need the zeros a "
            "sparse tensor leaves out)");
  if (dt == DataType::Bool) invalid(op, "sparse tensors of dtype Bool cannot be summed");
  return run(
      OpType::ALLREDUCE, {t}, 0, opts.timeout,
      [&](tutti::Communicator& c) {
        at::Tensor sum = sparse_all_reduce(c, t, dt, rop.kind == tutti::ReduceOpKind::Avg);
        t.copy_(sum);
      },
      [&](tutti::Communicator&) { return std::vector<tutti::Work>{}; }, {t}, {}, nullptr);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTutti::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                      const c10d::AllreduceCoalescedOptions& opts) {
  const char* op = "allreduce_coalesced";
  if (tensors.empty()) invalid(op, "the tensor list is empty");
  const tutti::ReduceOp rop = reduce_op(opts.reduceOp, op);
  // One all_reduce per dtype (in order of first appearance) over the
  // tensors of that dtype flattened into one buffer.
  std::vector<at::ScalarType> order;
  std::map<at::ScalarType, std::vector<at::Tensor>> groups;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i];
    check_tensor(t, op, "tensor " + std::to_string(i));
    check_op(rop, dtype_of(t, op), op);
    if (!groups.count(t.scalar_type())) order.push_back(t.scalar_type());
    groups[t.scalar_type()].push_back(t);
  }
  Stage st;
  struct Part {
    void* p;
    std::size_t n;
    DataType dt;
  };
  std::vector<Part> parts;
  std::size_t bytes = 0;
  for (auto type : order) {
    auto& g = groups[type];
    at::Tensor flat;
    if (g.size() == 1 && g[0].is_contiguous()) {
      flat = st.inout(g[0]);
    } else {
      flat = st.flat_in(g);
      st.flat_back(flat, 0, g);
    }
    parts.push_back({flat.data_ptr(), count_of(flat), dtype_of(flat, op)});
    bytes += bytes_of(flat);
  }
  return run(
      OpType::ALLREDUCE_COALESCED, tensors, bytes, opts.timeout,
      [&](tutti::Communicator& c) {
        for (auto& x : parts) c.all_reduce(x.p, x.p, x.n, x.dt, rop);
      },
      [&](tutti::Communicator& c) {
        std::vector<tutti::Work> ws;
        for (auto& x : parts) ws.push_back(c.iall_reduce(x.p, x.p, x.n, x.dt, rop));
        return ws;
      },
      tensors, std::move(st.keep), st.after());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTutti::reduce(std::vector<at::Tensor>& tensors,
                                                         const c10d::ReduceOptions& opts) {
  const char* op = "reduce";
  at::Tensor& t = single(tensors, op, "the tensor");
  const DataType dt = dtype_of(t, op);
  if (opts.rootTensor != 0) invalid(op, "rootTensor must be 0 (one tensor per process)");
  const tutti::ReduceOp rop = reduce_op(opts.reduceOp, op);
  check_op(rop, dt, op);
  const int root = static_cast<int>(opts.rootRank);
  Stage st;
  at::Tensor b = root == rank_ ? st.inout(t) : st.in(t);
  void* p = b.data_ptr();
  void* r = root == rank_ ? p : nullptr;
  const std::size_t n = count_of(b);
  return run(
      OpType::REDUCE, {t}, bytes_of(b), opts.timeout, [&](tutti::Communicator& c) { c.reduce(p, r, n, dt, rop, root); },
      [&](tutti::Communicator& c) { return std::vector<tutti::Work>{c.ireduce(p, r, n, dt, rop, root)}; }, {t},
      std::move(st.keep), st.after());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTutti::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllgatherOptions& opts) {
  const char* op = "allgather";
  at::Tensor& in = single(inputs, op, "the input");
  const DataType dt = dtype_of(in, op);
  if (outputs.size() != 1) invalid(op, "expects one output list per process, got " + std::to_string(outputs.size()));
  auto& outs = outputs[0];
  if (static_cast<int>(outs.size()) != size_)
    invalid(op, "the output list has " + std::to_string(outs.size()) + " tensors, the group has " +
                    std::to_string(size_) + " ranks");
  Stage st;
  at::Tensor s = st.in(in);
  std::vector<void*> ptrs;
  for (std::size_t i = 0; i < outs.size(); ++i) {
    check_tensor(outs[i], op, "output " + std::to_string(i));
    same_kind(in, outs[i], op, "output " + std::to_string(i));
    same_numel(count_of(in), outs[i], op, "output " + std::to_string(i));
    ptrs.push_back(st.out(outs[i]).data_ptr());
  }
  const void* sp = s.data_ptr();
  const std::size_t n = count_of(s);
  return run(
      OpType::ALLGATHER, {in}, bytes_of(s) * size_, opts.timeout,
      [&](tutti::Communicator& c) { c.all_gather(sp, std::span<void* const>(ptrs), n, dt); },
      [&](tutti::Communicator& c) {
        return std::vector<tutti::Work>{c.iall_gather(sp, std::span<void* const>(ptrs), n, dt)};
      },
      outs, std::move(st.keep), st.after());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTutti::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                  const c10d::AllgatherOptions& opts) {
  const char* op = "_allgather_base";
  check_tensor(input, op, "the input");
  check_tensor(output, op, "the output");
  const DataType dt = dtype_of(input, op);
  same_kind(input, output, op, "the output");
  same_numel(count_of(input) * size_, output, op, "the output (group size x input)");
  Stage st;
  at::Tensor s = st.in(input);
  at::Tensor r = st.out(output);
  const void* sp = s.data_ptr();
  void* rp = r.data_ptr();
  const std::size_t n = count_of(s);
  return run(
      OpType::_ALLGATHER_BASE, {input}, bytes_of(r), opts.timeout,
      [&](tutti::Communicator& c) { c.all_gather(sp, rp, n, dt); },
      [&](tutti::Communicator& c) { return std::vector<tutti::Work>{c.iall_gather(sp, rp, n, dt)}; }, {output},
      std::move(st.keep), st.after());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTutti::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                                      std::vector<at::Tensor>& inputs,
                                                                      const c10d::AllgatherOptions& opts) {
  const char* op = "allgather_coalesced";
  if (inputs.empty()) invalid(op, "the input list is empty");
  if (static_cast<int>(outputs.size()) != size_)
    invalid(op,
            "expects one output list per rank (" + std::to_string(size_) + "), got " + std::to_string(outputs.size()));
  for (std::size_t r = 0; r < outputs.size(); ++r) {
    if (outputs[r].size() != inputs.size())
      invalid(op, "output list " + std::to_string(r) + " has " + std::to_string(outputs[r].size()) +
                      " tensors, the input list " + std::to_string(inputs.size()));
    for (std::size_t j = 0; j < inputs.size(); ++j) {
      check_tensor(outputs[r][j], op, "output " + std::to_string(r) + "/" + std::to_string(j));
      same_kind(inputs[j], outputs[r][j], op, "output " + std::to_string(r) + "/" + std::to_string(j));
      same_numel(count_of(inputs[j]), outputs[r][j], op, "output " + std::to_string(r) + "/" + std::to_string(j));
    }
  }
  // Per dtype: the inputs flattened, gathered into size x that, copied out.
  std::vector<at::ScalarType> order;
  std::map<at::ScalarType, std::vector<std::size_t>> groups;
  for (std::size_t j = 0; j < inputs.size(); ++j) {
    check_tensor(inputs[j], op, "input " + std::to_string(j));
    dtype_of(inputs[j], op);
    if (!groups.count(inputs[j].scalar_type())) order.push_back(inputs[j].scalar_type());
    groups[inputs[j].scalar_type()].push_back(j);
  }
  Stage st;
  struct Part {
    const void* s;
    void* r;
    std::size_t n;
    DataType dt;
  };
  std::vector<Part> parts;
  std::size_t bytes = 0;
  std::vector<at::Tensor> result;
  for (auto& list : outputs)
    for (auto& t : list) result.push_back(t);
  for (auto type : order) {
    std::vector<at::Tensor> ins;
    for (auto j : groups[type]) ins.push_back(inputs[j]);
    at::Tensor flat = st.flat_in(ins);
    const std::int64_t m = flat.numel();
    at::Tensor out = at::empty({m * size_}, flat.options());
    st.keep.push_back(out);
    for (int r = 0; r < size_; ++r) {
      std::vector<at::Tensor> dst;
      for (auto j : groups[type]) dst.push_back(outputs[r][j]);
      st.flat_back(out, r * m, dst);
    }
    parts.push_back({flat.data_ptr(), out.data_ptr(), static_cast<std::size_t>(m), dtype_of(flat, op)});
    bytes += bytes_of(out);
  }
  return run(
      OpType::ALLGATHER_COALESCED, inputs, bytes, opts.timeout,
      [&](tutti::Communicator& c) {
        for (auto& x : parts) c.all_gather(x.s, x.r, x.n, x.dt);
      },
      [&](tutti::Communicator& c) {
        std::vector<tutti::Work> ws;
        for (auto& x : parts) ws.push_back(c.iall_gather(x.s, x.r, x.n, x.dt));
        return ws;
      },
      std::move(result), std::move(st.keep), st.after());
}

// One all_gather per dtype (in order of first appearance): the inputs of
// that dtype flattened, gathered into size x that, copied out to each
// output's blocks.
c10::intrusive_ptr<c10d::Work> ProcessGroupTutti::allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                                  std::vector<at::Tensor>& inputs,
                                                                                  const c10d::AllgatherOptions& opts) {
  const char* op = "allgather_into_tensor_coalesced";
  if (inputs.empty()) invalid(op, "the input list is empty");
  if (outputs.size() != inputs.size())
    invalid(op, "has " + std::to_string(outputs.size()) + " outputs for " + std::to_string(inputs.size()) + " inputs");
  std::vector<at::ScalarType> order;
  std::map<at::ScalarType, std::vector<std::size_t>> groups;
  for (std::size_t j = 0; j < inputs.size(); ++j) {
    check_tensor(inputs[j], op, "input " + std::to_string(j));
    check_tensor(outputs[j], op, "output " + std::to_string(j));
    dtype_of(inputs[j], op);
    same_kind(inputs[j], outputs[j], op, "output " + std::to_string(j));
    same_numel(count_of(inputs[j]) * size_, outputs[j], op, "output " + std::to_string(j) + " (group size x input)");
    if (!groups.count(inputs[j].scalar_type())) order.push_back(inputs[j].scalar_type());
    groups[inputs[j].scalar_type()].push_back(j);
  }
  Stage st;
  struct Part {
    const void* s;
    void* r;
    std::size_t n;
    DataType dt;
  };
  std::vector<Part> parts;
  std::size_t bytes = 0;
  // Outputs that are not contiguous get their blocks in a stand-in, copied
  // to them last.
  std::vector<std::pair<at::Tensor, at::Tensor>> staged;
  std::vector<at::Tensor> flat_out(outputs.size());
  for (std::size_t j = 0; j < outputs.size(); ++j) {
    st.keep.push_back(outputs[j]);
    if (outputs[j].is_contiguous()) {
      flat_out[j] = outputs[j].view({-1});
    } else {
      flat_out[j] = at::empty({outputs[j].numel()}, outputs[j].options().memory_format(std::nullopt));
      st.keep.push_back(flat_out[j]);
      staged.emplace_back(outputs[j], flat_out[j].view(outputs[j].sizes()));
    }
  }
  for (auto type : order) {
    std::vector<at::Tensor> ins;
    for (auto j : groups[type]) ins.push_back(inputs[j]);
    at::Tensor flat = st.flat_in(ins);
    const std::int64_t m = flat.numel();
    at::Tensor out = at::empty({m * size_}, flat.options());
    st.keep.push_back(out);
    // Rank r's block of output j is rank r's input j: at r * m + (j's offset).
    for (int r = 0; r < size_; ++r) {
      std::int64_t off = 0;
      for (auto j : groups[type]) {
        const std::int64_t n = inputs[j].numel();
        if (n) st.back.emplace_back(flat_out[j].narrow(0, r * n, n), out.narrow(0, r * m + off, n));
        off += n;
      }
    }
    parts.push_back({flat.data_ptr(), out.data_ptr(), static_cast<std::size_t>(m), dtype_of(flat, op)});
    bytes += bytes_of(out);
  }
  for (auto& b : staged) st.back.push_back(b);
  return run(
      OpType::ALLGATHER_COALESCED, inputs, bytes, opts.timeout,
      [&](tutti::Communicator& c) {
        for (auto& x : parts) c.all_gather(x.s, x.r, x.n, x.dt);
      },
      [&](tutti::Communicator& c) {
        std::vector<tutti::Work> ws;
        for (auto& x : parts) ws.push_back(c.iall_gather(x.s, x.r, x.n, x.dt));
        return ws;
      },
      outputs, std::move(st.keep), st.after());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTutti::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                         std::vector<at::Tensor>& inputs,
                                                         const c10d::GatherOptions& opts) {
  const char* op = "gather";
  at::Tensor& in = single(inputs, op, "the input");
  const DataType dt = dtype_of(in, op);
  const int root = static_cast<int>(opts.rootRank);
  if (root < 0 || root >= size_)
    invalid(op, "root " + std::to_string(root) + " is not a rank of the group (size " + std::to_string(size_) + ")");
  Stage st;
  at::Tensor s = st.in(in);
  std::vector<void*> ptrs;
  std::vector<at::Tensor> result;
  if (rank_ == root) {
    if (outputs.size() != 1) invalid(op, "the root expects one output list, got " + std::to_string(outputs.size()));
    auto& outs = outputs[0];
    if (static_cast<int>(outs.size()) != size_)
      invalid(op, "the output list has " + std::to_string(outs.size()) + " tensors, the group has " +
                      std::to_string(size_) + " ranks");
    for (std::size_t i = 0; i < outs.size(); ++i) {
      check_tensor(outs[i], op, "output " + std::to_string(i));
      same_kind(in, outs[i], op, "output " + std::to_string(i));
      same_numel(count_of(in), outs[i], op, "output " + std::to_string(i));
      ptrs.push_back(st.out(outs[i]).data_ptr());
    }
    result = outs;
  } else if (!outputs.empty() && !(outputs.size() == 1 && outputs[0].empty())) {
    invalid(op, "only the root (rank " + std::to_string(root) + ") passes output tensors");
  }
  const void* sp = s.data_ptr();
  const std::size_t n = count_of(s);
  return run(
      OpType::GATHER, {in}, bytes_of(s) * (rank_ == root ? size_ : 1), opts.timeout,
      [&](tutti::Communicator& c) { c.gather(sp, std::span<void* const>(ptrs), n, dt, root); },
      [&](tutti::Communicator& c) {
        return std::vector<tutti::Work>{c.igather(sp, std::span<void* const>(ptrs), n, dt, root)};
      },
      std::move(result), std::move(st.keep), st.after());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTutti::scatter(std::vector<at::Tensor>& outputs,
                                                          std::vector<std::vector<at::Tensor>>& inputs,
                                                          const c10d::ScatterOptions& opts) {
  const char* op = "scatter";
  at::Tensor& out = single(outputs, op, "the output");
  const DataType dt = dtype_of(out, op);
  const int root = static_cast<int>(opts.rootRank);
  if (root < 0 || root >= size_)
    invalid(op, "root " + std::to_string(root) + " is not a rank of the group (size " + std::to_string(size_) + ")");
  Stage st;
  at::Tensor r = st.out(out);
  std::vector<const void*> ptrs;
  if (rank_ == root) {
    if (inputs.size() != 1) invalid(op, "the root expects one input list, got " + std::to_string(inputs.size()));
    auto& ins = inputs[0];
    if (static_cast<int>(ins.size()) != size_)
      invalid(op, "the input list has " + std::to_string(ins.size()) + " tensors, the group has " +
                      std::to_string(size_) + " ranks");
    for (std::size_t i = 0; i < ins.size(); ++i) {
      check_tensor(ins[i], op, "input " + std::to_string(i));
      same_kind(out, ins[i], op, "input " + std::to_string(i));
      same_numel(count_of(out), ins[i], op, "input " + std::to_string(i));
      ptrs.push_back(st.in(ins[i]).data_ptr());
    }
  } else if (!inputs.empty() && !(inputs.size() == 1 && inputs[0].empty())) {
    invalid(op, "only the root (rank " + std::to_string(root) + ") passes input tensors");
  }
  void* rp = r.data_ptr();
  const std::size_t n = count_of(r);
  return run(
      OpType::SCATTER, rank_ == root ? inputs[0] : std::vector<at::Tensor>{}, bytes_of(r) * (rank_ == root ? size_ : 1),
      opts.timeout, [&](tutti::Communicator& c) { c.scatter(std::span<const void* const>(ptrs), rp, n, dt, root); },
      [&](tutti::Communicator& c) {
        return std::vector<tutti::Work>{c.iscatter(std::span<const void* const>(ptrs), rp, n, dt, root)};
      },
      {out}, std::move(st.keep), st.after());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTutti::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                 std::vector<std::vector<at::Tensor>>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter";
  at::Tensor& out = single(outputs, op, "the output");
  const DataType dt = dtype_of(out, op);
  const tutti::ReduceOp rop = reduce_op(opts.reduceOp, op);
  check_op(rop, dt, op);
  if (inputs.size() != 1) invalid(op, "expects one input list per process, got " + std::to_string(inputs.size()));
  auto& ins = inputs[0];
  if (static_cast<int>(ins.size()) != size_)
    invalid(op, "the input list has " + std::to_string(ins.size()) + " tensors, the group has " +
                    std::to_string(size_) + " ranks");
  Stage st;
  at::Tensor r = st.out(out);
  std::vector<const void*> ptrs;
  for (std::size_t i = 0; i < ins.size(); ++i) {
    check_tensor(ins[i], op, "input " + std::to_string(i));
    same_kind(out, ins[i], op, "input " + std::to_string(i));
    same_numel(count_of(out), ins[i], op, "input " + std::to_string(i));
    ptrs.push_back(st.in(ins[i]).data_ptr());
  }
  void* rp = r.data_ptr();
  const std::size_t n = count_of(r);
  return run(
      OpType::REDUCE_SCATTER, ins, bytes_of(r) * size_, opts.timeout,
      [&](tutti::Communicator& c) { c.reduce_scatter(std::span<const void* const>(ptrs), rp, n, dt, rop); },
      [&](tutti::Communicator& c) {
        return std::vector<tutti::Work>{c.ireduce_scatter(std::span<const void* const>(ptrs), rp, n, dt, rop)};
      },
      {out}, std::move(st.keep), st.after());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTutti::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                       const c10d::ReduceScatterOptions& opts) {
  const char* op = "_reduce_scatter_base";
  check_tensor(input, op, "the input");
  check_tensor(output, op, "the output");
  const DataType dt = dtype_of(output, op);
  same_kind(output, input, op, "the input");
  same_numel(count_of(output) * size_, input, op, "the input (group size x output)");
  const tutti::ReduceOp rop = reduce_op(opts.reduceOp, op);
  check_op(rop, dt, op);
  Stage st;
  at::Tensor s = st.in(input);
  at::Tensor r = st.out(output);
  const void* sp = s.data_ptr();
  void* rp = r.data_ptr();
  const std::size_t n = count_of(r);
  return run(
      OpType::_REDUCE_SCATTER_BASE, {input}, bytes_of(s), opts.timeout,
      [&](tutti::Communicator& c) { c.reduce_scatter(sp, rp, n, dt, rop); },
      [&](tutti::Communicator& c) { return std::vector<tutti::Work>{c.ireduce_scatter(sp, rp, n, dt, rop)}; }, {output},
      std::move(st.keep), st.after());
}

// One reduce_scatter per dtype: rank r's block holds, in order, block r of
// every input of that dtype; the result is copied out to the outputs.
c10::intrusive_ptr<c10d::Work> ProcessGroupTutti::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs, const c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter_tensor_coalesced";
  if (inputs.empty()) invalid(op, "the input list is empty");
  if (outputs.size() != inputs.size())
    invalid(op, "has " + std::to_string(outputs.size()) + " outputs for " + std::to_string(inputs.size()) + " inputs");
  const tutti::ReduceOp rop = reduce_op(opts.reduceOp, op);
  std::vector<at::ScalarType> order;
  std::map<at::ScalarType, std::vector<std::size_t>> groups;
  for (std::size_t j = 0; j < inputs.size(); ++j) {
    check_tensor(inputs[j], op, "input " + std::to_string(j));
    check_tensor(outputs[j], op, "output " + std::to_string(j));
    check_op(rop, dtype_of(outputs[j], op), op);
    same_kind(outputs[j], inputs[j], op, "input " + std::to_string(j));
    same_numel(count_of(outputs[j]) * size_, inputs[j], op, "input " + std::to_string(j) + " (group size x output)");
    if (!groups.count(inputs[j].scalar_type())) order.push_back(inputs[j].scalar_type());
    groups[inputs[j].scalar_type()].push_back(j);
  }
  Stage st;
  struct Part {
    const void* s;
    void* r;
    std::size_t n;
    DataType dt;
  };
  std::vector<Part> parts;
  std::size_t bytes = 0;
  for (auto type : order) {
    std::int64_t m = 0;  // elements of one rank's block
    for (auto j : groups[type]) m += outputs[j].numel();
    at::Tensor in = at::empty({m * size_}, inputs[groups[type][0]].options().memory_format(std::nullopt));
    at::Tensor out = at::empty({m}, in.options());
    for (int r = 0; r < size_; ++r) {
      std::int64_t off = 0;
      for (auto j : groups[type]) {
        const std::int64_t n = outputs[j].numel();
        if (n) in.narrow(0, r * m + off, n).copy_(inputs[j].reshape({-1}).narrow(0, r * n, n));
        off += n;
      }
    }
    st.keep.push_back(in);
    st.keep.push_back(out);
    std::vector<at::Tensor> outs;
    for (auto j : groups[type]) outs.push_back(outputs[j]);
    st.flat_back(out, 0, outs);
    parts.push_back({in.data_ptr(), out.data_ptr(), static_cast<std::size_t>(m), dtype_of(in, op)});
    bytes += bytes_of(in);
  }
  return run(
      OpType::REDUCE_SCATTER_TENSOR_COALESCED, inputs, bytes, opts.timeout,
      [&](tutti::Communicator& c) {
        for (auto& x : parts) c.reduce_scatter(x.s, x.r, x.n, x.dt, rop);
      },
      [&](tutti::Communicator& c) {
        std::vector<tutti::Work> ws;
        for (auto& x : parts) ws.push_back(c.ireduce_scatter(x.s, x.r, x.n, x.dt, rop));
        return ws;
      },
      outputs, std::move(st.keep), st.after());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTutti::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                                std::vector<int64_t>& outputSplitSizes,
                                                                std::vector<int64_t>& inputSplitSizes,
                                                                const c10d::AllToAllOptions& opts) {
  const char* op = "alltoall_base";
  check_tensor(input, op, "the input");
  check_tensor(output, op, "the output");
  const DataType dt = dtype_of(input, op);
  same_kind(input, output, op, "the output");
  Stage st;
  at::Tensor s = st.in(input);
  at::Tensor r = st.out(output);
  const void* sp = s.data_ptr();
  void* rp = r.data_ptr();
  if (outputSplitSizes.empty() && inputSplitSizes.empty()) {
    if (count_of(input) % size_ != 0)
      invalid(op, "the input has " + std::to_string(input.numel()) + " elements, not a multiple of the group size " +
                      std::to_string(size_));
    same_numel(count_of(input), output, op, "the output");
    const std::size_t n = count_of(s) / size_;
    return run(
        OpType::ALLTOALL_BASE, {input}, bytes_of(s), opts.timeout,
        [&](tutti::Communicator& c) { c.all_to_all(sp, rp, n, dt); },
        [&](tutti::Communicator& c) { return std::vector<tutti::Work>{c.iall_to_all(sp, rp, n, dt)}; }, {output},
        std::move(st.keep), st.after());
  }
  std::vector<std::size_t> sc, sd, rc, rd;
  split_lengths(input, inputSplitSizes, size_, "the input", sc, sd);
  split_lengths(output, outputSplitSizes, size_, "the output", rc, rd);
  return run(
      OpType::ALLTOALL_BASE, {input}, std::max(bytes_of(s), bytes_of(r)), opts.timeout,
      [&](tutti::Communicator& c) { c.all_to_all_v(sp, sc, sd, rp, rc, rd, dt); },
      [&](tutti::Communicator& c) { return std::vector<tutti::Work>{c.iall_to_all_v(sp, sc, sd, rp, rc, rd, dt)}; },
      {output}, std::move(st.keep), st.after());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTutti::alltoall(std::vector<at::Tensor>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::AllToAllOptions& opts) {
  const char* op = "alltoall";
  if (static_cast<int>(inputs.size()) != size_ || static_cast<int>(outputs.size()) != size_)
    invalid(op, "expects one input and one output tensor per rank (" + std::to_string(size_) + "), got " +
                    std::to_string(inputs.size()) + " and " + std::to_string(outputs.size()));
  for (int i = 0; i < size_; ++i) {
    check_tensor(inputs[static_cast<std::size_t>(i)], op, "input " + std::to_string(i));
    check_tensor(outputs[static_cast<std::size_t>(i)], op, "output " + std::to_string(i));
  }
  const DataType dt = dtype_of(inputs[0], op);
  for (int i = 0; i < size_; ++i) {
    same_kind(inputs[0], inputs[i], op, "input " + std::to_string(i));
    same_kind(inputs[0], outputs[i], op, "output " + std::to_string(i));
  }
  Stage st;
  at::Tensor s = st.flat_in(inputs);
  std::int64_t total_out = 0;
  for (auto& t : outputs) total_out += t.numel();
  at::Tensor r = at::empty({total_out}, s.options());
  st.keep.push_back(r);
  st.flat_back(r, 0, outputs);
  std::vector<std::size_t> sc, sd, rc, rd;
  std::size_t so = 0, ro = 0;
  for (int i = 0; i < size_; ++i) {
    sc.push_back(count_of(inputs[i]));
    sd.push_back(so);
    so += sc.back();
    rc.push_back(count_of(outputs[i]));
    rd.push_back(ro);
    ro += rc.back();
  }
  const void* sp = s.data_ptr();
  void* rp = r.data_ptr();
  return run(
      OpType::ALLTOALL, inputs, std::max(bytes_of(s), bytes_of(r)), opts.timeout,
      [&](tutti::Communicator& c) { c.all_to_all_v(sp, sc, sd, rp, rc, rd, dt); },
      [&](tutti::Communicator& c) { return std::vector<tutti::Work>{c.iall_to_all_v(sp, sc, sd, rp, rc, rd, dt)}; },
      outputs, std::move(st.keep), st.after());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTutti::send(std::vector<at::Tensor>& tensors, int dstRank, int tag) {
  const char* op = "send";
  at::Tensor& t = single(tensors, op, "the tensor");
  const DataType dt = dtype_of(t, op);
  Stage st;
  at::Tensor b = st.in(t);
  const void* p = b.data_ptr();
  const std::size_t n = count_of(b);
  return run(
      OpType::SEND, {t}, 0, std::chrono::milliseconds(0), nullptr,
      [&](tutti::Communicator& c) { return std::vector<tutti::Work>{c.isend(p, n, dt, dstRank, tag)}; }, {t},
      std::move(st.keep), nullptr);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTutti::recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) {
  const char* op = "recv";
  at::Tensor& t = single(tensors, op, "the tensor");
  const DataType dt = dtype_of(t, op);
  if (srcRank < 0) invalid(op, "source rank " + std::to_string(srcRank) + " is negative (use recvAnysource)");
  Stage st;
  at::Tensor b = st.out(t);
  void* p = b.data_ptr();
  const std::size_t n = count_of(b);
  return run(
      OpType::RECV, {t}, 0, std::chrono::milliseconds(0), nullptr,
      [&](tutti::Communicator& c) { return std::vector<tutti::Work>{c.irecv(p, n, dt, srcRank, tag)}; }, {t},
      std::move(st.keep), st.after());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTutti::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  const char* op = "recvAnysource";
  at::Tensor& t = single(tensors, op, "the tensor");
  const DataType dt = dtype_of(t, op);
  Stage st;
  at::Tensor b = st.out(t);
  void* p = b.data_ptr();
  const std::size_t n = count_of(b);
  return run(
      OpType::RECVANYSOURCE, {t}, 0, std::chrono::milliseconds(0), nullptr,
      [&](tutti::Communicator& c) { return std::vector<tutti::Work>{c.irecv(p, n, dt, tutti::kAnySource, tag)}; }, {t},
      std::move(st.keep), st.after());
}

c10::intrusive_ptr<c10d::Work> ProcessGroupTutti::barrier(const c10d::BarrierOptions& opts) {
  return run(
      OpType::BARRIER, {}, 0, opts.timeout, [&](tutti::Communicator& c) { c.barrier(); },
      [&](tutti::Communicator& c) { return std::vector<tutti::Work>{c.ibarrier()}; }, {}, {}, nullptr);
}

// ProcessGroupGloo's protocol and messages (user code and torch's tests
// match them): every rank but 0 sends rank 0 a token and waits for its
// answer; rank 0 waits for every token until the timeout, then answers every
// rank that arrived: passed, or failed with the ranks that did not arrive.
// Each call has a tag of its own (a counter every member keeps), so that a
// token that comes after its barrier failed never passes a later one.
void ProcessGroupTutti::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  RECORD_FUNCTION("tutti:monitored_barrier", std::vector<c10::IValue>());  // a profiler event, as every op
  const auto timeout = opts.timeout == c10d::kUnsetTimeout ? timeout_ : opts.timeout;
  const auto ms = std::to_string(timeout.count());
  const auto start = Clock::now();
  seq_.fetch_add(1, std::memory_order_relaxed);
  const int tag = kMonitoredBarrierTag | static_cast<int>(monitored_barriers_.fetch_add(1) & 0xffffff);
  if (size_ == 1) return;
  auto join = [](const std::vector<int>& v) {
    std::string out;
    for (int r : v) out.append(out.empty() ? "" : ", ").append(std::to_string(r));
    return out.empty() ? std::string("none") : out;
  };
  // Answer: [passed (1) or failed (0), then 1 for each rank that did not arrive].
  at::Tensor answer = at::zeros({size_}, at::kByte);
  if (rank_ != 0) {
    at::Tensor token = at::ones({1}, at::kByte);
    tutti::Work s, r;
    // Rank 0 answers once every rank arrived or its timeout passed: wait
    // for that and the group's own timeout, whichever is longer.
    const auto until = start + std::max(timeout_, timeout) + std::chrono::seconds(1);
    std::string why;
    try {
      {
        std::lock_guard<std::mutex> g(post_mu_);
        tutti::Communicator c = live("monitoredBarrier");
        s = c.isend(token.data_ptr(), 1, DataType::UInt8, 0, tag);
        r = c.irecv(answer.data_ptr(), static_cast<std::size_t>(size_), DataType::UInt8, 0, tag);
      }
      auto ms_until = [](Clock::time_point t) {
        return std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now());
      };
      auto left = [&] { return std::max(std::chrono::milliseconds(0), ms_until(until)); };
      if (!s.wait(left()) || !r.wait(left())) {
        why = "Timed out after " + std::to_string(-ms_until(start).count()) + " ms waiting for rank 0's answer";
      } else if (answer[0].item<std::uint8_t>() != 1) {
        std::vector<int> missing;
        for (int i = 1; i < size_; ++i)
          if (answer[i].item<std::uint8_t>()) missing.push_back(i);
        why = "rank 0 reports that rank(s) " + join(missing) + " failed to pass monitoredBarrier in " + ms + " ms";
      }
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::InvalidArgument) throw;
      why = e.what();
    }
    if (!why.empty()) {
      std::lock_guard<std::mutex> g(mu_);
      if (!s.test()) stale_.emplace_back(s, token);  // (an empty Work tests done)
      if (!r.test()) stale_.emplace_back(r, answer);
      throw Error(ErrorKind::Timeout, "Rank " + std::to_string(rank_) +
                                          " successfully reached monitoredBarrier, but received errors while waiting "
                                          "for send/recv from rank 0: " +
                                          why + ". Please check rank 0 logs for faulty rank.");
    }
    return;
  }
  std::vector<at::Tensor> tokens;
  std::vector<tutti::Work> recvs;
  std::string cause;  // why the group failed, if it did
  {
    std::lock_guard<std::mutex> g(post_mu_);
    try {
      tutti::Communicator c = live("monitoredBarrier");
      for (int r = 1; r < size_; ++r) {
        tokens.push_back(at::zeros({1}, at::kByte));
        recvs.push_back(c.irecv(tokens.back().data_ptr(), 1, DataType::UInt8, r, tag));
      }
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::InvalidArgument) throw;
      cause = e.what();  // failed before this call: every rank is missing
    }
  }
  // Every token until the deadline (a timeout of 0 still takes those that
  // are here); a failed receive (a lost rank, an aborted group) ends the
  // wait for that rank, and its error is reported.
  std::vector<int> arrived, missing;
  const auto deadline = start + timeout;
  for (int r = 1; r < size_; ++r) {
    if (static_cast<std::size_t>(r - 1) >= recvs.size()) {
      missing.push_back(r);
      continue;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    try {
      if (recvs[r - 1].wait(std::max(left, std::chrono::milliseconds(0)))) {
        arrived.push_back(r);
        continue;
      }
    } catch (const std::exception& e) {
      if (cause.empty()) cause = e.what();
    }
    missing.push_back(r);
  }
  std::vector<tutti::Work> sends;
  {
    std::lock_guard<std::mutex> p(post_mu_);
    answer[0] = missing.empty() ? 1 : 0;
    for (int r : missing) answer[r] = 1;
    tutti::Communicator c = communicator();
    if (cause.empty() && c.valid())  // a failed group cannot carry answers
      for (int r : arrived)
        sends.push_back(c.isend(answer.data_ptr(), static_cast<std::size_t>(size_), DataType::UInt8, r, tag));
    std::lock_guard<std::mutex> g(mu_);
    for (int r : missing)
      if (static_cast<std::size_t>(r - 1) < recvs.size()) stale_.emplace_back(recvs[r - 1], tokens[r - 1]);
  }
  for (auto& w : sends) {
    try {
      w.wait();
    } catch (const std::exception& e) {
      if (cause.empty()) cause = e.what();
      std::lock_guard<std::mutex> g(mu_);
      if (!w.test()) stale_.emplace_back(w, answer);  // the send may still read it
    }
  }
  if (missing.empty() && cause.empty()) return;
  if (missing.empty())
    throw Error(ErrorKind::PeerLost,
                "[Rank 0]: every rank arrived at monitoredBarrier, but answering them failed: " + cause);
  // A group that failed (a member lost, or aborted) ended the wait early:
  // the lost ranks are the ones to name; the others may just not have
  // arrived before the failure.
  std::vector<int> lost;
  if (!cause.empty())
    for (int r : communicator().valid() ? communicator().failed_ranks() : std::vector<int>{})
      if (std::find(missing.begin(), missing.end(), r) != missing.end()) lost.push_back(r);
  const std::vector<int>& named = waitAllRanks ? missing : lost.empty() ? missing : lost;
  std::string m = "[Rank 0]: ";
  m += waitAllRanks ? "Ranks " + join(named) : "Rank " + std::to_string(named.front());
  m += " failed to pass monitoredBarrier in " + ms + " ms";
  if (cause.empty()) {
    m += ". Rank 0 timed out in monitoredBarrier after " + ms + " ms";
  } else {
    m += lost.empty() ? ": the group failed while rank 0 waited" : ": rank(s) " + join(lost) + " left or were lost";
  }
  m += "; ranks that did not arrive: " + join(missing) + "; successfully processed ranks: " + join(arrived);
  if (!cause.empty()) m += ". Original exception: " + cause;
  throw Error(cause.empty() ? ErrorKind::Timeout : ErrorKind::PeerLost, m);
}

void ProcessGroupTutti::setSequenceNumberForGroup() { seq_.store(0); }
uint64_t ProcessGroupTutti::getSequenceNumberForGroup() { return seq_.load(); }

}  // namespace tutti_torch
