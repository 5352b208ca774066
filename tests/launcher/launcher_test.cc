// Tests of tuttirun: each one runs the built launcher on small sh scripts.
//
// Cleanup: every tuttirun started here gets TUTTIRUN_TEST_MARKER=<unique> in
// its environment, which all ranks and their descendants inherit. A Launch
// object's destructor kills tuttirun and every process carrying its marker
// (found through /proc/*/environ), so nothing survives a failing test.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "placement.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr const char* kMarkerVar = "TUTTIRUN_TEST_MARKER";

std::string make_marker() {
  static std::atomic<int> counter{0};
  return "tuttirun-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

// Live (non-zombie) processes whose environment holds <kMarkerVar>=marker.
std::vector<pid_t> marked_processes(const std::string& marker) {
  std::vector<pid_t> found;
  const std::string needle = std::string(kMarkerVar) + "=" + marker;
  DIR* dir = ::opendir("/proc");
  if (dir == nullptr) return found;
  while (dirent* ent = ::readdir(dir)) {
    char* end = nullptr;
    long pid = std::strtol(ent->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    std::ifstream f(std::string("/proc/") + ent->d_name + "/environ", std::ios::binary);
    std::string env((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::size_t pos = 0;
    while (pos < env.size()) {
      std::size_t nul = env.find('\0', pos);
      if (nul == std::string::npos) nul = env.size();
      if (env.compare(pos, nul - pos, needle) == 0) {
        found.push_back(static_cast<pid_t>(pid));
        break;
      }
      pos = nul + 1;
    }
  }
  ::closedir(dir);
  return found;
}

// Waits up to `limit` for the marked processes to disappear; returns those left.
std::vector<pid_t> wait_marked_gone(const std::string& marker, std::chrono::milliseconds limit) {
  Clock::time_point deadline = Clock::now() + limit;
  for (;;) {
    std::vector<pid_t> left = marked_processes(marker);
    if (left.empty() || Clock::now() >= deadline) return left;
    std::this_thread::sleep_for(10ms);
  }
}

// True if `pid` exists and is not a zombie.
bool alive(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(f, stat)) return false;
  std::size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

std::string read_fd(int fd) {
  std::string out;
  char buf[4096];
  off_t off = 0;
  for (;;) {
    ssize_t n = ::pread(fd, buf, sizeof buf, off);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
    off += n;
  }
  return out;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<std::string> launcher_lines(const std::string& err) {
  std::vector<std::string> out;
  for (const std::string& l : split_lines(err))
    if (l.rfind("tuttirun:", 0) == 0) out.push_back(l);
  return out;
}

// Pids printed by ranks as "pid N" anywhere in their output.
std::vector<pid_t> printed_pids(const std::string& out) {
  std::vector<pid_t> pids;
  std::regex re("pid ([0-9]+)");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator(); ++it)
    pids.push_back(static_cast<pid_t>(std::stol((*it)[1])));
  return pids;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
}

// One run of tuttirun, stdout and stderr captured in memory files.
class Launch {
 public:
  explicit Launch(const std::vector<std::string>& args, const std::vector<std::string>& extra_env = {})
      : marker_(make_marker()) {
    // O_APPEND: the ranks write to these files at once, and a memfd's file
    // offset is not updated atomically between processes (no
    // FMODE_ATOMIC_POS), so without it one rank's line can overwrite
    // another's.
    out_fd_ = ::memfd_create("tuttirun-out", MFD_CLOEXEC);
    err_fd_ = ::memfd_create("tuttirun-err", MFD_CLOEXEC);
    ::fcntl(out_fd_, F_SETFL, O_APPEND);
    ::fcntl(err_fd_, F_SETFL, O_APPEND);
    int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      std::string entry(*e);
      if (entry.rfind("TUTTI_KILL_GRACE_SECONDS=", 0) == 0) continue;
      env.push_back(entry);
    }
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    env.push_back(std::string(kMarkerVar) + "=" + marker_);
    std::vector<std::string> argv_s{TUTTIRUN_PATH};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv, envp;
    for (std::string& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    start_ = Clock::now();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(devnull, 0);
      ::dup2(out_fd_, 1);
      ::dup2(err_fd_, 2);
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(126);
    }
    ::close(devnull);
  }

  ~Launch() {
    if (pid_ > 0 && !done_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    for (int round = 0; round < 200; ++round) {
      std::vector<pid_t> left = marked_processes(marker_);
      if (left.empty()) break;
      for (pid_t p : left) ::kill(p, SIGKILL);
      std::this_thread::sleep_for(10ms);
    }
    ::close(out_fd_);
    ::close(err_fd_);
  }

  // Waits up to `limit` for tuttirun to exit; false if it is still running.
  bool wait(std::chrono::milliseconds limit = 10s) {
    Clock::time_point deadline = Clock::now() + limit;
    while (!done_) {
      pid_t r = ::waitpid(pid_, &status_, WNOHANG);
      if (r == pid_) {
        done_ = true;
        elapsed_ = Clock::now() - start_;
        break;
      }
      if (Clock::now() >= deadline) return false;
      std::this_thread::sleep_for(5ms);
    }
    return true;
  }

  // Waits until stdout holds `count` occurrences of `text`.
  bool wait_output(const std::string& text, int count, std::chrono::milliseconds limit) {
    Clock::time_point deadline = Clock::now() + limit;
    for (;;) {
      std::string o = out();
      int n = 0;
      for (std::size_t p = o.find(text); p != std::string::npos; p = o.find(text, p + 1)) ++n;
      if (n >= count) return true;
      if (Clock::now() >= deadline) return false;
      std::this_thread::sleep_for(5ms);
    }
  }

  std::string out() const { return read_fd(out_fd_); }
  std::string err() const { return read_fd(err_fd_); }
  int status() const { return status_; }
  bool exited_with(int code) const { return WIFEXITED(status_) && WEXITSTATUS(status_) == code; }
  double seconds() const { return std::chrono::duration<double>(elapsed_).count(); }
  pid_t pid() const { return pid_; }
  const std::string& marker() const { return marker_; }
  std::string dump() const {
    return describe_status(status_) + " after " + std::to_string(seconds()) + " s\n--- stdout:\n" + out() +
           "--- stderr:\n" + err();
  }

 private:
  std::string marker_;
  int out_fd_ = -1;
  int err_fd_ = -1;
  pid_t pid_ = -1;
  bool done_ = false;
  int status_ = 0;
  Clock::time_point start_;
  Clock::duration elapsed_{};
};

// A scratch directory the ranks of one test use as a barrier: each rank
// touches a file in it, a rank waits until enough files exist.
class SyncDir {
 public:
  SyncDir() {
    char tmpl[] = "/tmp/tuttirun-test-XXXXXX";
    if (::mkdtemp(tmpl) != nullptr) path_ = tmpl;
  }
  ~SyncDir() {
    if (path_.empty()) return;
    if (DIR* dir = ::opendir(path_.c_str())) {
      while (dirent* ent = ::readdir(dir))
        if (ent->d_name[0] != '.') ::unlink((path_ + "/" + ent->d_name).c_str());
      ::closedir(dir);
    }
    ::rmdir(path_.c_str());
  }
  std::string env() const { return "SYNC=" + path_; }

 private:
  std::string path_;
};

// Shell snippet: wait until $SYNC holds N files.
std::string barrier(int n) {
  return "while [ \"$(ls \"$SYNC\" | wc -l)\" -lt " + std::to_string(n) + " ]; do sleep 0.02; done";
}

// Runs tuttirun to the end (at most `limit`).
#define RUN_TUTTIRUN(var, limit, ...)         \
  Launch var(__VA_ARGS__);                    \
  ASSERT_TRUE(var.wait(limit)) << var.dump(); \
  SCOPED_TRACE(var.dump())

// Maps rank -> the line a rank printed after "[R] ".
std::map<int, std::vector<std::string>> tagged_lines(const std::string& out) {
  std::map<int, std::vector<std::string>> by_rank;
  std::regex re(R"(^\[([0-9]+)\] (.*)$)");
  for (const std::string& l : split_lines(out)) {
    std::smatch m;
    if (std::regex_match(l, m, re)) by_rank[std::stoi(m[1])].push_back(m[2]);
  }
  return by_rank;
}

const std::string kEnvScript =
    R"(echo "env $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR $MASTER_PORT $TUTTI_LAUNCHER")";

TEST(Tuttirun, EveryRankSeesItsEnvironment) {
  RUN_TUTTIRUN(run, 10s, {"-n", "3", "--tag-output", "sh", "-c", kEnvScript});
  ASSERT_TRUE(run.exited_with(0));
  auto by_rank = tagged_lines(run.out());
  ASSERT_EQ(by_rank.size(), 3u);
  std::set<std::string> ports;
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ(by_rank[r].size(), 1u) << "rank " << r;
    std::istringstream in(by_rank[r][0]);
    std::string word, addr, port, launcher;
    int rank = -1, world = -1, local = -1, local_world = -1, group = -1;
    in >> word >> rank >> world >> local >> local_world >> group >> addr >> port >> launcher;
    EXPECT_EQ(word, "env");
    EXPECT_EQ(rank, r);
    EXPECT_EQ(world, 3);
    EXPECT_EQ(local, r);
    EXPECT_EQ(local_world, 3);
    EXPECT_EQ(group, 0);
    EXPECT_EQ(addr, "127.0.0.1");
    EXPECT_EQ(launcher, "tuttirun");
    int p = std::stoi(port);
    EXPECT_GT(p, 0);
    EXPECT_LE(p, 65535);
    ports.insert(port);
  }
  EXPECT_EQ(ports.size(), 1u) << "all ranks must see the same MASTER_PORT";
}

// Each of 3 ranks reports the CPUs it may run on: bound to its share of
// tuttirun's own (placement_test.cc checks the arithmetic), or, with
// --bind-to none, as they were. `lead` comes before the options (--hosts).
void expect_binding(const std::vector<std::string>& lead, bool bind) {
  const std::string script = R"(grep Cpus_allowed_list /proc/self/status | tr -d ' \t')";
  auto cpus_of = [](const std::string& list) {
    std::set<int> cpus;
    std::istringstream in(list);
    for (std::string part; std::getline(in, part, ',');) {
      const std::size_t dash = part.find('-');
      const int lo = std::stoi(part.substr(0, dash));
      const int hi = dash == std::string::npos ? lo : std::stoi(part.substr(dash + 1));
      for (int c = lo; c <= hi; ++c) cpus.insert(c);
    }
    return cpus;
  };
  const std::vector<int> allowed = tuttirun::allowed_cpus();
  ASSERT_FALSE(allowed.empty());
  const std::set<int> all(allowed.begin(), allowed.end());
  const int n = 3;
  std::vector<std::string> args = lead;
  args.push_back("--tag-output");
  if (!bind) args.insert(args.end(), {"--bind-to", "none"});
  args.insert(args.end(), {"sh", "-c", script});
  RUN_TUTTIRUN(run, 10s, args);
  ASSERT_TRUE(run.exited_with(0)) << run.dump();
  auto by_rank = tagged_lines(run.out());
  ASSERT_EQ(by_rank.size(), static_cast<std::size_t>(n)) << run.dump();
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(by_rank[r].size(), 1u) << "rank " << r;
    const std::string& line = by_rank[r][0];
    ASSERT_EQ(line.rfind("Cpus_allowed_list:", 0), 0u) << line;
    const std::set<int> got = cpus_of(line.substr(line.find(':') + 1));
    const std::vector<int> want = tuttirun::rank_cpus(allowed, r, n);
    EXPECT_EQ(got, bind ? std::set<int>(want.begin(), want.end()) : all) << "rank " << r << ": " << line;
  }
}

TEST(Tuttirun, RanksAreBoundToTheirShareOfTheCpus) {
  expect_binding({"-n", "3"}, true);
  expect_binding({"-n", "3"}, false);
}

TEST(Tuttirun, MultiNodeNumbering) {
  RUN_TUTTIRUN(run, 10s,
               {"--nnodes", "2", "--node-rank", "1", "-n", "2", "--master-addr", "10.1.2.3", "--master-port", "29511",
                "--tag-output", "sh", "-c", kEnvScript});
  ASSERT_TRUE(run.exited_with(0));
  auto by_rank = tagged_lines(run.out());
  ASSERT_EQ(by_rank.size(), 2u);
  EXPECT_EQ(by_rank[2], std::vector<std::string>{"env 2 4 0 2 1 10.1.2.3 29511 tuttirun"});
  EXPECT_EQ(by_rank[3], std::vector<std::string>{"env 3 4 1 2 1 10.1.2.3 29511 tuttirun"});
}

TEST(Tuttirun, ProgramArgumentsPassUnchanged) {
  const std::string script = R"(for a in "$@"; do echo "arg:$a"; done)";
  const std::vector<std::string> expected{"arg:-n", "arg:5", "arg:--tag-output", "arg:--", "arg:x y"};
  {
    RUN_TUTTIRUN(run, 10s, {"-n", "1", "sh", "-c", script, "sh", "-n", "5", "--tag-output", "--", "x y"});
    ASSERT_TRUE(run.exited_with(0));
    EXPECT_EQ(split_lines(run.out()), expected);
  }
  {
    RUN_TUTTIRUN(run, 10s, {"-n", "1", "--", "sh", "-c", script, "sh", "-n", "5", "--tag-output", "--", "x y"});
    ASSERT_TRUE(run.exited_with(0));
    EXPECT_EQ(split_lines(run.out()), expected);
  }
}

TEST(Tuttirun, TagOutputTagsBothStreamsAndFlushesPartialLines) {
  RUN_TUTTIRUN(run, 10s,
               {"-n", "2", "--tag-output", "sh", "-c", R"(echo "out $RANK"; echo "err $RANK" >&2; printf "tail")"});
  ASSERT_TRUE(run.exited_with(0));
  auto out = tagged_lines(run.out());
  auto err = tagged_lines(run.err());
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(out[r], (std::vector<std::string>{"out " + std::to_string(r), "tail"})) << "rank " << r;
    EXPECT_EQ(err[r], (std::vector<std::string>{"err " + std::to_string(r)})) << "rank " << r;
  }
  EXPECT_EQ(split_lines(run.out()).size(), 4u);
}

TEST(Tuttirun, WithoutTagOutputRanksWriteDirectly) {
  RUN_TUTTIRUN(run, 10s, {"-n", "2", "sh", "-c", "echo hello; echo oops >&2"});
  ASSERT_TRUE(run.exited_with(0));
  EXPECT_EQ(run.out(), "hello\nhello\n");
  EXPECT_EQ(run.err(), "oops\noops\n");
}

TEST(Tuttirun, FailingRankStopsTheOthers) {
  // Rank 0 also leaves a background grandchild behind; it must die too.
  SyncDir sync;
  const std::string script = R"(
    if [ "$RANK" = 0 ]; then sleep 60 & echo "pid $!"; fi
    echo "pid $$"
    touch "$SYNC/$RANK"
    if [ "$RANK" = 2 ]; then )" +
                             barrier(4) + R"(; exit 3; fi
    exec sleep 60)";
  RUN_TUTTIRUN(run, 10s, {"-n", "4", "--tag-output", "sh", "-c", script}, {sync.env()});
  EXPECT_TRUE(run.exited_with(3));
  EXPECT_LT(run.seconds(), 3.0);
  std::vector<std::string> lines = launcher_lines(run.err());
  ASSERT_EQ(lines.size(), 1u);
  std::smatch m;
  ASSERT_TRUE(std::regex_match(
      lines[0], m, std::regex(R"(tuttirun: rank 2 \(pid ([0-9]+)\) exited with code 3; stopping the other 3 ranks)")));
  auto by_rank = tagged_lines(run.out());
  ASSERT_EQ(by_rank[2].size(), 1u);
  EXPECT_EQ(by_rank[2][0], "pid " + m[1].str());
  std::vector<pid_t> pids = printed_pids(run.out());
  EXPECT_EQ(pids.size(), 5u);
  EXPECT_TRUE(wait_marked_gone(run.marker(), 1s).empty());
  for (pid_t p : pids) EXPECT_FALSE(alive(p)) << "pid " << p << " still running";
}

