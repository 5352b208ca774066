// Reduction kernels. Shape of the code:
//  - element operations are tiny structs with a static apply(a, b);
//  - loop templates run one operation over contiguous arrays; they are plain
//    for-loops over __restrict pointers so that GCC vectorizes them at -O3;
//  - each (dtype, op) pair maps to a kernel chosen once per call, never per
//    element. On x86-64 every kernel is compiled twice, for the baseline ISA
//    and for AVX2 (+F16C for float16), and the CPU picks at run time.
//  - float16/bfloat16 elements are widened to float32, combined and rounded
//    back inside the same loop (branch-free bit conversions, so it still
//    vectorizes). With F16C, float16 instead goes through small float32
//    buffers: convert a chunk of each input with vcvtph2ps, run the float32
//    loop, round the chunk back with vcvtps2ph. Converting a whole chunk
//    before storing keeps out == a / out == b safe.

#include "reduce/reduce.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <complex>
#include <cstdint>
#include <string>
#include <type_traits>

#include "reduce/half_bits.h"
#include "tutti/error.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TUTTI_REDUCE_X86 1
#else
#define TUTTI_REDUCE_X86 0
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
  static T apply(T a, T b) { return static_cast<T>(a & b); }
};
struct OpBOr {
  template <class T>
  static T apply(T a, T b) { return static_cast<T>(a | b); }
};
struct OpBXor {
  template <class T>
  static T apply(T a, T b) { return static_cast<T>(a ^ b); }
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
template <class Bits, class Op>
struct Via32 {
  static std::uint16_t apply(std::uint16_t a, std::uint16_t b) {
    return Bits::narrow(Op::apply(Bits::widen(a), Bits::widen(b)));
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

// Small enough for L1 (2 x 2 KiB), large enough to amortize the loop setup.
constexpr std::size_t kChunk = 512;

template <class Codec, class Op>
[[gnu::always_inline]] inline void chunked_body(void* out, const void* a, const void* b, std::size_t n) {
  using S = typename Codec::Storage;
  S* o = static_cast<S*>(out);
  const S* x = static_cast<const S*>(a);
  const S* y = static_cast<const S*>(b);
  alignas(64) float fa[kChunk];
  alignas(64) float fb[kChunk];
  for (std::size_t off = 0; off < n; off += kChunk) {
    const std::size_t m = std::min(kChunk, n - off);
    Codec::load(fa, x + off, m);
    Codec::load(fb, y + off, m);
    acc_loop<float, Op, false>(fa, fb, m);
    Codec::store(o + off, fa, m);
  }
}
#endif  // TUTTI_REDUCE_X86

// ---- kernel entry points and dispatch -----------------------------------

using PairFn = void (*)(void* out, const void* a, const void* b, std::size_t n);

struct Kernels {
  PairFn base;
  PairFn simd;  // nullptr when not built for this target
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
template <class Codec, class Op>
[[gnu::target("avx2,f16c")]] void chunked_avx2(void* out, const void* a, const void* b, std::size_t n) {
  chunked_body<Codec, Op>(out, a, b, n);
}
#endif

template <class T, class Op>
Kernels direct() {
#if TUTTI_REDUCE_X86
  return {&direct_base<T, Op>, &direct_avx2<T, Op>};
#else
  return {&direct_base<T, Op>, nullptr};
#endif
}

// 16-bit floats: fused conversions, except that float16 on x86 uses F16C
// through float32 chunks when the CPU has it (F16C has no fused form).
template <class Bits, class Op>
Kernels via32() {
#if TUTTI_REDUCE_X86
  if constexpr (std::is_same_v<Bits, HalfBits>) {
    return {&direct_base<std::uint16_t, Via32<Bits, Op>>, &chunked_avx2<F16cCodec, Op>};
  } else
#endif
  {
    return direct<std::uint16_t, Via32<Bits, Op>>();
  }
}

[[noreturn]] void throw_invalid(DataType t, ReduceOpKind op) {
  throw Error(ErrorKind::InvalidArgument, std::string("no reduction kernel for ") + reduce_op_name(op) + " on " +
                                              dtype_name(t) + " (check reduce_op_invalid_reason first)");
}

template <class T>
Kernels integer_kernels(DataType t, ReduceOpKind op) {
  switch (op) {
    case ReduceOpKind::Sum: case ReduceOpKind::Avg: case ReduceOpKind::PremulSum: return direct<T, OpSum>();
    case ReduceOpKind::Product: return direct<T, OpProd>();
    case ReduceOpKind::Min: return direct<T, OpMin>();
    case ReduceOpKind::Max: return direct<T, OpMax>();
    case ReduceOpKind::BAnd: return direct<T, OpBAnd>();
    case ReduceOpKind::BOr: return direct<T, OpBOr>();
    case ReduceOpKind::BXor: return direct<T, OpBXor>();
  }
  throw_invalid(t, op);
}

template <class T>
Kernels float_kernels(DataType t, ReduceOpKind op) {
  switch (op) {
    case ReduceOpKind::Sum: case ReduceOpKind::Avg: case ReduceOpKind::PremulSum: return direct<T, OpSum>();
    case ReduceOpKind::Product: return direct<T, OpProd>();
    case ReduceOpKind::Min: return direct<T, OpMin>();
    case ReduceOpKind::Max: return direct<T, OpMax>();
    default: throw_invalid(t, op);
  }
}

template <class Bits>
Kernels float16_kernels(DataType t, ReduceOpKind op) {
  switch (op) {
    case ReduceOpKind::Sum: case ReduceOpKind::Avg: case ReduceOpKind::PremulSum: return via32<Bits, OpSum>();
    case ReduceOpKind::Product: return via32<Bits, OpProd>();
    case ReduceOpKind::Min: return via32<Bits, OpMin>();
    case ReduceOpKind::Max: return via32<Bits, OpMax>();
    default: throw_invalid(t, op);
  }
}

template <class T>
Kernels complex_kernels(DataType t, ReduceOpKind op) {
  switch (op) {
    case ReduceOpKind::Sum: case ReduceOpKind::Avg: case ReduceOpKind::PremulSum: return direct<T, OpSum>();
    case ReduceOpKind::Product: return direct<T, OpProd>();
    default: throw_invalid(t, op);
  }
}

Kernels bool_kernels(ReduceOpKind op) {
  switch (op) {
    case ReduceOpKind::Sum: case ReduceOpKind::Max: case ReduceOpKind::BOr: return direct<std::uint8_t, OpLOr>();
    case ReduceOpKind::Product: case ReduceOpKind::Min: case ReduceOpKind::BAnd:
      return direct<std::uint8_t, OpLAnd>();
    case ReduceOpKind::BXor: return direct<std::uint8_t, OpLXor>();
    default: throw_invalid(DataType::Bool, op);
  }
}

Kernels pick(DataType t, ReduceOpKind op) {
  switch (t) {
    case DataType::Int8: return integer_kernels<std::int8_t>(t, op);
    case DataType::UInt8: return integer_kernels<std::uint8_t>(t, op);
    case DataType::Int16: return integer_kernels<std::int16_t>(t, op);
    case DataType::Int32: return integer_kernels<std::int32_t>(t, op);
    case DataType::UInt32: return integer_kernels<std::uint32_t>(t, op);
    case DataType::Int64: return integer_kernels<std::int64_t>(t, op);
    case DataType::UInt64: return integer_kernels<std::uint64_t>(t, op);
    case DataType::Float16: return float16_kernels<HalfBits>(t, op);
    case DataType::BFloat16: return float16_kernels<BFloat16Bits>(t, op);
    case DataType::Float32: return float_kernels<float>(t, op);
    case DataType::Float64: return float_kernels<double>(t, op);
    case DataType::Bool: return bool_kernels(op);
    case DataType::Complex64: return complex_kernels<C64>(t, op);
    case DataType::Complex128: return complex_kernels<C128>(t, op);
  }
  throw_invalid(t, op);
}

std::atomic<bool> g_simd_allowed{true};

bool simd_supported() {
#if TUTTI_REDUCE_X86
  // __builtin_cpu_init: we may run from another library's static
  // constructor, before libgcc's own initialization of the CPU flags.
  static const bool supported = (__builtin_cpu_init(), __builtin_cpu_supports("avx2") &&
                                                        __builtin_cpu_supports("f16c"));
  return supported;
#else
  return false;
#endif
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
    throw Error(ErrorKind::InvalidArgument, "scale of an integer type needs a finite integral scalar, got " +
                                                std::to_string(s));
  const double r = std::fmod(s, 18446744073709551616.0);  // in (-2^64, 2^64)
  const auto mag = static_cast<std::uint64_t>(std::fabs(r));
  return r < 0 ? std::uint64_t{0} - mag : mag;
}

}  // namespace

bool reduce_simd_active() { return simd_supported() && g_simd_allowed.load(std::memory_order_relaxed); }
void set_reduce_simd_allowed(bool allowed) { g_simd_allowed.store(allowed, std::memory_order_relaxed); }

void reduce_pair(void* out, const void* a, const void* b, std::size_t count, DataType dtype, ReduceOpKind op) {
  const Kernels k = pick(dtype, op);  // validates even for count == 0
  if (count == 0) return;
  const PairFn fn = (k.simd != nullptr && reduce_simd_active()) ? k.simd : k.base;
  fn(out, a, b, count);
}

void reduce_inplace(void* dst, const void* src, std::size_t count, DataType dtype, ReduceOpKind op) {
  reduce_pair(dst, dst, src, count, dtype, op);
}

void divide_by(void* buf, std::size_t count, DataType dtype, int n) {
  if (n < 1) throw Error(ErrorKind::InvalidArgument, "divide_by needs n >= 1, got " + std::to_string(n));
  if (dtype == DataType::Bool) throw_invalid(dtype, ReduceOpKind::Avg);
  if (n == 1 || count == 0) return;
  switch (dtype) {
    case DataType::Int8: return divide_integer<std::int8_t>(buf, count, n);
    case DataType::UInt8: return divide_integer<std::uint8_t>(buf, count, n);
    case DataType::Int16: return divide_integer<std::int16_t>(buf, count, n);
    case DataType::Int32: return divide_integer<std::int32_t>(buf, count, n);
    case DataType::UInt32: return divide_integer<std::uint32_t>(buf, count, n);
    case DataType::Int64: return divide_integer<std::int64_t>(buf, count, n);
    case DataType::UInt64: return divide_integer<std::uint64_t>(buf, count, n);
    case DataType::Float16: {
      const float d = static_cast<float>(n);
      return map_loop<std::uint16_t>(buf, buf, count,
                                     [d](std::uint16_t x) { return HalfBits::narrow(HalfBits::widen(x) / d); });
    }
    case DataType::BFloat16: {
      const float d = static_cast<float>(n);
      return map_loop<std::uint16_t>(
          buf, buf, count, [d](std::uint16_t x) { return BFloat16Bits::narrow(BFloat16Bits::widen(x) / d); });
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
    case DataType::Bool: break;
  }
  throw_invalid(dtype, ReduceOpKind::Avg);
}

void scale(void* out, const void* in, std::size_t count, DataType dtype, double scalar) {
  if (dtype_is_integer(dtype)) {
    const std::uint64_t m = integral_multiplier(scalar);
    if (count == 0) return;
    switch (dtype) {
      case DataType::Int8: return scale_integer<std::int8_t>(out, in, count, m);
      case DataType::UInt8: return scale_integer<std::uint8_t>(out, in, count, m);
      case DataType::Int16: return scale_integer<std::int16_t>(out, in, count, m);
      case DataType::Int32: return scale_integer<std::int32_t>(out, in, count, m);
      case DataType::UInt32: return scale_integer<std::uint32_t>(out, in, count, m);
      case DataType::Int64: return scale_integer<std::int64_t>(out, in, count, m);
      case DataType::UInt64: return scale_integer<std::uint64_t>(out, in, count, m);
      default: break;
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
    case DataType::Float32: return map_loop<float>(out, in, count, [fs](float x) { return x * fs; });
    case DataType::Float64: return map_loop<double>(out, in, count, [scalar](double x) { return x * scalar; });
    case DataType::Complex64:
      return map_loop<C64>(out, in, count, [fs](C64 x) { return C64{x.re * fs, x.im * fs}; });
    case DataType::Complex128:
      return map_loop<C128>(out, in, count, [scalar](C128 x) { return C128{x.re * scalar, x.im * scalar}; });
    default: break;
  }
  throw_invalid(dtype, ReduceOpKind::PremulSum);
}

}  // namespace tutti::detail
