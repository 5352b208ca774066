#pragma once
// Ring arithmetic: rank r sends to next(r) and receives from prev(r).

namespace tutti::detail::ring {

inline int mod(int a, int n) { return ((a % n) + n) % n; }
inline int next(int r, int n) { return mod(r + 1, n); }
inline int prev(int r, int n) { return mod(r - 1, n); }

// Reduce-scatter ending with block r on rank r: at step s (0 <= s < n-1)
// rank r sends its partial block send_block and receives recv_block.
inline int rs_send_block(int r, int s, int n) { return mod(r - s - 1, n); }
inline int rs_recv_block(int r, int s, int n) { return mod(r - s - 2, n); }

// All-gather starting with block r on rank r: at step s rank r forwards
// send_block and receives recv_block.
inline int ag_send_block(int r, int s, int n) { return mod(r - s, n); }
inline int ag_recv_block(int r, int s, int n) { return mod(r - s - 1, n); }

}  // namespace tutti::detail::ring
