#pragma once
// Pipelined chain rooted at `root`: root, root+1, ..., root-1 (mod n); each
// rank receives every chunk from its predecessor and forwards it to its
// successor.

#include <algorithm>
#include <cstddef>

namespace tutti::detail::chain {

// The chunk a reduce chain moves, in elements of `es` bytes: an eighth of
// the message, at least 16 KiB and at most `max_bytes` (the op's chunk
// size), so that one operation alone fills the chain's n - 2 links with an
// eighth each, not with the whole message; at least 16 KiB, since chunks
// of a few KiB make a 32 KiB reduce across test-bed hosts slower (the
// chain's rules: docs/tuning.md, "Algorithm selection").
inline std::size_t reduce_chunk_elems(std::size_t count, std::size_t es, std::size_t max_bytes) {
  constexpr std::size_t kMinBytes = 16384;
  const std::size_t bytes = std::clamp(count * es / 8, std::min(kMinBytes, max_bytes), max_bytes);
  return std::max<std::size_t>(1, bytes / es);
}

// -1 for the root.
inline int prev(int r, int root, int n) { return r == root ? -1 : (r - 1 + n) % n; }
// -1 for the last rank of the chain.
inline int next(int r, int root, int n) { return (r + 1) % n == root ? -1 : (r + 1) % n; }

}  // namespace tutti::detail::chain
