// Configuration (common/config.h) and the settings table (common/settings.h).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/config.h"
#include "common/errors.h"
#include "common/settings.h"
#include "tutti/error.h"

namespace {

using tutti::Error;
using tutti::ErrorKind;
namespace d = tutti::detail;

using tutti::testing::expect_error;

// ---- parse_bytes -----------------------------------------------------------------

TEST(CoreConfig, ParseBytesAcceptsSuffixes) {
  EXPECT_EQ(d::parse_bytes("4K", "X"), 4096u);
  EXPECT_EQ(d::parse_bytes("4k", "X"), 4096u);
  EXPECT_EQ(d::parse_bytes("2M", "X"), std::size_t(2) << 20);
  EXPECT_EQ(d::parse_bytes("2m", "X"), std::size_t(2) << 20);
  EXPECT_EQ(d::parse_bytes("1G", "X"), std::size_t(1) << 30);
  EXPECT_EQ(d::parse_bytes("3g", "X"), std::size_t(3) << 30);
  EXPECT_EQ(d::parse_bytes("123", "X"), 123u);
  EXPECT_EQ(d::parse_bytes("0", "X"), 0u);
  EXPECT_EQ(d::parse_bytes("0K", "X"), 0u);
}

TEST(CoreConfig, ParseBytesRejectsBadSuffix) {
  for (const char* bad : {"4X", "4KB", "4 K", "12Mi", "1T"}) {
    Error e = expect_error([&] { d::parse_bytes(bad, "TUTTI_CHUNK_BYTES"); });
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << bad;
    EXPECT_CONTAINS(e.message(), "TUTTI_CHUNK_BYTES");
    EXPECT_CONTAINS(e.message(), std::string("'") + bad + "'");
    EXPECT_CONTAINS(e.message(), "unknown suffix");
  }
}

TEST(CoreConfig, ParseBytesRejectsNonNumbers) {
  for (const char* bad : {"abc", "", "K", "M4"}) {
    Error e = expect_error([&] { d::parse_bytes(bad, "TUTTI_SMALL_BYTES"); });
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << bad;
    EXPECT_CONTAINS(e.message(), "TUTTI_SMALL_BYTES");
    EXPECT_CONTAINS(e.message(), std::string("cannot parse '") + bad + "'");
  }
}

// ---- parse_algo_overrides -------------------------------------------------------

TEST(CoreConfig, ParseAlgoOverrides) {
  auto m = d::parse_algo_overrides("all_reduce:ring,broadcast:binomial");
  std::map<std::string, std::string> expect{{"all_reduce", "ring"}, {"broadcast", "binomial"}};
  EXPECT_EQ(m, expect);
  EXPECT_TRUE(d::parse_algo_overrides("").empty());
  EXPECT_EQ(d::parse_algo_overrides("all_reduce:ring,"), (std::map<std::string, std::string>{{"all_reduce", "ring"}}));
  EXPECT_EQ(d::parse_algo_overrides("barrier:dissemination"),
            (std::map<std::string, std::string>{{"barrier", "dissemination"}}));
}

TEST(CoreConfig, ParseAlgoOverridesRejectsMalformed) {
  const std::pair<const char*, const char*> cases[] = {
      {"all_reduce", "all_reduce"},           {":ring", ":ring"},
      {"all_reduce:", "all_reduce:"},         {"all_reduce:ring,broadcast", "broadcast"},
      {"all_reduce=ring", "all_reduce=ring"},
  };
  for (const auto& c : cases) {
    const char* const spec = c.first;
    const char* const item = c.second;
    Error e = expect_error([&] { d::parse_algo_overrides(spec); });
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << spec;
    EXPECT_CONTAINS(e.message(), "TUTTI_ALGO");
    EXPECT_CONTAINS(e.message(), "expected 'collective:algorithm'");
    EXPECT_CONTAINS(e.message(), std::string("got '") + item + "'");
    EXPECT_CONTAINS(e.message(), std::string("in '") + spec + "'");
  }
}

// ---- Config::from_env -------------------------------------------------------------

// Unsets every TUTTI_* variable of the settings table, restoring them after.
class CoreConfigEnv : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const d::Setting& s : d::settings()) {
      const char* old = std::getenv(s.name);
      saved_.emplace_back(s.name, old ? std::optional<std::string>(old) : std::nullopt);
      ::unsetenv(s.name);
    }
  }
  void TearDown() override {
    for (auto& [name, value] : saved_) {
      if (value)
        ::setenv(name, value->c_str(), 1);
      else
        ::unsetenv(name);
    }
  }
  static void set(const char* name, const char* value) { ASSERT_EQ(::setenv(name, value, 1), 0); }

 private:
  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

