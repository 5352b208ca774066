#include "transport/tcp/tcp_transport.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/log.h"

namespace tutti::detail {
namespace {

constexpr std::uint32_t kWakeIndex = 0xffffffffu;
// Bytes one connection may read per readiness event before others get a turn.
constexpr std::size_t kReadBudget = 8u << 20;
// An unexpected message's buffer is allocated up to this size when its
// header arrives; a larger one grows as its bytes do, so a header's claim
// alone never reserves more.
constexpr std::size_t kEagerUnexpectedBytes = 64u << 20;

std::string errno_text(int err) { return std::strerror(err); }

}  // namespace

TcpTransport::TcpTransport(int rank, int size, std::vector<Fd> peers, std::size_t socket_buffer_bytes)
    : rank_(rank), size_(size), conns_(size), unexpected_(size), discard_(64 << 10) {
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
    c.fd = std::move(peers[p]);
    set_nonblocking(c.fd.get(), true);
    set_nodelay(c.fd.get());
    set_buffer_sizes(c.fd.get(), socket_buffer_bytes);
    c.alive = true;
    epoll_event pev{};
    pev.events = EPOLLIN | EPOLLRDHUP;
    pev.data.u32 = static_cast<std::uint32_t>(p);
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, c.fd.get(), &pev);
  }
  thread_ = std::thread([this] { progress_loop(); });
}

TcpTransport::~TcpTransport() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  std::uint64_t one = 1;
  ssize_t ignored = ::write(wake_.get(), &one, sizeof one);
  (void)ignored;
  if (thread_.joinable()) thread_.join();
  shutdown_connections();
}

void TcpTransport::say_goodbye() {
  // What is still queued (a lost-peer notice, the rest of an aborted
  // message) gets a short chance to leave first.
  const auto until = Clock::now() + std::chrono::milliseconds(200);
  for (Conn& c : conns_) {
    while (c.peer != rank_ && c.alive && c.fd.valid() && !c.sendq.empty() && Clock::now() < until) {
      if (!flush(c) || c.sendq.empty()) break;
      pollfd p{c.fd.get(), POLLOUT, 0};
      ::poll(&p, 1, 10);
    }
  }
  FrameHeader h;
  h.flags = kFrameGoodbye;
  for (Conn& c : conns_) {
    // Only between frames: a half-sent message is not followed by anything.
    if (c.peer == rank_ || !c.alive || !c.fd.valid() || !c.sendq.empty()) continue;
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
  }
  auto deadline = Clock::now() + std::chrono::seconds(2);
  while (!fds.empty() && Clock::now() < deadline) {
    int ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count()) + 1;
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
  for (Conn& c : conns_) c.fd.reset();
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

RequestPtr TcpTransport::post_send(int peer, std::uint64_t comm_id, std::uint64_t tag, const void* buf,
                                   std::size_t len, std::uint64_t signature) {
  auto req = std::make_shared<Completion>();
  std::lock_guard<std::mutex> lock(mu_);
  if (comm_aborted(comm_id, &req)) return req;
  if (signature) note_operation(comm_id, tag, signature);
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
  c.sendq.push_back(std::move(op));
  // Write at once from the caller's thread when nothing is queued before us.
  if (c.sendq.size() == 1 && flush(c) && !c.sendq.empty()) update_epoll(c, true);
  return req;
}

bool TcpTransport::flush(Conn& c) {
  while (!c.sendq.empty()) {
    SendOp& op = c.sendq.front();
    const std::size_t hdr_len = sizeof(FrameHeader);
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
    ssize_t w = ::sendmsg(c.fd.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      fail_conn(c, "sending to rank " + std::to_string(c.peer) + " failed: " + errno_text(errno));
      return false;
    }
    op.off += static_cast<std::size_t>(w);
    if (op.off == hdr_len + op.len) {
      op.req->complete(c.peer, op.len);
      c.sendq.pop_front();
    }
  }
  return true;
}

void TcpTransport::update_epoll(Conn& c, bool want_out) {
  if (c.want_out == want_out || !c.fd.valid()) return;
  c.want_out = want_out;
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | (want_out ? EPOLLOUT : 0u);
  ev.data.u32 = static_cast<std::uint32_t>(c.peer);
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, c.fd.get(), &ev);
}

