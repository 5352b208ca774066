// SparePool: the TCP transport's kept buffers of unexpected messages.
#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "transport/tcp/spare_pool.h"

namespace {

using Bytes = std::vector<char>;
using Pool = tutti::detail::SparePool<Bytes>;

Bytes with_capacity(std::size_t cap) {
  Bytes b;
  b.reserve(cap);
  return b;
}

// Gives the pool a buffer of capacity `cap` and returns where its storage is.
const char* give(Pool& pool, std::size_t cap) {
  Bytes b = with_capacity(cap);
  const char* at = b.data();
  pool.give(std::move(b));
  return at;
}

TEST(SparePool, AnEmptyPoolHandsOutANewBufferOfTheSize) {
  Pool pool(1 << 20, 16);
  const Bytes b = pool.take(300);
  EXPECT_EQ(b.size(), 300u);
  EXPECT_EQ(pool.buffers(), 0u);
}

TEST(SparePool, TakesTheSmallestClassThatHoldsTheSize) {
  Pool pool(1 << 20, 16);
  const char* small = give(pool, 100);
  const char* mid = give(pool, 5000);
  const char* big = give(pool, 70000);
  ASSERT_EQ(pool.buffers(), 3u);
  ASSERT_EQ(pool.bytes(), 75100u);
  Bytes b = pool.take(3000);
  EXPECT_EQ(b.data(), mid);
  EXPECT_EQ(b.size(), 3000u);
  EXPECT_EQ(pool.buffers(), 2u);
  EXPECT_EQ(pool.bytes(), 70100u);
  EXPECT_EQ(pool.take(90).data(), small);
  EXPECT_EQ(pool.take(1).data(), big);
  EXPECT_EQ(pool.buffers(), 0u);
  EXPECT_EQ(pool.bytes(), 0u);
}

TEST(SparePool, WithinAClassTheLastGivenBackComesFirstWhereItFits) {
  Pool pool(1 << 20, 16);
  const char* first = give(pool, 120);
  const char* second = give(pool, 110);
  EXPECT_EQ(pool.take(100).data(), second);
  // 115 bytes: the class's last (120) holds it.
  EXPECT_EQ(pool.take(115).data(), first);
  // The class's last is smaller than the size and no higher class holds a
  // buffer: a new one.
  give(pool, 70);
  const Bytes b = pool.take(100);
  EXPECT_EQ(b.size(), 100u);
  EXPECT_EQ(pool.buffers(), 1u);
}

TEST(SparePool, APoolFullOfSmallBuffersMakesWayForLargerOnes) {
  Pool pool(1 << 20, 8);
  for (int i = 0; i < 8; ++i) give(pool, 8);
  ASSERT_EQ(pool.buffers(), 8u);
  // No 8-byte buffer holds 64 bytes: the first 64-byte message allocates,
  // and its buffer, given back, replaces an 8-byte one.
  const char* kept = give(pool, 64);
  EXPECT_EQ(pool.buffers(), 8u);
  EXPECT_EQ(pool.bytes(), 7u * 8u + 64u);
  EXPECT_EQ(pool.take(64).data(), kept);
  // When the pool is full, a buffer of no higher a class than every kept one is dropped.
  give(pool, 64);
  give(pool, 8);
  EXPECT_EQ(pool.buffers(), 8u);
  EXPECT_EQ(pool.bytes(), 7u * 8u + 64u);
}

TEST(SparePool, KeepsAtMostItsBytes) {
  Pool pool(10000, 64);
  give(pool, 3000);
  give(pool, 3000);
  give(pool, 3000);
  EXPECT_EQ(pool.bytes(), 9000u);
  // 4096 more: the 3000-byte buffers go, the smallest class first, until it fits.
  const char* kept = give(pool, 4096);
  EXPECT_EQ(pool.bytes(), 3000u + 4096u);
  EXPECT_EQ(pool.buffers(), 2u);
  EXPECT_EQ(pool.take(4000).data(), kept);
  // Larger than the whole pool: never kept.
  give(pool, 20000);
  EXPECT_EQ(pool.buffers(), 1u);
  EXPECT_EQ(pool.bytes(), 3000u);
}

TEST(SparePool, AnEmptyBufferIsNotKept) {
  Pool pool(1 << 20, 16);
  pool.give(Bytes{});
  EXPECT_EQ(pool.buffers(), 0u);
  EXPECT_TRUE(pool.take(0).empty());
}

}  // namespace
