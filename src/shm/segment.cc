#include "shm/segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include "common/log.h"
#include "common/process.h"
#include "tutti/error.h"

namespace tutti::detail {

namespace {
// The longest sleep of a member waiting for member 0 (see the waits below):
// 10 ms, longer in large groups, whose waiters together would otherwise look
// thousands of times a second (50 us a member: 51 ms for 1,024).
std::chrono::microseconds nap_max(int size) { return std::chrono::microseconds(std::max(10000, 50 * size)); }

// A member's wait for member 0 to `step` ("create", "initialize") segment
// `name`: polls done() (true: ready), sleeping from `nap` doubling up to
// nap_max. A creator that died may have left the name behind, half made, and
// nobody else would take it away: a member that gives up (deadline, abort)
// unlinks it if the creator is gone, and one that finds the creator gone
// unlinks it and fails with PeerLost.
template <class Done>
void wait_for_creator(const std::string& name, const char* step, const char* timeout_note, int size,
                      std::chrono::microseconds nap, TimePoint deadline, const std::atomic<bool>* abort_flag,
                      int creator_pid, const std::string& creator, Done done) {
  const auto max_nap = nap_max(size);
  const auto creator_gone = [&] {
    if (!process_gone(creator_pid)) return false;
    ::shm_unlink(name.c_str());
    return true;
  };
  const std::string what = std::string(step) + " shared memory segment " + name;
  while (!done()) {
    if (Clock::now() >= deadline) {
      creator_gone();
      throw Error(ErrorKind::Timeout, "Timed out waiting for rank 0 to " + what + timeout_note);
    }
    if (abort_flag && abort_flag->load()) {
      creator_gone();
      throw Error(ErrorKind::Aborted, "aborted while waiting for rank 0 to " + what);
    }
    if (nap >= max_nap && creator_gone())
      throw Error(ErrorKind::PeerLost, creator + " (pid " + std::to_string(creator_pid) + ") exited before it " + step +
                                           "d shared memory segment " + name);
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, max_nap);
  }
}
}  // namespace
namespace {

constexpr std::uint64_t kMagic = 0x314d485349545554ull;  // "TUTISHM1"

struct Header {
  std::uint64_t magic;
  std::uint32_t size;
  std::int32_t creator;  // member 0's pid
  std::uint64_t layout;
  std::atomic<std::uint32_t> ready;
  std::atomic<std::uint32_t> mapped;
  SharedSegment::Failure failure;
};
static_assert(sizeof(Header) <= SharedSegment::kHeaderBytes);

}  // namespace

