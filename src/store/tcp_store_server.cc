// TcpStoreServer: one thread, one epoll set, non-blocking sockets.
//
// Each connection runs one request at a time, in order: while a request is
// parked (a get, multi_get or wait whose keys are missing) or a reply is still being
// written, later bytes from that client are buffered but not decoded. Parked
// requests are indexed by the keys they miss (woken when a key is created) and
// by deadline (answered TIMEOUT by the server itself, so a client never gets a
// late stray reply). A client that breaks the protocol is logged and
// disconnected; nothing a client sends can stop the server.
//
// Every connection first proves it knows the job secret (net/auth.h); until
// then nothing it sends is decoded as a request, and one that has not proved
// it within kAuthSeconds is disconnected.

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "common/log.h"
#include "net/auth.h"
#include "net/socket.h"
#include "net/stranger_gate.h"
#include "store/store_protocol.h"
#include "tutti/error.h"
#include "tutti/store.h"

namespace tutti {
namespace detail {

// A get, multi_get or wait waiting for keys.
struct StoreParkedRequest {
  StoreOp op = StoreOp::Get;
  std::vector<std::string> keys;
  // It waits for one missing key at a time: keys[next], registered in
  // waiters when `registered`. Its keys before `next` were present when
  // looked at (a later deletion shows in the store's deletion count).
  std::size_t next = 0;
  bool registered = false;
  std::uint64_t deletions = 0;  // the store's deletion count when it was parked
  TimePoint deadline;
  std::int64_t timeout_ms = 0;
};

struct StoreConnection {
  Fd fd;
  std::string peer;
  Bytes in;                  // received, not yet decoded
  std::uint64_t need = 0;    // decoding cannot progress before in.size() >= need
  Bytes out;                 // reply bytes not yet sent
  std::size_t out_sent = 0;  // of out
  bool want_out = false;     // EPOLLOUT armed
  bool dead = false;         // closing; erased at the end of the loop iteration
  std::optional<StoreParkedRequest> parked;
  // Authentication: 0 awaits the hello, 1 the proof, 2 done.
  int auth = 0;
  AuthServerState auth_state;
  TimePoint auth_deadline;
};

}  // namespace detail

using detail::AuthServerState;
using detail::Clock;
using detail::DecodeStatus;
using detail::Fd;
using detail::StoreConnection;
using detail::StoreFrame;
using detail::StoreOp;
using detail::StoreParkedRequest;
using detail::StoreStatus;
using detail::TimePoint;

namespace {

constexpr std::uint64_t kListenId = 0;
constexpr std::uint64_t kWakeId = 1;
constexpr std::size_t kReadChunk = 64 << 10;
// Bytes read from one client per wake-up, so one fast sender cannot starve others.
constexpr std::size_t kMaxReadPerEvent = 4 << 20;
// A client may pipeline, but not without bound: at most one maximal frame
// plus a little is buffered while its current request is parked.
constexpr std::size_t kMaxBuffered = detail::kStoreMaxFrameBytes + (1 << 20);
constexpr std::size_t kKeepCapacity = detail::kStoreKeepCapacity;
// A client that has not authenticated by then is disconnected.
constexpr std::chrono::seconds kAuthSeconds{10};
constexpr int kAcceptBurst = 256;

}  // namespace

struct TcpStoreServer::Impl {
  Fd listen_fd;
  Fd epoll_fd;
  Fd wake_fd;
  int port = 0;
  std::string key;   // the job secret
  std::string name;  // "store server 0.0.0.0:1234", for logs
  std::atomic<bool> stop{false};
  std::thread thread;

  std::unordered_map<std::uint64_t, StoreConnection> conns;
  std::uint64_t next_id = 2;
  detail::KeyValueMap kv;
  std::unordered_map<std::string, std::unordered_set<std::uint64_t>> waiters;
  std::uint64_t deletions = 0;  // keys deleted so far
  std::set<std::pair<TimePoint, std::uint64_t>> deadlines;
  std::vector<std::uint64_t> ready;  // connections that may run buffered requests now
  std::vector<std::uint64_t> dead;   // connections to erase
  TimePoint accept_paused_until{};   // after EMFILE: retry accepting later
  // Connections not yet authenticated: bounded, idle ones closed under
  // pressure (net/stranger_gate.h).
  detail::StrangerGate gate{detail::StrangerGate::default_limits(kAuthSeconds), &Impl::peek, this};
  static bool peek(void* self, std::uint64_t id) { return static_cast<Impl*>(self)->has_bytes(id); }
  TimePoint next_gate_report{};
  std::size_t timed_out = 0;  // connections that did not authenticate within kAuthSeconds, since the last report

