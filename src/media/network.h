#pragma once
// The network medium's algorithms, in the registry's order (plan/registry.cc
// puts every medium's together): each runs against the operation's
// OpContext alone, or between two alternatives under the plan's tuner.

#include <span>

#include "algorithms/algorithm.h"

namespace tutti::detail {

std::span<const Algorithm> network_algorithms();

}  // namespace tutti::detail
