#include "transport/tcp/tcp_transport.h"

#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.h"

namespace tutti::detail {
namespace {

constexpr std::uint32_t kWakeIndex = 0xffffffffu;
// epoll data of a connection: the peer's rank in the low 24 bits, above them
// 0 for the header connection or 1 + the index of a data connection.
constexpr int kLaneShift = 24;
std::uint32_t epoll_index(int peer, std::size_t lane_plus_one) {
  return static_cast<std::uint32_t>(peer) | static_cast<std::uint32_t>(lane_plus_one << kLaneShift);
}
// Bytes one connection may read per readiness event before others get a turn.
constexpr std::size_t kReadBudget = 8u << 20;
// An unexpected message's buffer is allocated up to this size when its
// header arrives; a larger one grows as its bytes do, so a header's claim
// alone never reserves more.
constexpr std::size_t kEagerUnexpectedBytes = 64u << 20;
// How long a waiting caller looks for its message without sleeping (drive).
constexpr auto kDriveSpin = std::chrono::microseconds(100);
// Receives up to this size are read by their waiter (drive).
constexpr std::size_t kDriveMaxBytes = 64u << 10;
// What one read of a connection may bring beyond the frame part it is for.
constexpr std::size_t kStageBytes = 4096;
// Buffers of delivered unexpected messages kept for the next ones.
constexpr std::size_t kSpareBytes = 64u << 20;
// How often drivers look at parked connections, and how often the progress
// thread does (and checks that drivers still run) while any is parked.
constexpr auto kLook = std::chrono::milliseconds(1);
constexpr auto kTick = std::chrono::milliseconds(10);

std::string errno_text(int err) { return std::strerror(err); }

}  // namespace

namespace {
std::vector<std::vector<Fd>> one_link_each(std::vector<Fd> peers) {
  std::vector<std::vector<Fd>> links(peers.size());
  for (std::size_t p = 0; p < peers.size(); ++p)
    if (peers[p].valid()) links[p].push_back(std::move(peers[p]));
  return links;
}
}  // namespace

TcpTransport::TcpTransport(int rank, int size, std::vector<Fd> peers, std::size_t socket_buffer_bytes)
    : TcpTransport(rank, size, one_link_each(std::move(peers)), socket_buffer_bytes, std::size_t(1) << 20) {}

TcpTransport::TcpTransport(int rank, int size, std::vector<std::vector<Fd>> links, std::size_t socket_buffer_bytes,
                           std::size_t stripe_bytes)
    : rank_(rank), size_(size), stripe_bytes_(stripe_bytes), conns_(size), match_(size), discard_(64 << 10) {
  epoll_ = Fd(::epoll_create1(EPOLL_CLOEXEC));
  wake_ = Fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!epoll_.valid() || !wake_.valid()) throw Error(ErrorKind::Internal, "epoll/eventfd: " + errno_text(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u32 = kWakeIndex;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_.get(), &ev);
  for (int p = 0; p < size; ++p) {
    Conn& c = conns_[p];
    c.peer = p;
    if (p == rank) {
      c.alive = true;  // loopback to self never fails
      continue;
    }
    if (links[p].empty()) throw Error(ErrorKind::Internal, "no connection to rank " + std::to_string(p));
    for (std::size_t l = 0; l < links[p].size(); ++l) {
      Fd& fd = links[p][l];
      set_nonblocking(fd.get(), true);
      set_nodelay(fd.get());
      set_buffer_sizes(fd.get(), socket_buffer_bytes);
      if (l > 0) c.lanes.push_back(Lane{std::move(fd), {}, {}, 0});
    }
    c.fd = std::move(links[p][0]);
    c.stage.resize(kStageBytes);
    c.alive = true;
    epoll_event pev{};
    pev.events = EPOLLIN | EPOLLRDHUP;
    pev.data.u32 = epoll_index(p, 0);
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, c.fd.get(), &pev);
  }
  thread_ = std::thread([this] { progress_loop(); });
}

TcpTransport::~TcpTransport() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_progress();
  if (thread_.joinable()) thread_.join();
  shutdown_connections();
}

void TcpTransport::say_goodbye() {
  // What is still queued (a lost-peer notice, the rest of an aborted
  // message) gets a short chance to leave first.
  const auto until = Clock::now() + std::chrono::milliseconds(200);
  auto lanes_idle = [](const Conn& c) {
    return std::all_of(c.lanes.begin(), c.lanes.end(), [](const Lane& l) { return l.sendq.empty(); });
  };
  for (Conn& c : conns_) {
    while (c.peer != rank_ && c.alive && c.fd.valid() && !c.sendq.empty() && Clock::now() < until) {
      if (!flush(c) || c.sendq.empty()) break;
      pollfd p{c.fd.get(), POLLOUT, 0};
      ::poll(&p, 1, 10);
    }
    for (std::size_t i = 0; i < c.lanes.size(); ++i)  // a failure clears c.lanes
      while (!c.lanes[i].sendq.empty() && Clock::now() < until) {
        Lane& l = c.lanes[i];
        if (!flush_queue(c, l.fd.get(), l.sendq) || l.sendq.empty()) break;
        pollfd p{l.fd.get(), POLLOUT, 0};
        ::poll(&p, 1, 10);
      }
  }
  FrameHeader h;
  h.flags = kFrameGoodbye;
  for (Conn& c : conns_) {
    // Only between frames: a half-sent message is not followed by anything.
    if (c.peer == rank_ || !c.alive || !c.fd.valid() || !c.sendq.empty() || !lanes_idle(c)) continue;
    ssize_t n = ::send(c.fd.get(), &h, sizeof h, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)n;  // a full socket buffer or a dead peer: it learns from the close
  }
}