// --keep-going: rank 2 exits with 3; once tuttirun has reaped it, rank 1
// kills itself; ranks 0 and 3 finish after both (each waits until the
// failed ranks' pids are gone, so every count below is fixed).
TEST(Tuttirun, KeepGoingLetsTheOthersFinish) {
  SyncDir sync;
  const std::string gone = R"sh(while [ ! -s "$SYNC/$1" ]; do sleep 0.01; done; )sh"
                           R"sh(while kill -0 "$(cat "$SYNC/$1")" 2>/dev/null; do sleep 0.01; done)sh";
  const std::string script = "gone() { " + gone + R"(; }
    echo "pid $$"
    if [ "$RANK" = 2 ]; then echo $$ > "$SYNC/two.tmp"; mv "$SYNC/two.tmp" "$SYNC/two"; exit 3; fi
    gone two
    if [ "$RANK" = 1 ]; then echo $$ > "$SYNC/one.tmp"; mv "$SYNC/one.tmp" "$SYNC/one"; kill -9 $$; fi
    gone one
    echo "done $RANK")";
  RUN_TUTTIRUN(run, 20s, {"-n", "4", "--tag-output", "--keep-going", "sh", "-c", script}, {sync.env()});
  EXPECT_TRUE(run.exited_with(3));  // the first failure's code
  auto by_rank = tagged_lines(run.out());
  for (int r : {0, 3}) {
    ASSERT_EQ(by_rank[r].size(), 2u) << "rank " << r;
    EXPECT_EQ(by_rank[r][1], "done " + std::to_string(r));
  }
  const std::vector<std::string> lines = launcher_lines(run.err());
  ASSERT_EQ(lines.size(), 6u);
  EXPECT_EQ(lines[0], "tuttirun: rank 2 (" + by_rank[2][0] + ") exited with code 3; the other 3 ranks keep going");
  EXPECT_EQ(lines[1],
            "tuttirun: rank 1 (" + by_rank[1][0] + ") killed by signal 9 (SIGKILL); the other 2 ranks keep going");
  const char* const ends[] = {"exited with code 0", "killed by signal 9 (SIGKILL)", "exited with code 3",
                              "exited with code 0"};
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(lines[2 + r], "tuttirun: end: rank " + std::to_string(r) + " (" + by_rank[r][0] + ") " + ends[r]);
  EXPECT_TRUE(wait_marked_gone(run.marker(), 1s).empty());
}

