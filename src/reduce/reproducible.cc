// Reproducible sums in fixed point (reduce/reproducible.h).
#include "reduce/reproducible.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "reduce/reduce.h"

namespace tutti::detail {
namespace {

using u128 = unsigned __int128;
using i128 = __int128;

int ceil_log2(int n) { return n <= 1 ? 0 : std::bit_width(static_cast<unsigned>(n - 1)); }

// A real type: its precision p (bits, the leading one included), the
// exponent of its least subnormal's unit, and its largest finite value.
struct RealType {
  int precision;
  int lsb_min;
  double max_finite;
};
RealType real_type(DataType t) {
  switch (t) {
    case DataType::Float16:
      return {11, -24, 65504.0};
    case DataType::BFloat16:
      return {8, -133, 0x1.fep127};
    case DataType::Float32:
      return {24, -149, static_cast<double>(std::numeric_limits<float>::max())};
    default:
      return {53, -1074, std::numeric_limits<double>::max()};
  }
}

int bit_width(u128 v) {
  const auto hi = static_cast<std::uint64_t>(v >> 64);
  return hi ? 64 + static_cast<int>(std::bit_width(hi))
            : static_cast<int>(std::bit_width(static_cast<std::uint64_t>(v)));
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

// Stores v, which the real type represents exactly (or an infinity or NaN).
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

// The anchor of a finite magnitude m > 0: the least e with m < 2^e.
std::int16_t anchor_of(double m) {
  int e;
  std::frexp(m, &e);
  return static_cast<std::int16_t>(e);
}

// v >> sh rounded to nearest, ties to even; `sticky`: the bits below v are
// not all zero. sh > 0, v < 2^127.
u128 shift_rounded(u128 v, int sh, bool sticky) {
  if (sh >= 128) return 0;  // below one half
  const u128 q = v >> sh;
  const u128 rem = v & ((u128(1) << sh) - 1);
  const u128 half = u128(1) << (sh - 1);
  const bool up = rem > half || (rem == half && (sticky || (q & 1)));
  return q + (up ? 1 : 0);
}

// (neg ? -1 : 1) * u * 2^exp / div, rounded once to the real type (nearest,
// ties to even; past the type's range an infinity), as a double the type
// represents exactly. u < 2^126.
double round_once(bool neg, u128 u, int exp, int div, const RealType& r) {
  if (u == 0) return 0.0;
  bool sticky = false;
  if (div > 1) {
    // The quotient with at least 120 bits, and whether it is inexact.
    const int g = 127 - bit_width(u);
    const u128 a = u << g;
    u = a / static_cast<unsigned>(div);
    sticky = a % static_cast<unsigned>(div) != 0;
    exp -= g;
  }
  const int shift = std::max(bit_width(u) - r.precision, r.lsb_min - exp);
  if (shift > 0) {
    u = shift_rounded(u, shift, sticky);
    exp += shift;
  }
  // u <= 2^p now, and u * 2^exp is of the type unless past its range.
  const double v = std::ldexp(static_cast<double>(static_cast<std::uint64_t>(u)), exp);
  const double out = v > r.max_finite ? std::numeric_limits<double>::infinity() : v;
  return neg ? -out : out;
}

u128 magnitude(i128 s) { return s < 0 ? u128(-(s + 1)) + 1 : u128(s); }

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

ReproLayout repro_layout(DataType dtype, int n) {
  ReproLayout l;
  l.n = std::max(n, 1);
  l.per_element = dtype == DataType::Complex64 || dtype == DataType::Complex128 ? 2 : 1;
  l.real = dtype == DataType::Complex64 ? DataType::Float32 : dtype == DataType::Complex128 ? DataType::Float64 : dtype;
  const int h = ceil_log2(l.n);
  if (l.real == DataType::Float64) {
    // Two lanes of an integer path; n lanes' worth in each below 2^63.
    l.lanes = 2;
    l.lane_bits = 62 - h;
  } else {
    // One lane, through doubles: every lane and every sum of n of them
    // below 2^50 in magnitude (exact in a double, and converted with the
    // 2^52 + 2^51 offset in both directions).
    l.lanes = 1;
    l.lane_bits = 50 - h;
  }
  return l;
}

int ReproLayout::exact_binades() const { return frac_bits() - real_type(real).precision; }

void repro_scan(const void* x, std::size_t first, std::size_t reals, const ReproLayout& l, std::int16_t* anchors,
                std::int16_t* flags) {
  std::size_t i = 0;
  while (i < reals) {
    const std::size_t b = (first + i) / kReproBlock;
    const std::size_t end = std::min(reals, (b + 1) * kReproBlock - first);
    double most = 0;
    bool odd = false;
    if (l.real == DataType::Float32) {
      // The largest magnitude's bits (finite ones order as their values).
      const auto* f = static_cast<const std::uint32_t*>(x);
      std::uint32_t top = 0, bad = 0;
      for (std::size_t k = i; k < end; ++k) {
        const std::uint32_t a = f[k] & 0x7fffffffu;
        bad |= a >= 0x7f800000u ? 1u : 0u;
        top = std::max(top, a >= 0x7f800000u ? 0u : a);
      }
      float m;
      std::memcpy(&m, &top, 4);
      most = m;
      odd = bad != 0;
    } else {
      for (std::size_t k = i; k < end; ++k) {
        const double v = load_real(x, k, l.real);
        if (!std::isfinite(v)) {
          odd = true;
        } else {
          most = std::max(most, std::fabs(v));
        }
      }
    }
    if (most > 0) anchors[b] = std::max(anchors[b], anchor_of(most));
    if (odd) flags[b] = 1;
    i = end;
  }
}

void repro_encode(const void* x, std::size_t first, std::size_t reals, const ReproLayout& l,
                  const std::int16_t* anchors, std::int64_t* lanes) {
  const int bits = l.lane_bits;
  std::size_t i = 0;
  while (i < reals) {
    const std::size_t b = (first + i) / kReproBlock;
    const std::size_t end = std::min(reals, (b + 1) * kReproBlock - first);
    const int e = anchors[b] == kNoAnchor ? 0 : anchors[b];
    if (l.lanes == 1) {
      // v * 2^(L - e) is exact and at most 2^L < 2^51 in magnitude: adding
      // 2^52 + 2^51 rounds it to an integer (nearest, ties to even) held in
      // the sum's low bits.
      const double scale = std::ldexp(1.0, bits - e);
      constexpr double kMagic = 0x1.8p52;
      std::int64_t magic_bits;
      std::memcpy(&magic_bits, &kMagic, 8);
      if (l.real == DataType::Float32) {
        const auto* f = static_cast<const float*>(x);
        for (std::size_t k = i; k < end; ++k) {
          const double v = std::isfinite(f[k]) ? static_cast<double>(f[k]) * scale : 0.0;
          const double t = v + kMagic;
          std::int64_t tb;
          std::memcpy(&tb, &t, 8);
          lanes[k] = tb - magic_bits;
        }
      } else {
        for (std::size_t k = i; k < end; ++k) {
          const double r = load_real(x, k, l.real);
          const double v = std::isfinite(r) ? r * scale : 0.0;
          const double t = v + kMagic;
          std::int64_t tb;
          std::memcpy(&tb, &t, 8);
          lanes[k] = tb - magic_bits;
        }
      }
    } else {
      const int frac = l.frac_bits();
      const auto* d = static_cast<const std::uint64_t*>(x);
      for (std::size_t k = i; k < end; ++k) {
        const std::uint64_t w = d[k];
        const bool neg = w >> 63;
        const int be = static_cast<int>((w >> 52) & 0x7ff);
        std::uint64_t m = w & ((std::uint64_t(1) << 52) - 1);
        u128 v = 0;
        if (be != 0x7ff && (be != 0 || m != 0)) {
          int q = -1074;
          if (be != 0) {
            m |= std::uint64_t(1) << 52;
            q = be - 1075;
          }
          const int s = q + frac - e;  // value * 2^(F - e) = m * 2^s < 2^F
          v = s >= 0 ? u128(m) << s : shift_rounded(m, -s, false);
        }
        const u128 mask = (u128(1) << bits) - 1;
        const auto hi = static_cast<std::int64_t>(v >> bits), lo = static_cast<std::int64_t>(v & mask);
        lanes[2 * k] = neg ? -hi : hi;
        lanes[2 * k + 1] = neg ? -lo : lo;
      }
    }
    i = end;
  }
}

void repro_decode(const std::int64_t* lanes, std::size_t first, std::size_t reals, const ReproLayout& l,
                  const std::int16_t* anchors, bool avg, void* out) {
  const RealType rt = real_type(l.real);
  const int bits = l.lane_bits, frac = l.frac_bits();
  std::size_t i = 0;
  while (i < reals) {
    const std::size_t b = (first + i) / kReproBlock;
    const std::size_t end = std::min(reals, (b + 1) * kReproBlock - first);
    const int e = anchors[b] == kNoAnchor ? 0 : anchors[b];
    if (l.real == DataType::Float32 && !avg) {
      // The sum is below 2^50: exact as a double, scaled exactly, rounded
      // once to float (subnormals and overflow as the conversion does).
      const double scale = std::ldexp(1.0, e - bits);
      auto* f = static_cast<float*>(out);
      for (std::size_t k = i; k < end; ++k) f[k] = static_cast<float>(static_cast<double>(lanes[k]) * scale);
    } else {
      for (std::size_t k = i; k < end; ++k) {
        i128 s;
        if (l.lanes == 1) {
          s = lanes[k];
        } else {
          s = (i128(lanes[2 * k]) << bits) + lanes[2 * k + 1];
        }
        store_real(out, k, l.real, round_once(s < 0, magnitude(s), e - frac, avg ? l.n : 1, rt));
      }
    }
    i = end;
  }
}

std::size_t repro_flagged(const std::int16_t* flags, std::size_t blocks, std::size_t* out) {
  std::size_t k = 0;
  for (std::size_t b = 0; b < blocks; ++b)
    if (flags[b]) out[k++] = b;
  return k;
}

namespace {

// Per real of a flagged block: NaN counts 2^42, +inf 2^21, -inf 1 (fewer
// than 2^21 ranks).
constexpr int kNanShift = 42, kPosShift = 21;
constexpr std::int64_t kCountMask = (std::int64_t(1) << 21) - 1;

template <class F>
void each_flagged_real(std::size_t first, std::size_t reals, std::span<const std::size_t> flagged, F&& f) {
  // flagged is sorted: walk the blocks that meet [first, first + reals).
  const std::size_t lo = first, hi = first + reals;
  auto it = std::lower_bound(flagged.begin(), flagged.end(), lo / kReproBlock);
  for (; it != flagged.end() && *it * kReproBlock < hi; ++it) {
    const std::size_t slot = static_cast<std::size_t>(it - flagged.begin());
    const std::size_t from = std::max(lo, *it * kReproBlock), to = std::min(hi, (*it + 1) * kReproBlock);
    for (std::size_t g = from; g < to; ++g) f(g - first, slot * kReproBlock + g % kReproBlock);
  }
}

}  // namespace

void repro_codes(const void* x, std::size_t first, std::size_t reals, const ReproLayout& l,
                 std::span<const std::size_t> flagged, std::int64_t* codes) {
  each_flagged_real(first, reals, flagged, [&](std::size_t k, std::size_t at) {
    const double v = load_real(x, k, l.real);
    if (std::isnan(v)) {
      codes[at] = std::int64_t(1) << kNanShift;
    } else if (std::isinf(v)) {
      codes[at] = v > 0 ? std::int64_t(1) << kPosShift : 1;
    }
  });
}

void repro_apply_codes(const std::int64_t* codes, std::span<const std::size_t> flagged, std::size_t first,
                       std::size_t reals, const ReproLayout& l, void* out) {
  each_flagged_real(first, reals, flagged, [&](std::size_t k, std::size_t at) {
    const std::int64_t c = codes[at];
    if (c == 0) return;
    const bool nan = (c >> kNanShift) != 0, pos = ((c >> kPosShift) & kCountMask) != 0, negi = (c & kCountMask) != 0;
    const double inf = std::numeric_limits<double>::infinity();
    store_real(out, k, l.real, nan || (pos && negi) ? std::numeric_limits<double>::quiet_NaN() : pos ? inf : -inf);
  });
}

}  // namespace tutti::detail
