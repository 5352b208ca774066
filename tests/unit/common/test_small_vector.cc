// SmallVector (common/small_vector.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <iterator>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/small_vector.h"

namespace {

namespace d = tutti::detail;

// Per-rank arrays: in place up to N, on the heap beyond (communicators of
// more than 16 ranks), copied whole into queued operations.
TEST(SmallVector, InPlaceThenHeapCopyMoveAndSpan) {
  for (std::size_t n : {0u, 1u, 3u, 4u, 5u, 9u, 40u}) {
    d::SmallVector<std::uint64_t, 4> v;
    for (std::size_t i = 0; i < n; ++i) v.push_back(0x9e3779b97f4a7c15ull * (i + 1));
    ASSERT_EQ(v.size(), n);
    const d::SmallVector<std::uint64_t, 4> copy(v);
    d::SmallVector<std::uint64_t, 4> tmp(copy);
    const d::SmallVector<std::uint64_t, 4> moved(std::move(tmp));
    EXPECT_EQ(tmp.size(), 0u);
    const std::span<const std::uint64_t> view = moved;
    ASSERT_EQ(view.size(), n);
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint64_t want = 0x9e3779b97f4a7c15ull * (i + 1);
      EXPECT_EQ(v[i], want) << n << " " << i;
      EXPECT_EQ(copy[i], want) << n << " " << i;
      EXPECT_EQ(view[i], want) << n << " " << i;
    }
    // Appending an element of the vector itself while it grows.
    if (n > 0) {
      v.push_back(v[0]);
      EXPECT_EQ(v[n], v[0]);
    }
  }
  d::SmallVector<int, 2> r(7, -3);
  ASSERT_EQ(r.size(), 7u);
  for (int x : r) EXPECT_EQ(x, -3);
  r.resize(9, 5);
  EXPECT_EQ(r[6], -3);
  EXPECT_EQ(r[8], 5);
  const int src[] = {4, 8, 15, 16, 23};
  const d::SmallVector<int, 2> from(std::begin(src), std::end(src));
  ASSERT_EQ(from.size(), 5u);
  for (std::size_t i = 0; i < 5; ++i) EXPECT_EQ(from[i], src[i]);
}

}  // namespace
