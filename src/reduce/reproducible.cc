// The exact sum of n contributions, rounded once (reduce/reproducible.h).
#include "reduce/reproducible.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "reduce/reduce.h"

namespace tutti::detail {
namespace {

using u128 = unsigned __int128;
using i128 = __int128;

int ceil_log2(int n) { return n <= 1 ? 0 : static_cast<int>(std::bit_width(static_cast<unsigned>(n - 1))); }

// A real type: its precision p (bits, the leading one included), the
// exponent of its least subnormal's unit, and its largest finite value.
struct RealType {
  DataType type;
  int precision;
  int lsb_min;
  int emax;  // every finite |x| < 2^(emax + 1)
  double max_finite;
};
RealType real_type(DataType t) {
  switch (t) {
    case DataType::Float16:
      return {t, 11, -24, 15, 65504.0};
    case DataType::BFloat16:
      return {t, 8, -133, 127, 0x1.fep127};
    case DataType::Float32:
      return {t, 24, -149, 127, static_cast<double>(std::numeric_limits<float>::max())};
    default:
      return {DataType::Float64, 53, -1074, 1023, std::numeric_limits<double>::max()};
  }
}

// Real i of x, exactly, as a double.
double load_real(const void* x, std::size_t i, DataType t) {
  const char* p = static_cast<const char*>(x);
  switch (t) {
    case DataType::Float16: {
      std::uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      return half_to_float(h);
    }
    case DataType::BFloat16: {
      std::uint16_t b;
      std::memcpy(&b, p + 2 * i, 2);
      return bfloat16_to_float(b);
    }
    case DataType::Float32: {
      float f;
      std::memcpy(&f, p + 4 * i, 4);
      return f;
    }
    default: {
      double d;
      std::memcpy(&d, p + 8 * i, 8);
      return d;
    }
  }
}

// Stores v, which the real type represents exactly (or an infinity, a NaN,
// a signed zero).
void store_real(void* out, std::size_t i, DataType t, double v) {
  char* p = static_cast<char*>(out);
  switch (t) {
    case DataType::Float16: {
      const std::uint16_t h = float_to_half(static_cast<float>(v));
      std::memcpy(p + 2 * i, &h, 2);
      return;
    }
    case DataType::BFloat16: {
      const std::uint16_t b = float_to_bfloat16(static_cast<float>(v));
      std::memcpy(p + 2 * i, &b, 2);
      return;
    }
    case DataType::Float32: {
      const float f = static_cast<float>(v);
      std::memcpy(p + 4 * i, &f, 4);
      return;
    }
    default:
      std::memcpy(p + 8 * i, &v, 8);
      return;
  }
}

int bit_width(u128 v) {
  const auto hi = static_cast<std::uint64_t>(v >> 64);
  return hi ? 64 + static_cast<int>(std::bit_width(hi))
            : static_cast<int>(std::bit_width(static_cast<std::uint64_t>(v)));
}

// v >> sh rounded to nearest, ties to even; `sticky`: bits below v that are
// not all zero. sh > 0, v < 2^127.
u128 shift_rounded(u128 v, int sh, bool sticky) {
  if (sh >= 128) return 0;  // below one half
  const u128 q = v >> sh;
  const u128 rem = v & ((u128(1) << sh) - 1);
  const u128 half = u128(1) << (sh - 1);
  const bool up = rem > half || (rem == half && (sticky || (q & 1)));
  return q + (up ? 1 : 0);
}

// (neg ? -1 : 1) * (u + a fraction, where `sticky`) * 2^exp / div, rounded
// once to the real type (nearest, ties to even; past its range an
// infinity), as a double the type represents exactly. 0 < u < 2^127.
double round_once(bool neg, u128 u, int exp, int div, const RealType& r, bool sticky = false) {
  if (div > 1) {
    // At least 120 bits of the quotient, and whether it is inexact (the
    // fraction below u cannot change the quotient's integer part).
    const int g = 127 - bit_width(u);
    const u128 a = u << g;
    u = a / static_cast<unsigned>(div);
    sticky = sticky || a % static_cast<unsigned>(div) != 0;
    exp -= g;
  }
  const int shift = std::max(bit_width(u) - r.precision, r.lsb_min - exp);
  if (shift > 0) {
    u = shift_rounded(u, shift, sticky);
    exp += shift;
  }
  // u <= 2^p now: u * 2^exp is of the type, or past its range.
  const double v = std::ldexp(static_cast<double>(static_cast<std::uint64_t>(u)), exp);
  const double out = v > r.max_finite ? std::numeric_limits<double>::infinity() : v;
  return neg ? -out : out;
}

// x = (neg ? -1 : 1) * m * 2^q with m an integer below 2^53 (0 for zero).
struct Parts {
  bool neg;
  std::uint64_t m;
  int q;
};
Parts parts_of(double x) {
  std::uint64_t w;
  std::memcpy(&w, &x, 8);
  Parts p{(w >> 63) != 0, w & ((std::uint64_t(1) << 52) - 1), -1074};
  const int be = static_cast<int>((w >> 52) & 0x7ff);
  if (be != 0) {
    p.m |= std::uint64_t(1) << 52;
    p.q = be - 1075;
  }
  return p;
}

// The exact sum of finite values, in two's complement limbs from 2^-1074
// up, wide enough for n of any double; then rounded once.
double exact_sum(const double* v, int n, int div, const RealType& r) {
  constexpr int kLimbs = 35;  // 2240 bits: 2^-1074 .. 2^1166
  std::array<std::uint64_t, kLimbs> acc{};
  for (int k = 0; k < n; ++k) {
    const Parts p = parts_of(v[k]);
    if (p.m == 0) continue;
    const int at = p.q + 1074;  // bit position of m's last bit
    // m << at, over up to three limbs, added or subtracted.
    const int limb = at / 64, off = at % 64;
    const u128 wide = u128(p.m) << off;
    std::uint64_t part[3] = {static_cast<std::uint64_t>(wide), static_cast<std::uint64_t>(wide >> 64), 0};
    if (p.neg) {
      // Subtract: add the two's complement of the three-limb value,
      // extended with ones above.
      unsigned carry = 1;
      for (int j = limb; j < kLimbs; ++j) {
        const std::uint64_t w = j - limb < 3 ? ~part[j - limb] : ~std::uint64_t(0);
        const u128 s = u128(acc[j]) + w + carry;
        acc[j] = static_cast<std::uint64_t>(s);
        carry = static_cast<unsigned>(s >> 64);
      }
    } else {
      unsigned carry = 0;
      for (int j = limb; j < kLimbs && (j - limb < 3 || carry); ++j) {
        const u128 s = u128(acc[j]) + (j - limb < 3 ? part[j - limb] : 0) + carry;
        acc[j] = static_cast<std::uint64_t>(s);
        carry = static_cast<unsigned>(s >> 64);
      }
    }
  }
  const bool neg = acc[kLimbs - 1] >> 63;
  if (neg) {  // magnitude
    unsigned carry = 1;
    for (auto& w : acc) {
      const u128 s = u128(~w) + carry;
      w = static_cast<std::uint64_t>(s);
      carry = static_cast<unsigned>(s >> 64);
    }
  }
  int top = kLimbs - 1;
  while (top >= 0 && acc[top] == 0) --top;
  if (top < 0) return 0.0;
  // The top 126 bits as u, the bits below as sticky; u * 2^(lowest - 1074).
  const int tb = top * 64 + static_cast<int>(std::bit_width(acc[top])) - 1;  // top bit's position
  const int lowest = std::max(tb - 125, 0);
  // Bits [lowest, tb], at most 126 of them, from the limbs.
  const auto bits_at = [&](int pos) -> std::uint64_t {  // 64 bits from bit `pos` up
    const int j = pos / 64, off = pos % 64;
    const std::uint64_t lo = j < kLimbs ? acc[j] >> off : 0;
    const std::uint64_t hi = off && j + 1 < kLimbs ? acc[j + 1] << (64 - off) : 0;
    return lo | hi;
  };
  u128 u = (u128(bits_at(lowest + 64)) << 64) | bits_at(lowest);
  const int width = tb - lowest + 1;
  if (width < 128) u &= (u128(1) << width) - 1;
  bool sticky = false;
  for (int j = 0; j * 64 < lowest && !sticky; ++j) {
    const int below = std::min(64, lowest - j * 64);
    const std::uint64_t mask = below == 64 ? ~std::uint64_t(0) : (std::uint64_t(1) << below) - 1;
    sticky = (acc[j] & mask) != 0;
  }
  return round_once(neg, u, lowest - 1074, div, r, sticky);
}

// One element's sum of n reals (r's type, as doubles, exact); `avg`.
double sum_element(const double* v, int n, bool avg, const RealType& r) {
  bool nan = false, pos = false, negi = false, all_neg_zero = true;
  double most = 0;
  for (int k = 0; k < n; ++k) {
    const double x = v[k];
    if (std::isnan(x)) {
      nan = true;
    } else if (std::isinf(x)) {
      (x > 0 ? pos : negi) = true;
    } else {
      most = std::max(most, std::fabs(x));
    }
    all_neg_zero = all_neg_zero && x == 0 && std::signbit(x);
  }
  if (nan || (pos && negi)) return std::numeric_limits<double>::quiet_NaN();
  if (pos || negi) return pos ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
  if (most == 0) return all_neg_zero ? -0.0 : 0.0;
  const int div = avg ? n : 1;
  int e;
  std::frexp(most, &e);  // every |x| < 2^e
  const int h = ceil_log2(n);
  if (r.precision == 53) {
    // Multiples of 2^(e - L) below 2^L each, n of them below 2^126.
    const int L = 125 - h;
    i128 s = 0;
    for (int k = 0; k < n; ++k) {
      const Parts p = parts_of(v[k]);
      if (p.m == 0) continue;
      const int sh = p.q + L - e;
      if (sh < 0 && (p.m & ((std::uint64_t(1) << std::min(-sh, 63)) - 1)) != 0) return exact_sum(v, n, div, r);
      const u128 m = sh >= 0 ? u128(p.m) << sh : u128(p.m >> -sh);
      s += p.neg ? -i128(m) : i128(m);
    }
    if (s == 0) return 0.0;
    return round_once(s < 0, s < 0 ? u128(-s) : u128(s), e - L, div, r);
  }
  // Multiples of 2^(e - L) below 2^L each, n of them below 2^50.
  const int L = 50 - h;
  const double scale = std::ldexp(1.0, L - e);
  std::int64_t s = 0;
  for (int k = 0; k < n; ++k) {
    const double t = v[k] * scale;  // exact
    if (t != std::nearbyint(t)) return exact_sum(v, n, div, r);
    s += static_cast<std::int64_t>(t);
  }
  if (s == 0) return 0.0;
  return round_once(s < 0, s < 0 ? u128(-s) : u128(s), e - L, div, r);
}

void sum_scalar(void* out, const void* const* in, int n, std::size_t from, std::size_t to, const RealType& r,
                bool avg) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (std::size_t i = from; i < to; ++i) {
    for (int k = 0; k < n; ++k) v[static_cast<std::size_t>(k)] = load_real(in[k], i, r.type);
    store_real(out, i, r.type, sum_element(v.data(), n, avg, r));
  }
}

#if defined(__x86_64__)
// Element i of a sum, by sum_element.
[[gnu::noinline]] double one_element(const void* const* in, int n, std::size_t i, bool avg, const RealType& r) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (int k = 0; k < n; ++k) v[static_cast<std::size_t>(k)] = load_real(in[k], i, r.type);
  return sum_element(v.data(), n, avg, r);
}

