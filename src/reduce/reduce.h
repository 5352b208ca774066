#pragma once
// Reduction kernels: every dtype x reduce op, on contiguous arrays.
//
// Avg and PremulSum accumulate as Sum; their extra steps (scale the local
// input first, divide at the end) are separate calls so that algorithms
// apply them exactly once. float16/bfloat16 are converted to float32 for each
// step and rounded back to nearest-even. Signed integer arithmetic wraps
// (two's complement), so results are exact and order-independent. Bool: Sum,
// Max, BOr = logical or; Product, Min, BAnd = logical and; BXor = logical xor.
// The caller validates the (dtype, op) pair with reduce_op_invalid_reason()
// first; these functions assume it is valid.

#include <cstddef>
#include <cstdint>

#include "tutti/types.h"

namespace tutti::detail {

// dst[i] = dst[i] (op) src[i]
void reduce_inplace(void* dst, const void* src, std::size_t count, DataType dtype, ReduceOpKind op);
// out[i] = a[i] (op) b[i]; out may alias a or b.
void reduce_pair(void* out, const void* a, const void* b, std::size_t count, DataType dtype, ReduceOpKind op);
// buf[i] = buf[i] / n (Avg's final step; integers truncate toward zero).
void divide_by(void* buf, std::size_t count, DataType dtype, int n);
// out[i] = in[i] * scalar (PremulSum's first step); out may alias in. For
// integer types the scalar is integral (validated) and the product wraps.
void scale(void* out, const void* in, std::size_t count, DataType dtype, double scalar);

// The kernels above have baseline and AVX2(+F16C) versions; the AVX2 ones
// are used when the CPU has them and they are allowed (the default). Tests
// turn them off to check the portable loops too; process-wide.
bool reduce_simd_active();
void set_reduce_simd_allowed(bool allowed);

float half_to_float(std::uint16_t h);
std::uint16_t float_to_half(float f);  // round to nearest even; NaN stays NaN
float bfloat16_to_float(std::uint16_t b);
std::uint16_t float_to_bfloat16(float f);  // round to nearest even; NaN stays NaN

}  // namespace tutti::detail
