// The TCP transport's progress: the progress thread's epoll loop, waiters
// that read their own peer's connection (drive), parking, and the reports
// of lost peers.
#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
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

bool TcpTransport::may_park(const Conn& c) const {
  // Between frames, and no receive waits on it that nobody will drive.
  if (c.rx != Rx::Header || c.hdr_got != 0 || staged(c) || !c.alive || c.draining || c.held) return false;
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
    if (c.parked && !c.driven && c.alive && !c.doomed && c.fd.valid()) {
      tick_fds_.push_back(pollfd{c.fd.get(), POLLIN | POLLRDHUP, 0});
      tick_peers_.push_back(c.peer);
    }
  if (tick_fds_.empty() || ::poll(tick_fds_.data(), tick_fds_.size(), 0) <= 0) return;
  for (std::size_t i = 0; i < tick_fds_.size(); ++i) {
    Conn& c = conns_[tick_peers_[i]];
    // (Reading one may have failed or unparked another.)
    if (tick_fds_[i].revents == 0 || !c.parked || c.driven || !c.alive || c.doomed) continue;
    handle_readable(c);
    if (!may_park(c)) unpark(c);
  }
}

void TcpTransport::drive(int peer, const Completion& req, TimePoint deadline) {
  int fd;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Conn& c = conns_[peer];
    if (req.done() || stop_ || !c.alive || c.doomed || c.draining || c.driven || !c.fd.valid() || c.link != Link::Ready)
      return;
    c.driven = true;
    c.parked = false;
    c.held = false;  // its waiter reads it (and it may stop inside a frame)
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
      if (c.alive && ready > 0) handle_readable(c);  // (nothing once doomed)
      report = reports_pending();
      staged_left = c.alive && staged(c);
      // An empty look without sleeping ends the drive only at the deadline
      // (a look by Work::test, a wait that timed out); the spin's end
      // passing during it goes on to sleeping looks. Stripes due on the
      // data connections end it too: the progress thread reads those, and
      // a driver asleep on the header connection would not see them come in
      // and would sleep out its 10 ms slices, many times what a striped
      // exchange takes (tests/multirank/test_p2p_groups.cc,
      // ExchangesWakeTheirWaiters, striped).
      const bool stripes_due =
          std::any_of(c.lanes.begin(), c.lanes.end(), [](const Lane& l) { return !l.rxq.empty(); });
      more = c.alive && !c.doomed && !c.draining && !req.done() && !stripes_due &&
             !(ready == 0 && ms == 0 && Clock::now() >= deadline);
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

void TcpTransport::tell_lost(Conn& c, const std::string& why) {
  // Only between frames, and only what the socket takes at once.
  if (!c.fd.valid() || c.link != Link::Ready || c.doomed || (!c.sendq.empty() && c.sendq.front().off > 0)) return;
  const std::string text = why.substr(0, kMaxNoticeBytes);
  FrameHeader h;
  h.flags = kFrameLostNotice;
  h.tag = static_cast<std::uint64_t>(c.peer);
  h.bytes = text.size();
  std::string frame(reinterpret_cast<const char*>(&h), sizeof h);
  frame += text;
  if (::send(c.fd.get(), frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT) < 0) return;
  // Closing with bytes unread would reset the connection, and the peer's
  // kernel could drop the notice: read what it sent, which nobody will use
  // (at most 1 MiB: a peer still sending is not stopped, and reads it).
  char sink[4096];
  for (int i = 0; i < 256 && ::recv(c.fd.get(), sink, sizeof sink, MSG_DONTWAIT) > 0; ++i) {
  }
}

void TcpTransport::reach(int peer) {
  connect_to(conns_[static_cast<std::size_t>(peer)], true);  // nothing unless links are made on first use
}

void TcpTransport::send_lost(int peer, int lost, const std::string& why) {
  Conn& c = conns_[static_cast<std::size_t>(peer)];
  if (!c.alive || c.doomed || c.link == Link::Idle) return;
  queue_notice(c, kFrameLostNotice, 0, static_cast<std::uint64_t>(lost), why);
}

void TcpTransport::send_comm_failed(int peer, std::uint64_t comm, ErrorKind kind, const std::string& why) {
  Conn& c = conns_[static_cast<std::size_t>(peer)];
  if (!c.alive || c.link == Link::Idle) return;
  queue_notice(c, kFrameCommFailed, comm, static_cast<std::uint64_t>(kind), why);
}

void TcpTransport::cut_off(int peer, const std::string& why) {
  // fail_conn leaves the peer refused from now on (tcp_handshake.cc).
  Conn& c = conns_[static_cast<std::size_t>(peer)];
  if (!c.alive) return;
  tell_lost(c, why);
  c.quiet = true;  // reported already
  fail_conn(c, why);
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
        if (idx == kListenIndex) {
          accept_peers();
          continue;
        }
        if ((idx >> kLaneShift) == kHandshakeLane) {
          on_handshake(idx & (kHandshakeIds - 1), events[i].events);
          continue;
        }
        Conn& c = conns_[idx & ((1u << kLaneShift) - 1)];
        if (!c.alive || c.doomed) continue;
        if (const std::size_t lane = idx >> kLaneShift; lane > 0) {
          if (lane > c.lanes.size()) continue;
          if (events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
            // Only while stripes are due; an idle one is not watched.
            if (!c.lanes[lane - 1].rxq.empty()) {
              handle_lane_readable(c, lane - 1);
            } else if (events[i].events & (EPOLLHUP | EPOLLERR)) {
              lose_conn(c, "a data connection to rank " + std::to_string(c.peer) + " failed");
            }
          }
          if (c.alive && (events[i].events & EPOLLOUT) &&
              flush_queue(c, c.lanes[lane - 1].fd.get(), c.lanes[lane - 1].sendq))
            update_lane(c, lane - 1);
          continue;
        }
        if (events[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
          // Closing: read on to its end, held or not.
          c.closing = true;
          release(c);
        }
        if (events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) handle_readable(c);
        if (c.alive && !c.doomed && (events[i].events & EPOLLOUT)) {
          if (flush(c) && c.sendq.empty()) update_epoll(c, false);
        }
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (ticking_ && Clock::now() >= next_tick_) tick();
      if (!handshakes_.empty() || connecting_ > 0 || doomed_ > 0 || listener_paused_) check_connect_deadlines();
      // What a driver or this thread left in a stage when reading stopped
      // at a notice (once it is reported).
      for (Conn& c : conns_)
        if (staged(c) && !c.driven && !c.held && c.alive && !c.doomed) handle_readable(c);
    }
    report_lost();
    bool pending;
    {
      std::lock_guard<std::mutex> lock(mu_);
      pending = reports_pending();
      const bool staged_left = std::any_of(conns_.begin(), conns_.end(),
                                           [](const Conn& c) { return staged(c) && !c.driven && !c.held && c.alive; });
      timeout_ms = staged_left ? 0
                   : ticking_  ? static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(
                                                     std::max(next_tick_ - Clock::now(), Clock::duration::zero()))
                                                     .count())
                               : -1;
      // Connections being made are checked against their deadlines.
      if (!staged_left && (!handshakes_.empty() || connecting_ > 0 || doomed_ > 0 || listener_paused_)) {
        const int check = static_cast<int>(kConnectCheck.count());
        timeout_ms = timeout_ms < 0 ? check : std::min(timeout_ms, check);
      }
    }
    if (pending) ::sched_yield();  // a caller is reporting: it is short
  }
}

}  // namespace tutti::detail
