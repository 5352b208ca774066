#pragma once
// Splitting of a byte range into pipeline chunks, shared by ring algorithms.

#include <algorithm>
#include <cstddef>

namespace tutti::detail {

struct ChunkRange {
  std::size_t offset;  // elements
  std::size_t count;   // elements
};

inline std::size_t num_chunks(std::size_t count, std::size_t per_chunk) { return (count + per_chunk - 1) / per_chunk; }
inline ChunkRange chunk_at(std::size_t count, std::size_t per_chunk, std::size_t k) {
  std::size_t off = k * per_chunk;
  return {off, std::min(per_chunk, count - off)};
}

}  // namespace tutti::detail
