#pragma once
// ProcessGroupTutti: a c10d::Backend (torch 2.x) on a tutti communicator, for
// CPU tensors.
//
// Threads. Operations are posted under one mutex (tutti wants one thread at
// a time per communicator); abort, the error state and the end of the group
// take another, only for moments, and never wait for an operation. Small operations (at most `inline_bytes` of
// payload) run right there in the calling thread with tutti's blocking calls
// and return a completed Work; larger ones go to tutti's asynchronous calls
// (the communicator's worker thread runs them) and return a pending Work.
// Point-to-point operations are always asynchronous. A Work's future is
// completed by whoever first sees the operation finish: a waiter, a poller
// (isCompleted) or the backend's completion thread, which watches the Works
// whose future was asked for.
//
// Tensors that are not contiguous are copied into contiguous staging tensors
// (inputs before the operation, outputs back after it, by the Work's
// completion).
//
// Life. shutdown() (destroy_process_group) and abort() fail what is pending
// and let go of the communicator at once: its threads, sockets and
// shared-memory segments go with the last group of the job that uses them,
// even while Python still holds this backend or its Works.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <vector>

#include "tutti/tutti.h"

namespace tutti_torch {

class WorkTutti;
class ProcessGroupTutti;

// "tutti:<op>": an operation's profiler event title, as ProcessGroupGloo
// records "gloo:<op>"; without the prefix, its name in messages.
const char* event_title(c10d::OpType type);
// event_title, or nullptr when no profiler listens.
const char* profiling_title(c10d::OpType type);

// The completion threads of a backend: one finds the Works whose future was
// asked for as they finish; others mark those futures completed, which runs
// the futures' callbacks. A callback may start an operation and wait for its
// future (DDP's PowerSGD hook does): a marking thread busy in a callback is
// therefore never the one that finds or marks the next Work, and another one
// starts when none is free (at most kMaxMarkers). Started by the first watch().
class Watcher : public std::enable_shared_from_this<Watcher> {
 public:
  static constexpr std::size_t kMaxMarkers = 16;
  ~Watcher();
  void watch(c10::intrusive_ptr<WorkTutti> work);
  // Finishes the Works still watched (waiting for them), marks their
  // futures, and joins the threads.
  void stop();
  bool idle();

 private:
  void loop();
  void mark_loop();
  void post(c10::intrusive_ptr<WorkTutti> work);  // with mu_ held
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<c10::intrusive_ptr<WorkTutti>> watched_;
  bool stop_ = false;
  std::thread thread_;
  // Finished Works whose futures wait to be marked, and the threads marking.
  std::condition_variable mark_cv_;
  std::deque<c10::intrusive_ptr<WorkTutti>> to_mark_;
  std::vector<std::thread> markers_;
  std::size_t free_markers_ = 0;
  bool markers_stop_ = false;
};

// A tutti::Store on a c10d::Store, so that tutti's rendezvous goes through
// the store torch.distributed already set up (TCP, file, ...).
class C10dStore : public tutti::Store {
 public:
  explicit C10dStore(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}
  void set(const std::string& key, const tutti::Bytes& value) override;
  tutti::Bytes get(const std::string& key) override;
  std::int64_t add(const std::string& key, std::int64_t delta) override;
  tutti::Bytes compare_set(const std::string& key, const tutti::Bytes& expected, const tutti::Bytes& desired) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  bool delete_key(const std::string& key) override;
  std::int64_t num_keys() override;

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

class WorkTutti : public c10d::Work {
 public:
  // `title` ("tutti:<op>", or nullptr when no profiler listens) and
  // `inputs`: the profiler event c10d::Work records until the Work
  // finishes. The tutti operations are attached by the backend right after
  // (none when the operation runs inline). `after`: runs once after they
  // all succeeded (copies staged outputs back); `outputs`: result() and the
  // future's value; `keep`: tensors that must live until the operation is
  // over; `seq`: the backend's sequence number of the operation.
  WorkTutti(int rank, c10d::OpType type, const char* title, const std::vector<at::Tensor>& inputs,
            std::vector<at::Tensor> outputs, std::vector<at::Tensor> keep, std::function<void()> after,
            std::optional<std::chrono::steady_clock::time_point> deadline, std::uint64_t seq);
  ~WorkTutti() override;

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  int sourceRank() const override;
  std::vector<at::Tensor> result() override;
  void synchronize() override {}
  bool wait(std::chrono::milliseconds timeout) override;
  void abort() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  uint64_t getSequencenumber() const override { return seq_; }

