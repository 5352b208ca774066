// Carrying on after a failure: revoke, agree and shrink (ULFM), over shared
// memory and TCP.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "common/errors.h"
#include "common/reference.h"
#include "harness/spawn.h"
#include "multirank/collective_checks.h"

namespace tutti::testing {
namespace {

using Clock = std::chrono::steady_clock;

// Every element of an all_reduce SUM of random integers (exact in float64).
void check_all_reduce(Communicator& c, unsigned seed) {
  const std::size_t count = 1000;
  std::vector<double> in(count), out(count), want(count, 0.0);
  for (int r = 0; r < c.size(); ++r) {
    std::mt19937 g(seed + static_cast<unsigned>(c.world_ranks()[static_cast<std::size_t>(r)]));
    for (std::size_t i = 0; i < count; ++i) {
      const double v = static_cast<double>(g() % 1000);
      want[i] += v;
      if (r == c.rank()) in[i] = v;
    }
  }
  c.all_reduce(in.data(), out.data(), count, DataType::Float64, ReduceOp::SUM);
  for (std::size_t i = 0; i < count; ++i) ASSERT_EQ(out[i], want[i]) << "element " << i;
}

// Every member's process id, by rank.
std::vector<std::int32_t> all_pids(Communicator& c) {
  const std::int32_t pid = ::getpid();
  std::vector<std::int32_t> pids(static_cast<std::size_t>(c.size()));
  c.all_gather(&pid, pids.data(), 1, DataType::Int32);
  return pids;
}

class Survive : public ::testing::TestWithParam<std::string> {};

// A member revokes while the others wait in a collective it never joins:
// they fail with Revoked at once; later calls too; agree and shrink work on
// the revoked communicator.
TEST_P(Survive, RevokeWakesEveryMemberAndShrinkCarriesOn) {
  SpawnOptions o;
  o.env = transport_env(GetParam());
  spawn(
      5,
      [](Communicator& world) {
        auto t0 = Clock::now();
        if (world.rank() == 3) {
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
          world.revoke();
        } else {
          const Error e = expect_error([&] { check_all_reduce(world, 1); });
          EXPECT_EQ(e.kind(), ErrorKind::Revoked) << what_of(e);
          EXPECT_CONTAINS(e.message(), "rank 3 revoked the communicator");
          EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(1500));
        }
        const Error later = expect_error([&] { world.barrier(); });
        EXPECT_EQ(later.kind(), ErrorKind::Revoked) << what_of(later);
        std::vector<int> failed = {99};
        EXPECT_FALSE(world.agree(world.rank() != 2, &failed));
        EXPECT_TRUE(failed.empty());
        EXPECT_TRUE(world.agree(true, &failed));
        Communicator s = world.shrink();
        EXPECT_EQ(s.size(), 5);
        EXPECT_EQ(s.rank(), world.rank());
        for (unsigned i = 0; i < 5; ++i) check_all_reduce(s, 10 + i);
      },
      o);
}

// A member is killed: the survivors see PeerLost, shrink to the others and
// go on; agree then reports the loss on every survivor.
TEST_P(Survive, KilledMemberIsLeftOutOfTheShrunkCommunicator) {
  SpawnOptions o;
  o.env = transport_env(GetParam());
  o.may_die = {2};
  spawn(
      4,
      [](Communicator& world) {
        if (world.rank() == 2) {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          ::raise(SIGKILL);
        }
        const auto t0 = Clock::now();
        const Error e = expect_error([&] {
          for (unsigned i = 0; i < 100000; ++i) check_all_reduce(world, i);
        });
        // PeerLost, or Revoked when another survivor revoked first (the
        // message then names the loss too, when this rank knew of it).
        EXPECT_TRUE(e.kind() == ErrorKind::PeerLost || e.kind() == ErrorKind::Revoked) << what_of(e);
        world.revoke();
        Communicator s = world.shrink();
        EXPECT_LT(Clock::now() - t0, std::chrono::seconds(2));
        ASSERT_EQ(s.size(), 3);
        EXPECT_EQ(s.rank(), world.rank() < 2 ? world.rank() : world.rank() - 1);
        EXPECT_EQ(s.world_ranks(), (std::vector<int>{0, 1, 3}));
        for (unsigned i = 0; i < 20; ++i) check_all_reduce(s, 100 + i);
        std::vector<int> failed;
        EXPECT_TRUE(world.agree(true, &failed));
        EXPECT_EQ(failed, std::vector<int>{2});
        EXPECT_EQ(world.failed_ranks(), std::vector<int>{2});
        EXPECT_TRUE(s.agree(true, &failed));
        EXPECT_TRUE(failed.empty());
      },
      o);
}

// A member stops (SIGSTOP): the others time out, shrink without it once it
// has not taken part within the timeout, and carry on; woken (SIGCONT), it
// finds itself left out: its calls on the old communicator fail with
// PeerLost saying so, and so does its shrink.
TEST_P(Survive, StoppedRankIsLeftOutAndFailsCleanlyWhenItWakes) {
  SpawnOptions o;
  o.env = transport_env(GetParam());
  o.op_timeout = std::chrono::milliseconds(1000);
  spawn(
      4,
      [](Communicator& world) {
        const std::vector<std::int32_t> pids = all_pids(world);
        for (unsigned i = 0; i < 5; ++i) check_all_reduce(world, i);
        if (world.rank() == 2) {
          ::raise(SIGSTOP);  // rank 0 wakes it once the others have shrunk
          std::this_thread::sleep_for(std::chrono::seconds(1));
          const Error e = expect_error([&] { check_all_reduce(world, 99); });
          EXPECT_EQ(e.kind(), ErrorKind::PeerLost) << what_of(e);
          EXPECT_CONTAINS(e.message(), "this rank was declared lost by the others");
          const Error s = expect_error([&] { world.shrink(); });
          EXPECT_EQ(s.kind(), ErrorKind::PeerLost) << what_of(s);
          EXPECT_CONTAINS(s.message(), "this rank was declared lost by the others");
          return;
        }
        const Error e = expect_error([&] {
          for (unsigned i = 0; i < 100; ++i) check_all_reduce(world, 10 + i);
        });
        // (Naming rank 2, or a survivor that waits for it.) Revoked where a
        // survivor's revocation came here before the timeout's own notice:
        // the revocation names the timeout then.
        EXPECT_TRUE(e.kind() == ErrorKind::Timeout || e.kind() == ErrorKind::Revoked) << what_of(e);
        EXPECT_CONTAINS(e.message(), "Timed out");
        world.revoke();
        const auto t0 = Clock::now();
        Communicator s = world.shrink();
        // The coordinator waits one timeout for rank 2.
        EXPECT_LT(Clock::now() - t0, std::chrono::milliseconds(2500));
        ASSERT_EQ(s.world_ranks(), (std::vector<int>{0, 1, 3}));
        for (unsigned i = 0; i < 10; ++i) check_all_reduce(s, 200 + i);
        if (s.rank() == 0) ::kill(pids[2], SIGCONT);
        // Rank 2 wakes, sees its connections closed and learns that it was
        // left out: nothing it does reaches the survivors' new communicator.
        for (unsigned i = 0; i < 50; ++i) {
          check_all_reduce(s, 300 + i);
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        // (Before the last agreement: after it the others leave, and their
        // exits are losses too.)
        EXPECT_EQ(world.failed_ranks(), std::vector<int>{2});
        std::vector<int> failed = {99};
        EXPECT_TRUE(s.agree(true, &failed));
        EXPECT_TRUE(failed.empty());
      },
      o);
}

// Two of four members stop: the other two cannot tell a stopped member from
// one cut off by the network that carries on, so they must not carry on
// without a majority: their shrink fails with Timeout saying so, also when
// tried again; and the stopped pair, woken, finds itself declared lost.
TEST_P(Survive, NoMajorityNoShrink) {
  SpawnOptions o;
  o.env = transport_env(GetParam());
  o.op_timeout = std::chrono::milliseconds(500);
  spawn(
      4,
      [](Communicator& world) {
        const std::vector<std::int32_t> pids = all_pids(world);
        check_all_reduce(world, 1);
        if (world.rank() >= 2) {
          ::raise(SIGSTOP);  // rank 0 wakes both at the end
          std::this_thread::sleep_for(std::chrono::seconds(1));
          // Told that it was declared lost, or the survivors' verdict.
          const Error e = expect_error([&] { world.shrink(); });
          EXPECT_TRUE((e.kind() == ErrorKind::PeerLost &&
                       e.message().find("this rank was declared lost by the others") != std::string::npos) ||
                      (e.kind() == ErrorKind::Timeout && e.message().find("no majority") != std::string::npos))
              << what_of(e);
          return;
        }
        const Error e = expect_error([&] { check_all_reduce(world, 2); });
        EXPECT_EQ(e.kind(), ErrorKind::Timeout) << what_of(e);
        world.revoke();
        for (int attempt = 0; attempt < 2; ++attempt) {
          const Error s = expect_error([&] { world.shrink(); });
          EXPECT_EQ(s.kind(), ErrorKind::Timeout) << what_of(s);
          EXPECT_CONTAINS(s.message(), "no majority of the members took part: ranks 0, 1 did, ranks 2, 3 are lost");
        }
        if (world.rank() == 0) {
          std::this_thread::sleep_for(std::chrono::milliseconds(200));  // rank 1 is done too
          ::kill(pids[2], SIGCONT);
          ::kill(pids[3], SIGCONT);
        }
      },
      o);
}

// The local TCP ports of this process's sockets (up to 64; -1 after).
std::vector<std::int32_t> socket_ports(bool peer) {
  std::vector<std::int32_t> out(64, -1);
  std::size_t k = 0;
  for (int fd = 0; fd < 4096 && k < out.size(); ++fd) {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    const int rc = peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len)
                        : ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    if (rc == 0 && a.ss_family == AF_INET) out[k++] = ntohs(reinterpret_cast<sockaddr_in*>(&a)->sin_port);
  }
  return out;
}

// The connection between two live ranks breaks (rank 2 shuts its socket to
// rank 3 down): each reports the other lost. Whichever report spreads first
// cuts its subject off, often before the other's can (the cut rank is
// refused everywhere), so one or both of them are left out, but the others
// are one group: every rank that ends with a working communicator from
// shrink ends with the same one, with ranks 0, 1, 4 and 5 in it, and the
// ranks left out are told so.
TEST_P(Survive, BrokenLinkBetweenLiveRanksLeavesOneGroup) {
  auto* board = static_cast<std::atomic<std::int64_t>*>(
      ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(board, MAP_FAILED);
  for (int r = 0; r < 6; ++r) board[r].store(0);  // per rank: its group's members as bits, or -1: left out
  SpawnOptions o;
  o.env = transport_env(GetParam());
  spawn(
      6,
      [&](Communicator& world) {
        check_all_reduce(world, 1);  // ranks 2 and 3 are ring neighbours: connected since init
        const std::vector<std::int32_t> mine = socket_ports(false);
        std::vector<std::int32_t> all(64 * 6);
        world.all_gather(mine.data(), all.data(), 64, DataType::Int32);
        if (world.rank() == 2) {
          // The socket whose other end is one of rank 3's.
          const std::vector<std::int32_t> theirs(all.begin() + 64 * 3, all.begin() + 64 * 4);
          int cut = 0;
          for (int fd = 0; fd < 4096; ++fd) {
            sockaddr_in a{};
            socklen_t len = sizeof a;
            if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0 || a.sin_family != AF_INET) continue;
            if (std::find(theirs.begin(), theirs.end(), ntohs(a.sin_port)) == theirs.end()) continue;
            ASSERT_EQ(::shutdown(fd, SHUT_RDWR), 0);
            ++cut;
          }
          ASSERT_GE(cut, 1);
        }
        const Error e = expect_error([&] {
          for (unsigned i = 0; i < 100000; ++i) check_all_reduce(world, 10 + i);
        });
        EXPECT_TRUE(e.kind() == ErrorKind::PeerLost || e.kind() == ErrorKind::Revoked) << what_of(e);
        world.revoke();
        // A report that arrives after an agreement (the other end's, when it
        // got out before its sender was cut off) fails the new communicator:
        // the survivors revoke it and shrink again.
        Communicator cur = world;
        for (int round = 0;; ++round) {
          Communicator s;
          try {
            s = cur.shrink();
            for (unsigned i = 0; i < 20; ++i) check_all_reduce(s, 100 + i);
            std::int64_t bits = 0;
            for (int w : s.world_ranks()) bits |= std::int64_t{1} << w;
            board[world.rank()].store(bits);
            break;
          } catch (const Error& x) {
            if (x.message().find("this rank was declared lost by the others") != std::string::npos) {
              EXPECT_EQ(x.kind(), ErrorKind::PeerLost) << what_of(x);
              board[world.rank()].store(-1);
              break;
            }
            ASSERT_TRUE(x.kind() == ErrorKind::PeerLost || x.kind() == ErrorKind::Revoked) << what_of(x);
            ASSERT_TRUE(s.valid()) << "shrink failed: " << what_of(x);
            ASSERT_LT(round, 2) << what_of(x);
            s.revoke();
            cur = s;
          }
        }
      },
      o);
  std::int64_t group = 0;
  for (int r = 0; r < 6; ++r) {
    const std::int64_t b = board[r].load();
    ASSERT_NE(b, 0) << "rank " << r << " did not finish";
    if (b < 0) continue;
    if (!group) group = b;
    EXPECT_EQ(b, group) << "rank " << r << " is in another group";
    EXPECT_TRUE(group & (std::int64_t{1} << r)) << "rank " << r << " got a group without itself";
  }
  EXPECT_EQ(group & 0b110011, 0b110011) << "ranks 0, 1, 4 and 5 carry on";
  EXPECT_NE(group & 0b001100, 0b001100) << "rank 2 or rank 3 is left out";
  for (int r = 0; r < 6; ++r) EXPECT_EQ(board[r].load() < 0, !(group & (std::int64_t{1} << r))) << "rank " << r;
  ::munmap(board, 4096);
}

// ---- random trials ----------------------------------------------------------

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

// One random collective, checked element by element, the same on every
// member (they draw from generators seeded alike).
void random_checked_op(Communicator& c, std::mt19937& rng, std::uint64_t id) {
  CaseInfo ci;
  ci.id = id;
  do {
    ci.dtype = static_cast<DataType>(rng() % kNumDataTypes);
    ci.op = ReduceOp(static_cast<ReduceOpKind>(rng() % kNumReduceOps));
    if (ci.op.kind == ReduceOpKind::PremulSum) ci.op.scalar = dtype_is_integer(ci.dtype) ? 3.0 : 0.5;
  } while (!reduce_op_invalid_reason(ci.dtype, ci.op).empty());
  static const std::size_t counts[] = {1, 7, 100, 1000, 6000};
  ci.count = counts[rng() % 5];
  ci.root = static_cast<int>(rng() % static_cast<unsigned>(c.size()));
  ci.inplace = rng() % 2;
  ci.async = rng() % 3 == 0;
  ci.list_form = rng() % 4 == 0;
  switch (rng() % 10) {
    case 0:
      check_all_reduce(c, ci);
      break;
    case 1:
      check_reduce(c, ci);
      break;
    case 2:
      check_broadcast(c, ci);
      break;
    case 3:
      check_gather(c, ci);
      break;
    case 4:
      check_all_gather(c, ci);
      break;
    case 5:
      check_scatter(c, ci);
      break;
    case 6:
      check_reduce_scatter(c, ci);
      break;
    case 7:
      check_all_to_all(c, ci);
      break;
    case 8:
      check_all_to_all_v(c, ci);
      break;
    default:
      c.barrier();
      break;
  }
}

// What each rank of a trial writes for the parent to compare: shared
// anonymous memory, which fork keeps shared.
struct TrialBoard {
  std::atomic<std::int64_t> killed_at[2];  // when each victim died (0: not yet)
  std::atomic<std::int64_t> shrunk_ns[8];  // per rank: kill to shrunk communicator
  std::atomic<std::uint64_t> agreed[8];    // per rank: a digest of agree's answer
  std::atomic<std::uint64_t> members[8];   // per rank: the final communicator's world ranks
  std::atomic<int> done[8];                // per rank: finished its 100 collectives
};

std::uint64_t digest(const std::vector<int>& v, std::uint64_t seed) {
  std::uint64_t h = seed * 0x9E3779B97F4A7C15ULL + 1;
  for (int x : v) h = (h ^ static_cast<std::uint64_t>(x + 1)) * 0x100000001B3ULL;
  return h;
}

// Where a victim dies.
enum class Death { BeforeOp, InsideOp, InAgree, InShrink };
const char* death_name(Death d) {
  switch (d) {
    case Death::BeforeOp:
      return "before op";
    case Death::InsideOp:
      return "inside op";
    case Death::InAgree:
      return "in agree";
    case Death::InShrink:
      return "in shrink";
  }
  return "?";
}

constexpr unsigned kTrialsPerTransport = kSanitized ? 4 : 50;
constexpr int kOpsBefore = 30;
constexpr int kOpsAfter = 100;

// 4 to 8 ranks run random collectives (kinds, sizes, dtypes, reduce ops,
// roots) on random sub-groups; one or two random ranks are killed at random
// points, the second sometimes during agree or shrink. Every survivor
// revokes its groups, agrees, shrinks within 2 s of the first kill, and runs
// 100 more random collectives on the shrunk communicator, each element
// checked; all survivors get the same agreement and the same members; no
// shared-memory segment is left.
TEST_P(Survive, RandomKillsThenShrinkAndCarryOn) {
  auto* board = static_cast<TrialBoard*>(
      ::mmap(nullptr, sizeof(TrialBoard), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(board, MAP_FAILED);
  const std::string prefix = shm_prefix_for("survive-" + GetParam());
  std::vector<std::int64_t> times;
  std::vector<std::int64_t> times_one, times_two;  // one victim died; two died
  const unsigned salt = GetParam() == "tcp" ? 5000 : 0;
  for (unsigned trial = 0; trial < kTrialsPerTransport; ++trial) {
    std::mt19937 pick(trial * 104729 + salt);
    const int world_size = 4 + static_cast<int>(pick() % 5);
    const int nvictims = 1 + static_cast<int>(pick() % 2);
    int victim[2] = {static_cast<int>(pick() % world_size), -1};
    do victim[1] = static_cast<int>(pick() % world_size);
    while (victim[1] == victim[0]);
    if (nvictims == 1) victim[1] = -1;
    Death death[2] = {pick() % 2 ? Death::InsideOp : Death::BeforeOp, static_cast<Death>(pick() % 4)};
    const int kill_at[2] = {static_cast<int>(pick() % kOpsBefore), static_cast<int>(pick() % kOpsBefore)};
    const int delay_us[2] = {static_cast<int>(pick() % 400), static_cast<int>(pick() % 3000)};
    const unsigned seed = pick();
    new (board) TrialBoard{};
    std::string what = "trial " + std::to_string(trial) + ": " + std::to_string(world_size) + " ranks";
    for (int v = 0; v < nvictims; ++v)
      what += ", rank " + std::to_string(victim[v]) + " killed " + death_name(death[v]) +
              (death[v] == Death::InAgree || death[v] == Death::InShrink ? "" : " " + std::to_string(kill_at[v])) +
              " after " + std::to_string(delay_us[v]) + " us";
    SCOPED_TRACE(what);
    SpawnOptions o;
    o.env = transport_env(GetParam());
    o.env.emplace_back("TUTTI_SHM_PREFIX", prefix);
    o.may_die = {victim[0]};
    if (victim[1] >= 0) o.may_die.push_back(victim[1]);
    o.op_timeout = std::chrono::seconds(20);
    o.timeout = std::chrono::seconds(60);
    spawn(
        world_size,
        [&](Communicator& world) {
          const int me = world.rank();
          auto die = [&](int v) {
            auto kill = [board, v] {
              board->killed_at[v].store(now_ns());
              ::raise(SIGKILL);
            };
            if (death[v] == Death::BeforeOp) {
              kill();
            } else {
              const int us = delay_us[v];
              std::thread([kill, us] {
                std::this_thread::sleep_for(std::chrono::microseconds(us));
                kill();
              }).detach();
            }
          };
          // The groups: the world and three random subsets of 2 or more.
          std::mt19937 plan(seed);
          std::vector<std::optional<Communicator>> groups;
          groups.emplace_back(world);
          for (int g = 0; g < 3; ++g) {
            std::vector<int> members;
            for (int r = 0; r < world_size; ++r)
              if (plan() % 2) members.push_back(r);
            if (members.size() < 2) members = {0, world_size - 1};
            groups.push_back(world.new_group(members));
          }
          // Random collectives on random groups, until the first error;
          // then the rank revokes its groups, so that the members still
          // waiting in them stop too. Ranks that finish without seeing the
          // loss go on to the agreement, where the others join them.
          try {
            for (int i = 0; i < kOpsBefore; ++i) {
              const std::size_t g = plan() % groups.size();
              const unsigned op_seed = plan();
              for (int v = 0; v < 2; ++v)
                if (me == victim[v] && i == kill_at[v] && (death[v] == Death::BeforeOp || death[v] == Death::InsideOp))
                  die(v);
              if (!groups[g]) continue;
              std::mt19937 rng(op_seed);
              random_checked_op(*groups[g], rng, static_cast<std::uint64_t>(i) << 8 | g);
            }
          } catch (const Error& e) {
            ASSERT_TRUE(e.kind() == ErrorKind::PeerLost || e.kind() == ErrorKind::Revoked) << what_of(e);
            EXPECT_TRUE(board->killed_at[0].load() || board->killed_at[1].load()) << "before any kill: " << what_of(e);
            for (auto& g : groups)
              if (g) g->revoke();
          }
          for (int v = 0; v < 2; ++v)
            if (me == victim[v] && death[v] == Death::InAgree) die(v);
          std::vector<int> failed;
          EXPECT_TRUE(world.agree(true, &failed));
          board->agreed[me].store(digest(failed, 1));
          for (int f : failed) EXPECT_TRUE(f == victim[0] || f == victim[1]) << "rank " << f << " agreed lost";
          for (int v = 0; v < 2; ++v)
            if (me == victim[v] && death[v] == Death::InShrink) die(v);
          Communicator cur = world.shrink();
          board->shrunk_ns[me].store(now_ns());
          // A victim that died after the survivors decided: again.
          for (int round = 0;; ++round) {
            try {
              std::mt19937 rng(seed + 7);
              for (int i = 0; i < kOpsAfter; ++i)
                random_checked_op(cur, rng, (1ull << 40) + static_cast<std::uint64_t>(i));
              break;
            } catch (const Error& e) {
              ASSERT_TRUE(e.kind() == ErrorKind::PeerLost || e.kind() == ErrorKind::Revoked) << what_of(e);
              ASSERT_LT(round, 2) << what_of(e);
              cur.revoke();
              cur = cur.shrink();
            }
          }
          board->members[me].store(digest(cur.world_ranks(), 2));
          board->done[me].store(1);
        },
        o);
    // Every survivor: the same agreement and the same members (those not
    // killed: a victim that saw the other's loss before its own kill point
    // carries on with the others).
    std::vector<int> expected;
    std::int64_t first_kill = INT64_MAX;
    for (int v = 0; v < nvictims; ++v)
      if (board->killed_at[v].load()) first_kill = std::min(first_kill, board->killed_at[v].load());
    for (int r = 0; r < world_size; ++r)
      if (!((r == victim[0] && board->killed_at[0].load()) || (r == victim[1] && board->killed_at[1].load())))
        expected.push_back(r);
    ASSERT_NE(first_kill, INT64_MAX) << "nobody was killed";
    std::uint64_t agreed = 0;
    for (int r : expected) {
      EXPECT_EQ(board->done[r].load(), 1) << "rank " << r;
      EXPECT_EQ(board->members[r].load(), digest(expected, 2)) << "rank " << r << " ended in another communicator";
      if (!agreed) agreed = board->agreed[r].load();
      EXPECT_EQ(board->agreed[r].load(), agreed) << "rank " << r << " agreed otherwise";
      const std::int64_t t = board->shrunk_ns[r].load() - first_kill;
      times.push_back(t);
      (board->killed_at[0].load() && board->killed_at[1].load() ? times_two : times_one).push_back(t);
      EXPECT_LT(t, 2'000'000'000) << "rank " << r << " shrank " << t / 1000000 << " ms after the kill";
    }
    // None left; and if some are, the test takes them away after failing.
    const std::set<std::string> left = shm_segments(prefix);
    EXPECT_TRUE(left.empty()) << ::testing::PrintToString(left);
    for (const std::string& name : left) ::shm_unlink(("/" + name).c_str());
    if (::testing::Test::HasFailure()) break;
  }
  ::munmap(board, sizeof(TrialBoard));
  // The figures of docs/performance.md, "After a failure".
  auto print = [](const char* what, std::vector<std::int64_t>& v) {
    std::sort(v.begin(), v.end());
    if (!v.empty())
      std::printf("kill to shrunk communicator, %s: %zu survivors, median %.1f ms, max %.1f ms\n", what, v.size(),
                  v[v.size() / 2] / 1e6, v.back() / 1e6);
  };
  print("every trial", times);
  print("one rank killed", times_one);
  print("two ranks killed", times_two);
}

// A member's operation times out and it revokes. Over TCP each rank holds
// connections to its ring neighbours only after init, so the timeout's own
// notice reaches ranks 2 and 4 alone; the others hear of the revocation
// only (from rank 3, which connects to them, or passed on), and it names
// the timeout: nobody is left with "revoked" and no cause.
TEST(SurviveTcp, ARevocationAfterAFailureNamesItsCause) {
  SpawnOptions o;
  o.env = {{"TUTTI_TRANSPORT", "tcp"}};
  o.op_timeout = std::chrono::milliseconds(300);
  spawn(
      8,
      [](Communicator& world) {
        if (world.rank() == 3) {
          double x = 0;
          const Error e = expect_error([&] { world.recv(&x, 1, DataType::Float64, 2); });
          EXPECT_EQ(e.kind(), ErrorKind::Timeout) << what_of(e);
          world.revoke();
        }
        std::optional<Error> e = world.error();
        for (int i = 0; i < 300 && !e; ++i) {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
          e = world.error();
        }
        ASSERT_TRUE(e.has_value()) << "rank " << world.rank() << " never learnt of the failure";
        // Once: the timeout's own notice and the revocation carry the same cause.
        const std::string m = e->message();
        EXPECT_EQ(m.find("Timed out"), m.rfind("Timed out")) << m;
        EXPECT_CONTAINS(e->message(), "recv #1 (8 B from rank 2, tag 0): Timed out waiting for a message");
        // (Ranks 2 and 4 may look between the two notices.)
        if (world.rank() != 2 && world.rank() != 4) {
          EXPECT_EQ(e->kind(), ErrorKind::Revoked) << what_of(*e);
          EXPECT_CONTAINS(e->message(), "rank 3 revoked the communicator");
        }
        // Nobody leaves before everyone has looked (the short timeout was for
        // rank 3's receive: a member slow to come here is not lost).
        world.set_timeout(std::chrono::seconds(10));
        Communicator s = world.shrink();
        ASSERT_EQ(s.size(), 8);
        check_all_reduce(s, 7);
      },
      o);
}

INSTANTIATE_TEST_SUITE_P(World, Survive, ::testing::Values("auto", "tcp"), transport_name);

}  // namespace
}  // namespace tutti::testing
