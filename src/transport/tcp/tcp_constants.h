#pragma once
// The TCP transport's constants and small helpers, shared by its three
// files: tcp_transport.cc (the Transport interface, matching and delivery),
// tcp_connection.cc (frames in and out of each connection) and
// tcp_progress.cc (the progress thread, driving waiters, parking).
// Internal to src/transport/tcp/.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace tutti::detail::tcp {

inline constexpr std::uint32_t kWakeIndex = 0xffffffffu;
inline constexpr std::uint32_t kListenIndex = 0xfffffffeu;
// epoll data of a connection: the peer's rank in the low 24 bits, above them
// 0 for the header connection or 1 + the index of a data connection.
inline constexpr int kLaneShift = 24;
inline std::uint32_t epoll_index(int peer, std::size_t lane_plus_one) {
  return static_cast<std::uint32_t>(peer) | static_cast<std::uint32_t>(lane_plus_one << kLaneShift);
}
// A connection being made: kHandshakeLane above, the handshake's number below.
inline constexpr std::uint32_t kHandshakeLane = 0xfe;
inline constexpr std::uint32_t kHandshakeIds = 1u << kLaneShift;
// How long a connection that has not said who it is may take to do so.
inline constexpr auto kStrangerBudget = std::chrono::seconds(10);
// How long after its connection breaks a peer is reported lost (lose_conn).
inline constexpr auto kLossHoldOff = std::chrono::milliseconds(250);
// How long a transport being destroyed waits for connections still being
// made to carry the loss notices queued on them.
inline constexpr auto kNoticeGrace = std::chrono::milliseconds(500);
// How often connections being made are checked against their deadline.
inline constexpr auto kConnectCheck = std::chrono::milliseconds(100);
// Bytes one connection may read per readiness event before others get a turn.
inline constexpr std::size_t kReadBudget = 8u << 20;
// An unexpected message's buffer is allocated up to this size when its
// header arrives; a larger one grows as its bytes do, so a header's claim
// alone never reserves more.
inline constexpr std::size_t kEagerUnexpectedBytes = 64u << 20;
// How long a waiting caller looks for its message without sleeping (drive).
inline constexpr auto kDriveSpin = std::chrono::microseconds(100);
// Receives up to this size are read by their waiter (drive).
inline constexpr std::size_t kDriveMaxBytes = 64u << 10;
// What one read of a connection may bring beyond the frame part it is for.
inline constexpr std::size_t kStageBytes = 4096;
// Buffers of delivered unexpected messages kept for the next ones: at most
// this many bytes and buffers (small ones cost little to allocate anew).
inline constexpr std::size_t kSpareBytes = 64u << 20;
inline constexpr std::size_t kSpareBuffers = 1024;
// Flow control (tcp_transport.h): a peer is held once its early messages
// weigh this much (payload and kEarlyOverhead each) and number at least
// kHoldMessages, and read again once a receive needs it or they weigh half.
inline constexpr std::size_t kHoldBytes = 4u << 20;
inline constexpr std::size_t kHoldMessages = 16;
inline constexpr std::size_t kEarlyOverhead = 256;
// How often drivers look at parked connections, and how often the progress
// thread does (and checks that drivers still run) while any is parked.
inline constexpr auto kLook = std::chrono::milliseconds(1);
inline constexpr auto kTick = std::chrono::milliseconds(10);

inline std::string errno_text(int err) { return std::strerror(err); }

}  // namespace tutti::detail::tcp
