// The TCP transport, each connection: frames out (flush, stripes across data
// connections) and in (headers, payloads into posted buffers or unexpected
// messages), notices, and a connection's failure.
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "transport/tcp/tcp_constants.h"
#include "transport/tcp/tcp_transport.h"

namespace tutti::detail {

using namespace tcp;

// (Sends to a peer whose connection is being made wait for it: attach.)
bool TcpTransport::flush(Conn& c) { return c.link != Link::Ready || c.doomed || flush_queue(c, c.fd.get(), c.sendq); }

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
      // The peer closed, but what it sent before is still unread (its last
      // notices: that this rank was declared lost, say): read it first;
      // reading then finds the end and reports the loss.
      int unread = 0;
      if (fd == c.fd.get() && (errno == EPIPE || errno == ECONNRESET) &&
          (staged(c) || (::ioctl(fd, FIONREAD, &unread) == 0 && unread > 0)))
        return false;
      lose_conn(c, "sending to rank " + std::to_string(c.peer) + " failed: " + errno_text(errno));
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
  if (!l.fd.valid() || c.doomed) return;
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
  if (!c.fd.valid() || c.draining || c.doomed) return;
  // While a caller drives the connection, or it is parked, the progress
  // thread only flushes it.
  // A held one only for its peer closing it.
  const std::uint32_t in = c.driven || c.parked ? 0u : c.held ? EPOLLRDHUP : EPOLLIN | EPOLLRDHUP;
  const std::uint32_t want = in | (c.want_out ? EPOLLOUT : 0u);
  if (want == c.events) return;
  epoll_event ev{};
  ev.events = want;
  ev.data.u32 = epoll_index(c.peer, 0);
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, c.fd.get(), &ev);
  c.events = want;
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

void TcpTransport::lose_conn(Conn& c, const std::string& why) {
  if (!c.alive || c.doomed) return;
  if (stop_ || c.said_goodbye) {
    fail_conn(c, why);
    return;
  }
  c.doomed = true;
  made_.notify_all();
  c.doom_at = Clock::now() + kLossHoldOff;
  c.doom_why = why;
  ++doomed_;
  c.stage_off = c.stage_len = 0;
  drop_handshakes(c.peer);
  // Nothing more is read or written on it.
  if (c.fd.valid() && c.link == Link::Ready) ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c.fd.get(), nullptr);
  for (Lane& l : c.lanes) {
    if (l.events) ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, l.fd.get(), nullptr);
    l.events = 0;
  }
  TUTTI_LOG(Debug, "peer rank " << c.peer << ": " << why << "; reported lost in " << kLossHoldOff.count()
                                << " ms unless another loss is reported first");
  wake_progress();  // it keeps the time (this may be a caller's thread)
}

void TcpTransport::fail_conn(Conn& c, const std::string& why) {
  if (!c.alive) return;
  c.alive = false;
  c.held = false;
  c.closing = true;
  made_.notify_all();
  if (c.doomed) {
    c.doomed = false;
    --doomed_;
  }
  if (c.link == Link::Connecting) {
    --connecting_;
    c.link = Link::Idle;
  }
  drop_handshakes(c.peer);
  c.failure = why;
  c.stage_off = c.stage_len = 0;
  if (!c.said_goodbye && !stop_ && !c.quiet) liveness_.lost(c.peer, why);
  TUTTI_LOG(Info, "peer rank " << c.peer << ": " << why);
  if (c.fd.valid() && c.link == Link::Ready) ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c.fd.get(), nullptr);
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
    forget_early(c.peer, *it);
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
  if (c.hdr.flags & kFrameLanesReady) {
    // The opener has every data connection: stripe to it from now on.
    if (c.opener != c.peer || c.lanes.empty() ||
        !std::all_of(c.lanes.begin(), c.lanes.end(), [](const Lane& l) { return l.fd.valid(); })) {
      fail_conn(c, "corrupt frame from rank " + std::to_string(c.peer) +
                       ": it announced data connections this rank does not have");
      return;
    }
    c.lanes_usable = true;
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
      u.weight = bytes + kEarlyOverhead;
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
      early_weight_[static_cast<std::size_t>(c.peer)] += u.weight;
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
  forget_early(c.peer, *u);
  auto& waiting = match_.unexpected_from(c.peer);
  for (auto it = waiting.begin(); it != waiting.end(); ++it) {
    if (&*it == u) {
      waiting.erase(it);
      break;
    }
  }
}

