// The names of collectives and media (algorithms/algorithm.h).
#include "algorithms/algorithm.h"

namespace tutti::detail {
namespace {

constexpr const char* kCollectiveNames[kCollectives] = {
    "all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all", "gather", "scatter", "barrier"};

}  // namespace

const char* collective_name(Collective c) { return kCollectiveNames[static_cast<int>(c)]; }

bool find_collective(std::string_view name, Collective* out) {
  for (int c = 0; c < kCollectives; ++c)
    if (name == kCollectiveNames[c]) {
      *out = static_cast<Collective>(c);
      return true;
    }
  return false;
}

const char* medium_name(Medium m) {
  switch (m) {
    case Medium::SharedMemory:
      return "shared memory";
    case Medium::Network:
      return "network";
    case Medium::TwoLevel:
      return "two levels";
  }
  return "?";
}

}  // namespace tutti::detail
