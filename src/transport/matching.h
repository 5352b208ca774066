#pragma once
// The matching engine of every transport: the receives posted and the
// messages that arrived before their receive ("unexpected"), and the rules
// that pair them. The TCP and shared-memory transports keep their own
// element types (what a message carries while it waits differs: bytes still
// on a socket, a view into a ring) and use this for the rules:
//
// - A message from peer P on (comm, tag) matches the first posted receive,
//   in post order, for (P or any peer, comm, tag).
// - A receive for (P, comm, tag) takes the first waiting message of P on
//   (comm, tag): FIFO per peer and tag. For any peer, the earliest to
//   arrive among each peer's first candidate.
// - Signed messages (transport.h): a receive and a message of the same
//   communicator and operation with different signatures fail the receive
//   with Mismatch, even where their tags differ (two algorithms); a message
//   of an operation before the receive's is stale (this rank completed that
//   operation without it: the ranks called different operations) and fails
//   the receive too, naming both operations.
//
// Not thread-safe: the transport calls it under its own lock.

#include <cstdint>
#include <deque>
#include <list>
#include <string>
#include <unordered_map>
#include <vector>

#include "transport/transport.h"

namespace tutti::detail {

// Posted: { int peer; std::uint64_t comm, tag, sig; RequestPtr req; }
// Unexpected: { std::uint64_t comm, tag, sig, arrival; } and, where a
// receive may claim a message whose payload is still arriving, `bool has_claim`.
template <class Posted, class Unexpected>
class Matcher {
 public:
  using UnexpectedList = std::list<Unexpected>;

  explicit Matcher(int size) : unexpected_(static_cast<std::size_t>(size)) {}

  static bool matches(int posted_peer, std::uint64_t posted_comm, std::uint64_t posted_tag, int from,
                      std::uint64_t comm, std::uint64_t tag) {
    return (posted_peer == kAnyPeer || posted_peer == from) && posted_comm == comm && posted_tag == tag;
  }

  // ---- posted receives ----
  void post(Posted r) { posted_.push_back(std::move(r)); }
  // Removes and returns (in *out) the first posted receive a message from
  // `from` on (comm, tag) matches.
  bool take_posted(int from, std::uint64_t comm, std::uint64_t tag, Posted* out) {
    for (auto it = posted_.begin(); it != posted_.end(); ++it)
      if (matches(it->peer, it->comm, it->tag, from, comm, tag)) {
        *out = std::move(*it);
        posted_.erase(it);
        return true;
      }
    return false;
  }
  std::list<Posted>& posted() { return posted_; }
  const std::list<Posted>& posted() const { return posted_; }
  // Fails and removes every posted receive for which pred(r) holds.
  template <class Pred>
  void fail_posted_if(Pred pred, ErrorKind kind, const std::string& why) {
    for (auto it = posted_.begin(); it != posted_.end();) {
      if (pred(*it)) {
        it->req->fail(kind, why);
        it = posted_.erase(it);
      } else {
        ++it;
      }
    }
  }

  // ---- unexpected messages ----
  // Keeps a message from `from` that no receive matched; returns where it is.
  Unexpected& add_unexpected(int from, Unexpected u) {
    auto& q = unexpected_[static_cast<std::size_t>(from)];
    u.arrival = arrivals_++;
    q.push_back(std::move(u));
    return q.back();
  }
  UnexpectedList& unexpected_from(int from) { return unexpected_[static_cast<std::size_t>(from)]; }
  const UnexpectedList& unexpected_from(int from) const { return unexpected_[static_cast<std::size_t>(from)]; }
  // The message a receive for (peer or kAnyPeer, comm, tag) takes, or
  // false; *from is its sender.
  bool find_unexpected(int peer, std::uint64_t comm, std::uint64_t tag, int* from,
                       typename UnexpectedList::iterator* out) {
    std::uint64_t best_arrival = ~std::uint64_t(0);
    const int lo = peer == kAnyPeer ? 0 : peer;
    const int hi = peer == kAnyPeer ? static_cast<int>(unexpected_.size()) - 1 : peer;
    for (int p = lo; p <= hi; ++p) {
      auto& q = unexpected_[static_cast<std::size_t>(p)];
      for (auto it = q.begin(); it != q.end(); ++it) {
        if (claimed(*it) || it->comm != comm || it->tag != tag) continue;
        if (it->arrival < best_arrival) {
          best_arrival = it->arrival;
          *out = it;
          *from = p;
        }
        break;  // FIFO: only the first candidate of each peer may match
      }
    }
    return best_arrival != ~std::uint64_t(0);
  }
  void erase_unexpected(int from, typename UnexpectedList::iterator it) {
    unexpected_[static_cast<std::size_t>(from)].erase(it);
  }
  // Calls drop(from, u) for, and removes, every waiting message for which
  // pred(from, u) holds.
  template <class Pred, class Drop>
  void drop_unexpected_if(Pred pred, Drop drop) {
    for (int p = 0; p < static_cast<int>(unexpected_.size()); ++p) {
      auto& q = unexpected_[static_cast<std::size_t>(p)];
      for (auto it = q.begin(); it != q.end();) {
        if (pred(p, *it)) {
          drop(p, *it);
          it = q.erase(it);
        } else {
          ++it;
        }
      }
    }
  }

