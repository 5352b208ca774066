// Reduction kernels. Shape of the code:
//  - element operations are tiny structs with a static apply(a, b);
//  - loop templates run one operation over contiguous arrays; they are plain
//    for-loops over __restrict pointers so that GCC vectorizes them at -O3;
//  - each (dtype, op) pair maps to a kernel chosen once per call, never per
//    element. On x86-64 every kernel is compiled three times, for the
//    baseline ISA, for AVX2 (+F16C for float16) and for AVX-512 F/BW/DQ/VL,
//    and the CPU picks at run time (highest level it has, under the cap that
//    tests and benchmarks can set).
//  - float16/bfloat16 elements are widened to float32, combined and rounded
//    back inside the same loop (branch-free bit conversions, so it still
//    vectorizes). With F16C (AVX2 level), float16 instead goes through small
//    float32 buffers: convert a chunk of each input with vcvtph2ps, run the
//    float32 loop, round the chunk back with vcvtps2ph. Converting a whole
//    chunk before storing keeps out == a / out == b safe.
//  - at the AVX-512 level, float16 and bfloat16 use explicit intrinsics:
//    float16 widens 16 elements of each input into a zmm register
//    (vcvtph2ps), combines them and rounds back (vcvtps2ph); bfloat16 splits
//    32 elements into their even and odd halves as float32 by shifts and
//    masks and rounds with the bit operations of float_to_bfloat16_bits.
//    Tails are masked steps. Both inputs are loaded before each store, so
//    out == a / out == b are safe. The other types (complex products aside,
//    see complex_mul_avx512) let GCC vectorize the same loops as the other
//    levels with 512-bit registers.
//  - all levels give the same bits: the same IEEE operation per element, no
//    FMA contraction (off for the AVX-512 kernels, whose ISA has FMA), the
//    same rounding of 16-bit results (F16C is IEEE round-to-nearest-even
//    like float_to_half_bits) and the same NaN picked by Sum and Product of
//    two NaNs (see FirstNaN).

#include "reduce/reduce.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <complex>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "reduce/half_bits.h"
#include "reduce/reproducible.h"
#include "tutti/error.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define TUTTI_REDUCE_X86 1
#else
#define TUTTI_REDUCE_X86 0
#endif

// No fused multiply-adds in the AVX-512 kernels, whose results must equal
// the scalar code's bit for bit: GCC takes it per function; clang builds the
// library with -ffp-contract=off (CMakeLists.txt).
#if defined(__clang__)
#define TUTTI_NO_FP_CONTRACT
#else
#define TUTTI_NO_FP_CONTRACT , gnu::optimize("fp-contract=off")
#endif

namespace tutti::detail {

float half_to_float(std::uint16_t h) { return half_bits_to_float(h); }
std::uint16_t float_to_half(float f) { return float_to_half_bits(f); }
float bfloat16_to_float(std::uint16_t b) { return bfloat16_bits_to_float(b); }
std::uint16_t float_to_bfloat16(float f) { return float_to_bfloat16_bits(f); }

namespace {

// Views of complex elements. std::complex<T> is array-compatible with T[2],
// so a struct of two T has the same layout; a plain struct keeps the loops
// free of std::complex's NaN-recovering multiplication (a libgcc call).
struct C64 {
  float re, im;
};
struct C128 {
  double re, im;
};
static_assert(sizeof(C64) == sizeof(std::complex<float>) && sizeof(C128) == sizeof(std::complex<double>));

// Integer arithmetic happens in an unsigned type at least as wide as
// unsigned int: signed overflow is UB, and uint8/uint16 would otherwise be
// promoted to (signed) int, where e.g. 65535 * 65535 overflows.
template <class T>
using Wide = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

// ---- element operations -------------------------------------------------

struct OpSum {
  template <class T>
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>)
      return static_cast<T>(static_cast<Wide<T>>(a) + static_cast<Wide<T>>(b));
    else
      return a + b;
  }
  static C64 apply(C64 a, C64 b) { return {a.re + b.re, a.im + b.im}; }
  static C128 apply(C128 a, C128 b) { return {a.re + b.re, a.im + b.im}; }
};

struct OpProd {
  template <class T>
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>)
      return static_cast<T>(static_cast<Wide<T>>(a) * static_cast<Wide<T>>(b));
    else
      return a * b;
  }
  // Textbook complex multiplication, like torch/NCCL (no inf/NaN recovery).
  static C64 apply(C64 a, C64 b) { return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re}; }
  static C128 apply(C128 a, C128 b) { return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re}; }
};

// Floating min/max propagate NaN: `a != a` picks a NaN a, and a NaN b fails
// the ordered comparison so b is picked. Compare-and-select only, so it
// vectorizes (minps/maxps alone would drop a NaN in the first operand).
struct OpMin {
  template <class T>
  static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>)
      return (a <= b || a != a) ? a : b;
    else
      return a <= b ? a : b;
  }
};
struct OpMax {
  template <class T>
  static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>)
      return (a >= b || a != a) ? a : b;
    else
      return a >= b ? a : b;
  }
};

struct OpBAnd {
  template <class T>
  static T apply(T a, T b) {
    return static_cast<T>(a & b);
  }
};
struct OpBOr {
  template <class T>
  static T apply(T a, T b) {
    return static_cast<T>(a | b);
  }
};
struct OpBXor {
  template <class T>
  static T apply(T a, T b) {
    return static_cast<T>(a ^ b);
  }
};

// Bool is handled as bytes: any non-zero byte is true, results are 0/1.
// (Loading a bool object holding 2 would be UB, and UBSan checks that.)
struct OpLOr {
  static std::uint8_t apply(std::uint8_t a, std::uint8_t b) { return (a | b) != 0; }
};
struct OpLAnd {
  static std::uint8_t apply(std::uint8_t a, std::uint8_t b) { return (a != 0) & (b != 0); }
};
struct OpLXor {
  static std::uint8_t apply(std::uint8_t a, std::uint8_t b) { return (a != 0) != (b != 0); }
};

