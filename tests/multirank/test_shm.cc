// Shared memory: segments never outlive a job, and a rank that dies in the
// middle of a shared-memory collective is reported, not waited for.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <set>

#include "harness/spawn.h"

namespace tutti::testing {
namespace {

// Each test names its segments with its own prefix, so that tests running
// in parallel do not see each other's.
std::string prefix_for(const char* test) { return std::string("tutti-test-") + test + "-" + std::to_string(getpid()); }

std::set<std::string> segments(const std::string& prefix) {
  std::set<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
    if (e.path().filename().string().rfind(prefix, 0) == 0) out.insert(e.path().filename().string());
  return out;
}

TEST(Shm, SegmentsAreUnlinkedOnceMapped) {
  const std::string prefix = prefix_for("unlinked");
  SpawnOptions o;
  o.env = {{"TUTTI_SHM_PREFIX", prefix}};
  spawn(4, [&](Communicator& world) {
    float v = 1;
    world.all_reduce(&v, &v, 1, DataType::Float32, ReduceOp::SUM);  // maps the world's segment
    EXPECT_EQ(v, 4.f);
    auto half = world.split(world.rank() / 2, 0);
    half->barrier();  // and the split's
    world.barrier();
    // Every member has mapped both: no name is left while the job still runs.
    for (const auto& name : segments(prefix)) ADD_FAILURE() << "left in /dev/shm while the job runs: " << name;
  }, o);
  EXPECT_TRUE(segments(prefix).empty());
}

TEST(Shm, KilledRankIsReportedAndNoSegmentIsLeft) {
  const std::string prefix = prefix_for("killed");
  SpawnOptions o;
  o.env = {{"TUTTI_SHM_PREFIX", prefix}};
  o.may_die = {2};
  o.op_timeout = std::chrono::seconds(60);
  spawn(3, [](Communicator& world) {
    std::vector<float> buf(4096, 1.f);
    for (int i = 0; i < 20; ++i) world.all_reduce(buf.data(), buf.data(), buf.size(), DataType::Float32, ReduceOp::SUM);
    if (world.rank() == 2) ::raise(SIGKILL);
    auto t0 = std::chrono::steady_clock::now();
    try {
      for (int i = 0; i < 1000; ++i)
        world.all_reduce(buf.data(), buf.data(), buf.size(), DataType::Float32, ReduceOp::MAX);
      ADD_FAILURE() << "all_reduce kept working without rank 2";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::PeerLost) << e.what();
      EXPECT_NE(e.message().find("rank 2"), std::string::npos) << e.what();
      // Inside an all_reduce, or (when the loss was noticed between two
      // calls) at the next call.
      EXPECT_TRUE(e.message().find("all_reduce #") != std::string::npos ||
                  e.message().find("aborted earlier") != std::string::npos)
          << e.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  }, o);
  EXPECT_TRUE(segments(prefix).empty());
}

// Point-to-point through shared memory: a receiver waiting for a large
// message (read straight from the sender's memory) from a rank that dies
// gets PeerLost naming it, fast, and the job-wide segment is gone.
TEST(Shm, PointToPointFromAKilledRank) {
  const std::string prefix = prefix_for("p2pkilled");
  SpawnOptions o;
  o.env = {{"TUTTI_SHM_PREFIX", prefix}};
  o.may_die = {1};
  o.op_timeout = std::chrono::seconds(60);
  spawn(3, [](Communicator& world) {
    std::vector<float> buf(1 << 18, 2.f);
    // Works first: a large message each way between ranks 0 and 1.
    if (world.rank() < 2) {
      const int peer = 1 - world.rank();
      std::vector<float> in(buf.size());
      Work w = world.irecv(in.data(), in.size(), DataType::Float32, peer, 1);
      world.send(buf.data(), buf.size(), DataType::Float32, peer, 1);
      w.wait();
      EXPECT_EQ(in, buf);
    }
    world.barrier();
    if (world.rank() == 1) ::raise(SIGKILL);
    if (world.rank() == 0) {
      auto t0 = std::chrono::steady_clock::now();
      try {
        world.recv(buf.data(), buf.size(), DataType::Float32, 1, 2);
        ADD_FAILURE() << "recv from a dead rank returned";
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::PeerLost) << e.what();
        EXPECT_NE(e.message().find("rank 1"), std::string::npos) << e.what();
        // Inside the recv, or (when the loss was noticed before the call)
        // at the call.
        EXPECT_TRUE(e.message().find("recv #") != std::string::npos ||
                    e.message().find("aborted earlier") != std::string::npos)
            << e.what();
      }
      EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
    }
  }, o);
  EXPECT_TRUE(segments(prefix).empty());
}

}  // namespace
}  // namespace tutti::testing
