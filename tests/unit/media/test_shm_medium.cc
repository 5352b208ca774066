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

// Where TUTTI_SHM_ONESHOT_BYTES is unset: one-shot against two-shot for
// all_reduce and reduce, through the segment and in place, from a round's
// one-shot steps to 1 MiB; in place against copying at every size for the
// collectives that run on shared allocations. Set, or tuning off: none.
TEST(ShmMedium, TimesTheFormsWhereTheOneShotSizeIsUnset) {
  const Medium medium;
  d::Config c = timed_config();
  const auto m = medium.make(c, 2);
  using C = d::Collective;
  for (const C which : {C::AllReduce, C::Reduce})
    for (const bool in_place : {false, true}) {
      const d::Tuner* t = m->shot_tuner(which, in_place);
      ASSERT_NE(t, nullptr) << d::collective_name(which);
      EXPECT_TRUE(t->covers(1024) && t->covers(16 << 10) && t->covers(1 << 20)) << d::collective_name(which);
      EXPECT_FALSE(t->covers(512) || t->covers((1 << 20) + 1)) << d::collective_name(which);
    }
  for (int i = 0; i < d::kCollectives; ++i) {
    const auto which = static_cast<C>(i);
    const bool direct = which != C::Gather && which != C::Scatter && which != C::Barrier;
    if (which != C::AllReduce && which != C::Reduce) {
      EXPECT_EQ(m->shot_tuner(which, false), nullptr) << d::collective_name(which);
      EXPECT_EQ(m->shot_tuner(which, true), nullptr) << d::collective_name(which);
    }
    if (!direct) {
      EXPECT_EQ(m->direct_tuner(which), nullptr) << d::collective_name(which);
      continue;
    }
    ASSERT_NE(m->direct_tuner(which), nullptr) << d::collective_name(which);
    EXPECT_TRUE(m->direct_tuner(which)->covers(1) && m->direct_tuner(which)->covers(std::size_t(1) << 40));
  }
  d::Config set = c, off = c;
  set.shm_one_shot_set = true;
  off.algo_tuning = "off";
  for (const d::Config* k : {&set, &off}) {
    const auto none = medium.make(*k, 2);
    EXPECT_EQ(none->shot_tuner(C::AllReduce, false), nullptr);
    EXPECT_EQ(none->shot_tuner(C::AllReduce, true), nullptr);
    EXPECT_EQ(none->direct_tuner(C::AllReduce), nullptr);
  }
}

}  // namespace
