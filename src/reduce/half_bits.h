#pragma once
// Inline float16/bfloat16 <-> float32 conversions on bit patterns.
//
// They are written without branches (every path is computed, then selected)
// so that GCC vectorizes loops of them at -O3; reduce.cc relies on that for
// its portable 16-bit paths. The public, out-of-line versions are the
// half_to_float() family in reduce.h. Rounding is to nearest, ties to even,
// independent of the FPU rounding mode except for the subnormal-half path,
// which uses an addition (correct under the default round-to-nearest mode).

#include <bit>
#include <cstdint>

namespace tutti::detail {

// c ? a : b through masks: GCC leaves `?:` chains here as branches ("control
// flow in loop") and then does not vectorize, but it does vectorize this.
inline std::uint32_t half_bits_select(bool c, std::uint32_t a, std::uint32_t b) {
  const std::uint32_t m = 0u - static_cast<std::uint32_t>(c);
  return (a & m) | (b & ~m);
}

inline float half_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = (static_cast<std::uint32_t>(h) & 0x8000u) << 16;
  const std::uint32_t shifted = (static_cast<std::uint32_t>(h) & 0x7fffu) << 13;  // exponent+mantissa in float position
  const std::uint32_t exp = shifted & (0x7c00u << 13);
  const std::uint32_t normal = shifted + ((127u - 15u) << 23);  // rebias the exponent
  // Inf/NaN: exponent all ones in half -> all ones in float (payload kept).
  const std::uint32_t infnan = normal + ((128u - 16u) << 23);
  // Zero/subnormal: build 2^-14 * (1 + m/1024), subtract 2^-14: exactly m * 2^-24.
  const float sub_f = std::bit_cast<float>(normal + (1u << 23)) - std::bit_cast<float>(113u << 23);
  const std::uint32_t sub = std::bit_cast<std::uint32_t>(sub_f);
  const std::uint32_t mag = half_bits_select(exp == (0x7c00u << 13), infnan, half_bits_select(exp == 0, sub, normal));
  return std::bit_cast<float>(mag | sign);
}

inline std::uint16_t float_to_half_bits(float f) {
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = u & 0x80000000u;
  u ^= sign;
  // NaN keeps its top payload bits and becomes quiet (like F16C's vcvtps2ph);
  // anything at or above 65520 (the midpoint past the largest half) is inf.
  const std::uint32_t infnan = half_bits_select(u > 0x7f800000u, 0x7e00u | ((u >> 13) & 0x3ffu), 0x7c00u);
  // |f| < 2^-14 gives a subnormal half: adding 0.5 aligns the half's ulp
  // (2^-24) with the float's ulp at 0.5, so the FPU does the even rounding.
  const float sub_f = std::bit_cast<float>(u) + 0.5f;
  const std::uint32_t sub = std::bit_cast<std::uint32_t>(sub_f) - std::bit_cast<std::uint32_t>(0.5f);
  // Normal: rebias, add 0xfff plus the lowest kept bit (ties to even), drop 13 bits.
  // A carry out of the mantissa correctly bumps the exponent (up to inf).
  const std::uint32_t odd = (u >> 13) & 1u;
  const std::uint32_t normal = (u - ((127u - 15u) << 23) + 0xfffu + odd) >> 13;
  const std::uint32_t mag =
      half_bits_select(u >= (143u << 23), infnan, half_bits_select(u < (113u << 23), sub, normal));
  return static_cast<std::uint16_t>(mag | (sign >> 16));
}

inline float bfloat16_bits_to_float(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

inline std::uint16_t float_to_bfloat16_bits(float f) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  // Ties to even: add 0x7fff plus the lowest kept bit, drop 16 bits. Carries
  // run into the exponent (up to inf) but never into the sign. A NaN is
  // truncated instead (so the carry cannot turn it into inf) and made quiet.
  // Masks rather than `?:` keep this a short vector sequence (f != f is one
  // compare instruction).
  const std::uint32_t nan_mask = 0u - static_cast<std::uint32_t>(f != f);
  const std::uint32_t bias = (0x7fffu + ((u >> 16) & 1u)) & ~nan_mask;
  return static_cast<std::uint16_t>(((u + bias) >> 16) | (nan_mask & 0x40u));
}

}  // namespace tutti::detail
