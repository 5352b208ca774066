#pragma once
// The wire frame of the TCP transport: a fixed 40-byte header, then the
// payload. All fields little-endian (the host order of every supported CPU).

#include <cstddef>
#include <cstdint>
#include <string>

namespace tutti::detail {

inline constexpr std::uint32_t kFrameMagic = 0x49545554;  // "TUTI"
inline constexpr std::uint16_t kFrameVersion = 1;
// Upper bound on one message; a header claiming more is corrupt.
inline constexpr std::uint64_t kMaxFrameBytes = std::uint64_t(1) << 40;
// flags: a frame without payload that says the sender is shutting down in
// order (its connection closing next is not a failure).
inline constexpr std::uint16_t kFrameGoodbye = 1;
// flags: "rank <tag> is lost", the reason as payload (at most
// kMaxNoticeBytes): a rank that sees a peer die tells every other rank, so
// that all fail with that root cause, whatever they were waiting for.
inline constexpr std::uint16_t kFrameLostNotice = 2;
inline constexpr std::uint64_t kMaxNoticeBytes = 1024;
// flags: "communicator <comm_id> failed on the sender" (tag = the error
// kind, payload = the message, at most kMaxNoticeBytes), so that members
// waiting on other ranks fail with that cause at once.
inline constexpr std::uint16_t kFrameCommFailed = 4;
// flags: a message whose payload does not follow on this connection but is
// split across the peer pair's data connections (TUTTI_SOCKETS_PER_PEER):
// stripe i of every such message goes on data connection i, in the order of
// their headers here (stripe_extents says where each stripe lies).
inline constexpr std::uint16_t kFrameStriped = 8;
// flags: a frame without payload from the rank that opened the pair's
// connections: it has every data connection (TUTTI_SOCKETS_PER_PEER) in
// place, so the receiver may stripe messages to it from now on.
inline constexpr std::uint16_t kFrameLanesReady = 16;

struct FrameHeader {
  std::uint32_t magic = kFrameMagic;
  std::uint16_t version = kFrameVersion;
  std::uint16_t flags = 0;
  std::uint64_t comm_id = 0;
  std::uint64_t tag = 0;
  std::uint64_t bytes = 0;
  std::uint64_t signature = 0;  // op signature; 0 when not checked
};
static_assert(sizeof(FrameHeader) == 40, "frame header is 40 bytes on the wire");

// Returns "" when the header is well formed, else what is wrong with it.
std::string validate_frame_header(const FrameHeader& h);

// The first message on every peer connection, from the connecting side,
// right after authentication (net/auth.h).
inline constexpr std::uint32_t kHelloMagic = 0x4F4C4548;  // "HELO"
struct Hello {
  std::uint32_t magic = kHelloMagic;
  std::uint16_t version = kFrameVersion;
  // Which of the pair's connections this is: (count - 1) << 8 | index.
  // Index 0 (and the only one when count is 1) carries headers and small
  // messages; 1 .. count-1 carry the stripes of large ones.
  std::uint16_t link = 0;
  std::int32_t rank = -1;
  std::int32_t world_size = 0;
  std::uint64_t job_id = 0;  // distinguishes jobs that reuse a store address
};
static_assert(sizeof(Hello) == 24, "hello is 24 bytes on the wire");

inline int hello_link_count(const Hello& h) { return (h.link >> 8) + 1; }
inline int hello_link_index(const Hello& h) { return h.link & 0xff; }
inline std::uint16_t hello_link(int count, int index) { return static_cast<std::uint16_t>(((count - 1) << 8) | index); }

// Where stripe i (0-based, of `stripes`) of a `bytes`-byte striped message
// lies: offset and length. Stripes are equal multiples of 4 KiB but the last;
// some trailing ones are empty when the message is short.
struct StripeExtent {
  std::size_t offset, length;
};
StripeExtent stripe_extent(std::size_t bytes, int stripes, int i);

std::string validate_hello(const Hello& h, int world_size, std::uint64_t job_id);
// What rank `rank` checks of the hello of a peer that connected to it: the
// checks of validate_hello, and that the peer is another rank. "" when the
// hello is acceptable (whether the connection is kept is the transport's
// decision: see Verdict).
std::string check_incoming_hello(const Hello& h, int rank, int world_size, std::uint64_t job_id);

// The accepting side's answer to a hello (connections are made on first use
// from either side; when both sides connect at once, the connection opened by
// the lower rank is kept and the other refused: tcp_transport.h).
inline constexpr std::uint32_t kVerdictMagic = 0x56545554;  // "TUTV"
struct Verdict {
  std::uint32_t magic = kVerdictMagic;
  std::uint32_t accepted = 0;  // 1: kept; 0: refused, the peer's own connection is the pair's; kVerdictLost
};
// Verdict::accepted: refused for good, the connecting rank is lost to this
// one (it stopped answering and was declared lost, or its connection broke).
inline constexpr std::uint32_t kVerdictLost = 2;
static_assert(sizeof(Verdict) == 8, "verdict is 8 bytes on the wire");

}  // namespace tutti::detail
