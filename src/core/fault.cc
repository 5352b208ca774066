#include "core/fault.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "common/log.h"
#include "common/tags.h"
#include "core/communicator_impl.h"
#include "shm/segment.h"

namespace tutti::detail {

namespace {

constexpr std::uint32_t kMagic = 0x41544654;  // "TFTA"

// The fixed part of every message; a bit per world rank follows (the ranks
// the sender knows lost, or the decision's).
struct Head {
  std::uint32_t magic = kMagic;
  std::uint8_t type = 0;
  std::uint8_t flag = 0;
  std::uint16_t unused = 0;
  std::uint64_t comm = 0;
  std::uint64_t instance = 0;
  std::int32_t ballot = -1;  // the coordinator (member number) the message is in the name of
  std::int32_t unused2 = 0;
};
static_assert(sizeof(Head) == 32);

std::string member_name(int m, int world) {
  std::string s = "rank " + std::to_string(m);
  if (m != world) s += " (world rank " + std::to_string(world) + ")";
  return s;
}

}  // namespace

FaultService::FaultService(JobState& job)
    : job_(job),
      world_rank_(job.transport->rank()),
      world_size_(job.transport->size()),
      channel_(mix64(job.job_id ^ 0x6167726565ULL)),  // "agree"
      bytes_(sizeof(Head) + 2 * ((static_cast<std::size_t>(world_size_) + 7) / 8)),
      lost_(static_cast<std::size_t>(world_size_), 0),
      suspected_(static_cast<std::size_t>(world_size_), 0) {
  thread_ = std::thread([this] { run(); });
}

FaultService::~FaultService() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  decided_.notify_all();
  // Fails the service's pending receive, which wakes its thread, and every
  // send still queued.
  job_.transport->abort_comm(channel_, ErrorKind::Aborted, "the job is ending");
  if (thread_.joinable()) thread_.join();
}

void FaultService::poke() { send(world_rank_, Type::Wake, Key{0, 0}, -1, nullptr); }

void FaultService::send(int to, Type type, const Key& key, int ballot, const Report* r) {
  std::vector<char> msg(bytes_, 0);
  Head h;
  h.type = static_cast<std::uint8_t>(type);
  h.flag = r ? static_cast<std::uint8_t>((r->flag ? 1 : 0) | (r->no_quorum ? 2 : 0)) : 0;
  h.comm = key.first;
  h.instance = key.second;
  h.ballot = ballot;
  std::memcpy(msg.data(), &h, sizeof h);
  const std::size_t half = (bytes_ - sizeof h) / 2;
  if (r)
    for (int w = 0; w < world_size_; ++w) {
      const auto i = static_cast<std::size_t>(w);
      if (!r->lost.empty() && r->lost[i]) msg[sizeof h + i / 8] |= char(1 << (w % 8));
      if (!r->suspected.empty() && r->suspected[i]) msg[sizeof h + half + i / 8] |= char(1 << (w % 8));
    }
  // Sends to a lost rank fail, and those to a stopped one wait: neither is
  // waited for (the list is trimmed as they complete).
  std::lock_guard<std::mutex> lock(sends_mu_);
  sends_.emplace_back(std::move(msg), nullptr);
  auto& s = sends_.back();
  s.second = job_.transport->post_send(to, channel_, 0, s.first.data(), bytes_);
  for (auto it = sends_.begin(); it != sends_.end();) it = it->second && it->second->done() ? sends_.erase(it) : ++it;
}

FaultService::Report FaultService::report_of(const Instance& in) const {
  Report r;
  r.flag = in.flag;
  r.lost.assign(static_cast<std::size_t>(world_size_), 0);
  r.suspected.assign(static_cast<std::size_t>(world_size_), 0);
  for (std::size_t m = 0; m < in.members.size(); ++m) {
    const auto w = static_cast<std::size_t>(in.members[m]);
    r.lost[w] = in.failed[m];
    r.suspected[w] = in.suspected[m];
  }
  return r;
}

