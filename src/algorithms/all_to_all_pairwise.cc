// Pairwise-exchange all_to_all: every receive is posted first, then the
// sends go out in pairwise order (step s: to r+s), so that no two ranks hit
// the same destination at once and every message lands in place.
//
// Blocks larger than the chunk (ctx.chunk_bytes: 256 KiB on communicators
// spanning hosts) go in rounds of one piece a peer, the next round posted
// once every message of the round before the last is through: no flow runs
// more than two pieces ahead of the others. With every block whole at
// once, a host's link carries its ranks' flows to every other host, TCP
// shares the links unevenly, and links stand idle while the slowest flows
// finish; in rounds they keep to the link (4 x 2 test-bed hosts at 1 Gbit/s,
// 64 MiB a rank; docs/performance.md, "At scale: the simulator").
//
// A block in pieces is preceded by its size (8 bytes): peers whose counts
// disagree (all_to_all_v) fail with Mismatch naming both sizes, or on a
// message's length where only one of them cuts the block, rather than wait
// for a piece the other never sends. So is a block of 8 bytes, so that a
// receiver that expects 8 bytes never takes a size for its data.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

#include "algorithms/algorithms.h"
#include "patterns/pairwise.h"

namespace tutti::detail {

namespace {

std::size_t pieces_of(std::size_t bytes, std::size_t chunk) { return bytes <= chunk ? 1 : (bytes + chunk - 1) / chunk; }

// Whether a block goes after its size.
bool sized(std::size_t bytes, std::size_t chunk) { return bytes > chunk || bytes == sizeof(std::uint64_t); }

}  // namespace

void all_to_all_pairwise(OpContext& ctx, const char* sendbuf, std::span<const std::size_t> send_bytes,
                         std::span<const std::size_t> send_displs, char* recvbuf,
                         std::span<const std::size_t> recv_bytes, std::span<const std::size_t> recv_displs) {
  const int n = ctx.size, r = ctx.rank;
  if (send_bytes[r] != recv_bytes[r])
    throw Error(ErrorKind::InvalidArgument, ctx.where() + "sends " + std::to_string(send_bytes[r]) +
                                                " bytes to itself but expects " + std::to_string(recv_bytes[r]));
  if (send_bytes[r]) std::memmove(recvbuf + recv_displs[r], sendbuf + send_displs[r], send_bytes[r]);
  const std::size_t chunk = std::max<std::size_t>(ctx.chunk_bytes, 1);
  std::size_t rounds = 1;
  bool any_sized = false;
  for (int p = 0; p < n; ++p)
    if (p != r) {
      rounds = std::max({rounds, pieces_of(send_bytes[p], chunk), pieces_of(recv_bytes[p], chunk)});
      any_sized = any_sized || sized(send_bytes[p], chunk) || sized(recv_bytes[p], chunk);
    }
  // The sizes of the blocks that go after theirs, as this rank sends them and as its peers say they send theirs.
  std::vector<std::uint64_t> mine, told;
  if (any_sized) {
    mine.assign(send_bytes.begin(), send_bytes.end());
    told.assign(static_cast<std::size_t>(n), 0);
  }
  // Two rounds in flight: round j is posted once round j - 2 is through.
  // The sizes are checked before round 0's pieces are waited for.
  std::vector<Pending> live[2], sizes;
  auto retire = [&](std::size_t j) {
    if (j == 0 && !sizes.empty()) {
      ctx.wait_all(sizes);
      for (int p = 0; p < n; ++p)
        if (p != r && sized(recv_bytes[p], chunk) && told[p] != recv_bytes[p])
          throw Error(ErrorKind::Mismatch, ctx.where() + "rank " + std::to_string(p) + " sends this rank " +
                                               std::to_string(told[p]) + " bytes, where this rank expects " +
                                               std::to_string(recv_bytes[p]));
    }
    ctx.wait_all(live[j % 2]);
  };
  for (std::size_t j = 0; j < rounds; ++j) {
    if (j >= 2) retire(j - 2);
    std::vector<Pending>& round = live[j % 2];
    round.reserve(2 * static_cast<std::size_t>(n));
    for (int s = 1; s < n; ++s) {
      const int from = pairwise::recv_from(r, s, n);
      const std::size_t k = pieces_of(recv_bytes[from], chunk), off = j * chunk;
      if (j >= k) continue;
      if (j == 0 && sized(recv_bytes[from], chunk))
        sizes.push_back(ctx.irecv(from, 0, &told[from], sizeof(std::uint64_t)));
      round.push_back(ctx.irecv(from, 0, recvbuf + recv_displs[from] + off, std::min(chunk, recv_bytes[from] - off)));
    }
    for (int s = 1; s < n; ++s) {
      const int to = pairwise::send_to(r, s, n);
      const std::size_t k = pieces_of(send_bytes[to], chunk), off = j * chunk;
      if (j >= k) continue;
      if (j == 0 && sized(send_bytes[to], chunk)) sizes.push_back(ctx.isend(to, 0, &mine[to], sizeof(std::uint64_t)));
      round.push_back(ctx.isend(to, 0, sendbuf + send_displs[to] + off, std::min(chunk, send_bytes[to] - off)));
    }
  }
  if (rounds >= 2) retire(rounds - 2);
  retire(rounds - 1);
}

}  // namespace tutti::detail
