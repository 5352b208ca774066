#include "harness/spawn.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <thread>

#include "tutti/store.h"

// A rank ends with _exit, which skips LeakSanitizer's check at exit; with
// AddressSanitizer each rank runs that check itself before exiting.
#if defined(__SANITIZE_ADDRESS__)
#define TUTTI_TEST_LEAK_CHECK 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TUTTI_TEST_LEAK_CHECK 1
#endif
#endif
#ifdef TUTTI_TEST_LEAK_CHECK
#include <sanitizer/lsan_interface.h>
#endif

namespace tutti::testing {

namespace {

// Reads the store server's port from the parent; 0 when the parent gave up.
int read_port(int fd) {
  int port = 0;
  std::size_t got = 0;
  while (got < sizeof port) {
    ssize_t n = ::read(fd, reinterpret_cast<char*>(&port) + got, sizeof port - got);
    if (n > 0) {
      got += static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return 0;
    }
  }
  return port;
}

}  // namespace

void spawn(int world, const std::function<void(Communicator&)>& fn, const SpawnOptions& options) {
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
  // Every rank is forked before the store server starts its thread: a child
  // forked while another thread runs may inherit a lock that thread held
  // (the sanitizers' allocators have no fork handlers, so such a child
  // deadlocks in its first malloc). Each child then waits on a pipe for the
  // server's port.
  std::fflush(stdout);
  std::fflush(stderr);
  // Connections authenticate with a secret of this launch, as under tuttirun.
  std::random_device rd;
  const std::string secret = "spawn-" + std::to_string(rd()) + "-" + std::to_string(rd());
  std::vector<pid_t> pids;
  std::vector<int> port_pipes;
  auto abandon = [&] {
    for (int fd : port_pipes) ::close(fd);
    for (pid_t p : pids) ::kill(p, SIGKILL);
    for (pid_t p : pids) ::waitpid(p, nullptr, 0);
  };
  for (int r = 0; r < world; ++r) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      abandon();
      FAIL() << "pipe failed";
    }
    pid_t pid = ::fork();
    if (pid < 0) {
      ::close(fds[0]);
      ::close(fds[1]);
      abandon();
      FAIL() << "fork failed";
    }
    if (pid == 0) {
      for (int fd : port_pipes) ::close(fd);
      ::close(fds[1]);
      const int port = read_port(fds[0]);
      ::close(fds[0]);
      if (port == 0) ::_exit(3);
      // Freed test buffers (megabytes each) stay in the heap for the next
      // case instead of going back to the kernel and faulting in again:
      // page faults were a third of the large-message tests' time.
      ::mallopt(M_MMAP_THRESHOLD, 256 << 20);
      ::mallopt(M_TRIM_THRESHOLD, 512 << 20);
      int code = 0;
      try {
        // Test traffic stays on loopback.
        ::setenv("TUTTI_ADVERTISE_ADDR", "127.0.0.1", 1);
        ::setenv("TUTTI_TRACE_DIR", trace_dir, 1);
        for (auto& [k, v] : options.env) ::setenv(k.c_str(), v.c_str(), 1);
        InitOptions o;
        o.rank = r;
        o.world_size = world;
        o.store = make_tcp_store_client("127.0.0.1", port, options.op_timeout, secret);
        o.job_secret = secret;
        o.timeout = options.op_timeout;
        Communicator comm = init(o);
        fn(comm);
        if (::testing::Test::HasFailure()) code = 1;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: uncaught exception: %s\n", r, e.what());
        code = 2;
      }
#ifdef TUTTI_TEST_LEAK_CHECK
      if (__lsan_do_recoverable_leak_check() != 0) {
        std::fprintf(stderr, "rank %d: LeakSanitizer found leaks\n", r);
        if (code == 0) code = 4;
      }
#endif
      std::fflush(stdout);
      std::fflush(stderr);
      ::_exit(code);
    }
    ::close(fds[0]);
    port_pipes.push_back(fds[1]);
    pids.push_back(pid);
  }
  std::optional<TcpStoreServer> server;
  try {
    server.emplace("127.0.0.1", 0, secret);
  } catch (const std::exception& e) {
    abandon();
    FAIL() << "store server: " << e.what();
  }
  const int port = server->port();
  for (int fd : port_pipes) {
    ssize_t n = ::write(fd, &port, sizeof port);  // a pipe takes 4 bytes at once
    (void)n;
    ::close(fd);
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

std::string shm_prefix_for(const std::string& name) { return "tutti-test-" + name + "-" + std::to_string(getpid()); }

std::set<std::string> shm_segments(const std::string& prefix) {
  std::set<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
    if (e.path().filename().string().rfind(prefix, 0) == 0) out.insert(e.path().filename().string());
  return out;
}

}  // namespace tutti::testing
