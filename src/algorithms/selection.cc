#include "algorithms/selection.h"

#include <cstring>

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
    // The network.
    {"all_reduce", "recursive_doubling", 0, kSmallBytes},
    {"all_reduce", "ring", kAboveSmall, kAny},
    {"broadcast", "binomial", 0, kAny},
    {"reduce", "binomial", 0, kAny},
    {"all_gather", "ring", 0, kAny},
    {"reduce_scatter", "ring", 0, kAny},
    {"all_to_all", "pairwise", 0, kAny},
    {"gather", "linear", 0, kAny},
    {"scatter", "linear", 0, kAny},
    {"barrier", "dissemination", 0, kAny},
};

bool in_range(const AlgorithmInfo& a, std::size_t bytes, const Config& c) {
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

std::string names_for(const std::string& collective) {
  std::string out;
  for (const auto& a : kTable)
    if (collective == a.collective) out += (out.empty() ? "" : ", ") + std::string(a.name);
  if (has_two_level(collective)) out += ", two_level";
  return out;
}

}  // namespace

const char* select_algorithm(const char* collective, std::size_t bytes, const Config& config, bool single_host) {
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
    if (!std::strcmp(a.collective, collective) && in_range(a, bytes, config) && (shm_ok || !a.single_host_only))
      return a.name;
  throw Error(ErrorKind::Internal, std::string("no algorithm for ") + collective + " at " + std::to_string(bytes) + " B");
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
