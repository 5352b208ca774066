#include "net/ifname.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/config.h"
#include "common/log.h"
#include "net/socket.h"
#include "tutti/error.h"

namespace tutti::detail {
namespace {

[[noreturn]] void bad_spec(const std::string& spec, const std::string& why) {
  throw Error(ErrorKind::InvalidArgument, "TUTTI_SOCKET_IFNAME='" + spec + "': " + why +
                                              " (expected a list of name prefixes such as 'eth,ib', '^' to exclude, "
                                              "'=' for exact names: '^docker,lo', '=eth0')");
}

bool is_link_local_v6(const in6_addr& a) { return a.s6_addr[0] == 0xfe && (a.s6_addr[1] & 0xc0) == 0x80; }

}  // namespace

bool IfnameFilter::matches(std::string_view ifname) const {
  bool hit = std::any_of(names.begin(), names.end(),
                         [&](const std::string& n) { return exact ? ifname == n : ifname.substr(0, n.size()) == n; });
  return hit != exclude;
}

IfnameFilter parse_ifname_filter(const std::string& spec) {
  IfnameFilter f;
  std::string_view s = spec;
  if (!s.empty() && s.front() == '^') {
    f.exclude = true;
    s.remove_prefix(1);
  }
  if (!s.empty() && s.front() == '=') {
    f.exact = true;
    s.remove_prefix(1);
  }
  while (!s.empty()) {
    std::size_t comma = s.find(',');
    std::string_view item = s.substr(0, comma);
    s = comma == std::string_view::npos ? std::string_view() : s.substr(comma + 1);
    if (item.empty()) continue;
    std::string quoted(1, '\'');
    quoted.append(item);
    quoted.push_back('\'');
    if (item.size() >= IFNAMSIZ) bad_spec(spec, quoted.append(" is longer than an interface name"));
    for (char c : item) {
      if (c == ':' || c == '/' || c == '=' || c == '^' || c == ' ' || c == '\t')
        bad_spec(spec, quoted.append(" is not an interface name"));
    }
    f.names.emplace_back(item);
  }
  if (f.names.empty()) bad_spec(spec, "no interface name given");
  return f;
}

std::vector<InterfaceAddr> list_interfaces() {
  std::vector<InterfaceAddr> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_name == nullptr || !(i->ifa_flags & IFF_UP)) continue;
    const int family = i->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    char buf[INET6_ADDRSTRLEN] = {0};
    if (family == AF_INET) {
      ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof buf);
    } else {
      const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr;
      if (is_link_local_v6(a)) continue;
      ::inet_ntop(AF_INET6, &a, buf, sizeof buf);
    }
    InterfaceAddr ia;
    ia.name = i->ifa_name;
    ia.address = buf;
    ia.ipv6 = family == AF_INET6;
    ia.loopback = (i->ifa_flags & IFF_LOOPBACK) != 0;
    out.push_back(std::move(ia));
  }
  ::freeifaddrs(list);
  return out;
}

std::vector<InterfaceAddr> select_interfaces(const std::vector<InterfaceAddr>& all, const std::string& spec,
                                             bool prefer_ipv6) {
  std::vector<InterfaceAddr> out;
  if (!spec.empty()) {
    IfnameFilter f = parse_ifname_filter(spec);
    for (const InterfaceAddr& a : all)
      if (f.matches(a.name)) out.push_back(a);
  } else {
    for (const InterfaceAddr& a : all)
      if (!a.loopback) out.push_back(a);
    if (out.empty()) out = all;
  }
  std::stable_sort(out.begin(), out.end(), [&](const InterfaceAddr& a, const InterfaceAddr& b) {
    return (a.ipv6 == prefer_ipv6) > (b.ipv6 == prefer_ipv6);
  });
  return out;
}

std::string describe_interfaces(const std::vector<InterfaceAddr>& all) {
  std::string s;
  for (const InterfaceAddr& a : all) s += (s.empty() ? "" : ", ") + a.name + " " + a.address;
  return s.empty() ? "(none is up)" : s;
}

bool is_loopback_host(const std::string& host) {
  if (host == "localhost" || host == "::1" || host == "[::1]") return true;
  in_addr v4{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    if (IN6_IS_ADDR_V4MAPPED(&v6)) return v6.s6_addr[12] == 127;
  }
  return false;
}

std::string socket_ifname_address(const Config& config, bool prefer_ipv6) {
  std::vector<InterfaceAddr> all = list_interfaces();
  std::vector<InterfaceAddr> picked = select_interfaces(all, config.socket_ifname, prefer_ipv6);
  if (picked.empty())
    throw Error(ErrorKind::InvalidArgument,
                "TUTTI_SOCKET_IFNAME='" + config.socket_ifname +
                    "' matches no interface that is up on this host; interfaces: " + describe_interfaces(all));
  TUTTI_LOG(Debug, "TUTTI_SOCKET_IFNAME='" << config.socket_ifname << "' picks " << picked.front().name << " "
                                           << picked.front().address);
  return picked.front().address;
}

