#include "algorithms/tuner.h"

#include <algorithm>
#include <bit>
#include <numeric>

namespace tutti::detail {
namespace {

std::size_t class_index(std::size_t bytes) { return static_cast<std::size_t>(std::bit_width(bytes - 1)); }

}  // namespace

Tuner::Class& Tuner::at(std::size_t bytes) {
  auto& c = classes_[class_index(bytes)];
  if (!c) c = std::make_unique<Class>();
  return *c;
}

const Tuner::Class* Tuner::find(std::size_t bytes) const { return classes_[class_index(bytes)].get(); }

std::size_t Tuner::class_hi(std::size_t bytes) {
  const std::size_t i = class_index(bytes);
  return i >= 64 ? ~std::size_t(0) : std::size_t(1) << i;
}

Tuner::Step Tuner::next(std::size_t bytes, int preferred) {
  Class& c = at(bytes);
  Step s;
  if (c.warm < 2) {  // the class's first two operations, one of each: untimed
    s.algo = c.warm++ == 0 ? preferred : 1 - preferred;
    return s;
  }
  const std::uint64_t per = static_cast<std::uint64_t>(samples());
  // Operations of one algorithm in a row: one for Figure::Mean, samples()
  // for Fastest, samples() after an untimed one for MeanAfterFirst and
  // SlowestRun.
  const bool after_first = figure_ == Figure::MeanAfterFirst || figure_ == Figure::SlowestRun;
  const std::uint64_t run = figure_ == Figure::Mean ? 1 : figure_ == Figure::Fastest ? per : per + 1;
  const std::uint64_t trials = figure_ == Figure::Mean ? 2 * per : 2 * run;
  if (c.ops < trials) {
    // Alternate, starting with the other algorithm every other epoch; for
    // Figure::Fastest and MeanAfterFirst in runs, so that each has trials
    // that follow one of its own (a switch costs the operations after it in
    // shared memory: the wait for a peer still busy with the last one,
    // caches the other path filled).
    const std::uint64_t turn = c.ops / run;
    s.algo = static_cast<int>((turn + c.epoch) % 2);
    s.timed = !after_first || c.ops % run != 0;
    s.sync = figure_ == Figure::SlowestRun && c.ops % run == 0;
    ++c.ops;
    return s;
  }
  if (c.ops == trials) {
    s.agree = true;
    ++c.ops;
    return s;
  }
  s.algo = c.choice;
  ++c.ops;
  if (c.ops > trials + c.quiet) {  // the epoch ends: trials again from the next operation
    c.ops = 0;
    c.taken = {0, 0};
    ++c.epoch;
  }
  return s;
}

std::array<std::atomic<std::int64_t>, 2> Tuner::test_penalty_{};

void Tuner::set_test_penalty(std::int64_t ns0, std::int64_t ns1) {
  test_penalty_[0].store(ns0, std::memory_order_relaxed);
  test_penalty_[1].store(ns1, std::memory_order_relaxed);
}

void Tuner::record(std::size_t bytes, int algo, std::int64_t ns) {
  ns += test_penalty_[static_cast<std::size_t>(algo)].load(std::memory_order_relaxed);
  Class& c = at(bytes);
  int& n = c.taken[static_cast<std::size_t>(algo)];
  if (n < samples()) c.samples[static_cast<std::size_t>(algo)][static_cast<std::size_t>(n++)] = ns;
}

std::array<std::int64_t, 2> Tuner::means(std::size_t bytes) const {
  std::array<std::int64_t, 2> m{0, 0};
  const Class* c = find(bytes);
  if (!c) return m;
  for (std::size_t a = 0; a < 2; ++a) {
    const int n = c->taken[a];
    if (n == 0) continue;
    const auto first = c->samples[a].begin();
    m[a] = figure_ == Figure::Fastest ? *std::min_element(first, first + n)
                                      : std::accumulate(first, first + n, std::int64_t{0}) / n;
  }
  return m;
}

int Tuner::decide(std::size_t bytes, const std::array<std::int64_t, 2>& sums, int preferred) {
  Class& c = at(bytes);
  const int other = 1 - preferred;
  const auto p = static_cast<std::size_t>(preferred), o = static_cast<std::size_t>(other);
  // A zero figure: no member timed that alternative (every trial of it met
  // an operation it could not run); it is not chosen on no evidence.
  if (sums[o] <= 0) {
    c.choice = preferred;
  } else if (sums[p] <= 0) {
    c.choice = other;
  } else {
    c.choice = static_cast<double>(sums[o]) < (1.0 - kMargin) * static_cast<double>(sums[p]) ? other : preferred;
  }
  c.quiet = c.quiet == 0 ? kFirstQuiet : std::min<std::uint64_t>(c.quiet * 4, kMaxQuiet);
  return c.choice;
}

int Tuner::chosen(std::size_t bytes) const {
  const Class* c = find(bytes);
  return c ? c->choice : -1;
}

}  // namespace tutti::detail