// With every rank succeeding, --keep-going lists their ends and exits 0.
TEST(Tuttirun, KeepGoingWithoutFailuresExitsZero) {
  RUN_TUTTIRUN(run, 10s, {"-n", "3", "--keep-going", "true"});
  EXPECT_TRUE(run.exited_with(0));
  const std::vector<std::string> lines = launcher_lines(run.err());
  ASSERT_EQ(lines.size(), 3u);
  for (int r = 0; r < 3; ++r)
    EXPECT_TRUE(std::regex_match(
        lines[r], std::regex("tuttirun: end: rank " + std::to_string(r) + R"( \(pid [0-9]+\) exited with code 0)")))
        << lines[r];
}

TEST(Tuttirun, RankKilledBySignalIsNamed) {
  RUN_TUTTIRUN(run, 10s,
               {"-n", "2", "sh", "-c", R"(if [ "$RANK" = 1 ]; then sleep 0.2; kill -9 $$; fi; exec sleep 60)"});
  EXPECT_TRUE(run.exited_with(128 + 9));
  EXPECT_LT(run.seconds(), 3.0);
  std::vector<std::string> lines = launcher_lines(run.err());
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_TRUE(std::regex_match(
      lines[0],
      std::regex(R"(tuttirun: rank 1 \(pid [0-9]+\) killed by signal 9 \(SIGKILL\); stopping the other rank)")));
  EXPECT_TRUE(wait_marked_gone(run.marker(), 1s).empty());
}

