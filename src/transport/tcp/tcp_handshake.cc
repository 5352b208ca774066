// The TCP transport's connections, made on first use by the progress thread
// without blocking (tcp_transport.h). Ours, to a peer:
//
//   connect() ... writable -> auth hello (40 B) -> answer (72 B) checked ->
//   proof (32 B) + Hello (24 B) -> verdict (8 B): kept, or refused because
//   the peer's own connection is the pair's
//
// Theirs, accepted on the listener: auth hello -> answer -> proof + Hello
// checked -> verdict. A pair has one connection, or links_ (header plus
// TUTTI_SOCKETS_PER_PEER data connections) when the rank that opens them
// says so in its hello; the data connections are opened once the first is
// kept, and the opener announces them with kFrameLanesReady before the
// other side stripes anything to it.
//
// When both sides of a pair connect at once, the lower rank's connection
// wins: a rank refuses a hello from a higher rank while its own attempt to
// that rank is under way (or made), and takes a lower rank's hello in place
// of its own attempt, which that rank refuses. Neither side ever waits for
// the other to decide: each decides from what it has itself.
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "common/log.h"
#include "transport/tcp/tcp_constants.h"
#include "transport/tcp/tcp_transport.h"

namespace tutti::detail {

using namespace tcp;

TcpTransport::TcpTransport(int rank, int size, TcpPeers peers, std::size_t socket_buffer_bytes,
                           std::size_t stripe_bytes)
    : TcpTransport(rank, size, std::vector<std::vector<Fd>>(static_cast<std::size_t>(size)), socket_buffer_bytes,
                   stripe_bytes, &peers) {}

void TcpTransport::watch_peer(int peer) {
  if (peer < 0 || peer >= size_ || peer == rank_) return;
  std::lock_guard<std::mutex> lock(mu_);
  connect_to(conns_[peer]);
}

std::string TcpTransport::who(int peer) const {
  std::string where = addresses_[static_cast<std::size_t>(peer)];
  if (const auto sp = where.rfind(' '); sp != std::string::npos) where[sp] = ':';
  return "rank " + std::to_string(peer) + " (" + where + ")";
}

std::string TcpTransport::connect_now(int peer, TimePoint deadline, ErrorKind* kind) {
  std::unique_lock<std::mutex> lock(mu_);
  Conn& c = conns_[peer];
  connect_to(c);
  made_.wait_until(lock, deadline, [&] { return c.made || !c.alive || c.doomed; });
  if (c.made) return "";
  *kind = c.alive ? (c.doomed ? ErrorKind::PeerLost : ErrorKind::Timeout) : c.fail_kind;
  return !c.alive ? c.failure : c.doomed ? c.doom_why : "timed out connecting to " + who(peer);
}

void TcpTransport::connect_to(Conn& c, bool quiet) {
  if (!quiet) c.quiet = false;  // an operation needs it: its loss is a loss
  if (c.link != Link::Idle || !c.alive || c.peer == rank_ || stop_ || !lazy_) return;
  c.quiet = quiet;
  c.link = Link::Connecting;
  ++connecting_;
  c.connect_deadline = Clock::now() + connect_timeout_;
  open_link(c, 0);
  wake_progress();  // it keeps the deadline (this may be a caller's thread)
}

void TcpTransport::open_link(Conn& c, int index) {
  const std::string& where = addresses_[static_cast<std::size_t>(c.peer)];
  const auto sp = where.rfind(' ');
  SockAddr a;
  try {
    a = resolve(where.substr(0, sp), std::stoi(where.substr(sp + 1)));
  } catch (const std::exception& e) {
    fail_conn(c, "cannot connect to " + who(c.peer) + ": " + e.what());
    return;
  }
  Fd fd(::socket(a.storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) {
    fail_conn(c, "cannot connect to " + who(c.peer) + ": socket(): " + errno_text(errno));
    return;
  }
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&a.storage), a.len) != 0 && errno != EINPROGRESS) {
    // Every rank listens before it publishes its address: a refusal means
    // the peer's process is gone.
    lose_conn(c, "cannot connect to " + who(c.peer) + ": " + errno_text(errno) +
                     (errno == ECONNREFUSED ? " (it exited, crashed or was killed)" : ""));
    return;
  }
  const std::uint32_t id = next_handshake_++ % kHandshakeIds;
  Handshake& h = handshakes_[id];
  h.fd = std::move(fd);
  h.peer = c.peer;
  h.index = index;
  h.step = Step::Connect;
  h.deadline = c.connect_deadline;
  epoll_event ev{};
  ev.events = EPOLLOUT;
  ev.data.u32 = epoll_index(static_cast<int>(id), kHandshakeLane);
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, h.fd.get(), &ev);
}

