#pragma once
// Algorithm selection as data: each algorithm declares the collective it
// serves and the byte range and communicator shapes it is chosen for;
// TUTTI_ALGO overrides.

#include <climits>
#include <cstddef>
#include <string>

#include "common/config.h"

namespace tutti::detail {

struct AlgorithmInfo {
  const char* collective;
  const char* name;
  // Chosen by default when min_bytes <= bytes <= max_bytes (kSmallBytes
  // stands for Config::small_bytes, kSmallBytes+1 for just above it).
  std::size_t min_bytes;
  std::size_t max_bytes;
  // Needs every member on one host (shared-memory collectives).
  bool single_host_only = false;
  // Chosen by default only for communicators of min_ranks..max_ranks
  // members on min_hosts..max_hosts hosts with at most max_ranks_per_host
  // on any one (an unknown shape, 0, matches every entry).
  int min_ranks = 0, max_ranks = INT_MAX;
  int min_hosts = 0, max_hosts = INT_MAX;
  int max_ranks_per_host = INT_MAX;
  // Chosen by default only when the number of ranks is a power of two.
  bool pow2_ranks = false;
};

inline constexpr std::size_t kSmallBytes = ~std::size_t(0) - 1;
inline constexpr std::size_t kAboveSmall = ~std::size_t(0);
// min_bytes of an entry never chosen by default (TUTTI_ALGO only).
inline constexpr std::size_t kOverrideOnly = ~std::size_t(0) - 3;

// The shape of a communicator, as far as selection cares.
struct Topology {
  int ranks = 0;           // members (0: unknown)
  int hosts = 0;           // distinct hosts among them (0: unknown)
  int ranks_per_host = 0;  // most members on any one host (0: unknown)
  bool single_host = false;
};

// The algorithm for `collective` at `bytes` (per-rank payload: the buffer
// of all_reduce and broadcast, one rank's block of all_gather and
// reduce_scatter, a rank's whole send buffer of all_to_all) on a
// communicator of shape `topo`. Shared-memory algorithms are chosen on one
// host unless TUTTI_TRANSPORT=tcp. Throws InvalidArgument when an override
// names an unknown algorithm, or a shared-memory one for a communicator
// that spans hosts.
const char* select_algorithm(const char* collective, std::size_t bytes, const Config& config, const Topology& topo);
// The same for a communicator of unknown size and host count.
const char* select_algorithm(const char* collective, std::size_t bytes, const Config& config, bool single_host);
// Checks every TUTTI_ALGO entry names a known collective and algorithm.
void validate_algo_overrides(const Config& config);
// "all_reduce: recursive_doubling, ring, ..." per collective, for docs and errors.
std::string algorithm_names(const std::string& collective);

}  // namespace tutti::detail
