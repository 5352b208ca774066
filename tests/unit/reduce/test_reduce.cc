// Reduction kernels (src/reduce) against the independent scalar model in
// tests/common/reference.h, for every valid (dtype, op) pair and the
// kernels of every SIMD level this CPU has (baseline, AVX2/F16C, AVX-512),
// odd counts (vector-loop tails), misaligned and aliased buffers; each SIMD
// level bit for bit against baseline, special values included; plus the
// float16/bfloat16 conversions, divide_by, scale, and the (dtype, op)
// validity rules.

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <complex>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/reference.h"
#include "common/stream_copy.h"
#include "reduce/reduce.h"
#include "tutti/error.h"
#include "tutti/types.h"

namespace tutti {
namespace {

using detail::reduce_inplace;
using detail::reduce_pair;
using testing::compare;
using testing::fill_random;
using testing::reference_magnitude;
using testing::reference_reduce;

constexpr std::size_t kCounts[] = {0, 1, 7, 33, 1000, 4099};

std::vector<DataType> all_dtypes() {
  std::vector<DataType> v;
  for (int i = 0; i < kNumDataTypes; ++i) v.push_back(static_cast<DataType>(i));
  return v;
}

// The ReduceOp used for a kind in these tests: PremulSum needs a scalar
// that is integral (valid for integer types) and not 1 (so it matters).
ReduceOp make_op(ReduceOpKind k) { return k == ReduceOpKind::PremulSum ? ReduceOp::premul_sum(3.0) : ReduceOp(k); }

// What one kernel step computes: Avg and PremulSum accumulate as Sum.
ReduceOp step_op(ReduceOpKind k) {
  return (k == ReduceOpKind::Avg || k == ReduceOpKind::PremulSum) ? ReduceOp(ReduceOpKind::Sum) : ReduceOp(k);
}

using detail::ReduceSimdLevel;

// Forces one SIMD level (a supported one) for one scope.
class SimdScope {
 public:
  explicit SimdScope(ReduceSimdLevel level) {
    detail::set_reduce_simd_max_level(level);
    EXPECT_EQ(level, detail::reduce_simd_level()) << detail::reduce_simd_level_name(level);
  }
  ~SimdScope() { detail::set_reduce_simd_allowed(true); }
  SimdScope(const SimdScope&) = delete;
  SimdScope& operator=(const SimdScope&) = delete;
};

// Baseline, plus every higher level this CPU has.
std::vector<ReduceSimdLevel> simd_levels() {
  std::vector<ReduceSimdLevel> v;
  for (auto l : {ReduceSimdLevel::Baseline, ReduceSimdLevel::Avx2, ReduceSimdLevel::Avx512})
    if (detail::reduce_simd_level_supported(l)) v.push_back(l);
  return v;
}
std::vector<ReduceSimdLevel> simd_levels_above_baseline() {
  std::vector<ReduceSimdLevel> v = simd_levels();
  v.erase(v.begin());
  return v;
}
std::string level_name(ReduceSimdLevel l) { return detail::reduce_simd_level_name(l); }

// A byte buffer whose data() can be offset by one element to misalign it.
struct Buf {
  Buf(std::size_t count, DataType t, bool misaligned)
      : elem(dtype_size(t)), off(misaligned ? elem : 0), bytes((count + 1) * elem) {}
  void* data() { return bytes.data() + off; }
  std::size_t elem, off;
  std::vector<unsigned char> bytes;
};

struct Combo {
  DataType dtype;
  ReduceOpKind op;
};

std::vector<Combo> valid_combos() {
  std::vector<Combo> v;
  for (DataType t : all_dtypes())
    for (int k = 0; k < kNumReduceOps; ++k)
      if (reduce_op_invalid_reason(t, make_op(static_cast<ReduceOpKind>(k))).empty())
        v.push_back({t, static_cast<ReduceOpKind>(k)});
  return v;
}

std::string combo_name(const ::testing::TestParamInfo<Combo>& info) {
  return std::string(dtype_name(info.param.dtype)) + "_" + reduce_op_name(info.param.op);
}

// float arithmetic the way one 16-bit kernel step does it.
float float_step(ReduceOpKind k, float a, float b) {
  switch (k) {
    case ReduceOpKind::Product:
      return a * b;
    case ReduceOpKind::Min:
      return std::isnan(a) ? a : std::isnan(b) ? b : (b < a ? b : a);
    case ReduceOpKind::Max:
      return std::isnan(a) ? a : std::isnan(b) ? b : (b > a ? b : a);
    default:
      return a + b;
  }
}

class ReduceKernel : public ::testing::TestWithParam<Combo> {};

// One step, a (op) b, in every aliasing arrangement of reduce_pair and
// reduce_inplace, checked element by element against the reference.
TEST_P(ReduceKernel, PairAndInplaceMatchReference) {
  const auto [dtype, kind] = GetParam();
  const ReduceOp op = step_op(kind);
  const bool product = kind == ReduceOpKind::Product;
  std::uint64_t seed = 1000 * static_cast<int>(dtype) + 10 * static_cast<int>(kind);
  for (ReduceSimdLevel level : simd_levels()) {
    SimdScope scope(level);
    for (std::size_t count : kCounts) {
      for (bool misaligned : {false, true}) {
        const std::string where =
            level_name(level) + " count=" + std::to_string(count) + (misaligned ? " misaligned" : "");
        Buf a(count, dtype, misaligned), b(count, dtype, misaligned), out(count, dtype, misaligned);
        Buf expected(count, dtype, false), expected_aa(count, dtype, false);
        fill_random(a.data(), count, dtype, ++seed, product);
        fill_random(b.data(), count, dtype, ++seed, product);
        const std::vector<char> a0(static_cast<char*>(a.data()), static_cast<char*>(a.data()) + count * a.elem);
        const std::vector<char> b0(static_cast<char*>(b.data()), static_cast<char*>(b.data()) + count * b.elem);
        reference_reduce(expected.data(), {a.data(), b.data()}, count, dtype, op);
        reference_reduce(expected_aa.data(), {a.data(), a.data()}, count, dtype, op);
        std::vector<double> mag(count), mag_aa(count);
        reference_magnitude(mag.data(), {a.data(), b.data()}, count, dtype, op);
        reference_magnitude(mag_aa.data(), {a.data(), a.data()}, count, dtype, op);
        auto check = [&](const char* mode, void* got, Buf& want, const std::vector<double>& m) {
          std::string why;
          EXPECT_TRUE(compare(got, want.data(), count, dtype, op, 2, &why, m.data()))
              << mode << " " << where << ": " << why;
        };
        auto restore = [&] {
          if (count == 0) return;
          std::memcpy(a.data(), a0.data(), a0.size());
          std::memcpy(b.data(), b0.data(), b0.size());
        };

        reduce_pair(out.data(), a.data(), b.data(), count, dtype, kind);
        check("pair", out.data(), expected, mag);
        if (dtype_size(dtype) == 2 && dtype_is_floating(dtype)) {
          // 16-bit floats: exactly one float32 operation, rounded once.
          const bool half = dtype == DataType::Float16;
          for (std::size_t i = 0; i < count; ++i) {
            std::uint16_t x, y, z;
            std::memcpy(&x, static_cast<char*>(a.data()) + 2 * i, 2);
            std::memcpy(&y, static_cast<char*>(b.data()) + 2 * i, 2);
            std::memcpy(&z, static_cast<char*>(out.data()) + 2 * i, 2);
            auto val = [&](std::uint16_t h) {
              return static_cast<float>(half ? testing::half_bits_to_value(h) : testing::bfloat16_bits_to_value(h));
            };
            const float r = float_step(kind, val(x), val(y));
            const std::uint16_t want = half ? testing::value_to_half_bits(r) : testing::value_to_bfloat16_bits(r);
            ASSERT_EQ(z, want) << where << " element " << i << " of 0x" << std::hex << x << ", 0x" << y;
          }
        }
        reduce_pair(a.data(), a.data(), b.data(), count, dtype, kind);
        check("pair out=a", a.data(), expected, mag);
        restore();
        reduce_pair(b.data(), a.data(), b.data(), count, dtype, kind);
        check("pair out=b", b.data(), expected, mag);
        restore();
        reduce_pair(a.data(), a.data(), a.data(), count, dtype, kind);
        check("pair out=a=b", a.data(), expected_aa, mag_aa);
        restore();
        reduce_inplace(a.data(), b.data(), count, dtype, kind);
        check("inplace", a.data(), expected, mag);
        restore();
        reduce_inplace(a.data(), a.data(), count, dtype, kind);
        check("inplace dst=src", a.data(), expected_aa, mag_aa);
        // Inputs of reduce_pair are left alone.
        restore();
        reduce_pair(out.data(), a.data(), b.data(), count, dtype, kind);
        EXPECT_EQ(0, count == 0 ? 0 : std::memcmp(b.data(), b0.data(), b0.size())) << where;
        EXPECT_EQ(0, count == 0 ? 0 : std::memcmp(a.data(), a0.data(), a0.size())) << where;
      }
    }
  }
}

// The whole collective on one process: 8 "ranks" folded with reduce_inplace,
// with scale first for PremulSum and divide_by last for Avg, against
// reference_reduce with the real op; with and without magnitudes.
TEST_P(ReduceKernel, EightRanksMatchReference) {
  const auto [dtype, kind] = GetParam();
  const ReduceOp op = make_op(kind);
  constexpr int kRanks = 8;
  for (ReduceSimdLevel level : simd_levels()) {
    SimdScope scope(level);
    for (std::size_t count : {std::size_t{1000}, std::size_t{4099}}) {
      std::vector<std::vector<unsigned char>> in(kRanks, std::vector<unsigned char>(count * dtype_size(dtype)));
      std::vector<const void*> ptrs;
      for (int r = 0; r < kRanks; ++r) {
        fill_random(in[r].data(), count, dtype, 77 + r, kind == ReduceOpKind::Product);
        ptrs.push_back(in[r].data());
      }
      std::vector<unsigned char> acc(in[0]), tmp(acc.size()), want(acc.size());
      if (kind == ReduceOpKind::PremulSum) detail::scale(acc.data(), acc.data(), count, dtype, op.scalar);
      for (int r = 1; r < kRanks; ++r) {
        const void* src = in[r].data();
        if (kind == ReduceOpKind::PremulSum) {
          detail::scale(tmp.data(), src, count, dtype, op.scalar);
          src = tmp.data();
        }
        reduce_inplace(acc.data(), src, count, dtype, kind);
      }
      if (kind == ReduceOpKind::Avg) detail::divide_by(acc.data(), count, dtype, kRanks);
      reference_reduce(want.data(), ptrs, count, dtype, op);
      std::vector<double> mag(count);
      reference_magnitude(mag.data(), ptrs, count, dtype, op);
      std::string why;
      EXPECT_TRUE(compare(acc.data(), want.data(), count, dtype, op, kRanks, &why, mag.data()))
          << level_name(level) << " count=" << count << ": " << why;
      EXPECT_TRUE(compare(acc.data(), want.data(), count, dtype, op, kRanks, &why))
          << "estimated magnitudes, " << level_name(level) << " count=" << count << ": " << why;
    }
  }
}

// reduce_many over 3 and 5 inputs: float16 and bfloat16 accumulate in
// float32 and round once (bit for bit against that model), also with the
// output aliasing a later input; every other type gives the bits of
// reduce_pair then reduce_inplace; on every SIMD level.
TEST_P(ReduceKernel, ManyInputsRoundOnce) {
  const auto [dtype, kind] = GetParam();
  const ReduceOpKind k = step_op(kind).kind;
  const bool wide = dtype == DataType::Float16 || dtype == DataType::BFloat16;
  constexpr std::size_t kCount = 4099;
  const std::size_t es = dtype_size(dtype);
  for (ReduceSimdLevel level : simd_levels()) {
    SimdScope scope(level);
    for (int n : {3, 5}) {
      std::vector<std::vector<unsigned char>> in(static_cast<std::size_t>(n), std::vector<unsigned char>(kCount * es));
      std::vector<const void*> ptrs;
      for (int r = 0; r < n; ++r) {
        fill_random(in[r].data(), kCount, dtype, 300 + r, kind == ReduceOpKind::Product);
        ptrs.push_back(in[r].data());
      }
      std::vector<unsigned char> got(kCount * es), want(kCount * es);
      detail::reduce_many(got.data(), ptrs.data(), n, kCount, dtype, k);
      if (wide) {
        auto widen = [&](const std::vector<unsigned char>& v, std::size_t i) {
          std::uint16_t b;
          std::memcpy(&b, v.data() + i * 2, 2);
          return dtype == DataType::Float16 ? detail::half_to_float(b) : detail::bfloat16_to_float(b);
        };
        for (std::size_t i = 0; i < kCount; ++i) {
          float acc = widen(in[0], i);
          for (int r = 1; r < n; ++r) acc = float_step(k, acc, widen(in[r], i));
          const std::uint16_t b =
              dtype == DataType::Float16 ? detail::float_to_half(acc) : detail::float_to_bfloat16(acc);
          std::memcpy(want.data() + i * 2, &b, 2);
        }
      } else {
        reduce_pair(want.data(), ptrs[0], ptrs[1], kCount, dtype, k);
        for (int r = 2; r < n; ++r) reduce_inplace(want.data(), ptrs[r], kCount, dtype, k);
      }
      EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size()), 0) << level_name(level) << " n=" << n;
      if (wide) {
        // The output in place of the last input.
        detail::reduce_many(in[n - 1].data(), ptrs.data(), n, kCount, dtype, k);
        EXPECT_EQ(std::memcmp(in[n - 1].data(), want.data(), want.size()), 0) << level_name(level) << " n=" << n;
      }
    }
  }
}