// ---- loops --------------------------------------------------------------
// always_inline so that each kernel entry point below (baseline or AVX2)
// gets its own copy compiled for its instruction set.

template <class T, class Op>
[[gnu::always_inline]] inline void pair_loop(T* __restrict out, const T* __restrict a, const T* __restrict b,
                                             std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = Op::apply(a[i], b[i]);
}

// dst[i] = dst[i] op src[i], or src[i] op dst[i] when kSrcFirst (keeps the
// operand order of reduce_pair when out aliases b).
template <class T, class Op, bool kSrcFirst>
[[gnu::always_inline]] inline void acc_loop(T* __restrict dst, const T* __restrict src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = kSrcFirst ? Op::apply(src[i], dst[i]) : Op::apply(dst[i], src[i]);
}

// No restrict: for out == a == b and partial overlaps (which the API does
// not promise anything for, but which must not become UB).
template <class T, class Op>
[[gnu::always_inline]] inline void plain_loop(T* out, const T* a, const T* b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = Op::apply(a[i], b[i]);
}

inline bool overlaps(const void* p, const void* q, std::size_t bytes) {
  const auto x = reinterpret_cast<std::uintptr_t>(p);
  const auto y = reinterpret_cast<std::uintptr_t>(q);
  return x < y + bytes && y < x + bytes;
}

template <class T, class Op>
[[gnu::always_inline]] inline void direct_body(void* out, const void* a, const void* b, std::size_t n) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  const std::size_t bytes = n * sizeof(T);
  if (o == x && !overlaps(o, y, bytes))
    acc_loop<T, Op, false>(o, y, n);
  else if (o == y && !overlaps(o, x, bytes))
    acc_loop<T, Op, true>(o, x, n);
  else if (!overlaps(o, x, bytes) && !overlaps(o, y, bytes))
    pair_loop<T, Op>(o, x, y, n);
  else
    plain_loop<T, Op>(o, x, y, n);
}

// ---- 16-bit floats --------------------------------------------------------

// float16/bfloat16 element operation: widen both to float32, apply, round
// back. Used through direct_body like any element type, so the conversions
// are fused into one vectorized pass over the arrays.
struct HalfBits {
  static float widen(std::uint16_t h) { return half_bits_to_float(h); }
  static std::uint16_t narrow(float f) { return float_to_half_bits(f); }
};
struct BFloat16Bits {
  static float widen(std::uint16_t b) { return bfloat16_bits_to_float(b); }
  static std::uint16_t narrow(float f) { return float_to_bfloat16_bits(f); }
};
// A float32 step that keeps a NaN `a`. When both operands of a Sum or
// Product are NaN, x86 returns the first one (quieted), but the compiler
// may swap the operands of a commutative + or *, and then which payload
// survives depends on the level. GCC 12 does swap them in the portable
// float16 loop, so float16 picks a NaN `a` explicitly (at no measurable
// cost: its conversions dominate). It keeps the order in the float32,
// float64 and bfloat16 loops, where the select would cost noticeably
// (bfloat16 at cache-resident sizes: bench/reduce_bench.cc's
// bfloat16_sum/<level>/64KiB, with the select against without); the tests
// compare every level with baseline bit for bit on every pair of special
// values, so a compiler that swaps there is caught. Every other NaN result
// has one possible value (b's NaN quieted, or the default NaN of inf - inf,
// 0 * inf); Min/Max pick a NaN `a` anyway. (The select uses masks: GCC
// leaves `a != a ? a : r` as a branch here and then does not vectorize the
// loop; see half_bits_select.)
template <class Op>
struct FirstNaN {
  static float apply(float a, float b) {
    const float r = Op::apply(a, b);
    if constexpr (std::is_same_v<Op, OpMin> || std::is_same_v<Op, OpMax>)
      return r;
    else
      return std::bit_cast<float>(
          half_bits_select(a != a, std::bit_cast<std::uint32_t>(a), std::bit_cast<std::uint32_t>(r)));
  }
};

template <class Bits, class Op>
struct Via32 {
  using Step = std::conditional_t<std::is_same_v<Bits, HalfBits>, FirstNaN<Op>, Op>;  // see FirstNaN
  static std::uint16_t apply(std::uint16_t a, std::uint16_t b) {
    return Bits::narrow(Step::apply(Bits::widen(a), Bits::widen(b)));
  }
};

#if TUTTI_REDUCE_X86
// F16C converts 8 halves per instruction with IEEE round-to-nearest-even,
// subnormals and NaN payloads included, matching HalfBits bit for bit.
struct F16cCodec {
  using Storage = std::uint16_t;
  [[gnu::target("avx2,f16c")]] static void load(float* __restrict dst, const std::uint16_t* __restrict src,
                                                std::size_t n) {
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
    for (; i < n; ++i) dst[i] = half_bits_to_float(src[i]);
  }
  [[gnu::target("avx2,f16c")]] static void store(std::uint16_t* __restrict dst, const float* __restrict src,
                                                 std::size_t n) {
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8)
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                       _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; ++i) dst[i] = float_to_half_bits(src[i]);
  }
};