// Segments left by ranks killed before every member mapped them are removed
// when the job ends: tuttirun names them (TUTTI_SHM_PREFIX) and cleans up.
TEST(Tuttirun, LeftoverSharedMemoryOfTheJobIsRemoved) {
  RUN_TUTTIRUN(run, 10s,
               {"-n", "2", "sh", "-c",
                R"(echo "prefix=$TUTTI_SHM_PREFIX"; : > /dev/shm/$TUTTI_SHM_PREFIX-rank$RANK; )"
                R"(if [ "$RANK" = 1 ]; then sleep 0.2; kill -9 $$; fi; exec sleep 60)"});
  EXPECT_TRUE(run.exited_with(128 + 9));
  std::smatch m;
  const std::string out = run.out();
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"(prefix=(tutti-run[0-9]+))"))) << out;
  for (int r = 0; r < 2; ++r) {
    const std::string path = "/dev/shm/" + m[1].str() + "-rank" + std::to_string(r);
    EXPECT_NE(::access(path.c_str(), F_OK), 0) << path << " was left behind";
    ::unlink(path.c_str());
  }
}

TEST(Tuttirun, SingleRankExitCodeIsPassedOn) {
  RUN_TUTTIRUN(run, 10s, {"-n", "1", "sh", "-c", "exit 7"});
  EXPECT_TRUE(run.exited_with(7));
  EXPECT_EQ(launcher_lines(run.err()).size(), 1u);
  EXPECT_NE(run.err().find("rank 0"), std::string::npos);
  EXPECT_EQ(run.err().find("stopping"), std::string::npos);
}

