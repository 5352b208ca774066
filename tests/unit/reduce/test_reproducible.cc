// The exact sum of n contributions, rounded once (reduce/reproducible.h):
// against exact references, adversarial sums (cancellation, the whole
// exponent range, subnormals, ties), NaN, infinities and signed zeros, in
// any order of the contributions, the vector kernel bit for bit with the
// portable one.
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

template <class T>
std::vector<T> sum_of(const std::vector<std::vector<T>>& in, DataType dt, bool avg, const std::vector<int>& order) {
  std::vector<const void*> p;
  for (int k : order) p.push_back(in[static_cast<std::size_t>(k)].data());
  const std::size_t count = in[0].size() / (dt == DataType::Complex64 || dt == DataType::Complex128 ? 2 : 1);
  std::vector<T> out(in[0].size());
  d::repro_sum(out.data(), p.data(), static_cast<int>(p.size()), count, dt, avg);
  return out;
}

// The same for contributions held as bytes of `dt`.
std::vector<char> sum_bytes(const std::vector<std::vector<char>>& in, DataType dt, bool avg,
                            const std::vector<int>& order) {
  std::vector<const void*> p;
  for (int k : order) p.push_back(in[static_cast<std::size_t>(k)].data());
  std::vector<char> out(in[0].size());
  d::repro_sum(out.data(), p.data(), static_cast<int>(p.size()), in[0].size() / tutti::dtype_size(dt), dt, avg);
  return out;
}

std::vector<int> order_of(int n, int how) {
  std::vector<int> o(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) o[static_cast<std::size_t>(i)] = how == 0 ? i : how == 1 ? n - 1 - i : (i + how) % n;
  return o;
}

// v rounded to p bits (nearest, ties to even), not below the unit 2^lsb_min.
long double round_to(long double v, int p, int lsb_min) {
  if (v == 0) return 0;
  int e;
  std::frexp(v, &e);
  const int lsb = std::max(e - p, lsb_min);
  return std::ldexp(std::nearbyint(std::ldexp(v, -lsb)), lsb);
}

float random_float(std::mt19937_64& g, int lo, int span) {
  const double m = 1.0 + static_cast<double>(g() % (1u << 23)) / (1u << 23);
  const double v = std::ldexp(m, lo + static_cast<int>(g() % static_cast<unsigned>(span)));
  return static_cast<float>(g() & 1 ? -v : v);
}

TEST(ReproSum, Float32IsTheExactSumRoundedOnceInAnyOrder) {
  // Spans of 30 binades: past the fast path's window for some elements
  // (the exact path), within a long double's 64 bits for the reference.
  std::mt19937_64 g(7);
  for (int n = 2; n <= 8; ++n) {
    const std::size_t count = 1001;
    std::vector<std::vector<float>> x(static_cast<std::size_t>(n), std::vector<float>(count));
    for (auto& v : x)
      for (float& f : v) f = random_float(g, -15, 30);
    const std::vector<float> got = sum_of(x, DataType::Float32, false, order_of(n, 0));
    for (int how = 1; how < 3; ++how)
      ASSERT_EQ(std::memcmp(sum_of(x, DataType::Float32, false, order_of(n, how)).data(), got.data(), count * 4), 0)
          << "n " << n;
    for (std::size_t i = 0; i < count; ++i) {
      long double exact = 0;
      for (int r = 0; r < n; ++r) exact += x[static_cast<std::size_t>(r)][i];
      ASSERT_EQ(got[i], static_cast<float>(exact)) << "n " << n << ", element " << i;
    }
  }
}

