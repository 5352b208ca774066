#include "transport/shm/shm_transport.h"

#include <sched.h>
#include <signal.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include "common/log.h"
#include "common/process.h"
#include "shm/futex.h"
#include "shm/shm_group.h"

namespace tutti::detail {

// kind: where the payload is. addr: the sender's buffer (Remote) or the
// payload's position in the data ring (Eager, a byte counter).
enum Kind : std::uint32_t { kInline = 0, kEager = 1, kRemote = 2 };

struct ShmTransport::Desc {
  std::uint64_t comm, tag, bytes, addr, seq, sig;
  std::uint32_t kind;
  std::uint32_t pad;
  char data[kInlineBytes];
};

struct ShmTransport::Ring {
  alignas(64) std::atomic<std::uint64_t> head;        // written by the sender
  alignas(64) std::atomic<std::uint64_t> tail;        // written by the receiver
  alignas(64) std::atomic<std::uint32_t> want_space;  // set by a sender with queued messages
  alignas(64) std::atomic<std::uint64_t> data_tail;   // data-ring bytes consumed (written by the receiver)
  // acks[seq % kSlots] = seq + 1 once the receiver has copied the large
  // message `seq` (written by the receiver).
  alignas(64) std::atomic<std::uint64_t> acks[kSlots];
  alignas(64) Desc desc[kSlots];
  alignas(64) char data[kRingBytes];
};

struct ShmTransport::RankCtrl {
  alignas(64) std::atomic<std::uint32_t> doorbell;  // bumped by whoever has news for this rank
  alignas(64) std::atomic<std::uint32_t> sleepers;  // threads of this rank asleep on the doorbell
  alignas(64) std::atomic<std::uint32_t> pollers;   // threads of this rank polling the rings
};

namespace {
constexpr std::size_t kCtrlBytes = 256;
static_assert(sizeof(std::atomic<std::uint64_t>) == 8);
}  // namespace

ShmTransport::RankCtrl* ShmTransport::ctrl(int r) const {
  return reinterpret_cast<RankCtrl*>(segment_.base() + SharedSegment::kHeaderBytes + r * area_bytes_);
}

std::atomic<std::uint64_t>* ShmTransport::senders(int receiver) const {
  return reinterpret_cast<std::atomic<std::uint64_t>*>(segment_.base() + SharedSegment::kHeaderBytes +
                                                       receiver * area_bytes_ + kCtrlBytes);
}

ShmTransport::Ring* ShmTransport::ring(int receiver, int sender) const {
  return reinterpret_cast<Ring*>(segment_.base() + SharedSegment::kHeaderBytes + receiver * area_bytes_ + kCtrlBytes +
                                 senders_bytes_ + sender * sizeof(Ring));
}

std::shared_ptr<Transport> ShmTransport::create(std::shared_ptr<Transport> net, Store& store, const std::string& name,
                                                std::vector<int> pids, TimePoint deadline) {
  const int rank = net->rank(), size = net->size();
  // Every rank publishes the address of a known value and tries to read its
  // two ring neighbours' (what stops one rank reading another's memory,
  // another user or a ptrace restriction, stops a neighbour too: O(1)
  // system calls a rank, not O(p)); then all vote.
  static const std::uint64_t probe = 0x5032504954545554ull;  // "TUTTIP2P"
  const std::string prefix = "tutti/p2p" + name + "/";
  store.set(prefix + "probe/" + std::to_string(rank), std::to_string(reinterpret_cast<std::uintptr_t>(&probe)));
  const int neighbours[2] = {(rank + 1) % size, (rank + size - 1) % size};
  const std::vector<Bytes> probes = store.multi_get(
      {prefix + "probe/" + std::to_string(neighbours[0]), prefix + "probe/" + std::to_string(neighbours[1])});
  bool ok = true;
  for (int i = 0; i < 2 && ok; ++i) {
    const int p = neighbours[i];
    const std::string text(probes[static_cast<std::size_t>(i)].begin(), probes[static_cast<std::size_t>(i)].end());
    std::uintptr_t addr = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), addr);
    if (ec != std::errc() || end != text.data() + text.size())
      throw Error(ErrorKind::Internal, "rank " + std::to_string(rank) + ": rank " + std::to_string(p) +
                                           "'s shared-memory probe record \"" + text + "\" is not an address");
    std::uint64_t value = 0;
    iovec local{&value, sizeof value}, remote{reinterpret_cast<void*>(addr), sizeof value};
    ok = ::process_vm_readv(pids[static_cast<std::size_t>(p)], &local, 1, &remote, 1, 0) == sizeof value &&
         value == probe;
    if (!ok)
      TUTTI_LOG(Info, "cannot read the memory of rank " << p << " (" << std::strerror(errno)
                                                        << "); point-to-point stays on the network transport");
  }
  // The votes in one counter: voters in the low 32 bits, refusals above.
  // The last voter publishes the refusals; the others wait for them.
  const std::int64_t sum = store.add(prefix + "votes", 1 + (ok ? 0 : std::int64_t{1} << 32));
  std::int64_t refusals = sum >> 32;
  if ((sum & 0xffffffff) == size) {
    store.set(prefix + "refusals", std::to_string(refusals));
  } else {
    const Bytes v = store.get(prefix + "refusals");
    refusals = std::stoll(std::string(v.begin(), v.end()));
  }
  if (refusals > 0) return net;
  auto t = std::make_shared<ShmTransport>(std::move(net), name, std::move(pids), deadline);
  t->thread_ = std::thread([raw = t.get()] { raw->progress_thread(); });
  return t;
}