// Orderly close: send FIN, then read until the peer's FIN so that closing
// never resets a connection with data in flight. A live peer answers our FIN
// at once (its progress thread closes on EOF); a stopped one costs at most
// the grace period.
void TcpTransport::shutdown_connections() {
  say_goodbye();
  std::vector<pollfd> fds;
  for (Conn& c : conns_) {
    if (c.peer == rank_ || !c.alive || !c.fd.valid()) continue;
    ::shutdown(c.fd.get(), SHUT_WR);
    fds.push_back(pollfd{c.fd.get(), POLLIN, 0});
    for (Lane& l : c.lanes) {
      ::shutdown(l.fd.get(), SHUT_WR);
      fds.push_back(pollfd{l.fd.get(), POLLIN, 0});
    }
  }
  auto deadline = Clock::now() + std::chrono::seconds(2);
  while (!fds.empty() && Clock::now() < deadline) {
    int ms =
        static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count()) + 1;
    if (::poll(fds.data(), fds.size(), ms) <= 0) break;
    for (std::size_t i = 0; i < fds.size();) {
      bool closed = false;
      if (fds[i].revents) {
        ssize_t n = ::recv(fds[i].fd, discard_.data(), discard_.size(), MSG_DONTWAIT);
        closed = n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR);
      }
      if (closed) {
        fds[i] = fds.back();
        fds.pop_back();
      } else {
        ++i;
      }
    }
  }
  for (Conn& c : conns_) {
    c.fd.reset();
    c.lanes.clear();
  }
}

std::string TcpTransport::peer_failure(int peer) const {
  std::lock_guard<std::mutex> lock(mu_);
  return conns_[peer].alive ? std::string() : conns_[peer].failure;
}

bool TcpTransport::comm_aborted(std::uint64_t comm, RequestPtr* fail_with) const {
  auto it = aborted_.find(comm);
  if (it == aborted_.end()) return false;
  if (fail_with) (*fail_with)->fail(it->second.first, it->second.second);
  return true;
}

RequestPtr TcpTransport::post_send(int peer, std::uint64_t comm_id, std::uint64_t tag, const void* buf, std::size_t len,
                                   std::uint64_t signature) {
  auto req = std::make_shared<Completion>();
  std::lock_guard<std::mutex> lock(mu_);
  if (comm_aborted(comm_id, &req)) return req;
  if (signature) match_.note_operation(comm_id, tag, signature);
  Conn& c = conns_[peer];
  if (!c.alive) {
    req->fail(ErrorKind::PeerLost, c.failure);
    return req;
  }
  if (peer == rank_) {
    deliver_local(comm_id, tag, static_cast<const char*>(buf), len);
    req->complete(rank_, len);
    return req;
  }
  SendOp op;
  op.hdr.comm_id = comm_id;
  op.hdr.tag = tag;
  op.hdr.bytes = len;
  op.hdr.signature = signature;
  op.buf = static_cast<const char*>(buf);
  op.len = len;
  op.req = req;
  if (!c.lanes.empty() && len >= stripe_bytes_) {
    // The header here, the payload in stripes on the data connections.
    auto st = std::make_shared<OutStripe>();
    st->comm = comm_id;
    st->base = op.buf;
    st->len = len;
    op.hdr.flags = kFrameStriped;
    op.len = 0;
    op.stripe = st;
    const int stripes = static_cast<int>(c.lanes.size());
    for (int i = 0; i < stripes; ++i) {
      const StripeExtent e = stripe_extent(len, stripes, i);
      if (e.length == 0) continue;
      SendOp part;
      part.hdr = op.hdr;
      part.buf = op.buf + e.offset;
      part.len = e.length;
      part.req = req;
      part.raw = true;
      part.stripe = st;
      ++st->left;
      Lane& l = c.lanes[static_cast<std::size_t>(i)];
      l.sendq.push_back(std::move(part));
      if (l.sendq.size() == 1 && !flush_queue(c, l.fd.get(), l.sendq)) return req;
      update_lane(c, static_cast<std::size_t>(i));
    }
    ++st->left;  // the header
  }
  c.sendq.push_back(std::move(op));
  // Write at once from the caller's thread when nothing is queued before us.
  if (c.sendq.size() == 1 && flush(c) && !c.sendq.empty()) update_epoll(c, true);
  return req;
}

bool TcpTransport::flush(Conn& c) { return flush_queue(c, c.fd.get(), c.sendq); }

bool TcpTransport::flush_queue(Conn& c, int fd, std::deque<SendOp>& q) {
  while (!q.empty()) {
    SendOp& op = q.front();
    const std::size_t hdr_len = op.raw ? 0 : sizeof(FrameHeader);
    const char* payload = op.owned.empty() ? op.buf : op.owned.data();
    iovec iov[2];
    int n = 0;
    if (op.off < hdr_len) {
      iov[n].iov_base = reinterpret_cast<char*>(&op.hdr) + op.off;
      iov[n].iov_len = hdr_len - op.off;
      ++n;
      if (op.len > 0) {
        iov[n].iov_base = const_cast<char*>(payload);
        iov[n].iov_len = op.len;
        ++n;
      }
    } else {
      iov[n].iov_base = const_cast<char*>(payload) + (op.off - hdr_len);
      iov[n].iov_len = op.len - (op.off - hdr_len);
      ++n;
    }
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = n;
    ssize_t w = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      fail_conn(c, "sending to rank " + std::to_string(c.peer) + " failed: " + errno_text(errno));
      return false;
    }
    op.off += static_cast<std::size_t>(w);
    if (op.off == hdr_len + op.len) {
      if (!op.stripe) {
        op.req->complete(c.peer, op.len);
      } else {
        if (!op.raw) op.stripe->header_sent = true;
        if (--op.stripe->left == 0) op.req->complete(c.peer, op.stripe->len);
      }
      q.pop_front();
    }
  }
  return true;
}

