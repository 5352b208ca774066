#include "common/ticks.h"

#include <thread>

namespace tutti::detail {

std::int64_t steady_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now().time_since_epoch()).count();
}

#if defined(__x86_64__) || defined(__i386__)
namespace {
// The counter and the steady clock read together once, as the origin of
// the conversion.
struct TickOrigin {
  std::int64_t tick = static_cast<std::int64_t>(__rdtsc());
  std::int64_t us = steady_us();
};
const TickOrigin& tick_origin() {
  static const TickOrigin o;
  return o;
}
// Taken when the library loads, so that the origin predates every tick
// converted later.
[[maybe_unused]] const TickOrigin& g_origin_at_load = tick_origin();
}  // namespace

std::int64_t ticks_to_steady_us(std::int64_t t) {
  const TickOrigin& o = tick_origin();
  // Rate measured between the origin and now (at least 1 ms apart).
  std::int64_t now_us = steady_us(), now_tick = ticks();
  while (now_us - o.us < 1000) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    now_us = steady_us();
    now_tick = ticks();
  }
  const double per_us = static_cast<double>(now_tick - o.tick) / static_cast<double>(now_us - o.us);
  return o.us + static_cast<std::int64_t>(static_cast<double>(t - o.tick) / per_us);
}
#else
std::int64_t ticks_to_steady_us(std::int64_t t) { return t; }
#endif

TimePoint deadline_from_ticks(std::int64_t start, std::chrono::milliseconds timeout) {
  const TimePoint begun{
      std::chrono::duration_cast<Clock::duration>(std::chrono::microseconds(ticks_to_steady_us(start)))};
  // Never earlier than what the counter says, never later than now + timeout.
  const TimePoint now = Clock::now();
  const TimePoint from = begun < now ? begun : now;
  if (timeout.count() <= 0) return from;
  if (timeout >= std::chrono::duration_cast<std::chrono::milliseconds>(TimePoint::max() - from))
    return TimePoint::max();
  return from + timeout;
}

}  // namespace tutti::detail
