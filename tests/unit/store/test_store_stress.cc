// The TCP store under the load of a large job's rendezvous: 4,096 authenticated
// clients connected at once, each on its own thread, each doing set, add,
// wait, get and multi_get while all the others do. The server is one thread with one
// epoll set; every client must be served, every value must come back intact,
// and no request may stall.

#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "tutti/error.h"
#include "tutti/store.h"

namespace {

using namespace std::chrono_literals;
using tutti::Bytes;
using Clock = std::chrono::steady_clock;

constexpr int kClients = 4096;
// The longest any one request may take (a stall), and the whole test's bound.
constexpr auto kMaxRequest = 20s;
constexpr auto kClientTimeout = 120s;

// Raises the soft limit on open files to what `need` descriptors take; fails
// (never skips) where the hard limit is lower.
void raise_fd_limit(rlim_t need) {
  rlimit r{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &r), 0);
  if (r.rlim_cur >= need) return;
  ASSERT_TRUE(r.rlim_max == RLIM_INFINITY || r.rlim_max >= need)
      << "this test needs " << need << " open files; the hard limit is " << r.rlim_max;
  r.rlim_cur = need;
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &r), 0);
}

// The value client i stores: random bytes from the run's seed and i, so any
// client can tell what another one stored.
Bytes value_of(std::uint64_t seed, int i) {
  std::mt19937_64 g(seed * 1000003 + static_cast<std::uint64_t>(i));
  Bytes b(1 + g() % 200);
  for (auto& x : b) x = static_cast<std::uint8_t>(g());
  return b;
}

struct Shared {
  int port = 0;
  std::string secret;
  std::uint64_t seed = 0;
  std::atomic<int> connected{0};
  std::atomic<int> finished{0};
  std::atomic<long long> slowest_ns{0};
  std::mutex mu;
  std::vector<std::string> failures;  // under mu
  void fail(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu);
    if (failures.size() < 20) failures.push_back(what);
  }
};

struct Client {
  Shared* shared;
  int index;
};

// Times one request; a request slower than kMaxRequest is a stall. The
// slowest one that does not wait for other clients (all but `wait`) is
// reported.
template <typename F>
auto timed(Shared& s, int i, const char* what, F&& f) {
  auto t0 = Clock::now();
  auto done = [&] {
    long long ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
    long long prev = s.slowest_ns.load();
    while (std::string_view(what) != "wait" && ns > prev && !s.slowest_ns.compare_exchange_weak(prev, ns)) {
    }
    if (Clock::now() - t0 > kMaxRequest) s.fail("client " + std::to_string(i) + ": " + what + " stalled");
  };
  if constexpr (std::is_void_v<decltype(f())>) {
    f();
    done();
  } else {
    auto r = f();
    done();
    return r;
  }
}