void TcpTransport::update_lane(Conn& c, std::size_t lane) {
  Lane& l = c.lanes[lane];
  if (!l.fd.valid()) return;
  const std::uint32_t want = (l.rxq.empty() ? 0u : EPOLLIN | EPOLLRDHUP) | (l.sendq.empty() ? 0u : EPOLLOUT);
  if (want == l.events) return;
  epoll_event ev{};
  ev.events = want;
  ev.data.u32 = epoll_index(c.peer, lane + 1);
  // An idle data connection is not watched at all: nothing is due on it, and
  // a peer that goes away is noticed on the header connection.
  ::epoll_ctl(epoll_.get(), want == 0 ? EPOLL_CTL_DEL : l.events == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, l.fd.get(), &ev);
  l.events = want;
}

void TcpTransport::update_epoll(Conn& c, bool want_out) {
  if (c.want_out == want_out || !c.fd.valid()) return;
  c.want_out = want_out;
  apply_epoll(c);
}

void TcpTransport::apply_epoll(Conn& c) {
  if (!c.fd.valid() || c.draining) return;
  // While a caller drives the connection, or it is parked, the progress
  // thread only flushes it.
  const std::uint32_t want = (c.driven || c.parked ? 0u : EPOLLIN | EPOLLRDHUP) | (c.want_out ? EPOLLOUT : 0u);
  if (want == c.events) return;
  epoll_event ev{};
  ev.events = want;
  ev.data.u32 = epoll_index(c.peer, 0);
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, c.fd.get(), &ev);
  c.events = want;
}

bool TcpTransport::may_park(const Conn& c) const {
  // Between frames, and no receive waits on it that nobody will drive.
  if (c.rx != Rx::Header || c.hdr_got != 0 || staged(c) || !c.alive || c.draining) return false;
  for (const PostedRecv& r : match_.posted())
    if ((r.peer == c.peer || r.peer == kAnyPeer) && !r.req->drive) return false;
  for (const Unexpected& u : match_.unexpected_from(c.peer))
    if (u.has_claim && !u.complete) return false;
  return true;
}

void TcpTransport::unpark(Conn& c) {
  if (!c.parked) return;
  c.parked = false;
  apply_epoll(c);
}

bool TcpTransport::park(Conn& c) {
  c.parked = may_park(c);
  apply_epoll(c);
  // Bytes left in the stage (reading stopped at a notice) are the progress
  // thread's to take: no readiness will announce them.
  if (staged(c)) return true;
  if (!c.parked || ticking_) return false;
  ticking_ = true;
  next_tick_ = Clock::now() + kTick;
  return true;
}

void TcpTransport::tick() {
  next_tick_ = Clock::now() + kTick;
  if (drives_ == 0) {
    // No caller has waited since the last tick: watch everything again.
    for (Conn& c : conns_)
      if (!c.driven) unpark(c);
    ticking_ = false;
    return;
  }
  drives_ = 0;
  look_parked();
}

void TcpTransport::look_parked() {
  // Read what came on parked connections while no caller waited for it.
  tick_fds_.clear();
  tick_peers_.clear();
  for (const Conn& c : conns_)
    if (c.parked && !c.driven && c.alive && c.fd.valid()) {
      tick_fds_.push_back(pollfd{c.fd.get(), POLLIN | POLLRDHUP, 0});
      tick_peers_.push_back(c.peer);
    }
  if (tick_fds_.empty() || ::poll(tick_fds_.data(), tick_fds_.size(), 0) <= 0) return;
  for (std::size_t i = 0; i < tick_fds_.size(); ++i) {
    Conn& c = conns_[tick_peers_[i]];
    // (Reading one may have failed or unparked another.)
    if (tick_fds_[i].revents == 0 || !c.parked || c.driven || !c.alive) continue;
    handle_readable(c);
    if (!may_park(c)) unpark(c);
  }
}

void TcpTransport::drive(int peer, const Completion& req, TimePoint deadline) {
  int fd;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Conn& c = conns_[peer];
    if (req.done() || stop_ || !c.alive || c.draining || c.driven || !c.fd.valid()) return;
    c.driven = true;
    c.parked = false;
    ++drives_;
    apply_epoll(c);
    fd = c.fd.get();
    // Drivers look at the other parked connections every kLook, so that the
    // progress thread need not wake up for it while they run.
    if (const TimePoint now = Clock::now(); now >= next_look_) {
      next_look_ = now + kLook;
      look_parked();
    }
  }
  bool kick = false;
  // First look without sleeping for a while, giving the core away between
  // looks (a sleeping thread's wake-up costs far more than a message here),
  // then sleep in poll().
  const TimePoint spin_until = std::min(deadline, Clock::now() + kDriveSpin);
  bool staged_left = false;  // read already, in the stage
  for (bool more = true; more;) {
    int ms = 0;
    const TimePoint now = Clock::now();
    if (now >= spin_until && now < deadline) {
      // Slices of at most 10 ms: a request failed by another thread (an
      // abort) is noticed within one. (No arithmetic on a deadline of
      // TimePoint::min() or max().)
      ms = 10;
      if (deadline - now < std::chrono::milliseconds(10))
        ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count()) + 1;
    }
    pollfd p{fd, POLLIN | POLLRDHUP, 0};
    const int ready = staged_left ? 1 : ::poll(&p, 1, ms);
    if (ready == 0 && ms == 0 && Clock::now() < spin_until && !req.done()) {
      ::sched_yield();
      continue;
    }
    bool report;
    {
      std::lock_guard<std::mutex> lock(mu_);
      Conn& c = conns_[peer];
      // (A connection that failed meanwhile has no descriptor left to read.)
      if (c.alive && ready > 0) handle_readable(c);
      report = reports_pending();
      staged_left = c.alive && staged(c);
      // An empty look without sleeping ends the drive only at the deadline
      // (a look by Work::test, a wait that timed out); the spin's end
      // passing during it goes on to sleeping looks. Stripes due on the
      // data connections end it too: the progress thread reads those, and
      // a driver asleep on the header connection would not see them in
      // (16 KiB exchanges took 4.7 ms, in 10 ms slices, instead of 0.11).
      const bool stripes_due =
          std::any_of(c.lanes.begin(), c.lanes.end(), [](const Lane& l) { return !l.rxq.empty(); });
      more =
          c.alive && !c.draining && !req.done() && !stripes_due && !(ready == 0 && ms == 0 && Clock::now() >= deadline);
      if (!more && c.alive && c.driven) {
        c.driven = false;
        if (req.done()) {
          kick = park(c);
        } else {
          // Its waiter goes on waiting for the progress thread.
          c.parked = false;
          apply_epoll(c);
        }
      }
    }
    if (report) {
      report_lost();
      ::sched_yield();  // another thread may be reporting
    }
  }
  if (kick) wake_progress();
}

