#pragma once
// The model behind tutti-sim (main.cc says how to run it): every network
// algorithm's schedule replayed round by round on hosts and links, the
// shared-memory steps of one host as a cost per step and per byte, and the
// library's own table (plan/planner.h) deciding what runs.
//
// Hosts and links. n ranks, `per_host` consecutive ranks on each host (as
// tuttirun places them), one link per host, full duplex: what the host's
// ranks send to other hosts shares its outgoing direction, what they
// receive its incoming one.
//
// A round is a set of transfers that run at once (one step of an
// algorithm: every rank's sends and receives of that step). Its time:
//
//   latency   alpha if any transfer crosses hosts, else shm_alpha if any
//             stays within one (0 for a round with no transfer)
//   + max(    beta * the most bytes through one direction of one host's
//             link (less `burst`, the bytes a link carries at no cost after
//             the round's latency: a token bucket's credit; 0 on a plain NIC),
//             shm_beta * the most bytes one rank receives from ranks of its
//             own host,
//             `overhead` per message of the rank with the most, beyond one
//             send and one receive (a rank that posts many messages at once
//             pays for each while its link drains); with `cores`, at least
//             every rank's such messages together over the cores,
//             cpu_beta per byte the rank with the most sends and receives
//             across hosts (the kernel's work on them, while the link
//             carries them); with `cores`, at least every rank's together
//             over the cores )
//   (where the hosts share a machine's CPUs, as the test-bed's do, these
//   two together at least wake per rank of the round over `cores`: each
//   must be scheduled once before the round is over, while its bytes are
//   on the way)
//   + the most CPU time of one rank outside the transfers: gamma per byte
//     it reduces, shm_beta per byte it copies locally (packing, rotations);
//     with `cores`, at least every rank's together over the cores.
//
// A schedule's time is the sum of its rounds' (the latency measure: one
// operation alone). As tutti-bench times them (back to back), at least the
// busiest direction of one host's link's bytes of the whole operation: the
// bucket's credit comes back at the link's rate only (a two-level form's
// step across hosts may take more, from the credit its local steps let the
// bucket regain). Pipelined schedules (a broadcast or reduce in chunks)
// are their one-chunk rounds once, then the steady state, where every
// stage holds a chunk, for each further chunk: the rounds merged into one.
//
// The stream measure is what back-to-back operations cost each when nothing
// holds the next one back (tutti-bench times a loop of them; a broadcast's
// root starts the next as soon as its sends are out): the busiest resource
// per operation, a host link's bytes in one direction times beta or one
// rank's CPU time (overhead per message it sends, recv_overhead per one it
// receives, the copies and the reductions; with `cores`, every rank's
// together over the cores). A receive costs less than a send: a rank that
// runs ahead finds many messages waiting and takes them in few reads (a
// gather's root against a scatter's on the test-bed's 4 hosts:
// docs/performance.md, "At scale: the simulator").
//
// Shared-memory collectives (one host, and the local steps of the
// two-level forms) cost shm_alpha per synchronizing step, shm_beta per byte
// a rank copies and gamma per byte it reduces (sim.cc, shm_time). With
// `cores`, copies and reductions are slowed by the job's ranks over the
// cores, and a step of one operation alone lasts at least wake per rank of
// the job over the cores (in a stream a rank finds the next step ready);
// per rank of its host only where every rank of the job ran the step
// before (all_gather, reduce_scatter and all_to_all in two levels, whose
// ranks all take part in the step across hosts: none sleeps through it),
// and in the two-level all_reduce (as the test-bed measures it).
//
// Two-level forms (media/two_level.cc) are those local steps and the
// step across hosts: a network algorithm among one rank of each host, as
// that communicator's own table picks it (for all_to_all, with its L copies
// counted: planner.h, Shape::copies). The all_reduce's slices and the
// all_gather, reduce_scatter and all_to_all run the L cross operations at
// once, sharing each host's link; in pieces, one piece's local steps
// overlap another's step across hosts. Back-to-back rooted operations in
// two levels last at least their busiest resource (the step across hosts
// in the stream measure, or the local step), and with `cores` at least the
// CPU time of both together over the cores: the step across hosts' and
// step_cpu for every rank's local step.
//
// A timed choice (algorithms/tuner.h, and the two-level all_reduce's)
// settles on what the model finds faster: the other alternative where it
// saves at least the tuner's margin of the preferred one's time. On a link
// with a token bucket (`burst`), the planner's timed choices compare one
// operation alone, as their short trial runs see it (sim.cc,
// other_wins_trials); the time is then the chosen one's in the measure
// asked for.

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "plan/registry.h"

