#pragma once
// An independent, deliberately plain scalar model of tutti's reductions, for
// tests: random inputs, the expected result, and a comparison that is exact
// where the result is exact and otherwise allows for rounding.
//
// It shares no code with src/reduce: integers are reduced in uint64
// (wrapping, then truncated to the element width), floats in long double
// with a single rounding at the end, and the float16/bfloat16 conversions
// below are arithmetic (frexp/ldexp/nearbyint) rather than bit tricks.
//
// Element semantics modelled (see src/reduce/reduce.h):
//  - signed and unsigned integers wrap; Avg truncates toward zero after the
//    wrapped sum; PremulSum multiplies by the integral scalar (mod 2^64);
//  - floating Min/Max propagate NaN; Sum/Product/Avg/PremulSum are compared
//    with a tolerance, see tolerance();
//  - bool: Sum/Max/BOr = or, Product/Min/BAnd = and, BXor = xor; any
//    non-zero byte is true and bools are compared by truth value;
//  - complex: Sum component-wise, Product complex multiplication.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tutti/types.h"

namespace tutti::testing {

// fill_random's float values lie in [-kFillMaxAbs, kFillMaxAbs] (not 0),
// or in [0.5, 1.5] with for_product. compare() without magnitudes assumes
// inputs of at most this size (see compare()).
inline constexpr double kFillMaxAbs = 4.0;

// ---- independent float16 / bfloat16 conversions --------------------------

namespace ref_detail {

// Value of a binary floating format with `mant` stored mantissa bits and
// `exp_bits` exponent bits.
inline long double small_float_to_value(std::uint16_t bits, int mant, int exp_bits) {
  const int bias = (1 << (exp_bits - 1)) - 1;
  const bool neg = (bits >> (mant + exp_bits)) & 1;
  const int e = (bits >> mant) & ((1 << exp_bits) - 1);
  const int m = bits & ((1 << mant) - 1);
  long double v;
  if (e == (1 << exp_bits) - 1)
    v = m == 0 ? INFINITY : NAN;
  else if (e == 0)
    v = std::ldexp(static_cast<long double>(m), 1 - bias - mant);
  else
    v = std::ldexp(static_cast<long double>(m + (1 << mant)), e - bias - mant);
  return neg ? -v : v;
}

// Nearest representable value, ties to even (nearbyint under the default
// rounding mode), overflow to inf, NaN to the quiet NaN 0x7e00/0x7fc0 with
// the input's sign.
inline std::uint16_t value_to_small_float(double x, int mant, int exp_bits) {
  // Works on the bits of a double (inputs here are doubles or long double
  // sums far inside the tolerance, so the first rounding to double, by the
  // caller, is harmless), which keeps the reference fast on multi-megabyte
  // buffers.
  const int bias = (1 << (exp_bits - 1)) - 1;
  std::uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  const auto sign = static_cast<std::uint16_t>((b >> 63) ? 1u << (mant + exp_bits) : 0u);
  const std::uint16_t inf = static_cast<std::uint16_t>(((1u << exp_bits) - 1) << mant);
  const int dexp = static_cast<int>((b >> 52) & 0x7ff);
  std::uint64_t dman = b & ((std::uint64_t{1} << 52) - 1);
  if (dexp == 0x7ff) return static_cast<std::uint16_t>(sign | inf | (dman ? (1u << (mant - 1)) : 0u));
  if (dexp == 0) return sign;  // double subnormals are far below every 16-bit subnormal
  int e = dexp - 1023;         // |x| = 1.dman * 2^e
  const int emin = 1 - bias;
  std::uint64_t sig = dman | (std::uint64_t{1} << 52);  // 53 significant bits
  // Keep `keep` bits of the significand: mant+1 for normals, fewer below emin.
  int keep = mant + 1 - (e < emin ? emin - e : 0);
  if (keep < 0) return sign;  // below half the smallest subnormal
  const int drop = 53 - keep;
  std::uint64_t units = drop >= 64 ? 0 : sig >> drop;
  const std::uint64_t rem = drop >= 64 ? sig : sig & ((std::uint64_t{1} << drop) - 1);
  const std::uint64_t half = std::uint64_t{1} << (drop - 1);
  units += static_cast<std::uint64_t>((rem > half) | ((rem == half) & (units & 1)));  // no branch: random data
  if (e < emin) {
    // Subnormal encoding is the unit count; a carry into 2^mant is the smallest normal.
    return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(units));
  }
  if (units == (std::uint64_t{1} << (mant + 1))) {
    units >>= 1;
    e += 1;
  }
  if (e > bias) return static_cast<std::uint16_t>(sign | inf);
  const auto field = static_cast<std::uint16_t>(((e + bias) << mant) | (static_cast<int>(units) - (1 << mant)));
  return static_cast<std::uint16_t>(sign | field);
}

}  // namespace ref_detail