void FaultService::run() {
  std::vector<char> buf(bytes_);
  RequestPtr rx;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (!rx) {
      lock.unlock();
      rx = job_.transport->post_recv(kAnyPeer, channel_, 0, buf.data(), bytes_);
      lock.lock();
    }
    const TimePoint until = next_deadline();
    lock.unlock();
    rx->wait_until(until);
    lock.lock();
    if (stop_) break;
    if (rx->done()) {
      if (rx->ok()) {
        handle(buf, rx->source());
      } else {
        TUTTI_LOG(Debug, "agreement channel: " << rx->error_message());
        lock.unlock();
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        lock.lock();
      }
      rx.reset();
    }
    update_lost();
    for (auto& [key, in] : instances_) step(key, in);
    decided_.notify_all();
  }
}

TimePoint FaultService::next_deadline() const {
  TimePoint t = TimePoint::max();
  for (const auto& [key, in] : instances_)
    if (in.joined && !in.decided) {
      // Also a look every 100 ms while an agreement runs.
      t = std::min({t, in.deadline, Clock::now() + std::chrono::milliseconds(100)});
    }
  return t;
}

void FaultService::handle(const std::vector<char>& msg, int from) {
  Head h;
  std::memcpy(&h, msg.data(), sizeof h);
  if (h.magic != kMagic || from < 0 || from >= world_size_) return;
  const auto type = static_cast<Type>(h.type);
  if (type == Type::Wake) return;
  Report r;
  r.flag = (h.flag & 1) != 0;
  r.no_quorum = (h.flag & 2) != 0;
  r.lost.assign(static_cast<std::size_t>(world_size_), 0);
  r.suspected.assign(static_cast<std::size_t>(world_size_), 0);
  const std::size_t half = (bytes_ - sizeof h) / 2;
  for (int w = 0; w < world_size_; ++w) {
    const auto i = static_cast<std::size_t>(w);
    r.lost[i] = (msg[sizeof h + i / 8] >> (w % 8)) & 1;
    r.suspected[i] = (msg[sizeof h + half + i / 8] >> (w % 8)) & 1;
  }
  const Key key{h.comm, h.instance};
  Instance& in = instances_[key];
  switch (type) {
    case Type::Contribution:
      if (in.decided) {
        send_decision(key, in, from, h.ballot);
      } else {
        in.reports[from] = std::move(r);
      }
      break;
    case Type::Request:
      if (in.decided) {
        send_decision(key, in, from, h.ballot);
      } else if (!in.joined) {
        in.requests.emplace_back(from, h.ballot);
      } else {
        answer_request(key, in, from, h.ballot);
      }
      break;
    case Type::Decision:
      if (in.decided) break;
      if (!in.joined) {
        in.early = true;
        in.early_from = from;
        in.early_ballot = h.ballot;
        in.early_decision = std::move(r);
        break;
      }
      accept(key, in, from, h.ballot, r);
      break;
    default:
      break;
  }
}

void FaultService::send_decision(const Key& key, const Instance& in, int to, int ballot) {
  send(to, Type::Decision, key, ballot, &in.result);
}

void FaultService::declare(Instance& in, int member, const std::string& why) {
  in.failed[static_cast<std::size_t>(member)] = 1;
  in.suspected[static_cast<std::size_t>(member)] = 1;
  const int w = in.members[static_cast<std::size_t>(member)];
  suspected_[static_cast<std::size_t>(w)] = 1;
  if (!lost_[static_cast<std::size_t>(w)]) job_.transport->declare_lost(w, why);
}

void FaultService::refresh(Instance& in) {
  const std::size_t n = in.members.size();
  for (std::size_t m = 0; m < n; ++m) {
    const auto w = static_cast<std::size_t>(in.members[m]);
    if (lost_[w]) in.failed[m] = 1;
    if (suspected_[w]) in.suspected[m] = 1;
  }
  // What the members that contributed know (not those known lost here).
  for (const auto& [w, rep] : in.reports) {
    const int m = in.index[static_cast<std::size_t>(w)];
    if (m < 0 || in.failed[static_cast<std::size_t>(m)]) continue;
    for (std::size_t q = 0; q < n; ++q) {
      const auto x = static_cast<std::size_t>(in.members[q]);
      if (rep.lost[x] && static_cast<int>(q) != in.me) in.failed[q] = 1;
      if (rep.suspected[x]) in.suspected[q] = suspected_[x] = 1;
    }
  }
}