ShmTransport::ShmTransport(std::shared_ptr<Transport> net, const std::string& name, std::vector<int> pids,
                           TimePoint deadline)
    : net_(std::move(net)),
      rank_(net_->rank()),
      size_(net_->size()),
      pids_(std::move(pids)),
      senders_bytes_((static_cast<std::size_t>(size_) + 511) / 512 * 64),
      area_bytes_(kCtrlBytes + senders_bytes_ + static_cast<std::size_t>(size_) * sizeof(Ring)),
      segment_(name, rank_, size_, SharedSegment::kHeaderBytes + static_cast<std::size_t>(size_) * area_bytes_,
               0x70328000u + kSlots, deadline),
      head_(size_, 0),
      data_head_(size_, 0),
      tail_(size_, 0),
      seq_(size_, 0),
      pending_(size_),
      outstanding_(size_),
      lost_(size_) {
  announced_.assign(static_cast<std::size_t>(size_), 0);
  seen_words_.assign((static_cast<std::size_t>(size_) + 63) / 64, 0);
  watched_ = std::make_unique<std::atomic<bool>[]>(static_cast<std::size_t>(size_));
  static_assert(sizeof(RankCtrl) <= kCtrlBytes);
  static_assert(sizeof(Desc) == 128);
  static_assert(sizeof(Ring) == 41728, "docs/architecture.md states the segment size");
}

ShmTransport::~ShmTransport() {
  stop_.store(true);
  ring_doorbell(rank_);
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  const std::string why = "rank " + std::to_string(rank_) + ": the transport was shut down";
  match_.fail_posted_if([](const PostedRecv&) { return true; }, ErrorKind::Aborted, why);
  for (auto& q : pending_)
    for (SendOp& op : q) op.req->fail(ErrorKind::Aborted, why);
  for (auto& m : outstanding_)
    for (auto& [seq, op] : m) op.req->fail(ErrorKind::Aborted, why);
}

std::string ShmTransport::peer_failure(int peer) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!lost_[peer].empty()) return lost_[peer];
  }
  return net_->peer_failure(peer);
}

void ShmTransport::ring_doorbell(int r) {
  RankCtrl* c = ctrl(r);
  c->doorbell.fetch_add(1, std::memory_order_seq_cst);
  if (c->pollers.load(std::memory_order_seq_cst) == 0 && c->sleepers.load(std::memory_order_seq_cst) != 0)
    futex_wake_all(&c->doorbell);
}

RequestPtr ShmTransport::make_request() {
  auto req = std::make_shared<Completion>();
  req->drive = [w = weak_from_this(), c = req.get()](TimePoint deadline) {
    if (auto t = w.lock()) t->drive(*c, deadline);
  };
  return req;
}

void ShmTransport::drive(const Completion& req, TimePoint deadline) {
  RankCtrl* me = ctrl(rank_);
  me->pollers.fetch_add(1, std::memory_order_seq_cst);
  // Spin while the peers have cores of their own; with more ranks than
  // cores, give the core away between looks.
  const bool spin = ShmGroup::spin_limit(size_) > 0;
  const auto until = std::min(deadline, Clock::now() + std::chrono::microseconds(spin ? 50 : 200));
  for (unsigned i = 0;; ++i) {
    {
      std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
      if (lock.owns_lock()) progress_locked();
    }
    if (req.done() || ((i & 15) == 0 && Clock::now() >= until)) break;
    if (spin) {
      for (int k = 0; k < 16; ++k) cpu_relax();
    } else {
      sched_yield();
    }
  }
  me->pollers.fetch_sub(1, std::memory_order_seq_cst);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  // Peers that saw us polling did not wake the progress thread: look once
  // more now that we stop.
  std::lock_guard<std::mutex> lock(mu_);
  progress_locked();
}

