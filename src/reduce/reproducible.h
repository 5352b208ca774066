#pragma once
// Reproducible sums (TUTTI_REPRODUCIBLE, Communicator::set_reproducible;
// docs/algorithms.md, "Reproducible sums"): float sums whose bits depend on
// the multiset of the ranks' contributions alone, whatever the algorithm,
// medium, chunking, arrival order or rank order.
//
// Every real (a complex element is two) becomes an integer in fixed point
// at its block's anchor, the integers are summed by an ordinary int64 SUM
// (any algorithm: integer addition is associative and cannot overflow
// here), and each sum becomes the dtype again once, correctly rounded:
//   - blocks are kReproBlock consecutive reals of the whole buffer; a
//     block's anchor is the least e with |v| < 2^e for every finite v of
//     the block on every rank (each rank's repro_scan, then a MAX
//     reduction of the anchors);
//   - v becomes round(v * 2^(F - e)), nearest with ties to even, in
//     `lanes` int64 lanes of `lane_bits` bits each (F = lanes * lane_bits),
//     leaving room for n of them in every lane;
//   - the sum S becomes S * 2^(e - F) (Avg: divided by n), rounded once to
//     the dtype, nearest with ties to even, subnormals included.
// A contribution at most F - p binades below its block's largest (p: the
// dtype's precision in bits) converts exactly, and where all do the result
// is the exact sum correctly rounded. Below, a contribution is rounded to a
// multiple of 2^(e - F) first: each such contribution is off by at most
// 2^(e - F - 1).
// NaN and infinities do not enter the fixed point: a block holding one is
// flagged (the MAX of the flags), and per element of the flagged blocks
// each rank's NaN, +inf and -inf are counted (an int64 SUM of codes): NaN
// where any NaN or both infinities came, else the infinity that came. A
// zero sum is +0 (also where every contribution is -0), a finite sum past
// the dtype's range rounds to an infinity.

#include <cstddef>
#include <cstdint>
#include <span>

#include "tutti/types.h"

namespace tutti::detail {

inline constexpr std::size_t kReproBlock = 64;
inline constexpr std::int16_t kNoAnchor = INT16_MIN;  // a block of zeros (or nothing finite)

// Whether the reproducible mode covers (dtype, op): Sum and Avg of float16,
// bfloat16, float32, float64, complex64 and complex128.
bool reproducible_covers(DataType dtype, ReduceOpKind op);

struct ReproLayout {
  DataType real = DataType::Float32;  // the type of each real: float16, bfloat16, float32 or float64
  int per_element = 1;                // reals per element (2 for complex)
  int lanes = 1;                      // int64 lanes per real
  int lane_bits = 0;                  // bits of each lane; n of them fit in an int64
  int n = 1;                          // the ranks that contribute
  int frac_bits() const { return lanes * lane_bits; }
  // The binades below its block's largest where a contribution converts
  // exactly (F - p).
  int exact_binades() const;
};
// Covered dtypes only; n >= 1.
ReproLayout repro_layout(DataType dtype, int n);

inline std::size_t repro_blocks(std::size_t reals) { return (reals + kReproBlock - 1) / kReproBlock; }

// Raises anchors[b] and flags[b] (b: blocks of the whole buffer) to cover
// the reals of x, which are reals [first, first + reals) of the buffer.
// Start them at kNoAnchor and 0.
void repro_scan(const void* x, std::size_t first, std::size_t reals, const ReproLayout& l, std::int16_t* anchors,
                std::int16_t* flags);
// x's reals (reals [first, first + reals) of the buffer) in fixed point at
// the agreed anchors: lanes[i * l.lanes + k] is real i's lane k (most
// significant first); NaN and infinities give 0.
void repro_encode(const void* x, std::size_t first, std::size_t reals, const ReproLayout& l,
                  const std::int16_t* anchors, std::int64_t* lanes);
// The summed lanes of reals [first, first + reals) into out (reals of the
// dtype), each rounded once; `avg`: divided by l.n.
void repro_decode(const std::int64_t* lanes, std::size_t first, std::size_t reals, const ReproLayout& l,
                  const std::int16_t* anchors, bool avg, void* out);

// The blocks whose flag is set, in order.
std::size_t repro_flagged(const std::int16_t* flags, std::size_t blocks, std::size_t* out);
// Codes of x's NaN and infinities (x: reals [first, first + reals) of the
// buffer) into codes, kReproBlock a flagged block, in the order of
// `flagged` (its positions past the buffer's end stay 0); codes not set
// here stay as they are (start them at 0).
void repro_codes(const void* x, std::size_t first, std::size_t reals, const ReproLayout& l,
                 std::span<const std::size_t> flagged, std::int64_t* codes);
// The summed codes applied to out (reals [first, first + reals) of the
// buffer): NaN or an infinity where any rank's value was one.
void repro_apply_codes(const std::int64_t* codes, std::span<const std::size_t> flagged, std::size_t first,
                       std::size_t reals, const ReproLayout& l, void* out);

}  // namespace tutti::detail