void FaultService::update_lost() {
  std::lock_guard<std::mutex> jl(job_.comms_mu);
  for (const auto& l : job_.lost)
    if (l.first >= 0 && l.first < world_size_) lost_[static_cast<std::size_t>(l.first)] = 1;
}

void FaultService::answer_request(const Key& key, Instance& in, int from, int ballot) {
  const int n = static_cast<int>(in.members.size());
  if (ballot < in.promised || ballot < 0 || ballot >= n || in.members[static_cast<std::size_t>(ballot)] != from) return;
  // What this rank knows now: a request can come before its first step
  // since it joined, and members known dead must not be counted as
  // declared lost below.
  update_lost();
  refresh(in);
  // The requester coordinates: every member below it is lost in its view,
  // and this rank now decides nothing with them.
  // (Counted as declared lost here, unless known dead: the quorum then
  // counts them as members that did not take part.)
  for (int m = 0; m < ballot; ++m)
    if (m != in.me && !in.failed[static_cast<std::size_t>(m)])
      in.failed[static_cast<std::size_t>(m)] = in.suspected[static_cast<std::size_t>(m)] = 1;
  in.promised = in.sent_to = ballot;
  in.deadline = Clock::now() + 2 * in.timeout;
  const Report r = report_of(in);
  send(from, Type::Contribution, key, ballot, &r);
}

void FaultService::accept(const Key& key, Instance& in, int from, int ballot, const Report& d) {
  if (ballot < in.promised) return;  // from a coordinator this rank moved on from
  const int src = in.index[static_cast<std::size_t>(from)];
  if (src < 0) return;  // not a member
  if (src != in.me && in.failed[static_cast<std::size_t>(src)] &&
      !d.lost[static_cast<std::size_t>(in.members[static_cast<std::size_t>(in.me)])])
    return;  // from a rank known lost here, and not about this rank's own exclusion
  in.decided = true;
  in.result = d;
  for (std::size_t w = 0; w < d.suspected.size(); ++w)
    if (d.suspected[w]) suspected_[w] = 1;
  for (const auto& [w, rep] : in.reports)
    if (w != world_rank_) send_decision(key, in, w, in.me);
  for (const auto& [w, b] : in.requests) send_decision(key, in, w, b);
}

void FaultService::decide(const Key& key, Instance& in) {
  const std::size_t n = in.members.size();
  Report d = report_of(in);
  int took_part = 0, known_dead = 0;
  for (std::size_t m = 0; m < n; ++m) {
    if (!in.failed[m]) ++took_part;
    if (in.failed[m] && !in.suspected[m]) ++known_dead;
  }
  for (const auto& [w, rep] : in.reports) {
    const int m = in.index[static_cast<std::size_t>(w)];
    if (m >= 0 && !in.failed[static_cast<std::size_t>(m)]) d.flag = d.flag && rep.flag;
  }
  // More than half of the members not known dead: no other group of them
  // can have decided without these.
  d.no_quorum = 2 * took_part <= static_cast<int>(n) - known_dead;
  in.decided = true;
  in.result = std::move(d);
  // To every member, those known lost too: one that only stopped learns
  // from it, when it wakes, that it was left out.
  for (std::size_t m = 0; m < n; ++m)
    if (static_cast<int>(m) != in.me) send_decision(key, in, in.members[m], in.me);
  for (const auto& [w, b] : in.requests) send_decision(key, in, w, b);
}

