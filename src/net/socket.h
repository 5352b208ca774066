#pragma once
// Thin helpers over BSD sockets (IPv4 and IPv6), shared by the store and the
// TCP transport. All functions throw tutti::Error on failure.

#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/completion.h"

namespace tutti::detail {

// An owned file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = o.release();
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

struct SockAddr {
  sockaddr_storage storage{};
  socklen_t len = 0;
  std::string to_string() const;  // "1.2.3.4:80" or "[::1]:80"
  int port() const;
};

// Resolves host (name or literal) and port; prefers IPv4.
SockAddr resolve(const std::string& host, int port);

// Listens on host:port (port 0: any free port). backlog is generous: every
// rank of a job may connect at once.
Fd listen_tcp(const std::string& host, int port, int backlog = 4096);
SockAddr local_address(int fd);
SockAddr peer_address(int fd);
// "1.2.3.4" of "1.2.3.4:80", "::1" of "[::1]:80": an address without its port.
std::string address_only(const std::string& address_and_port);

// Connects, retrying refused/unreachable attempts until `deadline`. The
// returned socket is blocking, with TCP_NODELAY set.
Fd connect_tcp(const SockAddr& addr, TimePoint deadline);

void set_nonblocking(int fd, bool on);
void set_nodelay(int fd);
void set_buffer_sizes(int fd, std::size_t bytes);
void set_cloexec(int fd);

// The congestion control peer connections get for `setting`
// (TUTTI_TCP_CONGESTION): "system" keeps the kernel's default (returns "");
// empty gives reno where the kernel's default is cubic or bbr (on the
// test-bed, bbr's pacing stalled some bursts of collective traffic without
// any loss, and cubic left 1-16 MiB messages slower than reno:
// bench/peers/netbed/compare.sh with
// VARIANTS="bbr=TUTTI_TCP_CONGESTION=bbr;cubic=TUTTI_TCP_CONGESTION=cubic";
// docs/tuning.md "TUTTI_TCP_CONGESTION") and keeps
// any other default; a name is tried on a fresh socket and refused with
// InvalidArgument (naming what the kernel allows) when the kernel does not
// take it.
std::string choose_congestion(const std::string& setting);
// Gives `fd` that congestion control (nothing for "").
void set_congestion(int fd, const std::string& name);
// The congestion control of a TCP socket ("" if it cannot be read).
std::string congestion_of(int fd);

// Blocking full read/write on a blocking socket, bounded by `deadline`
// (uses poll). Throws Timeout past the deadline and PeerLost on EOF/reset;
// `what` names the peer in messages.
void write_full(int fd, const void* buf, std::size_t len, TimePoint deadline, const std::string& what);
void read_full(int fd, void* buf, std::size_t len, TimePoint deadline, const std::string& what);
// Reads at least `least` and at most `most` bytes (what is there beyond
// `least` comes along in the same calls); returns how many.
std::size_t read_at_least(int fd, void* buf, std::size_t least, std::size_t most, TimePoint deadline,
                          const std::string& what);

// The local address of a connection to `host:port` (no packet is sent: a
// UDP connect only picks a route). Used to advertise an address peers can reach.
std::string route_source_address(const std::string& host, int port);

}  // namespace tutti::detail