TEST(Tuttirun, RanksIgnoringSigtermAreKilledAfterTheGrace) {
  // Every rank ignores SIGTERM (so does its sleep, which inherits that)
  // before rank 0 fails; only the SIGKILL after the grace stops them.
  auto script = [](int n) {
    return R"(trap "" TERM; touch "$SYNC/$RANK"; if [ "$RANK" = 0 ]; then )" + barrier(n) + R"(; exit 5; fi; sleep 60)";
  };
  {
    SyncDir sync;
    RUN_TUTTIRUN(run, 10s, {"-n", "3", "sh", "-c", script(3)}, {"TUTTI_KILL_GRACE_SECONDS=0.5", sync.env()});
    EXPECT_TRUE(run.exited_with(5));
    EXPECT_GE(run.seconds(), 0.5);
    EXPECT_LT(run.seconds(), 2.5);
    EXPECT_TRUE(wait_marked_gone(run.marker(), 1s).empty());
  }
  {  // the option wins over the environment
    SyncDir sync;
    RUN_TUTTIRUN(run, 10s, {"--kill-grace", "0.2", "-n", "2", "sh", "-c", script(2)},
                 {"TUTTI_KILL_GRACE_SECONDS=30", sync.env()});
    EXPECT_TRUE(run.exited_with(5));
    EXPECT_LT(run.seconds(), 2.0);
    EXPECT_TRUE(wait_marked_gone(run.marker(), 1s).empty());
  }
}

TEST(Tuttirun, SigintStopsAllRanks) {
  Launch run({"-n", "3", "--tag-output", "sh", "-c", R"(echo "pid $$ ready"; exec sleep 60)"});
  ASSERT_TRUE(run.wait_output("ready", 3, 5s)) << run.out() << run.err();
  ASSERT_EQ(::kill(run.pid(), SIGINT), 0);
  ASSERT_TRUE(run.wait(3s)) << run.out() << run.err();
  SCOPED_TRACE(run.dump());
  EXPECT_TRUE((WIFSIGNALED(run.status()) && WTERMSIG(run.status()) == SIGINT) || run.exited_with(130));
  EXPECT_NE(run.err().find("received SIGINT"), std::string::npos);
  EXPECT_TRUE(wait_marked_gone(run.marker(), 1s).empty());
  std::vector<pid_t> pids = printed_pids(run.out());
  EXPECT_EQ(pids.size(), 3u);
  for (pid_t p : pids) EXPECT_FALSE(alive(p)) << "pid " << p << " still running";
}

TEST(Tuttirun, RanksThatHandleTheSignalCanExitCleanly) {
  Launch run({"-n", "2", "--tag-output", "sh", "-c", R"(trap "echo bye; exit 0" TERM; echo ready; sleep 60 & wait)"});
  ASSERT_TRUE(run.wait_output("ready", 2, 5s)) << run.out() << run.err();
  ASSERT_EQ(::kill(run.pid(), SIGTERM), 0);
  ASSERT_TRUE(run.wait(3s)) << run.out() << run.err();
  SCOPED_TRACE(run.dump());
  EXPECT_TRUE(run.exited_with(0));
  EXPECT_TRUE(run.wait_output("bye", 2, 1s));
  EXPECT_TRUE(wait_marked_gone(run.marker(), 1s).empty());
}

TEST(Tuttirun, TimeoutStopsTheJob) {
  RUN_TUTTIRUN(run, 10s,
               {"--timeout", "1", "-n", "3", "sh", "-c", R"(if [ "$RANK" = 1 ]; then exit 0; fi; exec sleep 60)"});
  EXPECT_TRUE(run.exited_with(124));
  EXPECT_GE(run.seconds(), 0.9);
  EXPECT_LT(run.seconds(), 3.0);
  std::vector<std::string> lines = launcher_lines(run.err());
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("still running: 0, 2;"), std::string::npos);
  EXPECT_TRUE(wait_marked_gone(run.marker(), 1s).empty());
}

// A limit past what the clock holds is no limit, not an overflow into the
// past that stops the job at once.
TEST(Tuttirun, TimeoutsBeyondTheClocksRangeNeverExpire) {
  for (const char* t : {"1e10", "1e300"}) {
    RUN_TUTTIRUN(run, 10s, {"--timeout", t, "--kill-grace", t, "-n", "2", "sh", "-c", "sleep 0.3; echo done"});
    EXPECT_TRUE(run.exited_with(0)) << t << ": " << run.err();
    EXPECT_TRUE(run.wait_output("done", 2, 1s)) << t;
  }
}

TEST(Tuttirun, AllRanksSucceed) {
  RUN_TUTTIRUN(run, 10s, {"-n", "4", "true"});
  EXPECT_TRUE(run.exited_with(0));
  EXPECT_EQ(run.err(), "");
}