TEST_F(CoreConfigEnv, Defaults) {
  d::Config c = d::Config::from_env();
  EXPECT_EQ(c.timeout, std::chrono::minutes(5));
  EXPECT_EQ(c.chunk_bytes, std::size_t(1) << 20);
  EXPECT_EQ(c.hosts_chunk_bytes, std::size_t(256) << 10);
  EXPECT_EQ(c.small_bytes, std::size_t(64) << 10);
  EXPECT_TRUE(c.algo.empty());
  EXPECT_EQ(c.socket_buffer_bytes, 0u);
  EXPECT_EQ(c.listen_addr, "0.0.0.0");
  EXPECT_EQ(c.store_listen_addr, "");
  EXPECT_EQ(c.advertise_addr, "");
  EXPECT_CONTAINS(c.describe(), "TUTTI_TIMEOUT=300000ms");
  EXPECT_CONTAINS(c.describe(), "TUTTI_ALGO=(unset)");
}

TEST_F(CoreConfigEnv, TimeoutSeconds) {
  set("TUTTI_TIMEOUT", "2.5");
  EXPECT_EQ(d::Config::from_env().timeout, std::chrono::milliseconds(2500));
  set("TUTTI_TIMEOUT", "30");
  EXPECT_EQ(d::Config::from_env().timeout, std::chrono::milliseconds(30000));
  set("TUTTI_TIMEOUT", "0.001");
  EXPECT_EQ(d::Config::from_env().timeout, std::chrono::milliseconds(1));
  set("TUTTI_TIMEOUT", "");  // empty counts as unset
  EXPECT_EQ(d::Config::from_env().timeout, std::chrono::minutes(5));
  set("TUTTI_TIMEOUT", "2.5");
  EXPECT_CONTAINS(d::Config::from_env().describe(), "TUTTI_TIMEOUT=2500ms");
}

TEST_F(CoreConfigEnv, TimeoutRejectsBadValues) {
  for (const char* bad : {"abc", "0", "-1", "2.5s", "0.0"}) {
    set("TUTTI_TIMEOUT", bad);
    Error e = expect_error([] { d::Config::from_env(); });
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << bad;
    EXPECT_CONTAINS(e.message(), "TUTTI_TIMEOUT");
    EXPECT_CONTAINS(e.message(), std::string("'") + bad + "'");
  }
}

TEST_F(CoreConfigEnv, ChunkBytes) {
  set("TUTTI_CHUNK_BYTES", "256K");
  EXPECT_EQ(d::Config::from_env().chunk_bytes, std::size_t(256) << 10);
  set("TUTTI_CHUNK_BYTES", "2M");  // set, it applies across hosts too
  EXPECT_EQ(d::Config::from_env().hosts_chunk_bytes, std::size_t(2) << 20);
  EXPECT_CONTAINS(d::Config::from_env().shared_settings(), "J TUTTI_CHUNK_BYTES=2097152,2097152\n");
  set("TUTTI_CHUNK_BYTES", "64");
  EXPECT_EQ(d::Config::from_env().chunk_bytes, 64u);
  set("TUTTI_CHUNK_BYTES", "4M");
  EXPECT_EQ(d::Config::from_env().chunk_bytes, std::size_t(4) << 20);

  set("TUTTI_CHUNK_BYTES", "63");
  Error e = expect_error([] { d::Config::from_env(); });
  EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
  EXPECT_CONTAINS(e.message(), "TUTTI_CHUNK_BYTES");
  EXPECT_CONTAINS(e.message(), "at least 64");

  set("TUTTI_CHUNK_BYTES", "1Q");
  e = expect_error([] { d::Config::from_env(); });
  EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
  EXPECT_CONTAINS(e.message(), "TUTTI_CHUNK_BYTES");
  EXPECT_CONTAINS(e.message(), "'1Q'");
}