// The float32 step of OpSum/OpProd/OpMin/OpMax on 8 lanes, the same IEEE
// operation per lane as Vec512 below: Sum and Product keep a NaN `a` as it
// is (the compiler may swap the operands of an add), Min and Max pick as
// OpMin/OpMax.
template <class Op>
struct Vec256;
template <>
struct Vec256<OpSum> {
  [[gnu::target("avx2"), gnu::always_inline]] static inline __m256 apply(__m256 a, __m256 b) {
    return _mm256_blendv_ps(_mm256_add_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
  }
};
template <>
struct Vec256<OpProd> {
  [[gnu::target("avx2"), gnu::always_inline]] static inline __m256 apply(__m256 a, __m256 b) {
    return _mm256_blendv_ps(_mm256_mul_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
  }
};
template <>
struct Vec256<OpMin> {
  [[gnu::target("avx2"), gnu::always_inline]] static inline __m256 apply(__m256 a, __m256 b) {
    const __m256 pick_a = _mm256_or_ps(_mm256_cmp_ps(a, b, _CMP_LE_OQ), _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
    return _mm256_blendv_ps(b, a, pick_a);
  }
};
template <>
struct Vec256<OpMax> {
  [[gnu::target("avx2"), gnu::always_inline]] static inline __m256 apply(__m256 a, __m256 b) {
    const __m256 pick_a = _mm256_or_ps(_mm256_cmp_ps(a, b, _CMP_GE_OQ), _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
    return _mm256_blendv_ps(b, a, pick_a);
  }
};

template <class Op>
[[gnu::target("avx2,f16c"), gnu::always_inline]] inline __m128i half_step8(const std::uint16_t* p,
                                                                           const std::uint16_t* q) {
  const __m256 fx = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  const __m256 fy = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
  return _mm256_cvtps_ph(Vec256<Op>::apply(fx, fy), _MM_FROUND_TO_NEAREST_INT);
}

// float16 at the AVX2 level: 8 elements through F16C per step, converted,
// combined and converted back in registers; the tail as the portable kernel.
// No __restrict: out may be a or b (each step loads both before it stores).
template <class Op>
[[gnu::target("avx2,f16c") TUTTI_NO_FP_CONTRACT]] void half_avx2(void* out, const void* a, const void* b,
                                                                 std::size_t n) {
  auto* o = static_cast<std::uint16_t*>(out);
  const auto* x = static_cast<const std::uint16_t*>(a);
  const auto* y = static_cast<const std::uint16_t*>(b);
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m128i r0 = half_step8<Op>(x + i, y + i);
    const __m128i r1 = half_step8<Op>(x + i + 8, y + i + 8);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + i), r0);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + i + 8), r1);
  }
  for (; i < n; ++i) o[i] = Via32<HalfBits, Op>::apply(x[i], y[i]);
}

// bfloat16 at the AVX2 level: 16 elements per 256-bit register, the even
// and odd ones as float32 lanes, as BFloat16x512 does below.
struct BFloat16x256 {
  [[gnu::target("avx2"), gnu::always_inline]] static inline __m256i round_high(__m256 f) {
    const __m256i u = _mm256_castps_si256(f);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
    const __m256i quiet = _mm256_or_si256(u, _mm256_set1_epi32(0x400000));
    return _mm256_blendv_epi8(rounded, quiet, _mm256_castps_si256(_mm256_cmp_ps(f, f, _CMP_UNORD_Q)));
  }
  template <class Op>
  [[gnu::target("avx2"), gnu::always_inline]] static inline __m256i step(__m256i x, __m256i y) {
    const __m256i high = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
    const __m256 even =
        Vec256<Op>::apply(_mm256_castsi256_ps(_mm256_slli_epi32(x, 16)), _mm256_castsi256_ps(_mm256_slli_epi32(y, 16)));
    const __m256 odd = Vec256<Op>::apply(_mm256_castsi256_ps(_mm256_and_si256(x, high)),
                                         _mm256_castsi256_ps(_mm256_and_si256(y, high)));
    return _mm256_or_si256(_mm256_srli_epi32(round_high(even), 16), _mm256_and_si256(round_high(odd), high));
  }
};

template <class Op>
[[gnu::target("avx2") TUTTI_NO_FP_CONTRACT]] void bfloat16_avx2(void* out, const void* a, const void* b,
                                                                std::size_t n) {
  auto* o = static_cast<std::uint16_t*>(out);
  const auto* x = static_cast<const std::uint16_t*>(a);
  const auto* y = static_cast<const std::uint16_t*>(b);
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i + 16));
    const __m256i y0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y + i));
    const __m256i y1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y + i + 16));
    const __m256i r0 = BFloat16x256::step<Op>(x0, y0);
    const __m256i r1 = BFloat16x256::step<Op>(x1, y1);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + i), r0);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + i + 16), r1);
  }
  for (; i < n; ++i) o[i] = Via32<BFloat16Bits, Op>::apply(x[i], y[i]);
}

#define TUTTI_AVX512 "avx512f,avx512bw,avx512dq,avx512vl"

// GCC 12's AVX-512 intrinsics start their results from _mm512_undefined_*()
// (`__m512i __Y = __Y;`), which -Wmaybe-uninitialized reports once they are
// inlined here. The value is never read (the unmasked forms overwrite every
// lane); the warning is off for this file's AVX-512 code only.
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// float16 <-> float32 for 16 elements: vcvtph2ps / vcvtps2ph (the AVX-512F
// forms of the F16C instructions, same rounding and NaN handling).
struct Half512 {
  [[gnu::target(TUTTI_AVX512), gnu::always_inline]] static inline __m512 widen(__m256i h) { return _mm512_cvtph_ps(h); }
  [[gnu::target(TUTTI_AVX512), gnu::always_inline]] static inline __m256i narrow(__m512 f) {
    return _mm512_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT);
  }
};

// The float32 step of OpSum/OpProd/OpMin/OpMax on 16 lanes, same IEEE
// operation per lane as Op::apply<float>.
template <class Op>
struct Vec512;
// Sum and Product keep a NaN `a` as it is, like FirstNaN (a masked add or
// multiply: lanes where `a` is NaN keep `a`); the same bits as a + b and
// a * b elsewhere.
template <>
struct Vec512<OpSum> {
  [[gnu::target(TUTTI_AVX512), gnu::always_inline]] static inline __m512 apply(__m512 a, __m512 b) {
    return _mm512_mask_add_ps(a, _mm512_cmp_ps_mask(a, a, _CMP_ORD_Q), a, b);
  }
};
template <>
struct Vec512<OpProd> {
  [[gnu::target(TUTTI_AVX512), gnu::always_inline]] static inline __m512 apply(__m512 a, __m512 b) {
    return _mm512_mask_mul_ps(a, _mm512_cmp_ps_mask(a, a, _CMP_ORD_Q), a, b);
  }
};
// (a <= b || a != a) ? a : b, and (a >= b || a != a) ? a : b.
template <>
struct Vec512<OpMin> {
  [[gnu::target(TUTTI_AVX512), gnu::always_inline]] static inline __m512 apply(__m512 a, __m512 b) {
    const __mmask16 pick_a = _mm512_cmp_ps_mask(a, b, _CMP_LE_OQ) | _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
    return _mm512_mask_blend_ps(pick_a, b, a);
  }
};
template <>
struct Vec512<OpMax> {
  [[gnu::target(TUTTI_AVX512), gnu::always_inline]] static inline __m512 apply(__m512 a, __m512 b) {
    const __mmask16 pick_a = _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ) | _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
    return _mm512_mask_blend_ps(pick_a, b, a);
  }
};

