// Dissemination barrier: ceil(log2 n) rounds of empty messages; after round
// k every rank has heard, transitively, from 2^(k+1) ranks.
#include "algorithms/algorithms.h"
#include "patterns/dissemination.h"

namespace tutti::detail {

void barrier_dissemination(OpContext& ctx) {
  const int n = ctx.size, r = ctx.rank;
  for (int k = 0; k < dissemination::rounds(n); ++k) {
    ctx.sendrecv(dissemination::to(r, k, n), nullptr, 0, dissemination::from(r, k, n), nullptr, 0,
                 static_cast<std::uint32_t>(k));
  }
}

}  // namespace tutti::detail