void TcpTransport::wake_progress() {
  std::uint64_t one = 1;
  ssize_t ignored = ::write(wake_.get(), &one, sizeof one);
  (void)ignored;
}

RequestPtr TcpTransport::post_recv(int peer, std::uint64_t comm_id, std::uint64_t tag, void* buf, std::size_t len,
                                   std::uint64_t signature) {
  auto req = std::make_shared<Completion>();
  std::lock_guard<std::mutex> lock(mu_);
  // The waiter of a small message reads the connection itself. Large ones
  // are read by the progress thread, in parallel with the caller's work on
  // earlier pieces (reducing, copying).
  if (peer != kAnyPeer && peer != rank_ && len <= kDriveMaxBytes) {
    req->drive = [w = weak_from_this(), peer, c = req.get()](TimePoint deadline) {
      if (auto t = w.lock()) t->drive(peer, *c, deadline);
    };
  } else if (peer == kAnyPeer) {
    for (Conn& c : conns_) unpark(c);  // the progress thread reads for it
  } else {
    unpark(conns_[peer]);
  }
  if (comm_aborted(comm_id, &req)) return req;
  PostedRecv r{peer, comm_id, tag, static_cast<char*>(buf), len, req, signature};
  const std::string bad = match_.check_post(comm_id, tag, signature);
  if (!bad.empty()) {
    req->fail(ErrorKind::Mismatch, bad);
    return req;
  }
  int from = -1;
  Matcher<PostedRecv, Unexpected>::UnexpectedList::iterator it;
  if (match_.find_unexpected(peer, comm_id, tag, &from, &it)) {
    const std::string conflict = match_.conflict(from, it->sig, signature);
    if (!conflict.empty()) {
      req->fail(ErrorKind::Mismatch, conflict);
      return req;
    }
    if (it->complete) {
      deliver_unexpected(r, from, *it);
      match_.erase_unexpected(from, it);
    } else {
      it->has_claim = true;
      it->claim = r;
    }
    return req;
  }
  if (peer != kAnyPeer && !conns_[peer].alive) {
    req->fail(ErrorKind::PeerLost, conns_[peer].failure);
    return req;
  }
  match_.post(std::move(r));
  return req;
}

void TcpTransport::finish_recv(const PostedRecv& r, int from, const char* data, std::size_t bytes) {
  if (bytes != r.len) {
    r.req->fail(ErrorKind::Mismatch, "expected a message of " + std::to_string(r.len) + " bytes from rank " +
                                         std::to_string(from) + ", but it sent " + std::to_string(bytes) + " bytes");
    return;
  }
  if (bytes) std::memcpy(r.buf, data, bytes);
  r.req->complete(from, bytes);
}

TcpTransport::Bytes TcpTransport::take_buffer(std::size_t bytes) {
  for (auto it = spare_.begin(); it != spare_.end(); ++it) {
    if (it->capacity() < bytes) continue;
    Bytes b = std::move(*it);
    spare_bytes_ -= b.capacity();
    spare_.erase(it);
    b.resize(bytes);
    return b;
  }
  Bytes b;
  b.resize(bytes);
  return b;
}

void TcpTransport::give_back(Bytes&& b) {
  if (b.capacity() == 0 || spare_bytes_ + b.capacity() > kSpareBytes) return;
  spare_bytes_ += b.capacity();
  spare_.push_back(std::move(b));
}

void TcpTransport::deliver_unexpected(const PostedRecv& r, int from, Unexpected& u) {
  if (u.parts.empty()) {
    finish_recv(r, from, u.data.data(), u.data.size());
    give_back(std::move(u.data));
    return;
  }
  if (u.striped_bytes != r.len) {
    finish_recv(r, from, nullptr, u.striped_bytes);  // fails with Mismatch
    return;
  }
  for (std::size_t i = 0; i < u.parts.size(); ++i) {
    const StripeExtent e = stripe_extent(u.striped_bytes, static_cast<int>(u.parts.size()), static_cast<int>(i));
    if (e.length) std::memcpy(r.buf + e.offset, u.parts[i].data(), e.length);
  }
  r.req->complete(from, u.striped_bytes);
}

void TcpTransport::deliver_local(std::uint64_t comm, std::uint64_t tag, const char* buf, std::size_t len) {
  PostedRecv r{};
  if (match_.take_posted(rank_, comm, tag, &r)) {
    finish_recv(r, rank_, buf, len);
    return;
  }
  Unexpected u;
  u.comm = comm;
  u.tag = tag;
  u.data.assign(buf, buf + len);
  u.complete = true;
  match_.add_unexpected(rank_, std::move(u));
}

