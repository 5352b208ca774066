#include "harness/spawn.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "tutti/store.h"

namespace tutti::testing {

void spawn(int world, const std::function<void(Communicator&)>& fn, const SpawnOptions& options) {
  TcpStoreServer server("127.0.0.1", 0);
  const int port = server.port();
  // Flight-recorder dumps of failure tests go to a directory of this launch,
  // removed afterwards (a test may point TUTTI_TRACE_DIR elsewhere).
  char trace_dir[] = "/tmp/tutti-spawn-XXXXXX";
  if (!::mkdtemp(trace_dir)) FAIL() << "mkdtemp failed";
  struct RemoveDir {
    const char* path;
    ~RemoveDir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  } remove_dir{trace_dir};
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    pid_t pid = ::fork();
    if (pid < 0) {
      for (pid_t p : pids) ::kill(p, SIGKILL);
      FAIL() << "fork failed";
    }
    if (pid == 0) {
      int code = 0;
      try {
        // Test traffic stays on loopback.
        ::setenv("TUTTI_ADVERTISE_ADDR", "127.0.0.1", 1);
        ::setenv("TUTTI_TRACE_DIR", trace_dir, 1);
        for (auto& [k, v] : options.env) ::setenv(k.c_str(), v.c_str(), 1);
        InitOptions o;
        o.rank = r;
        o.world_size = world;
        o.store = make_tcp_store_client("127.0.0.1", port, options.op_timeout);
        o.timeout = options.op_timeout;
        Communicator comm = init(o);
        fn(comm);
        if (::testing::Test::HasFailure()) code = 1;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: uncaught exception: %s\n", r, e.what());
        code = 2;
      }
      std::fflush(stdout);
      std::fflush(stderr);
      ::_exit(code);
    }
    pids.push_back(pid);
  }
  auto deadline = std::chrono::steady_clock::now() + options.timeout;
  std::vector<bool> done(world, false);
  int remaining = world;
  while (remaining > 0) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (int r = 0; r < world; ++r) {
        if (pids[r] != pid) continue;
        done[r] = true;
        --remaining;
        if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
          ADD_FAILURE() << "rank " << r << " of " << world << " exited with code " << WEXITSTATUS(status);
        bool allowed = std::find(options.may_die.begin(), options.may_die.end(), r) != options.may_die.end();
        if (WIFSIGNALED(status) && !allowed)
          ADD_FAILURE() << "rank " << r << " of " << world << " died by signal " << WTERMSIG(status);
      }
      continue;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < world; ++r) {
        if (done[r]) continue;
        ADD_FAILURE() << "rank " << r << " of " << world << " still running after " << options.timeout.count()
                      << " s; killed";
        ::kill(pids[r], SIGKILL);
        ::waitpid(pids[r], nullptr, 0);
        done[r] = true;
        --remaining;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace tutti::testing
