// The pure parts of the algorithms layer: ring chunking (algorithms/ring_steps.h),
// the timed choice (algorithms/tuner.h) and operation signatures (algorithms/signature.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "algorithms/context.h"
#include "algorithms/ring_steps.h"
#include "algorithms/signature.h"
#include "algorithms/tuner.h"
#include "common/errors.h"
#include "tutti/error.h"

namespace {

namespace d = tutti::detail;

// ---- ring_steps chunking ---------------------------------------------------------

TEST(CoreRingSteps, ChunksCoverRangeExactly) {
  const std::size_t counts[] = {0, 1, 2, 3, 7, 63, 64, 65, 1000, 1024, 4097, 100003};
  const std::size_t per_chunks[] = {1, 2, 3, 7, 64, 1000, 1024, 5000, 1 << 20};
  for (std::size_t count : counts)
    for (std::size_t per : per_chunks) {
      if (count / per > 20000) continue;  // keep it fast
      const std::size_t n = d::num_chunks(count, per);
      EXPECT_EQ(n, count == 0 ? 0 : (count - 1) / per + 1) << count << "/" << per;
      std::size_t end = 0;
      for (std::size_t k = 0; k < n; ++k) {
        d::ChunkRange c = d::chunk_at(count, per, k);
        ASSERT_EQ(c.offset, end) << "gap or overlap at chunk " << k << ", count=" << count << " per=" << per;
        ASSERT_GT(c.count, 0u) << "empty chunk " << k << ", count=" << count << " per=" << per;
        ASSERT_LE(c.count, per);
        if (k + 1 < n) {
          ASSERT_EQ(c.count, per) << "short chunk before the last, count=" << count << " per=" << per;
        }
        end = c.offset + c.count;
      }
      EXPECT_EQ(end, count) << "count=" << count << " per=" << per;
    }
}

// ---- the all_reduce tuner (algorithms/tuner.h) ---------------------------------

// Runs the tuner's steps for `bytes` until its next exchange, timing
// algorithm a at t[a] ns (+i for the i-th trial); returns the algorithms run.
std::vector<int> run_trials(d::Tuner& t, std::size_t bytes, std::array<std::int64_t, 2> ns) {
  std::vector<int> ran;
  for (int i = 0; i < 2 * t.samples(); ++i) {
    d::Tuner::Step s = t.next(bytes);
    EXPECT_FALSE(s.agree) << i;
    EXPECT_TRUE(s.timed) << i;
    t.record(bytes, s.algo, ns[static_cast<std::size_t>(s.algo)] + i);
    ran.push_back(s.algo);
  }
  EXPECT_TRUE(t.next(bytes).agree);
  return ran;
}

// A class's first two operations: the preferred algorithm, then the other, untimed.
void expect_warm_up(d::Tuner& t, std::size_t bytes, int preferred) {
  for (int want : {preferred, 1 - preferred}) {
    d::Tuner::Step s = t.next(bytes, preferred);
    EXPECT_EQ(s.algo, want);
    EXPECT_FALSE(s.timed || s.agree);
  }
}

// 0,1,0,1,... (or 1,0,... from `first`), kSamples of each.
std::vector<int> alternating(int first) {
  std::vector<int> v;
  for (int i = 0; i < 2 * d::Tuner::kSamples; ++i) v.push_back((first + i) % 2);
  return v;
}

TEST(CoreTuner, TrialsAlternateThenTheMembersSumsDecideForAGrowingEpoch) {
  static_assert(d::Tuner::kSamples >= 2);
  d::Tuner t(8 << 10, 64 << 10);
  EXPECT_FALSE(t.covers(8 << 10));
  EXPECT_TRUE(t.covers((8 << 10) + 1));
  EXPECT_TRUE(t.covers(64 << 10));
  EXPECT_FALSE(t.covers((64 << 10) + 1));
  const std::size_t b = 20000;  // class (16 KiB, 32 KiB]
  EXPECT_EQ(d::Tuner::class_hi(b), std::size_t(32) << 10);
  EXPECT_EQ(t.chosen(b), -1);
  expect_warm_up(t, b, 0);
  // Epoch 0: 0,1,0,1,... ; the means of what each took (+i for trial i).
  EXPECT_EQ(run_trials(t, b, {1000, 500}), alternating(0));
  std::array<std::int64_t, 2> m = t.means(b);
  const std::int64_t k = d::Tuner::kSamples;
  EXPECT_EQ(m[0], 1000 + (k - 1));  // trials 0, 2, ..., 2k-2: mean k-1
  EXPECT_EQ(m[1], 500 + k);         // trials 1, 3, ..., 2k-1: mean k
  // The members' sums decide: Rabenseifner (1) clearly faster.
  EXPECT_EQ(t.decide(b, {4000, 2000}), 1);
  EXPECT_EQ(t.chosen(b), 1);
  for (std::uint64_t i = 0; i < d::Tuner::kFirstQuiet; ++i) {
    d::Tuner::Step s = t.next(b);
    EXPECT_EQ(s.algo, 1);
    EXPECT_FALSE(s.timed || s.agree);
  }
  // Epoch 1 starts with the other algorithm (no warm-up again); within the
  // margin the table's choice (0) stays.
  EXPECT_EQ(run_trials(t, b, {1000, 980}), alternating(1));
  EXPECT_EQ(t.decide(b, {1000, 960}), 0);
  for (std::uint64_t i = 0; i < 4 * d::Tuner::kFirstQuiet; ++i) EXPECT_EQ(t.next(b).algo, 0);
  run_trials(t, b, {1000, 1000});
  EXPECT_EQ(t.decide(b, {1000, 940}), 1);  // just past the margin
  // Other classes are independent.
  const std::size_t small = 10000, big = 60000;
  EXPECT_EQ(t.chosen(small), -1);
  expect_warm_up(t, small, 0);
  EXPECT_EQ(run_trials(t, small, {700, 900}), alternating(0));
  EXPECT_EQ(t.decide(small, t.means(small)), 0);
  EXPECT_EQ(t.chosen(b), 1);
  EXPECT_EQ(t.chosen(big), -1);
  // Where the table prefers alternative 1 (the two-level slices above the
  // leader cut), its warm-up runs 1 first, and 0 must be the one 5% faster.
  expect_warm_up(t, big, 1);
  run_trials(t, big, {500, 500});
  EXPECT_EQ(t.decide(big, {1960, 2000}, 1), 1);
  EXPECT_EQ(t.chosen(big), 1);
  for (std::uint64_t i = 0; i < d::Tuner::kFirstQuiet; ++i) t.next(big, 1);
  run_trials(t, big, {500, 500});
  EXPECT_EQ(t.decide(big, {1880, 2000}, 1), 0);
}

// A zero figure is no trial of that alternative (in shared memory, every
// trial of running in place met a rank's buffers on the heap): never chosen
// on it; the other is, where it alone has figures.
TEST(CoreTuner, AnAlternativeWithoutFiguresIsNotChosen) {
  d::Tuner t(0, SIZE_MAX, d::Tuner::Figure::Fastest);
  const std::size_t b = 4096;
  expect_warm_up(t, b, 0);
  EXPECT_EQ(t.decide(b, {5000, 0}), 0);
  EXPECT_EQ(t.decide(b, {0, 5000}), 1);
  EXPECT_EQ(t.decide(b, {0, 5000}, 1), 1);
  EXPECT_EQ(t.decide(b, {5000, 0}, 1), 0);
  EXPECT_EQ(t.decide(b, {0, 0}, 1), 1);
}

// Figure::Fastest (the shared-memory tuners): trials in runs of
// kFastestSamples of each, the next epoch's starting with the other; a
// member reports the fastest of each alternative's trials.
TEST(CoreTuner, FastestFigureRunsTrialsInRunsAndReportsTheFastest) {
  d::Tuner t(8 << 10, SIZE_MAX, d::Tuner::Figure::Fastest);
  ASSERT_EQ(t.samples(), d::Tuner::kFastestSamples);
  EXPECT_TRUE(t.covers(std::size_t(1) << 40));
  const std::size_t b = 200000;
  const std::int64_t k = t.samples();
  expect_warm_up(t, b, 0);
  std::vector<int> runs;
  for (int a : {0, 1})
    for (int i = 0; i < k; ++i) runs.push_back(a);
  // run_trials records ns[a] + i for the i-th trial: the fastest of each is
  // its first.
  EXPECT_EQ(run_trials(t, b, {3000, 7000}), runs);
  std::array<std::int64_t, 2> m = t.means(b);
  EXPECT_EQ(m[0], 3000);
  EXPECT_EQ(m[1], 7000 + k);
  EXPECT_EQ(t.decide(b, {3000, 7000}), 0);
  for (std::uint64_t i = 0; i < d::Tuner::kFirstQuiet; ++i) EXPECT_EQ(t.next(b).algo, 0);
  std::reverse(runs.begin(), runs.end());
  EXPECT_EQ(run_trials(t, b, {9000, 100}), runs);
  m = t.means(b);
  EXPECT_EQ(m[0], 9000 + k);  // this epoch's trials only
  EXPECT_EQ(m[1], 100);
  EXPECT_EQ(t.decide(b, m), 1);
  // Slow trials (the first after a switch) do not hide a fast one.
  d::Tuner u(0, SIZE_MAX, d::Tuner::Figure::Fastest);
  expect_warm_up(u, b, 0);
  for (int i = 0; i < 2 * k; ++i) {
    const d::Tuner::Step s = u.next(b);
    u.record(b, s.algo, s.algo == 0 ? (i == k - 1 ? 1000 : 500000) : 2000 + i);
  }
  EXPECT_EQ(u.means(b)[0], 1000);
  EXPECT_EQ(u.means(b)[1], 2000 + k);
  // The mean figure keeps kSamples, alternating.
  EXPECT_EQ(d::Tuner(0, 1).samples(), d::Tuner::kSamples);
}

// MeanAfterFirst: runs of kRunSamples + 1 of each, the first of each run
// untimed (whatever it would have recorded), the mean of the rest.
TEST(CoreTuner, MeanAfterFirstFigureSkipsTheFirstOfEachRun) {
  d::Tuner t(0, 16 << 10, d::Tuner::Figure::MeanAfterFirst);
  const std::int64_t k = d::Tuner::kRunSamples;
  ASSERT_EQ(t.samples(), k);
  EXPECT_FALSE(t.covers(0));
  EXPECT_TRUE(t.covers(8));
  EXPECT_FALSE(t.covers((16 << 10) + 1));
  const std::size_t b = 8;
  expect_warm_up(t, b, 0);
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<int> ran, timed;
    for (int i = 0; i < 2 * (k + 1); ++i) {
      const d::Tuner::Step s = t.next(b);
      EXPECT_FALSE(s.agree) << i;
      ran.push_back(s.algo);
      timed.push_back(s.timed);
      // The first of each run is slow (it follows the other algorithm);
      // were it recorded, it would turn the choice.
      if (s.timed) t.record(b, s.algo, (s.algo == 0 ? 300000 : 200000) + i);
    }
    std::vector<int> want_ran, want_timed;
    for (int a : {epoch % 2, 1 - epoch % 2})
      for (int i = 0; i <= k; ++i) {
        want_ran.push_back(a);
        want_timed.push_back(i != 0);
      }
    EXPECT_EQ(ran, want_ran) << "epoch " << epoch;
    EXPECT_EQ(timed, want_timed) << "epoch " << epoch;
    const d::Tuner::Step agree = t.next(b);
    EXPECT_TRUE(agree.agree);
    // Means of the timed ones (whole nanoseconds): trial i records base + i,
    // i over the run's positions 1..k (first run) or k+2..2k+1 (second).
    const std::array<std::int64_t, 2> m = t.means(b);
    const std::int64_t first_run = (k + 1) / 2, second_run = (k + 1) + (k + 1) / 2;
    EXPECT_EQ(m[0], 300000 + (epoch % 2 == 0 ? first_run : second_run)) << "epoch " << epoch;
    EXPECT_EQ(m[1], 200000 + (epoch % 2 == 0 ? second_run : first_run)) << "epoch " << epoch;
    EXPECT_EQ(t.decide(b, m), 1);
    const std::uint64_t quiet = epoch == 0 ? d::Tuner::kFirstQuiet : 4 * d::Tuner::kFirstQuiet;
    for (std::uint64_t i = 0; i < quiet; ++i) EXPECT_EQ(t.next(b).algo, 1);
  }
}

