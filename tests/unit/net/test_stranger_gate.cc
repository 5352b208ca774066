// StrangerGate: the bounds on connections that have not authenticated.
#include <gtest/gtest.h>

#include <set>

#include "net/stranger_gate.h"

namespace tutti::detail {
namespace {

using namespace std::chrono_literals;
using Clock = StrangerGate::Clock;

StrangerGate::Limits small() { return {8, 4, 2000ms, 10000ms}; }
bool in_set(void* set, std::uint64_t id) { return static_cast<std::set<std::uint64_t>*>(set)->count(id) > 0; }

TEST(StrangerGate, ANewcomerPushesOutTheOldestSilentConnection) {
  std::set<std::uint64_t> spoken;
  StrangerGate g(small(), in_set, &spoken);
  const auto t = Clock::now();
  // Four sources of two each: within both limits.
  for (std::uint64_t id = 1; id <= 8; ++id) EXPECT_TRUE(g.admit(id, "h" + std::to_string(id % 4), t).empty());
  g.spoke(1);
  spoken.insert(2);  // bytes wait on it, the gate not yet told
  // The ninth: over the total; 1 and 2 have spoken, 3 is the oldest silent.
  // Not before 500 ms: a client of the job may not have been scheduled yet.
  EXPECT_TRUE(g.admit(9, "h9", t + 100ms).empty());
  // Then the newcomer brings the count back within the limit: 3 and 4 go.
  EXPECT_EQ(g.admit(10, "h10", t + 600ms), (std::vector<std::uint64_t>{3, 4}));
  EXPECT_EQ(g.held(), 8u);
  EXPECT_EQ(g.take_closed_count(), 2u);
  EXPECT_EQ(g.take_closed_count(), 0u);
}

TEST(StrangerGate, OneSourceTakesAtMostItsShare) {
  StrangerGate g(small(), nullptr, nullptr);
  const auto t = Clock::now();
  for (std::uint64_t id = 1; id <= 4; ++id) EXPECT_TRUE(g.admit(id, "a", t).empty());
  // A fifth from "a": its own oldest silent goes, not another source's.
  EXPECT_TRUE(g.admit(10, "b", t).empty());
  EXPECT_EQ(g.admit(5, "a", t + 1s), std::vector<std::uint64_t>{1});
}

// Past twice the limits, the oldest goes whatever its age (a flood faster
// than silence is judged).
TEST(StrangerGate, YoungSilentConnectionsGoOnlyPastTwiceTheLimit) {
  StrangerGate g(small(), nullptr, nullptr);
  const auto t = Clock::now();
  std::vector<std::uint64_t> closed;
  for (std::uint64_t id = 1; id <= 9; ++id) {
    auto out = g.admit(id, "a", t);
    closed.insert(closed.end(), out.begin(), out.end());
  }
  EXPECT_EQ(closed, std::vector<std::uint64_t>{1});
}

TEST(StrangerGate, ConnectionsThatAllSpokeStayUntilTwiceTheLimit) {
  StrangerGate g(
      small(), [](void*, std::uint64_t) { return true; }, nullptr);
  const auto t = Clock::now();
  std::vector<std::uint64_t> closed;
  for (std::uint64_t id = 1; id <= 9; ++id) {
    auto out = g.admit(id, "a", t + std::chrono::milliseconds(id));
    closed.insert(closed.end(), out.begin(), out.end());
  }
  // Per source 4: kept up to 8 (twice), then the oldest goes.
  EXPECT_EQ(closed, std::vector<std::uint64_t>{1});
  EXPECT_EQ(g.held(), 8u);
}

TEST(StrangerGate, SilentConnectionsGoQuicklyUnderPressureOnlyAndAllByTheBudget) {
  std::set<std::uint64_t> spoken;
  StrangerGate g(small(), in_set, &spoken);
  const auto t = Clock::now();
  g.admit(1, "a", t);
  g.admit(2, "b", t);
  // Two of eight: no pressure, silence is allowed the whole budget.
  EXPECT_TRUE(g.expired(t + 3s).empty());
  EXPECT_EQ(g.next_deadline(), t + 10s);
  g.admit(3, "c", t);
  g.admit(4, "d", t);
  g.admit(5, "e", t);
  spoken.insert(5);
  // Five of eight: the silent ones go after 2 s.
  EXPECT_EQ(g.next_deadline(), t + 2000ms);
  EXPECT_TRUE(g.expired(t + 1s).empty());
  auto out = g.expired(t + 2s);
  EXPECT_EQ(std::set<std::uint64_t>(out.begin(), out.end()), (std::set<std::uint64_t>{1, 2, 3, 4}));
  EXPECT_EQ(g.next_deadline(), t + 10s);
  EXPECT_EQ(g.expired(t + 10s), std::vector<std::uint64_t>{5});
  EXPECT_EQ(g.held(), 0u);
  EXPECT_EQ(g.next_deadline(), Clock::time_point::max());
}

TEST(StrangerGate, DefaultLimitsAreAShareOfTheDescriptorLimit) {
  const auto l = StrangerGate::default_limits(10000ms);
  EXPECT_GE(l.total, 16u);
  EXPECT_LE(l.total, 1024u);
  EXPECT_EQ(l.per_source, std::max<std::size_t>(8, l.total / 2));
}

}  // namespace
}  // namespace tutti::detail
