#pragma once
// Dissemination barrier: in round k rank r signals (r + 2^k) mod n and
// waits for (r - 2^k) mod n; ceil(log2 n) rounds.

namespace tutti::detail::dissemination {

inline int rounds(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}
inline int to(int r, int k, int n) { return (r + (1 << k)) % n; }
inline int from(int r, int k, int n) { return ((r - (1 << k)) % n + n) % n; }

}  // namespace tutti::detail::dissemination
