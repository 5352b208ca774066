// The flight recorder: what trace_json() holds, dumps on SIGUSR1 and on a
// timeout, and tutti-trace's verdict over the dumps of every rank.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "common/errors.h"
#include "harness/spawn.h"

namespace tutti::testing {
namespace {

struct TempDir {
  std::string path;
  TempDir() {
    char t[] = "/tmp/tutti-trace-test-XXXXXX";
    path = ::mkdtemp(t) ? t : "";
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  int dumps() const {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator(path)) {
      const std::string f = e.path().filename().string();
      if (f.rfind("tutti-trace-", 0) == 0 && f.size() > 5 && f.substr(f.size() - 5) == ".json") ++n;
    }
    return n;
  }
};

std::string run_tool(const std::string& args) {
  std::string out;
  FILE* p = ::popen((std::string(TUTTI_TRACE_TOOL) + " " + args + " 2>&1").c_str(), "r");
  if (!p) return "popen failed";
  char buf[512];
  while (std::fgets(buf, sizeof buf, p)) out += buf;
  ::pclose(p);
  return out;
}

TEST(FlightRecorder, KeepsTheLastOperations) {
  SpawnOptions o;
  o.env = {{"TUTTI_TRACE_BUFFER", "8"}};
  spawn(
      2,
      [](Communicator& world) {
        float v = 1;
        for (int i = 0; i < 10; ++i) world.all_reduce(&v, &v, 1, DataType::Float32, ReduceOp::SUM);
        Work w = world.iall_reduce(&v, &v, 1, DataType::Float32, ReduceOp::MAX);
        w.wait();
        const std::string js = world.trace_json();
        // Eight entries: #4..#11, every one done; #3 is gone.
        for (int seq = 4; seq <= 11; ++seq)
          EXPECT_NE(js.find("\"seq\":" + std::to_string(seq) + ","), std::string::npos) << seq << ": " << js;
        EXPECT_EQ(js.find("\"seq\":3,"), std::string::npos) << js;
        EXPECT_NE(js.find("\"op\":\"all_reduce\""), std::string::npos) << js;
        EXPECT_NE(js.find("\"dtype\":\"float32\""), std::string::npos) << js;
        EXPECT_EQ(js.find("\"state\":\"running\""), std::string::npos) << js;
        EXPECT_NE(js.find("\"started_us\":"), std::string::npos) << js;
        EXPECT_NE(js.find("\"ended_us\":"), std::string::npos) << js;
      },
      o);
}

// Ranks 0 and 1 wait in all_reduce #12 while rank 2 has not called it; rank
// 2 makes every rank dump (SIGUSR1), then joins.
TEST(FlightRecorder, SigusrDumpsNameTheStuckAndTheMissing) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  SpawnOptions o;
  o.env = {{"TUTTI_TRACE_DIR", dir.path}};
  spawn(
      3,
      [&](Communicator& world) {
        float v = 1;
        for (int i = 0; i < 10; ++i) world.all_reduce(&v, &v, 1, DataType::Float32, ReduceOp::SUM);
        std::int32_t pid = ::getpid();
        std::vector<std::int32_t> pids(3);
        world.all_gather(&pid, pids.data(), 1, DataType::Int32);  // #11
        if (world.rank() == 2) {
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
          for (std::int32_t p : pids) ::kill(p, SIGUSR1);
          const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
          while (dir.dumps() < 3 && std::chrono::steady_clock::now() < until)
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          EXPECT_EQ(dir.dumps(), 3);
        }
        world.all_reduce(&v, &v, 1, DataType::Float32, ReduceOp::SUM);  // #12
      },
      o);
  const std::string out = run_tool(dir.path);
  EXPECT_NE(out.find("SIGUSR1"), std::string::npos) << out;
  EXPECT_NE(out.find("first unfinished collective: all_reduce #12 (4 B, float32, sum)"), std::string::npos) << out;
  EXPECT_NE(out.find("ranks 0, 1 stuck in it"), std::string::npos) << out;
  EXPECT_NE(out.find("never entered by rank 2 (rank 2 last entered #11)"), std::string::npos) << out;
}

// A timeout writes the dump by itself.
TEST(FlightRecorder, TimeoutWritesTheDump) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  SpawnOptions o;
  o.env = {{"TUTTI_TRACE_DIR", dir.path}};
  spawn(
      2,
      [&](Communicator& world) {
        auto g = world.new_group(std::vector<int>{0, 1});
        g->set_timeout(std::chrono::milliseconds(300));
        float v = 1;
        g->all_reduce(&v, &v, 1, DataType::Float32, ReduceOp::SUM);  // #1
        if (world.rank() == 0) {
          try {
            g->broadcast(&v, 1, DataType::Float32, 1);  // #2: rank 1 never calls it
            ADD_FAILURE() << "broadcast without its root returned";
          } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::Timeout) << what_of(e);
          }
          EXPECT_GE(dir.dumps(), 1);  // rank 1 dumps too once it hears of the failure
        }
        world.barrier();
        if (world.rank() == 1) {
          EXPECT_FALSE(world.dump_trace().empty());
        }
        world.barrier();
      },
      o);
  const std::string out = run_tool(dir.path);
  EXPECT_NE(out.find("first unfinished collective: broadcast #2 (4 B, float32, root 1)"), std::string::npos) << out;
  EXPECT_NE(out.find("rank 0 failed it"), std::string::npos) << out;
  EXPECT_NE(out.find("never entered by rank 1 (rank 1 last entered #1)"), std::string::npos) << out;
}

}  // namespace
}  // namespace tutti::testing
