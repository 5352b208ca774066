// The registry of algorithms and the planner (plan/registry.h, plan/planner.h):
// the table, TUTTI_ALGO, media by shape, timed choices.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/config.h"
#include "common/errors.h"
#include "plan/planner.h"
#include "tutti/error.h"

namespace {

using tutti::Error;
using tutti::ErrorKind;
namespace d = tutti::detail;

using tutti::testing::expect_error;

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
  // Across 512 hosts or more, a power of two, Rabenseifner at every size.
  EXPECT_STREQ(choose("all_reduce", std::size_t(1) << 30, c, shape(512, 512, 1)), "rabenseifner");
  EXPECT_STREQ(choose("all_reduce", std::size_t(8) << 20, c, shape(2048, 2048, 1)), "rabenseifner");
  EXPECT_STREQ(choose("all_reduce", std::size_t(8) << 20, c, shape(256, 256, 1)), "ring");
  EXPECT_STREQ(choose("all_reduce", std::size_t(8) << 20, c, shape(768, 768, 1)), "ring");

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
      // Across hosts: binomial up to 32 KiB, the chain from 128 KiB a rank
      // (and above 256 KiB), scatter + all_gather between from 4 KiB a rank
      // (256 B from 17 ranks, 128 B from 129).
      {"broadcast", 32 * K, 4, 4, "binomial"},
      {"broadcast", 32 * K + 1, 4, 4, "scatter_all_gather"},
      {"broadcast", 64 * K - 1, 16, 16, "binomial"},
      {"broadcast", 64 * K, 16, 16, "scatter_all_gather"},
      {"broadcast", 256 * K, 16, 4, "scatter_all_gather"},
      {"broadcast", 32 * K, 128, 128, "binomial"},
      {"broadcast", 32 * K + 1, 128, 128, "scatter_all_gather"},
      {"broadcast", 256 * K - 1, 2048, 2048, "binomial"},
      {"broadcast", 256 * K, 2048, 2048, "scatter_all_gather"},
      {"broadcast", 512 * K - 1, 4, 4, "scatter_all_gather"},
      {"broadcast", 512 * K, 4, 4, "chain"},
      {"broadcast", 2048 * K - 1, 16, 16, "scatter_all_gather"},
      {"broadcast", 2048 * K, 16, 16, "chain"},
      {"broadcast", 256 * K + 1, 17, 2, "scatter_all_gather"},
      {"broadcast", 256 * K + 1, 8, 1, "scatter_all_gather"},
      {"broadcast", std::size_t(1) << 30, 2, 2, "binomial"},
      {"broadcast", std::size_t(1) << 30, 1024, 128, "chain"},
      // reduce across hosts: the chain from 32 KiB on 3-4 ranks, 64 KiB on
      // 5-12, 128 KiB on 13-16, 64 KiB a rank (and above 256 KiB) on more.
      {"reduce", 32 * K - 1, 4, 4, "binomial"},
      {"reduce", 32 * K, 4, 4, "chain"},
      {"reduce", 32 * K, 3, 3, "chain"},
      {"reduce", 32 * K, 5, 5, "binomial"},
      {"reduce", 64 * K - 1, 8, 4, "binomial"},
      {"reduce", 64 * K, 8, 4, "chain"},
      {"reduce", 64 * K, 12, 12, "chain"},
      {"reduce", 128 * K - 1, 16, 4, "binomial"},
      {"reduce", 128 * K, 13, 13, "chain"},
      {"reduce", 1024 * K - 1, 17, 17, "binomial"},
      {"reduce", 2048 * K - 1, 32, 32, "binomial"},
      {"reduce", 2048 * K - 1, 32, 32, "binomial"},
      {"reduce", 2048 * K, 32, 8, "chain"},
      {"reduce", 64 * K * 1024 - 1, 1024, 128, "binomial"},
      {"reduce", 64 * K * 1024, 1024, 128, "chain"},
      {"reduce", std::size_t(1) << 30, 2, 2, "binomial"},
      // all_to_all: bytes a peer.
      {"all_to_all", 2 * K, 16, 16, "bruck"},
      {"all_to_all", 2 * K + 1, 16, 16, "pairwise"},
      {"all_to_all", 2 * K, 32, 4, "bruck"},
      {"all_to_all", 128, 64, 8, "bruck"},
      {"all_to_all", 129, 64, 8, "pairwise"},
      {"all_to_all", 64, 4096, 512, "bruck"},
      {"all_to_all", 65, 4096, 512, "pairwise"},
      {"all_to_all", 32, 8192, 1024, "bruck"},
      {"all_to_all", 33, 8192, 1024, "pairwise"},
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
      {"reduce_scatter", 8 * K + 1, 8, "recursive_halving"},
      {"reduce_scatter", 32 * K, 8, "recursive_halving"},
      {"reduce_scatter", 8 * K + 1, 6, "ring"},
      {"reduce_scatter", 32 * K + 1, 8, "ring"},
      {"reduce_scatter", 64 * K, 6, "ring"},
      {"reduce_scatter", std::size_t(1) << 30, 16, "ring"},
      {"all_to_all", 4 * K, 8, "bruck"},  // bytes a peer, on one host
      {"all_to_all", 4 * K + 1, 8, "pairwise"},
      {"all_to_all", 4 * K, 64, "bruck"},
  };
  for (const Row& r : rows)
    EXPECT_STREQ(choose(r.coll, r.bytes, c, shape(r.ranks, 1, r.ranks)), r.algo)
        << r.coll << " at " << r.bytes << " B on " << r.ranks << " ranks";
  // On one host the chains are never a default.
  for (int n : {2, 3, 8, 64})
    for (std::size_t b : {std::size_t(0), std::size_t(1) << 20, std::size_t(1) << 40}) {
      EXPECT_STRNE(choose("broadcast", b, c, shape(n, 1, n)), "chain");
      EXPECT_STREQ(choose("reduce", b, c, shape(n, 1, n)), "binomial");
    }
}