// Eight contributions from element i on, as float32 lanes (exactly).
template <DataType T>
[[gnu::target("avx2,f16c"), gnu::always_inline]] inline __m256 load8(const void* p, std::size_t i) {
  if constexpr (T == DataType::Float32) {
    return _mm256_loadu_ps(static_cast<const float*>(p) + i);
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const std::uint16_t*>(p) + i));
    if constexpr (T == DataType::BFloat16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
  }
}

// Four doubles rounded to P bits at the bit level (nearest, ties to even):
// right for results in the type's normal range, which the caller sees to.
template <int P>
[[gnu::target("avx2"), gnu::always_inline]] inline __m256d round_bits(__m256d d) {
  constexpr int drop = 53 - P;
  const __m256i u = _mm256_castpd_si256(d);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi64(u, drop), _mm256_set1_epi64x(1));
  const __m256i up =
      _mm256_add_epi64(u, _mm256_add_epi64(_mm256_set1_epi64x((std::int64_t{1} << (drop - 1)) - 1), lsb));
  return _mm256_castsi256_pd(_mm256_andnot_si256(_mm256_set1_epi64x((std::int64_t{1} << drop) - 1), up));
}

// Lanes of four doubles (as four bits) where `d` lies on a midpoint of the
// P-bit grid: ...1000 in the bits below it.
template <int P>
[[gnu::target("avx2"), gnu::always_inline]] inline int midpoints(__m256d d) {
  constexpr int drop = 53 - P;
  const __m256i low = _mm256_and_si256(_mm256_castpd_si256(d), _mm256_set1_epi64x((std::int64_t{1} << drop) - 1));
  return _mm256_movemask_pd(
      _mm256_castsi256_pd(_mm256_cmpeq_epi64(low, _mm256_set1_epi64x(std::int64_t{1} << (drop - 1)))));
}