void FaultService::step(const Key& key, Instance& in) {
  if (!in.joined || in.decided) return;
  const std::size_t me_world = static_cast<std::size_t>(in.members[static_cast<std::size_t>(in.me)]);
  if (lost_[me_world]) {
    in.decided = in.excluded = true;
    std::lock_guard<std::mutex> jl(job_.comms_mu);
    for (const auto& l : job_.lost)
      if (l.first == static_cast<int>(me_world)) in.why = l.second;
    return;
  }
  refresh(in);
  if (in.early) {
    in.early = false;
    accept(key, in, in.early_from, in.early_ballot, in.early_decision);
    if (in.decided) return;
  }
  if (!in.requests.empty()) {
    auto requests = std::move(in.requests);
    in.requests.clear();
    std::sort(requests.begin(), requests.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
    for (const auto& [w, b] : requests) answer_request(key, in, w, b);
  }
  const int n = static_cast<int>(in.members.size());
  for (int guard = 0; guard <= n; ++guard) {
    int c = 0;
    while (c < n && c != in.me && in.failed[static_cast<std::size_t>(c)]) ++c;
    const TimePoint now = Clock::now();
    if (c == in.me) {
      if (!in.coordinating) {
        in.coordinating = true;
        in.promised = std::max(in.promised, in.me);
        in.deadline = now + in.timeout;
        // Taking over: members may have decided already.
        if (in.me != 0)
          for (int m = 0; m < n; ++m)
            if (m != in.me && !in.failed[static_cast<std::size_t>(m)] &&
                !in.reports.count(in.members[static_cast<std::size_t>(m)]))
              send(in.members[static_cast<std::size_t>(m)], Type::Request, key, in.me, nullptr);
      }
      std::vector<int> missing;
      for (int m = 0; m < n; ++m)
        if (m != in.me && !in.failed[static_cast<std::size_t>(m)] &&
            !in.reports.count(in.members[static_cast<std::size_t>(m)]))
          missing.push_back(m);
      if (!missing.empty() && now < in.deadline) return;
      for (int m : missing)
        declare(in, m,
                member_name(m, in.members[static_cast<std::size_t>(m)]) + " did not take part in an agreement within " +
                    std::to_string(in.timeout.count()) + " ms (declared lost by " + member_name(in.me, world_rank_) +
                    ")");
      decide(key, in);
      return;
    }
    if (in.sent_to != c) {
      in.sent_to = c;
      in.promised = std::max(in.promised, c);
      in.deadline = now + 2 * in.timeout;
      const Report r = report_of(in);
      send(in.members[static_cast<std::size_t>(c)], Type::Contribution, key, c, &r);
      return;
    }
    if (now < in.deadline) return;
    declare(in, c,
            member_name(c, in.members[static_cast<std::size_t>(c)]) +
                " coordinated an agreement and did not answer within " + std::to_string(2 * in.timeout.count()) +
                " ms (declared lost by " + member_name(in.me, world_rank_) + ")");
  }
}

Agreement FaultService::agree(std::uint64_t comm_id, std::uint64_t instance, const std::vector<int>& members, int me,
                              bool flag, std::chrono::milliseconds timeout, const std::string& where) {
  const Key key{comm_id, instance};
  std::unique_lock<std::mutex> lock(mu_);
  Instance& in = instances_[key];
  in.joined = true;
  in.members = members;
  in.index.assign(static_cast<std::size_t>(world_size_), -1);
  for (std::size_t m = 0; m < members.size(); ++m) in.index[static_cast<std::size_t>(members[m])] = static_cast<int>(m);
  in.me = me;
  in.flag = flag;
  in.timeout = std::max(timeout, std::chrono::milliseconds(1));
  in.failed.assign(members.size(), 0);
  in.suspected.assign(members.size(), 0);
  lock.unlock();
  poke();
  lock.lock();
  decided_.wait(lock, [&] { return in.decided || stop_; });
  if (stop_ && !in.decided) throw Error(ErrorKind::Aborted, where + "the job is ending");
  if (in.excluded) throw Error(ErrorKind::PeerLost, where + "this rank was declared lost by the others: " + in.why);
  Agreement a;
  a.flag = in.result.flag;
  std::vector<int> declare_too;
  std::string answered, silent;
  for (std::size_t m = 0; m < members.size(); ++m)
    if (in.result.lost[static_cast<std::size_t>(members[m])]) {
      a.failed.push_back(static_cast<int>(m));
      if (!lost_[static_cast<std::size_t>(members[m])]) declare_too.push_back(members[m]);
      silent += (silent.empty() ? "" : ", ") + std::to_string(m);
    } else {
      answered += (answered.empty() ? "" : ", ") + std::to_string(m);
    }
  const bool me_lost = in.result.lost[static_cast<std::size_t>(members[static_cast<std::size_t>(me)])];
  const bool no_quorum = in.result.no_quorum;
  lock.unlock();
  if (no_quorum)
    throw Error(ErrorKind::Timeout,
                where + "no majority of the members took part: ranks " + answered + " did, ranks " + silent +
                    " are lost or did not answer within the timeout; where some of those only stopped answering or "
                    "are cut off by the network, the two sides must not both carry on, so neither does");
  if (me_lost)
    throw Error(ErrorKind::PeerLost,
                where +
                    "this rank was declared lost by the others (it did not answer in time, or its connection to "
                    "another member broke)");
  // Every survivor treats the agreed losses as its own from now on.
  for (int w : declare_too) job_.transport->declare_lost(w, "agreed lost by the survivors of an agreement");
  return a;
}

}  // namespace tutti::detail

