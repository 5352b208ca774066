#pragma once
// Reproducible sums (TUTTI_REPRODUCIBLE, Communicator::set_reproducible;
// docs/algorithms.md, "Reproducible sums"): the exact sum of the ranks'
// contributions, rounded once. Its bits depend on the multiset of the
// contributions alone: not on an algorithm, a medium, a chunking, the order
// of arrival or which rank holds which contribution.
//
// The engine brings every contribution of an element to one rank (an
// all_to_all of slices, or an all_gather where the message is small) and
// that rank sums them here; the results go back by all_gather (or gather).
// Per element, of n contributions:
//   - with AVX2, float32, float16 and bfloat16 eight elements a step: a sum
//     in double, exact where the exponents lie close enough
//     (sum_avx2 in reproducible.cc says when), rounded once;
//   - fast path: with e the least exponent such that every finite |x| <
//     2^e, each x is an integer multiple of 2^(e - L) where its last bit is
//     not below that (L = 50 - ceil(log2 n) for the 16- and 32-bit types,
//     125 - ceil(log2 n) for float64): the integers sum exactly (int64,
//     int128) and the sum is rounded once;
//   - otherwise (a contribution's last bit below 2^(e - L)): the exact sum
//     in a fixed-point integer as wide as the type's whole range, rounded
//     once.
// Rounded to nearest, ties to even, subnormals included, past the type's
// range to an infinity; Avg divides the exact sum by n before that one
// rounding. NaN where any contribution is NaN or both infinities come, else
// the infinity that comes; a zero sum is -0 where every contribution is -0,
// else +0 (as IEEE addition gives in any order).

#include <cstddef>

#include "tutti/types.h"

namespace tutti::detail {

// Reduce kinds inside the library (never a user's): the reproducible Sum
// and Avg, which reduce_many computes with repro_sum, so that the
// shared-memory collectives, which give every input of an element to one
// reduce_many call, run the reproducible mode as they are.
inline constexpr ReduceOpKind kReproSum = static_cast<ReduceOpKind>(0x40);
inline constexpr ReduceOpKind kReproAvg = static_cast<ReduceOpKind>(0x41);
inline bool is_repro(ReduceOpKind k) { return k == kReproSum || k == kReproAvg; }

// Whether the reproducible mode covers (dtype, op): Sum and Avg of float16,
// bfloat16, float32, float64, complex64 and complex128.
bool reproducible_covers(DataType dtype, ReduceOpKind op);

// out[i] = in[0][i] + ... + in[n-1][i] exactly (Avg: divided by n),
// rounded once to the dtype (complex: each part), for `count` elements.
// out may be any of the inputs.
void repro_sum(void* out, const void* const* in, int n, std::size_t count, DataType dtype, bool avg);

}  // namespace tutti::detail