void TcpTransport::abort_comm(std::uint64_t comm_id, ErrorKind kind, const std::string& message) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_.count(comm_id)) return;
  aborted_[comm_id] = {kind, message};
  match_.fail_posted_if([&](const PostedRecv& r) { return r.comm == comm_id; }, kind, message);
  match_.drop_unexpected_if([&](int, const Unexpected& u) { return u.comm == comm_id; },
                            [&](int p, Unexpected& u) {
                              if (u.has_claim) u.claim.req->fail(kind, message);
                              if (conns_[p].rx_unexp == &u) conns_[p].rx_unexp = nullptr, conns_[p].rx_buf = nullptr;
                              if (u.stripe) {  // its stripes still arrive: drop them
                                u.stripe->discard = true;
                                u.stripe->unexp = nullptr;
                              }
                            });
  for (int p = 0; p < size_; ++p) {
    Conn& c = conns_[p];
    // A payload streaming into a user buffer of this communicator: discard the rest.
    if (c.rx == Rx::Payload && c.rx_req && c.hdr.comm_id == comm_id) {
      c.rx_req->fail(kind, message);
      c.rx_req.reset();
      c.rx_buf = nullptr;
    }
    for (Lane& l : c.lanes)
      for (StripeRx& x : l.rxq) {
        InStripe& m = *x.msg;
        if (m.hdr.comm_id != comm_id || m.discard) continue;
        if (m.req) m.req->fail(kind, message);
        m.discard = true;
        m.dst = nullptr;
        m.req.reset();
      }
    abort_sends(c, comm_id, kind, message);
  }
}

// Queued sends of an aborted communicator: drop those not started; a started
// one must finish (the byte streams are shared), so its payload is copied out
// of the user buffer. A striped message counts as started when any of its
// parts is.
void TcpTransport::abort_sends(Conn& c, std::uint64_t comm_id, ErrorKind kind, const std::string& message) {
  auto started = [&](const OutStripe* st) {
    if (st->header_sent) return true;
    for (const SendOp& op : c.sendq)
      if (op.stripe.get() == st && op.off > 0) return true;
    for (const Lane& l : c.lanes)
      for (const SendOp& op : l.sendq)
        if (op.stripe.get() == st && op.off > 0) return true;
    return false;
  };
  auto drop = [&](std::deque<SendOp>& q) {
    for (auto it = q.begin(); it != q.end();) {
      if (it->hdr.comm_id != comm_id) {
        ++it;
        continue;
      }
      it->req->fail(kind, message);
      OutStripe* st = it->stripe.get();
      if (st ? !started(st) : it->off == 0) {
        it = q.erase(it);
        continue;
      }
      if (st) {
        if (st->owned.empty()) st->owned.assign(st->base, st->base + st->len);
        if (it->raw) it->buf = st->owned.data() + (it->buf - st->base);
      } else if (it->owned.empty() && it->len) {
        it->owned.assign(it->buf, it->buf + it->len);
      }
      ++it;
    }
  };
  // Lanes first: deciding whether a stripe started looks at the header too.
  for (std::size_t i = 0; i < c.lanes.size(); ++i) {
    drop(c.lanes[i].sendq);
    update_lane(c, i);
  }
  drop(c.sendq);
}

void TcpTransport::fail_conn(Conn& c, const std::string& why) {
  if (!c.alive) return;
  c.alive = false;
  c.failure = why;
  c.stage_off = c.stage_len = 0;
  if (!c.said_goodbye && !stop_) lost_unreported_.emplace_back(c.peer, why);
  TUTTI_LOG(Info, "peer rank " << c.peer << ": " << why);
  if (c.fd.valid()) ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c.fd.get(), nullptr);
  c.fd.reset();
  match_.fail_posted_if([&](const PostedRecv& r) { return r.peer == c.peer; }, ErrorKind::PeerLost, why);
  if (c.rx_req) c.rx_req->fail(ErrorKind::PeerLost, why);
  c.rx_req.reset();
  auto& waiting = match_.unexpected_from(c.peer);
  for (auto it = waiting.begin(); it != waiting.end();) {
    if (it->complete) {
      ++it;  // fully received messages stay deliverable
      continue;
    }
    if (it->has_claim) it->claim.req->fail(ErrorKind::PeerLost, why);
    it = waiting.erase(it);
  }
  c.rx_unexp = nullptr;
  for (SendOp& op : c.sendq) op.req->fail(ErrorKind::PeerLost, why);
  c.sendq.clear();
  for (Lane& l : c.lanes) {
    for (StripeRx& x : l.rxq)
      if (x.msg->req) x.msg->req->fail(ErrorKind::PeerLost, why);
    for (SendOp& op : l.sendq) op.req->fail(ErrorKind::PeerLost, why);
    if (l.events) ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, l.fd.get(), nullptr);
  }
  c.lanes.clear();
}

