#include "plan/planner.h"

#include <algorithm>
#include <cstdint>

#include "media/network.h"
#include "tutti/error.h"

namespace tutti::detail {
namespace {

bool holds(const When& w, std::size_t bytes, std::size_t small_bytes, const Shape& s) {
  const std::size_t lo = w.min_bytes == kAboveSmall ? small_bytes + 1 : w.min_bytes;
  const std::size_t hi = w.max_bytes == kSmallBytes ? small_bytes : w.max_bytes;
  if (bytes < lo || bytes > hi) return false;
  if (s.ranks > 0 && (s.ranks < w.min_ranks || s.ranks > w.max_ranks)) return false;
  if (s.hosts > 0 && (s.hosts < w.min_hosts || s.hosts > w.max_hosts)) return false;
  if (s.ranks_per_host > 0 && s.ranks_per_host > w.max_ranks_per_host) return false;
  if (w.pow2_ranks && (s.ranks <= 0 || (s.ranks & (s.ranks - 1)) != 0)) return false;
  if (w.min_bytes_per_rank && s.ranks > 0 && bytes / static_cast<std::size_t>(s.ranks) < w.min_bytes_per_rank)
    return false;
  return true;
}

const Algorithm* of_medium(Collective c, Medium m) {
  for (const Algorithm& a : algorithms())
    if (a.collective == c && a.medium == m) return &a;
  return nullptr;
}

const Algorithm& by_table(Collective c, std::size_t bytes, const Config& config, const Shape& s) {
  const Algorithm* fallback = nullptr;
  for (const Algorithm& a : algorithms()) {
    if (a.collective != c || a.medium != Medium::Network) continue;
    if (a.fallback) fallback = &a;
    for (const When& w : a.chosen)
      if (holds(w, bytes, config.small_bytes, s)) return a;
  }
  if (!fallback)
    throw Error(ErrorKind::Internal,
                std::string("no algorithm for ") + collective_name(c) + " at " + std::to_string(bytes) + " B");
  return *fallback;
}

std::string collective_list() {
  std::string out;
  for (int c = 0; c < kCollectives; ++c) {
    if (c) out += ", ";
    out += collective_name(static_cast<Collective>(c));
  }
  return out;
}

}  // namespace

const Algorithm& Planner::choose(Collective c, std::size_t bytes, const Config& config, const Shape& s) {
  const auto forced = config.algo.find(collective_name(c));
  if (forced != config.algo.end()) {
    const Algorithm* a = find_algorithm(c, forced->second);
    if (!a)
      throw Error(ErrorKind::InvalidArgument, "TUTTI_ALGO: unknown algorithm '" + forced->second + "' for " +
                                                  collective_name(c) + " (known: " + algorithm_names(c) + ")");
    if (a->medium == Medium::SharedMemory && !s.single_host)
      throw Error(ErrorKind::InvalidArgument, std::string("TUTTI_ALGO: ") + collective_name(c) + ":" + a->name +
                                                  " needs every rank of the communicator on one host");
    // Naming the two-level form (the default where it applies) elsewhere
    // means the table's choice.
    if (a->medium != Medium::TwoLevel || s.two_level) return *a;
  } else if (s.two_level) {
    // The two-level form, where it has no rules or one holds.
    if (const Algorithm* a = of_medium(c, Medium::TwoLevel)) {
      if (a->chosen.empty()) return *a;
      for (const When& w : a->chosen)
        if (holds(w, bytes, config.small_bytes, s)) return *a;
    }
  }
  if (s.single_host && config.transport != Config::Transport::Tcp)
    if (const Algorithm* a = of_medium(c, Medium::SharedMemory)) return *a;
  if (c == Collective::AllToAll && s.copies > 1) {
    // Cross communicators of a two-level form, one a local index (`copies`
    // a host), with blocks of `bytes` (copies of the form's blocks a peer).
    // Bruck's rounds put on a host's link what a flat communicator of all
    // their ranks with blocks of 1/copies the size would, but pairwise
    // posts a copies-th of that one's messages, so its lead over Bruck
    // begins at a block about copies times smaller: the flat table's rules
    // hold for the cross blocks as they are. (Taken at 1/copies the size,
    // they would run Bruck across where pairwise across is faster on
    // 1,024-16,384 ranks, 8 a host, by tutti-sim; docs/performance.md, "At
    // scale: the simulator".)
    Shape flat = s;
    flat.ranks = s.ranks * s.copies;
    flat.ranks_per_host = s.ranks_per_host * s.copies;
    flat.copies = 1;
    return by_table(c, bytes, config, flat);
  }
  return by_table(c, bytes, config, s);
}

void Planner::validate_overrides(const Config& config) {
  Shape one_host;
  one_host.single_host = true;
  for (const auto& [name, algo] : config.algo) {
    Collective c;
    if (!find_collective(name, &c))
      throw Error(ErrorKind::InvalidArgument,
                  "TUTTI_ALGO: unknown collective '" + name + "' (known: " + collective_list() + ")");
    choose(c, 0, config, one_host);
  }
}

void Planner::configure(const Config& c, const Shape& s) {
  config_ = &c;
  shape_ = s;
  shm_always_ = s.single_host && c.algo.empty() && c.transport != Config::Transport::Tcp;
  for (int i = 0; i < kCollectives; ++i) shm_[i] = of_medium(static_cast<Collective>(i), Medium::SharedMemory);
  const NetworkThresholds& net = thresholds_.network;
  chunk_bytes_ = s.single_host ? c.chunk_bytes : c.hosts_chunk_bytes;
  small_pipe_bytes_ =
      std::min<std::size_t>(chunk_bytes_, s.single_host ? net.small_pipe_bytes_one_host : net.small_pipe_bytes_hosts);

  // Timed choices over the network (TUTTI_ALGO_TUNING): `auto` on
  // communicators of 3 or more ranks spanning hosts, `on` wherever the
  // collective goes over the network. Naming an algorithm of the collective
  // other than the two-level form turns its choices off.
  timed_.clear();
  const bool network = !s.single_host || c.transport == Config::Transport::Tcp;
  const bool tune =
      c.algo_tuning == "on" ? network && s.ranks >= 2 : c.algo_tuning == "auto" && !s.single_host && s.ranks >= 3;
  if (!tune) return;
  auto timed = [&](Collective k) {
    const auto forced = c.algo.find(collective_name(k));
    return forced == c.algo.end() || forced->second == "two_level";
  };
  // The network medium's pairs (media/network.cc, kTimed).
  for (const TimedPair& t : network_timed_pairs()) {
    std::size_t lo = 0, hi = 0;
    if (!timed(t.table->collective) || !t.range(c, net, &lo, &hi)) continue;
    timed_.push_back(
        {t.table->collective, std::make_unique<Tuner>(lo, hi, t.figure), &registered(*t.table), &registered(*t.other)});
  }
}

Plan Planner::plan_by_table(Collective c, std::size_t bytes) const {
  Plan p{&choose(c, bytes, *config_, shape_)};
  for (const TimedChoice& tc : timed_)
    if (tc.tuner && tc.collective == c && tc.table == p.algorithm && tc.tuner->covers(bytes)) {
      p.tuner = tc.tuner.get();
      p.alternative = tc.other;
      break;
    }
  return p;
}

TwoLevelChoices Planner::two_level_choices(int per_host) const {
  TwoLevelChoices out;
  const Config& c = *config_;
  if (c.algo_tuning == "off") return out;
  const TwoLevelThresholds& t = thresholds_.two_level;
  const std::size_t leader = c.two_level_leader_bytes;
  if (leader >= 8) out.forms = std::make_unique<Tuner>(leader / 8, leader * 8);
  const auto L = static_cast<std::size_t>(per_host);
  const std::size_t lo = std::max<std::size_t>(t.least_piece_bytes * L, out.forms ? leader * 8 : 0);
  // Up to slices of least_piece_bytes * fewer_pieces (4 MiB) both piece
  // counts give pieces of least_piece_bytes; from slices of
  // most_piece_bytes * pieces (32 MiB) both give most_piece_bytes.
  const std::size_t same_low = t.least_piece_bytes * t.fewer_pieces * L;
  const std::size_t same_high = t.most_piece_bytes * t.pieces * L;
  const std::size_t hi = std::min(same_low, t.most_tuned_pieces_bytes);
  if (lo < hi) out.pieces = std::make_unique<Tuner>(lo, hi);
  out.piece_size = std::make_unique<Tuner>(std::max(lo, same_low), same_high);
  if (leader >= 8 && !c.algo.count("all_reduce"))
    out.flat = std::make_unique<Tuner>(0, leader / 8, Tuner::Figure::MeanAfterFirst);
  return out;
}

}  // namespace tutti::detail
