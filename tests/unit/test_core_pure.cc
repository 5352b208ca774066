// The pure (no I/O) parts of tutti's core: message tag packing
// (core/tags.h), ring chunking (algorithms/ring_steps.h), configuration
// parsing (common/config.h), algorithm selection (plan/planner.h, plan/registry.h)
// and the TCP frame/hello validation (transport/tcp/frame.h). Failure cases
// check both the error kind and the message text.

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "algorithms/context.h"
#include "algorithms/ring_steps.h"
#include "algorithms/signature.h"
#include "algorithms/tuner.h"
#include "common/config.h"
#include "common/errors.h"
#include "common/settings.h"
#include "common/small_vector.h"
#include "core/tags.h"
#include "plan/planner.h"
#include "transport/tcp/frame.h"
#include "tutti/error.h"

namespace {

using tutti::Error;
using tutti::ErrorKind;
namespace d = tutti::detail;

using tutti::testing::expect_error;

#define EXPECT_CONTAINS(haystack, needle)                          \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) \
      << "expected \"" << (needle) << "\" in \"" << (haystack) << "\""

// ---- tags ------------------------------------------------------------------

constexpr std::uint64_t kMaxSeq = (std::uint64_t(1) << d::kTagSeqBits) - 1;
constexpr std::uint32_t kMaxStep = (std::uint32_t(1) << d::kTagStepBits) - 1;

TEST(CoreTags, CollectiveTagPacksSeqAndStep) {
  const std::pair<std::uint64_t, std::uint32_t> cases[] = {
      {0, 0}, {1, 0}, {0, 1}, {12345, 678}, {kMaxSeq, 0}, {0, kMaxStep}, {kMaxSeq, kMaxStep}};
  for (auto [seq, step] : cases) {
    std::uint64_t t = d::collective_tag(seq, step);
    EXPECT_EQ(t >> 62, d::kTagKindCollective) << seq << "/" << step;
    EXPECT_EQ((t >> d::kTagStepBits) & kMaxSeq, seq);
    EXPECT_EQ(t & kMaxStep, step);
    EXPECT_EQ(t, (seq << 24) | step);
  }
}

TEST(CoreTags, DistinctSeqStepGiveDistinctTags) {
  std::set<std::uint64_t> tags;
  std::vector<std::uint64_t> seqs;
  for (std::uint64_t s = 0; s < 64; ++s) seqs.push_back(s);
  for (std::uint64_t s : {std::uint64_t(1) << 20, std::uint64_t(1) << 37, kMaxSeq - 1, kMaxSeq}) seqs.push_back(s);
  std::vector<std::uint32_t> steps;
  for (std::uint32_t s = 0; s < 64; ++s) steps.push_back(s);
  for (std::uint32_t s : {1u << 8, 1u << 16, 1u << 23, kMaxStep - 1, kMaxStep}) steps.push_back(s);
  for (auto seq : seqs)
    for (auto step : steps) EXPECT_TRUE(tags.insert(d::collective_tag(seq, step)).second) << seq << "/" << step;
  EXPECT_EQ(tags.size(), seqs.size() * steps.size());
}

TEST(CoreTags, OverWideFieldsThrowInternal) {
  Error e = expect_error([] { d::collective_tag(kMaxSeq + 1, 0); });
  EXPECT_EQ(e.kind(), ErrorKind::Internal);
  EXPECT_CONTAINS(e.message(), "op sequence number " + std::to_string(kMaxSeq + 1));
  EXPECT_CONTAINS(e.message(), "38 bits");

  e = expect_error([] { d::collective_tag(~std::uint64_t(0), 0); });
  EXPECT_EQ(e.kind(), ErrorKind::Internal);
  EXPECT_CONTAINS(e.message(), "op sequence number");

  e = expect_error([] { d::collective_tag(0, kMaxStep + 1); });
  EXPECT_EQ(e.kind(), ErrorKind::Internal);
  EXPECT_CONTAINS(e.message(), "algorithm step " + std::to_string(kMaxStep + 1));
  EXPECT_CONTAINS(e.message(), "24 bits");

  e = expect_error([] { d::collective_tag(5, 0xffffffffu); });
  EXPECT_EQ(e.kind(), ErrorKind::Internal);
  EXPECT_CONTAINS(e.message(), "algorithm step");
}

TEST(CoreTags, P2PTagRejectsNegative) {
  for (int bad : {-1, -42, INT_MIN}) {
    Error e = expect_error([&] { d::p2p_tag(bad); });
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_CONTAINS(e.message(), "tag " + std::to_string(bad) + " is negative");
  }
  EXPECT_NO_THROW(d::p2p_tag(0));
  EXPECT_NO_THROW(d::p2p_tag(INT_MAX));
}

TEST(CoreTags, P2PAndCollectiveTagsNeverCollide) {
  // Every collective tag has kind bit 62 clear, every p2p tag has it set.
  for (int t : {0, 1, 2, 12345, 1 << 24, INT_MAX}) {
    std::uint64_t p = d::p2p_tag(t);
    EXPECT_EQ(p >> 62, d::kTagKindP2P);
    EXPECT_EQ(p & ((std::uint64_t(1) << 62) - 1), static_cast<std::uint64_t>(t));
  }
  std::set<std::uint64_t> coll;
  for (std::uint64_t seq : {std::uint64_t(0), std::uint64_t(1), kMaxSeq})
    for (std::uint32_t step : {0u, 1u, kMaxStep}) coll.insert(d::collective_tag(seq, step));
  EXPECT_LT(*coll.rbegin(), d::p2p_tag(0));  // largest collective < smallest p2p
  for (int t : {0, 1, 2, 12345, 1 << 24, INT_MAX}) EXPECT_EQ(coll.count(d::p2p_tag(t)), 0u);
  // Small values that would coincide without the kind bit.
  for (int t = 0; t < 1000; ++t) EXPECT_NE(d::p2p_tag(t), d::collective_tag(0, static_cast<std::uint32_t>(t)));
}

// ---- ring_steps chunking ---------------------------------------------------------

TEST(CoreRingSteps, ChunksCoverRangeExactly) {
  const std::size_t counts[] = {0, 1, 2, 3, 7, 63, 64, 65, 1000, 1024, 4097, 100003};
  const std::size_t per_chunks[] = {1, 2, 3, 7, 64, 1000, 1024, 5000, 1 << 20};
  for (std::size_t count : counts)
    for (std::size_t per : per_chunks) {
      if (count / per > 20000) continue;  // keep it fast
      const std::size_t n = d::num_chunks(count, per);
      EXPECT_EQ(n, count == 0 ? 0 : (count - 1) / per + 1) << count << "/" << per;
      std::size_t end = 0;
      for (std::size_t k = 0; k < n; ++k) {
        d::ChunkRange c = d::chunk_at(count, per, k);
        ASSERT_EQ(c.offset, end) << "gap or overlap at chunk " << k << ", count=" << count << " per=" << per;
        ASSERT_GT(c.count, 0u) << "empty chunk " << k << ", count=" << count << " per=" << per;
        ASSERT_LE(c.count, per);
        if (k + 1 < n) {
          ASSERT_EQ(c.count, per) << "short chunk before the last, count=" << count << " per=" << per;
        }
        end = c.offset + c.count;
      }
      EXPECT_EQ(end, count) << "count=" << count << " per=" << per;
    }
}

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
  EXPECT_EQ(c.socket_buffer_bytes, std::size_t(4) << 20);
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

// ---- the all_reduce tuner (algorithms/tuner.h) ---------------------------------

// Runs the tuner's steps for `bytes` until its next exchange, timing
// algorithm a at t[a] ns (+i for the i-th trial); returns the algorithms run.
std::vector<int> run_trials(d::AllReduceTuner& t, std::size_t bytes, std::array<std::int64_t, 2> ns) {
  std::vector<int> ran;
  for (int i = 0; i < 2 * t.samples(); ++i) {
    d::AllReduceTuner::Step s = t.next(bytes);
    EXPECT_FALSE(s.agree) << i;
    EXPECT_TRUE(s.timed) << i;
    t.record(bytes, s.algo, ns[static_cast<std::size_t>(s.algo)] + i);
    ran.push_back(s.algo);
  }
  EXPECT_TRUE(t.next(bytes).agree);
  return ran;
}

// A class's first two operations: the preferred algorithm, then the other, untimed.
void expect_warm_up(d::AllReduceTuner& t, std::size_t bytes, int preferred) {
  for (int want : {preferred, 1 - preferred}) {
    d::AllReduceTuner::Step s = t.next(bytes, preferred);
    EXPECT_EQ(s.algo, want);
    EXPECT_FALSE(s.timed || s.agree);
  }
}

// 0,1,0,1,... (or 1,0,... from `first`), kSamples of each.
std::vector<int> alternating(int first) {
  std::vector<int> v;
  for (int i = 0; i < 2 * d::AllReduceTuner::kSamples; ++i) v.push_back((first + i) % 2);
  return v;
}

TEST(CoreTuner, TrialsAlternateThenTheMembersSumsDecideForAGrowingEpoch) {
  static_assert(d::AllReduceTuner::kSamples >= 2);
  d::AllReduceTuner t(8 << 10, 64 << 10);
  EXPECT_FALSE(t.covers(8 << 10));
  EXPECT_TRUE(t.covers((8 << 10) + 1));
  EXPECT_TRUE(t.covers(64 << 10));
  EXPECT_FALSE(t.covers((64 << 10) + 1));
  const std::size_t b = 20000;  // class (16 KiB, 32 KiB]
  EXPECT_EQ(d::AllReduceTuner::class_hi(b), std::size_t(32) << 10);
  EXPECT_EQ(t.chosen(b), -1);
  expect_warm_up(t, b, 0);
  // Epoch 0: 0,1,0,1,... ; the means of what each took (+i for trial i).
  EXPECT_EQ(run_trials(t, b, {1000, 500}), alternating(0));
  std::array<std::int64_t, 2> m = t.means(b);
  const std::int64_t k = d::AllReduceTuner::kSamples;
  EXPECT_EQ(m[0], 1000 + (k - 1));  // trials 0, 2, ..., 2k-2: mean k-1
  EXPECT_EQ(m[1], 500 + k);         // trials 1, 3, ..., 2k-1: mean k
  // The members' sums decide: Rabenseifner (1) clearly faster.
  EXPECT_EQ(t.decide(b, {4000, 2000}), 1);
  EXPECT_EQ(t.chosen(b), 1);
  for (std::uint64_t i = 0; i < d::AllReduceTuner::kFirstQuiet; ++i) {
    d::AllReduceTuner::Step s = t.next(b);
    EXPECT_EQ(s.algo, 1);
    EXPECT_FALSE(s.timed || s.agree);
  }
  // Epoch 1 starts with the other algorithm (no warm-up again); within the
  // margin the table's choice (0) stays.
  EXPECT_EQ(run_trials(t, b, {1000, 980}), alternating(1));
  EXPECT_EQ(t.decide(b, {1000, 960}), 0);
  for (std::uint64_t i = 0; i < 4 * d::AllReduceTuner::kFirstQuiet; ++i) EXPECT_EQ(t.next(b).algo, 0);
  run_trials(t, b, {1000, 1000});
  EXPECT_EQ(t.decide(b, {1000, 940}), 1);  // just past the margin
  // Other classes are independent.
  const std::size_t small = 10000, big = 60000;
  EXPECT_EQ(t.chosen(small), -1);
  expect_warm_up(t, small, 0);
  EXPECT_EQ(run_trials(t, small, {700, 900}), alternating(0));
  EXPECT_EQ(t.decide(small, t.means(small)), 0);
  EXPECT_EQ(t.chosen(b), 1);
  EXPECT_EQ(t.chosen(big), -1);
  // Where the table prefers alternative 1 (the two-level slices above the
  // leader cut), its warm-up runs 1 first, and 0 must be the one 5% faster.
  expect_warm_up(t, big, 1);
  run_trials(t, big, {500, 500});
  EXPECT_EQ(t.decide(big, {1960, 2000}, 1), 1);
  EXPECT_EQ(t.chosen(big), 1);
  for (std::uint64_t i = 0; i < d::AllReduceTuner::kFirstQuiet; ++i) t.next(big, 1);
  run_trials(t, big, {500, 500});
  EXPECT_EQ(t.decide(big, {1880, 2000}, 1), 0);
}

// Figure::Fastest (the shared-memory tuners): trials in runs of
// kFastestSamples of each, the next epoch's starting with the other; a
// member reports the fastest of each alternative's trials.
TEST(CoreTuner, FastestFigureRunsTrialsInRunsAndReportsTheFastest) {
  d::AllReduceTuner t(8 << 10, SIZE_MAX, d::AllReduceTuner::Figure::Fastest);
  ASSERT_EQ(t.samples(), d::AllReduceTuner::kFastestSamples);
  EXPECT_TRUE(t.covers(std::size_t(1) << 40));
  const std::size_t b = 200000;
  const std::int64_t k = t.samples();
  expect_warm_up(t, b, 0);
  std::vector<int> runs;
  for (int a : {0, 1})
    for (int i = 0; i < k; ++i) runs.push_back(a);
  // run_trials records ns[a] + i for the i-th trial: the fastest of each is
  // its first.
  EXPECT_EQ(run_trials(t, b, {3000, 7000}), runs);
  std::array<std::int64_t, 2> m = t.means(b);
  EXPECT_EQ(m[0], 3000);
  EXPECT_EQ(m[1], 7000 + k);
  EXPECT_EQ(t.decide(b, {3000, 7000}), 0);
  for (std::uint64_t i = 0; i < d::AllReduceTuner::kFirstQuiet; ++i) EXPECT_EQ(t.next(b).algo, 0);
  std::reverse(runs.begin(), runs.end());
  EXPECT_EQ(run_trials(t, b, {9000, 100}), runs);
  m = t.means(b);
  EXPECT_EQ(m[0], 9000 + k);  // this epoch's trials only
  EXPECT_EQ(m[1], 100);
  EXPECT_EQ(t.decide(b, m), 1);
  // Slow trials (the first after a switch) do not hide a fast one.
  d::AllReduceTuner u(0, SIZE_MAX, d::AllReduceTuner::Figure::Fastest);
  expect_warm_up(u, b, 0);
  for (int i = 0; i < 2 * k; ++i) {
    const d::AllReduceTuner::Step s = u.next(b);
    u.record(b, s.algo, s.algo == 0 ? (i == k - 1 ? 1000 : 500000) : 2000 + i);
  }
  EXPECT_EQ(u.means(b)[0], 1000);
  EXPECT_EQ(u.means(b)[1], 2000 + k);
  // The mean figure keeps kSamples, alternating.
  EXPECT_EQ(d::AllReduceTuner(0, 1).samples(), d::AllReduceTuner::kSamples);
}

// MeanAfterFirst: runs of kRunSamples + 1 of each, the first of each run
// untimed (whatever it would have recorded), the mean of the rest.
TEST(CoreTuner, MeanAfterFirstFigureSkipsTheFirstOfEachRun) {
  d::AllReduceTuner t(0, 16 << 10, d::AllReduceTuner::Figure::MeanAfterFirst);
  const std::int64_t k = d::AllReduceTuner::kRunSamples;
  ASSERT_EQ(t.samples(), k);
  EXPECT_FALSE(t.covers(0));
  EXPECT_TRUE(t.covers(8));
  EXPECT_FALSE(t.covers((16 << 10) + 1));
  const std::size_t b = 8;
  expect_warm_up(t, b, 0);
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<int> ran, timed;
    for (int i = 0; i < 2 * (k + 1); ++i) {
      const d::AllReduceTuner::Step s = t.next(b);
      EXPECT_FALSE(s.agree) << i;
      ran.push_back(s.algo);
      timed.push_back(s.timed);
      // The first of each run is slow (it follows the other algorithm);
      // were it recorded, it would turn the choice.
      if (s.timed) t.record(b, s.algo, (s.algo == 0 ? 300000 : 200000) + i);
    }
    std::vector<int> want_ran, want_timed;
    for (int a : {epoch % 2, 1 - epoch % 2})
      for (int i = 0; i <= k; ++i) {
        want_ran.push_back(a);
        want_timed.push_back(i != 0);
      }
    EXPECT_EQ(ran, want_ran) << "epoch " << epoch;
    EXPECT_EQ(timed, want_timed) << "epoch " << epoch;
    const d::AllReduceTuner::Step agree = t.next(b);
    EXPECT_TRUE(agree.agree);
    // Means of the timed ones (whole nanoseconds): trial i records base + i,
    // i over the run's positions 1..k (first run) or k+2..2k+1 (second).
    const std::array<std::int64_t, 2> m = t.means(b);
    const std::int64_t first_run = (k + 1) / 2, second_run = (k + 1) + (k + 1) / 2;
    EXPECT_EQ(m[0], 300000 + (epoch % 2 == 0 ? first_run : second_run)) << "epoch " << epoch;
    EXPECT_EQ(m[1], 200000 + (epoch % 2 == 0 ? second_run : first_run)) << "epoch " << epoch;
    EXPECT_EQ(t.decide(b, m), 1);
    const std::uint64_t quiet = epoch == 0 ? d::AllReduceTuner::kFirstQuiet : 4 * d::AllReduceTuner::kFirstQuiet;
    for (std::uint64_t i = 0; i < quiet; ++i) EXPECT_EQ(t.next(b).algo, 1);
  }
}

