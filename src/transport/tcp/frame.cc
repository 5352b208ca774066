#include "transport/tcp/frame.h"

#include <algorithm>

namespace tutti::detail {

std::string validate_frame_header(const FrameHeader& h) {
  if (h.magic != kFrameMagic) return "bad frame magic " + std::to_string(h.magic);
  if (h.version != kFrameVersion) return "unsupported frame version " + std::to_string(h.version);
  if (h.bytes > kMaxFrameBytes) return "frame claims " + std::to_string(h.bytes) + " bytes";
  if (h.flags & ~(kFrameGoodbye | kFrameLostNotice | kFrameCommFailed | kFrameStriped | kFrameLanesReady))
    return "unknown frame flags " + std::to_string(h.flags);
  if ((h.flags & kFrameCommFailed) && h.bytes > kMaxNoticeBytes)
    return "communicator-failure notice of " + std::to_string(h.bytes) + " bytes";
  if ((h.flags & kFrameGoodbye) && h.bytes != 0) return "goodbye frame with a payload";
  if ((h.flags & kFrameLanesReady) && (h.bytes != 0 || h.flags != kFrameLanesReady))
    return "malformed data-connections-ready frame";
  if ((h.flags & kFrameStriped) && (h.flags & ~kFrameStriped)) return "striped frame with other flags";
  if ((h.flags & kFrameLostNotice) && h.bytes > kMaxNoticeBytes)
    return "lost-peer notice of " + std::to_string(h.bytes) + " bytes";
  return "";
}

StripeExtent stripe_extent(std::size_t bytes, int stripes, int i) {
  const std::size_t n = static_cast<std::size_t>(stripes);
  const std::size_t per = ((bytes + n - 1) / n + 4095) & ~std::size_t(4095);
  const std::size_t off = std::min(bytes, per * static_cast<std::size_t>(i));
  return {off, std::min(per, bytes - off)};
}

std::string validate_hello(const Hello& h, int world_size, std::uint64_t job_id) {
  if (h.magic != kHelloMagic) return "not a tutti peer (bad hello magic)";
  if (h.version != kFrameVersion) return "peer speaks protocol version " + std::to_string(h.version);
  if (h.world_size != world_size)
    return "peer believes the world has " + std::to_string(h.world_size) + " ranks, this rank " +
           std::to_string(world_size);
  if (h.rank < 0 || h.rank >= world_size) return "peer claims rank " + std::to_string(h.rank);
  if (h.job_id != job_id) return "peer belongs to another job";
  // TUTTI_SOCKETS_PER_PEER data connections and one for headers.
  if (hello_link_count(h) > 17 || hello_link_index(h) >= hello_link_count(h))
    return "peer opens connection " + std::to_string(hello_link_index(h)) + " of " +
           std::to_string(hello_link_count(h));
  return "";
}

std::string check_incoming_hello(const Hello& h, int rank, int world_size, std::uint64_t job_id) {
  std::string bad = validate_hello(h, world_size, job_id);
  if (bad.empty() && h.rank == rank) bad = "peer claims this rank's own number " + std::to_string(rank);
  return bad;
}

}  // namespace tutti::detail
