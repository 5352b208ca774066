#pragma once
// Bruck's schedules: ceil(log2 n) rounds for any n; in round k (dist = 2^k)
// rank r sends to one peer and receives from another, dist apart.
//
// all_gather: slot i of rank r's scratch ends up holding the block of rank
// (r + i) mod n. Slot 0 starts as r's own block; in round k rank r sends
// slots [0, count(k)) to (r - dist) and receives slots [dist, dist +
// count(k)) from (r + dist), count(k) = min(dist, n - dist).
//
// all_to_all: slot i of rank r starts as r's block for rank (r + i) mod n;
// in round k every slot whose index has bit k set moves to rank r + dist
// (same slot index). A block in slot i thus travels i ranks forward, so on
// arrival slot i of rank d holds the block from rank (d - i) mod n.

namespace tutti::detail::bruck {

inline int rounds(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}
inline int mod(int a, int n) { return ((a % n) + n) % n; }

// all_gather
inline int ag_count(int k, int n) {
  int dist = 1 << k;
  return dist < n - dist ? dist : n - dist;
}
inline int ag_send_to(int r, int k, int n) { return mod(r - (1 << k), n); }
inline int ag_recv_from(int r, int k, int n) { return mod(r + (1 << k), n); }
// The rank whose block ends in slot i of rank r.
inline int ag_slot_owner(int r, int i, int n) { return mod(r + i, n); }

// all_to_all
inline bool a2a_moves(int slot, int k) { return (slot >> k) & 1; }
inline int a2a_send_to(int r, int k, int n) { return mod(r + (1 << k), n); }
inline int a2a_recv_from(int r, int k, int n) { return mod(r - (1 << k), n); }
// Before the rounds: the destination of slot i of rank r.
inline int a2a_initial_dest(int r, int i, int n) { return mod(r + i, n); }
// After the rounds: the source of slot i of rank d.
inline int a2a_final_source(int d, int i, int n) { return mod(d - i, n); }

}  // namespace tutti::detail::bruck