  Impl(const std::string& host, int port_in, std::string secret) : key(std::move(secret)) {
    listen_fd = detail::listen_tcp(host, port_in);
    detail::set_nonblocking(listen_fd.get(), true);
    detail::SockAddr local = detail::local_address(listen_fd.get());
    port = local.port();
    name = "store server " + local.to_string();
    epoll_fd = Fd(::epoll_create1(EPOLL_CLOEXEC));
    if (!epoll_fd.valid()) throw Error(ErrorKind::Internal, name + ": epoll_create1: " + std::strerror(errno));
    wake_fd = Fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (!wake_fd.valid()) throw Error(ErrorKind::Internal, name + ": eventfd: " + std::strerror(errno));
    ctl(EPOLL_CTL_ADD, listen_fd.get(), EPOLLIN, kListenId);
    ctl(EPOLL_CTL_ADD, wake_fd.get(), EPOLLIN, kWakeId);
    TUTTI_LOG(Debug, name << ": listening");
    thread = std::thread([this] { run(); });  // last: nothing may throw after it
  }

  ~Impl() {
    stop.store(true);
    std::uint64_t one = 1;
    ssize_t ignored = ::write(wake_fd.get(), &one, sizeof one);
    (void)ignored;
    thread.join();
  }

  void ctl(int op, int fd, std::uint32_t events, std::uint64_t id) {
    epoll_event ev{};
    ev.events = events;
    ev.data.u64 = id;
    if (::epoll_ctl(epoll_fd.get(), op, fd, &ev) != 0)
      throw Error(ErrorKind::Internal, name + ": epoll_ctl: " + std::strerror(errno));
  }

  void run() {
    std::vector<epoll_event> events(256);
    while (!stop.load()) {
      int n = ::epoll_wait(epoll_fd.get(), events.data(), static_cast<int>(events.size()), wait_ms());
      if (n < 0) {
        if (errno != EINTR) TUTTI_LOG(Warn, name << ": epoll_wait: " << std::strerror(errno));
        continue;
      }
      try {
        for (int i = 0; i < n; ++i) {
          std::uint64_t id = events[i].data.u64;
          if (id == kWakeId) {
            std::uint64_t v = 0;
            ssize_t ignored = ::read(wake_fd.get(), &v, sizeof v);
            (void)ignored;
          } else if (id == kListenId) {
            accept_all();
          } else {
            on_event(id, events[i].events);
          }
        }
        resume_accepting();
        expire(Clock::now());
        for (std::uint64_t id : gate.expired(Clock::now()))
          if (StoreConnection* c = live(id))
            drop(id, *c, "closed: it did not authenticate in time while many connections waited", false);
        report_gate();
        run_ready();
      } catch (const std::exception& e) {
        // Only a bug or memory exhaustion gets here; keep serving the others.
        TUTTI_LOG(Warn, name << ": unexpected error: " << e.what());
      }
      for (std::uint64_t id : dead) conns.erase(id);
      dead.clear();
    }
    TUTTI_LOG(Debug, name << ": stopped with " << conns.size() << " clients connected");
  }

  // epoll_wait's timeout: until the nearest deadline of a parked request.
  int wait_ms() const {
    TimePoint next = TimePoint::max();
    if (!deadlines.empty()) next = deadlines.begin()->first;
    if (accept_paused_until != TimePoint{}) next = std::min(next, accept_paused_until);
    next = std::min(next, gate.next_deadline());
    if (next == TimePoint::max()) return -1;
    auto now = Clock::now();
    if (next <= now) return 0;
    // Round up: waking a little early would only spin until the deadline.
    auto ms = std::chrono::ceil<std::chrono::milliseconds>(next - now).count();
    return ms > INT_MAX / 2 ? INT_MAX / 2 : static_cast<int>(ms);
  }