TEST(ReproSum, AdversarialSumsAreExact) {
  const float big = std::numeric_limits<float>::max(), sub = std::numeric_limits<float>::denorm_min();
  struct Case {
    std::vector<float> in;
    float want;
  };
  const Case cases[] = {
      {{0x1p100f, 1.0f, -0x1p100f}, 1.0f},                        // cancellation: the small one survives
      {{big, big, -big}, big},                                    // no overflow on the way
      {{1.0f, 0x1p-60f, -1.0f}, 0x1p-60f},                        // 60 binades apart
      {{0x1p127f, 0x1p-149f, -0x1p127f}, 0x1p-149f},              // the whole range
      {{sub, sub, sub}, 3 * sub},                                 // subnormals
      {{0x1p-127f, 0x1p-127f}, 0x1p-126f},                        // two subnormals, the least normal
      {{1.0f, 0x1p-24f}, 1.0f},                                   // a tie: to even
      {{1.0f + 0x1p-23f, 0x1p-24f}, 1.0f + 0x1p-22f},             // a tie: to even, upwards
      {{1.0f, 0x1p-24f, 0x1p-80f}, 1.0f + 0x1p-23f},              // just past the tie
      {{1.0f, 0x1p-24f, -0x1p-80f}, 1.0f},                        // just short of it
      {{big, 0x1p103f}, std::numeric_limits<float>::infinity()},  // past the range after rounding
      {{big, 0x1p102f}, big},                                     // within it
  };
  for (const Case& c : cases) {
    const int n = static_cast<int>(c.in.size());
    std::vector<std::vector<float>> x;
    for (float v : c.in) x.push_back({v, v, v, v, v});  // five elements: the vector kernel and the tail
    for (int how = 0; how < 3; ++how) {
      const std::vector<float> got = sum_of(x, DataType::Float32, false, order_of(n, how));
      for (float v : got) EXPECT_EQ(v, c.want) << c.in[0] << " + " << c.in[1] << " ...";
    }
  }
  // Float64 too: 2^1000 + 1 - 2^1000, and the least subnormal beside the largest.
  const double dmax = std::numeric_limits<double>::max();
  const std::vector<std::vector<double>> d1 = {
      {0x1p1000, dmax, 1e-300}, {1.0, dmax, 0x1p-1074}, {-0x1p1000, -dmax, -1e-300}};
  const std::vector<double> got = sum_of(d1, DataType::Float64, false, {2, 0, 1});
  EXPECT_EQ(got[0], 1.0);
  EXPECT_EQ(got[1], dmax);
  EXPECT_EQ(got[2], 0x1p-1074);
}

TEST(ReproSum, AvgIsTheExactSumDividedAndRoundedOnce) {
  std::mt19937_64 g(11);
  for (int n : {2, 3, 5, 7}) {
    const std::size_t count = 640;
    std::vector<std::vector<float>> x(static_cast<std::size_t>(n), std::vector<float>(count));
    for (auto& v : x)
      for (float& f : v) f = random_float(g, -9, 12);
    const std::vector<float> got = sum_of(x, DataType::Float32, true, order_of(n, 1));
    for (std::size_t i = 0; i < count; ++i) {
      // The exact sum is a multiple of 2^-40 (units below 2^47): its
      // quotient by n, q + rem/n units, lies strictly between consecutive
      // multiples of 2^-40 where rem != 0, and the float grid's midpoints
      // there are such multiples: the true value rounds like the point
      // halfway between them.
      long double exact = 0;
      for (int r = 0; r < n; ++r) exact += x[static_cast<std::size_t>(r)][i];
      const auto scaled = static_cast<long long>(std::ldexp(exact, 40));
      const long long q = scaled / n, rem = scaled % n;
      const long double lo = std::ldexp(static_cast<long double>(q), -40);
      const long double next = std::ldexp(static_cast<long double>(q + (scaled < 0 ? -1 : 1)), -40);
      const long double want = round_to(rem == 0 ? lo : (lo + next) / 2, 24, -149);
      ASSERT_EQ(got[i], static_cast<float>(want)) << "n " << n << ", element " << i;
    }
  }
  const float big = std::numeric_limits<float>::max();
  EXPECT_EQ(sum_of<float>({{big}, {big}}, DataType::Float32, true, {0, 1})[0], big);
}