bool ShmTransport::aborted_locked(std::uint64_t comm, const RequestPtr& req) const {
  auto it = aborted_.find(comm);
  if (it == aborted_.end()) return false;
  req->fail(it->second.first, it->second.second);
  return true;
}

RequestPtr ShmTransport::post_send(int peer, std::uint64_t comm_id, std::uint64_t tag, const void* buf, std::size_t len,
                                   std::uint64_t signature) {
  RequestPtr req = make_request();
  watch(peer);
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_locked(comm_id, req)) return req;
  if (signature) match_.note_operation(comm_id, tag, signature);
  if (!lost_[peer].empty()) {
    req->fail(ErrorKind::PeerLost, lost_[peer]);
    return req;
  }
  const char* data = static_cast<const char*>(buf);
  if (peer == rank_) {
    Message m{rank_, comm_id, tag, len, 0, 0, signature, false, std::vector<char>(data, data + len)};
    handle_locked(std::move(m));
    req->complete(rank_, len);
    return req;
  }
  SendOp op{peer, comm_id, tag, seq_[peer]++, signature, data, len, req};
  if (!pending_[peer].empty() || !try_post_locked(op)) pending_[peer].push_back(std::move(op));
  return req;
}

bool ShmTransport::try_post_locked(SendOp& op) {
  if (!announced_[static_cast<std::size_t>(op.peer)]) {
    // Before the first descriptor: the receiver then looks at this ring
    // from its next look on (the doorbell below brings that look).
    senders(op.peer)[rank_ / 64].fetch_or(std::uint64_t(1) << (rank_ % 64), std::memory_order_seq_cst);
    announced_[static_cast<std::size_t>(op.peer)] = 1;
  }
  Ring* out = ring(op.peer, rank_);
  const std::uint64_t h = head_[op.peer];
  const Kind kind = op.len <= kInlineBytes ? kInline : op.len <= kEagerBytes ? kEager : kRemote;
  // An eager payload takes the next op.len contiguous bytes of the data
  // ring, skipping the ring's end when it does not fit there.
  std::uint64_t at = data_head_[op.peer];
  if (kind == kEager && at % kRingBytes + op.len > kRingBytes) at += kRingBytes - at % kRingBytes;
  auto has_room = [&] {
    if (h - out->tail.load(std::memory_order_seq_cst) >= kSlots) return false;
    if (kind == kEager) return at + op.len - out->data_tail.load(std::memory_order_seq_cst) <= kRingBytes;
    return kind == kInline || !outstanding_[op.peer].count(op.seq - kSlots);
  };
  if (!has_room()) {
    // Ask the receiver to ring when it frees room, then look again: either
    // we see its new tail or it sees the request.
    out->want_space.store(1, std::memory_order_seq_cst);
    if (!has_room()) return false;
  }
  Desc& d = out->desc[h % kSlots];
  d.comm = op.comm;
  d.tag = op.tag;
  d.bytes = op.len;
  d.seq = op.seq;
  d.sig = op.sig;
  d.kind = kind;
  if (kind == kInline) {
    if (op.len) std::memcpy(d.data, op.buf, op.len);
    d.addr = 0;
  } else if (kind == kEager) {
    std::memcpy(out->data + at % kRingBytes, op.buf, op.len);
    d.addr = at;
    data_head_[op.peer] = at + op.len;
  } else {
    d.addr = reinterpret_cast<std::uint64_t>(op.buf);
  }
  head_[op.peer] = h + 1;
  out->head.store(h + 1, std::memory_order_release);
  ring_doorbell(op.peer);
  if (kind == kRemote) {
    outstanding_[op.peer].emplace(op.seq, op);
  } else {
    op.req->complete(rank_, op.len);
  }
  return true;
}

RequestPtr ShmTransport::post_recv(int peer, std::uint64_t comm_id, std::uint64_t tag, void* buf, std::size_t len,
                                   std::uint64_t signature) {
  RequestPtr req = make_request();
  watch(peer);
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_locked(comm_id, req)) return req;
  PostedRecv r{peer, comm_id, tag, static_cast<char*>(buf), len, req, signature};
  const std::string bad = match_.check_post(comm_id, tag, signature);
  if (!bad.empty()) {
    req->fail(ErrorKind::Mismatch, bad);
    return req;
  }
  int from = -1;
  Matcher<PostedRecv, Message>::UnexpectedList::iterator it;
  if (match_.find_unexpected(peer, comm_id, tag, &from, &it)) {
    Message m = std::move(*it);
    match_.erase_unexpected(from, it);
    deliver_locked(m, r);
    return req;
  }
  if (peer != kAnyPeer && !lost_[peer].empty()) {
    req->fail(ErrorKind::PeerLost, lost_[peer]);
    return req;
  }
  match_.post(std::move(r));
  // Messages already in the rings are newer than every unexpected one.
  progress_locked();
  return req;
}

