// An in-process store: one map behind a mutex; blocked readers sleep on a
// condition variable that every key creation wakes.

#include <condition_variable>
#include <mutex>

#include "store/store_protocol.h"
#include "tutti/error.h"
#include "tutti/store.h"

namespace tutti {
namespace {

using detail::Clock;
using detail::KeyValueMap;

class MemoryStore final : public Store {
 public:
  using Store::set;
  using Store::wait;

  void set(const std::string& key, const Bytes& value) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      kv_[key] = value;
    }
    cv_.notify_all();
  }

  Bytes get(const std::string& key) override {
    std::unique_lock<std::mutex> lock(mu_);
    const std::chrono::milliseconds timeout = this->timeout();
    auto deadline = detail::store_deadline(Clock::now(), timeout.count());
    if (!cv_.wait_until(lock, deadline, [&] { return kv_.count(key) > 0; }))
      throw Error(ErrorKind::Timeout, "store get: Timed out after " + std::to_string(timeout.count()) +
                                          " ms waiting for key " + detail::quote_key(key) + " (memory store)");
    return kv_.at(key);
  }

  std::int64_t add(const std::string& key, std::int64_t delta) override {
    std::int64_t v = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      v = detail::apply_add(kv_, key, delta);
    }
    cv_.notify_all();
    return v;
  }

  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    bool stored = false;
    Bytes out;
    {
      std::lock_guard<std::mutex> lock(mu_);
      out = detail::apply_compare_set(kv_, key, expected, desired, &stored);
    }
    if (stored) cv_.notify_all();
    return out;
  }

  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    auto deadline = detail::store_deadline(Clock::now(), timeout.count());
    auto all_present = [&] {
      for (const auto& k : keys)
        if (!kv_.count(k)) return false;
      return true;
    };
    if (!cv_.wait_until(lock, deadline, all_present))
      throw Error(ErrorKind::Timeout, "store wait: Timed out after " + std::to_string(timeout.count()) +
                                          " ms; missing keys: " + detail::quote_keys(detail::missing_keys(kv_, keys)) +
                                          " (memory store)");
  }

  bool check(const std::vector<std::string>& keys) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& k : keys)
      if (!kv_.count(k)) return false;
    return true;
  }

  bool delete_key(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mu_);
    return kv_.erase(key) > 0;
  }

  std::int64_t num_keys() override {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<std::int64_t>(kv_.size());
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  KeyValueMap kv_;
};

}  // namespace

std::shared_ptr<Store> make_memory_store() { return std::make_shared<MemoryStore>(); }

}  // namespace tutti