TEST(ReproSum, SixteenBitTypesAreTheExactSumRoundedOnce) {
  std::mt19937_64 g(3);
  for (DataType dt : {DataType::BFloat16, DataType::Float16}) {
    const bool bf = dt == DataType::BFloat16;
    const int p = bf ? 8 : 11, lsb_min = bf ? -133 : -24;
    for (int n : {2, 4, 8}) {
      const std::size_t count = 300;
      std::vector<std::vector<std::uint16_t>> x(static_cast<std::size_t>(n), std::vector<std::uint16_t>(count));
      std::vector<std::vector<float>> f(static_cast<std::size_t>(n), std::vector<float>(count));
      for (std::size_t r = 0; r < x.size(); ++r)
        for (std::size_t i = 0; i < count; ++i) {
          const float v = random_float(g, bf ? -20 : -20, bf ? 40 : 30);  // float16: subnormals too
          x[r][i] = bf ? d::float_to_bfloat16(v) : d::float_to_half(v);
          f[r][i] = bf ? d::bfloat16_to_float(x[r][i]) : d::half_to_float(x[r][i]);
        }
      for (bool avg : {false, true}) {
        const std::vector<std::uint16_t> got = sum_of(x, dt, avg, order_of(n, 2));
        for (std::size_t i = 0; i < count; ++i) {
          long double exact = 0;
          for (std::size_t r = 0; r < x.size(); ++r) exact += f[r][i];
          if (avg && n != 2 && n != 4 && n != 8) continue;  // n is a power of two: exact quotients
          const float want = static_cast<float>(round_to(avg ? exact / n : exact, p, lsb_min));
          const float have = bf ? d::bfloat16_to_float(got[i]) : d::half_to_float(got[i]);
          if (std::isinf(want) || std::fabs(want) > (bf ? 3.3e38f : 65504.f)) continue;
          ASSERT_EQ(have, want) << tutti::dtype_name(dt) << ", n " << n << (avg ? " avg" : "") << ", element " << i;
        }
      }
    }
  }
}

TEST(ReproSum, Float64IsExactOnAGridAndAnyOrder) {
  std::mt19937_64 g(5);
  const std::size_t count = 200;
  std::vector<std::vector<double>> x(4, std::vector<double>(count));
  for (auto& v : x)
    for (double& e : v) e = std::ldexp(static_cast<double>(static_cast<std::int64_t>(g() >> 12) - (1ll << 51)), -30);
  const std::vector<double> got = sum_of(x, DataType::Float64, false, {3, 1, 0, 2});
  for (std::size_t i = 0; i < count; ++i) {
    long double exact = 0;  // integers times 2^-30 below 2^53 each: exact
    for (const auto& v : x) exact += v[i];
    ASSERT_EQ(got[i], static_cast<double>(exact)) << "element " << i;
  }
}

TEST(ReproSum, NanInfinitiesAndSignedZerosFollowIeee) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<std::vector<float>> x = {{inf, -inf, inf, nan, inf, -0.0f, -0.0f, 2.5f, 1.0f},
                                             {1.0f, 2.0f, -inf, 1.0f, inf, -0.0f, 0.0f, -2.5f, 1.0f}};
  for (int how = 0; how < 2; ++how) {
    const std::vector<float> got = sum_of(x, DataType::Float32, false, order_of(2, how));
    EXPECT_EQ(got[0], inf);
    EXPECT_EQ(got[1], -inf);
    EXPECT_TRUE(std::isnan(got[2]));
    EXPECT_TRUE(std::isnan(got[3]));
    EXPECT_EQ(got[4], inf);
    EXPECT_EQ(got[5], 0.0f);
    EXPECT_TRUE(std::signbit(got[5]));   // -0 + -0 = -0
    EXPECT_FALSE(std::signbit(got[6]));  // -0 + 0 = +0
    EXPECT_FALSE(std::signbit(got[7]));  // x + -x = +0
    EXPECT_EQ(got[8], 2.0f);
  }
}

