#pragma once
// Futex wait/wake on a 32-bit word of (shared) memory, and a spin hint.

#include <linux/futex.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>

namespace tutti::detail {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Sleeps while *word == expected, at most `limit`. Shared (not private)
// futexes: the word may live in memory another process maps.
inline void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected, std::chrono::nanoseconds limit) {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(limit.count() / 1000000000);
  ts.tv_nsec = static_cast<long>(limit.count() % 1000000000);
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

inline void futex_wake_all(std::atomic<std::uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// Asymmetric fences between processes (membarrier(2)). A publisher that
// stores a value and then loads a "someone sleeps" flag needs a full fence
// between the two, or a sleeper that sets the flag and then loads the value
// may miss the store and sleep through it. The fence costs the publisher a
// cache-line transfer on every publication; with membarrier the sleeper pays
// instead, once per sleep: it interrupts every running thread of every
// registered process to run a full fence, so the publisher needs only a
// compiler barrier. Registers this process, at every call: registering
// twice is harmless, and the answer then never depends on whether the
// kernel carried a parent's registration across fork (its state lives in
// the address space, which fork copies; exec starts afresh). False where the
// kernel or a seccomp filter refuses (the publisher then keeps its fence).
// Two system calls: call it when a group is made, not per wait.
inline bool membarrier_registered() {
  const long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  if (cmds < 0 || (cmds & MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0) return false;
  return syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0, 0) == 0;
}

// A full fence on every running thread of every registered process (this
// one included). Call only where membarrier_registered() is true.
inline void membarrier_global() { syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0); }

}  // namespace tutti::detail