// Decoding goes through a table of all 65536 values per format, built once
// with the exact formula above: the reference stays fast on large buffers.
inline long double half_bits_to_value(std::uint16_t h) {
  static const std::vector<double> table = [] {
    std::vector<double> t(65536);
    for (std::size_t i = 0; i < t.size(); ++i)
      t[i] = static_cast<double>(ref_detail::small_float_to_value(static_cast<std::uint16_t>(i), 10, 5));
    return t;
  }();
  return table[h];
}
inline long double bfloat16_bits_to_value(std::uint16_t b) {
  static const std::vector<double> table = [] {
    std::vector<double> t(65536);
    for (std::size_t i = 0; i < t.size(); ++i)
      t[i] = static_cast<double>(ref_detail::small_float_to_value(static_cast<std::uint16_t>(i), 7, 8));
    return t;
  }();
  return table[b];
}
inline std::uint16_t value_to_half_bits(long double x) { return ref_detail::value_to_small_float(x, 10, 5); }
inline std::uint16_t value_to_bfloat16_bits(long double x) { return ref_detail::value_to_small_float(x, 7, 8); }

// ---- element access --------------------------------------------------------

namespace ref_detail {

inline bool is_signed_int(DataType t) {
  return t == DataType::Int8 || t == DataType::Int16 || t == DataType::Int32 || t == DataType::Int64;
}
// Width in bytes of an integer type (inline: it is asked per element).
inline std::size_t int_width(DataType t) {
  switch (t) {
    case DataType::Int8:
    case DataType::UInt8:
      return 1;
    case DataType::Int16:
      return 2;
    case DataType::Int32:
    case DataType::UInt32:
      return 4;
    default:
      return 8;
  }
}
inline int int_bits(DataType t) { return static_cast<int>(int_width(t)) * 8; }

// Integer element as uint64: sign-extended for signed types.
inline std::uint64_t load_int(const void* buf, std::size_t i, DataType t) {
  const std::size_t w = int_width(t);
  std::uint64_t v = 0;
  std::memcpy(&v, static_cast<const char*>(buf) + i * w, w);  // little-endian
  const int bits = int_bits(t);
  if (is_signed_int(t) && bits < 64 && ((v >> (bits - 1)) & 1)) v |= ~std::uint64_t{0} << bits;
  return v;
}
inline void store_int(void* buf, std::size_t i, DataType t, std::uint64_t v) {
  const std::size_t w = int_width(t);
  std::memcpy(static_cast<char*>(buf) + i * w, &v, w);  // keeps the low bytes
}

// Real (or one complex component: comp 0 = re, 1 = im) as long double.
inline long double load_real(const void* buf, std::size_t i, DataType t, int comp = 0) {
  const char* p = static_cast<const char*>(buf);
  switch (t) {
    case DataType::Float16:
    case DataType::BFloat16: {
      std::uint16_t h;
      std::memcpy(&h, p + i * 2, 2);
      return t == DataType::Float16 ? half_bits_to_value(h) : bfloat16_bits_to_value(h);
    }
    case DataType::Float32: {
      float f;
      std::memcpy(&f, p + i * 4, 4);
      return f;
    }
    case DataType::Float64: {
      double d;
      std::memcpy(&d, p + i * 8, 8);
      return d;
    }
    case DataType::Complex64: {
      float f;
      std::memcpy(&f, p + i * 8 + comp * 4, 4);
      return f;
    }
    case DataType::Complex128: {
      double d;
      std::memcpy(&d, p + i * 16 + comp * 8, 8);
      return d;
    }
    default:
      throw std::invalid_argument("load_real on a non-floating type");
  }
}
// Rounds once from long double to the element type.
inline void store_real(void* buf, std::size_t i, DataType t, long double v, int comp = 0) {
  char* p = static_cast<char*>(buf);
  switch (t) {
    case DataType::Float16:
    case DataType::BFloat16: {
      const std::uint16_t h = t == DataType::Float16 ? value_to_half_bits(v) : value_to_bfloat16_bits(v);
      std::memcpy(p + i * 2, &h, 2);
      return;
    }
    case DataType::Float32: {
      const auto f = static_cast<float>(v);
      std::memcpy(p + i * 4, &f, 4);
      return;
    }
    case DataType::Float64: {
      const auto d = static_cast<double>(v);
      std::memcpy(p + i * 8, &d, 8);
      return;
    }
    case DataType::Complex64: {
      const auto f = static_cast<float>(v);
      std::memcpy(p + i * 8 + comp * 4, &f, 4);
      return;
    }
    case DataType::Complex128: {
      const auto d = static_cast<double>(v);
      std::memcpy(p + i * 16 + comp * 8, &d, 8);
      return;
    }
    default:
      throw std::invalid_argument("store_real on a non-floating type");
  }
}

inline bool is_real_float(DataType t) {
  return t == DataType::Float16 || t == DataType::BFloat16 || t == DataType::Float32 || t == DataType::Float64;
}
inline bool is_cplx(DataType t) { return t == DataType::Complex64 || t == DataType::Complex128; }

// splitmix64: tiny, deterministic everywhere (std distributions are not).
inline std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
inline double uniform01(std::uint64_t& state) { return static_cast<double>(splitmix64(state) >> 11) * 0x1p-53; }

// The integral PremulSum scalar modulo 2^64 (scalar finite and integral).
inline std::uint64_t integral_scalar_mod64(double s) {
  const long double r = std::fmod(static_cast<long double>(s), 0x1p64L);
  const auto mag = static_cast<std::uint64_t>(std::fabs(r));
  return r < 0 ? std::uint64_t{0} - mag : mag;
}

inline long double nan_min(long double a, long double b) {
  if (std::isnan(a)) return a;
  if (std::isnan(b)) return b;
  return b < a ? b : a;
}
inline long double nan_max(long double a, long double b) {
  if (std::isnan(a)) return a;
  if (std::isnan(b)) return b;
  return b > a ? b : a;
}

}  // namespace ref_detail