void TcpTransport::handle_lane_readable(Conn& c, std::size_t lane) {
  if (reports_pending() || c.doomed) return;  // as handle_readable
  std::size_t budget = kReadBudget;
  while (c.alive && !c.doomed && budget > 0 && !c.lanes[lane].rxq.empty()) {
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
      lose_conn(c, "rank " + std::to_string(c.peer) + " closed its connection in the middle of a message");
      return;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      lose_conn(c, "connection to rank " + std::to_string(c.peer) + " failed: " + errno_text(errno));
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
  if (!c.alive || c.doomed) return;
  update_lane(c, lane);
  if (c.draining && std::all_of(c.lanes.begin(), c.lanes.end(), [](const Lane& l) { return l.rxq.empty(); }))
    fail_conn(c, "rank " + std::to_string(c.peer) + " has shut down");
}

void TcpTransport::on_payload_done(Conn& c) {
  if (c.rx_notice && (c.hdr.flags & kFrameCommFailed)) {
    c.rx_notice = false;
    liveness_.comm_failed(c.peer, c.hdr.comm_id, c.hdr.tag, c.notice);
    c.yield = true;
  } else if (c.rx_notice) {
    c.rx_notice = false;
    const std::uint64_t lost = c.hdr.tag;
    // About this rank itself: the others declared it lost (it stopped
    // answering) and are cutting it off.
    if (lost < static_cast<std::uint64_t>(size_))
      liveness_.lost(static_cast<int>(lost), "rank " + std::to_string(c.peer) + " reports: " + c.notice);
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
      forget_early(c.peer, *u);
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
  if (reports_pending() || c.doomed) return;
  std::size_t budget = kReadBudget;
  c.yield = false;
  // Bytes already read into the stage are taken first, whatever the budget:
  // no readiness would announce them.
  while (c.alive && !c.doomed && !c.yield && (budget > 0 || staged(c))) {
    // Between frames: held while nothing wants it (what the stage holds of
    // the next frames waits there).
    if (c.rx == Rx::Header && c.hdr_got == 0 && should_hold(c)) {
      c.held = true;
      c.parked = false;  // watched (for its closing) by the progress thread
      apply_epoll(c);
      return;
    }
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
        if (clean && c.said_goodbye)
          fail_conn(c, "rank " + std::to_string(c.peer) + " has shut down");
        else
          lose_conn(c, !clean ? "rank " + std::to_string(c.peer) + " closed its connection in the middle of a message"
                              : "rank " + std::to_string(c.peer) +
                                    " closed its connection without shutting down (it exited, crashed or was killed)");
        return;
      }
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        lose_conn(c, "connection to rank " + std::to_string(c.peer) + " failed: " + errno_text(errno));
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

bool TcpTransport::wanted(int peer) const {
  for (const PostedRecv& r : match_.posted())
    if (r.peer == peer || r.peer == kAnyPeer) return true;
  return false;
}

bool TcpTransport::should_hold(const Conn& c) const {
  const auto p = static_cast<std::size_t>(c.peer);
  return !c.closing && !c.driven && c.peer != rank_ && early_weight_[p] >= kHoldBytes &&
         match_.unexpected_from(c.peer).size() >= kHoldMessages && !wanted(c.peer);
}

void TcpTransport::release(Conn& c) {
  if (!c.held) return;
  c.held = false;
  apply_epoll(c);
  // What waits in the stage is the progress thread's to take: no readiness
  // announces it.
  if (staged(c)) wake_progress();
}

void TcpTransport::forget_early(int peer, const Unexpected& u) {
  std::size_t& w = early_weight_[static_cast<std::size_t>(peer)];
  w -= std::min(w, u.weight);
  if (peer != rank_ && w <= kHoldBytes / 2) release(conns_[static_cast<std::size_t>(peer)]);
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

}  // namespace tutti::detail
