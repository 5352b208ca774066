#pragma once
// The planner: what an operation runs. It owns the table of algorithms
// (plan/registry.h), the timed choices between two of them (algorithms/
// tuner.h) and every size threshold (common/thresholds.h); a communicator
// asks it once per operation and runs what it returns:
//
//   Communicator::iall_reduce: validate -> planner.plan() -> run
//
// One planner per communicator, configured when the communicator is made
// (its shape: ranks, hosts, ranks per host) and used by the thread that
// runs the communicator's operations (the tuners are not thread-safe).

#include <array>
#include <cstddef>
#include <memory>
#include <vector>

#include "algorithms/tuner.h"
#include "common/config.h"
#include "common/thresholds.h"
#include "plan/registry.h"

namespace tutti::detail {

// The shape of a communicator, as far as the planner cares (0: unknown,
// matching every rule).
struct Shape {
  int ranks = 0;
  int hosts = 0;
  int ranks_per_host = 0;  // the most members on any one host
  bool single_host = false;
  bool two_level = false;  // spans hosts with the same number (>= 2) of members on each
  // Communicators that run the same operation over each host's link at
  // once: a two-level form's cross communicators (one a local index: the
  // ranks a host); 1 elsewhere. all_to_all's rules hold for them as for a
  // flat communicator of all their ranks, with their own blocks (planner.cc,
  // choose).
  int copies = 1;
};

// The two-level all_reduce's timed choices (media/two_level.h says what
// each one chooses between); null where not timed.
struct TwoLevelChoices {
  std::unique_ptr<Tuner> forms, pieces, piece_size, flat;
};

class Planner {
 public:
  // Checks that every TUTTI_ALGO entry names a known collective and one of
  // its algorithms (at init, on every rank); throws InvalidArgument naming
  // the known ones.
  static void validate_overrides(const Config& config);
  // The table's choice (with TUTTI_ALGO) for a communicator of shape `s`.
  // Throws InvalidArgument where TUTTI_ALGO names a shared-memory algorithm
  // for a communicator that spans hosts.
  static const Algorithm& choose(Collective c, std::size_t bytes, const Config& config, const Shape& s);

  // For a communicator of shape `s`; `config` must outlive the planner.
  void configure(const Config& config, const Shape& s);

  // What an operation of `bytes` (per rank, as When counts them) runs.
  Plan plan(Collective c, std::size_t bytes) const {
    if (shm_always_) [[likely]]
      return Plan{shm_[static_cast<int>(c)]};
    return plan_by_table(c, bytes);
  }

  const Thresholds& thresholds() const { return thresholds_; }
  // The pipelining unit of chunked network algorithms (TUTTI_CHUNK_BYTES
  // within one host, its across-hosts value otherwise) and Rabenseifner's
  // unit up to thresholds().network.small_pipe_max_bytes.
  std::size_t chunk_bytes() const { return chunk_bytes_; }
  std::size_t small_pipe_bytes() const { return small_pipe_bytes_; }
  // The two-level all_reduce's timed choices for `per_host` members a host.
  TwoLevelChoices two_level_choices(int per_host) const;

 private:
  Plan plan_by_table(Collective c, std::size_t bytes) const;

  const Config* config_ = nullptr;
  Shape shape_;
  Thresholds thresholds_;
  bool shm_always_ = false;  // one host, no TUTTI_ALGO, no TUTTI_TRANSPORT=tcp: shared memory, no table walk
  std::array<const Algorithm*, kCollectives> shm_{};
  std::size_t chunk_bytes_ = std::size_t{1} << 20;
  std::size_t small_pipe_bytes_ = std::size_t{64} << 10;
  // Over the network (configure() says where): the network medium's timed
  // pairs (media/network.h, network_timed_pairs).
  struct TimedChoice {
    Collective collective = Collective::AllReduce;
    std::unique_ptr<Tuner> tuner;
    const Algorithm* table = nullptr;  // alternative 0
    const Algorithm* other = nullptr;  // alternative 1
  };
  std::vector<TimedChoice> timed_;
};

}  // namespace tutti::detail