// SlowestRun (broadcast): the runs of MeanAfterFirst, each opened by a
// barrier of the members (Step::sync on its untimed first operation, on no
// other), over two epochs; the members' figures combine by their maximum.
TEST(CoreTuner, SlowestRunFigureMeetsBeforeEachRun) {
  d::Tuner t(2 << 10, 256 << 10, d::Tuner::Figure::SlowestRun);
  const std::int64_t k = d::Tuner::kRunSamples;
  ASSERT_EQ(t.samples(), k);
  EXPECT_TRUE(t.slowest());
  EXPECT_FALSE(d::Tuner(0, 1, d::Tuner::Figure::MeanAfterFirst).slowest());
  const std::size_t b = 4000;
  for (int i = 0; i < 2; ++i) EXPECT_FALSE(t.next(b).sync) << "warm-up " << i;
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<int> ran, timed, synced;
    for (int i = 0; i < 2 * (k + 1); ++i) {
      const d::Tuner::Step s = t.next(b);
      ran.push_back(s.algo);
      timed.push_back(s.timed);
      synced.push_back(s.sync);
      if (s.timed) t.record(b, s.algo, s.algo == 0 ? 500 : 300);
    }
    std::vector<int> want_ran, want_timed, want_synced;
    for (int a : {epoch % 2, 1 - epoch % 2})
      for (int i = 0; i <= k; ++i) {
        want_ran.push_back(a);
        want_timed.push_back(i != 0);
        want_synced.push_back(i == 0);
      }
    EXPECT_EQ(ran, want_ran) << "epoch " << epoch;
    EXPECT_EQ(timed, want_timed) << "epoch " << epoch;
    EXPECT_EQ(synced, want_synced) << "epoch " << epoch;
    const d::Tuner::Step agree = t.next(b);
    EXPECT_TRUE(agree.agree);
    EXPECT_FALSE(agree.sync);
    EXPECT_EQ(t.decide(b, t.means(b)), 1);
    const std::uint64_t quiet = epoch == 0 ? d::Tuner::kFirstQuiet : 4 * d::Tuner::kFirstQuiet;
    for (std::uint64_t i = 0; i < quiet; ++i) {
      const d::Tuner::Step s = t.next(b);
      EXPECT_EQ(s.algo, 1);
      EXPECT_FALSE(s.sync || s.timed);
    }
  }
  // MeanAfterFirst runs the same course without meeting.
  d::Tuner m(2 << 10, 256 << 10, d::Tuner::Figure::MeanAfterFirst);
  for (int i = 0; i < 2 + 2 * (k + 1); ++i) EXPECT_FALSE(m.next(b).sync) << i;
}

