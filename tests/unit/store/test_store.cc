// Tests of the key-value stores (memory, file, TCP, prefix) and of the TCP
// store's wire protocol, including a server facing misbehaving clients.

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <thread>

#include "common/errors.h"
#include "net/auth.h"
#include "net/socket.h"
#include "store/store_protocol.h"
#include "tutti/error.h"
#include "tutti/store.h"

namespace {

using namespace std::chrono_literals;
using tutti::Bytes;
using tutti::Error;
using tutti::ErrorKind;
using tutti::Store;
using tutti::detail::Clock;

// Random data, seeded per test run; the seed is printed so a failure can be replayed
// with TUTTI_TEST_SEED.
std::uint64_t test_seed() {
  static const std::uint64_t seed = [] {
    const char* s = std::getenv("TUTTI_TEST_SEED");
    std::uint64_t v = s ? std::strtoull(s, nullptr, 10) : std::random_device{}();
    std::printf("test_store: TUTTI_TEST_SEED=%llu\n", static_cast<unsigned long long>(v));
    return v;
  }();
  return seed;
}

std::mt19937_64& rng() {
  static std::atomic<std::uint64_t> stream{0};
  thread_local std::mt19937_64 r(test_seed() + 7919 * stream.fetch_add(1));
  return r;
}

std::uint64_t rand_u64() { return rng()(); }

std::string random_key(const std::string& tag = "k") {
  char buf[40];
  std::snprintf(buf, sizeof buf, "-%016llx", static_cast<unsigned long long>(rand_u64()));
  return tag + buf;
}

Bytes random_bytes(std::size_t n) {
  Bytes b(n);
  for (auto& x : b) x = static_cast<std::uint8_t>(rand_u64());  // includes zero bytes
  return b;
}

using tutti::testing::expect_error;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

// ---- every store kind -------------------------------------------------------

enum class Kind { Memory, File, Tcp, PrefixMemory };

std::string kind_name(const ::testing::TestParamInfo<Kind>& info) {
  switch (info.param) {
    case Kind::Memory:
      return "Memory";
    case Kind::File:
      return "File";
    case Kind::Tcp:
      return "Tcp";
    case Kind::PrefixMemory:
      return "PrefixMemory";
  }
  return "Unknown";
}

class StoreTest : public ::testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    switch (GetParam()) {
      case Kind::Memory:
      case Kind::PrefixMemory:
        base_ = tutti::make_memory_store();
        break;
      case Kind::File:
        path_ = (std::filesystem::temp_directory_path() / ("tutti-store-test-" + random_key("f"))).string();
        break;
      case Kind::Tcp:
        server_ = std::make_unique<tutti::TcpStoreServer>("127.0.0.1", 0);
        break;
    }
    store_ = open();
  }
  void TearDown() override {
    if (!path_.empty()) std::filesystem::remove(path_);
  }

  // Another handle on the same store, as another process would have. (The
  // memory store has only one handle, whose timeout SetUp set: set_timeout is
  // not safe while other threads use the store.)
  std::shared_ptr<Store> open() {
    std::shared_ptr<Store> s;
    switch (GetParam()) {
      case Kind::Memory:
        if (store_) return store_;
        s = base_;
        break;
      case Kind::File:
        s = tutti::make_file_store(path_);
        break;
      case Kind::Tcp:
        s = tutti::make_tcp_store_client("127.0.0.1", server_->port(), 2s);
        break;
      case Kind::PrefixMemory:
        s = tutti::make_prefix_store("pfx", base_);
        break;
    }
    s->set_timeout(2s);
    return s;
  }

  std::shared_ptr<Store> base_;
  std::string path_;
  std::unique_ptr<tutti::TcpStoreServer> server_;
  std::shared_ptr<Store> store_;
};

TEST_P(StoreTest, SetGetRoundTripsRandomValues) {
  std::vector<std::pair<std::string, Bytes>> kvs;
  for (int i = 0; i < 20; ++i) kvs.emplace_back(random_key(), random_bytes(rand_u64() % 300));
  kvs.emplace_back(random_key("empty"), Bytes{});
  kvs.emplace_back(random_key("big"), random_bytes(256 << 10));
  for (const auto& [k, v] : kvs) store_->set(k, v);
  auto other = open();
  for (const auto& [k, v] : kvs) {
    EXPECT_EQ(store_->get(k), v) << k;
    EXPECT_EQ(other->get(k), v) << k;
  }
  // Overwrite, and the string helpers.
  std::string k = kvs[0].first, s = "value-" + random_key();
  store_->set(k, s);
  EXPECT_EQ(other->get_string(k), s);
}

TEST_P(StoreTest, GetBlocksUntilAnotherThreadSetsTheKey) {
  std::string key = random_key();
  Bytes value = random_bytes(1 + rand_u64() % 64);
  auto other = open();
  auto t0 = Clock::now();
  std::thread setter([&] {
    std::this_thread::sleep_for(50ms);
    other->set(key, value);
  });
  Bytes got = store_->get(key);
  setter.join();
  EXPECT_EQ(got, value);
  EXPECT_GE(ms_since(t0), 40);
}

TEST_P(StoreTest, GetTimesOutNamingTheKey) {
  std::string key = random_key("absent");
  store_->set_timeout(100ms);
  auto t0 = Clock::now();
  Error e = expect_error([&] { store_->get(key); });
  double ms = ms_since(t0);
  EXPECT_EQ(e.kind(), ErrorKind::Timeout) << e.what();
  EXPECT_NE(e.message().find(key), std::string::npos) << e.message();
  EXPECT_GE(ms, 90);
  EXPECT_LT(ms, 1500);
}

TEST_P(StoreTest, MultiGetReturnsEveryValueInKeyOrder) {
  std::vector<std::string> keys;
  std::vector<Bytes> values;
  for (int i = 0; i < 40; ++i) {
    keys.push_back(random_key("m" + std::to_string(i)));
    values.push_back(random_bytes(rand_u64() % 300));  // some empty
    store_->set(keys.back(), values.back());
  }
  // Another connection reads them, in an order of its own, one key twice.
  std::vector<std::string> asked = keys;
  std::shuffle(asked.begin(), asked.end(), rng());
  asked.push_back(keys[7]);
  auto other = open();
  std::vector<Bytes> got = other->multi_get(asked);
  ASSERT_EQ(got.size(), asked.size());
  for (std::size_t i = 0; i < asked.size(); ++i) {
    auto at = static_cast<std::size_t>(std::find(keys.begin(), keys.end(), asked[i]) - keys.begin());
    EXPECT_EQ(got[i], values[at]) << asked[i];
  }
  EXPECT_TRUE(other->multi_get({}).empty());
}