TEST_F(CoreConfigEnv, OtherVariables) {
  EXPECT_EQ(d::Config::from_env().two_level_leader_bytes, std::size_t(128) << 10);
  EXPECT_EQ(d::Config::from_env().tcp_congestion, "");
  set("TUTTI_SMALL_BYTES", "1K");
  set("TUTTI_TCP_CONGESTION", "reno");
  set("TUTTI_TWO_LEVEL_LEADER_BYTES", "1M");
  set("TUTTI_SOCKET_BUFFER_BYTES", "0");
  set("TUTTI_LISTEN_ADDR", "127.0.0.1");
  set("TUTTI_ADVERTISE_ADDR", "10.0.0.7");
  set("TUTTI_STORE_LISTEN_ADDR", "127.0.0.2");
  d::Config c = d::Config::from_env();
  EXPECT_EQ(c.small_bytes, 1024u);
  EXPECT_EQ(c.two_level_leader_bytes, std::size_t(1) << 20);
  EXPECT_EQ(c.socket_buffer_bytes, 0u);
  EXPECT_EQ(c.listen_addr, "127.0.0.1");
  EXPECT_EQ(c.advertise_addr, "10.0.0.7");
  EXPECT_EQ(c.store_listen_addr, "127.0.0.2");
  EXPECT_EQ(c.tcp_congestion, "reno");

  set("TUTTI_TCP_CONGESTION", "a-name-too-long-for-linux");
  Error e = expect_error([] { d::Config::from_env(); });
  EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
  EXPECT_CONTAINS(e.message(), "TUTTI_TCP_CONGESTION");
  EXPECT_CONTAINS(e.message(), "'a-name-too-long-for-linux'");
  set("TUTTI_TCP_CONGESTION", "reno");

  set("TUTTI_SMALL_BYTES", "lots");
  e = expect_error([] { d::Config::from_env(); });
  EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
  EXPECT_CONTAINS(e.message(), "TUTTI_SMALL_BYTES");
  EXPECT_CONTAINS(e.message(), "'lots'");

  set("TUTTI_SMALL_BYTES", "1K");
  set("TUTTI_TWO_LEVEL_LEADER_BYTES", "1 MB");
  e = expect_error([] { d::Config::from_env(); });
  EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
  EXPECT_CONTAINS(e.message(), "TUTTI_TWO_LEVEL_LEADER_BYTES");
  EXPECT_CONTAINS(e.message(), "'1 MB'");
}

TEST_F(CoreConfigEnv, AlgoTuning) {
  EXPECT_EQ(d::Config::from_env().algo_tuning, "auto");
  for (const char* v : {"auto", "on", "off"}) {
    set("TUTTI_ALGO_TUNING", v);
    EXPECT_EQ(d::Config::from_env().algo_tuning, v);
    EXPECT_CONTAINS(d::Config::from_env().describe(), std::string("TUTTI_ALGO_TUNING=") + v);
  }
  set("TUTTI_ALGO_TUNING", "1");
  Error e = expect_error([] { d::Config::from_env(); });
  EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
  EXPECT_CONTAINS(e.message(), "TUTTI_ALGO_TUNING: expected one of `auto`, `on`, `off`, got '1'");
}