TEST(CoreTuner, EpochsGrowFourfoldUpToTheLimit) {
  d::Tuner t(8 << 10, 64 << 10);
  const std::size_t b = 40000;
  std::uint64_t quiet = d::Tuner::kFirstQuiet;
  expect_warm_up(t, b, 0);
  run_trials(t, b, {100, 200});
  for (int epoch = 0; epoch < 8; ++epoch) {
    EXPECT_EQ(t.decide(b, {100, 200}), 0);
    std::uint64_t n = 0;
    while (!t.next(b).timed) ++n;  // counts up to the next epoch's first trial
    EXPECT_EQ(n, quiet) << "epoch " << epoch;
    quiet = std::min<std::uint64_t>(quiet * 4, d::Tuner::kMaxQuiet);
    for (int i = 1; i < 2 * d::Tuner::kSamples; ++i) ASSERT_TRUE(t.next(b).timed);
    ASSERT_TRUE(t.next(b).agree);
  }
  EXPECT_EQ(quiet, d::Tuner::kMaxQuiet);
}

TEST(CoreTuner, AStepTimesItsTrialsAndDecidesOnTheExchangedSums) {
  d::Tuner t(8 << 10, 64 << 10);
  const std::size_t b = 20000;
  // This process finds alternative 1 50 ms slower than 0 in every trial.
  d::Tuner::set_test_penalty(0, 50000000);
  std::vector<int> ran;
  int exchanges = 0, heard = -1;
  const int steps = 2 + 2 * d::Tuner::kSamples + 3;
  for (int i = 0; i < steps; ++i) {
    const int a = t.step(
        b, 0,
        [&](std::array<std::int64_t, 2>& sums) {
          ++exchanges;
          EXPECT_GE(sums[1], 50000000);            // this member's means: the runs take
          EXPECT_GT(sums[1] - sums[0], 49000000);  // microseconds at most
          std::swap(sums[0], sums[1]);             // the others saw it the other way round
        },
        [&](const std::array<std::int64_t, 2>& sums, int algo) {
          EXPECT_LT(sums[1], sums[0]);
          heard = algo;
        },
        [&](int algo) { ran.push_back(algo); });
    EXPECT_EQ(a, ran.back());
  }
  d::Tuner::set_test_penalty(0, 0);
  EXPECT_EQ(exchanges, 1);
  EXPECT_EQ(heard, 1);  // the exchanged sums decide, not this member's own times
  std::vector<int> expected = {0, 1};
  for (int a : alternating(0)) expected.push_back(a);
  expected.insert(expected.end(), {1, 1, 1});
  EXPECT_EQ(ran, expected);
  EXPECT_EQ(t.chosen(b), 1);
}