template <class Op>
[[gnu::target(TUTTI_AVX512), gnu::always_inline]] inline __m256i half_step16(__m256i x, __m256i y) {
  return Half512::narrow(Vec512<Op>::apply(Half512::widen(x), Half512::widen(y)));
}

// No __restrict: out may be a or b (each step loads both inputs before it
// stores), and partial overlaps stay defined (if unspecified) too.
template <class Op>
[[gnu::target(TUTTI_AVX512) TUTTI_NO_FP_CONTRACT]] void half_avx512(void* out, const void* a, const void* b,
                                                                    std::size_t n) {
  auto* o = static_cast<std::uint16_t*>(out);
  const auto* x = static_cast<const std::uint16_t*>(a);
  const auto* y = static_cast<const std::uint16_t*>(b);
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i + 16));
    const __m256i y0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y + i));
    const __m256i y1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y + i + 16));
    const __m256i r0 = half_step16<Op>(x0, y0);
    const __m256i r1 = half_step16<Op>(x1, y1);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + i), r0);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + i + 16), r1);
  }
  // Up to 31 left: a full step and/or a masked one (masked-off lanes are
  // neither read nor written, so no access past the arrays).
  while (i < n) {
    const std::size_t m = std::min<std::size_t>(16, n - i);
    const __mmask16 k = static_cast<__mmask16>((1u << m) - 1);
    const __m256i xv = _mm256_maskz_loadu_epi16(k, x + i);
    const __m256i yv = _mm256_maskz_loadu_epi16(k, y + i);
    _mm256_mask_storeu_epi16(o + i, k, half_step16<Op>(xv, yv));
    i += m;
  }
}

// bfloat16: 32 elements per 512-bit register, without any shuffles. A
// bfloat16 is the top half of a float32, so the even elements (low halves
// of the 32-bit lanes) become floats by a shift left and the odd ones (high
// halves) by masking off the low half; each half is combined as float32 and
// rounded with float_to_bfloat16_bits's bit operations, the even results
// shifted back down, the odd ones left in place, and the two OR-ed together.
// (AVX512_BF16's vcvtne2ps2bf16 is not used: it treats float subnormals as
// zero, so it would not give float_to_bfloat16_bits's bits.)
struct BFloat16x512 {
  // Rounded bfloat16 of each float32 lane, in the lane's top 16 bits
  // (low 16 bits garbage): ties to even by + 0x7fff + the lowest kept bit;
  // NaN truncated and made quiet instead.
  [[gnu::target(TUTTI_AVX512), gnu::always_inline]] static inline __m512i round_high(__m512 f) {
    const __m512i u = _mm512_castps_si512(f);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
    const __m512i quiet = _mm512_or_si512(u, _mm512_set1_epi32(0x400000));
    return _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q), rounded, quiet);
  }
  template <class Op>
  [[gnu::target(TUTTI_AVX512), gnu::always_inline]] static inline __m512i step(__m512i x, __m512i y) {
    const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
    const __m512 even =
        Vec512<Op>::apply(_mm512_castsi512_ps(_mm512_slli_epi32(x, 16)), _mm512_castsi512_ps(_mm512_slli_epi32(y, 16)));
    const __m512 odd = Vec512<Op>::apply(_mm512_castsi512_ps(_mm512_and_si512(x, high)),
                                         _mm512_castsi512_ps(_mm512_and_si512(y, high)));
    return _mm512_or_si512(_mm512_srli_epi32(round_high(even), 16), _mm512_and_si512(round_high(odd), high));
  }
};

// As half_avx512, for bfloat16: 32 elements per step, masked tail.
template <class Op>
[[gnu::target(TUTTI_AVX512) TUTTI_NO_FP_CONTRACT]] void bfloat16_avx512(void* out, const void* a, const void* b,
                                                                        std::size_t n) {
  auto* o = static_cast<std::uint16_t*>(out);
  const auto* x = static_cast<const std::uint16_t*>(a);
  const auto* y = static_cast<const std::uint16_t*>(b);
  std::size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m512i x0 = _mm512_loadu_si512(x + i), x1 = _mm512_loadu_si512(x + i + 32);
    const __m512i y0 = _mm512_loadu_si512(y + i), y1 = _mm512_loadu_si512(y + i + 32);
    const __m512i r0 = BFloat16x512::step<Op>(x0, y0);
    const __m512i r1 = BFloat16x512::step<Op>(x1, y1);
    _mm512_storeu_si512(o + i, r0);
    _mm512_storeu_si512(o + i + 32, r1);
  }
  while (i < n) {
    const std::size_t m = std::min<std::size_t>(32, n - i);
    const __mmask32 k = static_cast<__mmask32>(m == 32 ? ~0u : (1u << m) - 1);
    const __m512i xv = _mm512_maskz_loadu_epi16(k, x + i);
    const __m512i yv = _mm512_maskz_loadu_epi16(k, y + i);
    _mm512_mask_storeu_epi16(o + i, k, BFloat16x512::step<Op>(xv, yv));
    i += m;
  }
}