PeerAddress choose_peer_address(const Config& config, const std::string& store_host, int store_port) {
  PeerAddress p;
  const bool v6_store = store_host.find(':') != std::string::npos;
  std::string picked;  // the interface address TUTTI_SOCKET_IFNAME picks
  if (!config.socket_ifname.empty()) picked = socket_ifname_address(config, v6_store);

  p.listen = config.listen_addr;
  if (!config.listen_addr_set && !picked.empty()) p.listen = picked;

  p.advertise = config.advertise_addr;
  if (p.advertise.empty()) p.advertise = picked;
  if (p.advertise.empty() && !store_host.empty()) {
    try {
      p.advertise = route_source_address(store_host, store_port);
    } catch (const Error& e) {
      // Only a hint (a caller's store may not be where MASTER_ADDR says):
      // choose as if there were none.
      TUTTI_LOG(Info, "cannot route to the store's host " << store_host << " (" << e.message()
                                                          << "); choosing the address to advertise without it");
      p.advertise.clear();
    }
    if (!p.advertise.empty() && is_loopback_host(p.advertise) && !is_loopback_host(store_host)) {
      // The store's name resolves to loopback here only: peers on other
      // hosts cannot reach a loopback address, so skip it when another
      // interface is up.
      std::vector<InterfaceAddr> others = select_interfaces(list_interfaces(), "", v6_store);
      if (!others.empty() && !others.front().loopback) {
        TUTTI_LOG(Info, "the route to the store at "
                            << store_host << " leaves through loopback; advertising " << others.front().name << " "
                            << others.front().address
                            << " instead (TUTTI_SOCKET_IFNAME or TUTTI_ADVERTISE_ADDR choose)");
        p.advertise = others.front().address;
      }
    }
  }
  if (p.advertise.empty()) {
    // No store address to route to: the address this host's name resolves
    // to, unless that is loopback and another interface is up.
    char name[256] = {0};
    ::gethostname(name, sizeof name - 1);
    try {
      p.advertise = resolve(name, 0).to_string();
      p.advertise = p.advertise.substr(0, p.advertise.rfind(':'));
      if (p.advertise.size() > 2 && p.advertise.front() == '[')
        p.advertise = p.advertise.substr(1, p.advertise.size() - 2);
    } catch (const Error&) {
      p.advertise.clear();
    }
    if (p.advertise.empty() || is_loopback_host(p.advertise)) {
      std::vector<InterfaceAddr> others = select_interfaces(list_interfaces(), "");
      if (!others.empty() && !others.front().loopback) p.advertise = others.front().address;
    }
    if (p.advertise.empty()) p.advertise = "127.0.0.1";
  }
  // By default a rank listens where its peers reach it (the address it
  // advertises), not on every interface: a single-host job on loopback
  // listens on loopback. An advertised address of another machine
  // (TUTTI_ADVERTISE_ADDR behind a NAT) leaves the wildcard.
  if (!config.listen_addr_set && picked.empty() && is_local_address(p.advertise)) p.listen = p.advertise;
  return p;
}

bool is_local_address(const std::string& address) {
  if (!is_ip_literal(address)) return false;
  if (is_loopback_host(address)) return true;
  for (const InterfaceAddr& a : list_interfaces())
    if (a.address == address) return true;
  return false;
}

bool is_ip_literal(const std::string& host) {
  in6_addr buf6{};
  in_addr buf4{};
  std::string h = host;
  if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  return ::inet_pton(AF_INET, h.c_str(), &buf4) == 1 || ::inet_pton(AF_INET6, h.c_str(), &buf6) == 1;
}

std::string store_listen_address(const Config& config, const std::string& store_host) {
  if (!config.store_listen_addr.empty()) return config.store_listen_addr;
  // MASTER_ADDR given as an address of this host: the job's ranks meet
  // there, so the store listens there only. A host name may resolve here to
  // another address than on the other hosts (127.0.1.1 in /etc/hosts):
  // then every interface.
  if (config.socket_ifname.empty()) return is_local_address(store_host) ? store_host : "";
  const bool v6_store = store_host.find(':') != std::string::npos;
  for (const InterfaceAddr& a : select_interfaces(list_interfaces(), config.socket_ifname, v6_store)) {
    if (a.address == store_host) return a.address;
  }
  return "";
}

}  // namespace tutti::detail