  void accept_all() {
    // At most kAcceptBurst a pass, so that a flood of connections leaves
    // room for the clients' requests (the listener stays readable).
    for (int burst = 0; burst < kAcceptBurst; ++burst) {
      int fd = ::accept4(listen_fd.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        // Out of descriptors (EMFILE...): the listener stays readable, so stop
        // watching it for a while rather than spinning.
        TUTTI_LOG(Warn, name << ": accept failed (" << std::strerror(errno) << "); retrying in 100 ms");
        ctl(EPOLL_CTL_MOD, listen_fd.get(), 0, kListenId);
        accept_paused_until = Clock::now() + std::chrono::milliseconds(100);
        return;
      }
      Fd owned(fd);
      detail::set_nodelay(fd);
      std::uint64_t id = next_id++;
      ctl(EPOLL_CTL_ADD, fd, EPOLLIN, id);
      StoreConnection& c = conns[id];
      c.fd = std::move(owned);
      c.peer = detail::peer_address(fd).to_string();
      c.auth_deadline = Clock::now() + kAuthSeconds;
      deadlines.insert({c.auth_deadline, id});
      TUTTI_LOG(Debug, name << ": client " << c.peer << " connected");
      for (std::uint64_t victim : gate.admit(id, detail::address_only(c.peer), Clock::now()))
        if (StoreConnection* v = live(victim))
          drop(victim, *v, "closed: too many connections waited to authenticate", false);
    }
  }

