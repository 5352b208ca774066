#pragma once
// Binomial trees rooted at `root`, over virtual ranks v = (r - root) mod n.
// parent(v) clears v's lowest set bit; children(v) are v + 2^k (< n) for
// every 2^k below v's lowest set bit (below n for the root), listed in
// decreasing k: the child with the deepest subtree first, so a broadcast
// feeds the longest path first and a reduce waits on it last-arriving-first.

#include <vector>

namespace tutti::detail::binomial {

inline int to_virtual(int r, int root, int n) { return ((r - root) % n + n) % n; }
inline int to_real(int v, int root, int n) { return (v + root) % n; }

inline int lowbit(int v) { return v & -v; }

// Parent of real rank r, or -1 for the root.
inline int parent(int r, int root, int n) {
  int v = to_virtual(r, root, n);
  if (v == 0) return -1;
  return to_real(v - lowbit(v), root, n);
}

// Children of real rank r, largest subtree first.
inline std::vector<int> children(int r, int root, int n) {
  int v = to_virtual(r, root, n);
  int limit = v == 0 ? n : lowbit(v);
  std::vector<int> out;
  for (int m = 1; m < limit && v + m < n; m <<= 1) out.insert(out.begin(), to_real(v + m, root, n));
  return out;
}

// The subtree of virtual rank v is the virtual ranks [v, subtree_end(v, n)):
// a binomial scatter hands v exactly the blocks of that range.
inline int subtree_end(int v, int n) {
  int e = v == 0 ? n : v + lowbit(v);
  return e < n ? e : n;
}

}  // namespace tutti::detail::binomial