// ---- random inputs -----------------------------------------------------------

// Fills `count` elements with values drawn from `seed`, never zero except for
// bool (random true/false, stored as 0/1). Integers: uniform over their
// whole range. Floats (and each complex component): uniform in
// [-kFillMaxAbs, kFillMaxAbs], or with for_product in [0.5, 1.5] so that a
// product of 8 values stays well-conditioned; rounded to the element type.
inline void fill_random(void* buf, std::size_t count, DataType dtype, std::uint64_t seed, bool for_product = false) {
  using namespace ref_detail;
  std::uint64_t state = seed * 0x2545f4914f6cdd1dull + 0x1234567ull;
  if (dtype_is_integer(dtype)) {
    auto fill_ints = [&](auto zero) {  // zero: a value of the element type
      using T = decltype(zero);
      char* p = static_cast<char*>(buf);  // may be unaligned
      for (std::size_t i = 0; i < count; ++i) {
        T v;
        do v = static_cast<T>(splitmix64(state));  // the low bytes
        while (v == zero);
        std::memcpy(p + i * sizeof(T), &v, sizeof(T));
      }
    };
    switch (dtype_size(dtype)) {
      case 1:
        fill_ints(std::uint8_t{0});
        return;
      case 2:
        fill_ints(std::uint16_t{0});
        return;
      case 4:
        fill_ints(std::uint32_t{0});
        return;
      default:
        fill_ints(std::uint64_t{0});
        return;
    }
  }
  if (dtype == DataType::Bool) {
    auto* p = static_cast<std::uint8_t*>(buf);
    for (std::size_t i = 0; i < count; ++i) p[i] = static_cast<std::uint8_t>(splitmix64(state) & 1);
    return;
  }
  // One loop per element type (a complex number is two components in a
  // row); a value that rounds to zero is drawn again.
  auto draw = [&] {
    const double u = uniform01(state);
    return for_product ? 0.5 + u : (2 * u - 1) * kFillMaxAbs;
  };
  char* p = static_cast<char*>(buf);
  const std::size_t n = count * (is_cplx(dtype) ? 2 : 1);
  switch (dtype) {
    case DataType::Float16:
    case DataType::BFloat16: {
      const int mant = dtype == DataType::Float16 ? 10 : 7, exp_bits = dtype == DataType::Float16 ? 5 : 8;
      for (std::size_t i = 0; i < n; ++i) {
        std::uint16_t h;
        do h = value_to_small_float(draw(), mant, exp_bits);
        while ((h & 0x7fff) == 0);
        std::memcpy(p + i * 2, &h, 2);
      }
      return;
    }
    case DataType::Float32:
    case DataType::Complex64:
      for (std::size_t i = 0; i < n; ++i) {
        float f;
        do f = static_cast<float>(draw());
        while (f == 0);
        std::memcpy(p + i * 4, &f, 4);
      }
      return;
    case DataType::Float64:
    case DataType::Complex128:
      for (std::size_t i = 0; i < n; ++i) {
        double d;
        do d = draw();
        while (d == 0);
        std::memcpy(p + i * 8, &d, 8);
      }
      return;
    default:
      throw std::invalid_argument("fill_random: unknown dtype");
  }
}