void ShmTransport::progress_locked() {
  // New senders (bits are only ever set).
  std::atomic<std::uint64_t>* bits = senders(rank_);
  bool grew = false;
  for (std::size_t w = 0; w < seen_words_.size(); ++w) {
    const std::uint64_t v = bits[w].load(std::memory_order_seq_cst);
    if (v != seen_words_[w]) {
      seen_words_[w] = v;
      grew = true;
    }
  }
  if (grew) {
    active_.clear();
    for (std::size_t w = 0; w < seen_words_.size(); ++w)
      for (std::uint64_t v = seen_words_[w]; v; v &= v - 1)
        active_.push_back(static_cast<int>(w * 64) + __builtin_ctzll(v));
  }
  for (const int s : active_) {
    // Incoming messages from s.
    Ring* in = ring(rank_, s);
    const std::uint64_t h = in->head.load(std::memory_order_acquire);
    if (tail_[s] != h) {
      while (tail_[s] != h) {
        const Desc& d = in->desc[tail_[s] % kSlots];
        Message m{s, d.comm, d.tag, d.bytes, d.addr, d.seq, d.sig, d.kind == kRemote, {}};
        // Inline and eager payloads are read in place (straight into a
        // matching receive, or copied aside), before the slot is released.
        if (d.kind == kInline) {
          m.view = d.data;
          m.corrupt = d.bytes > kInlineBytes;
        } else if (d.kind == kEager) {
          m.view = in->data + d.addr % kRingBytes;
          m.corrupt = d.bytes > kEagerBytes || d.addr % kRingBytes + d.bytes > kRingBytes;
        } else {
          m.corrupt = d.kind != kRemote;
        }
        if (m.corrupt) m.view = nullptr;
        const std::uint64_t data_end = d.kind == kEager ? d.addr + d.bytes : 0;
        handle_locked(std::move(m));
        ++tail_[s];
        if (data_end) in->data_tail.store(data_end, std::memory_order_seq_cst);
        in->tail.store(tail_[s], std::memory_order_seq_cst);
      }
      if (in->want_space.load(std::memory_order_seq_cst)) {
        in->want_space.store(0, std::memory_order_relaxed);
        ring_doorbell(s);
      }
    }
  }
  for (int s = 0; s < size_; ++s) {
    if (s == rank_ || !announced_[static_cast<std::size_t>(s)]) continue;
    // Acknowledgements of our large messages to s.
    auto& outs = outstanding_[s];
    if (!outs.empty()) {
      Ring* out = ring(s, rank_);
      for (auto it = outs.begin(); it != outs.end();) {
        if (out->acks[it->first % kSlots].load(std::memory_order_acquire) == it->first + 1) {
          it->second.req->complete(rank_, it->second.len);
          it = outs.erase(it);
        } else {
          ++it;
        }
      }
    }
    // Messages queued for lack of room.
    while (!pending_[s].empty() && try_post_locked(pending_[s].front())) pending_[s].pop_front();
  }
}

void ShmTransport::handle_locked(Message m) {
  if (aborted_.count(m.comm)) {
    ack_locked(m);
    return;
  }
  match_.check_arrival(m.from, m.comm, m.tag, m.sig);
  PostedRecv r{};
  if (match_.take_posted(m.from, m.comm, m.tag, &r)) {
    deliver_locked(m, r);
    return;
  }
  if (m.view) {
    m.data.assign(m.view, m.view + m.bytes);
    m.view = nullptr;
  }
  const int from = m.from;
  match_.add_unexpected(from, std::move(m));
}