void TcpTransport::end_handshake(std::uint32_t id) {
  gate_.leave(id);
  auto it = handshakes_.find(id);
  if (it == handshakes_.end()) return;
  if (it->second.fd.valid()) ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, it->second.fd.get(), nullptr);
  handshakes_.erase(it);
}

Fd TcpTransport::take_handshake(std::uint32_t id) {
  gate_.leave(id);
  auto it = handshakes_.find(id);
  Fd fd = std::move(it->second.fd);
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd.get(), nullptr);
  handshakes_.erase(it);
  return fd;
}

void TcpTransport::drop_handshakes(int peer) {
  for (auto it = handshakes_.begin(); it != handshakes_.end();) {
    if (it->second.peer == peer) {
      gate_.leave(it->first);
      if (it->second.fd.valid()) ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, it->second.fd.get(), nullptr);
      it = handshakes_.erase(it);
    } else {
      ++it;
    }
  }
}

void TcpTransport::accept_peers() {
  // At most 256 a pass, so that a flood of connections leaves room for the
  // peers' traffic (the listener stays readable).
  for (int burst = 0; burst < 256; ++burst) {
    Fd fd(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!fd.valid()) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        // Out of descriptors, say: the connection waits in the backlog.
        // Stop watching the listener for a while (it would stay readable
        // and spin this thread), and look again then.
        TUTTI_LOG(Warn, "accepting a peer connection failed: " << errno_text(errno) << "; trying again in "
                                                               << kConnectCheck.count() << " ms");
        ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, listener_.get(), nullptr);
        listener_paused_ = true;
        listener_resume_ = Clock::now() + kConnectCheck;
      }
      return;
    }
    const std::uint32_t id = next_handshake_++ % kHandshakeIds;
    Handshake& h = handshakes_[id];
    h.fd = std::move(fd);
    h.step = Step::AuthHello;
    h.want = kAuthHelloBytes;
    // A stranger that connects and stays silent holds only this entry, and
    // not for long.
    h.deadline = Clock::now() + std::min<Clock::duration>(kStrangerBudget, connect_timeout_);
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u32 = epoll_index(static_cast<int>(id), kHandshakeLane);
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, h.fd.get(), &ev);
    const std::string source = address_only(peer_address(h.fd.get()).to_string());
    for (std::uint64_t victim : gate_.admit(id, source, Clock::now()))
      end_handshake(static_cast<std::uint32_t>(victim));
  }
}

void TcpTransport::report_gate(TimePoint now) {
  if (now < next_gate_report_) return;
  const std::size_t n = gate_.take_closed_count() + strangers_timed_out_;
  strangers_timed_out_ = 0;
  if (n == 0) return;
  next_gate_report_ = now + std::chrono::seconds(1);
  TUTTI_LOG(Warn, "refused " << n << " connection" << (n == 1 ? "" : "s")
                             << " to this rank's port that did not authenticate (at most " << gate_.limits().total
                             << " may wait, " << gate_.limits().per_source << " from one address; silent ones go after "
                             << gate_.limits().silent.count() << " ms when half of them are taken)");
}

