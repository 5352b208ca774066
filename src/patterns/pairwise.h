#pragma once
// Pairwise exchange for all_to_all: at step s (1 <= s < n) rank r sends to
// (r + s) mod n and receives from (r - s) mod n; every ordered pair meets once.

namespace tutti::detail::pairwise {

inline int send_to(int r, int s, int n) { return (r + s) % n; }
inline int recv_from(int r, int s, int n) { return ((r - s) % n + n) % n; }

}  // namespace tutti::detail::pairwise
