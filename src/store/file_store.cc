// A store in a file shared by several processes (a shared file system).
//
// The file is an append-only log of records; the state is the replay of the
// log. Every op takes flock(2) on the file (LOCK_EX to append, LOCK_SH to
// read), replays the records appended since this handle last looked, then
// acts. flock locks belong to the open file description, which threads of one
// process share, so a mutex serializes the threads of one handle as well.
//
// Record: u8 type (kSetRecord | kDeleteRecord), u32 key length, u64 value
// length, key, value (lengths in host byte order: little-endian on every host
// tutti supports). Blocking ops poll with short sleeps.

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

#include "common/log.h"
#include "store/store_protocol.h"
#include "tutti/error.h"
#include "tutti/store.h"

namespace tutti {
namespace {

using detail::Clock;
using detail::KeyValueMap;
using detail::TimePoint;

constexpr std::uint8_t kSetRecord = 0xA1;
constexpr std::uint8_t kDeleteRecord = 0xA2;
constexpr std::size_t kRecordHeader = 13;

class FileStore final : public Store {
 public:
  using Store::set;
  using Store::wait;

  explicit FileStore(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0)
      throw Error(ErrorKind::InvalidArgument, "cannot open file store '" + path_ + "': " + std::strerror(errno));
  }
  ~FileStore() override { ::close(fd_); }

  void set(const std::string& key, const Bytes& value) override {
    Locked l(this, LOCK_EX);
    append(kSetRecord, key, value);
  }

  Bytes get(const std::string& key) override {
    Bytes out;
    const std::chrono::milliseconds timeout = this->timeout();
    bool found = poll_until(timeout, [&] {
      auto it = kv_.find(key);
      if (it == kv_.end()) return false;
      out = it->second;
      return true;
    });
    if (found) return out;
    throw Error(ErrorKind::Timeout, "store get: Timed out after " + std::to_string(timeout.count()) +
                                        " ms waiting for key " + detail::quote_key(key) + " (file store '" + path_ +
                                        "')");
  }