// Every SIMD level (AVX2/F16C, AVX-512) gives the same bits as the portable
// kernels: counts around every vector width and unroll (64-byte vectors hold
// 4 to 64 elements; the 16-bit AVX-512 loop does 32 per step, the float16
// AVX2 one chunks of 512), aligned and misaligned, in each aliasing form.
TEST_P(ReduceKernel, SimdMatchesBaselineBitForBit) {
  const auto [dtype, kind] = GetParam();
  if (simd_levels().size() < 2) GTEST_SKIP() << "no SIMD level on this CPU";
  const std::size_t counts[] = {1, 3, 7, 15, 16, 17, 31, 33, 47, 63, 65, 127, 129, 255, 511, 513, 1025, 4099};
  const std::size_t elem = dtype_size(dtype);
  std::uint64_t seed = 500;
  for (std::size_t count : counts) {
    for (bool misaligned : {false, true}) {
      Buf a(count, dtype, misaligned), b(count, dtype, misaligned);
      fill_random(a.data(), count, dtype, ++seed, kind == ReduceOpKind::Product);
      fill_random(b.data(), count, dtype, ++seed, kind == ReduceOpKind::Product);
      const std::size_t bytes = count * elem;
      // mode 0: out separate; 1: out == a; 2: out == b; 3: inplace dst=a, src=a.
      auto run = [&](ReduceSimdLevel level, int mode) {
        SimdScope scope(level);
        Buf x(count, dtype, misaligned), y(count, dtype, misaligned), out(count, dtype, misaligned);
        std::memcpy(x.data(), a.data(), bytes);
        std::memcpy(y.data(), b.data(), bytes);
        void* result = out.data();
        switch (mode) {
          case 0:
            reduce_pair(out.data(), x.data(), y.data(), count, dtype, kind);
            break;
          case 1:
            reduce_pair(x.data(), x.data(), y.data(), count, dtype, kind);
            result = x.data();
            break;
          case 2:
            reduce_pair(y.data(), x.data(), y.data(), count, dtype, kind);
            result = y.data();
            break;
          default:
            reduce_inplace(x.data(), x.data(), count, dtype, kind);
            result = x.data();
            break;
        }
        const auto* r = static_cast<const unsigned char*>(result);
        return std::vector<unsigned char>(r, r + bytes);
      };
      for (int mode = 0; mode < 4; ++mode) {
        const std::vector<unsigned char> base = run(ReduceSimdLevel::Baseline, mode);
        for (ReduceSimdLevel level : simd_levels_above_baseline()) {
          const std::vector<unsigned char> got = run(level, mode);
          std::size_t first = 0;
          while (first < bytes && got[first] == base[first]) ++first;
          EXPECT_EQ(bytes, first) << level_name(level) << " count=" << count << (misaligned ? " misaligned" : "")
                                  << " mode=" << mode << ": first differing element " << first / elem;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllValid, ReduceKernel, ::testing::ValuesIn(valid_combos()), combo_name);

// The level hook: each supported level can be forced, higher caps fall back
// to the best supported level, and the old bool switch still works.
TEST(ReduceSimdLevels, EachSupportedLevelCanBeForced) {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  EXPECT_EQ(avx2, detail::reduce_simd_level_supported(ReduceSimdLevel::Avx2));
  EXPECT_EQ(avx512, detail::reduce_simd_level_supported(ReduceSimdLevel::Avx512));
#endif
  EXPECT_TRUE(detail::reduce_simd_level_supported(ReduceSimdLevel::Baseline));
  const ReduceSimdLevel best = simd_levels().back();
  for (ReduceSimdLevel l : simd_levels()) {
    detail::set_reduce_simd_max_level(l);
    EXPECT_EQ(l, detail::reduce_simd_level());
    EXPECT_EQ(l != ReduceSimdLevel::Baseline, detail::reduce_simd_active());
  }
  detail::set_reduce_simd_max_level(ReduceSimdLevel::Avx512);
  EXPECT_EQ(best, detail::reduce_simd_level());
  detail::set_reduce_simd_allowed(false);
  EXPECT_EQ(ReduceSimdLevel::Baseline, detail::reduce_simd_level());
  EXPECT_FALSE(detail::reduce_simd_active());
  detail::set_reduce_simd_allowed(true);
  EXPECT_EQ(best, detail::reduce_simd_level());
  EXPECT_STREQ("avx512", detail::reduce_simd_level_name(ReduceSimdLevel::Avx512));
}

TEST(ElemSize, MatchesDtypeSizeForEveryType) {
  for (int i = 0; i < kNumDataTypes; ++i) {
    const auto t = static_cast<DataType>(i);
    EXPECT_EQ(detail::elem_size(t), dtype_size(t)) << dtype_name(t);
  }
}

// Every length around the 16-byte alignment and 64-byte loop steps, from
// every source and destination misalignment; the bytes around the
// destination stay untouched.
TEST(StreamCopy, EqualsMemcpyAtEveryLengthAndAlignment) {
  std::vector<unsigned char> src(600), dst(700), want(700);
  std::uint32_t x = 12345;
  for (auto& b : src) b = static_cast<unsigned char>((x = x * 1664525u + 1013904223u) >> 24);
  for (std::size_t so = 0; so < 16; so += 3)
    for (std::size_t d = 0; d < 16; ++d)
      for (std::size_t len = 0; len <= 300; len += (len < 140 ? 1 : 37)) {
        for (std::size_t i = 0; i < dst.size(); ++i) dst[i] = want[i] = static_cast<unsigned char>(i * 7 + 1);
        std::memcpy(want.data() + d, src.data() + so, len);
        detail::stream_copy(dst.data() + d, src.data() + so, len);
        ASSERT_EQ(dst, want) << "source offset " << so << ", destination offset " << d << ", " << len << " bytes";
      }
}

TEST(ReduceKernelErrors, InvalidPairThrows) {
  float x = 1;
  EXPECT_THROW(reduce_inplace(&x, &x, 1, DataType::Float32, ReduceOpKind::BAnd), Error);
  std::complex<float> c{1, 2};
  EXPECT_THROW(reduce_inplace(&c, &c, 1, DataType::Complex64, ReduceOpKind::Max), Error);
  std::uint8_t t = 1;
  EXPECT_THROW(detail::divide_by(&t, 1, DataType::Bool, 2), Error);
  EXPECT_THROW(detail::scale(&t, &t, 1, DataType::Bool, 2.0), Error);
  EXPECT_THROW(detail::divide_by(&x, 1, DataType::Float32, 0), Error);
  std::int32_t i = 3;
  EXPECT_THROW(detail::scale(&i, &i, 1, DataType::Int32, 0.5), Error);
  EXPECT_THROW(detail::scale(&i, &i, 1, DataType::Int32, std::nan("")), Error);
}

// ---- NaN, inf and signed zero through the kernels ------------------------

std::vector<std::uint16_t> all_patterns() {
  std::vector<std::uint16_t> v(65536);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::uint16_t>(i);
  return v;
}

bool is_nan16(std::uint16_t h, DataType t) {
  return t == DataType::Float16 ? (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0
                                : (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0;
}

// x + (-0) == x for every x, so a Sum with -0 runs every bit pattern through
// the kernels' load and store conversions (F16C or portable).
TEST(ReduceKernelSpecial, SixteenBitPatternsSurviveSumWithNegativeZero) {
  const std::vector<std::uint16_t> in = all_patterns();
  for (DataType t : {DataType::Float16, DataType::BFloat16}) {
    const std::uint16_t neg_zero = 0x8000;
    const std::vector<std::uint16_t> zeros(in.size(), neg_zero);
    for (ReduceSimdLevel level : simd_levels()) {
      SimdScope scope(level);
      std::vector<std::uint16_t> out(in.size());
      reduce_pair(out.data(), in.data(), zeros.data(), in.size(), t, ReduceOpKind::Sum);
      for (std::size_t i = 0; i < in.size(); ++i) {
        if (is_nan16(in[i], t))
          ASSERT_TRUE(is_nan16(out[i], t)) << dtype_name(t) << " 0x" << std::hex << in[i] << " -> 0x" << out[i];
        else
          ASSERT_EQ(in[i], out[i]) << dtype_name(t) << " " << level_name(level);
      }
    }
  }
}

// Every SIMD level gives baseline's bits on special 16-bit operands too:
// all 65536 patterns against several permutations of them (NaNs with every
// payload, infinities, subnormals, overflow and rounding ties), for each
// arithmetic op, at an odd count and misaligned start.
TEST(ReduceKernelSpecial, SixteenBitPatternsBitForBitAcrossLevels) {
  if (simd_levels().size() < 2) GTEST_SKIP() << "no SIMD level on this CPU";
  const std::vector<std::uint16_t> pat = all_patterns();
  const std::size_t n = pat.size() - 1;  // odd, starts at element 1
  for (DataType t : {DataType::Float16, DataType::BFloat16}) {
    for (std::uint32_t mult : {1u, 7u, 40503u, 65535u}) {
      std::vector<std::uint16_t> other(pat.size());
      for (std::size_t i = 0; i < other.size(); ++i) other[i] = static_cast<std::uint16_t>(i * mult + 12345u);
      for (ReduceOpKind k : {ReduceOpKind::Sum, ReduceOpKind::Product, ReduceOpKind::Min, ReduceOpKind::Max}) {
        std::vector<std::uint16_t> base(pat.size());
        {
          SimdScope scope(ReduceSimdLevel::Baseline);
          reduce_pair(base.data() + 1, pat.data() + 1, other.data() + 1, n, t, k);
        }
        for (ReduceSimdLevel level : simd_levels_above_baseline()) {
          SimdScope scope(level);
          std::vector<std::uint16_t> got(pat.size());
          reduce_pair(got.data() + 1, pat.data() + 1, other.data() + 1, n, t, k);
          std::size_t bad = 0;
          for (std::size_t i = 1; i <= n; ++i) {
            if (base[i] == got[i]) continue;
            if (++bad <= 3)
              ADD_FAILURE() << dtype_name(t) << " " << reduce_op_name(k) << " " << level_name(level) << std::hex
                            << ": 0x" << pat[i] << " op 0x" << other[i] << " = 0x" << got[i] << ", baseline 0x"
                            << base[i];
          }
          EXPECT_EQ(0u, bad) << dtype_name(t) << " " << reduce_op_name(k) << " " << level_name(level)
                             << " mult=" << mult;
        }
      }
    }
  }
}

// The same for float32/float64: every pair of special values (signed zeros,
// infinities, NaNs of both signs with different payloads, subnormals,
// extremes), then random bit patterns.
template <class F, class U>
void check_float_specials_across_levels(DataType t) {
  using L = std::numeric_limits<F>;
  const U quiet = std::bit_cast<U>(L::quiet_NaN());
  const F specials[] = {F(0),
                        -F(0),
                        F(1),
                        F(-1.5),
                        L::infinity(),
                        -L::infinity(),
                        L::quiet_NaN(),
                        std::bit_cast<F>(static_cast<U>(quiet | 5)),
                        std::bit_cast<F>(static_cast<U>(~U(0))),
                        L::signaling_NaN(),
                        L::denorm_min(),
                        -L::denorm_min(),
                        L::min(),
                        L::max(),
                        -L::max(),
                        L::epsilon()};
  constexpr std::size_t ns = sizeof(specials) / sizeof(specials[0]);
  const std::size_t n = ns * ns + 1001;
  std::vector<F> a(n + 1), b(n + 1);
  std::uint64_t state = 99;
  for (std::size_t i = 0; i < n; ++i) {
    if (i < ns * ns) {
      a[i + 1] = specials[i % ns];
      b[i + 1] = specials[i / ns];
    } else {
      a[i + 1] = std::bit_cast<F>(static_cast<U>(testing::ref_detail::splitmix64(state)));
      b[i + 1] = std::bit_cast<F>(static_cast<U>(testing::ref_detail::splitmix64(state)));
    }
  }
  for (ReduceOpKind k : {ReduceOpKind::Sum, ReduceOpKind::Product, ReduceOpKind::Min, ReduceOpKind::Max}) {
    std::vector<U> base(n + 1);
    {
      SimdScope scope(ReduceSimdLevel::Baseline);
      reduce_pair(base.data() + 1, a.data() + 1, b.data() + 1, n, t, k);
    }
    for (ReduceSimdLevel level : simd_levels_above_baseline()) {
      SimdScope scope(level);
      std::vector<U> got(n + 1);
      reduce_pair(got.data() + 1, a.data() + 1, b.data() + 1, n, t, k);
      for (std::size_t i = 1; i <= n; ++i)
        ASSERT_EQ(base[i], got[i]) << dtype_name(t) << " " << reduce_op_name(k) << " " << level_name(level)
                                   << " element " << i - 1 << std::hex << ": 0x" << std::bit_cast<U>(a[i]) << " op 0x"
                                   << std::bit_cast<U>(b[i]);
    }
  }
}

TEST(ReduceKernelSpecial, FloatSpecialValuesBitForBitAcrossLevels) {
  if (simd_levels().size() < 2) GTEST_SKIP() << "no SIMD level on this CPU";
  check_float_specials_across_levels<float, std::uint32_t>(DataType::Float32);
  check_float_specials_across_levels<double, std::uint64_t>(DataType::Float64);
}

TEST(ReduceKernelSpecial, MinMaxPropagateNaNFromEitherSide) {
  for (ReduceSimdLevel level : simd_levels()) {
    SimdScope scope(level);
    for (ReduceOpKind k : {ReduceOpKind::Min, ReduceOpKind::Max}) {
      const std::size_t n = 37;
      std::vector<float> a(n, 1.0f), b(n, 2.0f), out(n);
      std::vector<double> da(n, 1.0), db(n, 2.0), dout(n);
      std::vector<std::uint16_t> ha(n, 0x3c00), hb(n, 0x4000), hout(n);  // 1.0 and 2.0 in float16
      std::vector<std::uint16_t> ba(n, 0x3f80), bb(n, 0x4000), bout(n);  // 1.0 and 2.0 in bfloat16
      for (std::size_t i = 0; i < n; i += 3) {                           // NaN first
        a[i] = da[i] = NAN;
        ha[i] = 0x7e00;
        ba[i] = 0x7fc0;
      }
      for (std::size_t i = 1; i < n; i += 3) {  // NaN second (negative, other payload)
        b[i] = db[i] = NAN;
        hb[i] = 0xfe01;
        bb[i] = 0xffc1;
      }
      reduce_pair(out.data(), a.data(), b.data(), n, DataType::Float32, k);
      reduce_pair(dout.data(), da.data(), db.data(), n, DataType::Float64, k);
      reduce_pair(hout.data(), ha.data(), hb.data(), n, DataType::Float16, k);
      reduce_pair(bout.data(), ba.data(), bb.data(), n, DataType::BFloat16, k);
      for (std::size_t i = 0; i < n; ++i) {
        const bool nan = i % 3 != 2;
        const float want = k == ReduceOpKind::Min ? 1.0f : 2.0f;
        EXPECT_EQ(nan, std::isnan(out[i])) << i;
        EXPECT_EQ(nan, std::isnan(dout[i])) << i;
        EXPECT_EQ(nan, is_nan16(hout[i], DataType::Float16)) << i;
        EXPECT_EQ(nan, is_nan16(bout[i], DataType::BFloat16)) << i;
        if (!nan) {
          EXPECT_EQ(want, out[i]);
          EXPECT_EQ(want, dout[i]);
          EXPECT_EQ(want, detail::half_to_float(hout[i]));
          EXPECT_EQ(want, detail::bfloat16_to_float(bout[i]));
        }
      }
    }
  }
}

TEST(ReduceKernelSpecial, SixteenBitSumOverflowsToInfinity) {
  for (ReduceSimdLevel level : simd_levels()) {
    SimdScope scope(level);
    std::vector<std::uint16_t> h(9, 0x7bff), out(9);  // 65504 + 65504 -> inf
    reduce_pair(out.data(), h.data(), h.data(), h.size(), DataType::Float16, ReduceOpKind::Sum);
    for (std::uint16_t v : out) EXPECT_EQ(0x7c00, v);
    std::vector<std::uint16_t> b(9, 0x7f7f);  // largest bfloat16
    reduce_pair(out.data(), b.data(), b.data(), b.size(), DataType::BFloat16, ReduceOpKind::Sum);
    for (std::uint16_t v : out) EXPECT_EQ(0x7f80, v);
  }
}

TEST(ReduceKernelSpecial, WrapsSignedIntegers) {
  std::int8_t a[3] = {127, -128, -128}, b[3] = {1, -1, -128};
  reduce_inplace(a, b, 3, DataType::Int8, ReduceOpKind::Sum);
  EXPECT_EQ(-128, a[0]);
  EXPECT_EQ(127, a[1]);
  EXPECT_EQ(0, a[2]);
  std::int64_t c[2] = {std::numeric_limits<std::int64_t>::max(), std::numeric_limits<std::int64_t>::min()};
  std::int64_t d[2] = {2, -1};
  reduce_inplace(c, d, 2, DataType::Int64, ReduceOpKind::Product);
  EXPECT_EQ(-2, c[0]);
  EXPECT_EQ(std::numeric_limits<std::int64_t>::min(), c[1]);
  // 16-bit products overflow int if done after the usual promotion.
  std::int16_t e[2] = {32767, -32768}, f[2] = {32767, -32768};
  reduce_inplace(e, f, 2, DataType::Int16, ReduceOpKind::Product);
  EXPECT_EQ(1, e[0]);
  EXPECT_EQ(0, e[1]);
  std::uint32_t g[1] = {0xffffffffu}, h[1] = {0xffffffffu};
  reduce_inplace(g, h, 1, DataType::UInt32, ReduceOpKind::Product);
  EXPECT_EQ(1u, g[0]);
}

TEST(ReduceKernelSpecial, BoolTreatsAnyNonZeroByteAsTrue) {
  std::uint8_t a[4] = {0, 2, 0, 7}, b[4] = {0, 0, 9, 1}, out[4];
  reduce_pair(out, a, b, 4, DataType::Bool, ReduceOpKind::BOr);
  EXPECT_EQ(0, std::memcmp(out, "\0\1\1\1", 4));
  reduce_pair(out, a, b, 4, DataType::Bool, ReduceOpKind::BAnd);
  EXPECT_EQ(0, std::memcmp(out, "\0\0\0\1", 4));
  reduce_pair(out, a, b, 4, DataType::Bool, ReduceOpKind::BXor);
  EXPECT_EQ(0, std::memcmp(out, "\0\1\1\0", 4));
}

// ---- float16 / bfloat16 conversions ------------------------------------------

float bits_to_float(std::uint32_t u) { return std::bit_cast<float>(u); }

TEST(HalfConversion, EveryPatternMatchesReferenceAndRoundTrips) {
  for (std::uint32_t i = 0; i < 65536; ++i) {
    const auto h = static_cast<std::uint16_t>(i);
    const float f = detail::half_to_float(h);
    const long double want = testing::half_bits_to_value(h);
    const std::uint16_t back = detail::float_to_half(f);
    ASSERT_EQ(std::signbit(want), std::signbit(f)) << std::hex << h;
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      ASSERT_TRUE(is_nan16(back, DataType::Float16)) << std::hex << h << " -> " << back;
      ASSERT_EQ(h | 0x200, back) << "payload kept, made quiet: " << std::hex << h;
    } else {
      ASSERT_EQ(want, f) << std::hex << h;
      ASSERT_EQ(h, back) << std::hex << h;
    }
  }
}

TEST(HalfConversion, RoundsToNearestEvenWithOverflowAndSubnormals) {
  const float ulp1 = 0x1p-10f;  // spacing of halves in [1, 2)
  const struct {
    float f;
    std::uint16_t want;
  } cases[] = {
      {1.0f + ulp1 / 2, 0x3c00},                        // tie: down to even
      {1.0f + 3 * ulp1 / 2, 0x3c02},                    // tie: up to even
      {std::nextafter(1.0f + ulp1 / 2, 2.0f), 0x3c01},  // just above the tie
      {std::nextafter(1.0f + ulp1 / 2, 0.0f), 0x3c00},  // just below
      {-(1.0f + 3 * ulp1 / 2), 0xbc02},
      {65504.0f, 0x7bff},                        // largest half
      {std::nextafter(65520.0f, 0.0f), 0x7bff},  // below the overflow midpoint
      {65520.0f, 0x7c00},                        // the midpoint rounds (to even) to inf
      {1e6f, 0x7c00},
      {-1e6f, 0xfc00},
      {std::numeric_limits<float>::max(), 0x7c00},
      {INFINITY, 0x7c00},
      {-INFINITY, 0xfc00},
      {0.0f, 0x0000},
      {-0.0f, 0x8000},
      {0x1p-24f, 0x0001},  // smallest subnormal
      {0x1p-25f, 0x0000},  // tie between 0 and it: even is 0
      {std::nextafter(0x1p-25f, 1.0f), 0x0001},
      {3 * 0x1p-25f, 0x0002},         // 1.5 units -> 2
      {5 * 0x1p-25f, 0x0002},         // 2.5 units -> 2
      {1023 * 0x1p-24f, 0x03ff},      // largest subnormal
      {0x1p-14f - 0x1p-25f, 0x0400},  // 1023.5 units -> smallest normal
      {0x1p-14f, 0x0400},
      {-1e-10f, 0x8000},  // underflow keeps the sign
      {std::numeric_limits<float>::denorm_min(), 0x0000},
  };
  for (const auto& c : cases) EXPECT_EQ(c.want, detail::float_to_half(c.f)) << c.f;
  EXPECT_EQ(0x1p-24f, detail::half_to_float(0x0001));
  EXPECT_EQ(-1023 * 0x1p-24f, detail::half_to_float(0x83ff));
  EXPECT_TRUE(std::isnan(detail::half_to_float(detail::float_to_half(NAN))));
  EXPECT_TRUE(is_nan16(detail::float_to_half(bits_to_float(0x7f800001)), DataType::Float16));  // sNaN, payload only low
}

// Every tie and a dense sweep of the finite range, plus random patterns,
// against the arithmetic reference conversion.
TEST(HalfConversion, MatchesReferenceRounding) {
  auto check = [](std::uint32_t u) {
    const float f = bits_to_float(u);
    const std::uint16_t got = detail::float_to_half(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(is_nan16(got, DataType::Float16)) << std::hex << u;
    } else {
      ASSERT_EQ(testing::value_to_half_bits(f), got) << std::hex << "float bits 0x" << u;
    }
  };
  for (std::uint32_t u = 0x33000000; u <= 0x47800000; u += 0x2000) {  // |f| in [2^-25, 2^16]
    check(u | 0x1000);                                                // halfway between normal halves
    check(u | 0x0fff);
    check(u | 0x1001);
    check((u | 0x1000) ^ 0x80000000u);
  }
  for (std::uint32_t u = 0x33000000; u <= 0x47800000; u += 97) check(u);
  std::uint64_t state = 42;
  for (int i = 0; i < 1000000; ++i) check(static_cast<std::uint32_t>(testing::ref_detail::splitmix64(state)));
}

TEST(BFloat16Conversion, EveryPatternMatchesReferenceAndRoundTrips) {
  for (std::uint32_t i = 0; i < 65536; ++i) {
    const auto b = static_cast<std::uint16_t>(i);
    const float f = detail::bfloat16_to_float(b);
    const long double want = testing::bfloat16_bits_to_value(b);
    const std::uint16_t back = detail::float_to_bfloat16(f);
    ASSERT_EQ(std::signbit(want), std::signbit(f)) << std::hex << b;
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << b;
      ASSERT_EQ(b | 0x40, back) << "payload kept, made quiet: " << std::hex << b;
    } else {
      ASSERT_EQ(want, f) << std::hex << b;
      ASSERT_EQ(b, back) << std::hex << b;
    }
  }
}

TEST(BFloat16Conversion, RoundsToNearestEvenWithOverflowAndSubnormals) {
  const struct {
    std::uint32_t u;
    std::uint16_t want;
  } cases[] = {
      {0x3f808000, 0x3f80},  // 1 + 2^-8: tie, down to even
      {0x3f818000, 0x3f82},  // tie, up to even
      {0x3f808001, 0x3f81}, {0x3f807fff, 0x3f80}, {0xbf818000, 0xbf82},
      {0x7f7f7fff, 0x7f7f},                                              // just below the overflow midpoint
      {0x7f7f8000, 0x7f80},                                              // the midpoint (odd) rounds up to inf
      {0x7f7fffff, 0x7f80},                                              // FLT_MAX -> inf
      {0xff7fffff, 0xff80}, {0x7f800000, 0x7f80}, {0x00008000, 0x0000},  // float subnormal tie -> even 0
      {0x00018000, 0x0002},                                              // tie -> even 2
      {0x00010001, 0x0001}, {0x80008001, 0x8001}, {0x80000000, 0x8000},
  };
  for (const auto& c : cases) EXPECT_EQ(c.want, detail::float_to_bfloat16(bits_to_float(c.u))) << std::hex << c.u;
  EXPECT_TRUE(is_nan16(detail::float_to_bfloat16(bits_to_float(0x7f800001)), DataType::BFloat16));
  EXPECT_TRUE(is_nan16(detail::float_to_bfloat16(bits_to_float(0xffffffff)), DataType::BFloat16));
}

TEST(BFloat16Conversion, MatchesReferenceRounding) {
  auto check = [](std::uint32_t u) {
    const float f = bits_to_float(u);
    const std::uint16_t got = detail::float_to_bfloat16(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(is_nan16(got, DataType::BFloat16)) << std::hex << u;
    } else {
      ASSERT_EQ(testing::value_to_bfloat16_bits(f), got) << std::hex << "float bits 0x" << u;
    }
  };
  for (std::uint32_t hi = 0; hi < 65536; ++hi) {
    check(hi << 16 | 0x8000);  // every tie
    check(hi << 16 | 0x7fff);
    check(hi << 16 | 0x8001);
  }
  std::uint64_t state = 7;
  for (int i = 0; i < 1000000; ++i) check(static_cast<std::uint32_t>(testing::ref_detail::splitmix64(state)));
}

// ---- divide_by and scale -------------------------------------------------------

// Element-wise expected value of divide_by / scale, via the reference's
// independent element access (one rounding from long double).
void expect_map(DataType t, const void* in, const void* got, std::size_t count, const std::string& what,
                long double (*f)(long double, long double), long double arg) {
  using namespace testing::ref_detail;
  std::vector<unsigned char> want(count * dtype_size(t));
  const int comps = is_cplx(t) ? 2 : 1;
  for (std::size_t i = 0; i < count; ++i)
    for (int c = 0; c < comps; ++c) store_real(want.data(), i, t, f(load_real(in, i, t, c), arg), c);
  std::string why;
  // Min: compare exactly (NaN == NaN, and -0 == +0).
  EXPECT_TRUE(compare(got, want.data(), count, t, ReduceOpKind::Min, 1, &why)) << what << ": " << why;
}

TEST(ReduceDivideBy, EveryNumericType) {
  using namespace testing::ref_detail;
  for (DataType t : all_dtypes()) {
    if (t == DataType::Bool) continue;
    for (int n : {1, 2, 3, 7, 8}) {
      for (std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{33}, std::size_t{4099}}) {
        const std::string what =
            std::string(dtype_name(t)) + " / " + std::to_string(n) + " count=" + std::to_string(count);
        std::vector<unsigned char> in(count * dtype_size(t));
        fill_random(in.data(), count, t, 900 + n);
        std::vector<unsigned char> buf(in);
        detail::divide_by(buf.data(), count, t, n);
        if (dtype_is_integer(t)) {
          std::vector<unsigned char> want(in.size());
          for (std::size_t i = 0; i < count; ++i) {
            const std::uint64_t x = load_int(in.data(), i, t);
            store_int(want.data(), i, t,
                      is_signed_int(t) ? static_cast<std::uint64_t>(static_cast<std::int64_t>(x) / n) : x / n);
          }
          ASSERT_EQ(0, std::memcmp(want.data(), buf.data(), buf.size())) << what;
        } else {
          expect_map(
              t, in.data(), buf.data(), count, what, [](long double x, long double d) { return x / d; }, n);
        }
      }
    }
  }
  std::int8_t v[4] = {-128, -7, 7, 127};
  detail::divide_by(v, 4, DataType::Int8, 3);  // truncation toward zero
  EXPECT_EQ(-42, v[0]);
  EXPECT_EQ(-2, v[1]);
  EXPECT_EQ(2, v[2]);
  EXPECT_EQ(42, v[3]);
}

TEST(ReduceScale, IntegersMultiplyWrappingByIntegralScalars) {
  using namespace testing::ref_detail;
  const double scalars[] = {0, 1, -1, 3, -7, 0x1p40 + 3, -0x1p62, 1e30, 0x1p63, -0x1p63, 0x1p64, -(0x1p64 + 4096)};
  for (DataType t : all_dtypes()) {
    if (!dtype_is_integer(t)) continue;
    for (double s : scalars) {
      // An independent modulo-2^64 reduction of s: through a 128-bit integer.
      const auto m = static_cast<std::uint64_t>(static_cast<unsigned __int128>(static_cast<__int128>(s)));
      for (std::size_t count : {std::size_t{7}, std::size_t{4099}}) {
        std::vector<unsigned char> in(count * dtype_size(t)), out(in.size()), want(in.size());
        fill_random(in.data(), count, t, 31);
        for (std::size_t i = 0; i < count; ++i) store_int(want.data(), i, t, load_int(in.data(), i, t) * m);
        detail::scale(out.data(), in.data(), count, t, s);
        ASSERT_EQ(0, std::memcmp(want.data(), out.data(), out.size())) << dtype_name(t) << " * " << s;
        detail::scale(in.data(), in.data(), count, t, s);  // in place
        ASSERT_EQ(0, std::memcmp(want.data(), in.data(), in.size())) << dtype_name(t) << " * " << s << " in place";
      }
    }
  }
}

TEST(ReduceScale, FloatingAndComplexTypes) {
  for (DataType t : all_dtypes()) {
    if (dtype_is_integer(t) || t == DataType::Bool) continue;
    for (double s : {1.0, 0.5, 3.0, -2.5, 0.0}) {
      for (std::size_t count : {std::size_t{1}, std::size_t{33}, std::size_t{4099}}) {
        const std::string what =
            std::string(dtype_name(t)) + " * " + std::to_string(s) + " count=" + std::to_string(count);
        std::vector<unsigned char> in(count * dtype_size(t)), out(in.size());
        fill_random(in.data(), count, t, 55);
        detail::scale(out.data(), in.data(), count, t, s);
        expect_map(
            t, in.data(), out.data(), count, what, [](long double x, long double k) { return x * k; }, s);
        std::vector<unsigned char> inplace(in);
        detail::scale(inplace.data(), inplace.data(), count, t, s);
        EXPECT_EQ(0, std::memcmp(out.data(), inplace.data(), out.size())) << what << " in place";
      }
    }
  }
}

// ---- validity rules ---------------------------------------------------------

TEST(ReduceOpValidity, RejectsExactlyTheMeaninglessPairs) {
  for (DataType t : all_dtypes()) {
    const bool integer = t == DataType::Int8 || t == DataType::UInt8 || t == DataType::Int16 || t == DataType::Int32 ||
                         t == DataType::UInt32 || t == DataType::Int64 || t == DataType::UInt64;
    const bool boolean = t == DataType::Bool;
    const bool complex = t == DataType::Complex64 || t == DataType::Complex128;
    for (int k = 0; k < kNumReduceOps; ++k) {
      const auto kind = static_cast<ReduceOpKind>(k);
      const bool bitwise = kind == ReduceOpKind::BAnd || kind == ReduceOpKind::BOr || kind == ReduceOpKind::BXor;
      const bool ordered = kind == ReduceOpKind::Min || kind == ReduceOpKind::Max;
      const bool arithmetic = kind == ReduceOpKind::Avg || kind == ReduceOpKind::PremulSum;
      const bool invalid = (bitwise && !integer && !boolean) || (ordered && complex) || (arithmetic && boolean);
      EXPECT_EQ(invalid, !reduce_op_invalid_reason(t, make_op(kind)).empty())
          << dtype_name(t) << " " << reduce_op_name(kind) << ": " << reduce_op_invalid_reason(t, make_op(kind));
    }
    if (integer) {
      EXPECT_FALSE(reduce_op_invalid_reason(t, ReduceOp::premul_sum(0.5)).empty()) << dtype_name(t);
      EXPECT_TRUE(reduce_op_invalid_reason(t, ReduceOp::premul_sum(-4.0)).empty()) << dtype_name(t);
    } else if (!boolean) {
      EXPECT_TRUE(reduce_op_invalid_reason(t, ReduceOp::premul_sum(0.5)).empty()) << dtype_name(t);
    }
    if (!boolean) {
      EXPECT_FALSE(reduce_op_invalid_reason(t, ReduceOp::premul_sum(INFINITY)).empty()) << dtype_name(t);
      EXPECT_FALSE(reduce_op_invalid_reason(t, ReduceOp::premul_sum(NAN)).empty()) << dtype_name(t);
    }
  }
}

// ---- the reference itself ---------------------------------------------------

TEST(ReduceReference, KnownValuesAndMismatchReport) {
  const std::int32_t a[2] = {7, std::numeric_limits<std::int32_t>::max()}, b[2] = {-8, 1};
  std::int32_t out[2];
  reference_reduce(out, {a, b}, 2, DataType::Int32, ReduceOpKind::Avg);
  EXPECT_EQ(0, out[0]);                                             // -1 / 2 truncates to 0
  EXPECT_EQ(std::numeric_limits<std::int32_t>::min() / 2, out[1]);  // the sum wraps first
  const std::int8_t c[1] = {100}, d[1] = {1};
  std::int8_t e[1];
  reference_reduce(e, {c, d}, 1, DataType::Int8, ReduceOp::premul_sum(3));
  EXPECT_EQ(static_cast<std::int8_t>(303 - 256), e[0]);
  const float x[3] = {1, 2, 4}, y[3] = {2, 2, 2}, z[3] = {4, 8, 1};
  float f[3];
  reference_reduce(f, {x, y, z}, 3, DataType::Float32, ReduceOpKind::Avg);
  EXPECT_FLOAT_EQ(7.0f / 3, f[0]);
  std::string why;
  EXPECT_TRUE(compare(f, f, 3, DataType::Float32, ReduceOpKind::Avg, 3, &why));
  float g[3] = {f[0], f[1] + 0.01f, f[2]};
  EXPECT_FALSE(compare(g, f, 3, DataType::Float32, ReduceOpKind::Avg, 3, &why));
  EXPECT_NE(std::string::npos, why.find("element 1 of 3")) << why;
  g[1] = std::nextafter(f[1], 100.0f);  // one ulp is within tolerance
  EXPECT_TRUE(compare(g, f, 3, DataType::Float32, ReduceOpKind::Avg, 3, &why)) << why;
  EXPECT_FALSE(compare(g, f, 3, DataType::Float32, ReduceOpKind::Max, 3, &why));  // Max is exact
}

}  // namespace
}  // namespace tutti
