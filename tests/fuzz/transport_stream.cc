// Fuzzes what the TCP transport reads from a peer: the hello that the
// accepting rank checks (check_incoming_hello, as connect_mesh does), then
// the peer's frame stream, read by a real TcpTransport through a socket pair:
// its progress thread parses the 40-byte headers, validates them
// (validate_frame_header), matches them to posted receives or buffers them,
// and fails the connection on a corrupt header or at the end of the stream.
//
// Input: byte 0 picks the requests posted before and after the stream (bits
// below); bytes 1..24 are rank 1's hello to rank 0 (world of 2, job 42); the
// rest is what rank 1 sends afterwards.
//
// Inputs in which some header with the frame magic claims more than 1 MiB
// (4 MiB in all) are skipped: the transport buffers an unexpected message
// at its full claimed size (up to kMaxFrameBytes), which is by design and
// would only trip the fuzzer's memory limit.
//
// Beyond memory and UB errors (ASan, UBSan), it checks that the end of the
// stream always fails the connection (no hang), that every receive posted
// for rank 1 is finished then, and that completed receives report the
// right source and length.
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "common/log.h"
#include "fuzz_check.h"
#include "net/socket.h"
#include "transport/tcp/frame.h"
#include "transport/tcp/tcp_transport.h"

namespace d = tutti::detail;

namespace {

constexpr std::uint64_t kJob = 42;
constexpr std::uint64_t kMaxClaim = 1 << 20;
constexpr std::uint64_t kMaxClaims = 4 << 20;

// True when no header-looking bytes claim too much (see above).
bool claims_are_small(const std::uint8_t* s, std::size_t len) {
  std::uint64_t total = 0;
  for (std::size_t i = 0; i + sizeof(d::FrameHeader) <= len; ++i) {
    d::FrameHeader h;
    std::memcpy(&h, s + i, sizeof h);
    if (h.magic != d::kFrameMagic) continue;
    if (h.bytes > kMaxClaim) return false;
    total += h.bytes;
  }
  return total <= kMaxClaims;
}

struct Posted {
  d::RequestPtr req;
  std::vector<char> buf;
  int peer;
};

Posted post_recv(d::TcpTransport& t, int peer, std::uint64_t comm, std::uint64_t tag, std::size_t len) {
  Posted p;
  p.buf.resize(len);
  p.peer = peer;
  p.req = t.post_recv(peer, comm, tag, p.buf.data(), len);
  return p;
}

void check_finished(const Posted& p) {
  if (!p.req->done()) return;
  if (p.req->ok()) {
    FUZZ_CHECK(p.req->bytes() == p.buf.size());
    FUZZ_CHECK(p.req->source() == 1 || p.req->source() == 0);
    if (p.peer != d::kAnyPeer) FUZZ_CHECK(p.req->source() == p.peer);
  } else {
    FUZZ_CHECK(!p.req->error_message().empty());
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  d::set_log_level(d::LogLevel::Off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1 + sizeof(d::Hello)) return 0;
  const std::uint8_t config = data[0];
  d::Hello hello;
  std::memcpy(&hello, data + 1, sizeof hello);                        // the wire layout is the struct's
  if (!d::check_incoming_hello(hello, 0, 2, kJob).empty()) return 0;  // connection refused
  const std::uint8_t* stream = data + 1 + sizeof hello;
  const std::size_t len = size - 1 - sizeof hello;
  if (!claims_are_small(stream, len)) return -1;

  int sv[2];
  FUZZ_CHECK(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  d::Fd peer_end(sv[1]);
  std::vector<d::Fd> peers(2);
  peers[1] = d::Fd(sv[0]);
  std::vector<Posted> before, after;
  {
    d::TcpTransport t(0, 2, std::move(peers), 0);
    // Posted before the stream: matched as headers arrive.
    if (config & 1) before.push_back(post_recv(t, 1, 1, 1, 16));
    if (config & 2) before.push_back(post_recv(t, d::kAnyPeer, 1, 2, 0));
    if (config & 4) {
      before.push_back(post_recv(t, 1, 2, 1, 64));
      t.abort_comm(2, tutti::ErrorKind::Aborted, "aborted by the fuzzer");
    }
    if (config & 8) before.push_back(post_recv(t, 1, 1, 1, 8));
    std::vector<char> self(24, 'x');
    if (config & 16) t.post_send(0, 1, 3, self.data(), self.size());  // unexpected message from self

    std::size_t off = 0;
    while (off < len) {
      ssize_t n = ::send(peer_end.get(), stream + off, len - off, MSG_NOSIGNAL);
      if (n <= 0) break;  // the transport closed its end (a corrupt header)
      off += static_cast<std::size_t>(n);
    }
    peer_end.reset();  // end of stream

    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (t.peer_failure(1).empty()) {
      FUZZ_CHECK(std::chrono::steady_clock::now() < deadline);  // the end of the stream went unnoticed
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    for (const Posted& p : before) {
      if (p.peer == 1) FUZZ_CHECK(p.req->done());
      check_finished(p);
    }
    // Posted after the connection failed: served from fully received
    // unexpected messages, else failed at once (rank 1) or left pending (any).
    const std::size_t lens[4] = {0, 8, 16, static_cast<std::size_t>(config >> 5) * 7};
    for (std::uint64_t comm = 1; comm <= 3; ++comm) {
      for (std::uint64_t tag = 1; tag <= 3; ++tag) {
        after.push_back(post_recv(t, (tag & 1) ? 1 : d::kAnyPeer, comm, tag, lens[(comm + tag) % 4]));
        after.push_back(post_recv(t, 0, comm, tag, self.size()));
      }
    }
    for (const Posted& p : after) {
      if (p.peer == 1) FUZZ_CHECK(p.req->done());
      check_finished(p);
    }
  }
  return 0;
}
