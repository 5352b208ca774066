// ProcessGroupTutti::monitoredBarrier, gloo's protocol and messages.
#include <ATen/ATen.h>
#include <ATen/record_function.h>

#include <algorithm>

#include "process_group.h"
#include "tensors.h"

namespace tutti_torch {

using tutti::DataType;
using tutti::Error;
using tutti::ErrorKind;
using Clock = std::chrono::steady_clock;
using c10d::OpType;

namespace {
// monitoredBarrier's tags: this | a counter of 24 bits.
constexpr int kMonitoredBarrierTag = 0x7f000000;
}  // namespace

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

}  // namespace tutti_torch
