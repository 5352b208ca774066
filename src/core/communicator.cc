// The operations of Communicator: validation, then an algorithm on the
// communicator's op queue (see communicator_impl.h for the thread model).
#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>

#include "common/small_vector.h"
#include "common/tags.h"
#include "core/communicator_impl.h"
#include "core/validate.h"
#include "plan/registry.h"

namespace tutti {

using namespace detail;

namespace {

void describe_reduce(OpContext& c, DataType dtype, const ReduceOp& op) {
  c.dtype_name = dtype_name(dtype);
  c.redop_name = reduce_op_name(op.kind);
}

// Set while a blocking call runs, so that its i* form may run inline.
// initial-exec: read at a fixed offset from the thread pointer instead of
// through a call to __tls_get_addr on every access; one byte of the static
// TLS that glibc keeps for libraries loaded with dlopen.
__attribute__((tls_model("initial-exec"))) thread_local bool t_blocking_call = false;
struct BlockingCall {
  BlockingCall() { t_blocking_call = true; }
  ~BlockingCall() { t_blocking_call = false; }
};

}  // namespace

Communicator::~Communicator() {
  // Tearing it down in a forked child would join threads the child does not
  // have, take locks the parent's threads held at the fork, and say goodbye
  // on the parent's connections: the child leaves it as it is.
  if (impl_ && impl_->generation != detail::fork_generation()) new std::shared_ptr<Impl>(std::move(impl_));
}

int Communicator::rank() const { return impl_->rank; }
int Communicator::size() const { return impl_->size; }
int Communicator::global_rank() const { return impl_->world[impl_->rank]; }
const std::vector<int>& Communicator::world_ranks() const { return impl_->world; }
int Communicator::local_rank() const {
  const auto& job = *impl_->job;
  if (impl_->comm_id == mix64(job.job_id) && job.env_local_rank >= 0) return job.env_local_rank;
  int mine = job.host_of[impl_->world[impl_->rank]], idx = 0;
  for (int r = 0; r < impl_->rank; ++r) idx += job.host_of[impl_->world[r]] == mine;
  return idx;
}

int Communicator::local_size() const {
  const auto& job = *impl_->job;
  if (impl_->comm_id == mix64(job.job_id) && job.env_local_size >= 0) return job.env_local_size;
  int mine = job.host_of[impl_->world[impl_->rank]], n = 0;
  for (int w : impl_->world) n += job.host_of[w] == mine;
  return n;
}

std::chrono::milliseconds Communicator::timeout() const { return impl_->timeout.load(); }
void Communicator::set_timeout(std::chrono::milliseconds t) { impl_->timeout.store(t); }

void Communicator::set_reproducible(bool on) { impl_->reproducible.store(on, std::memory_order_relaxed); }
bool Communicator::reproducible() const { return impl_->reproducible.load(std::memory_order_relaxed); }

void Communicator::abort(const std::string& reason) {
  impl_->abort(ErrorKind::Aborted, "rank " + std::to_string(impl_->rank) + ": " + reason);
}

std::vector<int> Communicator::failed_ranks() const {
  // The transport knows a broken connection before the job's list does
  // (it fails the requests first, then reports the loss); the job's list
  // also holds the losses other ranks told this one about.
  std::vector<int> out;
  {
    std::lock_guard<std::mutex> lock(impl_->job->comms_mu);
    for (const auto& lost : impl_->job->lost) {
      auto it = std::find(impl_->world.begin(), impl_->world.end(), lost.first);
      if (it != impl_->world.end()) out.push_back(static_cast<int>(it - impl_->world.begin()));
    }
  }
  const int me = impl_->world[static_cast<std::size_t>(impl_->rank)];
  for (int m = 0; m < impl_->size; ++m) {
    const int w = impl_->world[static_cast<std::size_t>(m)];
    if (w != me && !impl_->job->transport->peer_failure(w).empty()) out.push_back(m);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string Communicator::trace_json() const { return impl_->trace_json(); }
std::string Communicator::dump_trace() const { return detail::dump_traces("dump_trace() called"); }

// ---- point to point ---------------------------------------------------------

Work Communicator::isend(const void* buf, std::size_t count, DataType dtype, int dst, int tag) {
  Validator v{impl_->rank, impl_->size, "send"};
  std::size_t bytes = v.bytes(count, dtype);
  v.buffer(buf, count, "buffer");
  v.peer(dst, false);
  v.tag(tag);
  std::uint64_t t = p2p_tag(tag);
  impl_->throw_if_aborted();
  RequestPtr req = impl_->job->transport->post_send(impl_->world[dst], impl_->comm_id, t, buf, bytes);
  impl_->recorder.posted("send", impl_->sends_posted + 1, dst, tag, bytes, dtype_name(dtype), req);
  req->context = "rank " + std::to_string(impl_->rank) + ": send #" + std::to_string(++impl_->sends_posted) + " (" +
                 std::to_string(bytes) + " B to rank " + std::to_string(dst) + ", tag " + std::to_string(tag) + "): ";
  req->deadline = deadline_after(impl_->timeout.load());
  std::weak_ptr<Impl> weak = impl_;
  std::string what = req->context;
  req->on_deadline = [weak, what] {
    if (auto self = weak.lock()) self->abort(ErrorKind::Timeout, what + "Timed out waiting for the send to complete");
  };
  req->on_error = [weak, what, r = req.get()] {
    if (auto self = weak.lock())
      if (r->error_kind() != ErrorKind::Aborted) self->abort(r->error_kind(), what + r->error_message());
  };
  return Work(req);
}

void Communicator::send(const void* buf, std::size_t count, DataType dtype, int dst, int tag) {
  isend(buf, count, dtype, dst, tag).wait();
}

Work Communicator::irecv(void* buf, std::size_t count, DataType dtype, int src, int tag) {
  Validator v{impl_->rank, impl_->size, "recv"};
  std::size_t bytes = v.bytes(count, dtype);
  v.buffer(buf, count, "buffer");
  v.peer(src, true);
  v.tag(tag);
  std::uint64_t t = p2p_tag(tag);
  impl_->throw_if_aborted();
  RequestPtr req =
      impl_->job->transport->post_recv(src == kAnySource ? kAnyPeer : impl_->world[src], impl_->comm_id, t, buf, bytes);
  req->source_map = impl_->world_to_comm;
  impl_->recorder.posted("recv", impl_->recvs_posted + 1, src, tag, bytes, dtype_name(dtype), req);
  req->context = "rank " + std::to_string(impl_->rank) + ": recv #" + std::to_string(++impl_->recvs_posted) + " (" +
                 std::to_string(bytes) + " B from " +
                 (src == kAnySource ? std::string("any rank") : "rank " + std::to_string(src)) + ", tag " +
                 std::to_string(tag) + "): ";
  req->deadline = deadline_after(impl_->timeout.load());
  std::weak_ptr<Impl> weak = impl_;
  std::string what = req->context;
  req->on_deadline = [weak, what] {
    if (auto self = weak.lock()) self->abort(ErrorKind::Timeout, what + "Timed out waiting for a message");
  };
  req->on_error = [weak, what, r = req.get()] {
    if (auto self = weak.lock())
      if (r->error_kind() != ErrorKind::Aborted) self->abort(r->error_kind(), what + r->error_message());
  };
  return Work(req);
}

int Communicator::recv(void* buf, std::size_t count, DataType dtype, int src, int tag) {
  Work w = irecv(buf, count, dtype, src, tag);
  w.wait();
  return w.source();
}

// ---- collectives --------------------------------------------------------------
// Each validates its arguments, asks the planner what to run (plan/planner.h)
// and runs it on the communicator's op queue. The lambdas capture the
// buffers by value: an asynchronous operation outlives this frame.

Work Communicator::ibroadcast(void* buf, std::size_t count, DataType dtype, int root) {
  Validator v{impl_->rank, impl_->size, "broadcast"};
  std::size_t bytes = v.bytes(count, dtype);
  v.buffer(buf, count, "buffer");
  v.root(root);
  OpContext c = impl_->make_context("broadcast", bytes);
  c.dtype_name = dtype_name(dtype);
  c.root = root;
  const Plan p = impl_->plan(c, Collective::Broadcast, bytes);
  return impl_->run(
      std::move(c),
      [=, impl = impl_.get()](OpContext& x) {
        impl->run_plan(x, {.recv = buf, .count = count, .bytes = bytes, .dtype = dtype, .root = root}, p);
      },
      t_blocking_call);
}

Work Communicator::ireduce(const void* sendbuf, void* recvbuf, std::size_t count, DataType dtype, ReduceOp op,
                           int root) {
  Validator v{impl_->rank, impl_->size, "reduce"};
  std::size_t bytes = v.bytes(count, dtype);
  v.reduce_op(dtype, op);
  v.root(root);
  v.buffer(sendbuf, count, "sendbuf");
  if (impl_->rank == root) v.buffer(recvbuf, count, "recvbuf");
  OpContext c = impl_->make_context("reduce", bytes);
  describe_reduce(c, dtype, op);
  c.root = root;
  if (impl_->reproducible_for(dtype, op)) [[unlikely]]
    return impl_->run_reproducible(
        std::move(c), Collective::Reduce,
        [=] {
          return OpArgs{
              .send = sendbuf, .recv = recvbuf, .count = count, .bytes = bytes, .dtype = dtype, .op = op, .root = root};
        },
        t_blocking_call);
  const Plan p = impl_->plan(c, Collective::Reduce, bytes);
  return impl_->run(
      std::move(c),
      [=, impl = impl_.get()](OpContext& x) {
        impl->run_plan(
            x,
            {.send = sendbuf, .recv = recvbuf, .count = count, .bytes = bytes, .dtype = dtype, .op = op, .root = root},
            p);
      },
      t_blocking_call);
}

Work Communicator::iall_reduce(const void* sendbuf, void* recvbuf, std::size_t count, DataType dtype, ReduceOp op) {
  Validator v{impl_->rank, impl_->size, "all_reduce"};
  std::size_t bytes = v.bytes(count, dtype);
  v.reduce_op(dtype, op);
  v.buffer(sendbuf, count, "sendbuf");
  v.buffer(recvbuf, count, "recvbuf");
  OpContext c = impl_->make_context("all_reduce", bytes);
  describe_reduce(c, dtype, op);
  if (impl_->reproducible_for(dtype, op)) [[unlikely]]
    return impl_->run_reproducible(
        std::move(c), Collective::AllReduce,
        [=] {
          return OpArgs{.send = sendbuf, .recv = recvbuf, .count = count, .bytes = bytes, .dtype = dtype, .op = op};
        },
        t_blocking_call);
  const Plan p = impl_->plan(c, Collective::AllReduce, bytes);
  return impl_->run(
      std::move(c),
      [=, impl = impl_.get()](OpContext& x) {
        impl->run_plan(x, {.send = sendbuf, .recv = recvbuf, .count = count, .bytes = bytes, .dtype = dtype, .op = op},
                       p);
      },
      t_blocking_call);
}

Work Communicator::igather(const void* sendbuf, std::span<void* const> recvbufs, std::size_t count, DataType dtype,
                           int root) {
  Validator v{impl_->rank, impl_->size, "gather"};
  std::size_t bytes = v.bytes(count, dtype);
  v.root(root);
  v.buffer(sendbuf, count, "sendbuf");
  SmallVector<char*> out;
  if (impl_->rank == root) {
    if (recvbufs.size() != static_cast<std::size_t>(impl_->size))
      v.fail("root needs " + std::to_string(impl_->size) + " receive buffers, got " + std::to_string(recvbufs.size()));
    for (void* p : recvbufs) {
      v.buffer(p, count, "a receive buffer");
      out.push_back(static_cast<char*>(p));
    }
  }
  OpContext c = impl_->make_context("gather", bytes);
  c.dtype_name = dtype_name(dtype);
  c.root = root;
  const Plan p = impl_->plan(c, Collective::Gather, bytes);
  return impl_->run(
      std::move(c),
      [=, impl = impl_.get()](OpContext& x) {
        if (x.rank == root && bytes && out[root] != sendbuf) std::memmove(out[root], sendbuf, bytes);
        impl->run_plan(x, {.send = sendbuf, .count = count, .bytes = bytes, .dtype = dtype, .root = root, .out = out},
                       p);
      },
      t_blocking_call);
}

Work Communicator::igather(const void* sendbuf, void* recvbuf, std::size_t count, DataType dtype, int root) {
  SmallVector<void*> blocks;
  if (impl_->rank == root) {
    Validator{impl_->rank, impl_->size, "gather"}.buffer(recvbuf, count, "recvbuf");
    for (int r = 0; r < impl_->size; ++r)
      blocks.push_back(recvbuf ? static_cast<char*>(recvbuf) + r * count * dtype_size(dtype) : nullptr);
  }
  return igather(sendbuf, std::span<void* const>(blocks.data(), blocks.size()), count, dtype, root);
}

Work Communicator::iall_gather(const void* sendbuf, std::span<void* const> recvbufs, std::size_t count,
                               DataType dtype) {
  Validator v{impl_->rank, impl_->size, "all_gather"};
  std::size_t bytes = v.bytes(count, dtype);
  v.buffer(sendbuf, count, "sendbuf");
  if (recvbufs.size() != static_cast<std::size_t>(impl_->size))
    v.fail("needs " + std::to_string(impl_->size) + " receive buffers, got " + std::to_string(recvbufs.size()));
  SmallVector<char*> out;
  for (void* p : recvbufs) {
    v.buffer(p, count, "a receive buffer");
    out.push_back(static_cast<char*>(p));
  }
  OpContext c = impl_->make_context("all_gather", bytes);
  c.dtype_name = dtype_name(dtype);
  const Plan p = impl_->plan(c, Collective::AllGather, bytes);
  return impl_->run(
      std::move(c),
      [=, impl = impl_.get()](OpContext& x) {
        impl->run_plan(x, {.send = sendbuf, .count = count, .bytes = bytes, .dtype = dtype, .out = out}, p);
      },
      t_blocking_call);
}

Work Communicator::iall_gather(const void* sendbuf, void* recvbuf, std::size_t count, DataType dtype) {
  Validator{impl_->rank, impl_->size, "all_gather"}.buffer(recvbuf, count, "recvbuf");
  SmallVector<void*> blocks;
  for (int r = 0; r < impl_->size; ++r)
    blocks.push_back(recvbuf ? static_cast<char*>(recvbuf) + r * count * dtype_size(dtype) : nullptr);
  return iall_gather(sendbuf, std::span<void* const>(blocks.data(), blocks.size()), count, dtype);
}

Work Communicator::iscatter(std::span<const void* const> sendbufs, void* recvbuf, std::size_t count, DataType dtype,
                            int root) {
  Validator v{impl_->rank, impl_->size, "scatter"};
  std::size_t bytes = v.bytes(count, dtype);
  v.root(root);
  v.buffer(recvbuf, count, "recvbuf");
  SmallVector<const char*> in;
  if (impl_->rank == root) {
    if (sendbufs.size() != static_cast<std::size_t>(impl_->size))
      v.fail("root needs " + std::to_string(impl_->size) + " send buffers, got " + std::to_string(sendbufs.size()));
    for (const void* p : sendbufs) {
      v.buffer(p, count, "a send buffer");
      in.push_back(static_cast<const char*>(p));
    }
  }
  OpContext c = impl_->make_context("scatter", bytes);
  c.dtype_name = dtype_name(dtype);
  c.root = root;
  const Plan p = impl_->plan(c, Collective::Scatter, bytes);
  return impl_->run(
      std::move(c),
      [=, impl = impl_.get()](OpContext& x) {
        impl->run_plan(x, {.recv = recvbuf, .count = count, .bytes = bytes, .dtype = dtype, .root = root, .in = in}, p);
        // The root's own block last: in place, recvbuf may be another rank's block.
        if (x.rank == root && bytes && in[root] != recvbuf) std::memmove(recvbuf, in[root], bytes);
      },
      t_blocking_call);
}

Work Communicator::iscatter(const void* sendbuf, void* recvbuf, std::size_t count, DataType dtype, int root) {
  SmallVector<const void*> blocks;
  if (impl_->rank == root) {
    Validator{impl_->rank, impl_->size, "scatter"}.buffer(sendbuf, count, "sendbuf");
    for (int r = 0; r < impl_->size; ++r)
      blocks.push_back(sendbuf ? static_cast<const char*>(sendbuf) + r * count * dtype_size(dtype) : nullptr);
  }
  return iscatter(std::span<const void* const>(blocks.data(), blocks.size()), recvbuf, count, dtype, root);
}

Work Communicator::ireduce_scatter(std::span<const void* const> sendbufs, void* recvbuf, std::size_t count,
                                   DataType dtype, ReduceOp op) {
  Validator v{impl_->rank, impl_->size, "reduce_scatter"};
  std::size_t bytes = v.bytes(count, dtype);
  v.reduce_op(dtype, op);
  v.buffer(recvbuf, count, "recvbuf");
  if (sendbufs.size() != static_cast<std::size_t>(impl_->size))
    v.fail("needs " + std::to_string(impl_->size) + " send buffers, got " + std::to_string(sendbufs.size()));
  SmallVector<const char*> in;
  for (const void* p : sendbufs) {
    v.buffer(p, count, "a send buffer");
    in.push_back(static_cast<const char*>(p));
  }
  OpContext c = impl_->make_context("reduce_scatter", bytes);
  describe_reduce(c, dtype, op);
  if (impl_->reproducible_for(dtype, op)) [[unlikely]]
    return impl_->run_reproducible(
        std::move(c), Collective::ReduceScatter,
        [=] { return OpArgs{.recv = recvbuf, .count = count, .bytes = bytes, .dtype = dtype, .op = op, .in = in}; },
        t_blocking_call);
  const Plan p = impl_->plan(c, Collective::ReduceScatter, bytes);
  return impl_->run(
      std::move(c),
      [=, impl = impl_.get()](OpContext& x) {
        impl->run_plan(x, {.recv = recvbuf, .count = count, .bytes = bytes, .dtype = dtype, .op = op, .in = in}, p);
      },
      t_blocking_call);
}

Work Communicator::ireduce_scatter(const void* sendbuf, void* recvbuf, std::size_t count, DataType dtype, ReduceOp op) {
  Validator{impl_->rank, impl_->size, "reduce_scatter"}.buffer(sendbuf, count, "sendbuf");
  SmallVector<const void*> blocks;
  for (int r = 0; r < impl_->size; ++r)
    blocks.push_back(sendbuf ? static_cast<const char*>(sendbuf) + r * count * dtype_size(dtype) : nullptr);
  return ireduce_scatter(std::span<const void* const>(blocks.data(), blocks.size()), recvbuf, count, dtype, op);
}

Work Communicator::iall_to_all_v(const void* sendbuf, std::span<const std::size_t> sendcounts,
                                 std::span<const std::size_t> sdispls, void* recvbuf,
                                 std::span<const std::size_t> recvcounts, std::span<const std::size_t> rdispls,
                                 DataType dtype) {
  Validator v{impl_->rank, impl_->size, "all_to_all"};
  const std::size_t n = impl_->size;
  if (sendcounts.size() != n || sdispls.size() != n || recvcounts.size() != n || rdispls.size() != n)
    v.fail("counts and displacements need " + std::to_string(n) + " entries each");
  std::size_t es = v.bytes(1, dtype);
  SmallVector<std::size_t> sb(n, 0), sd(n, 0), rb(n, 0), rd(n, 0);
  std::size_t total_send = 0, total_recv = 0;
  for (std::size_t i = 0; i < n; ++i) {
    sb[i] = v.bytes(sendcounts[i], dtype);
    rb[i] = v.bytes(recvcounts[i], dtype);
    sd[i] = v.bytes(sdispls[i], dtype);
    rd[i] = v.bytes(rdispls[i], dtype);
    total_send += sendcounts[i];
    total_recv += recvcounts[i];
  }
  v.buffer(sendbuf, total_send, "sendbuf");
  v.buffer(recvbuf, total_recv, "recvbuf");
  const int me = impl_->rank;
  if (sendcounts[me] != recvcounts[me])
    v.fail("sends " + std::to_string(sendcounts[me]) + " elements to itself but expects " +
           std::to_string(recvcounts[me]));
  // Byte ranges of the two buffers, to detect in-place use.
  std::size_t send_end = 0, recv_end = 0;
  for (std::size_t i = 0; i < n; ++i) {
    send_end = std::max(send_end, sd[i] + sb[i]);
    recv_end = std::max(recv_end, rd[i] + rb[i]);
  }
  const char* s0 = static_cast<const char*>(sendbuf);
  const char* r0 = static_cast<const char*>(recvbuf);
  const bool overlap = send_end && recv_end && s0 < r0 + recv_end && r0 < s0 + send_end;
  OpContext c = impl_->make_context("all_to_all_v", total_send * es);
  c.dtype_name = dtype_name(dtype);
  c.varying_sizes = true;
  Plan p = impl_->plan(c, Collective::AllToAll, total_send * es / n);
  // Per-peer sizes: an algorithm for equal blocks only gives way to the fallback.
  if (p.algorithm->equal_blocks_only) {
    p = Plan{&fallback_algorithm(Collective::AllToAll)};
    c.algo = p.algorithm->name;
  }
  return impl_->run(
      std::move(c),
      [=, impl = impl_.get()](OpContext& x) {
        impl->run_plan(x,
                       {.send = sendbuf,
                        .recv = recvbuf,
                        .dtype = dtype,
                        .send_bytes = sb,
                        .send_displs = sd,
                        .recv_bytes = rb,
                        .recv_displs = rd,
                        .send_extent = send_end,
                        .overlap = overlap},
                       p);
      },
      t_blocking_call);
}

Work Communicator::iall_to_all(const void* sendbuf, void* recvbuf, std::size_t count, DataType dtype) {
  const std::size_t n = impl_->size;
  Validator v{impl_->rank, impl_->size, "all_to_all"};
  const std::size_t block = v.bytes(count, dtype);
  const Plan plan = impl_->planner.plan(Collective::AllToAll, block);
  if (plan.algorithm->medium == Medium::Network && !plan.algorithm->equal_blocks_only) {
    // Pairwise: the per-peer form runs it.
    SmallVector<std::size_t> counts(n, count), displs(n, 0);
    for (std::size_t i = 0; i < n; ++i) displs[i] = i * count;
    return iall_to_all_v(sendbuf, counts, displs, recvbuf, counts, displs, dtype);
  }
  // Equal blocks, in shared memory or by an algorithm for equal blocks only
  // (whose messages are not the v form's: a rank calling all_to_all_v
  // against it meets a signature mismatch, not a wrong result).
  v.buffer(sendbuf, count * n, "sendbuf");
  v.buffer(recvbuf, count * n, "recvbuf");
  OpContext c = impl_->make_context("all_to_all", block * n);
  c.dtype_name = dtype_name(dtype);
  const Plan p = impl_->plan(c, Collective::AllToAll, block);
  return impl_->run(
      std::move(c),
      [=, impl = impl_.get()](OpContext& x) {
        impl->run_plan(x, {.send = sendbuf, .recv = recvbuf, .count = count, .bytes = block, .dtype = dtype}, p);
      },
      t_blocking_call);
}

Work Communicator::ibarrier() {
  OpContext c = impl_->make_context("barrier", 0);
  const Plan p = impl_->plan(c, Collective::Barrier, 0);
  return impl_->run(
      std::move(c), [=, impl = impl_.get()](OpContext& x) { impl->run_plan(x, {}, p); }, t_blocking_call);
}

void* Communicator::alloc_shared(std::size_t bytes) {
  BlockingCall b;
  OpContext c = impl_->make_context("alloc_shared", bytes);
  c.varying_sizes = true;
  c.shm = impl_->shares_memory();
  c.algo = c.shm ? "shm" : "local";
  void* result = nullptr;
  impl_
      ->run(
          std::move(c), [&result, bytes, impl = impl_.get()](OpContext& x) { result = impl->alloc_shared(x, bytes); },
          true)
      .wait();
  return result;
}

std::shared_ptr<void> Communicator::alloc_shared_owned(std::size_t bytes) {
  BlockingCall b;
  OpContext c = impl_->make_context("alloc_shared", bytes);
  c.varying_sizes = true;
  c.shm = impl_->shares_memory();
  c.algo = c.shm ? "shm" : "local";
  std::shared_ptr<void> result;
  impl_
      ->run(
          std::move(c), [&result, bytes, impl = impl_.get()](OpContext& x) { impl->alloc_shared(x, bytes, &result); },
          true)
      .wait();
  return result;
}

void Communicator::free_shared(void* ptr) {
  BlockingCall b;
  OpContext c = impl_->make_context("free_shared", 0);
  c.shm = impl_->shares_memory();
  c.algo = c.shm ? "shm" : "local";
  impl_
      ->run(
          std::move(c), [ptr, impl = impl_.get()](OpContext& x) { impl->free_shared(x, ptr); }, true)
      .wait();
}

}  // namespace tutti

// ---- blocking forms -------------------------------------------------------------

namespace tutti {

void Communicator::broadcast(void* buf, std::size_t count, DataType dtype, int root) {
  BlockingCall b;
  ibroadcast(buf, count, dtype, root).wait();
}
void Communicator::reduce(const void* s, void* r, std::size_t count, DataType dtype, ReduceOp op, int root) {
  BlockingCall b;
  ireduce(s, r, count, dtype, op, root).wait();
}
void Communicator::all_reduce(const void* s, void* r, std::size_t count, DataType dtype, ReduceOp op) {
  BlockingCall b;
  iall_reduce(s, r, count, dtype, op).wait();
}
void Communicator::gather(const void* s, void* r, std::size_t count, DataType dtype, int root) {
  BlockingCall b;
  igather(s, r, count, dtype, root).wait();
}
void Communicator::gather(const void* s, std::span<void* const> r, std::size_t count, DataType dtype, int root) {
  BlockingCall b;
  igather(s, r, count, dtype, root).wait();
}
void Communicator::all_gather(const void* s, void* r, std::size_t count, DataType dtype) {
  BlockingCall b;
  iall_gather(s, r, count, dtype).wait();
}
void Communicator::all_gather(const void* s, std::span<void* const> r, std::size_t count, DataType dtype) {
  BlockingCall b;
  iall_gather(s, r, count, dtype).wait();
}
void Communicator::scatter(const void* s, void* r, std::size_t count, DataType dtype, int root) {
  BlockingCall b;
  iscatter(s, r, count, dtype, root).wait();
}
void Communicator::scatter(std::span<const void* const> s, void* r, std::size_t count, DataType dtype, int root) {
  BlockingCall b;
  iscatter(s, r, count, dtype, root).wait();
}
void Communicator::reduce_scatter(const void* s, void* r, std::size_t count, DataType dtype, ReduceOp op) {
  BlockingCall b;
  ireduce_scatter(s, r, count, dtype, op).wait();
}
void Communicator::reduce_scatter(std::span<const void* const> s, void* r, std::size_t count, DataType dtype,
                                  ReduceOp op) {
  BlockingCall b;
  ireduce_scatter(s, r, count, dtype, op).wait();
}
void Communicator::all_to_all(const void* s, void* r, std::size_t count, DataType dtype) {
  BlockingCall b;
  iall_to_all(s, r, count, dtype).wait();
}
void Communicator::all_to_all_v(const void* s, std::span<const std::size_t> sc, std::span<const std::size_t> sd,
                                void* r, std::span<const std::size_t> rc, std::span<const std::size_t> rd,
                                DataType dtype) {
  BlockingCall b;
  iall_to_all_v(s, sc, sd, r, rc, rd, dtype).wait();
}
void Communicator::barrier() {
  BlockingCall b;
  ibarrier().wait();
}

}  // namespace tutti