void TcpTransport::on_header(Conn& c) {
  std::string bad = validate_frame_header(c.hdr);
  if (!bad.empty()) {
    fail_conn(c, "corrupt frame from rank " + std::to_string(c.peer) + ": " + bad);
    return;
  }
  if (c.hdr.flags & kFrameGoodbye) {
    c.said_goodbye = true;
    c.rx = Rx::Header;
    c.hdr_got = 0;
    return;
  }
  if (c.hdr.flags & (kFrameLostNotice | kFrameCommFailed)) {
    c.rx_notice = true;
    c.notice.assign(c.hdr.bytes, '\0');
    c.rx = Rx::Payload;
    c.rx_got = 0;
    c.rx_buf = c.notice.data();
    c.rx_req.reset();
    c.rx_unexp = nullptr;
    if (c.hdr.bytes == 0) on_payload_done(c);
    return;
  }
  const bool striped = c.hdr.flags & kFrameStriped;
  if (striped && c.lanes.empty()) {
    fail_conn(c, "corrupt frame from rank " + std::to_string(c.peer) +
                     ": a message striped across data connections, but this pair has none");
    return;
  }
  c.rx = Rx::Payload;
  c.rx_got = 0;
  c.rx_buf = nullptr;
  c.rx_req.reset();
  c.rx_unexp = nullptr;
  const std::uint64_t comm = c.hdr.comm_id, tag = c.hdr.tag;
  const std::size_t bytes = c.hdr.bytes;
  if (aborted_.count(comm)) {
    // discard
  } else {
    // Receives of the same operation that expect another one, and those of
    // later operations, fail (matching.h).
    match_.check_arrival(c.peer, comm, tag, c.hdr.signature);
    PostedRecv r{};
    const bool matched = match_.take_posted(c.peer, comm, tag, &r);
    if (matched) {
      const std::string conflict = match_.conflict(c.peer, c.hdr.signature, r.sig);
      if (!conflict.empty()) {
        r.req->fail(ErrorKind::Mismatch, conflict);  // payload discarded
      } else if (r.len != bytes) {
        finish_recv(r, c.peer, nullptr, bytes);  // fails with Mismatch; payload discarded
      } else {
        c.rx_buf = r.buf;
        c.rx_req = r.req;
      }
    }
    if (!matched) {
      Unexpected u;
      u.comm = comm;
      u.tag = tag;
      u.sig = c.hdr.signature;
      try {
        if (striped) {
          u.parts.resize(c.lanes.size());  // each grows as its stripe arrives
          u.striped_bytes = bytes;
        } else {
          u.data = take_buffer(std::min(bytes, kEagerUnexpectedBytes));
        }
      } catch (const std::bad_alloc&) {
        fail_conn(c, "rank " + std::to_string(c.peer) + " sent a " + std::to_string(bytes) +
                         "-byte message before its receive was posted, and it cannot be buffered");
        return;
      }
      c.rx_unexp = &match_.add_unexpected(c.peer, std::move(u));
      c.rx_buf = c.rx_unexp->data.data();
    }
  }
  if (striped) {
    start_striped_rx(c);
    return;
  }
  if (bytes == 0) on_payload_done(c);
}

// The header of a striped message is matched (or buffered, or discarded):
// its stripes are due on the data connections, in order behind the earlier
// ones there.
void TcpTransport::start_striped_rx(Conn& c) {
  auto m = std::make_shared<InStripe>();
  m->hdr = c.hdr;
  m->req = c.rx_req;
  m->dst = c.rx_req ? c.rx_buf : nullptr;
  m->unexp = c.rx_unexp;
  m->discard = !m->req && !m->unexp;
  if (m->unexp) m->unexp->stripe = m;
  c.rx = Rx::Header;
  c.hdr_got = 0;
  c.rx_buf = nullptr;
  c.rx_req.reset();
  c.rx_unexp = nullptr;
  const int stripes = static_cast<int>(c.lanes.size());
  for (int i = 0; i < stripes; ++i) {
    const StripeExtent e = stripe_extent(m->hdr.bytes, stripes, i);
    if (e.length == 0) continue;
    const auto lane = static_cast<std::size_t>(i);
    c.lanes[lane].rxq.push_back(StripeRx{m, lane, e.offset, e.length});
    ++m->left;
    update_lane(c, lane);
  }
  if (m->left == 0) finish_stripe(c, *m);
}

void TcpTransport::finish_stripe(Conn& c, InStripe& m) {
  if (m.discard) return;
  if (m.req) {
    m.req->complete(c.peer, m.hdr.bytes);
    return;
  }
  Unexpected* u = m.unexp;
  if (!u) return;
  u->complete = true;
  u->stripe.reset();  // the caller holds m
  if (!u->has_claim) return;
  deliver_unexpected(u->claim, c.peer, *u);
  auto& waiting = match_.unexpected_from(c.peer);
  for (auto it = waiting.begin(); it != waiting.end(); ++it) {
    if (&*it == u) {
      waiting.erase(it);
      break;
    }
  }
}

void TcpTransport::handle_lane_readable(Conn& c, std::size_t lane) {
  if (reports_pending()) return;  // as handle_readable
  std::size_t budget = kReadBudget;
  while (c.alive && budget > 0 && !c.lanes[lane].rxq.empty()) {
    Lane& l = c.lanes[lane];
    StripeRx& x = l.rxq.front();
    InStripe& m = *x.msg;
    std::size_t want = x.length - x.got;
    char* dst;
    if (m.discard) {
      dst = discard_.data();
      want = std::min(want, discard_.size());
    } else if (m.dst) {
      dst = m.dst + x.offset + x.got;
    } else {
      Bytes& d = m.unexp->parts[x.index];
      if (x.got == d.size()) {
        try {
          d.resize(std::min(x.length, std::max<std::size_t>(2 * d.size(), 1u << 20)));
        } catch (const std::bad_alloc&) {
          fail_conn(c, "rank " + std::to_string(c.peer) + " sent a " + std::to_string(m.hdr.bytes) +
                           "-byte message before its receive was posted, and it cannot be buffered");
          return;
        }
      }
      dst = d.data() + x.got;
      want = std::min(want, d.size() - x.got);
    }
    ssize_t n = ::recv(l.fd.get(), dst, want, MSG_DONTWAIT);
    if (n == 0) {
      fail_conn(c, "rank " + std::to_string(c.peer) + " closed its connection in the middle of a message");
      return;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      fail_conn(c, "connection to rank " + std::to_string(c.peer) + " failed: " + errno_text(errno));
      return;
    }
    budget -= std::min(budget, static_cast<std::size_t>(n));
    x.got += static_cast<std::size_t>(n);
    if (x.got == x.length) {
      std::shared_ptr<InStripe> done = std::move(x.msg);
      l.rxq.pop_front();
      if (--done->left == 0) finish_stripe(c, *done);
    }
  }
  if (!c.alive) return;
  update_lane(c, lane);
  if (c.draining && std::all_of(c.lanes.begin(), c.lanes.end(), [](const Lane& l) { return l.rxq.empty(); }))
    fail_conn(c, "rank " + std::to_string(c.peer) + " has shut down");
}