TEST_P(StoreTest, MultiGetWaitsForTheLastKey) {
  std::vector<std::string> keys = {random_key("a"), random_key("b"), random_key("c")};
  Bytes late = random_bytes(17);
  store_->set(keys[0], "x");
  store_->set(keys[2], "z");
  auto other = open();
  std::thread setter([&] {
    std::this_thread::sleep_for(50ms);
    other->set(keys[1], late);
  });
  auto t0 = Clock::now();
  std::vector<Bytes> got = store_->multi_get(keys);
  double ms = ms_since(t0);
  setter.join();
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0], Bytes({'x'}));
  EXPECT_EQ(got[1], late);
  EXPECT_EQ(got[2], Bytes({'z'}));
  EXPECT_GE(ms, 40);
}

TEST_P(StoreTest, MultiGetTimesOutNamingOnlyTheMissingKeys) {
  std::string present = random_key("present"), missing = random_key("missing");
  store_->set(present, random_bytes(3));
  store_->set_timeout(100ms);
  auto t0 = Clock::now();
  Error e = expect_error([&] { store_->multi_get({present, missing}); });
  double ms = ms_since(t0);
  EXPECT_EQ(e.kind(), ErrorKind::Timeout) << e.what();
  EXPECT_NE(e.message().find(missing), std::string::npos) << e.message();
  EXPECT_EQ(e.message().find(present), std::string::npos) << e.message();
  EXPECT_GE(ms, 90);
  EXPECT_LT(ms, 1500);
}

TEST_P(StoreTest, WaitReturnsWhenEveryKeyAppears) {
  std::vector<std::string> keys = {random_key("a"), random_key("b"), random_key("c")};
  store_->set(keys[0], "x");
  auto other = open();
  std::thread setter([&] {
    std::this_thread::sleep_for(20ms);
    other->set(keys[1], random_bytes(5));
    std::this_thread::sleep_for(20ms);
    other->set(keys[2], random_bytes(5));
  });
  store_->wait(keys, 2000ms);
  setter.join();
  EXPECT_TRUE(store_->check(keys));
  store_->wait({}, 0ms);  // nothing to wait for
}

TEST_P(StoreTest, WaitTimesOutNamingOnlyTheMissingKeys) {
  std::string present = random_key("present"), missing = random_key("missing");
  store_->set(present, random_bytes(3));
  auto t0 = Clock::now();
  Error e = expect_error([&] { store_->wait({present, missing}, 100ms); });
  EXPECT_GE(ms_since(t0), 90);
  EXPECT_EQ(e.kind(), ErrorKind::Timeout) << e.what();
  EXPECT_NE(e.message().find(missing), std::string::npos) << e.message();
  EXPECT_EQ(e.message().find(present), std::string::npos) << e.message();
  // The overload without a timeout uses the store's.
  store_->set_timeout(50ms);
  Error e2 = expect_error([&] { store_->wait({missing}); });
  EXPECT_EQ(e2.kind(), ErrorKind::Timeout);
  // A zero timeout answers at once.
  EXPECT_EQ(expect_error([&] { store_->wait({missing}, 0ms); }).kind(), ErrorKind::Timeout);
}

TEST_P(StoreTest, ConcurrentAddsSumExactly) {
  std::string key = random_key("counter");
  constexpr int kThreads = 4, kAdds = 100;
  std::vector<std::vector<std::int64_t>> deltas(kThreads);
  std::int64_t expected = 0;
  for (auto& d : deltas)
    for (int i = 0; i < kAdds; ++i) {
      d.push_back(static_cast<std::int64_t>(rand_u64() % 2001) - 1000);
      expected += d.back();
    }
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t, handle = open()] {
      for (std::int64_t d : deltas[t]) handle->add(key, d);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(store_->add(key, 0), expected);
  EXPECT_EQ(store_->get_string(key), std::to_string(expected));
  // Missing counts as 0.
  std::string fresh = random_key();
  EXPECT_EQ(store_->add(fresh, -7), -7);
  // A value that is not an integer is refused, naming the key.
  std::string text = random_key("text");
  store_->set(text, "not a number");
  Error e = expect_error([&] { store_->add(text, 1); });
  EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
  EXPECT_NE(e.message().find(text), std::string::npos) << e.message();
  EXPECT_EQ(store_->get_string(text), "not a number");
}

TEST_P(StoreTest, CompareSetFollowsPyTorchSemantics) {
  std::string key = random_key();
  Bytes v1 = random_bytes(8), v2 = random_bytes(9), v3 = random_bytes(10);
  // Missing key, non-empty expected: nothing stored, `expected` returned.
  EXPECT_EQ(store_->compare_set(key, v1, v2), v1);
  EXPECT_FALSE(store_->check({key}));
  // Missing key, empty expected: stored.
  EXPECT_EQ(store_->compare_set(key, {}, v1), v1);
  EXPECT_EQ(store_->get(key), v1);
  // Present, matching: swapped.
  EXPECT_EQ(store_->compare_set(key, v1, v2), v2);
  EXPECT_EQ(store_->get(key), v2);
  // Present, not matching: unchanged, current value returned.
  EXPECT_EQ(store_->compare_set(key, v1, v3), v2);
  EXPECT_EQ(store_->get(key), v2);
  // A compare_set that creates the key wakes a blocked get.
  std::string key2 = random_key();
  auto other = open();
  std::thread t([&] {
    std::this_thread::sleep_for(20ms);
    other->compare_set(key2, {}, v3);
  });
  EXPECT_EQ(store_->get(key2), v3);
  t.join();
}

TEST_P(StoreTest, DeleteKey) {
  std::string key = random_key();
  store_->set(key, random_bytes(4));
  EXPECT_TRUE(store_->check({key}));
  EXPECT_TRUE(store_->delete_key(key));
  EXPECT_FALSE(store_->check({key}));
  EXPECT_FALSE(store_->delete_key(key));
  store_->set_timeout(50ms);
  EXPECT_EQ(expect_error([&] { store_->get(key); }).kind(), ErrorKind::Timeout);
  Bytes again = random_bytes(6);
  store_->set(key, again);
  store_->set_timeout(2s);
  EXPECT_EQ(open()->get(key), again);
}

