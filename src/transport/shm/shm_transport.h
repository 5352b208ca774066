#pragma once
// Shared-memory point-to-point transport for a job whose ranks all share one
// host.
//
// Every ordered pair of ranks (s -> d) has a ring of message descriptors in
// one job-wide segment, in d's area: s writes descriptors and advances the
// ring's head, d consumes them and advances its tail. A message of up to
// kInlineBytes travels inside its descriptor; one of up to kEagerBytes is
// copied into the pair's data ring (kRingBytes); either way the send
// completes at once. A larger one travels as the address of the sender's buffer, and the
// receiver copies it straight into the posted receive buffer with
// process_vm_readv (one copy), then acknowledges it, which completes the
// send. This needs every rank to be allowed to read every other's memory;
// create() checks that and otherwise keeps point-to-point on the network
// transport.
//
// Matching is the network transport's: FIFO per (source, communicator,
// tag), receives from any source, messages that arrive before their receive
// wait in an unexpected list (a large one stays in the sender's buffer).
//
// Thread model. One mutex guards the rings' consuming side, the matching
// state and the sending side. Whoever holds it makes progress: a thread
// waiting on a request (it polls before sleeping, so a waiting receiver
// sees a message without being woken), a caller posting, or the
// transport's progress thread, which sleeps on this rank's doorbell (a
// futex word that senders and acknowledgers bump) and also checks every
// 100 ms that the peers it waits for are still alive. While some thread of
// a rank polls, peers bump its doorbell without waking the progress thread
// (no system call, no context switch on the latency path); a poller that
// stops polling makes one last pass, so nothing is missed.

#include <atomic>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "shm/segment.h"
#include "transport/matching.h"
#include "transport/transport.h"
#include "tutti/store.h"

namespace tutti::detail {

class ShmTransport final : public Transport, public std::enable_shared_from_this<ShmTransport> {
 public:
  // Collective over every rank of the job (all on this host; `pids` holds
  // every rank's process). Returns the shared-memory transport, or `net`
  // when some rank may not read another's memory (every rank decides the
  // same). `net` stays in use for peer liveness and receives every abort
  // too. Four store requests a rank, whatever the job's size.
  static std::shared_ptr<Transport> create(std::shared_ptr<Transport> net, Store& store, const std::string& name,
                                           std::vector<int> pids, TimePoint deadline);
  ~ShmTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  RequestPtr post_send(int peer, std::uint64_t comm_id, std::uint64_t tag, const void* buf, std::size_t len,
                       std::uint64_t signature = 0) override;
  RequestPtr post_recv(int peer, std::uint64_t comm_id, std::uint64_t tag, void* buf, std::size_t len,
                       std::uint64_t signature = 0) override;
  void set_signature_describer(DescribeSignature d) override {
    describe_signature_ = d;
    std::lock_guard<std::mutex> lock(mu_);
    match_.set_describer(d);
    net_->set_signature_describer(d);
  }
  void abort_comm(std::uint64_t comm_id, ErrorKind kind, const std::string& message) override;
  std::string peer_failure(int peer) const override;
  // Losses are reported by the network transport, which tells a peer that
  // shut down in order (goodbye) from one that died.
  void set_peer_lost_handler(PeerLostHandler handler) override { net_->set_peer_lost_handler(std::move(handler)); }
  void set_comm_failed_handler(CommFailedHandler handler) override {
    net_->set_comm_failed_handler(std::move(handler));
  }
  void notify_comm_failed(std::uint64_t comm_id, const std::vector<int>& members, ErrorKind kind,
                          const std::string& message, bool connect = false) override {
    net_->notify_comm_failed(comm_id, members, kind, message, connect);
  }
  void declare_lost(int peer, const std::string& why) override { net_->declare_lost(peer, why); }
  void watch_peer(int peer) override { net_->watch_peer(peer); }

