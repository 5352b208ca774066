// The shared-memory medium's own timed choice (media/shm_medium.h): single
// copy against copying for every collective but the barrier, where it applies.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>

#include "common/config.h"
#include "media/shm_medium.h"

namespace {

namespace d = tutti::detail;

d::ShmMedium::Setup setup(const d::Config& c, int size, const std::atomic<bool>& aborted,
                          const std::atomic<std::chrono::milliseconds>& timeout) {
  d::ShmMedium::Setup s;
  s.name = "/tutti-unit-never-mapped";
  s.size = size;
  s.config = &c;
  s.aborted = &aborted;
  s.timeout = &timeout;
  return s;
}

TEST(ShmMedium, TimesSingleCopyAgainstCopyingForAllButBarrier) {
  const std::atomic<bool> aborted{false};
  const std::atomic<std::chrono::milliseconds> timeout{std::chrono::seconds(1)};
  d::Config c;
  c.shm_cma_bytes = 128 << 10;
  c.shm_cma_set = false;
  c.algo_tuning = "auto";
  const d::ShmMedium m(setup(c, 4, aborted, timeout));
  for (int i = 0; i < d::kCollectives; ++i) {
    const auto which = static_cast<d::Collective>(i);
    if (which == d::Collective::Barrier) {
      EXPECT_EQ(m.tuner(which), nullptr);
    } else {
      ASSERT_NE(m.tuner(which), nullptr) << d::collective_name(which);
      EXPECT_TRUE(m.tuner(which)->covers(16 << 10)) << d::collective_name(which);
      EXPECT_FALSE(m.tuner(which)->covers(4 << 10)) << d::collective_name(which);
    }
  }
}

TEST(ShmMedium, NoTimedChoiceWhereItDoesNotApply) {
  const std::atomic<bool> aborted{false};
  const std::atomic<std::chrono::milliseconds> timeout{std::chrono::seconds(1)};
  d::Config c;
  c.shm_cma_bytes = 128 << 10;
  c.shm_cma_set = false;
  c.algo_tuning = "auto";
  d::Config off = c, set = c, none = c;
  off.algo_tuning = "off";
  set.shm_cma_set = true;  // TUTTI_SHM_CMA_BYTES given: no timing
  none.shm_cma_bytes = 0;  // single copy off
  for (const d::Config* k : {&off, &set, &none}) {
    const d::ShmMedium m(setup(*k, 4, aborted, timeout));
    EXPECT_EQ(m.tuner(d::Collective::AllReduce), nullptr);
  }
  const d::ShmMedium alone(setup(c, 1, aborted, timeout));
  EXPECT_EQ(alone.tuner(d::Collective::AllReduce), nullptr);
}

}  // namespace