// ---- signatures -----------------------------------------------------------------

// Broadcasts of up to 8 bytes in shared memory carry a 32-bit tag of their
// signature in their packed record (ShmGroup::packed_stamp): the signature
// hash with its low four bits replaced by the byte count. Two broadcasts
// that differ in dtype must differ in the rest of those bits, else a
// receiver would take a record of another dtype for its own.
TEST(CoreSignature, BroadcastsOfEveryDtypeDifferInThePackedTagsBits) {
  std::set<std::uint32_t> tags;
  for (int d = 0; d < tutti::kNumDataTypes; ++d) {
    d::OpContext c;
    c.op_name = "broadcast";
    c.dtype_name = tutti::dtype_name(static_cast<tutti::DataType>(d));
    c.root = 0;
    const auto tag = static_cast<std::uint32_t>(d::op_signature(c) >> 32) & ~0xFu;
    EXPECT_TRUE(tags.insert(tag).second) << c.dtype_name;
    // And the signature tells the dtype back.
    EXPECT_CONTAINS(d::describe_signature(d::op_signature(c), 8), c.dtype_name);
  }
  EXPECT_EQ(tags.size(), static_cast<std::size_t>(tutti::kNumDataTypes));
}

// An operation with nothing but its kind reads as its name alone.
TEST(CoreSignature, ABarrierReadsAsItsName) {
  d::OpContext c;
  c.op_name = "barrier";
  EXPECT_EQ(d::describe_signature(d::op_signature(c) & ~0xffffffffull, ~1ull), "barrier");
  EXPECT_EQ(d::describe_signature(d::op_signature(c), 0), "barrier (0 B)");
}

