// A view of another store in which every key is prefixed with `prefix/`, so
// that independent users (communicators, retries of a rendezvous) of one
// store cannot collide.

#include "tutti/error.h"
#include "tutti/store.h"

namespace tutti {
namespace {

class PrefixStore final : public Store {
 public:
  using Store::set;
  using Store::wait;

  PrefixStore(const std::string& prefix, std::shared_ptr<Store> base) : prefix_(prefix + "/"), base_(std::move(base)) {
    set_timeout(base_->timeout());
  }

  void set(const std::string& key, const Bytes& value) override { base_->set(k(key), value); }

  Bytes get(const std::string& key) override {
    // The base's get waits for the base's timeout; ours may differ (the
    // timeout is not virtual), so wait with ours first in that case.
    const std::chrono::milliseconds timeout = this->timeout();
    if (timeout != base_->timeout()) base_->wait({k(key)}, timeout);
    return base_->get(k(key));
  }

  std::vector<Bytes> multi_get(const std::vector<std::string>& keys) override {
    const std::chrono::milliseconds timeout = this->timeout();
    if (timeout != base_->timeout()) base_->wait(ks(keys), timeout);
    return base_->multi_get(ks(keys));
  }

  std::int64_t add(const std::string& key, std::int64_t delta) override { return base_->add(k(key), delta); }

  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    return base_->compare_set(k(key), expected, desired);
  }

  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    base_->wait(ks(keys), timeout);
  }

  bool check(const std::vector<std::string>& keys) override { return base_->check(ks(keys)); }

  bool delete_key(const std::string& key) override { return base_->delete_key(k(key)); }

  // Counts every key of the base store, as PyTorch's PrefixStore does: the
  // Store interface cannot list keys, so the prefix cannot be filtered on.
  std::int64_t num_keys() override { return base_->num_keys(); }

 private:
  std::string k(const std::string& key) const { return prefix_ + key; }
  std::vector<std::string> ks(const std::vector<std::string>& keys) const {
    std::vector<std::string> out;
    out.reserve(keys.size());
    for (const auto& key : keys) out.push_back(k(key));
    return out;
  }

  std::string prefix_;
  std::shared_ptr<Store> base_;
};

}  // namespace

std::shared_ptr<Store> make_prefix_store(const std::string& prefix, std::shared_ptr<Store> base) {
  if (!base) throw Error(ErrorKind::InvalidArgument, "make_prefix_store(\"" + prefix + "\"): the base store is null");
  return std::make_shared<PrefixStore>(prefix, std::move(base));
}

}  // namespace tutti