// Lanes of four doubles where 0 < |d| < `least`.
[[gnu::target("avx2"), gnu::always_inline]] inline int tiny(__m256d d, __m256d least) {
  const __m256d a = _mm256_andnot_pd(_mm256_set1_pd(-0.0), d);
  return _mm256_movemask_pd(
      _mm256_and_pd(_mm256_cmp_pd(a, least, _CMP_LT_OQ), _mm256_cmp_pd(a, _mm256_setzero_pd(), _CMP_NEQ_OQ)));
}

// Sums of float32, bfloat16 or float16 (precision P), eight elements a
// step. Every contribution widens to a float32 exactly; where every nonzero
// contribution of an element is finite and their float32 exponent fields
// lie within 53 - P - ceil(log2 n) of each other, every partial sum in a
// double is exact (a multiple of the least contribution's last bit, below n
// times the largest's binade: at most 53 bits), so the double sum, in any
// order, is the exact sum (a zero as IEEE addition gives it). It is then
// rounded once: float32 by the conversion, the 16-bit types at the bit
// level (below their normal range the sum is exact already: a multiple of
// the least subnormal with fewer than P bits). Avg divides the exact sum
// in a double, which rounds; rounding that quotient again to P bits is the
// one rounding of the exact quotient unless it fell on a midpoint of the
// P-bit grid. The other elements (a NaN or infinity, a span too wide, a
// quotient below the normal range or on a midpoint) go through
// sum_element. Returns how many elements it covered (a multiple of 8).
template <DataType T>
[[gnu::target("avx2,f16c")]] std::size_t sum_avx2(void* out, const void* const* in, int n, std::size_t count, bool avg,
                                                  const RealType& r) {
  constexpr int P = T == DataType::Float32 ? 24 : T == DataType::BFloat16 ? 8 : 11;
  const __m256i span = _mm256_set1_epi32(53 - P - ceil_log2(n));
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), one = _mm256_set1_epi32(1);
  const __m256d divisor = _mm256_set1_pd(n);
  const __m256d least = _mm256_set1_pd(T == DataType::Float16 ? 0x1p-14 : 0x1p-126);
  std::size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    __m256i hi_field = _mm256_setzero_si256(), lo_field = _mm256_set1_epi32(255);
    // From -0: adding -0 keeps it, +0 or any x gives them.
    __m256d s0 = _mm256_set1_pd(-0.0), s1 = _mm256_set1_pd(-0.0);
    for (int k = 0; k < n; ++k) {
      const __m256 x = load8<T>(in[k], i);
      const __m256i a = _mm256_and_si256(_mm256_castps_si256(x), abs_mask);
      // The exponent field, a subnormal's as 1 (its last bit's binade); a
      // zero leaves the least alone.
      const __m256i f = _mm256_max_epi32(_mm256_srli_epi32(a, 23), one);
      const __m256i zero = _mm256_cmpeq_epi32(a, _mm256_setzero_si256());
      hi_field = _mm256_max_epi32(hi_field, f);
      lo_field = _mm256_min_epi32(lo_field, _mm256_or_si256(f, _mm256_and_si256(zero, _mm256_set1_epi32(255))));
      s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(x)));
      s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)));
    }
    // Lanes to redo: a NaN or infinity (field 255), or a span too wide.
    const __m256i bad = _mm256_or_si256(_mm256_cmpeq_epi32(hi_field, _mm256_set1_epi32(255)),
                                        _mm256_cmpgt_epi32(_mm256_sub_epi32(hi_field, lo_field), span));
    int redo = _mm256_movemask_ps(_mm256_castsi256_ps(bad));
    if (avg) {
      s0 = _mm256_div_pd(s0, divisor);
      s1 = _mm256_div_pd(s1, divisor);
      redo |= (midpoints<P>(s0) | midpoints<P>(s1) << 4) | (tiny(s0, least) | tiny(s1, least) << 4);
    }
    // Before the store: out may be an input.
    double fixed[8];  // lanes of `redo` only
    if (redo != 0) [[unlikely]] {
      for (int lane = 0; lane < 8; ++lane)
        if (redo >> lane & 1) fixed[lane] = one_element(in, n, i + static_cast<std::size_t>(lane), avg, r);
    }
    if constexpr (T != DataType::Float32) {
      s0 = round_bits<P>(s0);
      s1 = round_bits<P>(s1);
    }
    // Exact but for float32's rounding and an overflow to infinity.
    const __m256 res = _mm256_set_m128(_mm256_cvtpd_ps(s1), _mm256_cvtpd_ps(s0));
    if constexpr (T == DataType::Float32) {
      _mm256_storeu_ps(static_cast<float*>(out) + i, res);
    } else {
      __m128i h;
      if constexpr (T == DataType::BFloat16) {
        const __m256i high = _mm256_srli_epi32(_mm256_castps_si256(res), 16);
        h = _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(high, high), 0x08));
      } else {
        h = _mm256_cvtps_ph(res, _MM_FROUND_TO_NEAREST_INT);
      }
      _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<std::uint16_t*>(out) + i), h);
    }
    if (redo != 0) [[unlikely]] {
      for (int lane = 0; lane < 8; ++lane)
        if (redo >> lane & 1) store_real(out, i + static_cast<std::size_t>(lane), r.type, fixed[lane]);
    }
  }
  return i;
}
#endif

}  // namespace