TEST(ReproSum, VectorKernelMatchesThePortableOneBitForBit) {
  if (!d::reduce_simd_level_supported(d::ReduceSimdLevel::Avx2)) GTEST_SKIP() << "no AVX2 on this CPU";
  std::mt19937_64 g(13);
  const float specials[] = {0.0f,
                            -0.0f,
                            std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::denorm_min(),
                            std::numeric_limits<float>::max(),
                            0x1p-126f,
                            -0x1.8p-130f};
  // Each type over its range: spans within and past the exact double sum,
  // subnormals, sums below the normal range, overflow.
  struct Type {
    DataType dt;
    int lo, span;
  };
  for (const Type t :
       {Type{DataType::Float32, -30, 60}, Type{DataType::Float32, -152, 30}, Type{DataType::BFloat16, -140, 150},
        Type{DataType::BFloat16, -10, 30}, Type{DataType::BFloat16, -136, 12}, Type{DataType::Float16, -26, 42},
        Type{DataType::Float16, -26, 12}}) {
    const std::size_t es = tutti::dtype_size(t.dt);
    for (int n : {2, 3, 8}) {
      for (bool avg : {false, true}) {
        const std::size_t count = 4099;
        std::vector<std::vector<char>> x(static_cast<std::size_t>(n), std::vector<char>(count * es));
        for (std::size_t r = 0; r < x.size(); ++r)
          for (std::size_t i = 0; i < count; ++i) {
            float f = g() % 50 == 0 ? specials[g() % 8] : random_float(g, t.lo, 1 + static_cast<int>(g() % t.span));
            if (r == 0 && g() % 20 == 0) f = 0.0f;                                            // elements of zeros
            if (r == 1 && g() % 10 == 0) f = -d::bfloat16_to_float(d::float_to_bfloat16(f));  // cancellation
            if (t.dt == DataType::Float32) {
              std::memcpy(&x[r][i * 4], &f, 4);
            } else {
              const std::uint16_t h = t.dt == DataType::Float16 ? d::float_to_half(f) : d::float_to_bfloat16(f);
              std::memcpy(&x[r][i * 2], &h, 2);
            }
          }
        const std::vector<char> fast = sum_bytes(x, t.dt, avg, order_of(n, 0));
        d::set_reduce_simd_max_level(d::ReduceSimdLevel::Baseline);
        const std::vector<char> plain = sum_bytes(x, t.dt, avg, order_of(n, 1));
        d::set_reduce_simd_max_level(d::ReduceSimdLevel::Avx512);
        std::size_t differ = 0;
        while (differ < count && std::memcmp(&fast[differ * es], &plain[differ * es], es) == 0) ++differ;
        EXPECT_EQ(differ, count) << tutti::dtype_name(t.dt) << ", n " << n << (avg ? " avg" : "")
                                 << ": the first element that differs";
      }
    }
  }
  // An average on a midpoint of float32's grid: (2 (1 + 2^-23) + (1 - 2^-24)) / 3
  // = 1 + 2^-24, a tie, to even: 1.
  std::vector<std::vector<float>> tie(3, std::vector<float>(8, 1.0f));
  tie[0][5] = tie[1][5] = 1.0f + 0x1p-23f;
  tie[2][5] = 1.0f - 0x1p-24f;
  EXPECT_EQ(sum_of(tie, DataType::Float32, true, {0, 1, 2})[5], 1.0f);
}

// On 2 ranks the mode takes the usual sum (CommunicatorImpl::reproducible_sum):
// for the 16-bit types, a float32 addition rounded to the type is the exact
// sum rounded once. Random pairs of every finite bit pattern (both signs,
// subnormals, every exponent gap), both orders.
TEST(ReproSum, TwoSixteenBitContributionsTakeTheUsualSum) {
  std::mt19937_64 g(17);
  for (DataType dt : {DataType::BFloat16, DataType::Float16}) {
    const std::uint16_t exp_mask = dt == DataType::BFloat16 ? 0x7f80 : 0x7c00;
    const std::size_t count = std::size_t{1} << 20;
    std::vector<std::uint16_t> a(count), b(count);
    for (std::size_t i = 0; i < count; ++i) {
      do {
        a[i] = static_cast<std::uint16_t>(g());
        // Half of the pairs near each other (gaps up to 3 binades), so that
        // sums near midpoints and cancellations come often.
        b[i] = g() % 2 ? static_cast<std::uint16_t>(g())
                       : static_cast<std::uint16_t>((a[i] ^ (g() & 0x80ff)) + (g() % 7 - 3) * (exp_mask & -exp_mask));
      } while ((a[i] & exp_mask) == exp_mask || (b[i] & exp_mask) == exp_mask);
    }
    for (int order = 0; order < 2; ++order) {
      const void* in[2] = {order ? b.data() : a.data(), order ? a.data() : b.data()};
      std::vector<std::uint16_t> usual(count), exact(count);
      d::reduce_pair(usual.data(), in[0], in[1], count, dt, tutti::ReduceOpKind::Sum);
      d::repro_sum(exact.data(), in, 2, count, dt, false);
      for (std::size_t i = 0; i < count; ++i)
        ASSERT_EQ(usual[i], exact[i]) << tutti::dtype_name(dt) << ": " << std::hex << a[i] << " + " << b[i];
    }
  }
}

TEST(ReproSum, ComplexPartsAreSummedAsRealsAndOnlySumAndAvgOfFloatsAreCovered) {
  const std::vector<std::vector<float>> x = {{1.0f, 0x1p100f}, {0x1p-30f, -0x1p100f}, {-1.0f, 3.0f}};
  const std::vector<float> got = sum_of(x, DataType::Complex64, false, {1, 2, 0});
  EXPECT_EQ(got[0], 0x1p-30f);
  EXPECT_EQ(got[1], 3.0f);
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
