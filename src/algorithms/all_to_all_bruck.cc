// Bruck's all_to_all for equal blocks: ceil(log2 n) rounds instead of n - 1,
// each moving about half of the blocks, so it wins when blocks are small and
// per-message latency dominates. Slot i starts as the block for rank r + i;
// round k packs every slot with bit k set, sends them to r + 2^k and
// unpacks what r - 2^k sends into the same slots. Afterwards slot i holds
// the block from rank r - i.
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"
#include "patterns/bruck.h"

namespace tutti::detail {

void all_to_all_bruck(OpContext& ctx, const char* sendbuf, char* recvbuf, std::size_t block) {
  const int n = ctx.size, r = ctx.rank;
  if (block == 0) return;
  if (n == 1) {
    if (recvbuf != sendbuf) std::memmove(recvbuf, sendbuf, block);
    return;
  }
  // Every block is copied out of sendbuf first, so recvbuf may alias it.
  char* const t = ctx.buffer(0, n * block);
  for (int i = 0; i < n; ++i) std::memcpy(t + i * block, sendbuf + bruck::a2a_initial_dest(r, i, n) * block, block);
  char* const packed = ctx.buffer(1, n * block);
  char* const arrived = ctx.buffer(2, n * block);
  std::vector<int> slots;
  for (int k = 0; k < bruck::rounds(n); ++k) {
    slots.clear();
    for (int i = 1; i < n; ++i)
      if (bruck::a2a_moves(i, k)) slots.push_back(i);
    for (std::size_t j = 0; j < slots.size(); ++j) std::memcpy(packed + j * block, t + slots[j] * block, block);
    const std::size_t len = slots.size() * block;
    ctx.sendrecv(bruck::a2a_send_to(r, k, n), packed, len, bruck::a2a_recv_from(r, k, n), arrived, len,
                 static_cast<std::uint32_t>(k));
    for (std::size_t j = 0; j < slots.size(); ++j) std::memcpy(t + slots[j] * block, arrived + j * block, block);
  }
  for (int i = 0; i < n; ++i) std::memcpy(recvbuf + bruck::a2a_final_source(r, i, n) * block, t + i * block, block);
}

}  // namespace tutti::detail