// ---- the reference reduction ---------------------------------------------

// out[i] = inputs[0][i] op inputs[1][i] op ... for the whole collective:
// Avg divides the sum by inputs.size(), PremulSum multiplies each input by
// op.scalar before summing. `out` may be one of the inputs.
inline void reference_reduce(void* out, const std::vector<const void*>& inputs, std::size_t count, DataType dtype,
                             ReduceOp op) {
  using namespace ref_detail;
  using K = ReduceOpKind;
  if (inputs.empty()) throw std::invalid_argument("reference_reduce needs at least one input");
  if (!reduce_op_invalid_reason(dtype, op).empty()) throw std::invalid_argument(reduce_op_invalid_reason(dtype, op));
  const std::size_t n = inputs.size();
  // Results go to a scratch buffer first so that out may alias an input.
  std::vector<char> res(count * dtype_size(dtype));

  if (dtype_is_integer(dtype)) {
    const bool sgn = is_signed_int(dtype);
    const std::uint64_t mult = op.kind == K::PremulSum ? integral_scalar_mod64(op.scalar) : 1;
    for (std::size_t i = 0; i < count; ++i) {
      std::uint64_t acc = load_int(inputs[0], i, dtype);
      if (op.kind == K::PremulSum) acc *= mult;
      for (std::size_t r = 1; r < n; ++r) {
        const std::uint64_t v = load_int(inputs[r], i, dtype);
        switch (op.kind) {
          case K::Sum:
          case K::Avg:
            acc += v;
            break;
          case K::PremulSum:
            acc += v * mult;
            break;
          case K::Product:
            acc *= v;
            break;
          case K::Min:
            if (sgn ? static_cast<std::int64_t>(v) < static_cast<std::int64_t>(acc) : v < acc) acc = v;
            break;
          case K::Max:
            if (sgn ? static_cast<std::int64_t>(v) > static_cast<std::int64_t>(acc) : v > acc) acc = v;
            break;
          case K::BAnd:
            acc &= v;
            break;
          case K::BOr:
            acc |= v;
            break;
          case K::BXor:
            acc ^= v;
            break;
        }
      }
      if (op.kind == K::Avg) {
        // Wrap the sum to the element width first, then divide truncating.
        store_int(res.data(), i, dtype, acc);
        acc = load_int(res.data(), i, dtype);
        acc = sgn ? static_cast<std::uint64_t>(static_cast<std::int64_t>(acc) / static_cast<std::int64_t>(n)) : acc / n;
      }
      store_int(res.data(), i, dtype, acc);
    }
  } else if (dtype == DataType::Bool) {
    for (std::size_t i = 0; i < count; ++i) {
      int trues = 0;
      for (std::size_t r = 0; r < n; ++r) trues += static_cast<const std::uint8_t*>(inputs[r])[i] != 0;
      bool v = false;
      switch (op.kind) {
        case K::Sum:
        case K::Max:
        case K::BOr:
          v = trues > 0;
          break;
        case K::Product:
        case K::Min:
        case K::BAnd:
          v = trues == static_cast<int>(n);
          break;
        case K::BXor:
          v = trues % 2 == 1;
          break;
        default:
          break;
      }
      res[i] = v ? 1 : 0;
    }
  } else if (is_real_float(dtype)) {
    for (std::size_t i = 0; i < count; ++i) {
      long double acc = load_real(inputs[0], i, dtype);
      if (op.kind == K::PremulSum) acc *= op.scalar;
      for (std::size_t r = 1; r < n; ++r) {
        const long double v = load_real(inputs[r], i, dtype);
        switch (op.kind) {
          case K::Sum:
          case K::Avg:
            acc += v;
            break;
          case K::PremulSum:
            acc += v * op.scalar;
            break;
          case K::Product:
            acc *= v;
            break;
          case K::Min:
            acc = nan_min(acc, v);
            break;
          case K::Max:
            acc = nan_max(acc, v);
            break;
          default:
            break;
        }
      }
      if (op.kind == K::Avg) acc /= static_cast<long double>(n);
      store_real(res.data(), i, dtype, acc);
    }
  } else {  // complex
    for (std::size_t i = 0; i < count; ++i) {
      long double re = load_real(inputs[0], i, dtype, 0), im = load_real(inputs[0], i, dtype, 1);
      if (op.kind == K::PremulSum) {
        re *= op.scalar;
        im *= op.scalar;
      }
      for (std::size_t r = 1; r < n; ++r) {
        const long double vr = load_real(inputs[r], i, dtype, 0), vi = load_real(inputs[r], i, dtype, 1);
        if (op.kind == K::Product) {
          const long double nr = re * vr - im * vi;
          im = re * vi + im * vr;
          re = nr;
        } else {
          const long double s = op.kind == K::PremulSum ? op.scalar : 1.0;
          re += vr * s;
          im += vi * s;
        }
      }
      if (op.kind == K::Avg) {
        re /= static_cast<long double>(n);
        im /= static_cast<long double>(n);
      }
      store_real(res.data(), i, dtype, re, 0);
      store_real(res.data(), i, dtype, im, 1);
    }
  }
  if (!res.empty()) std::memcpy(out, res.data(), res.size());
}

