#pragma once
// TCP transport: one connection per peer pair, driven by one epoll progress
// thread per process.
//
// Thread model. The progress thread owns every peer socket's reading side and
// flushes send queues that could not be written at once. Caller threads post
// sends and receives; a send posted on an idle connection is written straight
// from the caller's thread (no hand-off on the latency path). One mutex guards
// all matching state and socket I/O; completions are signalled under it and
// waited on outside it. Payloads go from the socket straight into a posted
// receive buffer; a message that arrives before its receive is posted is
// buffered ("unexpected") and copied once the receive is posted.

#include <sys/epoll.h>

#include <cstdint>
#include <deque>
#include <list>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/config.h"
#include "net/socket.h"
#include "transport/tcp/frame.h"
#include "transport/transport.h"
#include "tutti/store.h"

namespace tutti::detail {

// Builds the full mesh of peer connections through `store`: every rank
// listens, publishes its address under "tutti/tcp/<rank>", connects to lower
// ranks and accepts higher ones. Fails with Timeout naming the ranks that
// never published or connected before `deadline`. Returns one socket per
// peer (index = rank; the own entry is invalid).
// Every connection authenticates with `key` (net/auth.h) before its hello.
std::vector<Fd> connect_mesh(Store& store, int rank, int size, std::uint64_t job_id, const std::string& key,
                             const Config& config, const std::string& store_host, int store_port,
                             TimePoint deadline);

class TcpTransport final : public Transport {
 public:
  TcpTransport(int rank, int size, std::vector<Fd> peers, std::size_t socket_buffer_bytes);
  ~TcpTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  RequestPtr post_send(int peer, std::uint64_t comm_id, std::uint64_t tag, const void* buf, std::size_t len,
                       std::uint64_t signature = 0) override;
  RequestPtr post_recv(int peer, std::uint64_t comm_id, std::uint64_t tag, void* buf, std::size_t len,
                       std::uint64_t signature = 0) override;
  void abort_comm(std::uint64_t comm_id, ErrorKind kind, const std::string& message) override;
  std::string peer_failure(int peer) const override;
  // Also replays the losses reported before it was set.
  void set_peer_lost_handler(PeerLostHandler handler) override;
  void set_comm_failed_handler(CommFailedHandler handler) override;
  void notify_comm_failed(std::uint64_t comm_id, const std::vector<int>& members, ErrorKind kind,
                          const std::string& message) override;

 private:
  struct PostedRecv {
    int peer;
    std::uint64_t comm, tag;
    char* buf;
    std::size_t len;
    RequestPtr req;
    std::uint64_t sig = 0;
  };
  struct Unexpected {
    std::uint64_t comm, tag, arrival;
    std::uint64_t sig = 0;
    std::vector<char> data;
    bool complete = false;
    bool has_claim = false;  // a receive matched it before its payload was in
    PostedRecv claim{};
  };
  struct SendOp {
    FrameHeader hdr;
    const char* buf;
    std::size_t len;
    std::size_t off = 0;  // bytes of header + payload already written
    RequestPtr req;
    std::vector<char> owned;  // payload copy, once the user's buffer is given back
  };
  enum class Rx { Header, Payload };
  struct Conn {
    int peer = -1;
    Fd fd;
    bool alive = false;
    bool said_goodbye = false;  // the peer is shutting down in order
    bool rx_notice = false;     // the payload being read is a notice (lost peer, failed communicator)
    bool yield = false;         // stop reading until lost peers are reported
    std::string notice;
    std::string failure;
    bool want_out = false;
    // receiving side
    Rx rx = Rx::Header;
    FrameHeader hdr{};
    std::size_t hdr_got = 0;
    char* rx_buf = nullptr;     // where the payload goes (nullptr: discard)
    std::size_t rx_got = 0;
    RequestPtr rx_req;          // a posted receive being filled directly
    Unexpected* rx_unexp = nullptr;
    // sending side
    std::deque<SendOp> sendq;
  };

  void progress_loop();
  // Peers lost without a goodbye, reported to peer_lost_ outside the lock.
  std::vector<std::pair<int, std::string>> lost_unreported_;
  std::vector<char> lost_reported_;  // per peer: reported (to the handler, or kept for it)
  std::vector<std::pair<int, std::string>> lost_log_;
  struct CommFailure {
    std::uint64_t comm;
    ErrorKind kind;
    std::string why;
  };
  std::vector<CommFailure> comm_failures_;  // received, not yet reported
  void queue_notice(Conn& c, std::uint16_t flags, std::uint64_t comm, std::uint64_t tag, const std::string& text);
  void report_lost();
  void say_goodbye();
  void handle_readable(Conn& c);
  void on_header(Conn& c);
  void on_payload_done(Conn& c);
  bool flush(Conn& c);  // returns false if the connection failed
  void update_epoll(Conn& c, bool want_out);
  void fail_conn(Conn& c, const std::string& why);
  void deliver_local(std::uint64_t comm, std::uint64_t tag, const char* buf, std::size_t len);
  std::list<Unexpected>::iterator find_unexpected(int peer, std::uint64_t comm, std::uint64_t tag, int* from);
  void finish_recv(const PostedRecv& r, int from, const char* data, std::size_t bytes);
  bool comm_aborted(std::uint64_t comm, RequestPtr* fail_with) const;
  void shutdown_connections();
  // The signatures of this rank's last few signed operations per
  // communicator, to describe a stale message (one of an operation this
  // rank has completed without it).
  void note_operation(std::uint64_t comm, std::uint64_t tag, std::uint64_t signature);
  std::string stale_message(int peer, std::uint64_t op, std::uint64_t comm, std::uint64_t theirs) const;
  static constexpr std::size_t kRecentOps = 8;
  std::unordered_map<std::uint64_t, std::deque<std::pair<std::uint64_t, std::uint64_t>>> recent_ops_;

  const int rank_, size_;
  mutable std::mutex mu_;
  std::vector<Conn> conns_;
  std::list<PostedRecv> posted_;
  std::vector<std::list<Unexpected>> unexpected_;
  std::uint64_t arrivals_ = 0;
  std::unordered_map<std::uint64_t, std::pair<ErrorKind, std::string>> aborted_;
  std::vector<char> discard_;
  Fd epoll_;
  Fd wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace tutti::detail