TEST_F(CoreConfigEnv, SharedSettingsAndTheirDisagreements) {
  set("TUTTI_SMALL_BYTES", "32K");
  const std::string odd = d::Config::from_env().shared_settings();
  ::unsetenv("TUTTI_SMALL_BYTES");
  const std::string usual = d::Config::from_env().shared_settings();
  EXPECT_CONTAINS(odd, "J TUTTI_SMALL_BYTES=32768\n");
  EXPECT_CONTAINS(usual, "J TUTTI_SMALL_BYTES=65536\n");
  EXPECT_CONTAINS(usual, "J TUTTI_ALGO_TUNING=auto\n");
  EXPECT_CONTAINS(usual, "H TUTTI_SHM_SLOT_BYTES=262144\n");
  // Unset is not the default's value: unset, the shared-memory tuners choose.
  EXPECT_CONTAINS(usual, "H TUTTI_SHM_CMA_BYTES=(unset)\n");
  set("TUTTI_SHM_CMA_BYTES", "128K");
  EXPECT_CONTAINS(d::Config::from_env().shared_settings(), "H TUTTI_SHM_CMA_BYTES=131072\n");
  ::unsetenv("TUTTI_SHM_CMA_BYTES");
  EXPECT_EQ(usual.find("STRIPE"), std::string::npos) << usual;  // the sender alone decides
  EXPECT_EQ(d::settings_disagreement(usual, usual, true, 0, 1), "");
  EXPECT_EQ(d::settings_disagreement(usual, odd, false, 3, 5),
            "ranks disagree on TUTTI_SMALL_BYTES: '32768' on rank 5, '65536' on rank 3 (every rank of a job must use "
            "the same value)");
  // Shared-memory settings: only among the ranks of one host.
  std::string host_odd = usual;
  const std::string slot = "H TUTTI_SHM_SLOT_BYTES=262144\n";
  host_odd.replace(host_odd.find(slot), slot.size(), "H TUTTI_SHM_SLOT_BYTES=131072\n");
  EXPECT_EQ(d::settings_disagreement(usual, host_odd, false, 0, 1), "");
  EXPECT_EQ(d::settings_disagreement(usual, host_odd, true, 0, 1),
            "ranks disagree on TUTTI_SHM_SLOT_BYTES: '131072' on rank 1, '262144' on rank 0 (every rank of a host must "
            "use the same value)");
  // Another version: nothing published, or other lines.
  EXPECT_EQ(d::settings_disagreement(usual, "", false, 0, 2),
            "rank 2 published no settings: it runs another version of tutti");
  EXPECT_EQ(d::settings_disagreement(usual, "J TUTTI_NEW=1\n" + usual, false, 0, 2),
            "rank 2 publishes other settings: it runs another version of tutti");
  std::string renamed = usual;
  renamed.replace(renamed.find("TUTTI_CHUNK_BYTES"), 17, "TUTTI_CHUNK_SIZES");
  EXPECT_EQ(d::settings_disagreement(usual, renamed, false, 0, 2),
            "rank 2 publishes other settings: it runs another version of tutti");
}

TEST_F(CoreConfigEnv, SocketsPerPeerAndStripeBytes) {
  d::Config c = d::Config::from_env();
  EXPECT_EQ(c.sockets_per_peer, 1);
  EXPECT_EQ(c.socket_stripe_bytes, std::size_t(1) << 20);
  set("TUTTI_SOCKETS_PER_PEER", "4");
  set("TUTTI_SOCKET_STRIPE_BYTES", "256K");
  c = d::Config::from_env();
  EXPECT_EQ(c.sockets_per_peer, 4);
  EXPECT_EQ(c.socket_stripe_bytes, std::size_t(256) << 10);
  EXPECT_CONTAINS(c.describe(), "TUTTI_SOCKETS_PER_PEER=4 TUTTI_SOCKET_STRIPE_BYTES=262144");
  set("TUTTI_SOCKETS_PER_PEER", "16");
  EXPECT_EQ(d::Config::from_env().sockets_per_peer, 16);
  for (const char* bad : {"0", "17", "-2", "2x", "many"}) {
    set("TUTTI_SOCKETS_PER_PEER", bad);
    Error e = expect_error([] { d::Config::from_env(); });
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << bad;
    EXPECT_EQ(e.message(), std::string("TUTTI_SOCKETS_PER_PEER: expected an integer from 1 to 16, got '") + bad + "'");
  }
  set("TUTTI_SOCKETS_PER_PEER", "2");
  set("TUTTI_SOCKET_STRIPE_BYTES", "4095");
  Error e = expect_error([] { d::Config::from_env(); });
  EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
  EXPECT_EQ(e.message(), "TUTTI_SOCKET_STRIPE_BYTES: expected a byte count, at least 4K, got '4095'");
}