TEST(CoreTuner, EpochsGrowFourfoldUpToTheLimit) {
  d::AllReduceTuner t(8 << 10, 64 << 10);
  const std::size_t b = 40000;
  std::uint64_t quiet = d::AllReduceTuner::kFirstQuiet;
  expect_warm_up(t, b, 0);
  run_trials(t, b, {100, 200});
  for (int epoch = 0; epoch < 8; ++epoch) {
    EXPECT_EQ(t.decide(b, {100, 200}), 0);
    std::uint64_t n = 0;
    while (!t.next(b).timed) ++n;  // counts up to the next epoch's first trial
    EXPECT_EQ(n, quiet) << "epoch " << epoch;
    quiet = std::min<std::uint64_t>(quiet * 4, d::AllReduceTuner::kMaxQuiet);
    for (int i = 1; i < 2 * d::AllReduceTuner::kSamples; ++i) ASSERT_TRUE(t.next(b).timed);
    ASSERT_TRUE(t.next(b).agree);
  }
  EXPECT_EQ(quiet, d::AllReduceTuner::kMaxQuiet);
}

TEST(CoreTuner, AStepTimesItsTrialsAndDecidesOnTheExchangedSums) {
  d::AllReduceTuner t(8 << 10, 64 << 10);
  const std::size_t b = 20000;
  // This process finds alternative 1 50 ms slower than 0 in every trial.
  d::AllReduceTuner::set_test_penalty(0, 50000000);
  std::vector<int> ran;
  int exchanges = 0, heard = -1;
  const int steps = 2 + 2 * d::AllReduceTuner::kSamples + 3;
  for (int i = 0; i < steps; ++i) {
    const int a = t.step(
        b, 0,
        [&](std::array<std::int64_t, 2>& sums) {
          ++exchanges;
          EXPECT_GE(sums[1], 50000000);            // this member's means: the runs take
          EXPECT_GT(sums[1] - sums[0], 49000000);  // microseconds at most
          std::swap(sums[0], sums[1]);             // the others saw it the other way round
        },
        [&](const std::array<std::int64_t, 2>& sums, int algo) {
          EXPECT_LT(sums[1], sums[0]);
          heard = algo;
        },
        [&](int algo) { ran.push_back(algo); });
    EXPECT_EQ(a, ran.back());
  }
  d::AllReduceTuner::set_test_penalty(0, 0);
  EXPECT_EQ(exchanges, 1);
  EXPECT_EQ(heard, 1);  // the exchanged sums decide, not this member's own times
  std::vector<int> expected = {0, 1};
  for (int a : alternating(0)) expected.push_back(a);
  expected.insert(expected.end(), {1, 1, 1});
  EXPECT_EQ(ran, expected);
  EXPECT_EQ(t.chosen(b), 1);
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

// ---- the planner: table, overrides, timed choices; the registry -----------------------

// The planner's choice for a collective named as TUTTI_ALGO names it.
const char* choose(const char* collective, std::size_t bytes, const d::Config& c, const d::Shape& s) {
  d::Collective coll;
  if (!d::find_collective(collective, &coll)) ADD_FAILURE() << "no collective " << collective;
  return d::Planner::choose(coll, bytes, c, s).name;
}
// A communicator of unknown shape (matching every rule), on one host or not.
const char* choose(const char* collective, std::size_t bytes, const d::Config& c, bool single_host) {
  d::Shape s;
  s.single_host = single_host;
  return choose(collective, bytes, c, s);
}

d::Shape shape(int ranks, int hosts = 0, int per_host = 0) {
  d::Shape t;
  t.ranks = ranks;
  t.hosts = hosts;
  t.ranks_per_host = per_host;
  return t;
}

TEST(CoreSelection, AllReduceBySize) {
  d::Config c;
  const std::size_t small = c.small_bytes;
  const d::Shape t = shape(8, 2, 4);
  EXPECT_STREQ(choose("all_reduce", 0, c, t), "recursive_doubling");
  EXPECT_STREQ(choose("all_reduce", 1, c, t), "recursive_doubling");
  EXPECT_STREQ(choose("all_reduce", small, c, t), "recursive_doubling");
  EXPECT_STREQ(choose("all_reduce", small + 1, c, t), "rabenseifner");
  EXPECT_STREQ(choose("all_reduce", std::size_t(4) << 20, c, t), "rabenseifner");
  EXPECT_STREQ(choose("all_reduce", (std::size_t(4) << 20) + 1, c, t), "ring");
  EXPECT_STREQ(choose("all_reduce", std::size_t(1) << 30, c, t), "ring");
  EXPECT_STREQ(choose("all_reduce", ~std::size_t(0), c, t), "ring");
  // Up to 4 ranks on one host Rabenseifner stays ahead at every size; across hosts the ring.
  EXPECT_STREQ(choose("all_reduce", std::size_t(1) << 30, c, shape(4, 1, 4)), "rabenseifner");
  EXPECT_STREQ(choose("all_reduce", std::size_t(1) << 30, c, shape(4, 4, 1)), "ring");

  c.small_bytes = 0;
  EXPECT_STREQ(choose("all_reduce", 0, c, t), "recursive_doubling");
  EXPECT_STREQ(choose("all_reduce", 1, c, t), "rabenseifner");
  c.small_bytes = 1000;
  EXPECT_STREQ(choose("all_reduce", 1000, c, t), "recursive_doubling");
  EXPECT_STREQ(choose("all_reduce", 1001, c, t), "rabenseifner");
}

TEST(CoreSelection, OtherCollectivesBySizeAndShape) {
  d::Config c;
  const std::size_t K = 1024;
  struct Row {
    const char* coll;
    std::size_t bytes;
    int ranks;
    const char* algo;
  };
  struct HostRow {
    const char* coll;
    std::size_t bytes;
    int ranks, hosts;
    const char* algo;
  };
  const HostRow host_rows[] = {
      {"broadcast", 256 * K, 4, 4, "binomial"},
      {"broadcast", 256 * K + 1, 4, 4, "chain"},
      {"broadcast", 256 * K + 1, 16, 2, "chain"},
      {"broadcast", 256 * K + 1, 17, 2, "scatter_all_gather"},
      {"broadcast", 256 * K + 1, 8, 1, "scatter_all_gather"},
      {"broadcast", std::size_t(1) << 30, 2, 2, "binomial"},
  };
  for (const HostRow& r : host_rows)
    EXPECT_STREQ(choose(r.coll, r.bytes, c, shape(r.ranks, r.hosts, (r.ranks + r.hosts - 1) / r.hosts)), r.algo)
        << r.coll << " at " << r.bytes << " B on " << r.ranks << " ranks, " << r.hosts << " hosts";
  const Row rows[] = {
      {"broadcast", 0, 8, "binomial"},
      {"broadcast", 256 * K, 8, "binomial"},
      {"broadcast", 256 * K + 1, 8, "scatter_all_gather"},
      {"broadcast", 256 * K + 1, 3, "scatter_all_gather"},
      {"broadcast", std::size_t(1) << 30, 2, "binomial"},  // two ranks: one send is best
      {"all_gather", 8, 8, "bruck"},
      {"all_gather", 8 * K, 8, "bruck"},
      {"all_gather", 8 * K + 1, 8, "recursive_doubling"},
      {"all_gather", 8, 7, "recursive_doubling"},
      {"all_gather", 256 * K, 5, "recursive_doubling"},
      {"all_gather", 256 * K + 1, 5, "ring"},
      {"reduce_scatter", 8 * K, 5, "recursive_halving"},
      {"reduce_scatter", 8 * K + 1, 8, "ring"},
      {"reduce_scatter", 64 * K, 8, "recursive_halving"},
      {"reduce_scatter", 64 * K, 6, "ring"},
      {"reduce_scatter", std::size_t(1) << 30, 16, "recursive_halving"},
      {"all_to_all", 32 * K, 8, "bruck"},
      {"all_to_all", 32 * K + 1, 8, "pairwise"},
  };
  for (const Row& r : rows)
    EXPECT_STREQ(choose(r.coll, r.bytes, c, shape(r.ranks, 1, r.ranks)), r.algo)
        << r.coll << " at " << r.bytes << " B on " << r.ranks << " ranks";
  // On one host the chain is never a default.
  for (int n : {2, 3, 8, 64})
    for (std::size_t b : {std::size_t(0), std::size_t(1) << 20, std::size_t(1) << 40})
      EXPECT_STRNE(choose("broadcast", b, c, shape(n, 1, n)), "chain");
}

TEST(CoreSelection, OtherCollectivesAtAnySize) {
  const std::pair<const char*, const char*> table[] = {
      {"reduce", "binomial"},
      {"gather", "linear"},
      {"scatter", "linear"},
      {"barrier", "dissemination"},
  };
  d::Config c;
  for (auto [coll, algo] : table)
    for (std::size_t bytes : {std::size_t(0), std::size_t(1), c.small_bytes, c.small_bytes + 1, std::size_t(1) << 40})
      EXPECT_STREQ(choose(coll, bytes, c, false), algo) << coll << " at " << bytes;
}

TEST(CoreSelection, OverrideHonoured) {
  d::Config c;
  c.algo["all_reduce"] = "ring";
  EXPECT_STREQ(choose("all_reduce", 0, c, false), "ring");
  EXPECT_STREQ(choose("all_reduce", 8, c, false), "ring");
  c.algo["all_reduce"] = "recursive_doubling";
  EXPECT_STREQ(choose("all_reduce", std::size_t(1) << 30, c, false), "recursive_doubling");
  c.algo["broadcast"] = "chain";  // never a default at 8 bytes, but forcible
  EXPECT_STREQ(choose("broadcast", 8, c, shape(8)), "chain");
  // Another collective's override leaves all_reduce alone.
  d::Config c2;
  c2.algo["broadcast"] = "binomial";
  EXPECT_STREQ(choose("all_reduce", std::size_t(1) << 30, c2, shape(8)), "ring");
  EXPECT_STREQ(choose("broadcast", 0, c2, false), "binomial");
}

TEST(CoreSelection, UnknownAlgorithmNamesKnownOnes) {
  d::Config c;
  c.algo["all_reduce"] = "tree";
  Error e = expect_error([&] { choose("all_reduce", 16, c, false); });
  EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
  EXPECT_CONTAINS(e.message(), "unknown algorithm 'tree' for all_reduce");
  EXPECT_CONTAINS(e.message(), "known: shm, recursive_doubling, rabenseifner, ring");

  c.algo["broadcast"] = "ring";  // a real algorithm, but not a broadcast one
  e = expect_error([&] { choose("broadcast", 16, c, false); });
  EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
  EXPECT_CONTAINS(e.message(), "unknown algorithm 'ring' for broadcast");
  EXPECT_CONTAINS(e.message(), "known: shm, binomial, chain, scatter_all_gather");
}

TEST(CoreSelection, CollectivesByName) {
  d::Collective c;
  EXPECT_FALSE(d::find_collective("allreduce", &c));
  EXPECT_FALSE(d::find_collective("", &c));
  for (int i = 0; i < d::kCollectives; ++i) {
    const auto want = static_cast<d::Collective>(i);
    ASSERT_TRUE(d::find_collective(d::collective_name(want), &c)) << i;
    EXPECT_EQ(c, want);
  }
}

// Every collective: one shared-memory algorithm, one fallback on the
// network, names unique; the two-level form for the four that have one;
// every network all_reduce has the kernel timed choices call; every
// algorithm runs something and says what.
TEST(CoreRegistry, EveryCollectiveIsWhole) {
  for (int i = 0; i < d::kCollectives; ++i) {
    const auto coll = static_cast<d::Collective>(i);
    int shm = 0, fallback = 0, two_level = 0;
    std::set<std::string> names;
    for (const d::Algorithm& a : d::algorithms()) {
      if (a.collective != coll) continue;
      EXPECT_TRUE(names.insert(a.name).second) << d::collective_name(coll) << ": " << a.name << " twice";
      EXPECT_NE(a.run, nullptr) << a.name;
      EXPECT_GT(std::strlen(a.summary), 10u) << a.name;
      shm += a.medium == d::Medium::SharedMemory;
      two_level += a.medium == d::Medium::TwoLevel;
      if (a.fallback) {
        ++fallback;
        EXPECT_EQ(a.medium, d::Medium::Network) << a.name;
        EXPECT_FALSE(a.equal_blocks_only) << a.name;
      }
      if (coll == d::Collective::AllReduce && a.medium == d::Medium::Network) {
        EXPECT_NE(a.kernel, nullptr) << a.name;
      }
      EXPECT_EQ(d::find_algorithm(coll, a.name), &a);
    }
    EXPECT_EQ(shm, 1) << d::collective_name(coll);
    EXPECT_EQ(fallback, 1) << d::collective_name(coll);
    const bool has_two_level = coll == d::Collective::AllReduce || coll == d::Collective::Broadcast ||
                               coll == d::Collective::AllGather || coll == d::Collective::ReduceScatter;
    EXPECT_EQ(two_level, has_two_level ? 1 : 0) << d::collective_name(coll);
    EXPECT_EQ(&d::fallback_algorithm(coll), d::find_algorithm(coll, d::fallback_algorithm(coll).name));
  }
  const std::string md = d::algorithms_markdown();
  for (const d::Algorithm& a : d::algorithms())
    EXPECT_CONTAINS(md, std::string("| ") + d::collective_name(a.collective) + " | `" + a.name + "` |");
}

// Shared memory and the two-level forms come before the table; TUTTI_ALGO
// before both.
TEST(CoreSelection, MediaByShape) {
  d::Config c;
  d::Shape one_host = shape(4, 1, 4);
  one_host.single_host = true;
  d::Shape two_level = shape(8, 4, 2);
  two_level.two_level = true;
  for (const char* coll : {"all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all", "gather",
                           "scatter", "barrier"}) {
    EXPECT_STREQ(choose(coll, 1 << 20, c, one_host), "shm") << coll;
    const bool has = !std::strcmp(coll, "all_reduce") || !std::strcmp(coll, "broadcast") ||
                     !std::strcmp(coll, "all_gather") || !std::strcmp(coll, "reduce_scatter");
    if (has) {
      EXPECT_STREQ(choose(coll, 1 << 20, c, two_level), "two_level") << coll;
    } else {
      EXPECT_STRNE(choose(coll, 1 << 20, c, two_level), "shm") << coll;
    }
  }
  // TUTTI_TRANSPORT=tcp: the table on one host too.
  d::Config tcp;
  tcp.transport = "tcp";
  EXPECT_STREQ(choose("all_reduce", 8, tcp, one_host), "recursive_doubling");
  // Naming an algorithm runs it flat on a two-level communicator; naming
  // two_level elsewhere means the table's.
  c.algo["all_reduce"] = "ring";
  EXPECT_STREQ(choose("all_reduce", 8, c, two_level), "ring");
  c.algo["all_reduce"] = "two_level";
  EXPECT_STREQ(choose("all_reduce", 8, c, two_level), "two_level");
  EXPECT_STREQ(choose("all_reduce", 8, c, shape(8, 8, 1)), "recursive_doubling");
  // Shared memory named for a communicator across hosts is refused.
  c.algo["all_reduce"] = "shm";
  const Error e = expect_error([&] { choose("all_reduce", 8, c, shape(8, 8, 1)); });
  EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
  EXPECT_CONTAINS(e.message(), "all_reduce:shm needs every rank of the communicator on one host");
}

// The network all_reduce's timed choices: recursive doubling against
// Rabenseifner in (TUTTI_SMALL_BYTES/8, TUTTI_SMALL_BYTES], Rabenseifner
// against the ring in (512 KiB, 4 MiB]; none with tuning off, none where
// TUTTI_ALGO names an all_reduce algorithm; shared memory's per collective.
TEST(CorePlanner, TimedChoices) {
  d::Config c;  // algo_tuning "auto"
  d::Planner p;
  p.configure(c, shape(8, 4, 2));
  const std::size_t small = c.small_bytes;
  auto plan = p.plan(d::Collective::AllReduce, small / 8);
  EXPECT_STREQ(plan.algorithm->name, "recursive_doubling");
  EXPECT_EQ(plan.tuner, nullptr);
  plan = p.plan(d::Collective::AllReduce, small);
  ASSERT_NE(plan.tuner, nullptr);
  EXPECT_STREQ(plan.algorithm->name, "recursive_doubling");
  EXPECT_STREQ(plan.alternative->name, "rabenseifner");
  plan = p.plan(d::Collective::AllReduce, small + 1);
  EXPECT_STREQ(plan.algorithm->name, "rabenseifner");
  EXPECT_EQ(plan.tuner, nullptr);
  plan = p.plan(d::Collective::AllReduce, std::size_t(4) << 20);
  ASSERT_NE(plan.tuner, nullptr);
  EXPECT_STREQ(plan.alternative->name, "ring");
  plan = p.plan(d::Collective::AllReduce, (std::size_t(4) << 20) + 1);
  EXPECT_STREQ(plan.algorithm->name, "ring");
  EXPECT_EQ(plan.tuner, nullptr);
  EXPECT_EQ(p.plan(d::Collective::Broadcast, small).tuner, nullptr);
  EXPECT_EQ(p.shm_tuner(d::Collective::AllReduce), nullptr);  // not one host
  // Two ranks across hosts: `auto` does not time.
  p.configure(c, shape(2, 2, 1));
  EXPECT_EQ(p.plan(d::Collective::AllReduce, small).tuner, nullptr);
  d::Config off = c;
  off.algo_tuning = "off";
  p.configure(off, shape(8, 4, 2));
  EXPECT_EQ(p.plan(d::Collective::AllReduce, small).tuner, nullptr);
  d::Config named = c;
  named.algo["all_reduce"] = "recursive_doubling";
  p.configure(named, shape(8, 4, 2));
  plan = p.plan(d::Collective::AllReduce, small);
  EXPECT_STREQ(plan.algorithm->name, "recursive_doubling");
  EXPECT_EQ(plan.tuner, nullptr);
  // One host: shared memory everywhere without a table walk, and its
  // timed choice of single copy against copying for all but barrier.
  d::Shape host = shape(4, 1, 4);
  host.single_host = true;
  p.configure(c, host);
  EXPECT_STREQ(p.plan(d::Collective::Gather, 8).algorithm->name, "shm");
  EXPECT_NE(p.shm_tuner(d::Collective::AllToAll), nullptr);
  EXPECT_EQ(p.shm_tuner(d::Collective::Barrier), nullptr);
  EXPECT_EQ(p.chunk_bytes(), c.chunk_bytes);
  p.configure(c, shape(8, 4, 2));
  EXPECT_EQ(p.chunk_bytes(), c.hosts_chunk_bytes);
  EXPECT_EQ(p.small_pipe_bytes(), p.thresholds().network.small_pipe_bytes_hosts);
}

TEST(CoreSelection, ValidateAlgoOverrides) {
  d::Config c;
  EXPECT_NO_THROW(d::Planner::validate_overrides(c));
  c.algo = {{"all_reduce", "ring"}, {"broadcast", "binomial"}, {"barrier", "dissemination"}};
  EXPECT_NO_THROW(d::Planner::validate_overrides(c));

  c.algo = {{"allreduce", "ring"}};
  Error e = expect_error([&] { d::Planner::validate_overrides(c); });
  EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
  EXPECT_CONTAINS(e.message(), "unknown collective 'allreduce'");
  EXPECT_CONTAINS(e.message(), "known: all_reduce, broadcast");

  c.algo = {{"all_reduce", "ring"}, {"reduce", "tree"}};
  e = expect_error([&] { d::Planner::validate_overrides(c); });
  EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
  EXPECT_CONTAINS(e.message(), "unknown algorithm 'tree' for reduce");
  EXPECT_CONTAINS(e.message(), "known: shm, binomial");
}

// ---- frame header / hello --------------------------------------------------------------

TEST(CoreFrame, HeaderAcceptsGood) {
  d::FrameHeader h;
  EXPECT_EQ(d::validate_frame_header(h), "");
  h.comm_id = ~std::uint64_t(0);
  h.tag = d::p2p_tag(INT_MAX);
  h.signature = 0x1234567890abcdefull;
  h.bytes = d::kMaxFrameBytes;  // the bound itself is allowed
  EXPECT_EQ(d::validate_frame_header(h), "");
  h.flags = d::kFrameLostNotice;
  h.bytes = d::kMaxNoticeBytes;
  EXPECT_EQ(d::validate_frame_header(h), "");
  h.flags = d::kFrameGoodbye;
  h.bytes = 0;
  EXPECT_EQ(d::validate_frame_header(h), "");
}

TEST(CoreFrame, HeaderRejectsBadFlags) {
  d::FrameHeader h;
  h.flags = 0x8000;
  EXPECT_EQ(d::validate_frame_header(h), "unknown frame flags 32768");
  h.flags = d::kFrameGoodbye;
  h.bytes = 1;
  EXPECT_EQ(d::validate_frame_header(h), "goodbye frame with a payload");
  h.flags = d::kFrameLostNotice;
  h.bytes = d::kMaxNoticeBytes + 1;
  EXPECT_EQ(d::validate_frame_header(h), "lost-peer notice of 1025 bytes");
}

TEST(CoreFrame, HeaderRejectsBadFields) {
  d::FrameHeader h;
  h.magic = 0x12345678;
  EXPECT_EQ(d::validate_frame_header(h), "bad frame magic " + std::to_string(0x12345678u));
  h = {};
  h.magic = d::kHelloMagic;  // a hello where a frame was expected
  EXPECT_CONTAINS(d::validate_frame_header(h), "bad frame magic");

  h = {};
  h.version = 2;
  EXPECT_EQ(d::validate_frame_header(h), "unsupported frame version 2");
  h.version = 0;
  EXPECT_EQ(d::validate_frame_header(h), "unsupported frame version 0");

  h = {};
  h.bytes = d::kMaxFrameBytes + 1;
  EXPECT_EQ(d::validate_frame_header(h), "frame claims " + std::to_string(d::kMaxFrameBytes + 1) + " bytes");
  h.bytes = ~std::uint64_t(0);
  EXPECT_CONTAINS(d::validate_frame_header(h), "frame claims");
}

d::Hello good_hello(int rank, int world, std::uint64_t job) {
  d::Hello h;
  h.rank = rank;
  h.world_size = world;
  h.job_id = job;
  return h;
}

TEST(CoreFrame, HelloAcceptsGood) {
  for (int world : {1, 2, 5, 64})
    for (int rank = 0; rank < world; ++rank) EXPECT_EQ(d::validate_hello(good_hello(rank, world, 42), world, 42), "");
}

TEST(CoreFrame, HelloRejectsBadFields) {
  d::Hello h = good_hello(1, 4, 42);
  h.magic = d::kFrameMagic;
  EXPECT_EQ(d::validate_hello(h, 4, 42), "not a tutti peer (bad hello magic)");

  h = good_hello(1, 4, 42);
  h.version = 7;
  EXPECT_EQ(d::validate_hello(h, 4, 42), "peer speaks protocol version 7");

  h = good_hello(1, 8, 42);
  EXPECT_EQ(d::validate_hello(h, 4, 42), "peer believes the world has 8 ranks, this rank 4");

  for (int bad_rank : {-1, 4, 100}) {
    h = good_hello(bad_rank, 4, 42);
    EXPECT_EQ(d::validate_hello(h, 4, 42), "peer claims rank " + std::to_string(bad_rank));
  }

  h = good_hello(1, 4, 43);
  EXPECT_EQ(d::validate_hello(h, 4, 42), "peer belongs to another job");
}

TEST(CoreFrame, IncomingHelloMustComeFromAHigherRank) {
  EXPECT_EQ(d::check_incoming_hello(good_hello(3, 4, 42), 1, 4, 42), "");
  EXPECT_EQ(d::check_incoming_hello(good_hello(1, 4, 42), 1, 4, 42), "rank 1 must not connect to rank 1");
  EXPECT_EQ(d::check_incoming_hello(good_hello(0, 4, 42), 2, 4, 42), "rank 0 must not connect to rank 2");
  // validate_hello's checks come first.
  EXPECT_EQ(d::check_incoming_hello(good_hello(3, 4, 43), 1, 4, 42), "peer belongs to another job");
  EXPECT_EQ(d::check_incoming_hello(good_hello(-1, 4, 42), 1, 4, 42), "peer claims rank -1");
}

TEST(CoreFrame, HelloSaysWhichOfThePairsConnectionsItIs) {
  d::Hello h = good_hello(2, 4, 42);
  for (int count : {1, 2, 5, 17})
    for (int index = 0; index < count; ++index) {
      h.link = d::hello_link(count, index);
      EXPECT_EQ(d::hello_link_count(h), count);
      EXPECT_EQ(d::hello_link_index(h), index);
      EXPECT_EQ(d::validate_hello(h, 4, 42), "");
    }
  EXPECT_EQ(d::hello_link(1, 0), 0);  // one connection: as before the field existed
  h.link = d::hello_link(3, 3);
  EXPECT_EQ(d::validate_hello(h, 4, 42), "peer opens connection 3 of 3");
  h.link = d::hello_link(18, 0);
  EXPECT_EQ(d::validate_hello(h, 4, 42), "peer opens connection 0 of 18");
}

// Stripes tile the message exactly, in order, in multiples of 4 KiB but the
// last non-empty one.
TEST(CoreFrame, StripesTileTheMessage) {
  for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{4095}, std::size_t{4096}, std::size_t{4097},
                            std::size_t{12288}, std::size_t{12289}, std::size_t{1} << 20, (std::size_t{1} << 30) + 3})
    for (int n = 1; n <= 16; ++n) {
      std::size_t next = 0;
      bool ended = false;
      for (int i = 0; i < n; ++i) {
        d::StripeExtent e = d::stripe_extent(bytes, n, i);
        EXPECT_EQ(e.offset, next) << bytes << " " << n << " " << i;
        if (ended) {
          EXPECT_EQ(e.length, 0u);
        }
        EXPECT_LE(e.length, (bytes + std::size_t(n) - 1) / std::size_t(n) + 4095);  // balanced
        if (e.length % 4096 != 0) ended = true;                                     // only the last may be ragged
        if (e.length == 0) ended = true;
        next = e.offset + e.length;
      }
      EXPECT_EQ(next, bytes) << bytes << " over " << n;
    }
}

}  // namespace