// ---- tolerance -----------------------------------------------------------------

// Machine epsilon of the element's floating format (of each component for
// complex); 0 for integers and bool.
inline double dtype_epsilon(DataType dtype) {
  switch (dtype) {
    case DataType::Float16:
      return 0x1p-10;
    case DataType::BFloat16:
      return 0x1p-7;
    case DataType::Float32:
    case DataType::Complex64:
      return 0x1p-23;
    case DataType::Float64:
    case DataType::Complex128:
      return 0x1p-52;
    default:
      return 0;
  }
}

// Smallest positive (subnormal) value of the format; an absolute floor for
// results that underflow.
inline double dtype_denorm_min(DataType dtype) {
  switch (dtype) {
    case DataType::Float16:
      return 0x1p-24;
    case DataType::BFloat16:
      return 0x1p-133;
    case DataType::Float32:
    case DataType::Complex64:
      return 0x1p-149;
    case DataType::Float64:
    case DataType::Complex128:
      return 0x1p-1074;
    default:
      return 0;
  }
}

// Whether results must match exactly: integers, bool, and Min/Max (which
// only pick one of the inputs).
inline bool compare_is_exact(DataType dtype, ReduceOp op) {
  return dtype_epsilon(dtype) == 0 || op.kind == ReduceOpKind::Min || op.kind == ReduceOpKind::Max;
}

