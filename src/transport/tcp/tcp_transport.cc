// The TCP transport: the Transport interface, matching (transport/matching.h)
// and delivery. Frames on the connections: tcp_connection.cc; the progress
// thread and waiters that read for themselves: tcp_progress.cc.
#include "transport/tcp/tcp_transport.h"

#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "transport/tcp/tcp_constants.h"

namespace tutti::detail {

using namespace tcp;

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
    : TcpTransport(rank, size, std::move(links), socket_buffer_bytes, stripe_bytes, nullptr) {}

TcpTransport::TcpTransport(int rank, int size, std::vector<std::vector<Fd>> links, std::size_t socket_buffer_bytes,
                           std::size_t stripe_bytes, TcpPeers* lazy)
    : rank_(rank), size_(size), stripe_bytes_(stripe_bytes), conns_(size), match_(size), discard_(64 << 10) {
  early_weight_.assign(static_cast<std::size_t>(size), 0);
  socket_buffer_bytes_ = socket_buffer_bytes;
  epoll_ = Fd(::epoll_create1(EPOLL_CLOEXEC));
  wake_ = Fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!epoll_.valid() || !wake_.valid()) throw Error(ErrorKind::Internal, "epoll/eventfd: " + errno_text(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u32 = kWakeIndex;
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_.get(), &ev);
  if (lazy) {
    lazy_ = true;
    listener_ = std::move(lazy->listener);
    addresses_ = std::move(lazy->addresses);
    key_ = std::move(lazy->key);
    job_id_ = lazy->job_id;
    links_ = lazy->links;
    congestion_ = std::move(lazy->congestion);
    connect_timeout_ = lazy->connect_timeout;
    if (addresses_.size() != static_cast<std::size_t>(size) || !listener_.valid())
      throw Error(ErrorKind::Internal, "the TCP transport needs a listener and every rank's address");
    // A rank may come to hold a connection (or links_) to every peer (an
    // all_to_all): raise the soft limit on descriptors towards what that
    // needs, within the hard limit.
    rlimit lim{};
    const rlim_t need = static_cast<rlim_t>(size) * static_cast<rlim_t>(links_) + 256;
    if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < need) {
      const rlim_t was = lim.rlim_cur;
      lim.rlim_cur = std::min(need, lim.rlim_max);
      if (lim.rlim_cur > was && ::setrlimit(RLIMIT_NOFILE, &lim) == 0)
        TUTTI_LOG(Debug, "raised the open-file limit from " << was << " to " << lim.rlim_cur);
    }
    set_nonblocking(listener_.get(), true);
    epoll_event lev{};
    lev.events = EPOLLIN;
    lev.data.u32 = kListenIndex;
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, listener_.get(), &lev);
  }
  for (int p = 0; p < size; ++p) {
    Conn& c = conns_[p];
    c.peer = p;
    if (p == rank) {
      c.alive = true;  // loopback to self never fails
      continue;
    }
    if (lazy_) {
      c.alive = true;  // until a connection to it fails
      c.link = Link::Idle;
      c.events = 0;
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
    c.lanes_usable = true;
    epoll_event pev{};
    pev.events = EPOLLIN | EPOLLRDHUP;
    pev.data.u32 = epoll_index(p, 0);
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, c.fd.get(), &pev);
  }
  thread_ = std::thread([this] { progress_loop(); });
}

TcpTransport::~TcpTransport() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    // Loss notices queued on connections still being made get a short
    // chance to leave (the progress thread makes them).
    const TimePoint until = Clock::now() + kNoticeGrace;
    auto notices_waiting = [&] {
      return std::any_of(conns_.begin(), conns_.end(), [](const Conn& c) {
        return c.link == Link::Connecting && c.alive && !c.doomed && !c.sendq.empty();
      });
    };
    while (lazy_ && notices_waiting() && Clock::now() < until) {
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      lock.lock();
    }
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
    if (c.doomed || c.link != Link::Ready) continue;
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
    if (c.peer == rank_ || !c.alive || c.doomed || c.link != Link::Ready || !c.fd.valid() || !c.sendq.empty() ||
        !lanes_idle(c))
      continue;
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
    if (c.peer == rank_ || !c.alive || c.doomed || c.link != Link::Ready || !c.fd.valid()) continue;
    ::shutdown(c.fd.get(), SHUT_WR);
    fds.push_back(pollfd{c.fd.get(), POLLIN, 0});
    for (Lane& l : c.lanes) {
      if (!l.fd.valid()) continue;  // (one still being made)
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
  connect_to(c);
  if (!c.alive) {  // its connection could not even be started
    req->fail(ErrorKind::PeerLost, c.failure);
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
  if (c.lanes_usable && !c.lanes.empty() && len >= stripe_bytes_) {
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
  // Either side connects: a peer that is gone is then named at once.
  if (peer != kAnyPeer && peer != rank_) connect_to(conns_[peer]);
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
      forget_early(from, *it);
      match_.erase_unexpected(from, it);
    } else {
      it->has_claim = true;
      it->claim = r;
      release(conns_[static_cast<std::size_t>(from)]);  // the rest of it is wanted
    }
    return req;
  }
  if (peer != kAnyPeer && !conns_[peer].alive) {
    req->fail(ErrorKind::PeerLost, conns_[peer].failure);
    return req;
  }
  match_.post(std::move(r));
  // Flow control: a held peer may have what this receive wants.
  if (peer != kAnyPeer) {
    release(conns_[peer]);
  } else {
    for (Conn& c : conns_) release(c);
  }
  return req;
}

bool TcpTransport::holding(int peer) const {
  std::lock_guard<std::mutex> lock(mu_);
  return conns_[static_cast<std::size_t>(peer)].held;
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
                              forget_early(p, u);
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

void TcpTransport::notify_comm_failed(std::uint64_t comm_id, const std::vector<int>& members, ErrorKind kind,
                                      const std::string& message, bool connect) {
  std::lock_guard<std::mutex> lock(mu_);
  liveness_.notify_comm_failed(comm_id, members, kind, message, connect);
}

void TcpTransport::declare_lost(int peer, const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (peer < 0 || peer >= size_ || peer == rank_) return;
    liveness_.lost(peer, why);
  }
  report_lost();
}

void TcpTransport::set_comm_failed_handler(CommFailedHandler handler) {
  liveness_.set_comm_failed_handler(std::move(handler));
}

void TcpTransport::set_peer_lost_handler(PeerLostHandler handler) {
  liveness_.set_peer_lost_handler(std::move(handler));
}

}  // namespace tutti::detail