TEST(Tuttirun, MissingProgramExits127) {
  RUN_TUTTIRUN(run, 10s, {"-n", "2", "/nonexistent/tuttirun-test-program"});
  EXPECT_TRUE(run.exited_with(127));
  EXPECT_NE(run.err().find("cannot execute"), std::string::npos);
  EXPECT_TRUE(wait_marked_gone(run.marker(), 1s).empty());
}

TEST(Tuttirun, HelpPrintsUsage) {
  RUN_TUTTIRUN(run, 10s, {"--help"});
  EXPECT_TRUE(run.exited_with(0));
  EXPECT_NE(run.out().find("Usage: tuttirun"), std::string::npos);
  EXPECT_NE(run.out().find("--nproc-per-node"), std::string::npos);
}

TEST(Tuttirun, UsageErrorsExit2) {
  const std::vector<std::vector<std::string>> cases = {
      {},
      {"true"},
      {"-n", "2"},
      {"-n", "2", "--"},
      {"-n", "0", "true"},
      {"-n", "x", "true"},
      {"-n", "2", "--bogus", "true"},
      {"-n", "1", "--master-port", "70000", "true"},
      {"-n", "1", "--timeout", "-1", "true"},
      {"-n", "1", "--kill-grace", "soon", "true"},
      {"-n", "1", "--nnodes", "2", "--node-rank", "1", "--master-port", "29500", "true"},
      {"-n", "1", "--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1", "true"},
      {"-n", "1", "--nnodes", "2", "--node-rank", "2", "--master-addr", "10.0.0.1", "--master-port", "1", "true"},
      {"-n", "1", "--node-rank", "1", "true"},
  };
  for (const auto& args : cases) {
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    Launch run(args);
    ASSERT_TRUE(run.wait(5s)) << joined;
    EXPECT_TRUE(run.exited_with(2)) << joined << "\n" << run.dump();
    EXPECT_NE(run.err().find("tuttirun: error:"), std::string::npos) << joined << "\n" << run.err();
  }
}

// Every rank of a job gets the same fresh secret (32 random bytes as hex),
// a secret already set is kept, and a multi-node job without one is warned.
TEST(Tuttirun, EveryRankGetsTheJobSecret) {
  const std::string script = R"(echo "secret ${TUTTI_JOB_SECRET:-none}")";
  auto secrets = [&](const std::vector<std::string>& args) {
    Launch run(args);
    EXPECT_TRUE(run.wait(10s)) << run.dump();
    EXPECT_TRUE(run.exited_with(0)) << run.dump();
    std::set<std::string> seen;
    for (const auto& [rank, lines] : tagged_lines(run.out()))
      for (const auto& l : lines) seen.insert(l);
    return std::make_pair(seen, run.err());
  };
  ::unsetenv("TUTTI_JOB_SECRET");
  auto [first, err1] = secrets({"-n", "3", "--tag-output", "sh", "-c", script});
  auto [second, err2] = secrets({"-n", "2", "--tag-output", "sh", "-c", script});
  ASSERT_EQ(first.size(), 1u);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_TRUE(std::regex_match(*first.begin(), std::regex("secret [0-9a-f]{64}"))) << *first.begin();
  EXPECT_NE(*first.begin(), *second.begin());
  ::setenv("TUTTI_JOB_SECRET", "given secret", 1);
  auto [given, err3] = secrets({"-n", "2", "--tag-output", "sh", "-c", script});
  EXPECT_EQ(given, std::set<std::string>{"secret given secret"});
  ::unsetenv("TUTTI_JOB_SECRET");
  auto [multi, err4] = secrets({"--nnodes", "2", "--node-rank", "1", "-n", "1", "--master-addr", "10.1.2.3",
                                "--master-port", "29511", "--tag-output", "sh", "-c", script});
  EXPECT_EQ(multi, std::set<std::string>{"secret none"});
  EXPECT_NE(err4.find("TUTTI_JOB_SECRET is not set"), std::string::npos) << err4;
}

// ---- --hosts: one tuttirun per host through an exec prefix -------------------
// Here every "host" is this machine: the prefix only marks which host a
// command runs for (env NETBED_TEST_HOST={host}); tests/netbed runs the same
// on real network namespaces.

