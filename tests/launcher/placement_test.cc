// Unit tests of tuttirun's rank placement (tools/tuttirun/placement.h).
#include "placement.h"

#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace {

using tuttirun::rank_cpus;

TEST(Placement, RanksShareTheCpusEvenlyInContiguousBlocks) {
  const std::vector<int> allowed{0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  // 10 CPUs over 4 ranks: 3, 3, 2, 2.
  EXPECT_EQ(rank_cpus(allowed, 0, 4), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(rank_cpus(allowed, 1, 4), (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(rank_cpus(allowed, 2, 4), (std::vector<int>{6, 7}));
  EXPECT_EQ(rank_cpus(allowed, 3, 4), (std::vector<int>{8, 9}));
  EXPECT_EQ(rank_cpus(allowed, 0, 1), allowed);
}

TEST(Placement, EveryCpuGoesToExactlyOneRankWhenThereAreEnough) {
  const std::vector<int> allowed{2, 3, 5, 7, 11, 13, 17};  // a narrowed, gapped mask
  for (int n = 1; n <= 7; ++n) {
    std::multiset<int> seen;
    for (int i = 0; i < n; ++i) {
      const std::vector<int> mine = rank_cpus(allowed, i, n);
      ASSERT_FALSE(mine.empty()) << n << " ranks, rank " << i;
      EXPECT_LE(mine.size(), allowed.size() / n + 1);
      EXPECT_GE(mine.size(), allowed.size() / n);
      seen.insert(mine.begin(), mine.end());
    }
    EXPECT_EQ(seen, std::multiset<int>(allowed.begin(), allowed.end())) << n << " ranks";
  }
}

TEST(Placement, MoreRanksThanCpusGoRoundRobinOneCpuEach) {
  const std::vector<int> allowed{4, 6};
  const int expect[] = {4, 6, 4, 6, 4};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(rank_cpus(allowed, i, 5), std::vector<int>{expect[i]}) << "rank " << i;
}

TEST(Placement, NothingKnownMeansNoBinding) {
  EXPECT_TRUE(rank_cpus({}, 0, 2).empty());
  EXPECT_TRUE(rank_cpus({0, 1}, 0, 0).empty());
}

TEST(Placement, AllowedCpusAreThoseOfThisProcess) {
  const std::vector<int> cpus = tuttirun::allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  for (std::size_t i = 1; i < cpus.size(); ++i) EXPECT_LT(cpus[i - 1], cpus[i]);
}

}  // namespace