SharedSegment::SharedSegment(const std::string& name, int rank, int size, std::size_t bytes, std::uint64_t layout,
                             TimePoint deadline, const std::atomic<bool>* abort_flag, bool reserve, int creator_pid,
                             const std::string& creator)
    : name_(name), size_(size), bytes_(bytes) {
  int fd = -1;
  if (rank == 0) {
    fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) throw Error(ErrorKind::Internal, "shm_open(" + name + ") failed: " + std::strerror(errno));
    if (::ftruncate(fd, static_cast<off_t>(bytes_)) != 0) {
      int err = errno;
      ::close(fd);
      ::shm_unlink(name.c_str());
      throw Error(ErrorKind::Internal, "cannot size shared memory segment " + name + " to " + std::to_string(bytes_) +
                                           " bytes: " + std::strerror(err));
    }
    if (reserve) {
      if (const int err = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes_)); err != 0) {
        ::close(fd);
        ::shm_unlink(name.c_str());
        throw Error(ErrorKind::Internal, "cannot reserve " + std::to_string(bytes_) +
                                             " bytes of shared memory for segment " + name + ": " + std::strerror(err) +
                                             (err == ENOSPC ? " (is /dev/shm large enough?)" : ""));
      }
    }
  } else {
    // Member 0 creates it; wait for the name and its final size, looking
    // less and less often (200 us doubling to 10 ms): hundreds of members
    // looking every 200 us would take the CPUs from the one that creates it.
    wait_for_creator(name, "create", ": rank 0 did not take part in this operation", size,
                     std::chrono::microseconds(200), deadline, abort_flag, creator_pid, creator, [&] {
                       fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
                       if (fd < 0) return false;
                       struct stat st {};
                       const bool sized = ::fstat(fd, &st) == 0 && st.st_size != 0;
                       if (sized && static_cast<std::size_t>(st.st_size) == bytes_) return true;
                       ::close(fd);
                       fd = -1;
                       if (sized)
                         throw Error(ErrorKind::Mismatch,
                                     "shared memory segment " + name + " has " + std::to_string(st.st_size) +
                                         " bytes, this rank expects " + std::to_string(bytes_) +
                                         " (ranks disagree on the group or the TUTTI_SHM_* settings)");
                       return false;
                     });
  }
  void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) {
    if (rank == 0) ::shm_unlink(name.c_str());
    throw Error(ErrorKind::Internal, "mmap of " + std::to_string(bytes_) + " bytes failed: " + std::strerror(errno));
  }
  base_ = static_cast<char*>(p);
  auto* h = reinterpret_cast<Header*>(base_);
  // The destructor does not run for a constructor that throws: unmap here.
  struct UnmapOnThrow {
    SharedSegment* s;
    bool armed = true;
    ~UnmapOnThrow() {
      if (armed) {
        ::munmap(s->base_, s->bytes_);
        s->base_ = nullptr;
      }
    }
  } guard{this};
  if (rank == 0) {
    h->magic = kMagic;
    h->size = static_cast<std::uint32_t>(size);
    h->creator = static_cast<std::int32_t>(::getpid());
    h->layout = layout;
    h->ready.store(1, std::memory_order_release);
  } else {
    // A creator killed between sizing the segment and marking it ready
    // leaves it half made: whoever gives up on it takes the name away.
    wait_for_creator(name, "initialize", "", size, std::chrono::microseconds(100), deadline, abort_flag, creator_pid,
                     creator, [&] { return h->ready.load(std::memory_order_acquire) == 1; });
    if (h->magic != kMagic || h->size != static_cast<std::uint32_t>(size) || h->layout != layout)
      throw Error(ErrorKind::Mismatch,
                  "shared memory segment " + name +
                      " has another layout (ranks disagree on the group or the TUTTI_SHM_* settings)");
  }
  guard.armed = false;
  // The last member to map the segment removes its name: from here on the
  // memory lives exactly as long as the mappings.
  if (h->mapped.fetch_add(1) + 1 == static_cast<std::uint32_t>(size)) ::shm_unlink(name.c_str());
  TUTTI_LOG(Debug, "mapped shared memory segment " << name << ": " << bytes_ << " bytes for " << size << " ranks");
}

int SharedSegment::remove_orphans(const std::string& name_prefix) {
  // shm_open's names live in /dev/shm (glibc), without the leading '/'.
  const std::string stem = name_prefix.empty() || name_prefix[0] != '/' ? name_prefix : name_prefix.substr(1);
  int removed = 0;
  DIR* dir = ::opendir("/dev/shm");
  if (!dir) return 0;
  while (const dirent* e = ::readdir(dir)) {
    const std::string file = e->d_name;
    if (file.compare(0, stem.size(), stem) != 0) continue;
    const std::string name = "/" + file;
    const int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) continue;
    struct stat st {};
    void* p = MAP_FAILED;
    if (::fstat(fd, &st) == 0 && static_cast<std::size_t>(st.st_size) >= kHeaderBytes)
      p = ::mmap(nullptr, kHeaderBytes, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) continue;
    const auto* h = static_cast<const Header*>(p);
    const bool orphan = h->magic == kMagic && h->ready.load(std::memory_order_acquire) == 1 && h->creator > 0 &&
                        h->mapped.load() < h->size && process_gone(h->creator);
    ::munmap(p, kHeaderBytes);
    if (orphan && ::shm_unlink(name.c_str()) == 0) {
      ++removed;
      TUTTI_LOG(Debug,
                "removed shared memory segment " << name << ": its creator is gone and not every member mapped it");
    }
  }
  ::closedir(dir);
  return removed;
}

SharedSegment::Failure* SharedSegment::failure() const { return &reinterpret_cast<Header*>(base_)->failure; }

SharedSegment::~SharedSegment() {
  if (!base_) return;
  auto* h = reinterpret_cast<Header*>(base_);
  if (abandoned_ && h->mapped.load() < static_cast<std::uint32_t>(size_)) ::shm_unlink(name_.c_str());
  ::munmap(base_, bytes_);
}

}  // namespace tutti::detail
