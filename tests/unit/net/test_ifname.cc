// TUTTI_SOCKET_IFNAME (net/ifname.h): the NCCL-style matcher, the default
// choice of interface, and the addresses a rank listens on and advertises.

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/errors.h"
#include "net/ifname.h"
#include "tutti/error.h"

namespace {

namespace d = tutti::detail;
using tutti::ErrorKind;
using tutti::testing::expect_error;

std::vector<std::string> matching(const std::string& spec, const std::vector<std::string>& names) {
  d::IfnameFilter f = d::parse_ifname_filter(spec);
  std::vector<std::string> out;
  for (const std::string& n : names)
    if (f.matches(n)) out.push_back(n);
  return out;
}

const std::vector<std::string> kNames = {"lo", "eth0", "eth1", "ib0", "docker0", "veth12", "enp3s0", "lower"};

TEST(Ifname, PrefixList) {
  EXPECT_EQ(matching("eth", kNames), (std::vector<std::string>{"eth0", "eth1"}));
  EXPECT_EQ(matching("eth,ib", kNames), (std::vector<std::string>{"eth0", "eth1", "ib0"}));
  EXPECT_EQ(matching("lo", kNames), (std::vector<std::string>{"lo", "lower"}));
  EXPECT_EQ(matching("e", kNames), (std::vector<std::string>{"eth0", "eth1", "enp3s0"}));
  EXPECT_EQ(matching("eth,,ib,", kNames), (std::vector<std::string>{"eth0", "eth1", "ib0"}));  // empty items skipped
  EXPECT_TRUE(matching("wlan", kNames).empty());
}

TEST(Ifname, Exclusion) {
  EXPECT_EQ(matching("^docker,lo", kNames), (std::vector<std::string>{"eth0", "eth1", "ib0", "veth12", "enp3s0"}));
  EXPECT_EQ(matching("^eth", kNames), (std::vector<std::string>{"lo", "ib0", "docker0", "veth12", "enp3s0", "lower"}));
}

TEST(Ifname, ExactNames) {
  EXPECT_EQ(matching("=eth0", kNames), (std::vector<std::string>{"eth0"}));
  EXPECT_EQ(matching("=eth", kNames), (std::vector<std::string>{}));
  EXPECT_EQ(matching("=lo,ib0", kNames), (std::vector<std::string>{"lo", "ib0"}));
  EXPECT_EQ(matching("^=eth0", kNames),
            (std::vector<std::string>{"lo", "eth1", "ib0", "docker0", "veth12", "enp3s0", "lower"}));
  EXPECT_EQ(matching("^=lo", kNames).size(), kNames.size() - 1);  // "lower" stays
}

TEST(Ifname, ParsedFields) {
  d::IfnameFilter f = d::parse_ifname_filter("^=a,b");
  EXPECT_TRUE(f.exclude);
  EXPECT_TRUE(f.exact);
  EXPECT_EQ(f.names, (std::vector<std::string>{"a", "b"}));
  f = d::parse_ifname_filter("a");
  EXPECT_FALSE(f.exclude);
  EXPECT_FALSE(f.exact);
}

TEST(Ifname, MalformedSpecsAreRefused) {
  for (const char* spec :
       {"", "^", "=", "^=", ",", "^,", "eth0:5000", "=^eth0", "eth 0", "a_name_far_too_long_for_linux"}) {
    tutti::Error e = expect_error([&] { d::parse_ifname_filter(spec); });
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << spec;
    EXPECT_NE(e.message().find("TUTTI_SOCKET_IFNAME='" + std::string(spec) + "'"), std::string::npos) << e.message();
  }
}

std::vector<d::InterfaceAddr> fake_host() {
  return {{"lo", "127.0.0.1", false, true},
          {"eth0", "198.18.0.1", false, false},
          {"eth0", "fd00::1", true, false},
          {"docker0", "172.17.0.1", false, false},
          {"lo", "::1", true, true}};
}

std::vector<std::string> addresses(const std::vector<d::InterfaceAddr>& v) {
  std::vector<std::string> out;
  for (const auto& a : v) out.push_back(a.address);
  return out;
}

TEST(Ifname, DefaultSkipsLoopbackWhenOthersAreUp) {
  EXPECT_EQ(addresses(d::select_interfaces(fake_host(), "")),
            (std::vector<std::string>{"198.18.0.1", "172.17.0.1", "fd00::1"}));
  EXPECT_EQ(addresses(d::select_interfaces(fake_host(), "", true)),
            (std::vector<std::string>{"fd00::1", "198.18.0.1", "172.17.0.1"}));
  // Only loopback is up (a fresh network namespace): loopback it is.
  std::vector<d::InterfaceAddr> only_lo = {{"lo", "127.0.0.1", false, true}, {"lo", "::1", true, true}};
  EXPECT_EQ(addresses(d::select_interfaces(only_lo, "")), (std::vector<std::string>{"127.0.0.1", "::1"}));
  EXPECT_TRUE(d::select_interfaces({}, "").empty());
}

TEST(Ifname, SpecSelects) {
  EXPECT_EQ(addresses(d::select_interfaces(fake_host(), "=lo")), (std::vector<std::string>{"127.0.0.1", "::1"}));
  EXPECT_EQ(addresses(d::select_interfaces(fake_host(), "docker")), (std::vector<std::string>{"172.17.0.1"}));
  EXPECT_EQ(addresses(d::select_interfaces(fake_host(), "^docker,lo")),
            (std::vector<std::string>{"198.18.0.1", "fd00::1"}));
  EXPECT_TRUE(d::select_interfaces(fake_host(), "ib").empty());
}

TEST(Ifname, LoopbackHosts) {
  for (const char* h : {"127.0.0.1", "127.0.1.1", "127.255.0.3", "::1", "[::1]", "localhost", "::ffff:127.0.0.1"})
    EXPECT_TRUE(d::is_loopback_host(h)) << h;
  for (const char* h : {"198.18.0.1", "10.0.0.1", "fd00::1", "::ffff:10.0.0.1", "myhost", "128.0.0.1", ""})
    EXPECT_FALSE(d::is_loopback_host(h)) << h;
}

TEST(Ifname, DescribeInterfaces) {
  EXPECT_EQ(d::describe_interfaces({{"lo", "127.0.0.1", false, true}, {"eth0", "198.18.0.1", false, false}}),
            "lo 127.0.0.1, eth0 198.18.0.1");
  EXPECT_EQ(d::describe_interfaces({}), "(none is up)");
}

// On the real host: loopback is always up, so "=lo" picks 127.0.0.1 (or ::1)
// and the peer addresses follow it; a name that matches nothing is refused
// with the list of interfaces.
TEST(Ifname, OnThisHost) {
  std::vector<d::InterfaceAddr> all = d::list_interfaces();
  bool has_lo = false;
  for (const auto& a : all) has_lo = has_lo || (a.loopback && a.address == "127.0.0.1");
  if (!has_lo) GTEST_SKIP() << "no loopback interface with 127.0.0.1 is up here";
  d::Config c;
  c.socket_ifname = "=lo";
  EXPECT_EQ(d::socket_ifname_address(c, false), "127.0.0.1");
  d::PeerAddress p = d::choose_peer_address(c, "127.0.0.1", 29500);
  EXPECT_EQ(p.listen, "127.0.0.1");
  EXPECT_EQ(p.advertise, "127.0.0.1");
  EXPECT_EQ(d::store_listen_address(c, "127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(d::store_listen_address(c, "198.18.0.1"), "");  // not one of lo's: all
  // TUTTI_LISTEN_ADDR and TUTTI_ADVERTISE_ADDR win.
  c.listen_addr = "0.0.0.0";
  c.listen_addr_set = true;
  c.advertise_addr = "198.18.0.9";
  p = d::choose_peer_address(c, "127.0.0.1", 29500);
  EXPECT_EQ(p.listen, "0.0.0.0");
  EXPECT_EQ(p.advertise, "198.18.0.9");
  c.store_listen_addr = "127.0.0.2";
  EXPECT_EQ(d::store_listen_address(c, "127.0.0.1"), "127.0.0.2");

  c = d::Config{};
  c.socket_ifname = "=no_such_if0";
  tutti::Error e = expect_error([&] { d::choose_peer_address(c, "127.0.0.1", 29500); });
  EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
  EXPECT_NE(e.message().find("matches no interface that is up"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("lo 127.0.0.1"), std::string::npos) << e.message();

  // Without TUTTI_SOCKET_IFNAME a single-host job keeps loopback: the route
  // to a store on 127.0.0.1 starts at 127.0.0.1, and the rank and the store
  // listen there only.
  c = d::Config{};
  p = d::choose_peer_address(c, "127.0.0.1", 29500);
  EXPECT_EQ(p.listen, "127.0.0.1");
  EXPECT_EQ(p.advertise, "127.0.0.1");
  EXPECT_EQ(d::store_listen_address(c, "127.0.0.1"), "127.0.0.1");
  // A host name may resolve elsewhere to another address: every interface.
  EXPECT_EQ(d::store_listen_address(c, "localhost"), "");
  // An advertised address of another machine (a NAT): the wildcard.
  c.advertise_addr = "198.51.100.7";
  p = d::choose_peer_address(c, "127.0.0.1", 29500);
  EXPECT_EQ(p.listen, "0.0.0.0");
  // Told: as told.
  c = d::Config{};
  c.listen_addr = "0.0.0.0";
  c.listen_addr_set = true;
  EXPECT_EQ(d::choose_peer_address(c, "127.0.0.1", 29500).listen, "0.0.0.0");
}

}  // namespace