void TcpTransport::on_payload_done(Conn& c) {
  if (c.rx_notice && (c.hdr.flags & kFrameCommFailed)) {
    c.rx_notice = false;
    const std::uint64_t kind = c.hdr.tag;
    if (kind <= static_cast<std::uint64_t>(ErrorKind::Unauthenticated))
      comm_failures_.push_back(
          {c.hdr.comm_id, static_cast<ErrorKind>(kind), "rank " + std::to_string(c.peer) + " failed: " + c.notice});
    c.yield = true;
  } else if (c.rx_notice) {
    c.rx_notice = false;
    const std::uint64_t lost = c.hdr.tag;
    if (lost < static_cast<std::uint64_t>(size_) && static_cast<int>(lost) != rank_)
      lost_unreported_.emplace_back(static_cast<int>(lost), "rank " + std::to_string(c.peer) + " reports: " + c.notice);
    // Report it before reading on: what follows (the sender shutting down
    // after the failure) must not become the cause.
    c.yield = true;
  } else if (c.rx_req) {
    c.rx_req->complete(c.peer, c.hdr.bytes);
  } else if (c.rx_unexp) {
    Unexpected* u = c.rx_unexp;
    u->complete = true;
    if (u->has_claim) {
      deliver_unexpected(u->claim, c.peer, *u);
      auto& waiting = match_.unexpected_from(c.peer);
      for (auto it = waiting.begin(); it != waiting.end(); ++it) {
        if (&*it == u) {
          waiting.erase(it);
          break;
        }
      }
    }
  }
  c.rx = Rx::Header;
  c.hdr_got = 0;
  c.rx_buf = nullptr;
  c.rx_req.reset();
  c.rx_unexp = nullptr;
}

void TcpTransport::handle_readable(Conn& c) {
  // Nothing is read past a loss or failure until it is reported, by
  // whichever thread read it: what follows (peers shutting down after it)
  // must not become the cause.
  if (reports_pending()) return;
  std::size_t budget = kReadBudget;
  c.yield = false;
  // Bytes already read into the stage are taken first, whatever the budget:
  // no readiness would announce them.
  while (c.alive && !c.yield && (budget > 0 || staged(c))) {
    char* dst;
    std::size_t want;
    if (c.rx == Rx::Header) {
      dst = reinterpret_cast<char*>(&c.hdr) + c.hdr_got;
      want = sizeof(FrameHeader) - c.hdr_got;
    } else {
      want = c.hdr.bytes - c.rx_got;
      if (c.rx_unexp) {
        Bytes& d = c.rx_unexp->data;
        if (c.rx_got == d.size()) {
          try {
            d.resize(static_cast<std::size_t>(std::min<std::uint64_t>(c.hdr.bytes, 2 * d.size())));
          } catch (const std::bad_alloc&) {
            fail_conn(c, "rank " + std::to_string(c.peer) + " sent a " + std::to_string(c.hdr.bytes) +
                             "-byte message before its receive was posted, and it cannot be buffered");
            return;
          }
          c.rx_buf = d.data();
        }
        want = std::min(want, d.size() - c.rx_got);
      }
      if (c.rx_buf) {
        dst = c.rx_buf + c.rx_got;
      } else {
        dst = discard_.data();
        want = std::min(want, discard_.size());
      }
    }
    std::size_t got;
    bool drained;
    if (staged(c)) {
      got = std::min(want, c.stage_len - c.stage_off);
      std::memcpy(dst, c.stage.data() + c.stage_off, got);
      c.stage_off += got;
      // Emptied, and the read that filled it found the socket empty.
      drained = !staged(c) && c.stage_short;
    } else {
      // A header is read together with what follows it (a small message's
      // payload, the next frames) into the stage: one system call per small
      // message. So is the end of a payload that goes where it belongs.
      const bool stage = c.rx == Rx::Header || want == c.hdr.bytes - c.rx_got;
      iovec iov[2] = {{dst, want}, {c.stage.data(), c.stage.size()}};
      msghdr m{};
      m.msg_iov = iov;
      m.msg_iovlen = stage ? 2 : 1;
      const std::size_t asked = want + (stage ? c.stage.size() : 0);
      const ssize_t n = ::recvmsg(c.fd.get(), &m, MSG_DONTWAIT);
      if (n == 0) {
        bool clean = c.rx == Rx::Header && c.hdr_got == 0;
        if (clean && c.said_goodbye &&
            std::any_of(c.lanes.begin(), c.lanes.end(), [](const Lane& l) { return !l.rxq.empty(); })) {
          // Shut down in order, with stripes still in the data connections:
          // read them first (handle_lane_readable ends it).
          ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c.fd.get(), nullptr);
          c.draining = true;
          return;
        }
        fail_conn(c, !clean ? "rank " + std::to_string(c.peer) + " closed its connection in the middle of a message"
                     : c.said_goodbye
                         ? "rank " + std::to_string(c.peer) + " has shut down"
                         : "rank " + std::to_string(c.peer) +
                               " closed its connection without shutting down (it exited, crashed or was killed)");
        return;
      }
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        fail_conn(c, "connection to rank " + std::to_string(c.peer) + " failed: " + errno_text(errno));
        return;
      }
      budget -= std::min(budget, static_cast<std::size_t>(n));
      got = std::min(static_cast<std::size_t>(n), want);
      c.stage_off = 0;
      c.stage_len = static_cast<std::size_t>(n) - got;
      // Less than asked: nothing more to read now (poll and epoll say when).
      // Between frames that ends the loop; inside a payload more may have
      // come while this read copied, so look again.
      c.stage_short = static_cast<std::size_t>(n) < asked;
      drained = c.stage_short && !staged(c);
    }
    if (c.rx == Rx::Header) {
      c.hdr_got += got;
      if (c.hdr_got == sizeof(FrameHeader)) on_header(c);
    } else {
      c.rx_got += got;
      if (c.rx_got == c.hdr.bytes) on_payload_done(c);
    }
    if (drained && c.rx == Rx::Header) break;
  }
}