namespace tutti {

std::optional<Error> Communicator::error() const { return impl_->error(); }

void Communicator::revoke() {
  const std::string who = "rank " + std::to_string(impl_->rank) + " revoked the communicator";
  // After a failure here the members learn its cause too: a member that
  // hears of the revocation before the failure's own notice (they may come
  // by different members) still reports what happened.
  ErrorKind kind;
  std::string cause;
  const bool failed = impl_->root_cause(&kind, &cause) && kind != ErrorKind::Aborted && kind != ErrorKind::Revoked;
  impl_->revoke("rank " + std::to_string(impl_->rank) + ": " + who, failed ? who + " (after: " + cause + ")" : who);
}

namespace {
detail::Agreement run_agreement(detail::CommunicatorImpl& c, bool flag, const char* what, std::uint64_t* instance) {
  c.quiesce();
  *instance = ++c.agreements;
  const std::string where = "rank " + std::to_string(c.rank) + ": " + what + " #" + std::to_string(*instance) + ": ";
  if (c.size == 1) return detail::Agreement{flag, {}};
  return c.job->fault().agree(c.comm_id, *instance, c.world, c.rank, flag, c.timeout.load(), where);
}
}  // namespace

bool Communicator::agree(bool flag, std::vector<int>* failed) {
  std::uint64_t instance = 0;
  detail::Agreement a = run_agreement(*impl_, flag, "agree", &instance);
  if (failed) *failed = std::move(a.failed);
  return a.flag;
}

Communicator Communicator::shrink() {
  std::uint64_t instance = 0;
  const detail::Agreement a = run_agreement(*impl_, true, "shrink", &instance);
  std::vector<int> survivors;
  for (int m = 0, f = 0; m < impl_->size; ++m) {
    if (f < static_cast<int>(a.failed.size()) && a.failed[static_cast<std::size_t>(f)] == m) {
      ++f;
      continue;
    }
    survivors.push_back(m);
  }
  // Every survivor derives the same id from the same decision.
  std::uint64_t id = detail::mix64(impl_->comm_id ^ detail::mix64(instance ^ 0x736872696e6bULL));  // "shrink"
  for (int m : survivors) id = detail::mix64(id ^ static_cast<std::uint64_t>(m));
  Communicator out(make_child_impl(*impl_, id, survivors));
  // A member killed right after it made a communicator's segment, before
  // the others came to it, leaves the name in /dev/shm: take this job's away.
  if (!a.failed.empty()) {
    char job[24];
    std::snprintf(job, sizeof job, "-%016llx-", static_cast<unsigned long long>(impl_->job->job_id));
    detail::SharedSegment::remove_orphans("/" + impl_->job->config.shm_prefix + job);
  }
  return out;
}

}  // namespace tutti