TEST_P(StoreTest, NumKeysAndCheck) {
  std::int64_t n0 = store_->num_keys();
  std::vector<std::string> keys;
  for (int i = 0; i < 5; ++i) {
    keys.push_back(random_key());
    store_->set(keys.back(), random_bytes(rand_u64() % 10));
  }
  EXPECT_EQ(store_->num_keys(), n0 + 5);
  store_->set(keys[0], random_bytes(3));  // overwriting adds no key
  EXPECT_EQ(open()->num_keys(), n0 + 5);
  EXPECT_TRUE(store_->delete_key(keys[1]));
  EXPECT_EQ(store_->num_keys(), n0 + 4);
  EXPECT_TRUE(store_->check({}));
  EXPECT_TRUE(store_->check({keys[0], keys[2]}));
  EXPECT_FALSE(store_->check({keys[0], keys[1]}));
}

TEST_P(StoreTest, ManyWaitersAreAllWoken) {
  constexpr int kWaiters = 6;
  std::vector<std::string> keys;
  for (int i = 0; i < kWaiters; ++i) keys.push_back(random_key());
  std::vector<Bytes> got(kWaiters);
  std::vector<std::thread> threads;
  for (int i = 0; i < kWaiters; ++i)
    threads.emplace_back([&, i, handle = open()] {
      handle->wait({keys[i], keys[(i + 1) % kWaiters]});
      got[i] = handle->get(keys[i]);
    });
  std::this_thread::sleep_for(20ms);
  for (int i = 0; i < kWaiters; ++i) store_->set(keys[i], std::to_string(i));
  for (auto& t : threads) t.join();
  for (int i = 0; i < kWaiters; ++i) EXPECT_EQ(std::string(got[i].begin(), got[i].end()), std::to_string(i));
}

INSTANTIATE_TEST_SUITE_P(AllKinds, StoreTest,
                         ::testing::Values(Kind::Memory, Kind::File, Kind::Tcp, Kind::PrefixMemory), kind_name);

// ---- kind-specific ------------------------------------------------------------

TEST(PrefixStoreTest, KeysAreNamespaced) {
  auto base = tutti::make_memory_store();
  auto a = tutti::make_prefix_store("a", base), b = tutti::make_prefix_store("b", base);
  std::string key = random_key();
  a->set(key, "1");
  EXPECT_FALSE(b->check({key}));
  EXPECT_TRUE(base->check({"a/" + key}));
  EXPECT_EQ(base->get_string("a/" + key), "1");
  // Its own timeout applies, and the message names the prefixed key.
  b->set_timeout(50ms);
  Error e = expect_error([&] { b->get(key); });
  EXPECT_EQ(e.kind(), ErrorKind::Timeout);
  EXPECT_NE(e.message().find("b/" + key), std::string::npos) << e.message();
  EXPECT_EQ(expect_error([] { tutti::make_prefix_store("x", nullptr); }).kind(), ErrorKind::InvalidArgument);
}

TEST(FileStoreTest, StateSurvivesReopeningAndTornRecords) {
  std::string path = (std::filesystem::temp_directory_path() / ("tutti-store-test-" + random_key("f"))).string();
  std::string key = random_key();
  Bytes v = random_bytes(100);
  {
    auto s = tutti::make_file_store(path);
    s->set(key, v);
    s->add("n", 5);
  }
  {
    // A writer that died mid-record leaves a torn tail; it must not hide later records.
    FILE* f = std::fopen(path.c_str(), "ab");
    ASSERT_NE(f, nullptr);
    unsigned char torn[] = {0xA1, 3, 0, 0};
    std::fwrite(torn, 1, sizeof torn, f);
    std::fclose(f);
  }
  auto s = tutti::make_file_store(path);
  EXPECT_EQ(s->get(key), v);
  EXPECT_EQ(s->add("n", 1), 6);
  EXPECT_EQ(tutti::make_file_store(path)->get_string("n"), "6");
  std::filesystem::remove(path);
  EXPECT_EQ(expect_error([] { tutti::make_file_store("/nonexistent-dir-tutti/x"); }).kind(),
            ErrorKind::InvalidArgument);
}

// ---- the TCP server against raw and misbehaving clients ------------------------

using tutti::detail::DecodeStatus;
using tutti::detail::StoreFrame;
using tutti::detail::StoreOp;
using tutti::detail::StoreStatus;

void put_le(Bytes& b, std::uint64_t v, int n) {
  for (int i = 0; i < n; ++i) b.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

// A frame header with arbitrary (possibly lying) counts.
Bytes raw_header(std::uint32_t magic, std::uint8_t op, std::uint32_t nkeys, std::uint32_t nvalues, std::int64_t arg) {
  Bytes b;
  put_le(b, magic, 4);
  b.push_back(op);
  put_le(b, 0, 3);
  put_le(b, nkeys, 4);
  put_le(b, nvalues, 4);
  put_le(b, static_cast<std::uint64_t>(arg), 8);
  return b;
}

StoreFrame frame(StoreOp op, std::vector<std::string> keys, std::vector<Bytes> values = {}, std::int64_t arg = 0) {
  StoreFrame f;
  f.code = static_cast<std::uint8_t>(op);
  f.keys = std::move(keys);
  f.values = std::move(values);
  f.arg = arg;
  return f;
}

class TcpStoreServerTest : public ::testing::Test {
 protected:
  // A connection that has proved it knows the secret, then speaks raw bytes.
  tutti::detail::Fd raw_connect() {
    auto fd = raw_connect_unauthenticated();
    tutti::detail::authenticate_to_server(fd.get(), secret_, tutti::detail::AuthRole::Store, Clock::now() + 2s,
                                          "test server");
    return fd;
  }
  tutti::detail::Fd raw_connect_unauthenticated() {
    return tutti::detail::connect_tcp(tutti::detail::resolve("127.0.0.1", server_.port()), Clock::now() + 2s);
  }
  static void send_bytes(int fd, const Bytes& b) {
    tutti::detail::write_full(fd, b.data(), b.size(), Clock::now() + 2s, "test server");
  }
  static StoreFrame read_reply(int fd) {
    Bytes buf(tutti::detail::kStoreHeaderBytes);
    tutti::detail::read_full(fd, buf.data(), buf.size(), Clock::now() + 2s, "test server");
    StoreFrame rep;
    while (true) {
      auto r = tutti::detail::decode_store_frame(buf.data(), buf.size(), tutti::detail::kStoreReplyMagic, &rep);
      if (r.status == DecodeStatus::Complete) return rep;
      EXPECT_EQ(r.status, DecodeStatus::NeedMore) << r.error;
      if (r.status != DecodeStatus::NeedMore) return rep;
      std::size_t old = buf.size();
      buf.resize(r.size);
      tutti::detail::read_full(fd, buf.data() + old, buf.size() - old, Clock::now() + 2s, "test server");
    }
  }
  // True when the server closes the connection within 2 s.
  static bool closed_by_server(int fd) {
    auto deadline = Clock::now() + 2s;
    char buf[4096];
    while (Clock::now() < deadline) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) return true;  // EOF, or a reset when our bytes were left unread
    }
    return false;
  }
  // Real ops through a fresh client, proving the server still serves.
  void expect_healthy() {
    auto c = tutti::make_tcp_store_client("127.0.0.1", server_.port(), 2s, secret_);
    std::string key = random_key("healthy");
    Bytes v = random_bytes(1 + rand_u64() % 100);
    c->set(key, v);
    EXPECT_EQ(client_->get(key), v);
    EXPECT_EQ(client_->add(random_key(), 3), 3);
    EXPECT_GT(client_->num_keys(), 0);
  }

  const std::string secret_ = "secret-" + std::to_string(rand_u64());
  tutti::TcpStoreServer server_{"127.0.0.1", 0, secret_};
  std::shared_ptr<Store> client_ = tutti::make_tcp_store_client("127.0.0.1", server_.port(), 2s, secret_);
};