std::list<TcpTransport::Unexpected>::iterator TcpTransport::find_unexpected(int peer, std::uint64_t comm,
                                                                            std::uint64_t tag, int* from) {
  auto best = unexpected_[0].end();
  std::uint64_t best_arrival = ~std::uint64_t(0);
  int lo = peer == kAnyPeer ? 0 : peer, hi = peer == kAnyPeer ? size_ - 1 : peer;
  for (int p = lo; p <= hi; ++p) {
    for (auto it = unexpected_[p].begin(); it != unexpected_[p].end(); ++it) {
      if (it->has_claim || it->comm != comm || it->tag != tag) continue;
      if (it->arrival < best_arrival) {
        best = it;
        best_arrival = it->arrival;
        *from = p;
      }
      break;  // FIFO: only the first candidate of each peer may match
    }
  }
  return best_arrival == ~std::uint64_t(0) ? unexpected_[0].end() : best;
}

RequestPtr TcpTransport::post_recv(int peer, std::uint64_t comm_id, std::uint64_t tag, void* buf, std::size_t len,
                                   std::uint64_t signature) {
  auto req = std::make_shared<Completion>();
  std::lock_guard<std::mutex> lock(mu_);
  if (comm_aborted(comm_id, &req)) return req;
  PostedRecv r{peer, comm_id, tag, static_cast<char*>(buf), len, req, signature};
  if (signature) {
    note_operation(comm_id, tag, signature);
    const std::uint64_t op = tag >> kSignedTagOpShift;
    for (int p = 0; p < size_; ++p)
      for (const Unexpected& u : unexpected_[p]) {
        if (u.comm != comm_id || !u.sig) continue;
        // A message of the same operation that another operation sent.
        if (u.sig != signature && (u.tag >> kSignedTagOpShift) == op) {
          req->fail(ErrorKind::Mismatch, signature_conflict(p, u.sig, signature));
          return req;
        }
        // A message of an operation this rank has finished without it (a
        // communicator runs its operations one at a time, each consuming
        // every message sent to it): the ranks called different operations
        // there, and neither side's messages met the other's.
        if ((u.tag >> kSignedTagOpShift) < op) {
          req->fail(ErrorKind::Mismatch, stale_message(p, u.tag >> kSignedTagOpShift, comm_id, u.sig));
          return req;
        }
      }
  }
  int from = -1;
  auto it = find_unexpected(peer, comm_id, tag, &from);
  if (from >= 0) {
    const std::string conflict = signature_conflict(from, it->sig, signature);
    if (!conflict.empty()) {
      req->fail(ErrorKind::Mismatch, conflict);
      return req;
    }
    if (it->complete) {
      finish_recv(r, from, it->data.data(), it->data.size());
      unexpected_[from].erase(it);
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
  posted_.push_back(std::move(r));
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

void TcpTransport::deliver_local(std::uint64_t comm, std::uint64_t tag, const char* buf, std::size_t len) {
  for (auto it = posted_.begin(); it != posted_.end(); ++it) {
    if ((it->peer == rank_ || it->peer == kAnyPeer) && it->comm == comm && it->tag == tag) {
      PostedRecv r = std::move(*it);
      posted_.erase(it);
      finish_recv(r, rank_, buf, len);
      return;
    }
  }
  Unexpected u;
  u.comm = comm;
  u.tag = tag;
  u.arrival = arrivals_++;
  u.data.assign(buf, buf + len);
  u.complete = true;
  unexpected_[rank_].push_back(std::move(u));
}

void TcpTransport::abort_comm(std::uint64_t comm_id, ErrorKind kind, const std::string& message) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_.count(comm_id)) return;
  aborted_[comm_id] = {kind, message};
  for (auto it = posted_.begin(); it != posted_.end();) {
    if (it->comm == comm_id) {
      it->req->fail(kind, message);
      it = posted_.erase(it);
    } else {
      ++it;
    }
  }
  for (int p = 0; p < size_; ++p) {
    for (auto it = unexpected_[p].begin(); it != unexpected_[p].end();) {
      if (it->comm != comm_id) {
        ++it;
        continue;
      }
      if (it->has_claim) it->claim.req->fail(kind, message);
      if (conns_[p].rx_unexp == &*it) conns_[p].rx_unexp = nullptr, conns_[p].rx_buf = nullptr;
      it = unexpected_[p].erase(it);
    }
    Conn& c = conns_[p];
    // A payload streaming into a user buffer of this communicator: discard the rest.
    if (c.rx == Rx::Payload && c.rx_req && c.hdr.comm_id == comm_id) {
      c.rx_req->fail(kind, message);
      c.rx_req.reset();
      c.rx_buf = nullptr;
    }
    // Queued sends: drop those not started; a started one must finish (the
    // byte stream is shared), so its payload is copied out of the user buffer.
    for (auto it = c.sendq.begin(); it != c.sendq.end();) {
      if (it->hdr.comm_id != comm_id) {
        ++it;
        continue;
      }
      it->req->fail(kind, message);
      if (it->off == 0) {
        it = c.sendq.erase(it);
      } else {
        if (it->owned.empty() && it->len) it->owned.assign(it->buf, it->buf + it->len);
        ++it;
      }
    }
  }
}

void TcpTransport::note_operation(std::uint64_t comm, std::uint64_t tag, std::uint64_t signature) {
  auto& ops = recent_ops_[comm];
  const std::uint64_t op = tag >> kSignedTagOpShift;
  if (!ops.empty() && ops.back().first == op) return;
  ops.emplace_back(op, signature);
  if (ops.size() > kRecentOps) ops.pop_front();
}

std::string TcpTransport::stale_message(int peer, std::uint64_t op, std::uint64_t comm, std::uint64_t theirs) const {
  auto words = [&](std::uint64_t s) { return describe_signature_ ? describe_signature_(s) : std::to_string(s); };
  std::string mine;
  if (auto it = recent_ops_.find(comm); it != recent_ops_.end())
    for (const auto& [o, sig] : it->second)
      if (o == op) mine = words(sig);
  return "rank " + std::to_string(peer) + " sent a message of " + words(theirs) +
         (mine.empty() ? " for an operation this rank completed without it"
                       : " where this rank ran " + mine + ", and completed it without that message");
}

void TcpTransport::fail_conn(Conn& c, const std::string& why) {
  if (!c.alive) return;
  c.alive = false;
  c.failure = why;
  if (!c.said_goodbye && !stop_) lost_unreported_.emplace_back(c.peer, why);
  TUTTI_LOG(Info, "peer rank " << c.peer << ": " << why);
  if (c.fd.valid()) ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c.fd.get(), nullptr);
  c.fd.reset();
  for (auto it = posted_.begin(); it != posted_.end();) {
    if (it->peer == c.peer) {
      it->req->fail(ErrorKind::PeerLost, why);
      it = posted_.erase(it);
    } else {
      ++it;
    }
  }
  if (c.rx_req) c.rx_req->fail(ErrorKind::PeerLost, why);
  c.rx_req.reset();
  for (auto it = unexpected_[c.peer].begin(); it != unexpected_[c.peer].end();) {
    if (it->complete) {
      ++it;  // fully received messages stay deliverable
      continue;
    }
    if (it->has_claim) it->claim.req->fail(ErrorKind::PeerLost, why);
    it = unexpected_[c.peer].erase(it);
  }
  c.rx_unexp = nullptr;
  for (SendOp& op : c.sendq) op.req->fail(ErrorKind::PeerLost, why);
  c.sendq.clear();
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
    if (c.hdr.signature) {
      // Receives of the same operation that expect another one.
      // And those of later operations: this rank completed the message's
      // operation without it (see post_recv).
      for (auto it = posted_.begin(); it != posted_.end();) {
        if (it->comm == comm && it->sig && it->sig != c.hdr.signature &&
            (it->tag >> kSignedTagOpShift) == (tag >> kSignedTagOpShift)) {
          it->req->fail(ErrorKind::Mismatch, signature_conflict(c.peer, c.hdr.signature, it->sig));
          it = posted_.erase(it);
        } else if (it->comm == comm && it->sig && (it->tag >> kSignedTagOpShift) > (tag >> kSignedTagOpShift)) {
          it->req->fail(ErrorKind::Mismatch,
                        stale_message(c.peer, tag >> kSignedTagOpShift, comm, c.hdr.signature));
          it = posted_.erase(it);
        } else {
          ++it;
        }
      }
    }
    bool matched = false;
    for (auto it = posted_.begin(); it != posted_.end(); ++it) {
      if ((it->peer == c.peer || it->peer == kAnyPeer) && it->comm == comm && it->tag == tag) {
        PostedRecv r = std::move(*it);
        posted_.erase(it);
        matched = true;
        const std::string conflict = signature_conflict(c.peer, c.hdr.signature, r.sig);
        if (!conflict.empty()) {
          r.req->fail(ErrorKind::Mismatch, conflict);  // payload discarded
        } else if (r.len != bytes) {
          finish_recv(r, c.peer, nullptr, bytes);  // fails with Mismatch; payload discarded
        } else {
          c.rx_buf = r.buf;
          c.rx_req = r.req;
        }
        break;
      }
    }
    if (!matched) {
      Unexpected u;
      u.comm = comm;
      u.tag = tag;
      u.sig = c.hdr.signature;
      u.arrival = arrivals_++;
      try {
        u.data.resize(std::min(bytes, kEagerUnexpectedBytes));
      } catch (const std::bad_alloc&) {
        fail_conn(c, "rank " + std::to_string(c.peer) + " sent a " + std::to_string(bytes) +
                         "-byte message before its receive was posted, and it cannot be buffered");
        return;
      }
      unexpected_[c.peer].push_back(std::move(u));
      c.rx_unexp = &unexpected_[c.peer].back();
      c.rx_buf = c.rx_unexp->data.data();
    }
  }
  if (bytes == 0) on_payload_done(c);
}