  static constexpr std::size_t kInlineBytes = 72;
  static constexpr std::size_t kEagerBytes = 8 << 10;
  static constexpr std::size_t kRingBytes = 32 << 10;
  static constexpr std::uint64_t kSlots = 64;

  // Public for make_shared; use create().
  ShmTransport(std::shared_ptr<Transport> net, const std::string& name, std::vector<int> pids, TimePoint deadline);

 private:
  struct Desc;
  struct Ring;
  struct RankCtrl;
  struct Message {  // a consumed descriptor
    int from;
    std::uint64_t comm, tag, bytes, addr, seq, sig;
    bool remote;                 // the payload is at addr in the sender's memory
    std::vector<char> data;      // the payload of a message waiting for its receive (or of a self-send)
    const char* view = nullptr;  // else: where it lies in the segment while being handled
    std::uint64_t arrival = 0;   // set by the matcher while it waits
    bool corrupt = false;
    const char* payload() const { return view ? view : data.data(); }
  };
  struct PostedRecv {
    int peer;
    std::uint64_t comm, tag;
    char* buf;
    std::size_t len;
    RequestPtr req;
    std::uint64_t sig = 0;
  };
  struct SendOp {
    int peer;
    std::uint64_t comm, tag, seq, sig;
    const char* buf;
    std::size_t len;
    RequestPtr req;
  };

  RankCtrl* ctrl(int r) const;
  Ring* ring(int receiver, int sender) const;
  void ring_doorbell(int r);
  void drive(const Completion& req, TimePoint deadline);
  void progress_locked();
  bool try_post_locked(SendOp& op);
  void handle_locked(Message m);
  void deliver_locked(Message& m, PostedRecv& r);
  void ack_locked(const Message& m);
  void check_peers_locked();
  void fail_peer_locked(int peer, const std::string& why);
  bool aborted_locked(std::uint64_t comm, const RequestPtr& req) const;
  RequestPtr make_request();
  void progress_thread();

  // Peers net_ watches (connects to) for this transport: those it has
  // exchanged messages with (watch).
  std::unique_ptr<std::atomic<bool>[]> watched_;
  void watch(int peer) {
    if (peer >= 0 && peer < size_ && peer != rank_ && !watched_[peer].exchange(true, std::memory_order_relaxed))
      net_->watch_peer(peer);
  }
  std::shared_ptr<Transport> net_;
  int rank_, size_;
  std::vector<int> pids_;
  std::size_t senders_bytes_;  // the bitmap of senders in each rank's area
  std::size_t area_bytes_;
  SharedSegment segment_;
  // Senders: a bit per rank in each receiver's area, set by a sender before
  // its first message there. A receiver looks only at the rings of the
  // senders set, so the pages of pairs that never talk are never touched
  // (a ring read is a page of the segment), and a look costs O(senders),
  // not O(p).
  std::atomic<std::uint64_t>* senders(int receiver) const;
  std::vector<char> announced_;            // per receiver: this rank's bit is set there
  std::vector<int> active_;                // senders seen in this rank's bitmap, in rank order
  std::vector<std::uint64_t> seen_words_;  // the bitmap as last read

  mutable std::mutex mu_;
  std::vector<std::uint64_t> head_;                                     // per receiver: descriptors this rank wrote
  std::vector<std::uint64_t> data_head_;                                // per receiver: data-ring bytes this rank used
  std::vector<std::uint64_t> tail_;                                     // per sender: descriptors this rank consumed
  std::vector<std::uint64_t> seq_;                                      // per receiver: messages this rank sent
  std::vector<std::deque<SendOp>> pending_;                             // per receiver: waiting for ring space
  std::vector<std::unordered_map<std::uint64_t, SendOp>> outstanding_;  // per receiver: by seq, awaiting ack
  Matcher<PostedRecv, Message> match_{size_};  // posted receives, unexpected messages (matching.h)
  std::unordered_map<std::uint64_t, std::pair<ErrorKind, std::string>> aborted_;
  std::vector<std::string> lost_;  // per peer: why it is gone, or ""

  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace tutti::detail