// Per element, the scale against which rounding errors are measured:
// Sum: sum |x_r|; PremulSum: sum |x_r * scalar|; Avg: sum |x_r| / n;
// Product: prod |x_r|. For complex |x| is |re| + |im|. 0 for exact cases.
inline void reference_magnitude(double* magnitude, const std::vector<const void*>& inputs, std::size_t count,
                                DataType dtype, ReduceOp op) {
  using namespace ref_detail;
  const bool cplx = is_cplx(dtype);
  for (std::size_t i = 0; i < count; ++i) {
    if (compare_is_exact(dtype, op)) {
      magnitude[i] = 0;
      continue;
    }
    long double m = op.kind == ReduceOpKind::Product ? 1 : 0;
    for (const void* in : inputs) {
      long double a = std::fabs(load_real(in, i, dtype, 0));
      if (cplx) a += std::fabs(load_real(in, i, dtype, 1));
      if (op.kind == ReduceOpKind::Product)
        m *= a;
      else
        m += a * (op.kind == ReduceOpKind::PremulSum ? std::fabs(op.scalar) : 1.0);
    }
    if (op.kind == ReduceOpKind::Avg) m /= static_cast<long double>(inputs.size());
    magnitude[i] = static_cast<double>(m);
  }
}

// Absolute tolerance for one element (each component of a complex) of a
// floating reduction of `nranks` inputs: (nranks + 1) * eps * magnitude
// + nranks * denorm_min. First-order rounding analysis gives about
// nranks * eps/2 * magnitude for every op (n - 1 rounded steps, the
// PremulSum scaling or Avg division, the final rounding; the complex product
// needs sqrt(5) eps/2 per step), so this leaves a factor ~2 for the
// reference's own rounding and for summation order. 0 for exact cases.
inline double tolerance(DataType dtype, ReduceOp op, int nranks, double magnitude) {
  if (compare_is_exact(dtype, op)) return 0;
  const int n = nranks < 1 ? 1 : nranks;
  double factor = n + 1;
  if (op.kind == ReduceOpKind::Product && ref_detail::is_cplx(dtype)) factor *= 2;
  return factor * dtype_epsilon(dtype) * magnitude + n * dtype_denorm_min(dtype);
}

// ---- comparison ------------------------------------------------------------------

// Element i of buf as text: integers in decimal, floats with enough digits
// to tell neighbours apart (16-bit types also as bits), bool as true/false,
// complex as (re, im).
inline std::string format_element(const void* buf, std::size_t i, DataType dtype) {
  using namespace ref_detail;
  std::ostringstream os;
  os.precision(dtype == DataType::Float64 || dtype == DataType::Complex128 ? 17 : 9);
  if (dtype_is_integer(dtype)) {
    const std::uint64_t v = load_int(buf, i, dtype);
    if (is_signed_int(dtype))
      os << static_cast<std::int64_t>(v);
    else
      os << v;
  } else if (dtype == DataType::Bool) {
    os << (static_cast<const std::uint8_t*>(buf)[i] != 0 ? "true" : "false");
  } else if (is_cplx(dtype)) {
    os << "(" << load_real(buf, i, dtype, 0) << ", " << load_real(buf, i, dtype, 1) << ")";
  } else {
    os << load_real(buf, i, dtype);
    if (dtype_size(dtype) == 2) {
      std::uint16_t h;
      std::memcpy(&h, static_cast<const char*>(buf) + i * 2, 2);
      os << " [0x" << std::hex << h << "]";
    }
  }
  return os.str();
}