// Complex products at the AVX-512 level, written out: GCC 12's vectorizer
// turns the textbook formula into vfmaddsub (its SLP add/sub pattern ignores
// -ffp-contract=off), which rounds once instead of twice. Same products and
// the same operand order as OpProd: re = a.re*b.re - a.im*b.im (even lanes),
// im = a.re*b.im + a.im*b.re (odd lanes).
struct CMul64x512 {
  using Real = float;
  using Vec = __m512;
  static constexpr std::size_t kReals = 16;
  [[gnu::target(TUTTI_AVX512), gnu::always_inline]] static inline Vec load(const float* p, std::size_t m) {
    return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << m) - 1), p);
  }
  [[gnu::target(TUTTI_AVX512), gnu::always_inline]] static inline void store(float* p, Vec v, std::size_t m) {
    _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << m) - 1), v);
  }
  [[gnu::target(TUTTI_AVX512), gnu::always_inline]] static inline Vec loadu(const float* p) {
    return _mm512_loadu_ps(p);
  }
  [[gnu::target(TUTTI_AVX512), gnu::always_inline]] static inline void storeu(float* p, Vec v) {
    _mm512_storeu_ps(p, v);
  }
  [[gnu::target(TUTTI_AVX512), gnu::always_inline]] static inline Vec mul(Vec a, Vec b) {
    const Vec t = _mm512_mul_ps(a, _mm512_moveldup_ps(b));                           // a.re*b.re, a.im*b.re
    const Vec u = _mm512_mul_ps(_mm512_permute_ps(a, 0xb1), _mm512_movehdup_ps(b));  // a.im*b.im, a.re*b.im
    return _mm512_mask_blend_ps(0xaaaa, _mm512_sub_ps(t, u), _mm512_add_ps(u, t));
  }
};
struct CMul128x512 {
  using Real = double;
  using Vec = __m512d;
  static constexpr std::size_t kReals = 8;
  [[gnu::target(TUTTI_AVX512), gnu::always_inline]] static inline Vec load(const double* p, std::size_t m) {
    return _mm512_maskz_loadu_pd(static_cast<__mmask8>((1u << m) - 1), p);
  }
  [[gnu::target(TUTTI_AVX512), gnu::always_inline]] static inline void store(double* p, Vec v, std::size_t m) {
    _mm512_mask_storeu_pd(p, static_cast<__mmask8>((1u << m) - 1), v);
  }
  [[gnu::target(TUTTI_AVX512), gnu::always_inline]] static inline Vec loadu(const double* p) {
    return _mm512_loadu_pd(p);
  }
  [[gnu::target(TUTTI_AVX512), gnu::always_inline]] static inline void storeu(double* p, Vec v) {
    _mm512_storeu_pd(p, v);
  }
  [[gnu::target(TUTTI_AVX512), gnu::always_inline]] static inline Vec mul(Vec a, Vec b) {
    const Vec t = _mm512_mul_pd(a, _mm512_movedup_pd(b));                                 // a.re*b.re, a.im*b.re
    const Vec u = _mm512_mul_pd(_mm512_permute_pd(a, 0x55), _mm512_permute_pd(b, 0xff));  // a.im*b.im, a.re*b.im
    return _mm512_mask_blend_pd(0xaa, _mm512_sub_pd(t, u), _mm512_add_pd(u, t));
  }
};

// As half_avx512: no __restrict, both inputs loaded before each store.
template <class M>
[[gnu::target(TUTTI_AVX512) TUTTI_NO_FP_CONTRACT]] void complex_mul_avx512(void* out, const void* a, const void* b,
                                                                           std::size_t n) {
  using R = typename M::Real;
  auto* o = static_cast<R*>(out);
  const auto* x = static_cast<const R*>(a);
  const auto* y = static_cast<const R*>(b);
  const std::size_t reals = 2 * n;
  std::size_t i = 0;
  for (; i + M::kReals <= reals; i += M::kReals) M::storeu(o + i, M::mul(M::loadu(x + i), M::loadu(y + i)));
  if (i < reals) {
    const std::size_t m = reals - i;
    M::store(o + i, M::mul(M::load(x + i, m), M::load(y + i, m)), m);
  }
}
#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif  // TUTTI_REDUCE_X86

// ---- kernel entry points and dispatch -----------------------------------

using PairFn = void (*)(void* out, const void* a, const void* b, std::size_t n);

struct Kernels {
  PairFn base;
  PairFn avx2;    // nullptr when not built for this target
  PairFn avx512;  // nullptr when not built for this target
};

template <class T, class Op>
void direct_base(void* out, const void* a, const void* b, std::size_t n) {
  direct_body<T, Op>(out, a, b, n);
}

#if TUTTI_REDUCE_X86
template <class T, class Op>
[[gnu::target("avx2")]] void direct_avx2(void* out, const void* a, const void* b, std::size_t n) {
  direct_body<T, Op>(out, a, b, n);
}
// AVX-512F has FMA instructions (the AVX2 target does not enable FMA), and
// GCC contracts a * b + c into them by default (-ffp-contract=fast), which
// rounds once instead of twice: contraction is off for the AVX-512 kernels.
// (That does not stop the vectorizer's vfmaddsub pattern in GCC 12, hence
// complex_mul_avx512 for complex products.)
template <class T, class Op>
[[gnu::target(TUTTI_AVX512) TUTTI_NO_FP_CONTRACT]] void direct_avx512(void* out, const void* a, const void* b,
                                                                      std::size_t n) {
  direct_body<T, Op>(out, a, b, n);
}
#endif

template <class T, class Op>
Kernels direct() {
#if TUTTI_REDUCE_X86
  return {&direct_base<T, Op>, &direct_avx2<T, Op>, &direct_avx512<T, Op>};
#else
  return {&direct_base<T, Op>, nullptr, nullptr};
#endif
}

