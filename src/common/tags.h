#pragma once
// The one place that lays out and builds message tags, below the transports
// (transport.h takes the operation's bits from here). A tag travels beside the
// communicator id in every frame; collective tags pack the op sequence number
// and the algorithm step, point-to-point tags the user's tag. Each field's
// width is checked, so distinct operations can never share a tag.

#include <cstdint>
#include <string>

#include "tutti/error.h"

namespace tutti::detail {

inline constexpr int kTagSeqBits = 38;
inline constexpr int kTagStepBits = 24;
inline constexpr std::uint64_t kTagKindCollective = 0;
inline constexpr std::uint64_t kTagKindP2P = 1;

// Steps of the exchanges an operation may run besides its algorithm, far
// above any algorithm's own steps and apart from each other: the
// TUTTI_DEBUG=detail signature check (one step) and the all_reduce
// tuner's sum of trial times (a recursive doubling: a few dozen steps).
inline constexpr std::uint32_t kCrossCheckStep = 1u << 23;
inline constexpr std::uint32_t kTunerStepBase = (1u << 23) + (1u << 22);
static_assert(kCrossCheckStep < kTunerStepBase && kTunerStepBase + (1u << 16) < (1u << kTagStepBits),
              "the exchanges' steps overlap");

inline std::uint64_t collective_tag(std::uint64_t seq, std::uint32_t step) {
  if (seq >> kTagSeqBits)
    throw Error(ErrorKind::Internal, "op sequence number " + std::to_string(seq) + " exceeds the tag's 38 bits");
  if (step >> kTagStepBits)
    throw Error(ErrorKind::Internal, "algorithm step " + std::to_string(step) + " exceeds the tag's 24 bits");
  return (kTagKindCollective << 62) | (seq << kTagStepBits) | step;
}

inline std::uint64_t p2p_tag(int user_tag) {
  if (user_tag < 0)
    throw Error(ErrorKind::InvalidArgument, "tag " + std::to_string(user_tag) + " is negative; tags are in [0, 2^31)");
  return (kTagKindP2P << 62) | static_cast<std::uint64_t>(user_tag);
}

// splitmix64: derives communicator ids from (parent id, counter).
inline std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace tutti::detail
