#include "common/fork.h"

#include <pthread.h>

#include <atomic>
#include <mutex>

namespace tutti::detail {
namespace {
std::atomic<unsigned> g_generation{0};
void on_fork_child() { g_generation.fetch_add(1, std::memory_order_relaxed); }
}  // namespace

unsigned fork_generation() {
  static std::once_flag once;
  std::call_once(once, [] { ::pthread_atfork(nullptr, nullptr, on_fork_child); });
  return g_generation.load(std::memory_order_relaxed);
}

}  // namespace tutti::detail
