// The fixed-point codec of reproducible sums (reduce/reproducible.h), run as
// the engine runs it (every rank's scan, the MAX of the anchors and flags,
// the int64 SUM of the lanes and codes, the decode), in one process: sums
// against exact references, the window below a block's largest, NaN and
// infinities, subnormals, overflow, complex parts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "reduce/reduce.h"
#include "reduce/reproducible.h"

namespace {

namespace d = tutti::detail;
using tutti::DataType;

// Every rank's contribution (`reals` reals of `dtype`'s real type each, as
// raw bytes), summed the reproducible way; `order`: the order in which the
// ranks' lanes are added (a permutation).
std::vector<char> repro_sum(DataType dtype, const std::vector<std::vector<char>>& in, std::size_t reals, bool avg,
                            const std::vector<int>& order) {
  const int n = static_cast<int>(in.size());
  const d::ReproLayout l = d::repro_layout(dtype, n);
  const std::size_t blocks = d::repro_blocks(reals);
  std::vector<std::int16_t> anchors(blocks, d::kNoAnchor), flags(blocks, 0);
  for (const auto& x : in) {
    std::vector<std::int16_t> a(blocks, d::kNoAnchor), f(blocks, 0);
    d::repro_scan(x.data(), 0, reals, l, a.data(), f.data());
    for (std::size_t b = 0; b < blocks; ++b) {
      anchors[b] = std::max(anchors[b], a[b]);
      flags[b] = std::max(flags[b], f[b]);
    }
  }
  std::vector<std::int64_t> sum(reals * l.lanes, 0), lanes(reals * l.lanes);
  std::vector<std::size_t> flagged(blocks);
  flagged.resize(d::repro_flagged(flags.data(), blocks, flagged.data()));
  std::vector<std::int64_t> codes(flagged.size() * d::kReproBlock, 0), mine(codes.size());
  for (int r : order) {
    d::repro_encode(in[r].data(), 0, reals, l, anchors.data(), lanes.data());
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += lanes[i];
    std::fill(mine.begin(), mine.end(), 0);
    d::repro_codes(in[r].data(), 0, reals, l, flagged, mine.data());
    for (std::size_t i = 0; i < codes.size(); ++i) codes[i] += mine[i];
  }
  const std::size_t es = dtype == DataType::Float64 || dtype == DataType::Complex128  ? 8
                         : dtype == DataType::Float32 || dtype == DataType::Complex64 ? 4
                                                                                      : 2;
  std::vector<char> out(reals * es);
  d::repro_decode(sum.data(), 0, reals, l, anchors.data(), avg, out.data());
  d::repro_apply_codes(codes.data(), flagged, 0, reals, l, out.data());
  return out;
}

std::vector<int> identity(int n) {
  std::vector<int> o(n);
  for (int i = 0; i < n; ++i) o[i] = i;
  return o;
}

template <class T>
std::vector<char> bytes_of(const std::vector<T>& v) {
  std::vector<char> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

template <class T>
std::vector<T> values_of(const std::vector<char>& b) {
  std::vector<T> v(b.size() / sizeof(T));
  std::memcpy(v.data(), b.data(), b.size());
  return v;
}

// v rounded to p bits (nearest, ties to even), not below the unit 2^lsb_min.
long double round_to(long double v, int p, int lsb_min) {
  if (v == 0) return 0;
  int e;
  std::frexp(v, &e);
  const int lsb = std::max(e - p, lsb_min);
  return std::ldexp(std::nearbyint(std::ldexp(v, -lsb)), lsb);
}

// Random floats of a block whose largest has exponent `top`, all within
// `span` binades of it, random signs.
float random_within(std::mt19937_64& g, int top, int span) {
  std::uniform_int_distribution<int> ex(top - span, top - 1);
  std::uniform_real_distribution<double> m(1.0, 2.0);
  const double v = std::ldexp(m(g), ex(g));
  return static_cast<float>(g() & 1 ? -v : v);
}

TEST(ReproCodec, Float32SumsAreTheExactSumRoundedOnceInAnyOrder) {
  std::mt19937_64 g(7);
  for (int n = 2; n <= 8; ++n) {
    const d::ReproLayout l = d::repro_layout(DataType::Float32, n);
    ASSERT_GE(l.exact_binades(), 20);
    const std::size_t reals = 1000;  // 16 blocks, the last one short
    std::vector<std::vector<float>> x(n, std::vector<float>(reals));
    for (std::size_t b = 0; b * 64 < reals; ++b) {
      const int top = static_cast<int>(g() % 200) - 100;
      for (int r = 0; r < n; ++r)
        for (std::size_t i = b * 64; i < std::min(reals, (b + 1) * 64); ++i)
          x[r][i] = random_within(g, top, l.exact_binades() - 2);
    }
    std::vector<std::vector<char>> in;
    for (const auto& v : x) in.push_back(bytes_of(v));
    std::vector<int> order = identity(n);
    const std::vector<float> got = values_of<float>(repro_sum(DataType::Float32, in, reals, false, order));
    std::reverse(order.begin(), order.end());
    const std::vector<float> again = values_of<float>(repro_sum(DataType::Float32, in, reals, false, order));
    for (std::size_t i = 0; i < reals; ++i) {
      long double exact = 0;  // exact: at most 53 bits apart, n <= 8
      for (int r = 0; r < n; ++r) exact += x[r][i];
      ASSERT_EQ(got[i], static_cast<float>(exact)) << "n " << n << ", element " << i;
      ASSERT_EQ(std::memcmp(&got[i], &again[i], 4), 0) << "n " << n << ", element " << i;
    }
  }
}

TEST(ReproCodec, AvgIsTheExactSumDividedAndRoundedOnce) {
  std::mt19937_64 g(11);
  for (int n : {2, 3, 5, 7}) {
    const std::size_t reals = 640;
    std::vector<std::vector<float>> x(n, std::vector<float>(reals));
    for (auto& v : x)
      for (float& f : v) f = random_within(g, 3, 12);
    std::vector<std::vector<char>> in;
    for (const auto& v : x) in.push_back(bytes_of(v));
    const std::vector<float> got = values_of<float>(repro_sum(DataType::Float32, in, reals, true, identity(n)));
    for (std::size_t i = 0; i < reals; ++i) {
      // The exact sum is a multiple of 2^-40 below 2^47 * 2^-40: its
      // quotient by n, q + rem/n units of 2^-40, lies strictly between two
      // consecutive multiples of 2^-40 where rem != 0; the float grid's
      // midpoints there are multiples of 2^-40 too, so the true value rounds
      // like the point halfway between them.
      long double exact = 0;
      for (int r = 0; r < n; ++r) exact += x[r][i];
      const auto scaled = static_cast<long long>(std::ldexp(exact, 40));
      const long long q = scaled / n, rem = scaled % n;
      const long double lo = std::ldexp(static_cast<long double>(q), -40);
      const long double next = std::ldexp(static_cast<long double>(q + (scaled < 0 ? -1 : 1)), -40);
      const long double want = round_to(rem == 0 ? lo : (lo + next) / 2, 24, -149);
      ASSERT_EQ(got[i], static_cast<float>(want)) << "n " << n << ", element " << i;
    }
  }
}

TEST(ReproCodec, SixteenBitTypesAreTheExactSumRoundedOnce) {
  std::mt19937_64 g(3);
  for (DataType dt : {DataType::BFloat16, DataType::Float16}) {
    const int p = dt == DataType::BFloat16 ? 8 : 11, lsb_min = dt == DataType::BFloat16 ? -133 : -24;
    for (int n : {2, 4, 8}) {
      const std::size_t reals = 300;
      std::vector<std::vector<std::uint16_t>> x(n, std::vector<std::uint16_t>(reals));
      std::vector<std::vector<float>> f(n, std::vector<float>(reals));
      for (int r = 0; r < n; ++r)
        for (std::size_t i = 0; i < reals; ++i) {
          const float v = random_within(g, dt == DataType::BFloat16 ? 20 : 8, dt == DataType::BFloat16 ? 30 : 20);
          x[r][i] = dt == DataType::BFloat16 ? d::float_to_bfloat16(v) : d::float_to_half(v);
          f[r][i] = dt == DataType::BFloat16 ? d::bfloat16_to_float(x[r][i]) : d::half_to_float(x[r][i]);
        }
      std::vector<std::vector<char>> in;
      for (const auto& v : x) in.push_back(bytes_of(v));
      const std::vector<std::uint16_t> got = values_of<std::uint16_t>(repro_sum(dt, in, reals, false, identity(n)));
      for (std::size_t i = 0; i < reals; ++i) {
        long double exact = 0;
        for (int r = 0; r < n; ++r) exact += f[r][i];
        const float want = static_cast<float>(round_to(exact, p, lsb_min));
        const float have = dt == DataType::BFloat16 ? d::bfloat16_to_float(got[i]) : d::half_to_float(got[i]);
        ASSERT_EQ(have, want) << tutti::dtype_name(dt) << ", n " << n << ", element " << i;
      }
    }
  }
}

TEST(ReproCodec, Float64WithinTheWindowIsExact) {
  // Two lanes: contributions up to exact_binades() below the block's
  // largest convert exactly; sums of values on a common grid are exact.
  const d::ReproLayout l = d::repro_layout(DataType::Float64, 4);
  EXPECT_EQ(l.lanes, 2);
  EXPECT_GE(l.exact_binades(), 60);
  std::mt19937_64 g(5);
  const std::size_t reals = 200;
  std::vector<std::vector<double>> x(4, std::vector<double>(reals));
  for (auto& v : x)
    for (double& e : v) e = std::ldexp(static_cast<double>(static_cast<std::int64_t>(g() >> 12) - (1ll << 51)), -30);
  std::vector<std::vector<char>> in;
  for (const auto& v : x) in.push_back(bytes_of(v));
  const std::vector<double> got = values_of<double>(repro_sum(DataType::Float64, in, reals, false, {3, 1, 0, 2}));
  for (std::size_t i = 0; i < reals; ++i) {
    // Integers times 2^-30 below 2^53 each: their sum is exact in a long double.
    long double exact = 0;
    for (int r = 0; r < 4; ++r) exact += x[r][i];
    ASSERT_EQ(got[i], static_cast<double>(exact)) << "element " << i;
  }
  // One contribution alone comes back as it was, tiny and huge alike.
  for (double v : {1.0, -0x1.fffffffffffffp1023, 0x1p-1074, -3.25e-300, 0x1.123456789abcdp-5}) {
    const std::vector<double> one =
        values_of<double>(repro_sum(DataType::Float64, {bytes_of(std::vector<double>{v})}, 1, false, {0}));
    EXPECT_EQ(one[0], v);
  }
}

TEST(ReproCodec, BelowTheWindowAContributionIsRoundedToTheBlocksUnit) {
  // One block: 1.0 and a value far below it on another rank. The small one
  // is rounded to the block's unit 2^(anchor - F): here to zero.
  const d::ReproLayout l = d::repro_layout(DataType::Float32, 2);
  const float tiny = std::ldexp(1.0f, -(l.frac_bits() + 5));
  std::vector<std::vector<char>> in = {bytes_of(std::vector<float>{1.0f, 3.0f}),
                                       bytes_of(std::vector<float>{tiny, -tiny})};
  const std::vector<float> got = values_of<float>(repro_sum(DataType::Float32, in, 2, false, {0, 1}));
  EXPECT_EQ(got[0], 1.0f);
  EXPECT_EQ(got[1], 3.0f);
  // Within the window it counts: 1 + 2^-23 (one ulp of 1) is kept exactly.
  const float ulp = std::ldexp(1.0f, -23);
  in[1] = bytes_of(std::vector<float>{ulp, -ulp});
  const std::vector<float> kept = values_of<float>(repro_sum(DataType::Float32, in, 2, false, {1, 0}));
  EXPECT_EQ(kept[0], 1.0f + ulp);
  EXPECT_EQ(kept[1], 3.0f - ulp);
}

TEST(ReproCodec, NanAndInfinitiesFollowIeeeAndTheirBlocksFiniteSumsStay) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  // Three ranks, a block of 70 reals (two blocks: the flags are per block).
  std::vector<std::vector<float>> x(3, std::vector<float>(70, 0.5f));
  x[0][1] = inf;                  // +inf alone: +inf
  x[1][2] = -inf;                 // -inf alone: -inf
  x[0][3] = inf, x[2][3] = -inf;  // both: NaN
  x[1][4] = nan;                  // NaN: NaN
  x[0][5] = inf, x[1][5] = inf;   // +inf twice: +inf
  x[2][66] = nan;                 // in the second block
  std::vector<std::vector<char>> in;
  for (const auto& v : x) in.push_back(bytes_of(v));
  const std::vector<float> got = values_of<float>(repro_sum(DataType::Float32, in, 70, false, {2, 0, 1}));
  EXPECT_EQ(got[0], 1.5f);  // finite values of a flagged block still add up
  EXPECT_EQ(got[1], inf);
  EXPECT_EQ(got[2], -inf);
  EXPECT_TRUE(std::isnan(got[3]));
  EXPECT_TRUE(std::isnan(got[4]));
  EXPECT_EQ(got[5], inf);
  EXPECT_TRUE(std::isnan(got[66]));
  EXPECT_EQ(got[65], 1.5f);
  EXPECT_EQ(got[69], 1.5f);
}

TEST(ReproCodec, SubnormalsOverflowAndZeros) {
  // Subnormals in a block of their own sum exactly; next to FLT_MAX they
  // would be far below the window.
  const float sub = std::numeric_limits<float>::denorm_min(), big = std::numeric_limits<float>::max();
  std::vector<std::vector<char>> in = {bytes_of(std::vector<float>{sub, 3 * sub, 0x1p-127f}),
                                       bytes_of(std::vector<float>{sub, -sub, 0x1p-127f})};
  const std::vector<float> tiny = values_of<float>(repro_sum(DataType::Float32, in, 3, false, {0, 1}));
  EXPECT_EQ(tiny[0], 2 * sub);
  EXPECT_EQ(tiny[1], 2 * sub);
  EXPECT_EQ(tiny[2], 0x1p-126f);  // two subnormals make the least normal
  const std::vector<float> half = values_of<float>(repro_sum(DataType::Float32, in, 3, true, {1, 0}));
  EXPECT_EQ(half[0], sub);
  EXPECT_EQ(half[1], sub);
  in = {bytes_of(std::vector<float>{big, -0.0f, 2.5f}), bytes_of(std::vector<float>{big, -0.0f, -2.5f})};
  const std::vector<float> got = values_of<float>(repro_sum(DataType::Float32, in, 3, false, {0, 1}));
  EXPECT_EQ(got[0], std::numeric_limits<float>::infinity());  // past the range: an infinity
  EXPECT_EQ(got[1], 0.0f);
  EXPECT_FALSE(std::signbit(got[1]));  // a zero sum is +0, -0 + -0 too
  EXPECT_EQ(got[2], 0.0f);
  EXPECT_FALSE(std::signbit(got[2]));
  // Avg of two FLT_MAX is FLT_MAX: the exact sum is divided before rounding.
  const std::vector<float> avg = values_of<float>(repro_sum(DataType::Float32, in, 3, true, {1, 0}));
  EXPECT_EQ(avg[0], big);
}

TEST(ReproCodec, ComplexPartsAreRealsAndOnlySumAndAvgOfFloatsAreCovered) {
  const d::ReproLayout l = d::repro_layout(DataType::Complex64, 3);
  EXPECT_EQ(l.per_element, 2);
  EXPECT_EQ(l.real, DataType::Float32);
  EXPECT_EQ(d::repro_layout(DataType::Complex128, 3).real, DataType::Float64);
  for (DataType dt : {DataType::Float16, DataType::BFloat16, DataType::Float32, DataType::Float64, DataType::Complex64,
                      DataType::Complex128}) {
    EXPECT_TRUE(d::reproducible_covers(dt, tutti::ReduceOpKind::Sum));
    EXPECT_TRUE(d::reproducible_covers(dt, tutti::ReduceOpKind::Avg));
    EXPECT_FALSE(d::reproducible_covers(dt, tutti::ReduceOpKind::Max));
    EXPECT_FALSE(d::reproducible_covers(dt, tutti::ReduceOpKind::PremulSum));
  }
  EXPECT_FALSE(d::reproducible_covers(DataType::Int32, tutti::ReduceOpKind::Sum));
}

}  // namespace
