#pragma once
// Liveness: what a network transport does about lost peers and failed
// communicators, apart from moving bytes. Revoke, agree and shrink rest on
// it (docs/architecture.md, "Failure detection").
//
// - Each loss is reported once per peer to the transport's PeerLostHandler,
//   from the thread that calls report(), outside the transport's lock; the
//   losses before the handler was set are replayed to it.
// - Each loss is passed on, once, to every peer linked to this rank, and to
//   this rank's ring neighbours and hypercube partners (rank XOR 2^k),
//   linking to them where the transport links on first use: every rank
//   that learns of a loss does the same, so it reaches every rank within
//   about log2(p) hops, each rank opening at most log2(p) + 2 links for it.
// - A lost peer is cut off: told it was declared lost where its link is
//   still open (it may only have stopped), its link closed, refused later.
// - A failed communicator is told to its members (notify_comm_failed); the
//   notices received go to the CommFailedHandler.
//
// The transport owns the wire: it implements Links, and calls lost() and
// comm_failed() for what it sees and reads. Every member but report() and
// the setters is called with the transport's lock held; report() takes it.
// A transport that reuses this component gets the conformance suite's
// liveness rules (tests/unit/transport/test_p2p_conformance.cc) for the
// price of Links.

#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "transport/transport.h"

namespace tutti::detail {

class Liveness {
 public:
  // The transport's side. Called with its lock held.
  class Links {
   public:
    virtual ~Links() = default;
    // Makes a link to `peer` where none is up or being made, for passing a
    // loss on (its failure is not itself a loss). A transport linked to
    // every peer from the start does nothing.
    virtual void reach(int peer) = 0;
    // Queues a notice to `peer`, ahead of everything it sends later; only
    // where its link is up or being made, else nothing.
    virtual void send_lost(int peer, int lost, const std::string& why) = 0;
    virtual void send_comm_failed(int peer, std::uint64_t comm, ErrorKind kind, const std::string& why) = 0;
    // Cuts a lost peer off: where its link is still open, tells it it was
    // declared lost, then closes the link; refuses it from now on.
    virtual void cut_off(int peer, const std::string& why) = 0;
  };

  Liveness(int rank, int size, std::mutex& mu, Links& links);

  // A peer lost here: its link broke without a goodbye, it was declared
  // lost, or a notice said so (why then names the reporter). `peer` may be
  // this rank: the others declared it lost.
  void lost(int peer, std::string why);
  // A notice received from `from`: communicator `comm` failed there.
  void comm_failed(int from, std::uint64_t comm, std::uint64_t kind, const std::string& why);
  // Tells the other `members` that `comm` failed here (Transport::notify_comm_failed).
  void notify_comm_failed(std::uint64_t comm, const std::vector<int>& members, ErrorKind kind,
                          const std::string& message, bool connect);
  // Losses or failures noted but not yet reported, or being reported by another thread.
  bool pending() const { return reporting_ > 0 || !unreported_.empty() || !failures_.empty(); }

  // Passes the noted losses on, cuts the lost peers off and calls the
  // handlers. Takes the lock.
  void report();
  // Take the lock; the first replays the losses reported before it.
  void set_peer_lost_handler(Transport::PeerLostHandler handler);
  void set_comm_failed_handler(Transport::CommFailedHandler handler);

 private:
  struct CommFailure {
    std::uint64_t comm;
    ErrorKind kind;
    std::string why;
  };
  const int rank_, size_;
  std::mutex& mu_;
  Links& links_;
  std::vector<std::pair<int, std::string>> unreported_;
  std::vector<char> reported_;  // per peer: reported (to the handler, or kept for it)
  std::vector<std::pair<int, std::string>> log_;
  std::vector<CommFailure> failures_;  // received, not yet reported
  int reporting_ = 0;
  Transport::PeerLostHandler peer_lost_;
  Transport::CommFailedHandler comm_failed_;
};

}  // namespace tutti::detail
