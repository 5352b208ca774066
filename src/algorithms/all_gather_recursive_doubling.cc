// Recursive-doubling all_gather: log2(p) rounds, each doubling the blocks a
// rank holds. Non-powers of two fold: the first 2(n - p) ranks pair up, the
// even one handing its block to the odd one, which stands for both and
// hands the even rank the whole result at the end (two extra rounds).
#include <cstring>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/halving_doubling.h"
#include "patterns/recursive_doubling.h"

namespace tutti::detail {

void all_gather_recursive_doubling(OpContext& ctx, std::span<const Block> out, std::size_t es) {
  const int n = ctx.size, r = ctx.rank;
  const std::size_t count = out[r].count, bytes = count * es;
  if (n == 1 || bytes == 0) return;
  namespace rd = recursive_doubling;
  namespace hd = halving_doubling;
  // Work in the caller's buffer when its blocks are laid out one after
  // another, in a scratch copy otherwise (list forms).
  bool contiguous = true;
  for (int b = 1; b < n && contiguous; ++b) contiguous = out[b].ptr == out[0].ptr + b * bytes;
  char* t = out[0].ptr;
  if (!contiguous) {
    t = ctx.buffer(0, n * bytes);
    std::memcpy(t + r * bytes, out[r].ptr, bytes);
  }
  auto finish = [&] {
    if (contiguous) return;
    for (int b = 0; b < n; ++b)
      if (b != r) std::memcpy(out[b].ptr, t + b * bytes, bytes);
  };
  const rd::Fold f = rd::fold(r, n);
  const std::uint32_t kFoldIn = 0, kFoldOut = 1, kDoubling = 2;
  if (f.vrank < 0) {
    hd::send_chunked(ctx, r + 1, kFoldIn, t + r * bytes, bytes);
    // Everything but our own block, which is already in place.
    std::vector<Pending> p;
    hd::post_recv_chunks(ctx, r + 1, kFoldOut, t, r * bytes, p);
    hd::post_recv_chunks(ctx, r + 1, kFoldOut, t + (r + 1) * bytes, (n - r - 1) * bytes, p);
    ctx.wait_all(p);
    finish();
    return;
  }
  if (r < 2 * f.rem) hd::recv_chunked(ctx, r - 1, kFoldIn, t + (r - 1) * bytes, bytes);
  std::vector<std::size_t> offs(f.p + 1);
  for (int v = 0; v <= f.p; ++v) offs[v] = static_cast<std::size_t>(rd::first_real(v, f)) * count;
  hd::all_gather_doubling(ctx, t, offs, es, f, kDoubling);
  if (r < 2 * f.rem) {
    std::vector<Pending> p;
    hd::post_send_chunks(ctx, r - 1, kFoldOut, t, (r - 1) * bytes, p);
    hd::post_send_chunks(ctx, r - 1, kFoldOut, t + r * bytes, (n - r) * bytes, p);
    ctx.wait_all(p);
  }
  finish();
}

}  // namespace tutti::detail