  // Marks the Work finished with this error (an inline operation that failed).
  void fail(std::exception_ptr e);
  // Finishes the Work if all its tutti operations (and parts) are over;
  // returns whether it is finished. Without `mark_future`, the future (if
  // asked for) is left for complete_future().
  bool poll(bool mark_future = true);
  // Waits (at most until `until`) for the tutti operations; finishes the Work when they are over.
  bool wait_until(std::chrono::steady_clock::time_point until, bool mark_future = true);

  std::function<void(const std::string&)> on_abort;  // aborts the backend's communicator
  std::weak_ptr<Watcher> watcher;                    // completes the future (getFuture)

 private:
  void complete(bool mark_future = true);
  // Marks the future (once getFuture() asked for it) when the Work is done.
  void complete_future();

  std::vector<tutti::Work> works_;
  // A coalesced Work (endCoalescing): the Works of the operations it holds.
  std::vector<c10::intrusive_ptr<WorkTutti>> parts_;
  std::vector<at::Tensor> outputs_;
  std::vector<at::Tensor> keep_;
  std::function<void()> after_;
  std::optional<std::chrono::steady_clock::time_point> deadline_;
  std::uint64_t seq_ = 0;
  std::atomic<bool> done_{false};
  int source_ = -1;
  std::mutex finish_mu_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::atomic<bool> future_marked_{false};
  std::exception_ptr error_;
  friend class ProcessGroupTutti;
  friend class Watcher;
};

class ProcessGroupTutti : public c10d::Backend {
 public:
  // A group that meets through `store` (torch's, of this group).
  ProcessGroupTutti(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout,
                    std::string group_name);
  // A group on a communicator made already (split, shrink, a sub-group
  // derived from the world's).
  ProcessGroupTutti(tutti::Communicator comm, std::chrono::milliseconds timeout, std::string group_name);
  ~ProcessGroupTutti() override;

  const std::string getBackendName() const override { return "tutti"; }
  c10::intrusive_ptr<Options> getBackendOptions() override;
  void setTimeout(std::chrono::milliseconds timeout) override;
  bool supportsSplitting() const override { return true; }
  bool supportsCoalescing() const override { return true; }
  bool supportsShrinking() const override { return true; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts = c10d::AllreduceCoalescedOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts = c10d::ReduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts = c10d::GatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts = c10d::ScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplitSizes,
                                               std::vector<int64_t>& inputSplitSizes,
                                               const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts = c10d::BarrierOptions()) override;
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks = false) override;
  void setSequenceNumberForGroup() override;
  uint64_t getSequenceNumberForGroup() override;

  // Operations between the two run as they come; endCoalescing returns one
  // Work that finishes when they all have (batch_isend_irecv, torch's
  // coalescing manager).
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;

  // The members of `ranks` (this group's ranks, ascending; every member
  // passes the same list) form a group derived from this one, without the
  // store; the others get nullptr (ProcessGroup::splitGroup, split_group).
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<Options>& opts) override;
  // A group of this one's members but `ranks_to_exclude`, made by them
  // alone (torch's shrink_group); SHRINK_ABORT (1) aborts this group first.
  c10::intrusive_ptr<c10d::Backend> shrink(const std::vector<int64_t>& ranks_to_exclude, int shrink_flags = 0,
                                           const c10::intrusive_ptr<Options>& opts_override = nullptr) override;
  // A group of the members `ranks` (ranks of this group, in the order
  // given), made by them alone from this group's communicator, without the
  // store; nullptr where this rank is not a member. torch's new_group when
  // this is the world's group; split and shrink. `group_name`: torch's
  // name of it (getBackendOptions).
  c10::intrusive_ptr<ProcessGroupTutti> derive(const std::vector<int>& ranks, std::chrono::milliseconds timeout,
                                               const std::string& group_name);

  c10d::ErrorType getError() override;
  // Fails what is pending (Aborted) and lets go of the communicator.
  void abort() override;
  void shutdown() override;