  // ---- signatures ----
  void set_describer(Transport::DescribeSignature d) { describe_ = d; }
  // A receive with signature `sig` on (comm, tag) is being posted: the
  // reason it must fail with Mismatch because of a message already here
  // ("" if none). Notes the operation for stale_message.
  std::string check_post(std::uint64_t comm, std::uint64_t tag, std::uint64_t sig) {
    if (!sig) return "";
    note_operation(comm, tag, sig);
    const std::uint64_t op = tag >> kSignedTagOpShift;
    for (int p = 0; p < static_cast<int>(unexpected_.size()); ++p)
      for (const Unexpected& u : unexpected_[static_cast<std::size_t>(p)]) {
        if (u.comm != comm || !u.sig) continue;
        const std::uint64_t theirs = u.tag >> kSignedTagOpShift;
        // A message of the same operation that another operation sent.
        if (u.sig != sig && theirs == op) return conflict(p, u.sig, sig);
        // A message of an operation this rank has finished without it (a
        // communicator runs its operations one at a time, each consuming
        // every message sent to it).
        if (theirs < op) return stale_message(p, theirs, comm, u.sig);
        // A peer's messages wait in the order it sent them (each transport
        // delivers a peer's messages in order), and it runs a
        // communicator's operations one after another: the rest of this
        // peer's are of later operations. Stopping here keeps a post
        // O(peers) however far the senders ran ahead (a stream of gathers).
        if (theirs > op) break;
      }
    return "";
  }
  // A signed message from `from` on (comm, tag) arrived: fails the posted
  // receives of the same operation that expect another one, and those of
  // later operations (this rank completed the message's operation without it).
  void check_arrival(int from, std::uint64_t comm, std::uint64_t tag, std::uint64_t sig) {
    if (!sig) return;
    const std::uint64_t op = tag >> kSignedTagOpShift;
    for (auto it = posted_.begin(); it != posted_.end();) {
      if (it->comm == comm && it->sig && it->sig != sig && (it->tag >> kSignedTagOpShift) == op) {
        it->req->fail(ErrorKind::Mismatch, conflict(from, sig, it->sig));
        it = posted_.erase(it);
      } else if (it->comm == comm && it->sig && (it->tag >> kSignedTagOpShift) > op) {
        it->req->fail(ErrorKind::Mismatch, stale_message(from, op, comm, sig));
        it = posted_.erase(it);
      } else {
        ++it;
      }
    }
  }
  // This rank runs (sends or receives in) the signed operation of `tag`:
  // kept to describe a stale message later.
  void note_operation(std::uint64_t comm, std::uint64_t tag, std::uint64_t sig) {
    auto& ops = recent_ops_[comm];
    const std::uint64_t op = tag >> kSignedTagOpShift;
    if (!ops.empty() && ops.back().first == op) return;
    ops.emplace_back(op, sig);
    if (ops.size() > kRecentOps) ops.pop_front();
  }
  // The message of a receive and a message that matched it by tag belong
  // to different operations: why ("" when they agree or either is unsigned).
  std::string conflict(int peer, std::uint64_t theirs, std::uint64_t mine) const {
    if (!theirs || !mine || theirs == mine) return "";
    if (describe_) return "rank " + std::to_string(peer) + " sent a message of " + describe_(theirs, mine);
    return "rank " + std::to_string(peer) + " sent a message of " + words(theirs) + " where this rank called " +
           words(mine);
  }

 private:
  static bool claimed(const Unexpected& u) {
    if constexpr (requires { u.has_claim; }) {
      return u.has_claim;
    } else {
      return false;
    }
  }
  std::string words(std::uint64_t s) const { return describe_ ? describe_(s, 0) : std::to_string(s); }
  std::string stale_message(int peer, std::uint64_t op, std::uint64_t comm, std::uint64_t theirs) const {
    std::uint64_t mine = 0;
    if (auto it = recent_ops_.find(comm); it != recent_ops_.end())
      for (const auto& [o, s] : it->second)
        if (o == op) mine = s;
    if (!mine)
      return "rank " + std::to_string(peer) + " sent a message of " + words(theirs) +
             " for an operation this rank completed without it";
    const std::string both =
        describe_ ? describe_(theirs, mine) : words(theirs) + " where this rank called " + words(mine);
    return "rank " + std::to_string(peer) + " sent a message of " + both + ", and completed it without that message";
  }

  std::list<Posted> posted_;
  std::vector<UnexpectedList> unexpected_;  // per sender, arrival order
  std::uint64_t arrivals_ = 0;
  Transport::DescribeSignature describe_ = nullptr;
  // The signatures of this rank's last few signed operations per
  // communicator, to describe a stale message.
  static constexpr std::size_t kRecentOps = 8;
  std::unordered_map<std::uint64_t, std::deque<std::pair<std::uint64_t, std::uint64_t>>> recent_ops_;
};

}  // namespace tutti::detail