// Message signatures hash the root and byte count: operations that differ
// only there (a count one element apart, whose messages may all have the
// lengths their receivers expect) have different signatures, and the
// receiver names the sender's root or count from its own operation.
TEST(CoreSignature, MessagesOfCountsOrRootsThatDifferAreToldApartAndNamed) {
  auto ctx = [](std::size_t bytes, int root) {
    d::OpContext c;
    c.op_name = root >= 0 ? "broadcast" : "all_reduce";
    c.dtype_name = "float32";
    c.redop_name = root >= 0 ? nullptr : "sum";
    c.bytes = bytes;
    c.root = root;
    return c;
  };
  const auto mine = d::message_signature(ctx(4u << 20, -1));
  const auto more = d::message_signature(ctx((4u << 20) + 4, -1));
  EXPECT_NE(mine, more);
  EXPECT_EQ(d::describe_signature_kind(more, mine),
            "all_reduce (4194308 B, float32, sum) where this rank called all_reduce (4194304 B, float32, sum)");
  const auto root0 = d::message_signature(ctx(16, 0));
  const auto root7 = d::message_signature(ctx(16, 7));
  EXPECT_NE(root0, root7);
  EXPECT_EQ(d::describe_signature_kind(root7, root0),
            "broadcast (16 B, float32, root 7) where this rank called broadcast (16 B, float32, root 0)");
  // A count far from this rank's (a signature this process never made):
  // named by kind, the count or root said to differ.
  const auto far = mine ^ 0x10;
  EXPECT_EQ(d::describe_signature_kind(far, mine),
            "all_reduce (float32, sum) with another byte count or root, where this rank called all_reduce (4194304 B, "
            "float32, sum)");
}

}  // namespace
