// init(): rendezvous through a store, environment variables of the common
// launchers, and the errors when a rank never arrives or the setup is wrong.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>
#include <thread>

#include "common/errors.h"
#include "harness/spawn.h"
#include "multirank/collective_checks.h"
#include "net/socket.h"

namespace tutti::testing {
namespace {

// Ranks as threads of one process, meeting through an in-memory store.
// Runs n ranks as threads of this process, each meeting through
// store_of(rank), and returns each rank's all_reduce of base + rank.
std::vector<std::int64_t> all_reduce_as_threads(int n, const std::function<std::shared_ptr<Store>(int)>& store_of,
                                                std::int64_t base, std::chrono::seconds timeout) {
  std::vector<std::int64_t> result(n, 0);
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r) {
    ts.emplace_back([&, r] {
      InitOptions o;
      o.rank = r;
      o.world_size = n;
      o.store = store_of(r);
      o.timeout = timeout;
      Communicator c = init(o);
      std::int64_t v = base + r;
      c.all_reduce(&v, &v, 1, DataType::Int64, ReduceOp::SUM);
      result[r] = v;
    });
  }
  for (auto& t : ts) t.join();
  return result;
}

TEST(Init, ThreadsMeetThroughAMemoryStore) {
  ::setenv("TUTTI_ADVERTISE_ADDR", "127.0.0.1", 1);  // test traffic stays on loopback
  auto store = make_memory_store();
  const std::vector<std::int64_t> result = all_reduce_as_threads(
      3, [&](int) { return make_prefix_store("job1", store); }, 10, std::chrono::seconds(20));
  for (int r = 0; r < 3; ++r) EXPECT_EQ(result[r], 33);
}

// A store that counts the requests made through it (one per call).
class CountingStore final : public Store {
 public:
  explicit CountingStore(std::shared_ptr<Store> base) : base_(std::move(base)) { set_timeout(base_->timeout()); }
  using Store::set;
  using Store::wait;
  void set(const std::string& k, const Bytes& v) override {
    ++n_;
    base_->set(k, v);
  }
  Bytes get(const std::string& k) override {
    ++n_;
    return base_->get(k);
  }
  std::vector<Bytes> multi_get(const std::vector<std::string>& ks) override {
    ++n_;
    return base_->multi_get(ks);
  }
  std::int64_t add(const std::string& k, std::int64_t d) override {
    ++n_;
    return base_->add(k, d);
  }
  Bytes compare_set(const std::string& k, const Bytes& e, const Bytes& d) override {
    ++n_;
    return base_->compare_set(k, e, d);
  }
  void wait(const std::vector<std::string>& ks, std::chrono::milliseconds t) override {
    ++n_;
    base_->wait(ks, t);
  }
  bool check(const std::vector<std::string>& ks) override {
    ++n_;
    return base_->check(ks);
  }
  bool delete_key(const std::string& k) override {
    ++n_;
    return base_->delete_key(k);
  }
  std::int64_t num_keys() override {
    ++n_;
    return base_->num_keys();
  }
  int requests() const { return n_; }

 private:
  std::shared_ptr<Store> base_;
  std::atomic<int> n_{0};
};

// Start-up traffic to the store does not grow with the job: every rank's
// address and host record are read in one request, the shared-memory check
// reads two neighbours' probes and votes through one counter, so a rank
// makes as many requests in a job of 12 as in one of 3.
TEST(Init, StoreRequestsPerRankDoNotGrowWithTheJob) {
  ::setenv("TUTTI_ADVERTISE_ADDR", "127.0.0.1", 1);
  std::vector<int> most;  // per job size: the most requests any rank made
  for (int n : {3, 6, 12}) {
    auto store = make_memory_store();
    std::vector<std::shared_ptr<CountingStore>> counted;
    for (int r = 0; r < n; ++r)
      counted.push_back(std::make_shared<CountingStore>(make_prefix_store("n" + std::to_string(n), store)));
    const std::vector<std::int64_t> result = all_reduce_as_threads(
        n, [&](int r) { return counted[r]; }, 1, std::chrono::seconds(60));
    int m = 0;
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(result[r], n * (n + 1) / 2) << "rank " << r << " of " << n;
      m = std::max(m, counted[r]->requests());
    }
    most.push_back(m);
  }
  std::printf("store requests of the busiest rank: %d with 3 ranks, %d with 6, %d with 12\n", most[0], most[1],
              most[2]);
  EXPECT_EQ(most[0], most[1]) << "3 ranks: " << most[0] << " requests, 6 ranks: " << most[1];
  EXPECT_EQ(most[1], most[2]) << "6 ranks: " << most[1] << " requests, 12 ranks: " << most[2];
  EXPECT_LE(most[2], 16);
}