namespace tutti::sim {

// The defaults: the network test-bed's fit (netbed_1gbit.params), rounded.
struct Params {
  double alpha = 10.96e-6;         // s: latency of a round of network messages
  double beta = 8.404e-9;          // s per byte through one direction of a host's link
  double gamma = 0.0794e-9;        // s per byte a rank reduces
  double overhead = 3.22e-6;       // s: a rank's CPU time per message it sends (see above)
  double recv_overhead = 0.81e-6;  // s: its CPU time per message it receives, back to back
  double cpu_beta = 0.869e-9;      // s of a rank's CPU per byte it sends or receives across hosts
  double shm_alpha = 11.77e-6;     // s: one step of shared memory, or a round of messages within a host
  double shm_beta = 0.0769e-9;     // s per byte copied within a host
  double burst = 3130;             // bytes a link carries at no cost per round
  // Hosts that share one machine's CPUs (the test-bed): a round of messages,
  // or a shared-memory step, takes at least wake per rank in it over `cores`
  // (0: hosts have their own).
  double cores = 0;
  double wake = 0;
  // With `cores`: CPU a rank spends on a shared-memory step in back-to-back
  // operations (it finds the step ready, so no wake), which the step across
  // hosts of the two-level rooted forms shares the CPUs with.
  double step_cpu = 0;

  // "name = value" lines (# starts a comment); false with `error` set on
  // an unknown name or a value that is not a number.
  bool read(const std::string& path, std::string* error);
  bool set(const std::string& name, double value);
  std::string text() const;  // the lines read() reads
};

enum class Measure {
  Latency,  // one operation alone
  Stream,   // each of many back-to-back operations
  Bench,    // as tutti-bench times it: Stream for rooted collectives, Latency otherwise
};

struct Result {
  bool modeled = false;  // false: the algorithm cannot run on this shape (one without a model throws)
  double seconds = 0;
  std::string what;  // the algorithm, and the timed choice's pick where one was made
  double cpu = 0;    // the stream measure: every rank's CPU seconds together
};

class Simulator {
 public:
  explicit Simulator(const Params& p);
  ~Simulator();
  Simulator(const Simulator&) = delete;
  Simulator& operator=(const Simulator&) = delete;

  // `bytes` as the table counts them (plan/registry.h, When): the buffer of
  // all_reduce, broadcast and reduce, a rank's block of all_gather, gather,
  // scatter and reduce_scatter, a rank's whole send buffer of all_to_all
  // (the table's is the block a peer: this over `ranks`).
  // algo null: what the library runs (the table with TUTTI_* settings of
  // the environment, and its timed choices); else that algorithm, as
  // TUTTI_ALGO would force it (no timed choice).
  // copies > 1: that many such communicators run it at once, sharing each
  // host's link (a two-level form's cross communicators, one a local index).
  Result run(detail::Collective c, std::size_t bytes, int ranks, int per_host, const detail::Algorithm* algo, Measure m,
             int copies = 1);
  // The algorithms of `c` that can run on this shape (shared memory on one
  // host, the two-level form where it applies, every network algorithm).
  std::vector<const detail::Algorithm*> candidates(detail::Collective c, int ranks, int per_host) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tutti::sim
