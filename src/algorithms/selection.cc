#include "algorithms/selection.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "tutti/error.h"

namespace tutti::detail {
namespace {

constexpr std::size_t kAny = ~std::size_t(0) - 2;

const AlgorithmInfo kTable[] = {
    // Shared memory first: preferred whenever every member is on one host.
    {"all_reduce", "shm", 0, kAny, true},
    {"broadcast", "shm", 0, kAny, true},
    {"reduce", "shm", 0, kAny, true},
    {"all_gather", "shm", 0, kAny, true},
    {"reduce_scatter", "shm", 0, kAny, true},
    {"all_to_all", "shm", 0, kAny, true},
    {"gather", "shm", 0, kAny, true},
    {"scatter", "shm", 0, kAny, true},
    {"barrier", "shm", 0, kAny, true},
    // The network. Entries are tried in order; the first whose byte range
    // and communicator shape match wins. Bytes are per rank (selection.h).
    // The ranges come from loopback measurements (docs/tuning.md).
    {"all_reduce", "recursive_doubling", 0, kSmallBytes},
    {"all_reduce", "rabenseifner", kAboveSmall, 4 << 20},
    {"all_reduce", "rabenseifner", kAboveSmall, kAny, false, 0, 4, 0, 1},
    {"all_reduce", "ring", kAboveSmall, kAny},
    {"broadcast", "binomial", 0, 256 << 10},
    // Across hosts the pipelined chain runs at line rate (measured on 4
    // hosts); long chains pay n-2 chunk times to fill, so only up to 16 ranks.
    {"broadcast", "chain", (256 << 10) + 1, kAny, false, 3, 16, 2},
    {"broadcast", "scatter_all_gather", (256 << 10) + 1, kAny, false, 3},
    {"broadcast", "binomial", 0, kAny},
    {"reduce", "binomial", 0, kAny},
    {"all_gather", "bruck", 0, 8 << 10, false, 8},
    {"all_gather", "recursive_doubling", 0, 256 << 10},
    {"all_gather", "ring", 0, kAny},
    {"reduce_scatter", "recursive_halving", 0, 8 << 10},
    {"reduce_scatter", "recursive_halving", 64 << 10, kAny, false, 0, INT_MAX, 0, INT_MAX, INT_MAX, true},
    {"reduce_scatter", "ring", 0, kAny},
    {"all_to_all", "bruck", 0, 32 << 10},
    {"all_to_all", "pairwise", 0, kAny},
    {"gather", "linear", 0, kAny},
    {"scatter", "linear", 0, kAny},
    {"barrier", "dissemination", 0, kAny},
};

bool in_range(const AlgorithmInfo& a, std::size_t bytes, const Config& c) {
  if (a.min_bytes == kOverrideOnly) return false;
  std::size_t lo = a.min_bytes == kAboveSmall ? c.small_bytes + 1 : a.min_bytes;
  std::size_t hi = a.max_bytes == kSmallBytes ? c.small_bytes : (a.max_bytes == kAny ? ~std::size_t(0) : a.max_bytes);
  return bytes >= lo && bytes <= hi;
}

// Two-level forms (core/hierarchy.h): chosen by the communicator itself
// where it spans hosts with equal members per host; elsewhere an override
// naming it means the table's choice.
bool has_two_level(const std::string& collective) {
  return collective == "all_reduce" || collective == "broadcast" || collective == "all_gather" ||
         collective == "reduce_scatter";
}

bool fits(const AlgorithmInfo& a, const Topology& t) {
  if (t.ranks > 0 && (t.ranks < a.min_ranks || t.ranks > a.max_ranks)) return false;
  if (t.hosts > 0 && (t.hosts < a.min_hosts || t.hosts > a.max_hosts)) return false;
  if (t.ranks_per_host > 0 && t.ranks_per_host > a.max_ranks_per_host) return false;
  if (a.pow2_ranks && (t.ranks <= 0 || (t.ranks & (t.ranks - 1)) != 0)) return false;
  return true;
}

// Each name once, in table order (an algorithm may have several entries).
std::string names_for(const std::string& collective) {
  std::vector<std::string> names;
  for (const auto& a : kTable)
    if (collective == a.collective && std::find(names.begin(), names.end(), a.name) == names.end())
      names.emplace_back(a.name);
  std::string out;
  for (const auto& n : names) {
    if (!out.empty()) out += ", ";
    out += n;
  }
  if (has_two_level(collective)) out += ", two_level";
  return out;
}

}  // namespace

std::string algorithm_names(const std::string& collective) { return names_for(collective); }

const char* select_algorithm(const char* collective, std::size_t bytes, const Config& config, bool single_host) {
  Topology t;
  t.single_host = single_host;
  return select_algorithm(collective, bytes, config, t);
}

const char* select_algorithm(const char* collective, std::size_t bytes, const Config& config, const Topology& topo) {
  const bool single_host = topo.single_host;
  auto it = config.algo.find(collective);
  if (it != config.algo.end() && !(it->second == "two_level" && has_two_level(collective))) {
    for (const auto& a : kTable) {
      if (std::strcmp(a.collective, collective) || it->second != a.name) continue;
      if (a.single_host_only && !single_host)
        throw Error(ErrorKind::InvalidArgument, "TUTTI_ALGO: " + std::string(collective) + ":" + a.name +
                                                    " needs every rank of the communicator on one host");
      return a.name;
    }
    throw Error(ErrorKind::InvalidArgument, "TUTTI_ALGO: unknown algorithm '" + it->second + "' for " + collective +
                                                " (known: " + names_for(collective) + ")");
  }
  const bool shm_ok = single_host && config.transport != "tcp";
  for (const auto& a : kTable)
    if (!std::strcmp(a.collective, collective) && in_range(a, bytes, config) && fits(a, topo) &&
        (shm_ok || !a.single_host_only))
      return a.name;
  throw Error(ErrorKind::Internal,
              std::string("no algorithm for ") + collective + " at " + std::to_string(bytes) + " B");
}

void validate_algo_overrides(const Config& config) {
  for (const auto& [coll, name] : config.algo) {
    if (names_for(coll).empty())
      throw Error(ErrorKind::InvalidArgument,
                  "TUTTI_ALGO: unknown collective '" + coll +
                      "' (known: all_reduce, broadcast, reduce, all_gather, reduce_scatter, all_to_all, gather, "
                      "scatter, barrier)");
    select_algorithm(coll.c_str(), 0, config, true);
  }
}

}  // namespace tutti::detail