TEST(Init, MissingRanksAreNamedAtTheDeadline) {
  ::setenv("TUTTI_ADVERTISE_ADDR", "127.0.0.1", 1);
  auto store = make_memory_store();
  std::vector<std::string> errors(2);
  std::vector<std::thread> ts;
  auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < 2; ++r) {
    ts.emplace_back([&, r] {
      InitOptions o;
      o.rank = r;
      o.world_size = 4;  // ranks 2 and 3 never come
      o.store = store;
      o.timeout = std::chrono::milliseconds(500);
      try {
        init(o);
      } catch (const Error& e) {
        errors[r] = what_of(e);
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r].find("Timeout"), std::string::npos) << errors[r];
    EXPECT_NE(errors[r].find("ranks 2, 3 never joined"), std::string::npos) << errors[r];
  }
}

// Runs `world` forked children with the given environment (plus MASTER_*),
// each calling init() with no options and an all_reduce; returns their exit codes.
// `errors`: when given, each child's error message (empty if none).
std::vector<int> run_env_children(int world,
                                  const std::function<std::vector<std::pair<std::string, std::string>>(int)>& env_of,
                                  bool set_master = true, std::vector<std::string>* errors = nullptr) {
  int port;
  {
    detail::Fd probe = detail::listen_tcp("127.0.0.1", 0);
    port = detail::local_address(probe.get()).port();
  }
  std::vector<pid_t> pids;
  std::vector<int> pipes;
  for (int r = 0; r < world; ++r) {
    int fds[2] = {-1, -1};
    if (errors && ::pipe(fds) != 0) ADD_FAILURE() << "pipe failed";
    pid_t pid = fork();
    if (pid == 0) {
      if (fds[0] >= 0) ::close(fds[0]);
      for (const char* v : {"RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK",
                            "PMI_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "MASTER_ADDR", "MASTER_PORT"})
        unsetenv(v);
      if (set_master) {
        setenv("MASTER_ADDR", "127.0.0.1", 1);
        setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      }
      setenv("TUTTI_TIMEOUT", "20", 1);
      for (auto& [k, v] : env_of(r)) setenv(k.c_str(), v.c_str(), 1);
      int code = 0;
      try {
        Communicator c = init();
        std::int64_t v = 1;
        c.all_reduce(&v, &v, 1, DataType::Int64, ReduceOp::SUM);
        code = (v == c.size() && c.size() == world) ? 0 : 3;
      } catch (const Error& e) {
        std::fprintf(stderr, "child %d: %s\n", r, e.what());
        code = e.kind() == ErrorKind::InvalidArgument ? 4 : e.kind() == ErrorKind::Unauthenticated ? 6 : 5;
        if (fds[1] >= 0) {
          const std::string m = e.what();
          if (::write(fds[1], m.data(), m.size()) < 0) code = 7;
        }
      }
      _exit(code);
    }
    if (fds[1] >= 0) ::close(fds[1]);
    pipes.push_back(fds[0]);
    pids.push_back(pid);
  }
  std::vector<int> codes;
  if (errors) errors->assign(static_cast<std::size_t>(world), "");
  for (std::size_t i = 0; i < pids.size(); ++i) {
    if (errors && pipes[i] >= 0) {
      char buf[1024];
      for (ssize_t n; (n = ::read(pipes[i], buf, sizeof buf)) > 0;)
        (*errors)[i].append(buf, static_cast<std::size_t>(n));
      ::close(pipes[i]);
    }
    int st = 0;
    waitpid(pids[i], &st, 0);
    codes.push_back(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
  }
  return codes;
}

TEST(Init, ReadsTorchrunOpenMpiHydraAndSlurmVariables) {
  using Env = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(run_env_children(3,
                             [](int r) {
                               return Env{{"RANK", std::to_string(r)}, {"WORLD_SIZE", "3"}};
                             }),
            std::vector<int>(3, 0));
  EXPECT_EQ(run_env_children(2,
                             [](int r) {
                               return Env{{"OMPI_COMM_WORLD_RANK", std::to_string(r)}, {"OMPI_COMM_WORLD_SIZE", "2"}};
                             }),
            std::vector<int>(2, 0));
  EXPECT_EQ(run_env_children(2,
                             [](int r) {
                               return Env{{"PMI_RANK", std::to_string(r)}, {"PMI_SIZE", "2"}};
                             }),
            std::vector<int>(2, 0));
  EXPECT_EQ(run_env_children(2,
                             [](int r) {
                               return Env{{"SLURM_PROCID", std::to_string(r)}, {"SLURM_NTASKS", "2"}};
                             }),
            std::vector<int>(2, 0));
}

TEST(Init, InconsistentSetupIsAnInvalidArgument) {
  using Env = std::vector<std::pair<std::string, std::string>>;
  // RANK without WORLD_SIZE.
  EXPECT_EQ(run_env_children(1, [](int) { return Env{{"RANK", "0"}}; }), std::vector<int>{4});
  // No MASTER_ADDR for a world of two.
  EXPECT_EQ(run_env_children(
                1,
                [](int) {
                  return Env{{"RANK", "0"}, {"WORLD_SIZE", "2"}};
                },
                false),
            std::vector<int>{4});
  // A rank outside the world.
  EXPECT_EQ(run_env_children(1, [](int) { return Env{{"RANK", "5"}, {"WORLD_SIZE", "2"}}; }), std::vector<int>{4});
  // An unknown algorithm override.
  EXPECT_EQ(run_env_children(1, [](int) { return Env{{"TUTTI_ALGO", "all_reduce:bogus"}}; }), std::vector<int>{4});
}

// A caller that passes its own store, rank and size (torch's process groups)
// is not read, failed or redirected by the launcher variables of the
// environment: WORLD_SIZE without RANK, the RANK and WORLD_SIZE of another
// level, launchers that disagree, a malformed MASTER_PORT and a MASTER_ADDR
// that resolves nowhere. Each case runs 3 forked ranks meeting through a
// file store; the group's rank order is the reverse of the processes'.
TEST(Init, CallerPlacedRanksIgnoreTheLauncherEnvironment) {
  using Env = std::vector<std::pair<std::string, std::string>>;
  const std::vector<Env> cases = {
      {{"WORLD_SIZE", "2"}},
      {{"RANK", "7"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "5"}, {"LOCAL_WORLD_SIZE", "6"}},
      {{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}},
      {{"MASTER_ADDR", "nowhere.invalid"}, {"MASTER_PORT", "not-a-port"}, {"SLURM_PROCID", "x"}},
  };
  const int n = 3;
  for (std::size_t k = 0; k < cases.size(); ++k) {
    char dir[] = "/tmp/tutti-init-env-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    const std::string path = std::string(dir) + "/store";
    std::vector<pid_t> pids;
    for (int p = 0; p < n; ++p) {
      pid_t pid = fork();
      if (pid == 0) {
        for (auto& [var, value] : cases[k]) ::setenv(var.c_str(), value.c_str(), 1);
        int code = 0;
        try {
          InitOptions o;
          o.rank = n - 1 - p;
          o.world_size = n;
          o.store = make_file_store(path);
          o.timeout = std::chrono::seconds(20);
          Communicator c = init(o);
          std::int64_t v = 100 + o.rank, want = 100 * n + n * (n - 1) / 2;
          c.all_reduce(&v, &v, 1, DataType::Int64, ReduceOp::SUM);
          if (c.rank() != o.rank || c.size() != n || v != want) code = 3;
          if (c.local_rank() != o.rank || c.local_size() != n) code = 8;  // not LOCAL_RANK's
          c.barrier();
        } catch (const Error& e) {
          std::fprintf(stderr, "case %zu, process %d: %s\n", k, p, e.what());
          code = 5;
        }
        _exit(code);
      }
      pids.push_back(pid);
    }
    std::vector<int> codes;
    for (pid_t pid : pids) {
      int st = 0;
      waitpid(pid, &st, 0);
      codes.push_back(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
    }
    EXPECT_EQ(codes, std::vector<int>(n, 0)) << "case " << k;
    std::filesystem::remove_all(dir);
  }
}

// Settings that decide algorithms and message sizes must be the same on
// every rank: a rank with another value fails init on every rank, naming
// the variable and both values, instead of hanging in its first operation.
TEST(Init, RanksThatDisagreeOnASettingFailAtInitNamingIt) {
  using Env = std::vector<std::pair<std::string, std::string>>;
  struct Case {
    const char* var;
    const char* usual;
    const char* odd;
    int odd_rank;
    const char* scope = "a job";
  };
  for (const Case& c : {Case{"TUTTI_ALGO_TUNING", "on", "off", 1}, Case{"TUTTI_SMALL_BYTES", "65536", "32768", 2},
                        Case{"TUTTI_ALGO", "all_reduce:ring", "all_reduce:ring,broadcast:chain", 0},
                        Case{"TUTTI_SHM_SLOT_BYTES", "262144", "131072", 1, "a host"}}) {
    SCOPED_TRACE(c.var);
    std::vector<std::string> errors;
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<int> codes = run_env_children(
        3,
        [&](int r) {
          return Env{{"RANK", std::to_string(r)}, {"WORLD_SIZE", "3"}, {c.var, r == c.odd_rank ? c.odd : c.usual}};
        },
        true, &errors);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
    EXPECT_EQ(codes, std::vector<int>(3, 4));
    ASSERT_EQ(errors.size(), 3u);
    for (int r = 0; r < 3; ++r) {
      const std::string& e = errors[static_cast<std::size_t>(r)];
      EXPECT_NE(e.find(std::string("InvalidArgument: ranks disagree on ") + c.var + ": '"), std::string::npos) << e;
      EXPECT_NE(e.find(std::string("(every rank of ") + c.scope + " must use the same value)"), std::string::npos) << e;
      // Each names the odd rank and its value, or (the odd rank) its own.
      const std::string odd = std::string("'") + c.odd + "' on rank " + std::to_string(c.odd_rank);
      EXPECT_NE(e.find(odd), std::string::npos) << e;
    }
  }
  // Settings that may differ (the sender alone decides to stripe) do not stop the job.
  EXPECT_EQ(run_env_children(3,
                             [](int r) {
                               return Env{{"RANK", std::to_string(r)},
                                          {"WORLD_SIZE", "3"},
                                          {"TUTTI_SOCKET_STRIPE_BYTES", r == 1 ? "64K" : "1M"}};
                             }),
            std::vector<int>(3, 0));
}

// Every connection proves it holds the job secret: a rank with another one
// fails with Unauthenticated naming the side it tried, the others refuse it
// (and say so in their log) and time out naming it; none waits longer.
TEST(Init, ARankWithAnotherSecretIsRefusedByThePeers) {
  ::setenv("TUTTI_ADVERTISE_ADDR", "127.0.0.1", 1);
  auto store = make_memory_store();
  std::vector<std::optional<Error>> errors(2);
  ::testing::internal::CaptureStderr();
  std::vector<std::thread> ts;
  auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < 2; ++r) {
    ts.emplace_back([&, r] {
      InitOptions o;
      o.rank = r;
      o.world_size = 2;
      o.store = store;  // the store is shared (a memory store); the peer links need the secret
      o.timeout = std::chrono::milliseconds(1500);
      o.job_secret = r == 0 ? "the secret" : "another secret";
      try {
        init(o);
      } catch (const Error& e) {
        errors[r] = e;
      }
    });
  }
  for (auto& t : ts) t.join();
  std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  ASSERT_TRUE(errors[0] && errors[1]);
  // Each rank connects to the other at init (every rank to its
  // neighbours). The first to read the other's answer finds that it does
  // not know the secret (Unauthenticated) and gives up; the other then
  // finds the same, or, when the first has already closed its side, that
  // it is gone (PeerLost). Either way each names the other.
  int unauthenticated = 0;
  for (int r = 0; r < 2; ++r) {
    const Error& e = *errors[r];
    const std::string other = "rank " + std::to_string(1 - r) + " (127.0.0.1:";
    EXPECT_TRUE(e.kind() == ErrorKind::Unauthenticated || e.kind() == ErrorKind::PeerLost) << what_of(e);
    EXPECT_NE(e.message().find(other), std::string::npos) << e.message();
    if (e.kind() != ErrorKind::Unauthenticated) continue;
    ++unauthenticated;
    EXPECT_NE(e.message().find("init: rank " + std::to_string(r) + " connecting to " + other), std::string::npos)
        << e.message();
    EXPECT_NE(e.message().find("does not know this job's secret"), std::string::npos) << e.message();
  }
  EXPECT_GE(unauthenticated, 1);
  // (Each side finds the other's answer wrong and closes first, so the
  // accepting side may be gone before it could log its refusal.)
  (void)log;
}

// Through the environment, as tuttirun passes it: the same TUTTI_JOB_SECRET
// everywhere works; a rank with another is refused by the store.
TEST(Init, JobSecretFromTheEnvironment) {
  using Env = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(
      run_env_children(2,
                       [](int r) {
                         return Env{{"RANK", std::to_string(r)}, {"WORLD_SIZE", "2"}, {"TUTTI_JOB_SECRET", "s3cr3t"}};
                       }),
      std::vector<int>(2, 0));
  // Rank 1 holds another secret: it fails Unauthenticated (6) at once; rank 0 times out (5).
  EXPECT_EQ(run_env_children(2,
                             [](int r) {
                               return Env{{"RANK", std::to_string(r)},
                                          {"WORLD_SIZE", "2"},
                                          {"TUTTI_TIMEOUT", "1"},
                                          {"TUTTI_JOB_SECRET", r == 0 ? "s3cr3t" : "guess"}};
                             }),
            (std::vector<int>{5, 6}));
}

// TUTTI_TCP_CONGESTION reaches every peer connection, striped data
// connections included, and nothing else (the store's connections keep the
// kernel's default).
TEST(Init, PeerConnectionsGetTheCongestionControlAsked) {
  detail::Fd probe(::socket(AF_INET, SOCK_STREAM, 0));
  const std::string system = detail::congestion_of(probe.get());
  ASSERT_FALSE(system.empty());
  // Always built in, and allowed to every process; else cubic.
  const std::string want = system == "reno" ? "cubic" : "reno";
  for (const char* per_peer : {"1", "2"}) {
    SpawnOptions o;
    o.env = {{"TUTTI_TCP_CONGESTION", want}, {"TUTTI_TRANSPORT", "tcp"}, {"TUTTI_SOCKETS_PER_PEER", per_peer}};
    spawn(
        3,
        [&](Communicator& comm) {
          // Connections are made on first use: an all_to_all makes every one
          // (the data connections follow the first within moments).
          std::vector<float> a(3 * 1000, 1.f), b(3 * 1000);
          comm.all_to_all(a.data(), b.data(), 1000, DataType::Float32);
          const int per = std::string(per_peer) == "1" ? 1 : 3;  // the header connection and two data connections
          int asked = 0, other = 0;
          for (const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);;) {
            asked = other = 0;
            for (int fd = 0; fd < 4096; ++fd) {
              sockaddr_storage peer{};
              socklen_t len = sizeof peer;
              if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0) continue;  // not connected
              const std::string cc = detail::congestion_of(fd);
              if (cc.empty()) continue;  // not TCP
              (cc == want ? asked : other) += 1;
              EXPECT_TRUE(cc == want || cc == system) << cc;
            }
            if (asked >= per * (comm.size() - 1) || std::chrono::steady_clock::now() > until) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
          }
          // (Nobody closes a connection before all have counted: the
          // all_reduce below needs every rank.)
          EXPECT_EQ(asked, per * (comm.size() - 1));
          EXPECT_GE(other, 1);  // the store connection
          CaseInfo c;
          c.id = 61000;
          c.dtype = DataType::Float32;
          c.count = 300000;  // striped when there are data connections
          c.op = ReduceOpKind::Sum;
          check_all_reduce(comm, c);
        },
        o);
  }
}

// TUTTI_ALGO forces an algorithm outside its default range, and it still works.
class AlgoOverride : public ::testing::TestWithParam<int> {};

TEST_P(AlgoOverride, RingForSmallAndRecursiveDoublingForLarge) {
  for (const char* algo : {"all_reduce:ring", "all_reduce:recursive_doubling"}) {
    SpawnOptions o;
    o.env = {{"TUTTI_ALGO", algo}, {"TUTTI_CHUNK_BYTES", "128"}};
    spawn(
        GetParam(),
        [](Communicator& comm) {
          std::uint64_t id = 50000;
          for (std::size_t count : {1, 3, 7, 100, 5000}) {
            for (DataType dt : {DataType::Float32, DataType::Int16, DataType::BFloat16}) {
              CaseInfo c;
              c.id = ++id;
              c.dtype = dt;
              c.count = count;
              c.op = ReduceOpKind::Sum;
              check_all_reduce(comm, c);
              c.op = ReduceOpKind::Max;
              c.inplace = true;
              check_all_reduce(comm, c);
            }
          }
        },
        o);
  }
}

INSTANTIATE_TEST_SUITE_P(World, AlgoOverride, ::testing::Values(2, 3, 5, 8),
                         [](const ::testing::TestParamInfo<int>& p) { return "n" + std::to_string(p.param); });

}  // namespace
}  // namespace tutti::testing
