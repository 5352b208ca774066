#pragma once
// TCP transport: one connection per peer pair (or several, see below), driven by one epoll progress
// thread per process.
//
// Connections on first use. A pair's connection is made when an operation
// first needs it: a send to the peer, or a receive from it, on either side
// (tcp_handshake.cc). The progress thread makes it without blocking: a
// non-blocking connect, then authentication (net/auth.h), the hello and the
// accepting side's verdict, each step as its socket becomes ready, so that
// no rank ever waits on a peer while connecting. Sends posted meanwhile
// queue and leave once it is made. When both sides connect at once, the
// connection opened by the lower rank is kept: the lower rank refuses a
// hello from a higher one while its own attempt is under way, and the
// higher one takes the lower one's in place of its own. A receive from any
// source connects nothing: a message from a peer not connected yet arrives
// when that peer's send opens the connection, which this rank accepts. A
// peer's loss is learnt on its connection (closed, refused when first
// needed), from lost-peer notices (every rank passes each loss on, once, to
// every peer it is connected to) and from failed-communicator notices of
// the members it waits on (docs/architecture.md, "Failure detection").
//
// With TUTTI_SOCKETS_PER_PEER = N > 1 a pair of ranks has N + 1
// connections: the first carries every header and small message as before;
// a message of at least TUTTI_SOCKET_STRIPE_BYTES sends only its header
// there (kFrameStriped) and its payload in N stripes, stripe i on data
// connection i, in header order (frame.h). The receiver matches the header
// as usual and reads each stripe straight into its place; the message is
// complete when every stripe is in. A data connection is watched only while
// a stripe is due on it.
//
// Thread model. The progress thread owns every peer socket's reading side and
// flushes send queues that could not be written at once, except that a
// caller waiting for a small receive from one peer reads that connection
// itself and afterwards leaves it parked (drive, park). Caller threads post
// sends and receives; a send posted on an idle connection is written straight
// from the caller's thread (no hand-off on the latency path). One mutex guards
// all matching state and socket I/O; completions are signalled under it and
// waited on outside it. Payloads go from the socket straight into a posted
// receive buffer; a message that arrives before its receive is posted is
// buffered ("unexpected", or early) and copied once the receive is posted.
//
// Flow control. A sender that runs ahead of its receiver (a stream of
// reduces or gathers, whose leaves never wait for the root) would have the
// receiver buffer everything it sends. So a peer whose early messages here
// weigh kHoldBytes (tcp_constants.h) and number kHoldMessages is held: its
// connection is not read, between frames, until a posted receive could
// want one of its messages (a receive from it, or from any peer) or its
// early messages are taken down to half. Its sends then wait in its socket,
// as they would for a receiver that reads slowly. Nothing this rank waits
// for is behind a hold: a peer that dies while held is named as soon as a
// receive wants it (its connection's end is read then), or when another
// rank reports it; a close that reaches this rank while held (its data all
// read) is read at once. Only a stream of many messages is held: one large
// message, or a few, are read whatever their size, so that two ranks that
// send to each other before receiving still finish.

#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/config.h"
#include "net/auth.h"
#include "net/socket.h"
#include "net/stranger_gate.h"
#include "transport/liveness.h"
#include "transport/matching.h"
#include "transport/tcp/frame.h"
#include "transport/tcp/spare_pool.h"
#include "transport/tcp/tcp_constants.h"
#include "transport/transport.h"
#include "tutti/store.h"