bool TcpTransport::handshake_read(std::uint32_t id, Handshake& h, bool* gone) {
  *gone = false;
  while (h.got < h.want) {
    // Exactly what the step needs: what follows a verdict is the pair's
    // first frames, read by the connection once it is attached.
    const ssize_t n = ::recv(h.fd.get(), h.in + h.got, h.want - h.got, MSG_DONTWAIT);
    if (n > 0) {
      h.got += static_cast<std::size_t>(n);
      if (h.step == Step::AuthHello) gate_.spoke(id);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    const std::string why = n == 0 ? "closed the connection" : errno_text(errno);
    if (h.step == Step::AuthHello || h.step == Step::Proof) {
      // (Silent before its hello: a probe of the port, say.)
      if (h.step == Step::Proof)
        TUTTI_LOG(Warn, "refused a peer connection from " << peer_address(h.fd.get()).to_string()
                                                          << ": it broke off the authentication (" << why << ")");
      end_handshake(id);
    } else if (superseded(h)) {
      end_handshake(id);
    } else {
      Conn& c = conns_[h.peer];
      end_handshake(id);
      lose_conn(c, "connecting to " + who(c.peer) +
                       " failed: " + (n == 0 ? "it " + why + " (it exited, crashed or was killed)" : why));
    }
    *gone = true;
    return false;
  }
  return true;
}

bool TcpTransport::superseded(const Handshake& h) const {
  // Ours, for a pair whose connection is the peer's (kept while this one
  // was under way; the peer refuses this one), or a lost peer's.
  const bool ours = h.step == Step::Connect || h.step == Step::Answer || h.step == Step::Verdict;
  if (!ours || h.peer < 0) return false;
  const Conn& c = conns_[h.peer];
  return !c.alive || c.doomed || (h.index == 0 && c.link == Link::Ready);
}

void TcpTransport::on_handshake(std::uint32_t id, std::uint32_t events) {
  auto it = handshakes_.find(id);
  if (it == handshakes_.end()) return;
  Handshake& h = it->second;
  if (h.step == Step::Connect) {
    if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) return;
    Conn& c = conns_[h.peer];
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(h.fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0 && superseded(h)) {
      end_handshake(id);
      return;
    }
    if (err != 0) {
      end_handshake(id);
      lose_conn(c, "cannot connect to " + who(c.peer) + ": " + errno_text(err) +
                       (err == ECONNREFUSED ? " (it exited, crashed or was killed)" : ""));
      return;
    }
    const auto hello = auth_client_hello(AuthRole::Peer, &h.client_nonce);
    // A fresh connection's send buffer takes these few bytes at once.
    if (::send(h.fd.get(), hello.data(), hello.size(), MSG_NOSIGNAL | MSG_DONTWAIT) !=
        static_cast<ssize_t>(hello.size())) {
      end_handshake(id);
      lose_conn(c, "connecting to " + who(c.peer) + " failed: " + errno_text(errno));
      return;
    }
    h.step = Step::Answer;
    h.got = 0;
    h.want = kAuthAnswerBytes;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP;
    ev.data.u32 = epoll_index(static_cast<int>(id), kHandshakeLane);
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, h.fd.get(), &ev);
    return;
  }
  bool gone = false;
  if (!handshake_read(id, h, &gone)) return;
  if (h.step == Step::Answer || h.step == Step::Verdict)
    step_ours(id, h);
  else
    step_theirs(id, h);
}