// 16-bit floats: fused conversions; on x86 the explicit kernels at the AVX2
// level (F16C for float16) and at the AVX-512 level.
template <class Bits, class Op>
Kernels via32() {
#if TUTTI_REDUCE_X86
  using Fused = Via32<Bits, Op>;
  if constexpr (std::is_same_v<Bits, HalfBits>)
    return {&direct_base<std::uint16_t, Fused>, &half_avx2<Op>, &half_avx512<Op>};
  else
    return {&direct_base<std::uint16_t, Fused>, &bfloat16_avx2<Op>, &bfloat16_avx512<Op>};
#else
  return direct<std::uint16_t, Via32<Bits, Op>>();
#endif
}

[[noreturn]] void throw_invalid(DataType t, ReduceOpKind op) {
  throw Error(ErrorKind::InvalidArgument, std::string("no reduction kernel for ") + reduce_op_name(op) + " on " +
                                              dtype_name(t) + " (check reduce_op_invalid_reason first)");
}

template <class T>
Kernels integer_kernels(DataType t, ReduceOpKind op) {
  switch (op) {
    case ReduceOpKind::Sum:
    case ReduceOpKind::Avg:
    case ReduceOpKind::PremulSum:
      return direct<T, OpSum>();
    case ReduceOpKind::Product:
      return direct<T, OpProd>();
    case ReduceOpKind::Min:
      return direct<T, OpMin>();
    case ReduceOpKind::Max:
      return direct<T, OpMax>();
    case ReduceOpKind::BAnd:
      return direct<T, OpBAnd>();
    case ReduceOpKind::BOr:
      return direct<T, OpBOr>();
    case ReduceOpKind::BXor:
      return direct<T, OpBXor>();
  }
  throw_invalid(t, op);
}

template <class T>
Kernels float_kernels(DataType t, ReduceOpKind op) {
  switch (op) {
    case ReduceOpKind::Sum:
    case ReduceOpKind::Avg:
    case ReduceOpKind::PremulSum:
      return direct<T, OpSum>();
    case ReduceOpKind::Product:
      return direct<T, OpProd>();
    case ReduceOpKind::Min:
      return direct<T, OpMin>();
    case ReduceOpKind::Max:
      return direct<T, OpMax>();
    default:
      throw_invalid(t, op);
  }
}

template <class Bits>
Kernels float16_kernels(DataType t, ReduceOpKind op) {
  switch (op) {
    case ReduceOpKind::Sum:
    case ReduceOpKind::Avg:
    case ReduceOpKind::PremulSum:
      return via32<Bits, OpSum>();
    case ReduceOpKind::Product:
      return via32<Bits, OpProd>();
    case ReduceOpKind::Min:
      return via32<Bits, OpMin>();
    case ReduceOpKind::Max:
      return via32<Bits, OpMax>();
    default:
      throw_invalid(t, op);
  }
}

// Complex Product: the AVX-512 level uses the written-out kernel.
template <class T>
Kernels complex_product() {
#if TUTTI_REDUCE_X86
  using M = std::conditional_t<std::is_same_v<T, C64>, CMul64x512, CMul128x512>;
  return {&direct_base<T, OpProd>, &direct_avx2<T, OpProd>, &complex_mul_avx512<M>};
#else
  return direct<T, OpProd>();
#endif
}

template <class T>
Kernels complex_kernels(DataType t, ReduceOpKind op) {
  switch (op) {
    case ReduceOpKind::Sum:
    case ReduceOpKind::Avg:
    case ReduceOpKind::PremulSum:
      return direct<T, OpSum>();
    case ReduceOpKind::Product:
      return complex_product<T>();
    default:
      throw_invalid(t, op);
  }
}

Kernels bool_kernels(ReduceOpKind op) {
  switch (op) {
    case ReduceOpKind::Sum:
    case ReduceOpKind::Max:
    case ReduceOpKind::BOr:
      return direct<std::uint8_t, OpLOr>();
    case ReduceOpKind::Product:
    case ReduceOpKind::Min:
    case ReduceOpKind::BAnd:
      return direct<std::uint8_t, OpLAnd>();
    case ReduceOpKind::BXor:
      return direct<std::uint8_t, OpLXor>();
    default:
      throw_invalid(DataType::Bool, op);
  }
}

Kernels pick(DataType t, ReduceOpKind op) {
  switch (t) {
    case DataType::Int8:
      return integer_kernels<std::int8_t>(t, op);
    case DataType::UInt8:
      return integer_kernels<std::uint8_t>(t, op);
    case DataType::Int16:
      return integer_kernels<std::int16_t>(t, op);
    case DataType::Int32:
      return integer_kernels<std::int32_t>(t, op);
    case DataType::UInt32:
      return integer_kernels<std::uint32_t>(t, op);
    case DataType::Int64:
      return integer_kernels<std::int64_t>(t, op);
    case DataType::UInt64:
      return integer_kernels<std::uint64_t>(t, op);
    case DataType::Float16:
      return float16_kernels<HalfBits>(t, op);
    case DataType::BFloat16:
      return float16_kernels<BFloat16Bits>(t, op);
    case DataType::Float32:
      return float_kernels<float>(t, op);
    case DataType::Float64:
      return float_kernels<double>(t, op);
    case DataType::Bool:
      return bool_kernels(op);
    case DataType::Complex64:
      return complex_kernels<C64>(t, op);
    case DataType::Complex128:
      return complex_kernels<C128>(t, op);
  }
  throw_invalid(t, op);
}

std::atomic<int> g_max_level{static_cast<int>(ReduceSimdLevel::Avx512)};

// The highest level this CPU runs; each level includes the ones below it.
ReduceSimdLevel best_supported_level() {
#if TUTTI_REDUCE_X86
  // __builtin_cpu_init: we may run from another library's static
  // constructor, before libgcc's own initialization of the CPU flags.
  // (libgcc also checks with xgetbv that the OS saves the ymm/zmm state.)
  static const ReduceSimdLevel best = [] {
    __builtin_cpu_init();
    // F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports
    // does not know "f16c".
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
    if (!__builtin_cpu_supports("avx2") || !f16c) return ReduceSimdLevel::Baseline;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl"))
      return ReduceSimdLevel::Avx512;
    return ReduceSimdLevel::Avx2;
  }();
  return best;
#else
  return ReduceSimdLevel::Baseline;
#endif
}