const std::string kHostEnvScript =
    R"(echo "host $TEST_HOST $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR $MASTER_PORT ${#TUTTI_JOB_SECRET}")";

TEST(TuttirunHosts, EveryHostStartsItsRanks) {
  RUN_TUTTIRUN(run, 10s,
               {"--hosts", "alpha:2,beta:2,gamma:2", "--exec-prefix", "env TEST_HOST={host}", "--master-addr",
                "127.0.0.1", "--master-port", "29533", "--tag-output", "sh", "-c", kHostEnvScript});
  ASSERT_TRUE(run.exited_with(0));
  auto by_rank = tagged_lines(run.out());
  ASSERT_EQ(by_rank.size(), 6u);
  const char* hosts[] = {"alpha", "beta", "gamma"};
  for (int r = 0; r < 6; ++r) {
    ASSERT_EQ(by_rank[r].size(), 1u) << "rank " << r;
    EXPECT_EQ(by_rank[r][0], "host " + std::string(hosts[r / 2]) + " " + std::to_string(r) + " 6 " +
                                 std::to_string(r % 2) + " 2 " + std::to_string(r / 2) + " 127.0.0.1 29533 64");
  }
  EXPECT_TRUE(launcher_lines(run.err()).empty()) << run.err();
}

TEST(TuttirunHosts, OneJobSecretForEveryHostAndTheCallersIsKept) {
  const std::string script = R"(echo "secret $TUTTI_JOB_SECRET")";
  std::set<std::string> secrets;
  for (int i = 0; i < 2; ++i) {
    RUN_TUTTIRUN(run, 10s,
                 {"--hosts", "a:2,b:2", "--exec-prefix", "env", "--master-addr", "127.0.0.1", "sh", "-c", script});
    ASSERT_TRUE(run.exited_with(0));
    std::set<std::string> lines;
    for (const std::string& l : split_lines(run.out())) lines.insert(l);
    ASSERT_EQ(lines.size(), 1u) << "every rank gets the same secret";
    EXPECT_TRUE(std::regex_match(*lines.begin(), std::regex("secret [0-9a-f]{64}")));
    secrets.insert(*lines.begin());
  }
  EXPECT_EQ(secrets.size(), 2u) << "each job draws its own";
  const std::string mine(64, 'c');
  RUN_TUTTIRUN(run, 10s,
               {"--hosts", "a:1,b:1", "--exec-prefix", "env", "--master-addr", "127.0.0.1", "sh", "-c", script},
               {"TUTTI_JOB_SECRET=" + mine});
  ASSERT_TRUE(run.exited_with(0));
  EXPECT_EQ(split_lines(run.out()), (std::vector<std::string>{"secret " + mine, "secret " + mine}));
}

// A {cmd} prefix gets the whole command as one shell string, with the
// secret and the TUTTI_* settings in front: the far side of ssh inherits no
// environment (here: env -i).
TEST(TuttirunHosts, CmdPrefixCarriesQuotedCommandAndSettings) {
  const std::string script = R"(echo "[$1] [$2] $TUTTI_LOG ${#TUTTI_JOB_SECRET} ${OTHER_VAR:-unset} $RANK")";
  RUN_TUTTIRUN(run, 10s,
               {"--hosts", "h0:1,h1:1", "--exec-prefix", "env -i PATH=/usr/local/bin:/usr/bin:/bin sh -c {cmd}",
                "--master-addr", "127.0.0.1", "sh", "-c", script, "sh", "x y", "it's \"$HOME\""},
               {"TUTTI_LOG=info debug", "OTHER_VAR=1"});
  ASSERT_TRUE(run.exited_with(0));
  std::vector<std::string> lines = split_lines(run.out());
  std::sort(lines.begin(), lines.end());
  EXPECT_EQ(lines, (std::vector<std::string>{"[x y] [it's \"$HOME\"] info debug 64 unset 0",
                                             "[x y] [it's \"$HOME\"] info debug 64 unset 1"}));
}

// Every host's tuttirun binds its ranks, and --bind-to none reaches them.
TEST(TuttirunHosts, BindingIsPassedToEveryHost) {
  const std::vector<std::string> lead{"--hosts",       "h0:3",     "--exec-prefix", "env TEST_HOST={host}",
                                      "--master-addr", "127.0.0.1"};
  expect_binding(lead, true);
  expect_binding(lead, false);
}

TEST(TuttirunHosts, FailingRankStopsEveryHost) {
  SyncDir sync;
  const std::string script = R"(
    echo "pid $$"
    touch "$SYNC/$RANK"
    if [ "$RANK" = 3 ]; then )" +
                             barrier(6) + R"(; exit 3; fi
    exec sleep 60)";
  RUN_TUTTIRUN(run, 15s,
               {"--hosts", "a:2,b:2,c:2", "--exec-prefix", "env TEST_HOST={host}", "--master-addr", "127.0.0.1",
                "--kill-grace", "1", "sh", "-c", script},
               {sync.env()});
  EXPECT_TRUE(run.exited_with(3));
  EXPECT_LT(run.seconds(), 5.0);
  std::vector<std::string> lines = launcher_lines(run.err());
  // The host's own tuttirun reports the rank; ours names host, rank and code.
  std::regex ours(
      R"(tuttirun: host b \(node 1, ranks 2-3\): rank 3 \(pid [0-9]+\) exited with code 3; stopping the other 2 hosts)");
  EXPECT_EQ(std::count_if(lines.begin(), lines.end(), [&](const std::string& l) { return std::regex_match(l, ours); }),
            1)
      << run.err();
  std::vector<pid_t> pids = printed_pids(run.out());
  EXPECT_EQ(pids.size(), 6u);
  EXPECT_TRUE(wait_marked_gone(run.marker(), 2s).empty());
  for (pid_t p : pids) EXPECT_FALSE(alive(p)) << "pid " << p << " still running";
}