void TcpTransport::step_ours(std::uint32_t id, Handshake& h) {
  Conn& c = conns_[h.peer];
  const std::string name = who(c.peer);
  // (Superseded at the answer, it goes on: the peer then refuses it, rather
  // than seeing it break off.)
  if (h.step == Step::Verdict && superseded(h)) {
    end_handshake(id);
    return;
  }
  if (h.step == Step::Answer) {
    Mac proof{};
    const std::string bad = auth_client_proof(h.in, key_, AuthRole::Peer, h.client_nonce, &proof);
    if (!bad.empty()) {
      end_handshake(id);
      c.fail_kind = ErrorKind::Unauthenticated;
      fail_conn(c, name + " " + bad);
      return;
    }
    Hello hello;
    hello.rank = rank_;
    hello.world_size = size_;
    hello.job_id = job_id_;
    hello.link = hello_link(links_, h.index);
    std::uint8_t out[kAuthProofBytes + sizeof(Hello)];
    std::memcpy(out, proof.data(), kAuthProofBytes);
    std::memcpy(out + kAuthProofBytes, &hello, sizeof hello);
    if (::send(h.fd.get(), out, sizeof out, MSG_NOSIGNAL | MSG_DONTWAIT) != static_cast<ssize_t>(sizeof out)) {
      end_handshake(id);
      lose_conn(c, "connecting to " + name + " failed: " + errno_text(errno));
      return;
    }
    h.step = Step::Verdict;
    h.got = 0;
    h.want = sizeof(Verdict);
    return;
  }
  Verdict v;
  std::memcpy(&v, h.in, sizeof v);
  if (v.magic != kVerdictMagic) {
    end_handshake(id);
    fail_conn(c, "connecting to " + name + ": not a tutti peer (bad verdict)");
    return;
  }
  if (v.accepted == kVerdictLost) {
    // This rank was declared lost (it stopped answering, or its connection
    // broke): the others carried on without it.
    end_handshake(id);
    c.quiet = true;  // not a loss of that peer
    fail_conn(c, "connecting to " + name + ": it refused this rank, which the others declared lost");
    liveness_.lost(rank_, name + " refused this rank's connection: the others declared it lost");
    return;
  }
  if (v.accepted != 1) {
    // Refused: the peer's own connection is the pair's (it is the lower
    // rank and started first); it is on its way, or here already.
    const int index = h.index;
    end_handshake(id);
    if (index != 0 || c.peer > rank_)
      fail_conn(c, "connecting to " + name + ": it refused connection " + std::to_string(index) + " of the pair");
    return;
  }
  const int ours = h.index;
  Fd fd = take_handshake(id);
  attach(c, std::move(fd), ours, links_, rank_);
}

void TcpTransport::step_theirs(std::uint32_t id, Handshake& h) {
  if (h.step == Step::AuthHello) {
    std::array<std::uint8_t, kAuthAnswerBytes> answer{};
    const std::string bad = auth_server_answer(h.in, key_, AuthRole::Peer, &h.server, &answer);
    if (!bad.empty() || ::send(h.fd.get(), answer.data(), answer.size(), MSG_NOSIGNAL | MSG_DONTWAIT) !=
                            static_cast<ssize_t>(answer.size())) {
      TUTTI_LOG(Warn, "refused a peer connection from " << peer_address(h.fd.get()).to_string() << ": "
                                                        << (bad.empty() ? errno_text(errno) : "it " + bad));
      end_handshake(id);
      return;
    }
    h.step = Step::Proof;
    h.got = 0;
    h.want = kAuthProofBytes + sizeof(Hello);
    return;
  }
  const std::string from = peer_address(h.fd.get()).to_string();
  if (!auth_server_check_proof(h.in, key_, h.server)) {
    TUTTI_LOG(Warn, "refused a peer connection from " << from << ": it does not know the job's key");
    end_handshake(id);
    return;
  }
  Hello hello;
  std::memcpy(&hello, h.in + kAuthProofBytes, sizeof hello);
  if (std::string bad = check_incoming_hello(hello, rank_, size_, job_id_); !bad.empty()) {
    TUTTI_LOG(Warn, "refused a peer connection from " << from << ": " << bad);
    end_handshake(id);
    return;
  }
  const int q = hello.rank, index = hello_link_index(hello), count = hello_link_count(hello);
  Conn& c = conns_[q];
  bool keep;
  if (index == 0) {
    // The lower rank's connection is the pair's.
    keep = c.alive && !c.doomed && c.link != Link::Ready && !(c.link == Link::Connecting && rank_ < q);
  } else {
    keep = c.alive && !c.doomed && c.link == Link::Ready && c.opener == q &&
           index <= static_cast<int>(c.lanes.size()) && !c.lanes[static_cast<std::size_t>(index - 1)].fd.valid();
  }
  Verdict v;
  // A rank lost here (declared lost, or its connection broke) stays cut
  // off, and learns that it was left out.
  v.accepted = keep ? 1 : !c.alive && index == 0 ? kVerdictLost : 0;
  const bool sent = ::send(h.fd.get(), &v, sizeof v, MSG_NOSIGNAL | MSG_DONTWAIT) == static_cast<ssize_t>(sizeof v);
  Fd fd = take_handshake(id);
  if (!keep) return;
  if (!sent) {
    lose_conn(c, "accepting rank " + std::to_string(q) + "'s connection failed: " + errno_text(errno));
    return;
  }
  // Ours to it, if any, is refused by it (superseded).
  attach(c, std::move(fd), index, count, q);
}