bool reproducible_covers(DataType dtype, ReduceOpKind op) {
  if (op != ReduceOpKind::Sum && op != ReduceOpKind::Avg) return false;
  switch (dtype) {
    case DataType::Float16:
    case DataType::BFloat16:
    case DataType::Float32:
    case DataType::Float64:
    case DataType::Complex64:
    case DataType::Complex128:
      return true;
    default:
      return false;
  }
}

void repro_sum(void* out, const void* const* in, int n, std::size_t count, DataType dtype, bool avg) {
  const bool complex = dtype == DataType::Complex64 || dtype == DataType::Complex128;
  const DataType real = dtype == DataType::Complex64    ? DataType::Float32
                        : dtype == DataType::Complex128 ? DataType::Float64
                                                        : dtype;
  const std::size_t reals = complex ? 2 * count : count;
  const RealType r = real_type(real);
  std::size_t done = 0;
#if defined(__x86_64__)
  if (reduce_simd_level() >= ReduceSimdLevel::Avx2) {
    if (real == DataType::Float32) done = sum_avx2<DataType::Float32>(out, in, n, reals, avg, r);
    if (real == DataType::BFloat16) done = sum_avx2<DataType::BFloat16>(out, in, n, reals, avg, r);
    if (real == DataType::Float16) done = sum_avx2<DataType::Float16>(out, in, n, reals, avg, r);
  }
#endif
  sum_scalar(out, in, n, done, reals, r, avg);
}

}  // namespace tutti::detail