TEST_F(TcpStoreServerTest, TwoClientsShareOneServer) {
  auto other = tutti::make_tcp_store_client("localhost", server_.port(), 2s, secret_);
  std::string key = random_key();
  Bytes v = random_bytes(50);
  client_->set(key, v);
  EXPECT_EQ(other->get(key), v);
  EXPECT_EQ(other->add(key + "n", 2) + client_->add(key + "n", 3), 2 + 5);
  EXPECT_GT(server_.port(), 0);
}

TEST_F(TcpStoreServerTest, GarbageBytesDisconnectOnlyThatClient) {
  auto fd = raw_connect();
  Bytes junk = random_bytes(64 + rand_u64() % 1000);
  junk[0] = static_cast<std::uint8_t>(~tutti::detail::kStoreRequestMagic);  // never a valid magic
  send_bytes(fd.get(), junk);
  EXPECT_TRUE(closed_by_server(fd.get()));
  expect_healthy();
  // The same before authenticating.
  auto early = raw_connect_unauthenticated();
  junk[0] = static_cast<std::uint8_t>(~tutti::detail::kAuthHelloMagic);
  send_bytes(early.get(), junk);
  EXPECT_TRUE(closed_by_server(early.get()));
  expect_healthy();
}

// ---- job-secret authentication ----------------------------------------------------

TEST(StoreAuthTest, WrongOrMissingSecretIsUnauthenticatedAndNamesTheServer) {
  tutti::TcpStoreServer server("127.0.0.1", 0, "right secret");
  const std::string where = "127.0.0.1:" + std::to_string(server.port());
  for (const std::string secret : {"wrong secret", "right secre", ""}) {
    Error e =
        tutti::testing::expect_error([&] { tutti::make_tcp_store_client("127.0.0.1", server.port(), 2s, secret); });
    EXPECT_EQ(e.kind(), ErrorKind::Unauthenticated) << tutti::testing::what_of(e);
    EXPECT_NE(e.message().find("store server " + where + " does not know this job's secret"), std::string::npos)
        << e.message();
    EXPECT_EQ(e.message().find("TUTTI_JOB_SECRET is not set in this process") != std::string::npos, secret.empty())
        << e.message();
  }
  auto good = tutti::make_tcp_store_client("127.0.0.1", server.port(), 2s, "right secret");
  good->set("k", "v");
  EXPECT_EQ(good->get_string("k"), "v");
}

