// Loss and failure notices (liveness.h).
#include "transport/liveness.h"

namespace tutti::detail {

Liveness::Liveness(int rank, int size, std::mutex& mu, Links& links)
    : rank_(rank), size_(size), mu_(mu), links_(links), reported_(static_cast<std::size_t>(size), 0) {}

void Liveness::lost(int peer, std::string why) {
  if (peer < 0 || peer >= size_) return;
  unreported_.emplace_back(peer, std::move(why));
}

void Liveness::comm_failed(int from, std::uint64_t comm, std::uint64_t kind, const std::string& why) {
  if (kind > static_cast<std::uint64_t>(ErrorKind::Revoked)) return;  // not a kind this build knows
  failures_.push_back({comm, static_cast<ErrorKind>(kind), "rank " + std::to_string(from) + " failed: " + why});
}

void Liveness::notify_comm_failed(std::uint64_t comm, const std::vector<int>& members, ErrorKind kind,
                                  const std::string& message, bool connect) {
  for (int m : members) {
    if (m == rank_ || m < 0 || m >= size_) continue;
    // Not to members never linked, unless asked: a member that waits on
    // this rank has linked to it, and the others learn from those they
    // wait on.
    if (connect) links_.reach(m);
    links_.send_comm_failed(m, comm, kind, message);
  }
}

void Liveness::report() {
  std::vector<std::pair<int, std::string>> lost;
  Transport::PeerLostHandler handler;
  std::vector<CommFailure> failures;
  Transport::CommFailedHandler failed_handler;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [peer, why] : unreported_) {
      if (reported_[static_cast<std::size_t>(peer)]) continue;
      reported_[static_cast<std::size_t>(peer)] = 1;
      lost.emplace_back(peer, why);
      if (peer == rank_) continue;  // this rank, declared lost by the others: nothing to pass on
      // Ahead of anything this rank sends later (such as its own goodbye
      // when it shuts down after the failure); see the top of liveness.h.
      auto near = [&, lost_rank = peer](int q) {
        if (q != rank_ && q != lost_rank && q >= 0 && q < size_) links_.reach(q);
      };
      near((rank_ + 1) % size_);
      near((rank_ + size_ - 1) % size_);
      for (int bit = 1; bit < size_; bit <<= 1) near(rank_ ^ bit);
      for (int q = 0; q < size_; ++q)
        if (q != rank_ && q != peer) links_.send_lost(q, peer, why);
    }
    unreported_.clear();
    // A lost rank stays cut off, so that a rank that only stopped
    // answering, and wakes, cannot pass on what it then sees as losses of
    // the ranks that carried on.
    for (auto& [peer, why] : lost)
      if (peer != rank_) links_.cut_off(peer, why);
    log_.insert(log_.end(), lost.begin(), lost.end());
    handler = peer_lost_;
    failures.swap(failures_);
    failed_handler = comm_failed_;
    if (lost.empty() && failures.empty()) return;
    ++reporting_;
  }
  if (handler)
    for (auto& [peer, why] : lost) handler(peer, why);
  if (failed_handler)
    for (auto& f : failures) failed_handler(f.comm, f.kind, f.why);
  std::lock_guard<std::mutex> lock(mu_);
  --reporting_;
}

void Liveness::set_peer_lost_handler(Transport::PeerLostHandler handler) {
  std::vector<std::pair<int, std::string>> past;
  {
    std::lock_guard<std::mutex> lock(mu_);
    peer_lost_ = handler;
    past = log_;
  }
  if (handler)
    for (auto& [peer, why] : past) handler(peer, why);
}

void Liveness::set_comm_failed_handler(Transport::CommFailedHandler handler) {
  std::lock_guard<std::mutex> lock(mu_);
  comm_failed_ = std::move(handler);
}

}  // namespace tutti::detail