// The table: names unique and TUTTI_*, defaults and docs present, library
// settings that live in Config both stored and shown, and every setting
// ranks must agree on shown (it is compared across ranks).
TEST(CoreSettings, TableIsWhole) {
  std::set<std::string> names;
  for (const d::Setting& s : d::settings()) {
    EXPECT_TRUE(names.insert(s.name).second) << s.name << " twice";
    EXPECT_EQ(std::string(s.name).rfind("TUTTI_", 0), 0u) << s.name;
    EXPECT_NE(std::string(s.doc), "") << s.name;
    EXPECT_NE(std::string(s.fallback), "") << s.name;
    EXPECT_EQ(s.store == nullptr, s.shown == nullptr) << s.name;
    if (s.agree != d::Agreement::None) {
      EXPECT_NE(s.shown, nullptr) << s.name;
    }
    if (s.kind == d::Kind::Choice) {
      EXPECT_NE(s.choices, nullptr) << s.name;
    }
    EXPECT_EQ(d::find_setting(s.name), &s);
  }
  EXPECT_EQ(d::find_setting("TUTTI_NO_SUCH"), nullptr);
  Error e = expect_error([] { d::setting_env("TUTTI_NO_SUCH"); });
  EXPECT_EQ(e.kind(), ErrorKind::Internal);
}

// Settings read elsewhere are still checked at init: a malformed TUTTI_LOG
// or TUTTI_PMIX fails it, naming the variable and the choices.
TEST_F(CoreConfigEnv, SettingsReadElsewhereAreCheckedAtInit) {
  set("TUTTI_PMIX", "yes");
  Error e = expect_error([] { d::Config::from_env(); });
  EXPECT_EQ(e.message(), "TUTTI_PMIX: expected one of `0`, `1`, got 'yes'");
  set("TUTTI_PMIX", "0");
  d::Config::from_env();
}

TEST_F(CoreConfigEnv, AlgoOverrides) {
  set("TUTTI_ALGO", "all_reduce:ring,broadcast:binomial");
  d::Config c = d::Config::from_env();
  EXPECT_EQ(c.algo, (std::map<std::string, std::string>{{"all_reduce", "ring"}, {"broadcast", "binomial"}}));
  EXPECT_CONTAINS(c.describe(), "TUTTI_ALGO=all_reduce:ring,broadcast:binomial");

  set("TUTTI_ALGO", "all_reduce");
  Error e = expect_error([] { d::Config::from_env(); });
  EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
  EXPECT_CONTAINS(e.message(), "TUTTI_ALGO");
  EXPECT_CONTAINS(e.message(), "'all_reduce'");
}

TEST_F(CoreConfigEnv, EnvironmentIsRestored) {
  // A sibling check of the fixture: what a test sets does not leak.
  set("TUTTI_TIMEOUT", "7");
  EXPECT_STREQ(std::getenv("TUTTI_TIMEOUT"), "7");
}

TEST_F(CoreConfigEnv, EnvironmentStartsClean) {
  for (const d::Setting& v : d::settings()) EXPECT_EQ(std::getenv(v.name), nullptr) << v.name;
}

}  // namespace