void TcpTransport::on_payload_done(Conn& c) {
  if (c.rx_notice && (c.hdr.flags & kFrameCommFailed)) {
    c.rx_notice = false;
    const std::uint64_t kind = c.hdr.tag;
    if (kind <= static_cast<std::uint64_t>(ErrorKind::Unauthenticated))
      comm_failures_.push_back({c.hdr.comm_id, static_cast<ErrorKind>(kind), "rank " + std::to_string(c.peer) + " failed: " + c.notice});
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
      finish_recv(u->claim, c.peer, u->data.data(), u->data.size());
      for (auto it = unexpected_[c.peer].begin(); it != unexpected_[c.peer].end(); ++it) {
        if (&*it == u) {
          unexpected_[c.peer].erase(it);
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
  std::size_t budget = kReadBudget;
  c.yield = false;
  while (c.alive && budget > 0 && !c.yield) {
    char* dst;
    std::size_t want;
    if (c.rx == Rx::Header) {
      dst = reinterpret_cast<char*>(&c.hdr) + c.hdr_got;
      want = sizeof(FrameHeader) - c.hdr_got;
    } else {
      want = c.hdr.bytes - c.rx_got;
      if (c.rx_unexp) {
        std::vector<char>& d = c.rx_unexp->data;
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
    ssize_t n = ::recv(c.fd.get(), dst, want, MSG_DONTWAIT);
    if (n == 0) {
      bool clean = c.rx == Rx::Header && c.hdr_got == 0;
      fail_conn(c, !clean ? "rank " + std::to_string(c.peer) + " closed its connection in the middle of a message"
                   : c.said_goodbye ? "rank " + std::to_string(c.peer) + " has shut down"
                                    : "rank " + std::to_string(c.peer) + " closed its connection without shutting down (it exited, crashed or was killed)");
      return;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      fail_conn(c, "connection to rank " + std::to_string(c.peer) + " failed: " + errno_text(errno));
      return;
    }
    budget -= std::min(budget, static_cast<std::size_t>(n));
    if (c.rx == Rx::Header) {
      c.hdr_got += static_cast<std::size_t>(n);
      if (c.hdr_got == sizeof(FrameHeader)) on_header(c);
    } else {
      c.rx_got += static_cast<std::size_t>(n);
      if (c.rx_got == c.hdr.bytes) on_payload_done(c);
    }
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
  }
  if (handler)
    for (auto& [peer, why] : lost) handler(peer, why);
  if (failed_handler)
    for (auto& f : failures) failed_handler(f.comm, f.kind, f.why);
}

void TcpTransport::progress_loop() {
  epoll_event events[64];
  while (true) {
    int n = ::epoll_wait(epoll_.get(), events, 64, -1);
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
        Conn& c = conns_[idx];
        if (!c.alive) continue;
        if (events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) handle_readable(c);
        if (c.alive && (events[i].events & EPOLLOUT)) {
          if (flush(c) && c.sendq.empty()) update_epoll(c, false);
        }
      }
    }
    report_lost();
  }
}

}  // namespace tutti::detail
