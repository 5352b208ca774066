#include "net/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <thread>

#include "tutti/error.h"

namespace tutti::detail {
namespace {

[[noreturn]] void throw_errno(ErrorKind kind, const std::string& what, int err) {
  throw Error(kind, what + ": " + std::strerror(err));
}

int remaining_ms(TimePoint deadline) {
  auto now = Clock::now();
  if (now >= deadline) return 0;
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1;
  return ms > 1000000 ? 1000000 : static_cast<int>(ms);
}

}  // namespace

void Fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

std::string SockAddr::to_string() const {
  char host[INET6_ADDRSTRLEN] = {0};
  if (storage.ss_family == AF_INET) {
    auto* a = reinterpret_cast<const sockaddr_in*>(&storage);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    return std::string(host) + ":" + std::to_string(ntohs(a->sin_port));
  }
  if (storage.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<const sockaddr_in6*>(&storage);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    std::string out = "[";
    out += host;
    out += "]:";
    out += std::to_string(ntohs(a->sin6_port));
    return out;
  }
  return "(unknown address)";
}

int SockAddr::port() const {
  if (storage.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
  if (storage.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  return -1;
}

std::string address_only(const std::string& a) {
  const auto colon = a.rfind(':');
  std::string host = colon == std::string::npos ? a : a.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return host;
}

SockAddr resolve(const std::string& host_in, int port) {
  // getaddrinfo takes "70000" as port 4464: a port out of range is refused.
  if (port < 0 || port > 65535)
    throw Error(ErrorKind::InvalidArgument,
                "port " + std::to_string(port) + " of " + host_in + " is not a TCP port (0 to 65535)");
  std::string host = host_in;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_ADDRCONFIG;
  if (host.empty()) hints.ai_flags |= AI_PASSIVE;
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0 || !res) {
    // AI_ADDRCONFIG hides loopback-only setups; retry without it.
    hints.ai_flags &= ~AI_ADDRCONFIG;
    rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
  }
  if (rc != 0 || !res)
    throw Error(ErrorKind::InvalidArgument, "cannot resolve address '" + host + "': " + gai_strerror(rc));
  const addrinfo* pick = res;
  for (const addrinfo* p = res; p; p = p->ai_next) {
    if (p->ai_family == AF_INET) {
      pick = p;
      break;
    }
  }
  SockAddr out;
  std::memcpy(&out.storage, pick->ai_addr, pick->ai_addrlen);
  out.len = pick->ai_addrlen;
  freeaddrinfo(res);
  return out;
}

Fd listen_tcp(const std::string& host, int port, int backlog) {
  SockAddr addr = resolve(host == "0.0.0.0" ? std::string("0.0.0.0") : host, port);
  Fd fd(::socket(addr.storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) throw_errno(ErrorKind::Internal, "socket()", errno);
  int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr.storage), addr.len) != 0)
    throw_errno(ErrorKind::InvalidArgument, "cannot listen on " + addr.to_string(), errno);
  if (::listen(fd.get(), backlog) != 0) throw_errno(ErrorKind::Internal, "listen() on " + addr.to_string(), errno);
  return fd;
}

SockAddr local_address(int fd) {
  SockAddr a;
  a.len = sizeof a.storage;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a.storage), &a.len) != 0)
    throw_errno(ErrorKind::Internal, "getsockname()", errno);
  return a;
}

SockAddr peer_address(int fd) {
  SockAddr a;
  a.len = sizeof a.storage;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a.storage), &a.len) != 0) a.len = 0;
  return a;
}

Fd connect_tcp(const SockAddr& addr, TimePoint deadline) {
  int last_err = 0;
  auto backoff = std::chrono::milliseconds(1);
  while (true) {
    Fd fd(::socket(addr.storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd.valid()) throw_errno(ErrorKind::Internal, "socket()", errno);
    int rc = ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr.storage), addr.len);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd.get(), POLLOUT, 0};
      int pr = ::poll(&p, 1, remaining_ms(deadline));
      if (pr == 1) {
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
        rc = err == 0 ? 0 : -1;
        errno = err;
      } else {
        rc = -1;
        errno = ETIMEDOUT;
      }
    }
    if (rc == 0) {
      set_nonblocking(fd.get(), false);
      set_nodelay(fd.get());
      return fd;
    }
    last_err = errno;
    if (Clock::now() >= deadline)
      throw Error(ErrorKind::Timeout,
                  "Timed out connecting to " + addr.to_string() + " (last error: " + std::strerror(last_err) + ")");
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(100));
  }
}

