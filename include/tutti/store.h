#pragma once
// Key-value stores used for rendezvous, and usable on their own.
//
// All stores are thread-safe. Values are byte strings. Every blocking call
// takes its deadline from the store's timeout (set_timeout) unless given one.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

// What the public headers declare is libtutti.so's interface: exported,
// while everything else in the library is hidden (-fvisibility=hidden).
#pragma GCC visibility push(default)

namespace tutti {

using Bytes = std::vector<std::uint8_t>;

class Store {
 public:
  virtual ~Store() = default;

  virtual void set(const std::string& key, const Bytes& value) = 0;
  // Waits (up to the store timeout) until `key` exists, then returns its value.
  // Throws Error(Timeout) naming the key.
  virtual Bytes get(const std::string& key) = 0;
  // Atomically adds `delta` to the integer stored at `key` (a decimal string;
  // missing counts as 0) and returns the new value.
  virtual std::int64_t add(const std::string& key, std::int64_t delta) = 0;
  // If the current value equals `expected` (or the key is missing and
  // `expected` is empty), stores `desired`. Returns the value now stored.
  // Semantics of PyTorch c10d TCPStore::compareSet, case by case:
  //  - key present, value == expected: stores desired, returns desired;
  //  - key present, value != expected: stores nothing, returns the value;
  //  - key missing, expected empty:    stores desired, returns desired;
  //  - key missing, expected non-empty: stores nothing and returns `expected`
  //    (the key stays missing; there is no "value now stored" to return).
  virtual Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) = 0;
  // Waits (up to the store timeout) until every key exists, then returns their
  // values in the order of `keys`; throws Error(Timeout) naming the missing
  // keys. One request to a TCP store however many keys (up to 65,536 a
  // request, and values that fit in one reply of 160 MiB), so that a rank can
  // read every other rank's record at once.
  virtual std::vector<Bytes> multi_get(const std::vector<std::string>& keys);
  // Waits until every key exists; throws Error(Timeout) naming the missing keys.
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout()); }
  // True when every key exists; does not wait.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Returns whether the key existed.
  virtual bool delete_key(const std::string& key) = 0;
  virtual std::int64_t num_keys() = 0;

  std::chrono::milliseconds timeout() const { return timeout_.load(std::memory_order_relaxed); }
  void set_timeout(std::chrono::milliseconds t) { timeout_.store(t, std::memory_order_relaxed); }

  // Convenience for string values.
  void set(const std::string& key, const std::string& value) { set(key, Bytes(value.begin(), value.end())); }
  std::string get_string(const std::string& key) {
    Bytes b = get(key);
    return std::string(b.begin(), b.end());
  }

 protected:
  // Atomic: threads that share one store (ranks as threads of a process) may
  // each set it while others read it.
  std::atomic<std::chrono::milliseconds> timeout_{std::chrono::minutes(5)};
};

// An in-process store (threads of one process).
std::shared_ptr<Store> make_memory_store();

// A store in a file that every participant can open (a shared file system).
// Uses flock(2) for atomicity. The file is created if missing.
std::shared_ptr<Store> make_file_store(const std::string& path);

// Prefixes every key with `prefix + "/"`; shares the underlying store.
std::shared_ptr<Store> make_prefix_store(const std::string& prefix, std::shared_ptr<Store> base);

// The job secret of this process: $TUTTI_JOB_SECRET, or "" when unset.
// Every TCP store and peer connection proves, by HMAC-SHA256 challenge and
// response, that both sides hold the same secret; the secret never crosses
// the wire. tuttirun generates one per job.
std::string job_secret_from_env();

// A TCP store server. It serves until destroyed, on its own thread.
class TcpStoreServer {
 public:
  // Listens on host:port; port 0 picks a free port (see port()).
  // host "" or "0.0.0.0" listens on every IPv4 address. Clients that do not
  // prove they hold `secret` are refused (and logged); the others are served.
  TcpStoreServer(const std::string& host, int port, const std::string& secret = job_secret_from_env());
  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;
  int port() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// A client of a TcpStoreServer. Connecting retries until `timeout`, which is
// also the store's initial timeout (see set_timeout). Throws Unauthenticated
// when the server does not hold `secret`.
std::shared_ptr<Store> make_tcp_store_client(const std::string& host, int port,
                                             std::chrono::milliseconds timeout = std::chrono::minutes(5),
                                             const std::string& secret = job_secret_from_env());

}  // namespace tutti

#pragma GCC visibility pop