namespace {

TEST(CoreSelection, SharedMemoryOnOneHostUnlessTcpIsForced) {
  tutti::detail::Config c;
  for (const char* coll : {"all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all", "gather",
                           "scatter", "barrier"}) {
    EXPECT_STREQ(choose(coll, 8, c, true), "shm") << coll;
    EXPECT_STRNE(choose(coll, 8, c, false), "shm") << coll;
  }
  c.transport = "tcp";
  EXPECT_STREQ(choose("all_reduce", 8, c, true), "recursive_doubling");
  c.transport = "auto";
  c.algo["all_reduce"] = "ring";
  EXPECT_STREQ(choose("all_reduce", 8, c, true), "ring");
  c.algo["all_reduce"] = "shm";
  try {
    choose("all_reduce", 8, c, false);
    ADD_FAILURE() << "shm accepted for a communicator spanning hosts";
  } catch (const tutti::Error& e) {
    EXPECT_EQ(e.kind(), tutti::ErrorKind::InvalidArgument);
    EXPECT_NE(e.message().find("one host"), std::string::npos) << e.message();
  }
}

}  // namespace

namespace {

// Per-rank arrays: in place up to N, on the heap beyond (communicators of
// more than 16 ranks), copied whole into queued operations.
TEST(SmallVector, InPlaceThenHeapCopyMoveAndSpan) {
  for (std::size_t n : {0u, 1u, 3u, 4u, 5u, 9u, 40u}) {
    d::SmallVector<std::uint64_t, 4> v;
    for (std::size_t i = 0; i < n; ++i) v.push_back(0x9e3779b97f4a7c15ull * (i + 1));
    ASSERT_EQ(v.size(), n);
    const d::SmallVector<std::uint64_t, 4> copy(v);
    d::SmallVector<std::uint64_t, 4> tmp(copy);
    const d::SmallVector<std::uint64_t, 4> moved(std::move(tmp));
    EXPECT_EQ(tmp.size(), 0u);
    const std::span<const std::uint64_t> view = moved;
    ASSERT_EQ(view.size(), n);
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint64_t want = 0x9e3779b97f4a7c15ull * (i + 1);
      EXPECT_EQ(v[i], want) << n << " " << i;
      EXPECT_EQ(copy[i], want) << n << " " << i;
      EXPECT_EQ(view[i], want) << n << " " << i;
    }
    // Appending an element of the vector itself while it grows.
    if (n > 0) {
      v.push_back(v[0]);
      EXPECT_EQ(v[n], v[0]);
    }
  }
  d::SmallVector<int, 2> r(7, -3);
  ASSERT_EQ(r.size(), 7u);
  for (int x : r) EXPECT_EQ(x, -3);
  r.resize(9, 5);
  EXPECT_EQ(r[6], -3);
  EXPECT_EQ(r[8], 5);
  const int src[] = {4, 8, 15, 16, 23};
  const d::SmallVector<int, 2> from(std::begin(src), std::end(src));
  ASSERT_EQ(from.size(), 5u);
  for (std::size_t i = 0; i < 5; ++i) EXPECT_EQ(from[i], src[i]);
}

}  // namespace

// ---- signatures -----------------------------------------------------------------

// Broadcasts of up to 8 bytes in shared memory carry a 32-bit tag of their
// signature in their packed record (ShmGroup::packed_stamp): the signature
// hash with its low four bits replaced by the byte count. Two broadcasts
// that differ in dtype must differ in the rest of those bits, else a
// receiver would take a record of another dtype for its own.
TEST(CoreSignature, BroadcastsOfEveryDtypeDifferInThePackedTagsBits) {
  std::set<std::uint32_t> tags;
  for (int d = 0; d < tutti::kNumDataTypes; ++d) {
    d::OpContext c;
    c.op_name = "broadcast";
    c.dtype_name = tutti::dtype_name(static_cast<tutti::DataType>(d));
    c.root = 0;
    const auto tag = static_cast<std::uint32_t>(d::op_signature(c) >> 32) & ~0xFu;
    EXPECT_TRUE(tags.insert(tag).second) << c.dtype_name;
    // And the signature tells the dtype back.
    EXPECT_CONTAINS(d::describe_signature(d::op_signature(c), 8), c.dtype_name);
  }
  EXPECT_EQ(tags.size(), static_cast<std::size_t>(tutti::kNumDataTypes));
}