// (reduce: CoreSelection.OtherCollectivesBySizeAndShape.)
TEST(CoreSelection, OtherCollectivesAtAnySize) {
  const std::pair<const char*, const char*> table[] = {
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
// algorithm runs something, through its medium's function alone, and says what.
TEST(CoreRegistry, EveryCollectiveIsWhole) {
  for (int i = 0; i < d::kCollectives; ++i) {
    const auto coll = static_cast<d::Collective>(i);
    int shm = 0, fallback = 0, two_level = 0;
    std::set<std::string> names;
    for (const d::Algorithm& a : d::algorithms()) {
      if (a.collective != coll) continue;
      EXPECT_TRUE(names.insert(a.name).second) << d::collective_name(coll) << ": " << a.name << " twice";
      // Exactly its medium's run function.
      EXPECT_EQ(a.run_network != nullptr, a.medium == d::Medium::Network) << a.name;
      EXPECT_EQ(a.run_shm != nullptr, a.medium == d::Medium::SharedMemory) << a.name;
      EXPECT_EQ(a.run_two_level != nullptr, a.medium == d::Medium::TwoLevel) << a.name;
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
    const bool has_two_level = coll != d::Collective::Barrier;
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
    // all_to_all: in two levels up to 8 KiB a peer (below).
    const bool has = std::strcmp(coll, "all_to_all") && std::strcmp(coll, "barrier");
    if (has) {
      EXPECT_STREQ(choose(coll, 1 << 20, c, two_level), "two_level") << coll;
    } else {
      EXPECT_STRNE(choose(coll, 1 << 20, c, two_level), "shm") << coll;
    }
  }
  EXPECT_STREQ(choose("all_to_all", 0, c, two_level), "two_level");
  EXPECT_STREQ(choose("all_to_all", 8 * 1024, c, two_level), "two_level");
  EXPECT_STREQ(choose("all_to_all", 8 * 1024 + 1, c, two_level), "pairwise");
  {
    d::Config forced;
    forced.algo["all_to_all"] = "two_level";
    EXPECT_STREQ(choose("all_to_all", 1 << 20, forced, two_level), "two_level");
    EXPECT_STREQ(choose("all_to_all", 8, forced, shape(8, 8, 1)), "bruck");
  }
  // A two-level form's cross communicators share each host's link:
  // all_to_all's rules hold for them as for a flat communicator of all
  // their ranks, with their own blocks (copies of the form's blocks a peer).
  d::Shape cross = shape(8, 8, 1);
  EXPECT_STREQ(choose("all_to_all", 2 * 1024, c, cross), "bruck");
  EXPECT_STREQ(choose("all_to_all", 2 * 1024 + 1, c, cross), "pairwise");
  cross.copies = 8;  // as 64 ranks, 8 a host: Bruck up to 128 B a cross block (16 B a peer of the form)
  EXPECT_STREQ(choose("all_to_all", 128, c, cross), "bruck");
  EXPECT_STREQ(choose("all_to_all", 128 + 8, c, cross), "pairwise");
  d::Shape pair = shape(4, 4, 1);
  pair.copies = 2;  // 4 x 2: as 8 ranks, Bruck up to 2 KiB a cross block (1 KiB a peer of the form)
  EXPECT_STREQ(choose("all_to_all", 2 * 1024, c, pair), "bruck");
  EXPECT_STREQ(choose("all_to_all", 2 * 1024 + 8, c, pair), "pairwise");
  d::Shape wide = shape(128, 128, 1);
  wide.copies = 8;  // as 1,024 ranks: Bruck up to 64 B a cross block (8 B a peer of the form)
  EXPECT_STREQ(choose("all_to_all", 64, c, wide), "bruck");
  EXPECT_STREQ(choose("all_to_all", 64 + 8, c, wide), "pairwise");
  EXPECT_STREQ(choose("all_reduce", 8, c, cross), "recursive_doubling");
  // TUTTI_TRANSPORT=tcp: the table on one host too.
  d::Config tcp;
  tcp.transport = d::Config::Transport::Tcp;
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
// Rabenseifner in (TUTTI_SMALL_BYTES/32, TUTTI_SMALL_BYTES], Rabenseifner
// against the ring in (512 KiB, 4 MiB]; none with tuning off, none where
// TUTTI_ALGO names an all_reduce algorithm; shared memory's per collective.
TEST(CorePlanner, TimedChoices) {
  d::Config c;  // algo_tuning "auto"
  d::Planner p;
  p.configure(c, shape(8, 4, 2));
  const std::size_t small = c.small_bytes;
  auto plan = p.plan(d::Collective::AllReduce, small / 32);
  EXPECT_STREQ(plan.algorithm->name, "recursive_doubling");
  EXPECT_EQ(plan.tuner, nullptr);
  plan = p.plan(d::Collective::AllReduce, small / 32 + 1);
  ASSERT_NE(plan.tuner, nullptr);
  EXPECT_STREQ(plan.alternative->name, "rabenseifner");
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
  // One host: shared memory everywhere without a table walk (its timed
  // choice is the medium's: test_shm_medium.cc).
  d::Shape host = shape(4, 1, 4);
  host.single_host = true;
  p.configure(c, host);
  EXPECT_STREQ(p.plan(d::Collective::Gather, 8).algorithm->name, "shm");
  EXPECT_EQ(p.chunk_bytes(), c.chunk_bytes);
  p.configure(c, shape(8, 4, 2));
  EXPECT_EQ(p.chunk_bytes(), c.hosts_chunk_bytes);
  EXPECT_EQ(p.small_pipe_bytes(), p.thresholds().network.small_pipe_bytes_hosts);
}

// Broadcast's binomial tree against scatter + all_gather, all_to_all's
// Bruck against pairwise: where the table runs the first, in their ranges,
// across hosts (and not where TUTTI_ALGO names the collective).
TEST(CorePlanner, TimedBroadcastAndAllToAll) {
  d::Config c;  // algo_tuning "auto"
  d::Planner p;
  p.configure(c, shape(8, 8, 1));
  const d::NetworkThresholds& net = p.thresholds().network;
  const std::size_t lo = net.broadcast_choice_low_bytes;
  auto plan = p.plan(d::Collective::Broadcast, lo);
  EXPECT_STREQ(plan.algorithm->name, "binomial");
  EXPECT_EQ(plan.tuner, nullptr);
  for (std::size_t bytes : {lo + 1, std::size_t(32) << 10}) {
    plan = p.plan(d::Collective::Broadcast, bytes);
    EXPECT_STREQ(plan.algorithm->name, "binomial") << bytes;
    ASSERT_NE(plan.tuner, nullptr) << bytes;
    EXPECT_STREQ(plan.alternative->name, "scatter_all_gather");
  }
  // The table's scatter + all_gather: not timed.
  plan = p.plan(d::Collective::Broadcast, (std::size_t(32) << 10) + 1);
  EXPECT_STREQ(plan.algorithm->name, "scatter_all_gather");
  EXPECT_EQ(plan.tuner, nullptr);
  // The chain (from 128 KiB a rank): not timed.
  plan = p.plan(d::Collective::Broadcast, std::size_t(1) << 20);
  EXPECT_STREQ(plan.algorithm->name, "chain");
  EXPECT_EQ(plan.tuner, nullptr);
  // Bruck (up to 2 KiB a peer on 32 ranks or fewer), timed above 16 B.
  plan = p.plan(d::Collective::AllToAll, net.all_to_all_choice_low_bytes);
  EXPECT_STREQ(plan.algorithm->name, "bruck");
  EXPECT_EQ(plan.tuner, nullptr);
  for (std::size_t bytes : {net.all_to_all_choice_low_bytes + 1, std::size_t(2) << 10}) {
    plan = p.plan(d::Collective::AllToAll, bytes);
    EXPECT_STREQ(plan.algorithm->name, "bruck") << bytes;
    ASSERT_NE(plan.tuner, nullptr) << bytes;
    EXPECT_STREQ(plan.alternative->name, "pairwise");
  }
  plan = p.plan(d::Collective::AllToAll, (std::size_t(2) << 10) + 1);
  EXPECT_STREQ(plan.algorithm->name, "pairwise");
  EXPECT_EQ(plan.tuner, nullptr);
  // Each collective's choices have a tuner of their own.
  EXPECT_NE(p.plan(d::Collective::Broadcast, 4096).tuner, p.plan(d::Collective::AllToAll, 64).tuner);
  EXPECT_NE(p.plan(d::Collective::Broadcast, 4096).tuner, p.plan(d::Collective::AllReduce, 4096).tuner);
  // 2,048 hosts: binomial below 256 KiB (128 B a rank), timed.
  p.configure(c, shape(2048, 2048, 1));
  plan = p.plan(d::Collective::Broadcast, net.broadcast_choice_high_bytes - 1);
  EXPECT_STREQ(plan.algorithm->name, "binomial");
  ASSERT_NE(plan.tuner, nullptr);
  EXPECT_EQ(p.plan(d::Collective::Broadcast, net.broadcast_choice_high_bytes).tuner, nullptr);
  // 4,096 hosts: binomial up to the top of the range, not above.
  p.configure(c, shape(4096, 4096, 1));
  EXPECT_NE(p.plan(d::Collective::Broadcast, net.broadcast_choice_high_bytes).tuner, nullptr);
  plan = p.plan(d::Collective::Broadcast, net.broadcast_choice_high_bytes + 1);
  EXPECT_STREQ(plan.algorithm->name, "binomial");
  EXPECT_EQ(plan.tuner, nullptr);
  // TUTTI_ALGO naming broadcast: its choice off, all_to_all's and
  // all_reduce's on.
  d::Config named = c;
  named.algo["broadcast"] = "binomial";
  p.configure(named, shape(8, 8, 1));
  plan = p.plan(d::Collective::Broadcast, 4096);
  EXPECT_STREQ(plan.algorithm->name, "binomial");
  EXPECT_EQ(plan.tuner, nullptr);
  EXPECT_NE(p.plan(d::Collective::AllToAll, 64).tuner, nullptr);
  EXPECT_NE(p.plan(d::Collective::AllReduce, 4096).tuner, nullptr);
  // Two ranks across hosts under `auto`, and `off`: none.
  p.configure(c, shape(2, 2, 1));
  EXPECT_EQ(p.plan(d::Collective::Broadcast, 4096).tuner, nullptr);
  EXPECT_EQ(p.plan(d::Collective::AllToAll, 64).tuner, nullptr);
  d::Config off = c;
  off.algo_tuning = "off";
  p.configure(off, shape(8, 8, 1));
  EXPECT_EQ(p.plan(d::Collective::Broadcast, 4096).tuner, nullptr);
  EXPECT_EQ(p.plan(d::Collective::AllToAll, 64).tuner, nullptr);
  // `on` over TCP on one host: Bruck up to 4 KiB a peer, timed.
  d::Config on = c;
  on.algo_tuning = "on";
  on.transport = d::Config::Transport::Tcp;
  d::Shape host = shape(4, 1, 4);
  host.single_host = true;
  p.configure(on, host);
  plan = p.plan(d::Collective::AllToAll, std::size_t(4) << 10);
  EXPECT_STREQ(plan.algorithm->name, "bruck");
  EXPECT_NE(plan.tuner, nullptr);
  plan = p.plan(d::Collective::Broadcast, std::size_t(256) << 10);
  EXPECT_STREQ(plan.algorithm->name, "binomial");
  EXPECT_NE(plan.tuner, nullptr);
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

TEST(CoreSelection, SharedMemoryOnOneHostUnlessTcpIsForced) {
  tutti::detail::Config c;
  for (const char* coll : {"all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter", "all_to_all", "gather",
                           "scatter", "barrier"}) {
    EXPECT_STREQ(choose(coll, 8, c, true), "shm") << coll;
    EXPECT_STRNE(choose(coll, 8, c, false), "shm") << coll;
  }
  c.transport = d::Config::Transport::Tcp;
  EXPECT_STREQ(choose("all_reduce", 8, c, true), "recursive_doubling");
  c.transport = d::Config::Transport::Auto;
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