namespace tutti::detail {

// What a rank needs to connect to its peers on first use.
struct TcpPeers {
  Fd listener;                         // where this rank accepts its peers
  std::vector<std::string> addresses;  // every rank's "host port"
  std::string key;                     // every connection authenticates with it (net/auth.h)
  std::uint64_t job_id = 0;
  int links = 1;                                 // connections this rank opens to a peer (TUTTI_SOCKETS_PER_PEER)
  std::string congestion;                        // TCP congestion control of every connection ("": the kernel's)
  std::chrono::milliseconds connect_timeout{0};  // how long a connection may take to be made
};

// The TCP transport's factory (transport.h, TransportFactory): its address
// is "host port" where TUTTI_LISTEN_ADDR, TUTTI_ADVERTISE_ADDR,
// TUTTI_SOCKET_IFNAME and the route to the store (`store_host`,
// `store_port`) say; its transport connects on first use, but to its two
// ring neighbours before make() returns. Every connection proves `key`.
std::unique_ptr<TransportFactory> make_tcp_factory(const Config& config, const std::string& store_host, int store_port,
                                                   std::string key, std::uint64_t job_id);

class TcpTransport final : public Transport,
                           private Liveness::Links,
                           public std::enable_shared_from_this<TcpTransport> {
 public:
  // links[p]: the connections to rank p, the first for headers, the rest
  // (if any) for the stripes of messages of at least stripe_bytes.
  TcpTransport(int rank, int size, std::vector<std::vector<Fd>> links, std::size_t socket_buffer_bytes,
               std::size_t stripe_bytes);
  // One connection per peer.
  TcpTransport(int rank, int size, std::vector<Fd> peers, std::size_t socket_buffer_bytes);
  // No connection yet: each is made on first use (see above).
  TcpTransport(int rank, int size, TcpPeers peers, std::size_t socket_buffer_bytes, std::size_t stripe_bytes);
  ~TcpTransport() override;

  int rank() const override { return rank_; }
  void set_signature_describer(DescribeSignature d) override {
    describe_signature_ = d;
    std::lock_guard<std::mutex> lock(mu_);
    match_.set_describer(d);
  }
  int size() const override { return size_; }
  RequestPtr post_send(int peer, std::uint64_t comm_id, std::uint64_t tag, const void* buf, std::size_t len,
                       std::uint64_t signature = 0) override;
  RequestPtr post_recv(int peer, std::uint64_t comm_id, std::uint64_t tag, void* buf, std::size_t len,
                       std::uint64_t signature = 0) override;
  void abort_comm(std::uint64_t comm_id, ErrorKind kind, const std::string& message) override;
  // Flow control holds `peer` now (see the top): for tests and diagnostics.
  bool holding(int peer) const;
  std::string peer_failure(int peer) const override;
  // Also replays the losses reported before it was set.
  void set_peer_lost_handler(PeerLostHandler handler) override;
  void set_comm_failed_handler(CommFailedHandler handler) override;
  void notify_comm_failed(std::uint64_t comm_id, const std::vector<int>& members, ErrorKind kind,
                          const std::string& message, bool connect = false) override;
  void declare_lost(int peer, const std::string& why) override;
  void watch_peer(int peer) override;
  // Connects to `peer` now and waits until the connection is made (by
  // either side) or `deadline`: "" once it was made (the peer may have shut
  // down since), else why not, with its kind in *kind (Unauthenticated when
  // the peer does not know the job's key).
  std::string connect_now(int peer, TimePoint deadline, ErrorKind* kind);

 private:
  struct PostedRecv {
    int peer;
    std::uint64_t comm, tag;
    char* buf;
    std::size_t len;
    RequestPtr req;
    std::uint64_t sig = 0;
  };
  // Bytes whose resize leaves the new ones as they are: an unexpected
  // message's buffer is filled by socket reads, so zeroing it first is a
  // pass over up to 64 MiB for nothing.
  template <class T>
  struct NoInitAllocator : std::allocator<T> {
    template <class U>
    struct rebind {
      using other = NoInitAllocator<U>;
    };
    NoInitAllocator() = default;
    template <class U>
    NoInitAllocator(const NoInitAllocator<U>&) noexcept {}
    template <class U>
    void construct(U* p) noexcept {
      ::new (static_cast<void*>(p)) U;
    }
    template <class U, class... Args>
    void construct(U* p, Args&&... args) {
      ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
    }
  };
  using Bytes = std::vector<char, NoInitAllocator<char>>;
  struct InStripe;
  struct Unexpected {
    std::uint64_t comm, tag, arrival;
    std::uint64_t sig = 0;
    std::size_t weight = 0;  // in early_weight_: its bytes and kEarlyOverhead
    Bytes data;
    // A striped message: one buffer per stripe, each growing as its bytes
    // arrive, and the stripes still being read.
    std::vector<Bytes> parts;
    std::size_t striped_bytes = 0;
    std::shared_ptr<InStripe> stripe;
    bool complete = false;
    bool has_claim = false;  // a receive matched it before its payload was in
    PostedRecv claim{};
  };
  // A striped message being sent: done when its header and every stripe are out.
  struct OutStripe {
    std::uint64_t comm;
    const char* base;  // the user's buffer
    std::size_t len;
    int left = 0;  // parts not yet written
    bool header_sent = false;
    std::vector<char> owned;  // payload copy, once the user's buffer is given back
  };
  struct SendOp {
    FrameHeader hdr;
    const char* buf;
    std::size_t len;
    std::size_t off = 0;  // bytes of header + payload already written
    RequestPtr req;
    std::vector<char> owned;  // payload copy, once the user's buffer is given back
    bool raw = false;         // a stripe: payload only, no header
    std::shared_ptr<OutStripe> stripe;
  };
  // A striped message being received: where its stripes go.
  struct InStripe {
    FrameHeader hdr;
    int left = 0;                 // stripes not yet in
    bool discard = false;         // nowhere to go (aborted, mismatched): read and drop
    char* dst = nullptr;          // a posted receive's buffer, filled directly
    RequestPtr req;               // that receive
    Unexpected* unexp = nullptr;  // or the buffered message
  };
  struct StripeRx {
    std::shared_ptr<InStripe> msg;
    std::size_t index, offset, length, got = 0;
  };
  // A data connection of a peer pair (TUTTI_SOCKETS_PER_PEER).
  struct Lane {
    Fd fd;
    std::deque<SendOp> sendq;
    std::deque<StripeRx> rxq;
    std::uint32_t events = 0;  // what epoll watches (0: not registered)
  };
  enum class Rx { Header, Payload };
  // Idle: no connection, none wanted yet; Connecting: being made (one of
  // ours is under way, or ours was refused and the peer's is coming);
  // Ready: made, frames flow.
  enum class Link : std::uint8_t { Idle, Connecting, Ready };
  struct Conn {
    int peer = -1;
    Fd fd;
    bool alive = false;
    ErrorKind fail_kind = ErrorKind::PeerLost;  // what `failure` is
    Link link = Link::Ready;
    bool made = false;          // its connection was made (it may be gone again)
    int opener = -1;            // the rank whose connections the pair kept
    bool lanes_usable = false;  // messages may be striped across the data connections
    int lanes_pending = 0;      // data connections of ours still being made
    TimePoint connect_deadline{};
    // Made only to pass on a loss (report_lost): failing to make it is not
    // itself reported as a loss.
    bool quiet = false;
    // Broken, and reported lost at doom_at unless something else (a loss
    // reported by another rank) fails its operations first (lose_conn).
    bool doomed = false;
    TimePoint doom_at{};
    std::string doom_why;
    bool said_goodbye = false;  // the peer is shutting down in order
    bool draining = false;      // ...and closed; stripes are still being read
    bool driven = false;        // a waiting caller reads this connection (drive)
    bool held = false;          // flow control: not read until a receive wants it (hold)
    bool closing = false;       // the peer closed it (or it failed): never held again
    // Parked: its last driver left it, and nothing but a driven receive
    // waits on it, so the progress thread does not watch it for input; what
    // arrives waits in the socket for the next driver, or for the progress
    // thread's next tick (park).
    bool parked = false;
    std::uint32_t events = EPOLLIN | EPOLLRDHUP;  // what epoll watches on fd
    bool rx_notice = false;                       // the payload being read is a notice (lost peer, failed communicator)
    bool yield = false;                           // stop reading until lost peers are reported
    std::string notice;
    std::string failure;
    bool want_out = false;
    // receiving side
    Rx rx = Rx::Header;
    FrameHeader hdr{};
    std::size_t hdr_got = 0;
    // What a read brought beyond the frame part it was for (a small
    // message's payload, the next frames), taken before the socket is read
    // again (handle_readable). stage_short: that read found the socket empty.
    std::vector<char> stage;
    std::size_t stage_off = 0, stage_len = 0;
    bool stage_short = false;
    char* rx_buf = nullptr;  // where the payload goes (nullptr: discard)
    std::size_t rx_got = 0;
    RequestPtr rx_req;  // a posted receive being filled directly
    Unexpected* rx_unexp = nullptr;
    // sending side
    std::deque<SendOp> sendq;
    std::vector<Lane> lanes;  // data connections, stripe i on lanes[i]
  };

  // Either of the public ones: connections given (`lazy` null), or none yet.
  TcpTransport(int rank, int size, std::vector<std::vector<Fd>> links, std::size_t socket_buffer_bytes,
               std::size_t stripe_bytes, TcpPeers* lazy);
  void progress_loop();

  // Making connections (tcp_handshake.cc). A connection being made, in
  // either direction, until it is kept (attach) or refused.
  enum class Step : std::uint8_t {
    Connect,    // ours: waiting for connect() to finish
    Answer,     // ours: sent the auth hello, waiting for the server's answer
    Verdict,    // ours: sent the proof and hello, waiting for the verdict
    AuthHello,  // theirs: waiting for the client's auth hello
    Proof,      // theirs: sent the answer, waiting for the proof and hello
  };
  struct Handshake {
    Fd fd;
    int peer = -1;  // ours: the peer; theirs: -1 until its hello
    int index = 0;  // ours: which of the pair's connections
    Step step = Step::Connect;
    std::uint8_t in[kAuthAnswerBytes + sizeof(Hello)] = {};
    std::size_t got = 0, want = 0;
    Nonce client_nonce{};
    AuthServerState server{};
    TimePoint deadline{};
  };
  void connect_to(Conn& c, bool quiet = false);
  void open_link(Conn& c, int index);
  void accept_peers();
  void on_handshake(std::uint32_t id, std::uint32_t events);
  // Reads the rest of the step's bytes; false while they are not all in
  // (or the handshake ended: `gone`).
  bool handshake_read(std::uint32_t id, Handshake& h, bool* gone);
  void end_handshake(std::uint32_t id);
  Fd take_handshake(std::uint32_t id);  // ends it, keeping its connection
  void drop_handshakes(int peer);
  void step_ours(std::uint32_t id, Handshake& h);
  bool superseded(const Handshake& h) const;
  void step_theirs(std::uint32_t id, Handshake& h);
  // The pair's connection `index` (of `count`) is made: frames may flow.
  void attach(Conn& c, Fd fd, int index, int count, int opener);
  void check_connect_deadlines();
  std::string who(int peer) const;  // "rank 3 (10.0.0.2:4711)"
  bool lazy_ = false;
  Fd listener_;
  std::vector<std::string> addresses_;
  std::string key_;
  std::uint64_t job_id_ = 0;
  int links_ = 1;
  std::string congestion_;
  std::chrono::milliseconds connect_timeout_{0};
  std::size_t socket_buffer_bytes_ = 0;
  std::unordered_map<std::uint32_t, Handshake> handshakes_;
  // The accepted connections not yet authenticated: bounded, idle ones
  // closed under pressure (net/stranger_gate.h).
  StrangerGate gate_{
      StrangerGate::default_limits(std::chrono::duration_cast<std::chrono::milliseconds>(tcp::kStrangerBudget)),
      [](void* self, std::uint64_t id) { return static_cast<TcpTransport*>(self)->handshake_has_bytes(id); }, this};
  bool handshake_has_bytes(std::uint64_t id) {
    auto it = handshakes_.find(static_cast<std::uint32_t>(id));
    if (it == handshakes_.end() || !it->second.fd.valid()) return false;
    if (it->second.got > 0) return true;
    char b;
    return ::recv(it->second.fd.get(), &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
  }
  TimePoint next_gate_report_{};
  std::size_t strangers_timed_out_ = 0;  // since the last report
  void report_gate(TimePoint now);
  std::uint32_t next_handshake_ = 0;
  int connecting_ = 0;            // peers in Link::Connecting
  bool listener_paused_ = false;  // accept failed (out of descriptors): not watched until listener_resume_
  TimePoint listener_resume_{};
  std::condition_variable made_;  // a connection was made or failed (connect_now waits on it)
  void queue_notice(Conn& c, std::uint16_t flags, std::uint64_t comm, std::uint64_t tag, const std::string& text);
  // Liveness::Links: losses and failed communicators go out as notices
  // (kFrameLostNotice, kFrameCommFailed), and are read back into liveness_.
  void reach(int peer) override;
  void send_lost(int peer, int lost, const std::string& why) override;
  void send_comm_failed(int peer, std::uint64_t comm, ErrorKind kind, const std::string& why) override;
  void cut_off(int peer, const std::string& why) override;
  // Tells a peer about to be cut off (it is lost here, but its connection
  // is still open: it may only have stopped) that it was declared lost, so
  // that it learns it was left out when it runs again.
  void tell_lost(Conn& c, const std::string& why);
  void report_lost() { liveness_.report(); }
  // Losses or failures read but not yet reported (or being reported by
  // another thread). Needs mu_.
  bool reports_pending() const { return liveness_.pending(); }
  void say_goodbye();
  void handle_readable(Conn& c);
  void on_header(Conn& c);
  void on_payload_done(Conn& c);
  bool flush(Conn& c);  // returns false if the connection failed
  bool flush_queue(Conn& c, int fd, std::deque<SendOp>& q);
  void update_lane(Conn& c, std::size_t lane);
  void handle_lane_readable(Conn& c, std::size_t lane);
  void start_striped_rx(Conn& c);
  void finish_stripe(Conn& c, InStripe& m);
  // Completes r with a fully buffered unexpected message, and keeps its
  // buffer for the next one (the caller then drops u).
  void deliver_unexpected(const PostedRecv& r, int from, Unexpected& u);
  // Buffers of delivered unexpected messages, up to kSpareBytes together:
  // a fresh one costs a page fault per 4 KiB as the socket fills it, and
  // keeping them makes a 16 MiB all_reduce across 4 test-bed hosts markedly
  // faster (bench/peers/netbed/compare.sh, PER=1, 16 MiB, against a build
  // without the spares).
  Bytes take_buffer(std::size_t bytes) { return spare_.take(bytes); }
  void give_back(Bytes&& b) { spare_.give(std::move(b)); }
  SparePool<Bytes> spare_{tcp::kSpareBytes, tcp::kSpareBuffers};
  void abort_sends(Conn& c, std::uint64_t comm_id, ErrorKind kind, const std::string& message);
  // Flow control (see the top). All under mu_.
  bool wanted(int peer) const;  // a posted receive could want a message of peer's not read yet
  bool should_hold(const Conn& c) const;
  void release(Conn& c);                             // reads it again
  void forget_early(int peer, const Unexpected& u);  // u leaves the early messages
  std::vector<std::size_t> early_weight_;            // per peer
  void update_epoll(Conn& c, bool want_out);
  void apply_epoll(Conn& c);
  // A caller waiting for a receive from `peer` reads that peer's connection
  // itself, sleeping in poll(), instead of waiting for the progress thread
  // to read it and wake the caller: one thread wake-up less per message.
  void drive(int peer, const Completion& req, TimePoint deadline);
  // Parking. A driver that is done leaves its connection parked rather than
  // handing it back to the progress thread: one epoll_ctl less each way, and
  // no progress-thread wake-up (and fight for mu_) when the peer's next
  // message arrives just before the caller's next wait, as it does when
  // ranks exchange messages back to back. Drivers read whatever came on the
  // other parked connections (a notice, a message nobody waits for yet)
  // every kLook (look_parked); while any is parked the progress thread
  // ticks every kTick: if no driver ran since the last tick it watches them
  // all again, otherwise it looks at them too. Receives that are not driven
  // (any source, large) unpark their connections when posted. All under mu_.
  bool may_park(const Conn& c) const;
  static bool staged(const Conn& c) { return c.stage_off < c.stage_len; }
  void unpark(Conn& c);
  // Returns true when the progress thread must be woken to start ticking.
  bool park(Conn& c);
  void tick();
  void look_parked();
  TimePoint next_look_{};
  void wake_progress();
  bool ticking_ = false;
  std::uint64_t drives_ = 0;  // drives begun since the last tick
  TimePoint next_tick_{};
  std::vector<pollfd> tick_fds_;
  std::vector<int> tick_peers_;  // the peer of each tick_fds_ entry
  void fail_conn(Conn& c, const std::string& why);
  // The connection broke (closed without a goodbye, reset, refused): the
  // peer is reported lost kLossHoldOff later. A rank that fails because of
  // another's loss, and exits, breaks its connections too; the hold-off
  // lets the first loss, which reaches every rank through the notices,
  // remain the cause everywhere.
  void lose_conn(Conn& c, const std::string& why);
  int doomed_ = 0;  // connections in the hold-off
  void deliver_local(std::uint64_t comm, std::uint64_t tag, const char* buf, std::size_t len);
  void finish_recv(const PostedRecv& r, int from, const char* data, std::size_t bytes);
  bool comm_aborted(std::uint64_t comm, RequestPtr* fail_with) const;
  void shutdown_connections();
  const int rank_, size_;
  const std::size_t stripe_bytes_;
  mutable std::mutex mu_;
  std::vector<Conn> conns_;
  Matcher<PostedRecv, Unexpected> match_;  // posted receives, unexpected messages (transport/matching.h)
  std::unordered_map<std::uint64_t, std::pair<ErrorKind, std::string>> aborted_;
  std::vector<char> discard_;
  Fd epoll_;
  Fd wake_;
  bool stop_ = false;
  Liveness liveness_{rank_, size_, mu_, *this};
  std::thread thread_;
};

}  // namespace tutti::detail