// --keep-going reaches every host's tuttirun: rank 3 (host b) fails, the
// other five ranks finish; the hosts' ends are listed, and the exit code is
// rank 3's. (Hosts a and c usually end a second after b; on a busy machine
// one may end first.)
TEST(TuttirunHosts, KeepGoingReachesEveryHost) {
  RUN_TUTTIRUN(
      run, 15s,
      {"--hosts", "a:2,b:2,c:2", "--exec-prefix", "env TEST_HOST={host}", "--master-addr", "127.0.0.1", "--keep-going",
       "sh", "-c", R"(if [ "$RANK" = 3 ]; then exit 3; fi; [ "$RANK" = 2 ] || sleep 1; echo "done $RANK")"});
  EXPECT_TRUE(run.exited_with(3));
  std::vector<std::string> done;
  std::istringstream out(run.out());
  for (std::string l; std::getline(out, l);) done.push_back(l);
  std::sort(done.begin(), done.end());
  EXPECT_EQ(done, (std::vector<std::string>{"done 0", "done 1", "done 2", "done 4", "done 5"}));
  const std::vector<std::string> lines = launcher_lines(run.err());
  auto has = [&](const std::string& re) {
    return std::count_if(lines.begin(), lines.end(),
                         [&](const std::string& l) { return std::regex_match(l, std::regex(re)); });
  };
  EXPECT_EQ(has(R"(tuttirun: host b \(node 1, ranks 2-3\): rank 3 \(pid [0-9]+\) exited with code 3; )"
                R"(the other (2 hosts keep|host keeps) going)"),
            1);
  EXPECT_EQ(has(R"(tuttirun: end: host a \(node 0, ranks 0-1\): exited with code 0)"), 1);
  EXPECT_EQ(has(R"(tuttirun: end: host b \(node 1, ranks 2-3\): exited with code 3)"), 1);
  EXPECT_EQ(has(R"(tuttirun: end: host c \(node 2, ranks 4-5\): exited with code 0)"), 1);
  EXPECT_TRUE(wait_marked_gone(run.marker(), 2s).empty());
}

TEST(TuttirunHosts, FailingPrefixIsNamed) {
  RUN_TUTTIRUN(run, 10s,
               {"--hosts", "a:1,b:1", "--exec-prefix", "sh -c 'test {host} = a && exec \"$@\"; exit 9' sh",
                "--master-addr", "127.0.0.1", "--kill-grace", "0.5", "sleep", "60"});
  EXPECT_TRUE(run.exited_with(9));
  // Host a's tuttirun, stopped by ours, says nothing: its "received
  // SIGTERM" is not relayed.
  EXPECT_EQ(launcher_lines(run.err()),
            std::vector<std::string>{"tuttirun: host b (node 1, rank 1): exited with code 9; stopping the other host"});
  EXPECT_TRUE(wait_marked_gone(run.marker(), 2s).empty());
}

TEST(TuttirunHosts, MissingProgramIsNamed) {
  RUN_TUTTIRUN(run, 10s,
               {"--hosts", "a:1,b:1", "--exec-prefix", "env", "--master-addr", "127.0.0.1", "/nonexistent/prog"});
  EXPECT_TRUE(run.exited_with(127));
  EXPECT_NE(run.err().find("cannot execute '/nonexistent/prog'"), std::string::npos);
  EXPECT_TRUE(wait_marked_gone(run.marker(), 2s).empty());
}

TEST(TuttirunHosts, SigintStopsEveryHost) {
  Launch run({"--hosts", "a:2,b:2", "--exec-prefix", "env", "--master-addr", "127.0.0.1", "--kill-grace", "1", "sh",
              "-c", R"(echo "pid $$ ready"; exec sleep 60)"});
  ASSERT_TRUE(run.wait_output("ready", 4, 5s)) << run.out() << run.err();
  ASSERT_EQ(::kill(run.pid(), SIGINT), 0);
  ASSERT_TRUE(run.wait(5s)) << run.out() << run.err();
  SCOPED_TRACE(run.dump());
  EXPECT_TRUE((WIFSIGNALED(run.status()) && WTERMSIG(run.status()) == SIGINT) || run.exited_with(130));
  EXPECT_NE(run.err().find("tuttirun: received SIGINT; forwarding it to 2 running hosts"), std::string::npos);
  EXPECT_TRUE(wait_marked_gone(run.marker(), 2s).empty());
  std::vector<pid_t> pids = printed_pids(run.out());
  EXPECT_EQ(pids.size(), 4u);
  for (pid_t p : pids) EXPECT_FALSE(alive(p)) << "pid " << p << " still running";
}

TEST(TuttirunHosts, TimeoutNamesTheHosts) {
  RUN_TUTTIRUN(run, 10s,
               {"--hosts", "a:1,b:1", "--exec-prefix", "env", "--master-addr", "127.0.0.1", "--timeout", "0.5",
                "--kill-grace", "0.5", "sleep", "60"});
  EXPECT_TRUE(run.exited_with(124));
  EXPECT_NE(run.err().find("tuttirun: timeout of 0.5 s expired; hosts still running: a, b; stopping them"),
            std::string::npos);
  EXPECT_TRUE(wait_marked_gone(run.marker(), 2s).empty());
}

TEST(TuttirunHosts, UsageErrorsExit2) {
  const std::vector<std::vector<std::string>> cases = {
      {"--hosts", "a:2,b:3", "true"},
      {"--hosts", "a,b", "true"},
      {"--hosts", "", "true"},
      {"--hosts", "a:2", "--nnodes", "2", "true"},
      {"--hosts", "a:2", "--node-rank", "0", "true"},
      {"--hosts", "a:2", "--exec-prefix", "ssh '{host}", "true"},
      {"--hosts", "a:2", "--exec-prefix", "", "true"},
      {"--exec-prefix", "env", "-n", "1", "true"},
      {"--hosts", "a:2"},
  };
  for (const auto& args : cases) {
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    Launch run(args);
    ASSERT_TRUE(run.wait(5s)) << joined;
    EXPECT_TRUE(run.exited_with(2)) << joined << "\n" << run.dump();
    EXPECT_NE(run.err().find("tuttirun: error:"), std::string::npos) << joined << "\n" << run.err();
  }
}

}  // namespace
