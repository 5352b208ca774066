#pragma once
// Reduction kernels: every dtype x reduce op, on contiguous arrays.
//
// Avg and PremulSum accumulate as Sum; their extra steps (scale the local
// input first, divide at the end) are separate calls so that algorithms
// apply them exactly once. float16/bfloat16 are converted to float32 for each
// step and rounded back to nearest-even (reduce_many: once for all its inputs). Signed integer arithmetic wraps
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
// out[i] = in[0][i] (op) in[1][i] (op) ... (op) in[n-1][i], in that order.
// float16 and bfloat16 accumulate in float32 and round once at the end
// (where n > 2; a pair rounds once anyway), so out may alias any input;
// other types as reduce_pair then reduce_inplace, out aliasing in[0] or
// in[1] only.
void reduce_many(void* out, const void* const* in, int n, std::size_t count, DataType dtype, ReduceOpKind op);
// buf[i] = buf[i] / n (Avg's final step; integers truncate toward zero).
void divide_by(void* buf, std::size_t count, DataType dtype, int n);
// out[i] = in[i] * scalar (PremulSum's first step); out may alias in. For
// integer types the scalar is integral (validated) and the product wraps.
void scale(void* out, const void* in, std::size_t count, DataType dtype, double scalar);

// The kernels above are built for several instruction-set levels and the
// best one the CPU has is used, unless a lower cap is set (tests and
// benchmarks force each level that way; process-wide, default: no cap).
//  - Baseline: portable loops (x86-64 baseline ISA on x86).
//  - Avx2: AVX2, plus F16C for float16.
//  - Avx512: AVX-512 F/BW/DQ/VL (with AVX2 and F16C also required), float16
//    through the 512-bit vcvtph2ps/vcvtps2ph, bfloat16 by bit operations.
// Every level gives the same bits as Baseline.
enum class ReduceSimdLevel : int { Baseline = 0, Avx2 = 1, Avx512 = 2 };
const char* reduce_simd_level_name(ReduceSimdLevel level);
// Whether this CPU (and build) can run the kernels of `level`.
bool reduce_simd_level_supported(ReduceSimdLevel level);
// The level reduce_pair and reduce_inplace use now: the highest supported
// level not above the cap.
ReduceSimdLevel reduce_simd_level();
// Caps the level (e.g. Avx2 forces the AVX2 kernels on an AVX-512 CPU).
void set_reduce_simd_max_level(ReduceSimdLevel max);

// Older switch: true = no cap (the default), false = cap at Baseline.
// reduce_simd_active() says whether a level above Baseline is in use.
bool reduce_simd_active();
void set_reduce_simd_allowed(bool allowed);

float half_to_float(std::uint16_t h);
std::uint16_t float_to_half(float f);  // round to nearest even; NaN stays NaN
float bfloat16_to_float(std::uint16_t b);
std::uint16_t float_to_bfloat16(float f);  // round to nearest even; NaN stays NaN

}  // namespace tutti::detail