void* run_client(void* arg) {
  auto* c = static_cast<Client*>(arg);
  Shared& s = *c->shared;
  const int i = c->index;
  try {
    auto store = tutti::make_tcp_store_client("127.0.0.1", s.port, kClientTimeout, s.secret);
    s.connected.fetch_add(1);
    const std::string mine = "stress/value/" + std::to_string(i);
    timed(s, i, "set", [&] { store->set(mine, value_of(s.seed, i)); });
    // Everyone's value is in once the counter reaches kClients; the client
    // that brings it there opens the gate the others wait at.
    std::int64_t n = timed(s, i, "add", [&] { return store->add("stress/count", 1); });
    if (n < 1 || n > kClients) s.fail("client " + std::to_string(i) + ": add returned " + std::to_string(n));
    if (n == kClients) timed(s, i, "set gate", [&] { store->set("stress/gate", std::string("open")); });
    // Every client parks a wait on the server until the gate opens.
    timed(s, i, "wait", [&] { store->wait({"stress/gate"}, kClientTimeout); });
    // Read three others' values (the next, a random one, the last) and check them whole.
    std::mt19937_64 g(s.seed + static_cast<std::uint64_t>(i));
    for (int j : {(i + 1) % kClients, static_cast<int>(g() % kClients), kClients - 1}) {
      Bytes got = timed(s, i, "get", [&] { return store->get("stress/value/" + std::to_string(j)); });
      if (got != value_of(s.seed, j))
        s.fail("client " + std::to_string(i) + ": value of client " + std::to_string(j) + " came back wrong");
    }
    // And 64 others' at once, in one request.
    std::vector<std::string> keys;
    std::vector<int> whose;
    for (int k = 0; k < 64; ++k) {
      whose.push_back(static_cast<int>(g() % kClients));
      keys.push_back("stress/value/" + std::to_string(whose.back()));
    }
    std::vector<Bytes> got = timed(s, i, "multi_get", [&] { return store->multi_get(keys); });
    for (std::size_t k = 0; k < keys.size(); ++k)
      if (k >= got.size() || got[k] != value_of(s.seed, whose[k]))
        s.fail("client " + std::to_string(i) + ": multi_get's value of client " + std::to_string(whose[k]) +
               " came back wrong");
    if (!timed(s, i, "check", [&] { return store->check({mine, "stress/gate"}); }))
      s.fail("client " + std::to_string(i) + ": check found its own key missing");
    timed(s, i, "add done", [&] { store->add("stress/done", 1); });
    s.finished.fetch_add(1);
  } catch (const tutti::Error& e) {
    s.fail("client " + std::to_string(i) + ": " + e.what());
  }
  return nullptr;
}

TEST(TcpStoreStressTest, FourThousandConcurrentAuthenticatedClients) {
  // Each client holds one socket, and the server one for each client.
  raise_fd_limit(2 * kClients + 256);
  Shared s;
  s.secret = "stress-" + std::to_string(std::random_device{}());
  const char* seed = std::getenv("TUTTI_TEST_SEED");
  s.seed = seed ? std::strtoull(seed, nullptr, 10) : std::random_device{}();
  std::printf("test_store_stress: TUTTI_TEST_SEED=%llu\n", static_cast<unsigned long long>(s.seed));
  tutti::TcpStoreServer server("127.0.0.1", 0, s.secret);
  s.port = server.port();

  const auto t0 = Clock::now();
  // Small stacks: 4,096 threads of the default 8 MiB would reserve 32 GiB.
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, 256 << 10), 0);
  std::vector<Client> clients(kClients);
  std::vector<pthread_t> threads;
  threads.reserve(kClients);
  int create_error = 0;
  for (int i = 0; i < kClients && create_error == 0; ++i) {
    clients[i] = {&s, i};
    pthread_t t;
    create_error = pthread_create(&t, &attr, run_client, &clients[i]);
    if (create_error == 0) threads.push_back(t);
  }
  pthread_attr_destroy(&attr);
  // Without every client the gate never opens: the others fail at their
  // wait's timeout, and are joined before the test fails.
  for (pthread_t t : threads) pthread_join(t, nullptr);
  ASSERT_EQ(create_error, 0) << "pthread_create of client " << threads.size() << " failed: " << create_error;
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();

  for (const auto& f : s.failures) ADD_FAILURE() << f;
  EXPECT_EQ(s.connected.load(), kClients);
  EXPECT_EQ(s.finished.load(), kClients);
  // The server's view agrees: one more client reads the counters.
  auto check = tutti::make_tcp_store_client("127.0.0.1", s.port, 10s, s.secret);
  EXPECT_EQ(check->add("stress/count", 0), kClients);
  EXPECT_EQ(check->add("stress/done", 0), kClients);
  // Every value, the gate and the two counters.
  EXPECT_EQ(check->num_keys(), kClients + 3);
  std::printf("test_store_stress: %d clients in %.2f s, slowest request (set, add, get, multi_get, check) %.1f ms\n",
              kClients, seconds, static_cast<double>(s.slowest_ns.load()) / 1e6);
}

}  // namespace