  // The communicator (an invalid handle after shutdown or abort).
  tutti::Communicator communicator();
  // Fails every pending and later operation (their Works complete with
  // tutti.Aborted naming `reason`). Safe from any thread.
  void abort(const std::string& reason);
  // The error the group failed with, or null while it works.
  std::exception_ptr error() const;
  // A group of the members alive (Communicator::shrink, ULFM's agreement),
  // numbered in their order here; collective over the survivors.
  c10::intrusive_ptr<ProcessGroupTutti> shrink_alive();
  std::size_t inline_bytes() const { return inline_bytes_; }
  // Reproducible sums on `c` while torch.use_deterministic_algorithms(True)
  // is set (or from the start): before every operation (run, all_reduce_).
  void follow_determinism(tutti::Communicator& c) const {
    const bool on = reproducible_at_start_ || at::globalContext().deterministicAlgorithms();
    if (c.reproducible() != on) c.set_reproducible(on);
  }

 private:
  // Runs `blocking` here (small payloads) or posts `async`, and wraps the
  // outcome in a Work.
  // `blocking` is nullptr for operations that are always asynchronous.
  template <class Blocking, class Async>
  c10::intrusive_ptr<c10d::Work> run(c10d::OpType type, const std::vector<at::Tensor>& inputs, std::size_t bytes,
                                     std::chrono::milliseconds timeout, Blocking&& blocking, Async&& async,
                                     std::vector<at::Tensor> outputs, std::vector<at::Tensor> keep,
                                     std::function<void()> after);
  c10::intrusive_ptr<WorkTutti> make_work(c10d::OpType type, const std::vector<at::Tensor>& inputs,
                                          std::vector<at::Tensor> outputs, std::vector<at::Tensor> keep,
                                          std::function<void()> after, std::chrono::milliseconds timeout);
  // The communicator to post on (a handle; post_mu_ held); throws Aborted
  // after shutdown.
  tutti::Communicator live(const char* op);
  // The error the group failed with (or was let go of with), if any.
  std::optional<tutti::Error> failure() const;
  // Ends the group's life here: fails what is pending with `reason`
  // (aborts the communicator, always when `abort_always`), stops the
  // completion thread and lets go of the communicator.
  void release(const std::string& reason, bool abort_always);
  // The coalesced all_gathers: per dtype, the inputs flattened and gathered
  // into size x that; rank r's block of input j is copied to dst(r, j) (a
  // tensor of input j's elements) when the operation is over, then `last`
  // (destination, source) pairs.
  c10::intrusive_ptr<c10d::Work> all_gather_flat(c10d::OpType type, std::vector<at::Tensor>& inputs,
                                                 const std::function<at::Tensor(int, std::size_t)>& dst,
                                                 std::vector<std::pair<at::Tensor, at::Tensor>> last,
                                                 std::vector<at::Tensor> outputs, std::chrono::milliseconds timeout);
  // What a Work's abort() calls: abort(reason) on this backend, while it lives.
  std::function<void(const std::string&)> abort_hook();
  // Keeps `w` for endCoalescing when coalescing.
  c10::intrusive_ptr<c10d::Work> coalesce(c10::intrusive_ptr<WorkTutti> w);

  // post_mu_: one poster at a time (held for the whole of an inline
  // operation). mu_: held only for moments, so that abort, error and the
  // end of the group never wait for an operation.
  std::mutex post_mu_;
  mutable std::mutex mu_;
  tutti::Communicator comm_;              // mu_; invalid once let go of
  std::optional<tutti::Error> released_;  // mu_: why comm_ was let go
  std::string group_name_;
  std::chrono::milliseconds timeout_;
  std::size_t inline_bytes_;
  // Whether the communicator started with reproducible sums
  // (TUTTI_REPRODUCIBLE=1): they stay on; else they follow
  // torch.use_deterministic_algorithms at every operation (follow_determinism).
  bool reproducible_at_start_ = false;
  std::atomic<std::uint64_t> seq_{0};
  std::atomic<std::uint64_t> monitored_barriers_{0};      // calls so far: each call's tag
  std::map<std::string, std::uint64_t> made_;             // post_mu_: groups derived so far, by member list
  bool coalescing_ = false;                               // mu_
  std::vector<c10::intrusive_ptr<WorkTutti>> coalesced_;  // mu_

  std::shared_ptr<Watcher> watcher_ = std::make_shared<Watcher>();

  // mu_: receives of a failed monitoredBarrier still posted: their buffers stay here.
  std::vector<std::pair<tutti::Work, at::Tensor>> stale_;
};

}  // namespace tutti_torch