PairFn choose(const Kernels& k) {
  switch (reduce_simd_level()) {
    case ReduceSimdLevel::Avx512:
      if (k.avx512 != nullptr) return k.avx512;
      [[fallthrough]];
    case ReduceSimdLevel::Avx2:
      if (k.avx2 != nullptr) return k.avx2;
      [[fallthrough]];
    case ReduceSimdLevel::Baseline:
      break;
  }
  return k.base;
}

// ---- element-wise maps for divide_by and scale ---------------------------

// out[i] = f(in[i]) with out == in, disjoint, or (unpromised) overlapping.
template <class T, class F>
void map_loop(void* out, const void* in, std::size_t n, F f) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(in);
  if (o == x) {
    for (std::size_t i = 0; i < n; ++i) o[i] = f(o[i]);
  } else if (!overlaps(o, x, n * sizeof(T))) {
    T* __restrict ro = o;
    const T* __restrict rx = x;
    for (std::size_t i = 0; i < n; ++i) ro[i] = f(rx[i]);
  } else {
    for (std::size_t i = 0; i < n; ++i) o[i] = f(x[i]);
  }
}

template <class T>
void divide_integer(void* buf, std::size_t n, int d) {
  // Widen so that the divisor is never truncated to T; C++ division already
  // truncates toward zero, and d >= 1 rules out INT_MIN / -1.
  using D = std::conditional_t<std::is_signed_v<T>, std::int64_t, std::uint64_t>;
  const D dd = static_cast<D>(d);
  map_loop<T>(buf, buf, n, [dd](T x) { return static_cast<T>(static_cast<D>(x) / dd); });
}

template <class T>
void scale_integer(void* out, const void* in, std::size_t n, std::uint64_t m) {
  const auto w = static_cast<Wide<T>>(m);  // multiplying mod 2^64 then truncating = multiplying mod 2^bits
  map_loop<T>(out, in, n, [w](T x) { return static_cast<T>(static_cast<Wide<T>>(x) * w); });
}

// The integral double s reduced modulo 2^64 (fmod is exact), as the
// multiplier of a wrapping product. A plain cast would be UB past 2^63.
std::uint64_t integral_multiplier(double s) {
  if (!std::isfinite(s) || s != std::floor(s))
    throw Error(ErrorKind::InvalidArgument,
                "scale of an integer type needs a finite integral scalar, got " + std::to_string(s));
  const double r = std::fmod(s, 18446744073709551616.0);  // in (-2^64, 2^64)
  const auto mag = static_cast<std::uint64_t>(std::fabs(r));
  return r < 0 ? std::uint64_t{0} - mag : mag;
}

}  // namespace

const char* reduce_simd_level_name(ReduceSimdLevel level) {
  switch (level) {
    case ReduceSimdLevel::Baseline:
      return "baseline";
    case ReduceSimdLevel::Avx2:
      return "avx2";
    case ReduceSimdLevel::Avx512:
      return "avx512";
  }
  return "unknown";
}

bool reduce_simd_level_supported(ReduceSimdLevel level) {
  return static_cast<int>(level) >= 0 && static_cast<int>(level) <= static_cast<int>(best_supported_level());
}

ReduceSimdLevel reduce_simd_level() {
  const int best = static_cast<int>(best_supported_level());
  return static_cast<ReduceSimdLevel>(std::min(best, g_max_level.load(std::memory_order_relaxed)));
}

void set_reduce_simd_max_level(ReduceSimdLevel max) {
  g_max_level.store(std::clamp(static_cast<int>(max), 0, static_cast<int>(ReduceSimdLevel::Avx512)),
                    std::memory_order_relaxed);
}

bool reduce_simd_active() { return reduce_simd_level() != ReduceSimdLevel::Baseline; }
void set_reduce_simd_allowed(bool allowed) {
  set_reduce_simd_max_level(allowed ? ReduceSimdLevel::Avx512 : ReduceSimdLevel::Baseline);
}

void reduce_pair(void* out, const void* a, const void* b, std::size_t count, DataType dtype, ReduceOpKind op) {
  const Kernels k = pick(dtype, op);  // validates even for count == 0
  if (count == 0) return;
  choose(k)(out, a, b, count);
}

void reduce_inplace(void* dst, const void* src, std::size_t count, DataType dtype, ReduceOpKind op) {
  reduce_pair(dst, dst, src, count, dtype, op);
}

namespace {

// float16/bfloat16 <-> float32 over n elements (F16C at the AVX2 level, the
// same bits as the portable conversions).
void widen16(float* dst, const std::uint16_t* src, std::size_t n, bool half) {
#if TUTTI_REDUCE_X86
  if (half && reduce_simd_level() >= ReduceSimdLevel::Avx2) return F16cCodec::load(dst, src, n);
#endif
  if (half) {
    for (std::size_t i = 0; i < n; ++i) dst[i] = HalfBits::widen(src[i]);
  } else {
    for (std::size_t i = 0; i < n; ++i) dst[i] = BFloat16Bits::widen(src[i]);
  }
}
void narrow16(std::uint16_t* dst, const float* src, std::size_t n, bool half) {
#if TUTTI_REDUCE_X86
  if (half && reduce_simd_level() >= ReduceSimdLevel::Avx2) return F16cCodec::store(dst, src, n);
#endif
  if (half) {
    for (std::size_t i = 0; i < n; ++i) dst[i] = HalfBits::narrow(src[i]);
  } else {
    for (std::size_t i = 0; i < n; ++i) dst[i] = BFloat16Bits::narrow(src[i]);
  }
}

}  // namespace

