#pragma once
// Cheap timestamps for the latency path: the time-stamp counter where there
// is one, converted to steady-clock time only when someone needs it (a
// dump, a deadline).

#include <chrono>
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#include "common/completion.h"

namespace tutti::detail {

// Microseconds on the steady clock.
std::int64_t steady_us();

// The time-stamp counter where there is one, else steady_us().
#if defined(__x86_64__) || defined(__i386__)
inline std::int64_t ticks() { return static_cast<std::int64_t>(__rdtsc()); }
#else
inline std::int64_t ticks() { return steady_us(); }
#endif
std::int64_t ticks_to_steady_us(std::int64_t t);

// The deadline of something that started at tick `start` and may take
// `timeout` (saturating like deadline_after).
TimePoint deadline_from_ticks(std::int64_t start, std::chrono::milliseconds timeout);

}  // namespace tutti::detail
