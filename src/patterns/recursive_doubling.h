#pragma once
// Recursive doubling with the non-power-of-two fold. With p the largest
// power of two <= n and rem = n - p, the first 2*rem ranks pair up: even
// ranks hand their data to the odd neighbour and sit out; the p remaining
// ranks run log2(p) exchange rounds; the odd ranks then hand the result back.

namespace tutti::detail::recursive_doubling {

inline int largest_pow2_le(int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

struct Fold {
  int p = 1;       // participants in the exchange rounds
  int rem = 0;     // n - p
  int vrank = -1;  // rank among participants, -1 if folded out
};

inline Fold fold(int r, int n) {
  Fold f;
  f.p = largest_pow2_le(n);
  f.rem = n - f.p;
  if (r < 2 * f.rem) {
    f.vrank = (r % 2 == 1) ? r / 2 : -1;
  } else {
    f.vrank = r - f.rem;
  }
  return f;
}

// The real rank of participant v.
inline int real_rank(int v, const Fold& f) { return v < f.rem ? 2 * v + 1 : v + f.rem; }

// Partner of participant v at round k (mask = 1 << k), as a real rank.
inline int partner(int v, int mask, const Fold& f) { return real_rank(v ^ mask, f); }

}  // namespace tutti::detail::recursive_doubling

namespace tutti::detail::recursive_doubling {

// With the fold, participant v stands for the real ranks
// [first_real(v), first_real(v + 1)): {2v, 2v+1} for v < rem, {v + rem}
// after; first_real(p) = n. Participant ranges of consecutive participants
// are consecutive real ranks, so a group of participants covers one
// contiguous run of per-rank blocks.
inline int first_real(int v, const Fold& f) { return v < f.rem ? 2 * v : v + f.rem; }

// Recursive halving (reduce-scatter) and doubling (all-gather) over the p
// participants, p a power of two. Participant ranges are [lo, hi).
struct Range {
  int lo = 0, hi = 0;
};
// The aligned group of `size` participants (size a power of two) holding v.
inline Range group(int v, int size) {
  int lo = v & ~(size - 1);
  return {lo, lo + size};
}
// Halving: rounds mask = p/2, p/4, ..., 1. Entering a round, v holds partial
// results for group(v, 2*mask); it keeps group(v, mask), sends the partner
// v ^ mask the other half, group(v ^ mask, mask), and reduces what the
// partner sends for its own half. After the last round v holds the full
// result of its own range.
// Doubling: rounds mask = 1, 2, ..., p/2. Entering a round, v holds
// group(v, mask); it sends that and receives group(v ^ mask, mask).

}  // namespace tutti::detail::recursive_doubling
