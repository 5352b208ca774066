#pragma once
// The network medium's algorithms, in the registry's order (plan/registry.cc
// puts every medium's together): each runs against the operation's
// OpContext alone, or between two alternatives under the plan's tuner.

#include <span>

#include "algorithms/algorithm.h"
#include "algorithms/tuner.h"
#include "common/config.h"
#include "common/thresholds.h"

namespace tutti::detail {

std::span<const Algorithm> network_algorithms();

// A choice the planner times as operations run (TUTTI_ALGO_TUNING): over
// the sizes `range` gives, the table's `table` against `other` (entries of
// network_algorithms(); the planner takes the registry's copies).
struct TimedPair {
  const Algorithm* table;
  const Algorithm* other;
  Tuner::Figure figure;
  // The sizes covered under this configuration, or false: none.
  bool (*range)(const Config& c, const NetworkThresholds& t, std::size_t* lo, std::size_t* hi);
};
std::span<const TimedPair> network_timed_pairs();

}  // namespace tutti::detail