void ShmTransport::deliver_locked(Message& m, PostedRecv& r) {
  const std::string conflict = match_.conflict(m.from, m.sig, r.sig);
  if (!conflict.empty()) {
    ack_locked(m);
    r.req->fail(ErrorKind::Mismatch, conflict);
    return;
  }
  if (m.bytes != r.len) {
    ack_locked(m);
    r.req->fail(ErrorKind::Mismatch, "expected a message of " + std::to_string(r.len) + " bytes from rank " +
                                         std::to_string(m.from) + ", but it sent " + std::to_string(m.bytes) +
                                         " bytes");
    return;
  }
  if (m.corrupt) {
    r.req->fail(ErrorKind::Internal, "a message descriptor from rank " + std::to_string(m.from) + " is corrupt");
    return;
  }
  if (!m.remote) {
    if (m.bytes) std::memcpy(r.buf, m.payload(), m.bytes);
    r.req->complete(m.from, m.bytes);
    return;
  }
  char* dst = r.buf;
  std::uint64_t src = m.addr;
  std::size_t left = m.bytes;
  while (left > 0) {
    iovec local{dst, left}, remote{reinterpret_cast<void*>(src), left};
    ssize_t got = ::process_vm_readv(pids_[m.from], &local, 1, &remote, 1, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      const int err = got < 0 ? errno : EIO;
      ack_locked(m);
      if (err == ESRCH) {
        r.req->fail(ErrorKind::PeerLost, "rank " + std::to_string(m.from) + " (pid " + std::to_string(pids_[m.from]) +
                                             ") exited before its message was read");
      } else {
        r.req->fail(ErrorKind::Internal, "reading a message of " + std::to_string(m.bytes) + " bytes from rank " +
                                             std::to_string(m.from) + " failed: " + std::strerror(err));
      }
      return;
    }
    dst += got;
    src += static_cast<std::uint64_t>(got);
    left -= static_cast<std::size_t>(got);
  }
  ack_locked(m);
  r.req->complete(m.from, m.bytes);
}

void ShmTransport::ack_locked(const Message& m) {
  if (!m.remote || m.from == rank_) return;
  ring(rank_, m.from)->acks[m.seq % kSlots].store(m.seq + 1, std::memory_order_release);
  ring_doorbell(m.from);
}

void ShmTransport::abort_comm(std::uint64_t comm_id, ErrorKind kind, const std::string& message) {
  net_->abort_comm(comm_id, kind, message);
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_.count(comm_id)) return;
  aborted_.emplace(comm_id, std::make_pair(kind, message));
  match_.fail_posted_if([&](const PostedRecv& r) { return r.comm == comm_id; }, kind, message);
  match_.drop_unexpected_if([&](int, const Message& m) { return m.comm == comm_id; },
                            [&](int, const Message& m) { ack_locked(m); });
  // Sends already in a ring stay there (the receiver drops them, or reads
  // them if it has not aborted yet); their requests fail now.
  for (int p = 0; p < size_; ++p) {
    for (auto it = pending_[p].begin(); it != pending_[p].end();) {
      if (it->comm == comm_id) {
        it->req->fail(kind, message);
        it = pending_[p].erase(it);
      } else {
        ++it;
      }
    }
    for (auto& [seq, op] : outstanding_[p])
      if (op.comm == comm_id) op.req->fail(kind, message);
  }
}

void ShmTransport::fail_peer_locked(int peer, const std::string& why) {
  lost_[peer] = why;
  TUTTI_LOG(Info, "peer rank " << peer << ": " << why);
  match_.fail_posted_if([&](const PostedRecv& r) { return r.peer == peer; }, ErrorKind::PeerLost, why);
  for (SendOp& op : pending_[peer]) op.req->fail(ErrorKind::PeerLost, why);
  pending_[peer].clear();
  for (auto& [seq, op] : outstanding_[peer]) op.req->fail(ErrorKind::PeerLost, why);
  outstanding_[peer].clear();
}

void ShmTransport::check_peers_locked() {
  // The peers this rank exchanges messages with (the others' losses reach
  // it through the network transport's notices).
  for (int p = 0; p < size_; ++p) {
    if (p == rank_ || !lost_[p].empty() || !watched_[p].load(std::memory_order_relaxed)) continue;
    std::string why = net_->peer_failure(p);
    if (why.empty() && process_gone(pids_[p]))
      why = "rank " + std::to_string(p) + " (pid " + std::to_string(pids_[p]) + ") exited";
    if (!why.empty()) fail_peer_locked(p, why);
  }
}

void ShmTransport::progress_thread() {
  RankCtrl* me = ctrl(rank_);
  auto next_check = Clock::now();
  while (!stop_.load()) {
    const std::uint32_t seen = me->doorbell.load(std::memory_order_seq_cst);
    {
      std::lock_guard<std::mutex> lock(mu_);
      progress_locked();
      if (Clock::now() >= next_check) {
        check_peers_locked();
        next_check = Clock::now() + std::chrono::milliseconds(100);
      }
    }
    me->sleepers.fetch_add(1, std::memory_order_seq_cst);
    if (!stop_.load() && me->doorbell.load(std::memory_order_seq_cst) == seen)
      futex_wait(&me->doorbell, seen, std::chrono::milliseconds(100));
    me->sleepers.fetch_sub(1, std::memory_order_seq_cst);
  }
}

}  // namespace tutti::detail
