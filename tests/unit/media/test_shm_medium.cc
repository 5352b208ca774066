// The shared-memory medium's own timed choice (media/shm_medium.h): single
// copy against copying for every collective but the barrier, where it applies.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>

#include "common/config.h"
#include "media/shm_medium.h"

namespace {

namespace d = tutti::detail;

// A medium of `size` members under `config` (it maps nothing until an
// operation runs, and none does here).
struct Medium {
  const std::atomic<bool> aborted{false};
  const std::atomic<std::chrono::milliseconds> timeout{std::chrono::seconds(1)};
  std::unique_ptr<d::ShmMedium> make(const d::Config& config, int size) const {
    d::ShmMedium::Setup s;
    s.name = "/tutti-unit-never-mapped";
    s.size = size;
    s.config = &config;
    s.aborted = &aborted;
    s.timeout = &timeout;
    return std::make_unique<d::ShmMedium>(std::move(s));
  }
};

// Where the timed choice applies: single copy allowed (TUTTI_SHM_CMA_BYTES
// left unset) and TUTTI_ALGO_TUNING on.
d::Config timed_config() {
  d::Config c;
  c.shm_cma_bytes = 128 << 10;
  c.shm_cma_set = false;
  c.algo_tuning = "auto";
  return c;
}

TEST(ShmMedium, TimesSingleCopyAgainstCopyingForAllButBarrier) {
  const Medium medium;
  const d::Config c = timed_config();
  const auto m = medium.make(c, 4);
  for (int i = 0; i < d::kCollectives; ++i) {
    const auto which = static_cast<d::Collective>(i);
    if (which == d::Collective::Barrier) {
      EXPECT_EQ(m->tuner(which), nullptr);
    } else {
      ASSERT_NE(m->tuner(which), nullptr) << d::collective_name(which);
      EXPECT_TRUE(m->tuner(which)->covers(16 << 10)) << d::collective_name(which);
      EXPECT_FALSE(m->tuner(which)->covers(4 << 10)) << d::collective_name(which);
    }
  }
}

TEST(ShmMedium, NoTimedChoiceWhereItDoesNotApply) {
  const Medium medium;
  const d::Config c = timed_config();
  d::Config off = c, set = c, none = c;
  off.algo_tuning = "off";
  set.shm_cma_set = true;  // TUTTI_SHM_CMA_BYTES given: no timing
  none.shm_cma_bytes = 0;  // single copy off
  for (const d::Config* k : {&off, &set, &none})
    EXPECT_EQ(medium.make(*k, 4)->tuner(d::Collective::AllReduce), nullptr);
  EXPECT_EQ(medium.make(c, 1)->tuner(d::Collective::AllReduce), nullptr);
}

}  // namespace