  // Whether a connection not yet heard from has bytes waiting.
  bool has_bytes(std::uint64_t id) {
    StoreConnection* c = live(id);
    if (!c) return false;
    if (!c->in.empty()) return true;
    char b;
    return ::recv(c->fd.get(), &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
  }

  // Strangers' connections closed by the gate: one line a second at most.
  void report_gate() {
    const TimePoint now = Clock::now();
    if (now < next_gate_report) return;
    const std::size_t n = gate.take_closed_count() + timed_out;
    timed_out = 0;
    if (n == 0) return;
    next_gate_report = now + std::chrono::seconds(1);
    TUTTI_LOG(Warn, name << ": closed " << n << " connection" << (n == 1 ? "" : "s")
                         << " that did not authenticate (at most " << gate.limits().total << " may wait, "
                         << gate.limits().per_source << " from one address; silent ones go after "
                         << gate.limits().silent.count() << " ms when half of them are taken)");
  }

  void resume_accepting() {
    if (accept_paused_until == TimePoint{} || Clock::now() < accept_paused_until) return;
    accept_paused_until = TimePoint{};
    ctl(EPOLL_CTL_MOD, listen_fd.get(), EPOLLIN, kListenId);
  }

  StoreConnection* live(std::uint64_t id) {
    auto it = conns.find(id);
    return it == conns.end() || it->second.dead ? nullptr : &it->second;
  }

  void on_event(std::uint64_t id, std::uint32_t events) {
    StoreConnection* c = live(id);
    if (!c) return;
    try {
      if (events & (EPOLLIN | EPOLLHUP | EPOLLERR)) receive(id, *c);
      if (!c->dead && (events & EPOLLOUT)) flush(id, *c);
      if (!c->dead) process(id, *c);
    } catch (const std::exception& e) {
      drop(id, *c, std::string("error while serving it: ") + e.what(), true);
    }
  }

  // Marks a connection for closing and forgets its parked request.
  void drop(std::uint64_t id, StoreConnection& c, const std::string& why, bool warn) {
    if (c.dead) return;
    c.dead = true;
    if (c.parked) unpark(id, c);
    if (c.auth != 2) {
      deadlines.erase({c.auth_deadline, id});
      gate.leave(id);
      // Its descriptor goes now, not at the end of the loop's pass: a pass
      // may accept and push out many strangers.
      if (c.fd.valid()) ::epoll_ctl(epoll_fd.get(), EPOLL_CTL_DEL, c.fd.get(), nullptr);
      c.fd.reset();
    }
    if (warn)
      TUTTI_LOG(Warn, name << ": disconnecting client " << c.peer << ": " << why);
    else
      TUTTI_LOG(Debug, name << ": client " << c.peer << " left: " << why);
    dead.push_back(id);
  }

  void receive(std::uint64_t id, StoreConnection& c) {
    std::size_t total = 0;
    while (total < kMaxReadPerEvent) {
      std::size_t old = c.in.size();
      c.in.resize(old + kReadChunk);
      ssize_t n = ::recv(c.fd.get(), c.in.data() + old, kReadChunk, 0);
      int err = errno;
      c.in.resize(old + (n > 0 ? static_cast<std::size_t>(n) : 0));
      if (n > 0) {
        if (c.auth != 2) gate.spoke(id);
        total += static_cast<std::size_t>(n);
        if (c.in.size() > kMaxBuffered) {
          drop(id, c, "sent more than " + std::to_string(kMaxBuffered) + " bytes without waiting for replies", true);
          return;
        }
        continue;
      }
      if (n == 0) {
        // Run what it sent before closing (a set then close still sets).
        process(id, c);
        drop(id, c, "connection closed", false);
        return;
      }
      if (err == EINTR) continue;
      if (err == EAGAIN || err == EWOULDBLOCK) return;
      drop(id, c, std::string("read failed: ") + std::strerror(err), false);
      return;
    }
  }

  void flush(std::uint64_t id, StoreConnection& c) {
    while (c.out_sent < c.out.size()) {
      ssize_t n = ::send(c.fd.get(), c.out.data() + c.out_sent, c.out.size() - c.out_sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        c.out_sent += static_cast<std::size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (!c.want_out) {
          ctl(EPOLL_CTL_MOD, c.fd.get(), EPOLLIN | EPOLLOUT, id);
          c.want_out = true;
        }
        return;
      }
      drop(id, c, std::string("write failed: ") + std::strerror(errno), false);
      return;
    }
    c.out.clear();
    c.out_sent = 0;
    if (c.out.capacity() > kKeepCapacity) Bytes().swap(c.out);
    if (c.want_out) {
      ctl(EPOLL_CTL_MOD, c.fd.get(), EPOLLIN, id);
      c.want_out = false;
      ready.push_back(id);  // it may have requests waiting behind this reply
    }
  }

  void reply(std::uint64_t id, StoreConnection& c, const StoreFrame& frame) {
    detail::encode_store_frame(detail::kStoreReplyMagic, frame, c.out);
    flush(id, c);
  }

  // Runs the server's side of the handshake on what the client sent so far;
  // true once it has proved it knows the key.
  bool authenticated(std::uint64_t id, StoreConnection& c) {
    if (c.auth == 2) return true;
    if (c.auth == 0) {
      if (c.in.size() < detail::kAuthHelloBytes) return false;
      std::array<std::uint8_t, detail::kAuthAnswerBytes> answer{};
      std::string bad = detail::auth_server_answer(c.in.data(), key, detail::AuthRole::Store, &c.auth_state, &answer);
      if (bad.empty() && c.in.size() > detail::kAuthHelloBytes) bad = "sent data before the server's answer";
      if (!bad.empty()) {
        drop(id, c, "refused: it " + bad, true);
        return false;
      }
      c.in.clear();
      c.auth = 1;
      c.out.assign(answer.begin(), answer.end());
      flush(id, c);
      return false;
    }
    if (c.in.size() < detail::kAuthProofBytes) return false;
    if (!detail::auth_server_check_proof(c.in.data(), key, c.auth_state)) {
      drop(id, c, "refused: it failed the job-secret check (it does not hold this job's TUTTI_JOB_SECRET)", true);
      return false;
    }
    c.in.erase(c.in.begin(), c.in.begin() + detail::kAuthProofBytes);
    c.auth = 2;
    gate.leave(id);
    deadlines.erase({c.auth_deadline, id});
    TUTTI_LOG(Debug, name << ": client " << c.peer << " authenticated");
    return true;
  }

  // Decodes and runs buffered requests, one at a time.
  void process(std::uint64_t id, StoreConnection& c) {
    if (!c.dead && c.out.empty() && !authenticated(id, c)) return;
    while (!c.dead && !c.parked && c.out.empty()) {
      StoreFrame req;
      auto r = detail::take_store_request(c.in, c.need, &req);
      if (r.status == DecodeStatus::NeedMore) return;
      if (r.status == DecodeStatus::Invalid) {
        drop(id, c, "malformed request: " + r.error, true);
        return;
      }
      handle(id, c, req);
    }
  }

  void handle(std::uint64_t id, StoreConnection& c, StoreFrame& req) {
    detail::StoreOutcome o = detail::execute_store_request(kv, req);
    if (o.park) {
      park(id, c, req);
      return;
    }
    if (static_cast<StoreOp>(req.code) == StoreOp::DeleteKey && o.reply.arg > 0) ++deletions;
    reply(id, c, o.reply);
    if (o.changed) notify(req.keys[0]);
  }

  void park(std::uint64_t id, StoreConnection& c, StoreFrame& req) {
    StoreParkedRequest p;
    p.op = static_cast<StoreOp>(req.code);
    p.keys = std::move(req.keys);
    p.timeout_ms = req.arg;
    p.deadline = detail::store_deadline(Clock::now(), req.arg);
    p.deletions = deletions;
    wait_for_next(id, p, 0);  // some key is missing: that is why it parks
    deadlines.insert({p.deadline, id});
    c.parked = std::move(p);
    // A zero timeout expires at once, through the same path as any other.
  }

  // Registers `p` for its first missing key from keys[from] on; false if
  // every key from there is present. One key at a time, so that a request
  // for thousands of keys (every rank's address) costs a lookup a key over
  // its life, not an index entry per missing key.
  bool wait_for_next(std::uint64_t id, StoreParkedRequest& p, std::size_t from) {
    for (std::size_t i = from; i < p.keys.size(); ++i) {
      if (kv.find(p.keys[i]) != kv.end()) continue;
      p.next = i;
      p.registered = true;
      waiters[p.keys[i]].insert(id);
      return true;
    }
    return false;
  }

  // Removes a parked request from the indexes (not from the connection).
  void unpark(std::uint64_t id, StoreConnection& c) {
    StoreParkedRequest& p = *c.parked;
    if (p.registered) {
      auto w = waiters.find(p.keys[p.next]);
      if (w != waiters.end()) {
        w->second.erase(id);
        if (w->second.empty()) waiters.erase(w);
      }
      p.registered = false;
    }
    deadlines.erase({p.deadline, id});
  }

  // Answers a parked request: OK if every key is present now, else TIMEOUT.
  void finish_parked(std::uint64_t id, StoreConnection& c) {
    unpark(id, c);
    StoreParkedRequest p = std::move(*c.parked);
    c.parked.reset();
    StoreFrame rep;
    auto missing = detail::missing_keys(kv, p.keys);
    if (missing.empty()) {
      if (p.op == StoreOp::Wait)
        rep.code = static_cast<std::uint8_t>(StoreStatus::Ok);
      else
        rep = detail::store_values_reply(kv, p.keys);  // get, multi_get
    } else {
      rep.code = static_cast<std::uint8_t>(StoreStatus::Timeout);
      rep.arg = p.timeout_ms;
      rep.keys = std::move(missing);
    }
    reply(id, c, rep);
    ready.push_back(id);
  }

  // `key` was created or changed: wake the requests waiting for it.
  void notify(const std::string& key) {
    auto it = waiters.find(key);
    if (it == waiters.end()) return;
    std::unordered_set<std::uint64_t> ids = std::move(it->second);
    waiters.erase(it);
    for (std::uint64_t id : ids) {
      StoreConnection* c = live(id);
      if (!c || !c->parked) continue;
      StoreParkedRequest& p = *c->parked;
      p.registered = false;
      if (wait_for_next(id, p, p.next + 1)) continue;
      // Every key from `next` on is there; look again from the start only
      // if a key was deleted meanwhile.
      if (p.deletions != deletions) {
        p.deletions = deletions;
        if (wait_for_next(id, p, 0)) continue;
      }
      finish_parked(id, *c);
    }
  }

  void expire(TimePoint now) {
    while (!deadlines.empty() && deadlines.begin()->first <= now) {
      std::uint64_t id = deadlines.begin()->second;
      deadlines.erase(deadlines.begin());
      StoreConnection* c = live(id);
      if (c && c->auth != 2) {
        drop(id, *c, "refused: it did not authenticate within " + std::to_string(kAuthSeconds.count()) + " s", false);
        ++timed_out;
      } else if (c && c->parked) {
        finish_parked(id, *c);
      }
    }
  }

  void run_ready() {
    while (!ready.empty()) {
      std::vector<std::uint64_t> ids;
      ids.swap(ready);
      for (std::uint64_t id : ids) {
        StoreConnection* c = live(id);
        if (!c) continue;
        try {
          process(id, *c);
        } catch (const std::exception& e) {
          drop(id, *c, std::string("error while serving it: ") + e.what(), true);
        }
      }
    }
  }
};

TcpStoreServer::TcpStoreServer(const std::string& host, int port, const std::string& secret)
    : impl_(std::make_unique<Impl>(host, port, secret)) {}
TcpStoreServer::~TcpStoreServer() = default;
int TcpStoreServer::port() const { return impl_->port; }

}  // namespace tutti
