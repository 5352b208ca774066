#pragma once
// The transport interface: everything an algorithm may ask of the network.
//
// Post a send or a receive of bytes to/from a peer (a world rank) with a
// communicator id and a tag, get a request back, wait on it with a deadline.
// Messages with the same (peer, comm_id, tag) match in the order they were
// sent and posted (FIFO), so an algorithm may reuse a tag for successive
// chunks. Transports know nothing of collectives.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/completion.h"
#include "common/tags.h"
#include "tutti/error.h"

namespace tutti::detail {

using RequestPtr = std::shared_ptr<Completion>;
inline constexpr int kAnyPeer = -1;
// A message with a signature belongs to the operation tag >> kSignedTagOpShift
// (collective tags: sequence number above, algorithm step below). A
// transport that sees a signed message and a signed receive of the same
// communicator and operation with different signatures fails the receive
// with Mismatch, even when their tags differ (different algorithms).
inline constexpr int kSignedTagOpShift = kTagStepBits;

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;  // this process's world rank
  virtual int size() const = 0;  // world size

  // Sends `len` bytes to world rank `peer` (may be this rank). The buffer
  // must stay valid and unchanged until the request completes. A send
  // completes once its bytes are handed to the kernel or copied.
  // `signature`: the operation the message belongs to (0: not checked).
  // A receive whose signature differs from the message's (both non-zero)
  // fails with Mismatch naming both operations.
  virtual RequestPtr post_send(int peer, std::uint64_t comm_id, std::uint64_t tag, const void* buf, std::size_t len,
                               std::uint64_t signature = 0) = 0;
  // Receives exactly `len` bytes from world rank `peer` or kAnyPeer; the
  // request's source() is the sender. A matching message of another length
  // fails the request with Mismatch. The buffer is written until completion.
  virtual RequestPtr post_recv(int peer, std::uint64_t comm_id, std::uint64_t tag, void* buf, std::size_t len,
                               std::uint64_t signature = 0) = 0;
  // Fails every pending request of `comm_id` with (kind, message), drops its
  // buffered messages, and makes later posts on it fail at once. After this
  // returns the transport no longer touches the user buffers of those
  // requests. Safe from any thread.
  virtual void abort_comm(std::uint64_t comm_id, ErrorKind kind, const std::string& message) = 0;
  // Why `peer` is unreachable, or "" while it is connected.
  virtual std::string peer_failure(int peer) const = 0;

  // Liveness. Revoke, agree and shrink rest on the calls below: every
  // transport implements them (pure: a transport without them does not
  // build), with transport/liveness.h's component or by handing them to the
  // transport it is layered on, and the conformance suite checks that they
  // work (tests/unit/transport/test_p2p_conformance.cc).
  //
  // Called once per peer that is lost without having said goodbye (killed,
  // crashed, or cut off), from a transport thread holding no transport
  // lock, so that every communicator including it can fail at once. Set
  // before traffic starts; the losses before it are replayed to it. Called
  // with this rank's own number when another rank declared this one lost
  // (it is cut off from the others).
  using PeerLostHandler = std::function<void(int peer, const std::string& why)>;
  virtual void set_peer_lost_handler(PeerLostHandler handler) = 0;
  //
  // Tells the other `members` (world ranks) that communicator `comm_id`
  // failed here with (kind, message); they get it through the handler.
  // Only members already connected, unless `connect`: then every member
  // listed, connecting to it if need be.
  virtual void notify_comm_failed(std::uint64_t comm_id, const std::vector<int>& members, ErrorKind kind,
                                  const std::string& message, bool connect = false) = 0;
  // Treats `peer` as lost from now on, as if its connection had broken
  // (a rank that stopped answering: docs/architecture.md, "Failure model"):
  // reported to the handler, passed on to the other ranks, and its
  // connection closed; it is refused if it connects again.
  virtual void declare_lost(int peer, const std::string& why) = 0;
  using CommFailedHandler = std::function<void(std::uint64_t comm_id, ErrorKind kind, const std::string& why)>;
  // Called, like the above, with each failed-communicator notice received.
  virtual void set_comm_failed_handler(CommFailedHandler handler) = 0;

  // Makes sure a loss of `peer` is noticed here: a transport that connects
  // on first use (TCP) connects to it. Called by a transport layered on this
  // one (shared memory) for the peers it exchanges messages with.
  virtual void watch_peer(int peer) = 0;

  // Words for a signature in Mismatch messages (set once at init): the
  // operation of `signature`; where `against` (this rank's) is not 0, told
  // apart from it ("... where this rank called ...").
  using DescribeSignature = std::string (*)(std::uint64_t signature, std::uint64_t against);
  virtual void set_signature_describer(DescribeSignature d) { describe_signature_ = d; }

 protected:
  DescribeSignature describe_signature_ = nullptr;
};

// How init makes the network transport (src/bootstrap/init.cc). The
// rendezvous publishes each rank's address as opaque bytes beside the
// rank's own record and hands every rank's back; it reads nothing in them.
// A new network transport is a factory here and its choice in init.
class TransportFactory {
 public:
  virtual ~TransportFactory() = default;
  // Makes this rank reachable (TCP: listens) and returns its address.
  virtual std::string address() = 0;
  // The transport of `rank` among `size`, from every rank's address
  // (indexed by rank, this rank's included). Fails, by `deadline`, where
  // this rank cannot reach its peers (init names the cause).
  virtual std::shared_ptr<Transport> make(int rank, int size, std::vector<std::string> addresses,
                                          TimePoint deadline) = 0;
};

}  // namespace tutti::detail