TEST_F(TcpStoreServerTest, StrangersAreRefusedLoggedAndNeverServed) {
  std::string key = random_key("stranger");
  Bytes set_req = tutti::detail::encode_store_frame(tutti::detail::kStoreRequestMagic,
                                                    frame(StoreOp::Set, {key}, {random_bytes(10)}));
  auto hello_of = [](tutti::detail::AuthRole role) {
    tutti::detail::Nonce n{};
    auto h = tutti::detail::auth_client_hello(role, &n);
    return Bytes(h.begin(), h.end());
  };
  struct Case {
    const char* name;
    std::function<void(int)> act;
    const char* logged;  // what the server's warning says
  };
  std::vector<Case> cases = {
      {"a store request without the handshake", [&](int fd) { send_bytes(fd, set_req); },
       "did not start with an authentication hello"},
      {"a random proof",
       [&](int fd) {
         send_bytes(fd, hello_of(tutti::detail::AuthRole::Store));
         Bytes answer(tutti::detail::kAuthAnswerBytes);
         tutti::detail::read_full(fd, answer.data(), answer.size(), Clock::now() + 2s, "server");
         Bytes wire = random_bytes(tutti::detail::kAuthProofBytes);
         wire.insert(wire.end(), set_req.begin(), set_req.end());
         send_bytes(fd, wire);
       },
       "failed the job-secret check"},
      {"the server's own answer replayed as the proof",
       [&](int fd) {
         send_bytes(fd, hello_of(tutti::detail::AuthRole::Store));
         Bytes answer(tutti::detail::kAuthAnswerBytes);
         tutti::detail::read_full(fd, answer.data(), answer.size(), Clock::now() + 2s, "server");
         send_bytes(fd, Bytes(answer.end() - tutti::detail::kAuthProofBytes, answer.end()));
         send_bytes(fd, set_req);
       },
       "failed the job-secret check"},
      {"a rank's hello", [&](int fd) { send_bytes(fd, hello_of(tutti::detail::AuthRole::Peer)); },
       "is a rank but connected to the port of a store server"},
      {"a hello and data before the answer",
       [&](int fd) {
         Bytes wire = hello_of(tutti::detail::AuthRole::Store);
         wire.insert(wire.end(), set_req.begin(), set_req.end());
         send_bytes(fd, wire);
       },
       "sent data before the server's answer"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto fd = raw_connect_unauthenticated();
    const std::string who = tutti::detail::local_address(fd.get()).to_string();
    ::testing::internal::CaptureStderr();
    c.act(fd.get());
    bool closed = closed_by_server(fd.get());
    std::this_thread::sleep_for(20ms);  // the warning is written before the close, by the server's thread
    std::string log = ::testing::internal::GetCapturedStderr();
    EXPECT_TRUE(closed);
    const std::size_t line = log.find("disconnecting client " + who + ": refused: it ");
    EXPECT_NE(line, std::string::npos) << log;
    EXPECT_NE(log.find(c.logged, line), std::string::npos) << log;
    expect_healthy();
  }
  EXPECT_FALSE(client_->check({key}));  // no stranger's set was applied
}

TEST_F(TcpStoreServerTest, TruncatedFrameIsNeverApplied) {
  std::string key = random_key();
  Bytes wire = tutti::detail::encode_store_frame(tutti::detail::kStoreRequestMagic,
                                                 frame(StoreOp::Set, {key}, {random_bytes(100)}));
  wire.resize(wire.size() - 1 - rand_u64() % 50);
  {
    auto stalled = raw_connect();  // sends part of a frame, then stalls
    send_bytes(stalled.get(), wire);
    expect_healthy();
    auto quitter = raw_connect();  // sends part of a frame, then leaves
    send_bytes(quitter.get(), wire);
  }
  expect_healthy();
  EXPECT_FALSE(client_->check({key}));
}

TEST_F(TcpStoreServerTest, OversizedLengthsDisconnectWithoutAllocating) {
  std::string key = random_key();
  // A 2^40-byte value length, after a valid key.
  Bytes huge_value = raw_header(tutti::detail::kStoreRequestMagic, 1, 1, 1, 0);
  put_le(huge_value, key.size(), 4);
  huge_value.insert(huge_value.end(), key.begin(), key.end());
  put_le(huge_value, std::uint64_t{1} << 40, 8);
  Bytes huge_key = raw_header(tutti::detail::kStoreRequestMagic, 2, 1, 0, 100);
  put_le(huge_key, 0xffffffffu, 4);
  Bytes many_keys = raw_header(tutti::detail::kStoreRequestMagic, 5, 65537, 0, 100);
  Bytes bad_shape = tutti::detail::encode_store_frame(tutti::detail::kStoreRequestMagic, frame(StoreOp::Set, {key}));
  Bytes bad_op = tutti::detail::encode_store_frame(tutti::detail::kStoreRequestMagic, frame(StoreOp(99), {}));
  for (const Bytes& wire : {huge_value, huge_key, many_keys, bad_shape, bad_op}) {
    auto fd = raw_connect();
    send_bytes(fd.get(), wire);
    EXPECT_TRUE(closed_by_server(fd.get()));
    expect_healthy();
  }
  EXPECT_FALSE(client_->check({key}));
}

TEST_F(TcpStoreServerTest, SilentClientDoesNotBlockOthers) {
  auto silent = raw_connect();
  auto silent_before_hello = raw_connect_unauthenticated();
  auto half_hello = raw_connect_unauthenticated();
  send_bytes(half_hello.get(), random_bytes(tutti::detail::kAuthHelloBytes / 2));
  expect_healthy();
  std::string key = random_key();
  std::thread t([&] {
    std::this_thread::sleep_for(20ms);
    client_->set(key, "v");
  });
  auto c = tutti::make_tcp_store_client("127.0.0.1", server_.port(), 2s, secret_);
  EXPECT_EQ(c->get_string(key), "v");
  t.join();
}

TEST_F(TcpStoreServerTest, ParkedRequestOfADepartedClientIsCleanedUp) {
  std::string key = random_key();
  {
    auto fd = raw_connect();
    send_bytes(fd.get(), tutti::detail::encode_store_frame(tutti::detail::kStoreRequestMagic,
                                                           frame(StoreOp::Get, {key}, {}, 10000)));
    send_bytes(fd.get(), tutti::detail::encode_store_frame(tutti::detail::kStoreRequestMagic,
                                                           frame(StoreOp::Wait, {key, key + "x"}, {}, 10000)));
  }
  std::this_thread::sleep_for(20ms);
  client_->set(key, "v");
  client_->set(key + "x", "v");
  expect_healthy();
}

TEST_F(TcpStoreServerTest, PipelinedRequestsAreAnsweredInOrder) {
  auto fd = raw_connect();
  std::string key = random_key();
  Bytes v = random_bytes(30), wire;
  auto enc = [&](const StoreFrame& f) {
    tutti::detail::encode_store_frame(tutti::detail::kStoreRequestMagic, f, wire);
  };
  enc(frame(StoreOp::Get, {key}, {}, 5000));  // parks until the next client sets it
  enc(frame(StoreOp::Add, {key + "n"}, {}, 4));
  enc(frame(StoreOp::Get, {key + "never"}, {}, 30));  // answered TIMEOUT by the server
  enc(frame(StoreOp::NumKeys, {}));
  send_bytes(fd.get(), wire);
  std::this_thread::sleep_for(20ms);
  client_->set(key, v);
  StoreFrame r1 = read_reply(fd.get()), r2 = read_reply(fd.get()), r3 = read_reply(fd.get()), r4 = read_reply(fd.get());
  ASSERT_EQ(r1.values.size(), 1u);
  EXPECT_EQ(r1.values[0], v);
  EXPECT_EQ(r2.arg, 4);
  EXPECT_EQ(r3.code, static_cast<std::uint8_t>(StoreStatus::Timeout));
  EXPECT_EQ(r3.keys, std::vector<std::string>{key + "never"});
  EXPECT_EQ(r4.arg, 2);
}

TEST_F(TcpStoreServerTest, ClientThatDoesNotReadDoesNotStallOthers) {
  std::string key = random_key();
  Bytes v = random_bytes(512 << 10);
  client_->set(key, v);
  auto fd = raw_connect();
  Bytes wire;
  constexpr int kGets = 20;  // ~10 MiB of replies, more than the socket buffers hold
  for (int i = 0; i < kGets; ++i)
    tutti::detail::encode_store_frame(tutti::detail::kStoreRequestMagic, frame(StoreOp::Get, {key}, {}, 1000), wire);
  send_bytes(fd.get(), wire);
  std::this_thread::sleep_for(20ms);
  expect_healthy();
  for (int i = 0; i < kGets; ++i) {
    StoreFrame r = read_reply(fd.get());
    ASSERT_EQ(r.values.size(), 1u);
    EXPECT_EQ(r.values[0], v);
  }
}

TEST_F(TcpStoreServerTest, WaitRechecksKeysDeletedMeanwhile) {
  std::string a = random_key("a"), b = random_key("b");
  auto waiter = tutti::make_tcp_store_client("127.0.0.1", server_.port(), 2s, secret_);
  std::atomic<bool> done{false};
  std::thread t([&] {
    waiter->wait({a, b}, 2000ms);
    done = true;
  });
  std::this_thread::sleep_for(20ms);
  client_->set(a, "1");
  EXPECT_TRUE(client_->delete_key(a));
  client_->set(b, "1");  // b is there, but a is gone again
  std::this_thread::sleep_for(30ms);
  EXPECT_FALSE(done.load());
  client_->set(a, "2");
  t.join();
  EXPECT_TRUE(done.load());
}

TEST_F(TcpStoreServerTest, ServerAnswersTimeoutsItself) {
  client_->set_timeout(150ms);
  auto t0 = Clock::now();
  std::string key = random_key();
  Error e = expect_error([&] { client_->get(key); });
  // Well before the client's own deadline (timeout + margin): the server answered.
  EXPECT_LT(ms_since(t0), 1000);
  EXPECT_EQ(e.kind(), ErrorKind::Timeout);
  EXPECT_NE(e.message().find(key), std::string::npos) << e.message();
  EXPECT_NE(e.message().find("127.0.0.1:" + std::to_string(server_.port())), std::string::npos) << e.message();
  client_->set(key, "late");  // the connection is still in step
  EXPECT_EQ(client_->get_string(key), "late");
}

TEST(TcpStoreTest, ServerShutdownIsPeerLostNamingTheAddress) {
  auto server = std::make_unique<tutti::TcpStoreServer>("", 0);
  int port = server->port();
  auto client = tutti::make_tcp_store_client("127.0.0.1", port, 2s);
  client->set("k", "v");
  std::thread killer([&] {
    std::this_thread::sleep_for(30ms);
    server.reset();  // while the client is parked in a get
  });
  Error e = expect_error([&] { client->get("missing"); });
  killer.join();
  EXPECT_EQ(e.kind(), ErrorKind::PeerLost) << e.what();
  EXPECT_NE(e.message().find(":" + std::to_string(port)), std::string::npos) << e.message();
  EXPECT_EQ(expect_error([&] { client->num_keys(); }).kind(), ErrorKind::PeerLost);
  // Nobody listens there now: connecting gives up at the timeout.
  Error c = expect_error([&] { tutti::make_tcp_store_client("127.0.0.1", port, 100ms); });
  EXPECT_EQ(c.kind(), ErrorKind::Timeout) << c.what();
  EXPECT_NE(c.message().find(":" + std::to_string(port)), std::string::npos) << c.message();
}

// ---- the wire protocol, without sockets -----------------------------------------

StoreFrame random_frame() {
  StoreFrame f;
  f.code = static_cast<std::uint8_t>(rand_u64());
  f.arg = static_cast<std::int64_t>(rand_u64());
  for (std::uint64_t i = 0, n = rand_u64() % 5; i < n; ++i) {
    Bytes k = random_bytes(rand_u64() % 40);
    f.keys.emplace_back(k.begin(), k.end());
  }
  for (std::uint64_t i = 0, n = rand_u64() % 3; i < n; ++i) f.values.push_back(random_bytes(rand_u64() % 100));
  return f;
}

TEST(StoreProtocolTest, RoundTripsAndMeasuresEveryPrefix) {
  using tutti::detail::decode_store_frame;
  constexpr auto kMagic = tutti::detail::kStoreRequestMagic;
  for (int iter = 0; iter < 200; ++iter) {
    StoreFrame f = random_frame(), g = random_frame();
    Bytes wire = tutti::detail::encode_store_frame(kMagic, f);
    std::size_t first = wire.size();
    tutti::detail::encode_store_frame(kMagic, g, wire);  // two frames back to back
    StoreFrame out;
    auto r = decode_store_frame(wire.data(), wire.size(), kMagic, &out);
    ASSERT_EQ(r.status, DecodeStatus::Complete) << r.error;
    EXPECT_EQ(r.size, first);
    EXPECT_EQ(out.code, f.code);
    EXPECT_EQ(out.arg, f.arg);
    EXPECT_EQ(out.keys, f.keys);
    EXPECT_EQ(out.values, f.values);
    for (std::size_t len = 0; len < first; ++len) {
      auto p = decode_store_frame(wire.data(), len, kMagic, nullptr);
      ASSERT_EQ(p.status, DecodeStatus::NeedMore) << len;
      EXPECT_GT(p.size, len);
      EXPECT_LE(p.size, first);
    }
    EXPECT_EQ(decode_store_frame(wire.data(), first, tutti::detail::kStoreReplyMagic, nullptr).status,
              DecodeStatus::Invalid);
  }
}

TEST(StoreProtocolTest, RejectsBrokenLimitsFromTheHeaderAlone) {
  using tutti::detail::decode_store_frame;
  constexpr auto kMagic = tutti::detail::kStoreRequestMagic;
  auto status = [&](const Bytes& b) { return decode_store_frame(b.data(), b.size(), kMagic, nullptr).status; };
  Bytes value40 = raw_header(kMagic, 1, 0, 1, 0);
  put_le(value40, std::uint64_t{1} << 40, 8);
  EXPECT_EQ(status(value40), DecodeStatus::Invalid);
  Bytes key4097 = raw_header(kMagic, 1, 1, 0, 0);
  put_le(key4097, 4097, 4);
  EXPECT_EQ(status(key4097), DecodeStatus::Invalid);
  EXPECT_EQ(status(raw_header(kMagic, 5, 65537, 0, 0)), DecodeStatus::Invalid);
  EXPECT_EQ(status(raw_header(kMagic, 4, 1, 3, 0)), DecodeStatus::Invalid);
  // A reply may carry a value per key (multi_get), and no more.
  auto reply_status = [&](const Bytes& b) {
    return decode_store_frame(b.data(), b.size(), tutti::detail::kStoreReplyMagic, nullptr).status;
  };
  EXPECT_EQ(reply_status(raw_header(tutti::detail::kStoreReplyMagic, 0, 0, 3, 0)), DecodeStatus::NeedMore);
  EXPECT_EQ(reply_status(raw_header(tutti::detail::kStoreReplyMagic, 0, 0, 65536, 0)), DecodeStatus::NeedMore);
  EXPECT_EQ(reply_status(raw_header(tutti::detail::kStoreReplyMagic, 0, 0, 65537, 0)), DecodeStatus::Invalid);
  EXPECT_EQ(status(raw_header(kMagic, 5, 65536, 0, 0)), DecodeStatus::NeedMore);
  Bytes reserved = raw_header(kMagic, 1, 0, 0, 0);
  reserved[6] = 1;
  EXPECT_EQ(status(reserved), DecodeStatus::Invalid);
  // Many maximal keys add up past the frame limit: refused before buffering more.
  constexpr std::size_t kKeys = tutti::detail::kStoreMaxFrameBytes / (4 + 4096) + 1;
  Bytes wide = raw_header(kMagic, 5, kKeys, 0, 0);
  wide.resize(tutti::detail::kStoreHeaderBytes + kKeys * (4 + 4096));
  for (std::size_t i = 0; i < kKeys; ++i) wide[tutti::detail::kStoreHeaderBytes + i * (4 + 4096) + 1] = 0x10;
  EXPECT_EQ(status(wide), DecodeStatus::Invalid);
  // Encoding refuses what decoding would refuse.
  EXPECT_EQ(expect_error([] {
              tutti::detail::encode_store_frame(kMagic, frame(StoreOp::Get, {std::string(4097, 'k')}));
            }).kind(),
            ErrorKind::InvalidArgument);
}

TEST(StoreProtocolTest, SurvivesRandomAndMutatedInput) {
  constexpr auto kMagic = tutti::detail::kStoreRequestMagic;
  for (int iter = 0; iter < 3000; ++iter) {
    Bytes b = iter % 2 ? random_bytes(rand_u64() % 120) : tutti::detail::encode_store_frame(kMagic, random_frame());
    if (iter % 2 == 0)
      for (std::uint64_t m = 0, n = 1 + rand_u64() % 4; m < n && !b.empty(); ++m)
        b[rand_u64() % b.size()] = static_cast<std::uint8_t>(rand_u64());
    StoreFrame out;
    auto r = tutti::detail::decode_store_frame(b.data(), b.size(), kMagic, &out);
    if (r.status == DecodeStatus::Complete) {
      EXPECT_LE(r.size, b.size());
      (void)tutti::detail::validate_store_request(out);
    } else if (r.status == DecodeStatus::NeedMore) {
      EXPECT_GT(r.size, b.size());
      EXPECT_LE(r.size, tutti::detail::kStoreMaxFrameBytes);
    }
  }
}

TEST(StoreProtocolTest, TakesRequestsOffAStreamInPieces) {
  using tutti::detail::take_store_request;
  constexpr auto kMagic = tutti::detail::kStoreRequestMagic;
  Bytes wire;
  tutti::detail::encode_store_frame(kMagic, frame(StoreOp::Set, {"a"}, {Bytes{1, 2, 3}}), wire);
  tutti::detail::encode_store_frame(kMagic, frame(StoreOp::Get, {"b"}, {}, 10), wire);
  tutti::detail::encode_store_frame(kMagic, frame(StoreOp::NumKeys, {}), wire);
  for (std::size_t piece : {std::size_t{1}, std::size_t{7}, std::size_t{24}, wire.size()}) {
    Bytes in;
    std::uint64_t need = 0;
    std::vector<StoreFrame> got;
    for (std::size_t off = 0; off < wire.size(); off += piece) {
      in.insert(in.end(), wire.begin() + off, wire.begin() + std::min(wire.size(), off + piece));
      while (true) {
        StoreFrame req;
        auto r = take_store_request(in, need, &req);
        ASSERT_NE(r.status, DecodeStatus::Invalid) << r.error;
        if (r.status == DecodeStatus::NeedMore) {
          EXPECT_GT(need, in.size());
          break;
        }
        got.push_back(req);
      }
    }
    ASSERT_EQ(got.size(), 3u) << piece;
    EXPECT_EQ(got[0].keys, std::vector<std::string>{"a"});
    EXPECT_EQ(got[1].arg, 10);
    EXPECT_EQ(got[2].code, static_cast<std::uint8_t>(StoreOp::NumKeys));
    EXPECT_TRUE(in.empty());
  }
  // A well-framed request of the wrong shape is the end of the stream.
  Bytes in = tutti::detail::encode_store_frame(kMagic, frame(StoreOp::Set, {"k"}));
  std::uint64_t need = 0;
  StoreFrame req;
  auto r = take_store_request(in, need, &req);
  EXPECT_EQ(r.status, DecodeStatus::Invalid);
  EXPECT_NE(r.error.find("set request with 1 keys and 0 values"), std::string::npos) << r.error;
}

TEST(StoreProtocolTest, ExecutesRequestsLikeTheServer) {
  using tutti::detail::execute_store_request;
  tutti::detail::KeyValueMap kv;
  auto run = [&](StoreFrame req) { return execute_store_request(kv, req); };
  auto ok = static_cast<std::uint8_t>(tutti::detail::StoreStatus::Ok);
  auto got = run(frame(StoreOp::Get, {"k"}, {}, 5));
  EXPECT_TRUE(got.park);
  EXPECT_EQ(got.missing, std::vector<std::string>{"k"});
  auto set = run(frame(StoreOp::Set, {"k"}, {Bytes{'7'}}));
  EXPECT_FALSE(set.park);
  EXPECT_TRUE(set.changed);
  EXPECT_EQ(set.reply.code, ok);
  got = run(frame(StoreOp::Get, {"k"}, {}, 5));
  ASSERT_FALSE(got.park);
  EXPECT_EQ(got.reply.values, std::vector<Bytes>{Bytes{'7'}});
  auto add = run(frame(StoreOp::Add, {"k"}, {}, 3));
  EXPECT_EQ(add.reply.arg, 10);
  EXPECT_TRUE(add.changed);
  run(frame(StoreOp::Set, {"s"}, {Bytes{'x'}}));
  auto bad_add = run(frame(StoreOp::Add, {"s"}, {}, 1));
  EXPECT_EQ(bad_add.reply.code, static_cast<std::uint8_t>(tutti::detail::StoreStatus::Error));
  EXPECT_EQ(bad_add.reply.arg, static_cast<std::int64_t>(ErrorKind::InvalidArgument));
  EXPECT_FALSE(bad_add.changed);
  auto cas = run(frame(StoreOp::CompareSet, {"s"}, {Bytes{'y'}, Bytes{'z'}}));
  EXPECT_FALSE(cas.changed);
  EXPECT_EQ(cas.reply.values, std::vector<Bytes>{Bytes{'x'}});
  auto wait = run(frame(StoreOp::Wait, {"k", "m", "s", "n"}, {}, 5));
  EXPECT_TRUE(wait.park);
  EXPECT_EQ(wait.missing, (std::vector<std::string>{"m", "n"}));
  EXPECT_EQ(run(frame(StoreOp::Check, {"k", "s"})).reply.arg, 1);
  EXPECT_EQ(run(frame(StoreOp::DeleteKey, {"k"})).reply.arg, 1);
  EXPECT_EQ(run(frame(StoreOp::DeleteKey, {"k"})).reply.arg, 0);
  EXPECT_EQ(run(frame(StoreOp::NumKeys, {})).reply.arg, 1);
  auto multi = run(frame(StoreOp::MultiGet, {"s", "k", "s"}, {}, 5));
  EXPECT_TRUE(multi.park);
  EXPECT_EQ(multi.missing, std::vector<std::string>{"k"});
  run(frame(StoreOp::Set, {"k"}, {Bytes{}}));
  multi = run(frame(StoreOp::MultiGet, {"s", "k", "s"}, {}, 5));
  ASSERT_FALSE(multi.park);
  EXPECT_EQ(multi.reply.code, ok);
  EXPECT_EQ(multi.reply.values, (std::vector<Bytes>{Bytes{'x'}, Bytes{}, Bytes{'x'}}));
}

// A multi_get whose values would not fit in one reply is refused, naming the
// limit, instead of sending a frame the client must reject.
TEST(StoreProtocolTest, MultiGetRepliesWithinTheFrameLimit) {
  tutti::detail::KeyValueMap kv;
  const std::size_t big = tutti::detail::kStoreMaxValueBytes;  // 64 MiB; three exceed 160 MiB
  std::vector<std::string> keys = {"a", "b", "c"};
  for (const auto& k : keys) kv[k] = Bytes(big, static_cast<std::uint8_t>(k[0]));
  StoreFrame rep = tutti::detail::store_values_reply(kv, keys);
  EXPECT_EQ(rep.code, static_cast<std::uint8_t>(tutti::detail::StoreStatus::Error));
  EXPECT_EQ(rep.arg, static_cast<std::int64_t>(ErrorKind::InvalidArgument));
  ASSERT_EQ(rep.values.size(), 1u);
  std::string msg(rep.values[0].begin(), rep.values[0].end());
  EXPECT_CONTAINS(msg, "multi_get of 3 keys");
  EXPECT_CONTAINS(msg, "more than the limit of one reply");
  rep = tutti::detail::store_values_reply(kv, {"a", "b"});  // 128 MiB fits
  ASSERT_EQ(rep.code, static_cast<std::uint8_t>(tutti::detail::StoreStatus::Ok));
  ASSERT_EQ(rep.values.size(), 2u);
  EXPECT_EQ(rep.values[1], kv["b"]);
  // And the reply of 4,096 small values decodes whole.
  tutti::detail::KeyValueMap small;
  std::vector<std::string> many;
  for (int i = 0; i < 4096; ++i) {
    many.push_back("addr/" + std::to_string(i));
    small[many.back()] = random_bytes(1 + rand_u64() % 40);
  }
  rep = tutti::detail::store_values_reply(small, many);
  Bytes wire = tutti::detail::encode_store_frame(tutti::detail::kStoreReplyMagic, rep);
  StoreFrame back;
  auto r = tutti::detail::decode_store_frame(wire.data(), wire.size(), tutti::detail::kStoreReplyMagic, &back);
  ASSERT_EQ(r.status, DecodeStatus::Complete) << r.error;
  ASSERT_EQ(back.values.size(), many.size());
  for (std::size_t i = 0; i < many.size(); ++i) EXPECT_EQ(back.values[i], small[many[i]]) << many[i];
}

TEST(StoreProtocolTest, ValidatesRequestShapes) {
  using tutti::detail::validate_store_request;
  EXPECT_EQ(validate_store_request(frame(StoreOp::Set, {"k"}, {Bytes{1}})), "");
  EXPECT_NE(validate_store_request(frame(StoreOp::Set, {"k"})), "");
  EXPECT_NE(validate_store_request(frame(StoreOp::Get, {"k"}, {}, -1)), "");
  EXPECT_EQ(validate_store_request(frame(StoreOp::Wait, {"a", "b"}, {}, 5)), "");
  EXPECT_EQ(validate_store_request(frame(StoreOp::MultiGet, {"a", "b"}, {}, 5)), "");
  EXPECT_NE(validate_store_request(frame(StoreOp::MultiGet, {}, {}, 5)), "");
  EXPECT_NE(validate_store_request(frame(StoreOp::MultiGet, {"a"}, {Bytes{1}}, 5)), "");
  EXPECT_NE(validate_store_request(frame(StoreOp::MultiGet, {"a"}, {}, -1)), "");
  EXPECT_NE(validate_store_request(frame(StoreOp::CompareSet, {"k"}, {Bytes{}})), "");
  EXPECT_NE(validate_store_request(frame(StoreOp::NumKeys, {"k"})), "");
  EXPECT_NE(validate_store_request(frame(StoreOp(0), {})), "");
  std::int64_t v = 0;
  EXPECT_TRUE(tutti::detail::parse_decimal(tutti::detail::format_decimal(-42), &v));
  EXPECT_EQ(v, -42);
  for (const char* bad : {"", "1x", " 1", "99999999999999999999"}) {
    std::string s = bad;
    EXPECT_FALSE(tutti::detail::parse_decimal(Bytes(s.begin(), s.end()), &v)) << s;
  }
}

}  // namespace