void TcpTransport::attach(Conn& c, Fd fd, int index, int count, int opener) {
  set_nodelay(fd.get());
  set_buffer_sizes(fd.get(), socket_buffer_bytes_);
  if (!congestion_.empty()) set_congestion(fd.get(), congestion_);
  if (index > 0) {
    Lane& l = c.lanes[static_cast<std::size_t>(index - 1)];
    l.fd = std::move(fd);
    if (opener == rank_ && --c.lanes_pending == 0) {
      // Every data connection of ours is kept: stripe from now on, and tell
      // the peer so that it may too.
      c.lanes_usable = true;
      queue_notice(c, kFrameLanesReady, 0, 0, "");
    }
    return;
  }
  c.fd = std::move(fd);
  c.opener = opener;
  c.lanes.clear();
  c.lanes.resize(static_cast<std::size_t>(count - 1));
  c.lanes_usable = false;
  c.stage.resize(kStageBytes);
  if (c.link == Link::Connecting) --connecting_;
  c.link = Link::Ready;
  c.made = true;
  made_.notify_all();
  c.parked = c.driven = false;
  c.events = EPOLLIN | EPOLLRDHUP;
  c.want_out = false;
  epoll_event ev{};
  ev.events = c.events;
  ev.data.u32 = epoll_index(c.peer, 0);
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, c.fd.get(), &ev);
  TUTTI_LOG(Debug, "connected to rank " << c.peer << " (" << (opener == rank_ ? "ours" : "theirs") << ", " << count
                                        << " connection" << (count > 1 ? "s" : "") << ")");
  if (opener == rank_) {
    c.lanes_pending = count - 1;
    for (int i = 1; i < count && c.alive; ++i) open_link(c, i);
  }
  // What was posted while it was being made.
  if (c.alive && !c.sendq.empty() && flush(c) && !c.sendq.empty()) update_epoll(c, true);
}

void TcpTransport::check_connect_deadlines() {
  const TimePoint now = Clock::now();
  if (listener_paused_ && now >= listener_resume_) {
    listener_paused_ = false;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = kListenIndex;
    ::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, listener_.get(), &ev);
  }
  // (The peers whose connection timed out are failed after the loop:
  // failing one drops its other handshakes from the map.)
  std::vector<int> timed_out;
  for (auto it = handshakes_.begin(); it != handshakes_.end();) {
    Handshake& h = it->second;
    if (now < h.deadline) {
      ++it;
      continue;
    }
    const bool ours = (h.step == Step::Connect || h.step == Step::Answer || h.step == Step::Verdict) && !superseded(h);
    if (ours) timed_out.push_back(h.peer);
    if (h.fd.valid()) ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, h.fd.get(), nullptr);
    if (h.peer < 0) ++strangers_timed_out_;  // (said nothing for too long)
    gate_.leave(it->first);
    it = handshakes_.erase(it);
  }
  for (std::uint64_t id : gate_.expired(now)) end_handshake(static_cast<std::uint32_t>(id));
  report_gate(now);
  for (const int peer : timed_out)
    lose_conn(conns_[peer],
              "connecting to " + who(peer) + " timed out after " + std::to_string(connect_timeout_.count()) + " ms");
  if (connecting_ == 0 && doomed_ == 0) return;
  for (Conn& c : conns_) {
    if (c.doomed && now >= c.doom_at) {
      fail_conn(c, c.doom_why);
      continue;
    }
    if (c.link == Link::Connecting && c.alive && !c.doomed && now >= c.connect_deadline)
      lose_conn(c, who(c.peer) + " did not connect within " + std::to_string(connect_timeout_.count()) + " ms");
  }
}

}  // namespace tutti::detail