  std::int64_t add(const std::string& key, std::int64_t delta) override {
    Locked l(this, LOCK_EX);
    KeyValueMap scratch;  // apply_add only touches `key`
    auto it = kv_.find(key);
    if (it != kv_.end()) scratch.emplace(key, it->second);
    std::int64_t v = detail::apply_add(scratch, key, delta);
    append(kSetRecord, key, scratch[key]);
    return v;
  }

  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    Locked l(this, LOCK_EX);
    KeyValueMap scratch;
    auto it = kv_.find(key);
    if (it != kv_.end()) scratch.emplace(key, it->second);
    bool stored = false;
    Bytes out = detail::apply_compare_set(scratch, key, expected, desired, &stored);
    if (stored) append(kSetRecord, key, desired);
    return out;
  }

  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    std::vector<std::string> missing;
    poll_until(timeout, [&] {
      missing = detail::missing_keys(kv_, keys);
      return missing.empty();
    });
    if (!missing.empty())
      throw Error(ErrorKind::Timeout, "store wait: Timed out after " + std::to_string(timeout.count()) +
                                          " ms; missing keys: " + detail::quote_keys(missing) + " (file store '" +
                                          path_ + "')");
  }

  bool check(const std::vector<std::string>& keys) override {
    Locked l(this, LOCK_SH);
    return detail::missing_keys(kv_, keys).empty();
  }

  bool delete_key(const std::string& key) override {
    Locked l(this, LOCK_EX);
    if (!kv_.count(key)) return false;
    append(kDeleteRecord, key, {});
    return true;
  }

  std::int64_t num_keys() override {
    Locked l(this, LOCK_SH);
    return static_cast<std::int64_t>(kv_.size());
  }

 private:
  // Holds the handle's mutex and the file lock, with the state replayed.
  class Locked {
   public:
    Locked(FileStore* s, int how) : s_(s), lock_(s->mu_) {
      while (::flock(s_->fd_, how) != 0) {
        if (errno != EINTR)
          throw Error(ErrorKind::Internal, "flock on file store '" + s_->path_ + "': " + std::strerror(errno));
      }
      try {
        s_->replay(how == LOCK_EX);
      } catch (...) {
        ::flock(s_->fd_, LOCK_UN);
        throw;
      }
    }
    ~Locked() { ::flock(s_->fd_, LOCK_UN); }
    Locked(const Locked&) = delete;
    Locked& operator=(const Locked&) = delete;

   private:
    FileStore* s_;
    std::lock_guard<std::mutex> lock_;
  };

  // Checks `ready` (under the locks) until it holds (true) or `timeout`
  // passes (false).
  template <typename Ready>
  bool poll_until(std::chrono::milliseconds timeout, Ready ready) {
    TimePoint deadline = detail::store_deadline(Clock::now(), timeout.count());
    auto nap = std::chrono::milliseconds(1);
    while (true) {
      {
        Locked l(this, LOCK_SH);
        if (ready()) return true;
      }
      auto now = Clock::now();
      if (now >= deadline) return false;
      std::this_thread::sleep_for(std::min<Clock::duration>(nap, deadline - now));
      nap = std::min(nap * 2, std::chrono::milliseconds(10));
    }
  }

  // Applies the records appended since offset_. A torn record at the end (a
  // writer died mid-append) is cut off when we may write, so that later
  // records do not land behind garbage.
  void replay(bool writer) {
    struct stat st {};
    if (::fstat(fd_, &st) != 0)
      throw Error(ErrorKind::Internal, "fstat on file store '" + path_ + "': " + std::strerror(errno));
    auto size = static_cast<std::uint64_t>(st.st_size);
    if (size < offset_) {  // truncated behind our back: start over
      kv_.clear();
      offset_ = 0;
    }
    if (size == offset_) return;
    Bytes buf(size - offset_);
    std::size_t got = 0;
    while (got < buf.size()) {
      ssize_t n = ::pread(fd_, buf.data() + got, buf.size() - got, static_cast<off_t>(offset_ + got));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<std::size_t>(n);
    }
    std::size_t p = 0;
    while (p + kRecordHeader <= got) {
      std::uint8_t type = buf[p];
      std::uint32_t klen = 0;
      std::uint64_t vlen = 0;
      std::memcpy(&klen, &buf[p + 1], 4);
      std::memcpy(&vlen, &buf[p + 5], 8);
      if ((type != kSetRecord && type != kDeleteRecord) || klen > detail::kStoreMaxKeyBytes ||
          vlen > detail::kStoreMaxValueBytes)
        throw Error(ErrorKind::Internal, "file store '" + path_ + "' is corrupt at offset " +
                                             std::to_string(offset_ + p) + " (not a record written by tutti?)");
      if (p + kRecordHeader + klen + vlen > got) break;
      std::string key(reinterpret_cast<const char*>(&buf[p + kRecordHeader]), klen);
      auto* v = &buf[p + kRecordHeader + klen];
      if (type == kSetRecord)
        kv_[key] = Bytes(v, v + vlen);
      else
        kv_.erase(key);
      p += kRecordHeader + klen + vlen;
    }
    offset_ += p;
    if (p < got && writer) {
      TUTTI_LOG(Warn, "file store '" << path_ << "': dropping a torn record of " << (got - p) << " bytes at offset "
                                     << offset_);
      if (::ftruncate(fd_, static_cast<off_t>(offset_)) != 0)
        throw Error(ErrorKind::Internal, "ftruncate on file store '" + path_ + "': " + std::strerror(errno));
    }
  }

  // Appends a record (caller holds LOCK_EX and has replayed to the end).
  void append(std::uint8_t type, const std::string& key, const Bytes& value) {
    if (key.size() > detail::kStoreMaxKeyBytes || value.size() > detail::kStoreMaxValueBytes)
      throw Error(ErrorKind::InvalidArgument, "file store key " + detail::quote_key(key) + " or its value of " +
                                                  std::to_string(value.size()) + " bytes is over the size limit");
    Bytes rec(kRecordHeader);
    rec[0] = type;
    auto klen = static_cast<std::uint32_t>(key.size());
    std::uint64_t vlen = value.size();
    std::memcpy(&rec[1], &klen, 4);
    std::memcpy(&rec[5], &vlen, 8);
    rec.insert(rec.end(), key.begin(), key.end());
    rec.insert(rec.end(), value.begin(), value.end());
    std::size_t done = 0;
    while (done < rec.size()) {
      ssize_t n = ::write(fd_, rec.data() + done, rec.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw Error(ErrorKind::Internal, "write to file store '" + path_ + "': " + std::strerror(errno));
      done += static_cast<std::size_t>(n);
    }
    offset_ += rec.size();
    if (type == kSetRecord)
      kv_[key] = value;
    else
      kv_.erase(key);
  }

  std::string path_;
  int fd_ = -1;
  std::mutex mu_;
  KeyValueMap kv_;            // the replayed state, valid up to offset_
  std::uint64_t offset_ = 0;  // bytes of the log replayed so far
};

}  // namespace

std::shared_ptr<Store> make_file_store(const std::string& path) { return std::make_shared<FileStore>(path); }

}  // namespace tutti
