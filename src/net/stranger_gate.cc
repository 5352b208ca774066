#include "net/stranger_gate.h"

#include <sys/resource.h>

#include <algorithm>

namespace tutti::detail {

StrangerGate::Limits StrangerGate::default_limits(std::chrono::milliseconds budget) {
  rlimit r{};
  std::size_t nofile = 1024;
  if (::getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur != RLIM_INFINITY) nofile = static_cast<std::size_t>(r.rlim_cur);
  const std::size_t total = std::clamp<std::size_t>(nofile / 8, 16, 1024);
  return Limits{total, std::max<std::size_t>(8, total / 2), std::chrono::milliseconds(2000), budget};
}

StrangerGate::StrangerGate(Limits limits, HasSpoken has_spoken, void* context)
    : limits_(limits), has_spoken_(has_spoken), context_(context) {}

std::vector<std::uint64_t> StrangerGate::admit(std::uint64_t id, const std::string& source, TimePoint now) {
  std::vector<std::uint64_t> out;
  entries_[id] = Entry{source, now, false};
  by_age_.insert({now, id});
  const std::size_t from_source = ++per_source_[source];
  // Over a limit: push out the oldest silent connection (of this source when
  // it is the source that is over); past twice the limit, the oldest.
  for (int round = 0; round < 2; ++round) {
    const bool over_source = per_source_[source] > limits_.per_source;
    const bool over_total = entries_.size() > limits_.total;
    if (!over_source && !over_total) break;
    const std::string* which = over_source ? &source : nullptr;
    std::uint64_t victim = oldest(which, true, now - limits_.young);
    const bool far_over = per_source_[source] > 2 * limits_.per_source || entries_.size() > 2 * limits_.total;
    if (!victim && far_over) victim = oldest(which, true);
    if (!victim && far_over) victim = oldest(which, false);
    if (!victim) break;
    close(victim, out);
  }
  (void)from_source;
  return out;
}

std::uint64_t StrangerGate::oldest(const std::string* source, bool silent_only, TimePoint born_before) {
  for (const auto& [since, id] : by_age_) {
    if (since >= born_before) break;  // the rest are younger
    Entry& e = entries_[id];
    if (source && e.source != *source) continue;
    if (!silent_only) return id;
    if (!e.spoke && has_spoken_ && has_spoken_(context_, id)) e.spoke = true;
    if (!e.spoke) return id;
  }
  return 0;
}

void StrangerGate::close(std::uint64_t id, std::vector<std::uint64_t>& out) {
  out.push_back(id);
  leave(id);
  ++closed_;
}

void StrangerGate::spoke(std::uint64_t id) {
  auto it = entries_.find(id);
  if (it != entries_.end()) it->second.spoke = true;
}

void StrangerGate::leave(std::uint64_t id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  by_age_.erase({it->second.since, id});
  auto s = per_source_.find(it->second.source);
  if (s != per_source_.end() && --s->second == 0) per_source_.erase(s);
  entries_.erase(it);
}

std::vector<std::uint64_t> StrangerGate::expired(TimePoint now) {
  std::vector<std::uint64_t> out;
  std::vector<std::uint64_t> due;
  for (const auto& [since, id] : by_age_) {
    if (since + limits_.silent > now) break;  // the rest are younger
    Entry& e = entries_[id];
    if (!e.spoke && has_spoken_ && has_spoken_(context_, id)) e.spoke = true;
    if (since + limits_.budget <= now || (!e.spoke && pressure())) due.push_back(id);
  }
  for (std::uint64_t id : due) close(id, out);
  return out;
}

StrangerGate::TimePoint StrangerGate::next_deadline() const {
  if (by_age_.empty()) return TimePoint::max();
  TimePoint best = by_age_.begin()->first + limits_.budget;
  if (pressure()) {
    // The oldest silent one (entries are in order of age).
    for (const auto& [since, id] : by_age_) {
      if (since + limits_.silent >= best) break;
      if (!entries_.at(id).spoke) {
        best = since + limits_.silent;
        break;
      }
    }
  }
  return best;
}

std::size_t StrangerGate::take_closed_count() {
  const std::size_t n = closed_;
  closed_ = 0;
  return n;
}

}  // namespace tutti::detail