void TcpTransport::queue_notice(Conn& c, std::uint16_t flags, std::uint64_t comm, std::uint64_t tag,
                                const std::string& text) {
  SendOp op;
  op.hdr.flags = flags;
  op.hdr.comm_id = comm;
  op.hdr.tag = tag;
  op.owned.assign(text.begin(), text.begin() + std::min<std::size_t>(text.size(), kMaxNoticeBytes));
  op.hdr.bytes = op.owned.size();
  op.len = op.owned.size();
  op.buf = nullptr;
  op.req = std::make_shared<Completion>();
  // Ahead of every message not yet started.
  auto at = c.sendq.begin();
  if (at != c.sendq.end() && at->off > 0) ++at;
  c.sendq.insert(at, std::move(op));
  if (flush(c) && !c.sendq.empty()) update_epoll(c, true);
}

void TcpTransport::notify_comm_failed(std::uint64_t comm_id, const std::vector<int>& members, ErrorKind kind,
                                      const std::string& message) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int m : members) {
    if (m == rank_ || m < 0 || m >= size_ || !conns_[m].alive) continue;
    queue_notice(conns_[m], kFrameCommFailed, comm_id, static_cast<std::uint64_t>(kind), message);
  }
}

void TcpTransport::set_comm_failed_handler(CommFailedHandler handler) {
  std::lock_guard<std::mutex> lock(mu_);
  comm_failed_ = std::move(handler);
}

void TcpTransport::set_peer_lost_handler(PeerLostHandler handler) {
  std::vector<std::pair<int, std::string>> past;
  {
    std::lock_guard<std::mutex> lock(mu_);
    peer_lost_ = handler;
    past = lost_log_;
  }
  if (handler)
    for (auto& [peer, why] : past) handler(peer, why);
}

void TcpTransport::report_lost() {
  std::vector<std::pair<int, std::string>> lost;
  PeerLostHandler handler;
  std::vector<CommFailure> failures;
  CommFailedHandler failed_handler;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (lost_reported_.empty()) lost_reported_.assign(size_, 0);
    for (auto& [peer, why] : lost_unreported_) {
      if (lost_reported_[peer]) continue;
      lost_reported_[peer] = 1;
      lost.emplace_back(peer, why);
      // Tell every other rank, ahead of anything this rank sends later
      // (such as its own goodbye when it shuts down after the failure).
      for (Conn& c : conns_) {
        if (c.peer == rank_ || c.peer == peer || !c.alive) continue;
        queue_notice(c, kFrameLostNotice, 0, static_cast<std::uint64_t>(peer), why);
      }
    }
    lost_unreported_.clear();
    lost_log_.insert(lost_log_.end(), lost.begin(), lost.end());
    handler = peer_lost_;
    failures.swap(comm_failures_);
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

void TcpTransport::progress_loop() {
  epoll_event events[64];
  int timeout_ms = -1;
  while (true) {
    int n = ::epoll_wait(epoll_.get(), events, 64, timeout_ms);
    if (n < 0 && errno != EINTR) {
      // Without a progress engine nothing completes: fail every peer so that
      // waiters get an error instead of their deadline.
      std::string why = "the progress engine failed: epoll_wait: " + errno_text(errno);
      TUTTI_LOG(Warn, why);
      {
        std::lock_guard<std::mutex> lock(mu_);
        for (Conn& c : conns_)
          if (c.peer != rank_) fail_conn(c, why);
      }
      report_lost();
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      for (int i = 0; i < n; ++i) {
        std::uint32_t idx = events[i].data.u32;
        if (idx == kWakeIndex) {
          std::uint64_t v;
          ssize_t ignored = ::read(wake_.get(), &v, sizeof v);
          (void)ignored;
          continue;
        }
        Conn& c = conns_[idx & ((1u << kLaneShift) - 1)];
        if (!c.alive) continue;
        if (const std::size_t lane = idx >> kLaneShift; lane > 0) {
          if (lane > c.lanes.size()) continue;
          if (events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
            // Only while stripes are due; an idle one is not watched.
            if (!c.lanes[lane - 1].rxq.empty()) {
              handle_lane_readable(c, lane - 1);
            } else if (events[i].events & (EPOLLHUP | EPOLLERR)) {
              fail_conn(c, "a data connection to rank " + std::to_string(c.peer) + " failed");
            }
          }
          if (c.alive && (events[i].events & EPOLLOUT) &&
              flush_queue(c, c.lanes[lane - 1].fd.get(), c.lanes[lane - 1].sendq))
            update_lane(c, lane - 1);
          continue;
        }
        if (events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) handle_readable(c);
        if (c.alive && (events[i].events & EPOLLOUT)) {
          if (flush(c) && c.sendq.empty()) update_epoll(c, false);
        }
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (ticking_ && Clock::now() >= next_tick_) tick();
      // What a driver or this thread left in a stage when reading stopped
      // at a notice (once it is reported).
      for (Conn& c : conns_)
        if (staged(c) && !c.driven && c.alive) handle_readable(c);
    }
    report_lost();
    bool pending;
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending = reports_pending();
      const bool staged_left =
          std::any_of(conns_.begin(), conns_.end(), [](const Conn& c) { return staged(c) && !c.driven && c.alive; });
      timeout_ms = staged_left ? 0
                   : ticking_  ? static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(
                                                     std::max(next_tick_ - Clock::now(), Clock::duration::zero()))
                                                     .count())
                               : -1;
    }
    if (pending) ::sched_yield();  // a caller is reporting: it is short
  }
}

}  // namespace tutti::detail
