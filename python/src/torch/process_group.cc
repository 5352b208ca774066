// ProcessGroupTutti: the group's life (made, derived, split, shrunk, ended)
// and its single operations. The coalesced forms are in coalesced.cc,
// monitoredBarrier in monitored_barrier.cc, Work and the completion thread
// in work.cc.
#include "process_group.h"

#include <ATen/ATen.h>
#include <Python.h>

#include <algorithm>
#include <cstdlib>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "run.h"
#include "sparse_all_reduce.h"
#include "tensors.h"

namespace tutti_torch {

using tutti::DataType;
using tutti::Error;
using tutti::ErrorKind;
using Clock = std::chrono::steady_clock;
using c10d::OpType;

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
  reproducible_at_start_ = comm_.reproducible();  // TUTTI_REPRODUCIBLE
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
  auto pg = c10::make_intrusive<ProcessGroupTutti>(live("shrink").shrink(), timeout_, group_name_ + ":shrunk");
  pg->reproducible_at_start_ = reproducible_at_start_;
  return pg;
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
  auto pg = c10::make_intrusive<ProcessGroupTutti>(std::move(*c), timeout, group_name);
  pg->reproducible_at_start_ = reproducible_at_start_;
  return pg;
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

std::function<void(const std::string&)> ProcessGroupTutti::abort_hook() {
  // A Work does not keep the backend (nor its communicator) alive.
  return [self = c10::weak_intrusive_ptr<ProcessGroupTutti>(
              c10::intrusive_ptr<ProcessGroupTutti>::unsafe_reclaim_from_nonowning(this))](const std::string& why) {
    if (auto pg = self.lock()) pg->abort(why);
  };
}

c10::intrusive_ptr<WorkTutti> ProcessGroupTutti::make_work(OpType type, const std::vector<at::Tensor>& inputs,
                                                           std::vector<at::Tensor> outputs,
                                                           std::vector<at::Tensor> keep, std::function<void()> after,
                                                           std::chrono::milliseconds timeout) {
  std::optional<Clock::time_point> deadline;
  if (timeout.count() > 0) deadline = Clock::now() + timeout;
  const std::uint64_t seq = seq_.fetch_add(1, std::memory_order_relaxed) + 1;
  auto w = c10::make_intrusive<WorkTutti>(rank_, type, profiling_title(type), inputs, std::move(outputs),
                                          std::move(keep), std::move(after), deadline, seq);
  w->on_abort = abort_hook();
  w->watcher = watcher_;
  return w;
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

void ProcessGroupTutti::setSequenceNumberForGroup() { seq_.store(0); }
uint64_t ProcessGroupTutti::getSequenceNumberForGroup() { return seq_.load(); }

}  // namespace tutti_torch