void reduce_many(void* out, const void* const* in, int n, std::size_t count, DataType dtype, ReduceOpKind op) {
  if (n < 1) throw Error(ErrorKind::InvalidArgument, "reduce_many needs n >= 1, got " + std::to_string(n));
  if (is_repro(op)) [[unlikely]] {
    repro_sum(out, in, n, count, dtype, op == kReproAvg);
    return;
  }
  const bool half = dtype == DataType::Float16;
  if (n == 1) {
    (void)pick(dtype, op);  // validates
    if (out != in[0] && count) std::memmove(out, in[0], count * dtype_size(dtype));
    return;
  }
  if (n == 2 || !(half || dtype == DataType::BFloat16)) {
    reduce_pair(out, in[0], in[1], count, dtype, op);
    for (int p = 2; p < n; ++p) reduce_inplace(out, in[p], count, dtype, op);
    return;
  }
  (void)pick(dtype, op);  // validates
  // In float32, a chunk at a time: every input's chunk is read before the
  // output's is written.
  constexpr std::size_t kManyChunk = 1024;
  alignas(64) float acc[kManyChunk];
  alignas(64) float next[kManyChunk];
  auto at = [](const void* p, std::size_t off) { return static_cast<const std::uint16_t*>(p) + off; };
  for (std::size_t off = 0; off < count; off += kManyChunk) {
    const std::size_t m = std::min(kManyChunk, count - off);
    widen16(acc, at(in[0], off), m, half);
    for (int p = 1; p < n; ++p) {
      widen16(next, at(in[p], off), m, half);
      reduce_inplace(acc, next, m, DataType::Float32, op);
    }
    narrow16(static_cast<std::uint16_t*>(out) + off, acc, m, half);
  }
}

void divide_by(void* buf, std::size_t count, DataType dtype, int n) {
  if (n < 1) throw Error(ErrorKind::InvalidArgument, "divide_by needs n >= 1, got " + std::to_string(n));
  if (dtype == DataType::Bool) throw_invalid(dtype, ReduceOpKind::Avg);
  if (n == 1 || count == 0) return;
  switch (dtype) {
    case DataType::Int8:
      return divide_integer<std::int8_t>(buf, count, n);
    case DataType::UInt8:
      return divide_integer<std::uint8_t>(buf, count, n);
    case DataType::Int16:
      return divide_integer<std::int16_t>(buf, count, n);
    case DataType::Int32:
      return divide_integer<std::int32_t>(buf, count, n);
    case DataType::UInt32:
      return divide_integer<std::uint32_t>(buf, count, n);
    case DataType::Int64:
      return divide_integer<std::int64_t>(buf, count, n);
    case DataType::UInt64:
      return divide_integer<std::uint64_t>(buf, count, n);
    case DataType::Float16: {
      const float d = static_cast<float>(n);
      return map_loop<std::uint16_t>(buf, buf, count,
                                     [d](std::uint16_t x) { return HalfBits::narrow(HalfBits::widen(x) / d); });
    }
    case DataType::BFloat16: {
      const float d = static_cast<float>(n);
      return map_loop<std::uint16_t>(buf, buf, count,
                                     [d](std::uint16_t x) { return BFloat16Bits::narrow(BFloat16Bits::widen(x) / d); });
    }
    case DataType::Float32: {
      const float d = static_cast<float>(n);
      return map_loop<float>(buf, buf, count, [d](float x) { return x / d; });
    }
    case DataType::Float64: {
      const double d = n;
      return map_loop<double>(buf, buf, count, [d](double x) { return x / d; });
    }
    case DataType::Complex64: {
      const float d = static_cast<float>(n);
      return map_loop<C64>(buf, buf, count, [d](C64 x) { return C64{x.re / d, x.im / d}; });
    }
    case DataType::Complex128: {
      const double d = n;
      return map_loop<C128>(buf, buf, count, [d](C128 x) { return C128{x.re / d, x.im / d}; });
    }
    case DataType::Bool:
      break;
  }
  throw_invalid(dtype, ReduceOpKind::Avg);
}

void scale(void* out, const void* in, std::size_t count, DataType dtype, double scalar) {
  if (dtype_is_integer(dtype)) {
    const std::uint64_t m = integral_multiplier(scalar);
    if (count == 0) return;
    switch (dtype) {
      case DataType::Int8:
        return scale_integer<std::int8_t>(out, in, count, m);
      case DataType::UInt8:
        return scale_integer<std::uint8_t>(out, in, count, m);
      case DataType::Int16:
        return scale_integer<std::int16_t>(out, in, count, m);
      case DataType::Int32:
        return scale_integer<std::int32_t>(out, in, count, m);
      case DataType::UInt32:
        return scale_integer<std::uint32_t>(out, in, count, m);
      case DataType::Int64:
        return scale_integer<std::int64_t>(out, in, count, m);
      case DataType::UInt64:
        return scale_integer<std::uint64_t>(out, in, count, m);
      default:
        break;
    }
  }
  if (count == 0 && dtype != DataType::Bool) return;
  // Floating types multiply in their own precision (float16/bfloat16 in
  // float32), like the element type's own `x * scalar` would.
  const auto fs = static_cast<float>(scalar);
  switch (dtype) {
    case DataType::Float16:
      return map_loop<std::uint16_t>(out, in, count,
                                     [fs](std::uint16_t x) { return HalfBits::narrow(HalfBits::widen(x) * fs); });
    case DataType::BFloat16:
      return map_loop<std::uint16_t>(
          out, in, count, [fs](std::uint16_t x) { return BFloat16Bits::narrow(BFloat16Bits::widen(x) * fs); });
    case DataType::Float32:
      return map_loop<float>(out, in, count, [fs](float x) { return x * fs; });
    case DataType::Float64:
      return map_loop<double>(out, in, count, [scalar](double x) { return x * scalar; });
    case DataType::Complex64:
      return map_loop<C64>(out, in, count, [fs](C64 x) { return C64{x.re * fs, x.im * fs}; });
    case DataType::Complex128:
      return map_loop<C128>(out, in, count, [scalar](C128 x) { return C128{x.re * scalar, x.im * scalar}; });
    default:
      break;
  }
  throw_invalid(dtype, ReduceOpKind::PremulSum);
}

}  // namespace tutti::detail
