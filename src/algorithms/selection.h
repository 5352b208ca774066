#pragma once
// Algorithm selection as data: each algorithm declares the collective it
// serves and the byte range it is chosen for; TUTTI_ALGO overrides.

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
};

inline constexpr std::size_t kSmallBytes = ~std::size_t(0) - 1;
inline constexpr std::size_t kAboveSmall = ~std::size_t(0);

// The algorithm for `collective` at `bytes` (per-rank payload) on a
// communicator whose members are all on one host (`single_host`) or not.
// Shared-memory algorithms are chosen on one host unless TUTTI_TRANSPORT=tcp.
// Throws InvalidArgument when an override names an unknown algorithm, or a
// shared-memory one for a communicator that spans hosts.
const char* select_algorithm(const char* collective, std::size_t bytes, const Config& config, bool single_host);
// Checks every TUTTI_ALGO entry names a known collective and algorithm.
void validate_algo_overrides(const Config& config);

}  // namespace tutti::detail