// Compares `count` elements of a reduction result with the reference's.
// Exact for integers, bool (by truth value) and Min/Max (NaN matches NaN,
// -0 matches +0). Floating Sum/Product/Avg/PremulSum: |got - expected| <=
// tolerance(dtype, op, nranks, magnitude[i]) per component, NaN only matches
// NaN and inf only the same inf. Without `magnitude` (from
// reference_magnitude) the magnitude is estimated from the result and from
// fill_random's range: max(|expected|, kFillMaxAbs * k) with k = nranks for
// Sum, nranks * |scalar| for PremulSum, 1 for Avg, 0 for Product — so pass
// magnitudes when inputs are larger than fill_random's and cancel.
// On the first mismatch returns false and, if first_mismatch_description is
// not null, stores "element <i>: got <x>, expected <y> (...)".
inline bool compare(const void* got, const void* expected, std::size_t count, DataType dtype, ReduceOp op, int nranks,
                    std::string* first_mismatch_description, const double* magnitude = nullptr) {
  using namespace ref_detail;
  auto fail = [&](std::size_t i, const std::string& extra) {
    if (first_mismatch_description != nullptr)
      *first_mismatch_description = "element " + std::to_string(i) + " of " + std::to_string(count) + " (" +
                                    dtype_name(dtype) + " " + reduce_op_name(op.kind) + "): got " +
                                    format_element(got, i, dtype) + ", expected " + format_element(expected, i, dtype) +
                                    extra;
    return false;
  };
  for (std::size_t i = 0; i < count; ++i) {
    if (dtype_is_integer(dtype)) {
      if (load_int(got, i, dtype) != load_int(expected, i, dtype)) return fail(i, "");
      continue;
    }
    if (dtype == DataType::Bool) {
      if ((static_cast<const std::uint8_t*>(got)[i] != 0) != (static_cast<const std::uint8_t*>(expected)[i] != 0))
        return fail(i, "");
      continue;
    }
    const int comps = is_cplx(dtype) ? 2 : 1;
    double tol = 0;
    if (!compare_is_exact(dtype, op)) {
      double mag;
      if (magnitude != nullptr) {
        mag = magnitude[i];
      } else {
        long double e = std::fabs(load_real(expected, i, dtype, 0));
        if (comps == 2) e += std::fabs(load_real(expected, i, dtype, 1));
        double k = 0;
        if (op.kind == ReduceOpKind::Sum) k = nranks;
        if (op.kind == ReduceOpKind::PremulSum) k = nranks * std::fabs(op.scalar);
        if (op.kind == ReduceOpKind::Avg) k = 1;
        mag = std::fmax(static_cast<double>(e), kFillMaxAbs * k);
      }
      tol = tolerance(dtype, op, nranks, mag);
    }
    for (int c = 0; c < comps; ++c) {
      const long double g = load_real(got, i, dtype, c);
      const long double e = load_real(expected, i, dtype, c);
      if (std::isnan(g) || std::isnan(e)) {
        if (std::isnan(g) != std::isnan(e)) return fail(i, "");
        continue;
      }
      if (std::isinf(g) || std::isinf(e)) {
        if (g != e) return fail(i, "");
        continue;
      }
      if (std::fabs(g - e) > tol) {
        std::ostringstream os;
        os.precision(3);
        os << " (|difference| " << static_cast<double>(std::fabs(g - e)) << " > tolerance " << tol << ")";
        return fail(i, os.str());
      }
    }
  }
  return true;
}

}  // namespace tutti::testing
