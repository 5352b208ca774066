#pragma once
// Pipelined chain rooted at `root`: root, root+1, ..., root-1 (mod n); each
// rank receives every chunk from its predecessor and forwards it to its
// successor.

namespace tutti::detail::chain {

// -1 for the root.
inline int prev(int r, int root, int n) { return r == root ? -1 : (r - 1 + n) % n; }
// -1 for the last rank of the chain.
inline int next(int r, int root, int n) { return (r + 1) % n == root ? -1 : (r + 1) % n; }

}  // namespace tutti::detail::chain