void set_nonblocking(int fd, bool on) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  flags = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  ::fcntl(fd, F_SETFL, flags);
}

void set_nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void set_buffer_sizes(int fd, std::size_t bytes) {
  if (bytes == 0) return;
  int v = bytes > (1u << 30) ? (1 << 30) : static_cast<int>(bytes);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof v);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof v);
}

std::string congestion_of(int fd) {
  char name[16] = {};
  socklen_t len = sizeof name - 1;
  if (::getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) != 0) return "";
  return std::string(name, ::strnlen(name, len));
}

namespace {
bool try_congestion(int fd, const std::string& name) {
  return ::setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name.data(), static_cast<socklen_t>(name.size())) == 0;
}
}  // namespace

std::string choose_congestion(const std::string& setting) {
  if (setting == "system") return "";
  Fd probe(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!probe.valid()) throw Error(ErrorKind::Internal, "socket: " + std::string(std::strerror(errno)));
  if (setting.empty()) {
    // Replaces the two general-purpose defaults only: another one (dctcp,
    // ...) was chosen for its network.
    const std::string system = congestion_of(probe.get());
    if (system != "bbr" && system != "cubic") return "";
    return try_congestion(probe.get(), "reno") ? "reno" : "";
  }
  if (try_congestion(probe.get(), setting)) return setting;
  const std::string why = std::strerror(errno);
  std::string allowed;
  std::ifstream in("/proc/sys/net/ipv4/tcp_allowed_congestion_control");
  std::getline(in, allowed);
  throw Error(ErrorKind::InvalidArgument, "TUTTI_TCP_CONGESTION: the kernel refused '" + setting + "' (" + why + ")" +
                                              (allowed.empty() ? std::string() : "; allowed here: " + allowed) +
                                              " (or 'system' for its default)");
}

void set_congestion(int fd, const std::string& name) {
  if (!name.empty()) try_congestion(fd, name);
}

void set_cloexec(int fd) { ::fcntl(fd, F_SETFD, ::fcntl(fd, F_GETFD) | FD_CLOEXEC); }

void write_full(int fd, const void* buf, std::size_t len, TimePoint deadline, const std::string& what) {
  const char* p = static_cast<const char*>(buf);
  while (len > 0) {
    ssize_t n = ::send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      len -= static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd pf{fd, POLLOUT, 0};
      int ms = remaining_ms(deadline);
      if (ms == 0 || ::poll(&pf, 1, ms) == 0) throw Error(ErrorKind::Timeout, "Timed out writing to " + what);
      continue;
    }
    throw_errno(ErrorKind::PeerLost, "connection to " + what + " failed while writing", errno);
  }
}

void read_full(int fd, void* buf, std::size_t len, TimePoint deadline, const std::string& what) {
  read_at_least(fd, buf, len, len, deadline, what);
}

std::size_t read_at_least(int fd, void* buf, std::size_t least, std::size_t most, TimePoint deadline,
                          const std::string& what) {
  char* p = static_cast<char*>(buf);
  std::size_t got = 0;
  while (got < least) {
    ssize_t n = ::recv(fd, p + got, most - got, MSG_DONTWAIT);
    if (n > 0) {
      got += static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0) throw Error(ErrorKind::PeerLost, "connection to " + what + " closed by the peer");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      pollfd pf{fd, POLLIN, 0};
      int ms = remaining_ms(deadline);
      if (ms == 0 || ::poll(&pf, 1, ms) == 0) throw Error(ErrorKind::Timeout, "Timed out reading from " + what);
      continue;
    }
    throw_errno(ErrorKind::PeerLost, "connection to " + what + " failed while reading", errno);
  }
  return got;
}

std::string route_source_address(const std::string& host, int port) {
  SockAddr dst = resolve(host, port > 0 ? port : 9);
  Fd fd(::socket(dst.storage.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return "127.0.0.1";
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&dst.storage), dst.len) != 0) return "127.0.0.1";
  std::string s = local_address(fd.get()).to_string();
  auto colon = s.rfind(':');
  s = s.substr(0, colon);
  if (s.size() > 2 && s.front() == '[') s = s.substr(1, s.size() - 2);
  return s;
}

}  // namespace tutti::detail
