#pragma once
// Which network interface a rank uses: TUTTI_SOCKET_IFNAME, in the syntax of
// NCCL_SOCKET_IFNAME, and the default choice when it is not set.
//
//   eth,ib     interfaces whose names start with "eth" or "ib"
//   ^docker,lo every interface except those starting with "docker" or "lo"
//   =eth0      exactly "eth0" (a list of exact names: =eth0,eth1)
//   ^=eth0     every interface except exactly "eth0"
//
// The matching and the choice are pure functions (unit-tested); only
// list_interfaces() asks the kernel (getifaddrs).

#include <string>
#include <string_view>
#include <vector>

namespace tutti::detail {

struct Config;

struct IfnameFilter {
  bool exclude = false;  // '^': interfaces matching none of the names
  bool exact = false;    // '=': whole names instead of prefixes
  std::vector<std::string> names;
  bool matches(std::string_view ifname) const;
};

// Parses the syntax above. Empty items are skipped; NCCL's ":port" suffix is
// not accepted. Throws InvalidArgument naming TUTTI_SOCKET_IFNAME when the
// list is empty or an item is malformed.
IfnameFilter parse_ifname_filter(const std::string& spec);

struct InterfaceAddr {
  std::string name;     // "eth0"
  std::string address;  // "198.18.0.1", "fd00::1"
  bool ipv6 = false;
  bool loopback = false;
};

// Addresses of the interfaces that are up: IPv4 and IPv6 (link-local IPv6
// left out, it needs a scope), in the kernel's order.
std::vector<InterfaceAddr> list_interfaces();

// The usable addresses, best first. With a spec: those of interfaces it
// matches. Without (spec empty): those of non-loopback interfaces, or the
// loopback ones when no other interface is up. IPv4 before IPv6 unless
// prefer_ipv6; otherwise in the order given.
std::vector<InterfaceAddr> select_interfaces(const std::vector<InterfaceAddr>& all, const std::string& spec,
                                             bool prefer_ipv6 = false);

// "lo 127.0.0.1, eth0 198.18.0.1" (for error messages and logs).
std::string describe_interfaces(const std::vector<InterfaceAddr>& all);

// 127.0.0.0/8, ::1, ::ffff:127.x and "localhost".
bool is_loopback_host(const std::string& host);
// Whether `host` is an IP address (not a name), and one of this host's
// (loopback or an interface's).
bool is_ip_literal(const std::string& host);
bool is_local_address(const std::string& host);

// The address TUTTI_SOCKET_IFNAME (config.socket_ifname, not empty) picks on
// this host. Throws InvalidArgument, listing the interfaces, when it matches
// none that is up.
std::string socket_ifname_address(const Config& config, bool prefer_ipv6);

// Where a rank listens for its peers and the address it publishes to them:
//   advertise: TUTTI_ADVERTISE_ADDR; else the interface TUTTI_SOCKET_IFNAME
//     picks; else the local address of the route to the store, unless that
//     is a loopback address while the store's is not (a host name that
//     resolves to 127.0.1.1 on its own host): then the first non-loopback
//     interface; with no store address, the first address of the default
//     choice (select_interfaces with no spec).
//   listen: TUTTI_LISTEN_ADDR when set; else the picked interface's address
//     with TUTTI_SOCKET_IFNAME; else 0.0.0.0.
struct PeerAddress {
  std::string listen;
  std::string advertise;
};
PeerAddress choose_peer_address(const Config& config, const std::string& store_host, int store_port);

// The address rank 0's store server listens on: TUTTI_STORE_LISTEN_ADDR when
// set; with TUTTI_SOCKET_IFNAME, store_host itself when it is an address of
// a picked interface (so that every rank can still reach it); else all ("").
std::string store_listen_address(const Config& config, const std::string& store_host);

}  // namespace tutti::detail
