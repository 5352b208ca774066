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
  int p = 1;     // participants in the exchange rounds
  int rem = 0;   // n - p
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
