// The schedules of tutti's algorithms on the model of sim.h. Every network
// algorithm below follows its source in src/algorithms/ step by step, with
// the library's own rank arithmetic (src/patterns/, algorithms/ring_steps.h,
// algorithms/halving_doubling.h): for each round, which rank sends how many
// bytes to which, and how many bytes each reduces.
#include "sim.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <utility>

#include "algorithms/halving_doubling.h"
#include "algorithms/ring_steps.h"
#include "algorithms/tuner.h"
#include "common/config.h"
#include "patterns/binomial.h"
#include "patterns/bruck.h"
#include "patterns/chain.h"
#include "patterns/dissemination.h"
#include "patterns/pairwise.h"
#include "patterns/recursive_doubling.h"
#include "patterns/ring.h"
#include "plan/planner.h"
#include "tutti/error.h"

namespace tutti::sim {

using detail::Algorithm;
using detail::Collective;
using detail::Medium;
namespace rd = detail::recursive_doubling;
namespace ring = detail::ring;
namespace binomial = detail::binomial;
namespace bruck = detail::bruck;

namespace {

// Element size: reductions and splits work on float32, tutti-bench's default.
constexpr std::size_t kElem = 4;
// Ring steps are replayed one by one up to this many transfers in all; past
// it the first step stands for every step (they differ by at most one
// element per block).
constexpr double kExactWork = double(1 << 22);

// ---- params ----------------------------------------------------------------

struct ParamField {
  const char* name;
  double Params::*field;
  const char* doc;
};
constexpr ParamField kFields[] = {
    {"alpha", &Params::alpha, "s: latency of a round of network messages"},
    {"beta", &Params::beta, "s per byte through one direction of a host's link"},
    {"gamma", &Params::gamma, "s per byte a rank reduces"},
    {"overhead", &Params::overhead,
     "s: a rank's CPU time per message it sends (in a round: beyond one send and one receive)"},
    {"recv_overhead", &Params::recv_overhead,
     "s: a rank's CPU time per message it receives in back-to-back operations"},
    {"cpu_beta", &Params::cpu_beta, "s of a rank's CPU per byte it sends or receives across hosts"},
    {"shm_alpha", &Params::shm_alpha, "s: one step of shared memory, or a round of messages within a host"},
    {"shm_beta", &Params::shm_beta, "s per byte copied within a host"},
    {"burst", &Params::burst, "bytes a host's link carries at no cost per round (token bucket credit)"},
    {"cores", &Params::cores, "CPUs every host shares (the test-bed's VM); 0: each host has its own"},
    {"wake", &Params::wake, "s of a shared CPU a rank takes to join a round or a shared-memory step (with cores)"},
    {"step_cpu", &Params::step_cpu,
     "s of a shared CPU a rank spends on a shared-memory step of back-to-back operations (with cores)"},
};

// ---- hosts, rounds, timelines -------------------------------------------------

// n members, per_host consecutive members a host; `copies` identical
// instances run at once on the same hosts (the two-level forms' L cross
// communicators, one per local index): their bytes share each host's link,
// each on its own ranks.
struct Group {
  int n = 1;
  int per_host = 1;
  int copies = 1;
  int hosts() const { return (n + per_host - 1) / per_host; }
  int host(int r) const { return r / per_host; }
};

double messages(double bytes, std::size_t chunk) {
  return std::max(1.0, std::ceil(bytes / static_cast<double>(std::max<std::size_t>(chunk, 1))));
}

// Per-resource loads summed over rounds, for the stream measure.
struct Loads {
  std::vector<double> out, in;  // bytes, per host
  std::vector<double> busy;     // CPU seconds, per rank
};

class Round {
 public:
  explicit Round(const Group& g)
      : g_(g),
        out_(g.hosts()),
        in_(g.hosts()),
        local_(g.n),
        reduce_(g.n),
        copy_(g.n),
        msgs_(g.n),
        sent_(g.n),
        net_(g.n) {}

  // `msgs`: the messages it takes (a transfer in chunks posts one each).
  void send(int src, int dst, double bytes, double msgs = 1) {
    const int hs = g_.host(src), hd = g_.host(dst);
    if (hs != hd) {
      out_[hs] += bytes * g_.copies;
      in_[hd] += bytes * g_.copies;
      net_[src] += bytes;
      net_[dst] += bytes;
      cross_ = true;
    } else {
      local_[dst] += bytes;
      local_any_ = true;
    }
    msgs_[src] += msgs;
    msgs_[dst] += msgs;
    sent_[src] += msgs;
  }
  // Ranks that send or receive in this round (each of `copies` groups').
  int active() const {
    int k = 0;
    for (double m : msgs_) k += m > 0 ? 1 : 0;
    return k * g_.copies;
  }
  void reduce(int r, double bytes) { reduce_[r] += bytes; }
  void copy(int r, double bytes) { copy_[r] += bytes; }
  void merge(const Round& o) {
    for (std::size_t h = 0; h < out_.size(); ++h) out_[h] += o.out_[h], in_[h] += o.in_[h];
    for (std::size_t r = 0; r < local_.size(); ++r) {
      local_[r] += o.local_[r];
      reduce_[r] += o.reduce_[r];
      copy_[r] += o.copy_[r];
      msgs_[r] += o.msgs_[r];
      sent_[r] += o.sent_[r];
      net_[r] += o.net_[r];
    }
    cross_ = cross_ || o.cross_;
    local_any_ = local_any_ || o.local_any_;
  }

  // `scale` multiplies every byte count (not the messages).
  double time(const Params& p, double scale = 1) const {
    double link = 0, local = 0, posting = 0, posting_all = 0, cpu = 0, cpu_all = 0, net = 0, net_all = 0;
    for (std::size_t h = 0; h < out_.size(); ++h) link = std::max({link, out_[h], in_[h]});
    for (std::size_t r = 0; r < local_.size(); ++r) {
      local = std::max(local, local_[r]);
      posting = std::max(posting, msgs_[r]);
      posting_all += std::max(0.0, msgs_[r] - 2) * g_.copies;
      net = std::max(net, net_[r]);
      net_all += net_[r] * g_.copies;
      const double mine = scale * (p.gamma * reduce_[r] + p.shm_beta * copy_[r]);
      cpu = std::max(cpu, mine);
      cpu_all += mine * g_.copies;
    }
    const double latency = cross_ ? p.alpha : local_any_ ? p.shm_alpha : 0;
    // Where hosts share the machine's CPUs, so does the messages' CPU time.
    const double posting_time =
        p.overhead * (p.cores > 0 ? std::max(posting - 2, posting_all / p.cores) : std::max(0.0, posting - 2));
    // The CPU that moves a round's network bytes overlaps its link.
    const double net_time = p.cpu_beta * scale * (p.cores > 0 ? std::max(net, net_all / p.cores) : net);
    double t = latency + std::max({p.beta * std::max(0.0, link * scale - p.burst), p.shm_beta * local * scale,
                                   posting_time, net_time});
    // Hosts that share the machine's CPUs share their work, and every rank
    // of the round must be scheduled once before the round is over (while
    // its bytes are on the way).
    if (p.cores > 0) {
      cpu = std::max(cpu, cpu_all / p.cores);
      if (cross_ || local_any_) t = std::max(t, active() * p.wake / p.cores);
    }
    return t + cpu;
  }
  void add_loads(Loads& l, const Params& p, double k, double scale) const {
    for (std::size_t h = 0; h < out_.size(); ++h) {
      l.out[h] += k * scale * out_[h];
      l.in[h] += k * scale * in_[h];
    }
    for (std::size_t r = 0; r < local_.size(); ++r)
      l.busy[r] += k * (scale * (p.gamma * reduce_[r] + p.shm_beta * (copy_[r] + local_[r]) + p.cpu_beta * net_[r]) +
                        p.overhead * sent_[r] + p.recv_overhead * (msgs_[r] - sent_[r]));
  }

 private:
  Group g_;                                           // a copy: a cached round outlives the timeline it was built for
  std::vector<double> out_, in_;                      // per host: bytes to / from other hosts
  std::vector<double> local_, reduce_, copy_, msgs_;  // per rank
  std::vector<double> sent_;                          // per rank: the messages it sends
  std::vector<double> net_;                           // per rank: bytes it sends or receives across hosts
  bool cross_ = false, local_any_ = false;
};

class Timeline {
 public:
  Timeline(const Group& g, const Params& p) : g_(g), p_(p) {
    loads_.out.assign(g.hosts(), 0);
    loads_.in.assign(g.hosts(), 0);
    loads_.busy.assign(g.n, 0);
  }
  const Group& group() const { return g_; }
  void round(const Round& r, double repeat = 1, double scale = 1) {
    latency_ += repeat * r.time(p_, scale);
    r.add_loads(loads_, p_, repeat, scale);
  }
  // A pipeline of `chunks` chunks through stages of one chunk each (whose
  // times, one after another, sum to `fill`): the stages once, then the
  // merged round once for every further chunk.
  void pipeline(double fill, const Round& merged, double chunks) {
    latency_ += fill + (chunks - 1) * merged.time(p_);
    merged.add_loads(loads_, p_, chunks, 1);
  }
  void pipeline(const std::vector<Round>& stages, const Round& merged, double chunks) {
    double fill = 0;
    for (const Round& s : stages) fill += s.time(p_);
    pipeline(fill, merged, chunks);
  }
  // One transfer alone (a chain's hop), and the receiver's reduction of
  // `reduced` bytes of it.
  double hop(int src, int dst, double bytes, double reduced = 0) const {
    const double r = p_.gamma * reduced;
    if (g_.host(src) == g_.host(dst)) return p_.shm_alpha + p_.shm_beta * bytes + r;
    return p_.alpha + p_.beta * std::max(0.0, bytes * g_.copies - p_.burst) + r;
  }
  double latency() const { return latency_; }
  // The busiest direction of one host's link: its bytes over the link's rate.
  double link() const {
    double t = 0;
    for (std::size_t h = 0; h < loads_.out.size(); ++h)
      t = std::max(t, p_.beta * std::max(loads_.out[h], loads_.in[h]));
    return t;
  }
  double stream() const {
    double t = link();
    double all = 0;
    for (double b : loads_.busy) {
      t = std::max(t, b);
      all += b * g_.copies;
    }
    // Hosts that share the machine's CPUs (the test-bed).
    if (p_.cores > 0) t = std::max(t, all / p_.cores);
    return t;
  }
  // Every rank's CPU seconds of the stream measure together.
  double cpu() const {
    double all = 0;
    for (double b : loads_.busy) all += b * g_.copies;
    return all;
  }

 private:
  Group g_;
  const Params& p_;
  double latency_ = 0;
  Loads loads_;
};

// The pipelining units the planner hands a network algorithm (planner.h).
struct Units {
  std::size_t chunk = 1 << 20;
  std::size_t small_pipe = 64 << 10;
  std::size_t small_pipe_max = 512 << 10;
};

// ---- network schedules ------------------------------------------------------------
// Root 0 for the rooted collectives (the bench's; any root is the same up
// to a rotation of ranks, which moves the hosts' boundaries only).

class Net {
 public:
  Net(Timeline& t, const Units& u) : t_(t), g_(t.group()), n_(g_.n), u_(u) {}

  // Ring steps, replayed one by one, or the first `count` times (kExactWork).
  template <class Fill>
  void steps(int count, Fill&& fill) {
    if (count <= 0) return;
    if (static_cast<double>(n_) * count <= kExactWork) {
      for (int s = 0; s < count; ++s) {
        Round r(g_);
        fill(r, s);
        t_.round(r);
      }
    } else {
      Round r(g_);
      fill(r, 0);
      t_.round(r, count);
    }
  }

  // all_reduce_recursive_doubling.cc
  void all_reduce_recursive_doubling(double S) {
    if (n_ == 1 || S == 0) return;
    const rd::Fold f0 = rd::fold(0, n_);
    if (f0.rem) {
      Round r(g_);
      for (int q = 0; q < 2 * f0.rem; q += 2) {
        r.send(q, q + 1, S);
        r.reduce(q + 1, S);
      }
      t_.round(r);
    }
    for (int mask = 1; mask < f0.p; mask <<= 1) {
      Round r(g_);
      for (int q = 0; q < n_; ++q) {
        const rd::Fold f = rd::fold(q, n_);
        if (f.vrank < 0) continue;
        r.send(q, rd::partner(f.vrank, mask, f), S);
        r.reduce(q, S);
      }
      t_.round(r);
    }
    fold_out(f0, S, u_.chunk);
  }

  // all_reduce_rabenseifner.cc: halving_doubling's reduce_scatter_halving and
  // all_gather_doubling over p nearly equal element ranges.
  void all_reduce_rabenseifner(double S) {
    if (n_ == 1 || S == 0) return;
    const std::size_t count = static_cast<std::size_t>(S) / kElem;
    const std::size_t chunk = S <= u_.small_pipe_max ? std::min(u_.chunk, u_.small_pipe) : u_.chunk;
    const rd::Fold f0 = rd::fold(0, n_);
    fold_in(f0, S, chunk);
    std::vector<double> offs(f0.p + 1);
    const std::size_t base = count / f0.p, extra = count % f0.p;
    for (int v = 0; v < f0.p; ++v)
      offs[v + 1] = offs[v] + static_cast<double>((base + (static_cast<std::size_t>(v) < extra ? 1 : 0)) * kElem);
    halving(offs, chunk);
    doubling(offs, chunk);
    fold_out(f0, S, chunk);
  }

  // all_reduce_ring.cc: reduce_scatter_ring_inplace then all_gather_ring
  // over n nearly equal blocks.
  void all_reduce_ring(double S) {
    if (n_ == 1 || S == 0) return;
    const std::size_t count = static_cast<std::size_t>(S) / kElem;
    std::vector<double> bytes(n_);
    const std::size_t base = count / n_, extra = count % n_;
    for (int b = 0; b < n_; ++b) bytes[b] = static_cast<double>((base + (static_cast<std::size_t>(b) < extra)) * kElem);
    ring_reduce_scatter([&](int b) { return bytes[b]; });
    ring_all_gather([&](int b) { return bytes[b]; });
  }

  // reduce_scatter_ring.cc (blocks of b bytes)
  void reduce_scatter_ring(double b) {
    if (n_ == 1 || b == 0) return;
    ring_reduce_scatter([&](int) { return b; });
  }

  // reduce_scatter_recursive_halving.cc: every block into one accumulator,
  // the fold of whole inputs, halving over the participants' blocks.
  void reduce_scatter_recursive_halving(double b) {
    if (n_ == 1 || b == 0) return;
    const rd::Fold f0 = rd::fold(0, n_);
    Round copy_in(g_);
    for (int q = 0; q < n_; ++q) copy_in.copy(q, n_ * b);
    t_.round(copy_in);
    fold_in(f0, n_ * b, u_.chunk);
    std::vector<double> offs(f0.p + 1);
    for (int v = 0; v <= f0.p; ++v) offs[v] = rd::first_real(v, f0) * b;
    halving(offs, u_.chunk);
    fold_out(f0, b, u_.chunk);
  }

  // all_gather_ring.cc
  void all_gather_ring(double b) {
    if (n_ == 1 || b == 0) return;
    ring_all_gather([&](int) { return b; });
  }

  // all_gather_bruck.cc: ceil(log2 n) rounds, then the local rotation.
  void all_gather_bruck(double b) {
    if (n_ == 1 || b == 0) return;
    for (int k = 0; k < bruck::rounds(n_); ++k) {
      Round r(g_);
      const double len = bruck::ag_count(k, n_) * b;
      for (int q = 0; q < n_; ++q) r.send(q, bruck::ag_send_to(q, k, n_), len);
      t_.round(r);
    }
    Round rotate(g_);
    for (int q = 0; q < n_; ++q) rotate.copy(q, n_ * b);
    t_.round(rotate);
  }

  // all_gather_recursive_doubling.cc
  void all_gather_recursive_doubling(double b) {
    if (n_ == 1 || b == 0) return;
    const rd::Fold f0 = rd::fold(0, n_);
    if (f0.rem) {
      Round r(g_);
      for (int q = 0; q < 2 * f0.rem; q += 2) r.send(q, q + 1, b, messages(b, u_.chunk));
      t_.round(r);
    }
    std::vector<double> offs(f0.p + 1);
    for (int v = 0; v <= f0.p; ++v) offs[v] = rd::first_real(v, f0) * b;
    doubling(offs, u_.chunk);
    // The odd rank hands its even neighbour every block but the even one's own.
    fold_out(f0, (n_ - 1) * b, u_.chunk);
  }

  // all_to_all_pairwise.cc: every receive and send posted at once, one
  // round of n - 1 messages each way a rank; a block beyond the chunk in
  // pieces of it after its size, two rounds of pieces in flight, which keep
  // the links as busy as one round of everything (the messages counted).
  // The unit round (1-byte blocks) is built once per shape and number of
  // pieces: its loads scale with the block.
  void all_to_all_pairwise(double S, std::map<std::tuple<int, int, int, int>, std::unique_ptr<Round>>& cache) {
    if (n_ == 1) return;
    const double b = S / n_;
    const double chunk = static_cast<double>(std::max<std::size_t>(u_.chunk, 1));
    // A peer's: the pieces, and the size before them (also before an 8-byte block).
    const int msgs = b > chunk ? static_cast<int>(std::ceil(b / chunk)) + 1 : b == 8 ? 2 : 1;
    auto& unit = cache[{n_, g_.per_host, g_.copies, msgs}];
    if (!unit) {
      unit = std::make_unique<Round>(g_);
      for (int s = 1; s < n_; ++s)
        for (int q = 0; q < n_; ++q) unit->send(q, detail::pairwise::send_to(q, s, n_), 1, msgs);
    }
    t_.round(*unit, 1, b);
  }

  // all_to_all_bruck.cc: the blocks copied out of sendbuf, ceil(log2 n)
  // rounds packing, sending and unpacking the slots with bit k set, the
  // final placement.
  void all_to_all_bruck(double S) {
    if (n_ == 1 || S == 0) return;
    const double b = S / n_;
    Round in(g_);
    for (int q = 0; q < n_; ++q) in.copy(q, S);
    t_.round(in);
    for (int k = 0; k < bruck::rounds(n_); ++k) {
      int slots = 0;
      for (int i = 1; i < n_; ++i) slots += bruck::a2a_moves(i, k) ? 1 : 0;
      const double len = slots * b;
      Round r(g_);
      for (int q = 0; q < n_; ++q) {
        r.send(q, bruck::a2a_send_to(q, k, n_), len);
        r.copy(q, 2 * len);
      }
      t_.round(r);
    }
    t_.round(in);
  }

  // broadcast_binomial.cc: each chunk forwarded to every child (all at
  // once) as soon as it arrived. Stage d: the ranks at depth d (virtual
  // ranks with d bits set) send to their children.
  void broadcast_binomial(double S) {
    if (n_ == 1 || S == 0) return;
    const double chunks = messages(S, u_.chunk), c = S / chunks;
    std::vector<Round> stages(bruck::rounds(n_) + 1, Round(g_));
    Round merged(g_);
    for (int q = 0; q < n_; ++q) {
      const int d = std::popcount(static_cast<unsigned>(binomial::to_virtual(q, 0, n_)));
      for (int child : binomial::children(q, 0, n_)) {
        stages[d].send(q, child, c);
        merged.send(q, child, c);
      }
    }
    t_.pipeline(stages, merged, chunks);
  }

  // broadcast_chain.cc: the chain's hops one after another for the first
  // chunk, then all at once.
  void broadcast_chain(double S) {
    if (n_ == 1 || S == 0) return;
    const double chunks = messages(S, u_.chunk), c = S / chunks;
    Round merged(g_);
    double fill = 0;
    for (int q = 0; q >= 0; q = detail::chain::next(q, 0, n_)) {
      const int next = detail::chain::next(q, 0, n_);
      if (next < 0) break;
      fill += t_.hop(q, next, c);
      merged.send(q, next, c);
    }
    t_.pipeline(fill, merged, chunks);
  }

  // broadcast_scatter_all_gather.cc: a binomial scatter of each subtree's
  // pieces (a rank forwards once it has received its whole range), then a
  // ring all_gather of the pieces.
  void broadcast_scatter_all_gather(double S) {
    if (n_ == 1 || S == 0) return;
    const std::size_t bytes = static_cast<std::size_t>(S);
    const std::size_t base = bytes / n_, extra = bytes % n_;
    auto offset = [&](int v) {
      return static_cast<double>(static_cast<std::size_t>(v) * base + std::min(static_cast<std::size_t>(v), extra));
    };
    std::vector<Round> stages(bruck::rounds(n_) + 1, Round(g_));
    for (int q = 0; q < n_; ++q) {
      const int d = std::popcount(static_cast<unsigned>(binomial::to_virtual(q, 0, n_)));
      for (int child : binomial::children(q, 0, n_)) {
        const int cv = binomial::to_virtual(child, 0, n_);
        const double len = offset(binomial::subtree_end(cv, n_)) - offset(cv);
        if (len > 0) stages[d].send(q, child, len, messages(len, u_.chunk));
      }
    }
    for (const Round& s : stages) t_.round(s);
    ring_all_gather([&](int q) {
      const int v = binomial::to_virtual(q, 0, n_);
      return offset(v + 1) - offset(v);
    });
  }

  // reduce_binomial.cc: chunk by chunk, a rank reduces each child's partial
  // result into its own, then passes the chunk to its parent. Stage h: the
  // ranks whose children finished by stage h - 1.
  void reduce_binomial(double S) {
    if (n_ == 1 || S == 0) return;
    const std::size_t chunk_bytes = std::max<std::size_t>(1, u_.chunk / kElem) * kElem;
    const double chunks = messages(S, chunk_bytes), c = S / chunks;
    std::vector<int> stage(n_, 0);
    int most = 0;
    for (int q = n_ - 1; q > 0; --q) {
      for (int child : binomial::children(q, 0, n_)) stage[q] = std::max(stage[q], stage[child] + 1);
      most = std::max(most, stage[q]);
    }
    std::vector<Round> stages(most + 1, Round(g_));
    Round merged(g_);
    for (int q = 1; q < n_; ++q) {
      const int parent = binomial::parent(q, 0, n_);
      stages[stage[q]].send(q, parent, c);
      stages[stage[q]].reduce(parent, c);
      merged.send(q, parent, c);
      merged.reduce(parent, c);
    }
    t_.pipeline(stages, merged, chunks);
  }

  // reduce_chain.cc: the first chunk hop by hop from the chain's far end to
  // the root, each rank reducing it in, then every hop at once.
  void reduce_chain(double S) {
    if (n_ == 1 || S == 0) return;
    const std::size_t chunk_bytes =
        detail::chain::reduce_chunk_elems(static_cast<std::size_t>(S) / kElem, kElem, u_.chunk) * kElem;
    const double chunks = messages(S, chunk_bytes), c = S / chunks;
    Round merged(g_);
    double fill = 0;
    for (int q = 0; q >= 0; q = detail::chain::next(q, 0, n_)) {
      const int from = detail::chain::next(q, 0, n_);
      if (from < 0) break;
      fill += t_.hop(from, q, c, c);
      merged.send(from, q, c);
      merged.reduce(q, c);
    }
    t_.pipeline(fill, merged, chunks);
  }

  // barrier_dissemination.cc
  void barrier_dissemination() {
    for (int k = 0; k < detail::dissemination::rounds(n_); ++k) {
      Round r(g_);
      for (int q = 0; q < n_; ++q) r.send(q, detail::dissemination::to(q, k, n_), 0);
      t_.round(r);
    }
  }

  // gather_scatter_linear.cc
  void gather_linear(double b) {
    if (n_ == 1 || b == 0) return;
    Round r(g_);
    for (int q = 1; q < n_; ++q) r.send(q, 0, b);
    t_.round(r);
  }
  void scatter_linear(double b) {
    if (n_ == 1 || b == 0) return;
    Round r(g_);
    for (int q = 1; q < n_; ++q) r.send(0, q, b);
    t_.round(r);
  }

 private:
  // The non-power-of-two fold: the even rank of each of the first rem
  // pairs hands the odd one `bytes`, which reduces them.
  void fold_in(const rd::Fold& f0, double bytes, std::size_t chunk) {
    if (!f0.rem) return;
    Round r(g_);
    for (int q = 0; q < 2 * f0.rem; q += 2) {
      r.send(q, q + 1, bytes, messages(bytes, chunk));
      r.reduce(q + 1, bytes);
    }
    t_.round(r);
  }
  // ... and gets `bytes` of the result back from it.
  void fold_out(const rd::Fold& f0, double bytes, std::size_t chunk) {
    if (!f0.rem) return;
    Round r(g_);
    for (int q = 1; q < 2 * f0.rem; q += 2) r.send(q, q - 1, bytes, messages(bytes, chunk));
    t_.round(r);
  }
  // halving_doubling.cc, reduce_scatter_halving: participant v keeps
  // group(v, mask), sends the partner its half and reduces what comes back.
  void halving(const std::vector<double>& offs, std::size_t chunk) {
    const rd::Fold f0 = rd::fold(0, n_);
    for (int mask = f0.p / 2; mask >= 1; mask >>= 1) {
      Round r(g_);
      for (int q = 0; q < n_; ++q) {
        const rd::Fold f = rd::fold(q, n_);
        if (f.vrank < 0) continue;
        const int pv = f.vrank ^ mask;
        const rd::Range keep = rd::group(f.vrank, mask), give = rd::group(pv, mask);
        const double len = offs[give.hi] - offs[give.lo];
        r.send(q, rd::real_rank(pv, f), len, messages(len, chunk));
        r.reduce(q, offs[keep.hi] - offs[keep.lo]);
      }
      t_.round(r);
    }
  }
  // halving_doubling.cc, all_gather_doubling
  void doubling(const std::vector<double>& offs, std::size_t chunk) {
    const rd::Fold f0 = rd::fold(0, n_);
    const int rounds = detail::halving_doubling::log2_exact(f0.p);
    for (int k = 0; k < rounds; ++k) {
      const int mask = 1 << k;
      Round r(g_);
      for (int q = 0; q < n_; ++q) {
        const rd::Fold f = rd::fold(q, n_);
        if (f.vrank < 0) continue;
        const rd::Range mine = rd::group(f.vrank, mask);
        const double len = offs[mine.hi] - offs[mine.lo];
        r.send(q, rd::partner(f.vrank, mask, f), len, messages(len, chunk));
      }
      t_.round(r);
    }
  }
  // reduce_scatter_ring.cc: at step s rank q sends its partial block
  // rs_send_block (the one it reduced at step s - 1) and reduces
  // rs_recv_block into its own input.
  template <class Bytes>
  void ring_reduce_scatter(Bytes&& bytes) {
    steps(n_ - 1, [&](Round& r, int s) {
      for (int q = 0; q < n_; ++q) {
        const double out = bytes(ring::rs_send_block(q, s, n_));
        r.send(q, ring::next(q, n_), out, messages(out, u_.chunk));
        r.reduce(q, bytes(ring::rs_recv_block(q, s, n_)));
      }
    });
  }
  // all_gather_ring.cc: at step s rank q forwards ag_send_block.
  template <class Bytes>
  void ring_all_gather(Bytes&& bytes) {
    steps(n_ - 1, [&](Round& r, int s) {
      for (int q = 0; q < n_; ++q) {
        const double out = bytes(ring::ag_send_block(q, s, n_));
        r.send(q, ring::next(q, n_), out, messages(out, u_.chunk));
      }
    });
  }

  Timeline& t_;
  const Group& g_;
  const int n_;
  Units u_;
};

// ---- shared memory -----------------------------------------------------------
// A shared-memory collective among L ranks of one host
// (algorithms/shm_collectives.cc), `bytes` as the table counts them:
//   all_reduce, reduce  one-shot up to TUTTI_SHM_ONESHOT_BYTES (every rank
//                       copies its input in and reduces all L: one step),
//                       else two-shot (copy in, reduce one's slice of the L
//                       inputs, copy every slice out: two steps)
//   broadcast           the root's chunks copied out by the others: one step
//   all_gather          own block in, the L - 1 others out: one step
//   reduce_scatter      every block in, one's own block reduced from L
//   all_to_all          every block in, one's own out
//   gather, scatter     the root copies L blocks
//   barrier             one step
// `machine` ranks run such steps at once: where hosts share the machine's
// `cores` (the test-bed), the copies and reductions take that much longer,
// and one operation alone (`latency`) waits for each of those ranks to be
// scheduled at every step. Back-to-back operations do not: a rank finds the
// next step's flag already set. `awake`: the step's ranks all ran the step
// before it (none slept through a step across hosts that others ran): it
// waits for its own host's ranks only.
double shm_time(Collective c, double bytes, int L, const Params& p, std::size_t one_shot, int machine, bool latency,
                bool awake = false) {
  if (L <= 1) return 0;
  const double share = p.cores > 0 ? std::max(1.0, machine / p.cores) : 1.0;
  const double waking = awake ? L : machine;
  const double a = p.cores > 0 && latency ? std::max(p.shm_alpha, waking * p.wake / p.cores) : p.shm_alpha;
  const double cb = p.shm_beta * share, g = p.gamma * share;
  switch (c) {
    case Collective::AllReduce:
    case Collective::Reduce:
      if (bytes <= static_cast<double>(one_shot)) return a + cb * bytes + g * bytes * (L - 1);
      return 2 * a + cb * 2 * bytes + g * bytes * (L - 1) / L;
    case Collective::Broadcast:
      return a + cb * bytes;
    case Collective::AllGather:
    case Collective::Gather:
    case Collective::Scatter:
      return a + cb * L * bytes;
    case Collective::ReduceScatter:
      return a + cb * L * bytes + g * (L - 1) * bytes;
    case Collective::AllToAll:
      return a + cb * 2 * bytes * (L - 1) / L;
    case Collective::Barrier:
      return a;
  }
  return 0;
}

bool rooted(Collective c) {
  return c == Collective::Broadcast || c == Collective::Reduce || c == Collective::Gather || c == Collective::Scatter;
}

// Whether measure m of collective c is the stream measure.
bool streamed(Collective c, Measure m) { return m == Measure::Stream || (m == Measure::Bench && rooted(c)); }

// What a timed choice (algorithms/tuner.h) settles on: the other
// alternative where it saves at least kMargin of the preferred one's time.
bool other_wins(double preferred, double other) { return preferred - other >= detail::Tuner::kMargin * preferred; }

}  // namespace

// ---- Params -----------------------------------------------------------------------

bool Params::set(const std::string& name, double value) {
  for (const ParamField& f : kFields)
    if (name == f.name) {
      this->*f.field = value;
      return true;
    }
  return false;
}

bool Params::read(const std::string& path, std::string* error) {
  std::ifstream in(path);
  if (!in) {
    *error = "cannot read " + path;
    return false;
  }
  std::string line;
  for (int no = 1; std::getline(in, line); ++no) {
    line = line.substr(0, line.find('#'));
    const auto eq = line.find('=');
    std::istringstream name_in(line.substr(0, eq));
    std::string name;
    name_in >> name;
    if (name.empty() && eq == std::string::npos) continue;
    double v = 0;
    std::istringstream value_in(eq == std::string::npos ? "" : line.substr(eq + 1));
    if (!(value_in >> v) || !set(name, v)) {
      std::string names;
      for (const ParamField& f : kFields) names += std::string(names.empty() ? "" : ", ") + f.name;
      *error = path + ":" + std::to_string(no) + ": expected 'NAME = number' with NAME one of " + names;
      return false;
    }
  }
  return true;
}

std::string Params::text() const {
  std::string out;
  char line[200];
  for (const ParamField& f : kFields) {
    std::snprintf(line, sizeof line, "%-9s = %-12.6g # %s\n", f.name, this->*f.field, f.doc);
    out += line;
  }
  return out;
}

// ---- Simulator -----------------------------------------------------------------------

struct Simulator::Impl {
  Params p;
  detail::Config config;
  // A communicator's planner, by (ranks, ranks per host).
  struct Env {
    detail::Shape shape;
    detail::Planner planner;
    Units units;
    // The table's pick for `bytes` a rank: all_to_all's rules count the
    // block a peer, as Communicator::all_to_all asks.
    detail::Plan plan(Collective c, double bytes) const {
      const double table_bytes = c == Collective::AllToAll ? bytes / shape.ranks : bytes;
      return planner.plan(c, static_cast<std::size_t>(table_bytes));
    }
  };
  std::map<std::tuple<int, int, int>, std::unique_ptr<Env>> envs;
  std::map<std::tuple<int, int, int, int>, std::unique_ptr<Round>> pairwise_units;

  // `copies`: groups at once on the same hosts (Shape::copies).
  Env& env(int n, int L, int copies = 1) {
    auto& e = envs[{n, L, copies}];
    if (!e) {
      e = std::make_unique<Env>();
      detail::Shape& s = e->shape;
      s.ranks = n;
      s.hosts = (n + L - 1) / L;
      s.ranks_per_host = std::min(n, L);
      s.single_host = s.hosts <= 1;
      s.two_level = !s.single_host && L >= 2 && n % L == 0;
      s.copies = copies;
      e->planner.configure(config, s);
      e->units.chunk = e->planner.chunk_bytes();
      e->units.small_pipe = e->planner.small_pipe_bytes();
      e->units.small_pipe_max = e->planner.thresholds().network.small_pipe_max_bytes;
    }
    return *e;
  }

  // One network algorithm on group g (whose shape's planner gives the units).
  // `whole`: the whole operation, not a two-level form's step across hosts
  // (see below).
  bool network(Collective c, const Algorithm& a, double bytes, const Group& g, Measure m, double* seconds,
               double* cpu = nullptr, bool whole = false) {
    Env& e = env(g.n, g.per_host);
    Timeline t(g, p);
    Net net(t, e.units);
    const std::string name = a.name;
    bool known = true;
    switch (c) {
      case Collective::AllReduce:
        if (name == "recursive_doubling") {
          net.all_reduce_recursive_doubling(bytes);
        } else if (name == "rabenseifner") {
          net.all_reduce_rabenseifner(bytes);
        } else if (name == "ring") {
          net.all_reduce_ring(bytes);
        } else {
          known = false;
        }
        break;
      case Collective::Broadcast:
        if (name == "binomial") {
          net.broadcast_binomial(bytes);
        } else if (name == "chain") {
          net.broadcast_chain(bytes);
        } else if (name == "scatter_all_gather") {
          net.broadcast_scatter_all_gather(bytes);
        } else {
          known = false;
        }
        break;
      case Collective::Reduce:
        known = name == "binomial" || name == "chain";
        if (name == "binomial") net.reduce_binomial(bytes);
        if (name == "chain") net.reduce_chain(bytes);
        break;
      case Collective::AllGather:
        if (name == "ring") {
          net.all_gather_ring(bytes);
        } else if (name == "bruck") {
          net.all_gather_bruck(bytes);
        } else if (name == "recursive_doubling") {
          net.all_gather_recursive_doubling(bytes);
        } else {
          known = false;
        }
        break;
      case Collective::ReduceScatter:
        if (name == "ring") {
          net.reduce_scatter_ring(bytes);
        } else if (name == "recursive_halving") {
          net.reduce_scatter_recursive_halving(bytes);
        } else {
          known = false;
        }
        break;
      case Collective::AllToAll:
        if (name == "pairwise") {
          net.all_to_all_pairwise(bytes, pairwise_units);
        } else if (name == "bruck") {
          net.all_to_all_bruck(bytes);
        } else {
          known = false;
        }
        break;
      case Collective::Gather:
        known = name == "linear";
        if (known) net.gather_linear(bytes);
        break;
      case Collective::Scatter:
        known = name == "linear";
        if (known) net.scatter_linear(bytes);
        break;
      case Collective::Barrier:
        known = name == "dissemination";
        if (known) net.barrier_dissemination();
        break;
    }
    // Every network algorithm of the registry has a model here: one without
    // is an error, never a silent gap in a table (ctest sim.models_every_algorithm).
    if (!known)
      throw Error(ErrorKind::Internal, std::string("no model of the ") + detail::collective_name(c) + " algorithm '" +
                                           name + "' (tools/tutti-sim/sim.cc, network())");
    // Back to back, no operation outruns the links: a token bucket's credit
    // (`burst`) comes back at the link's rate only, so over a run each
    // operation takes at least its busiest link direction's bytes (without
    // `burst` the rounds' sum holds that already). Not a two-level form's
    // step across hosts: the links idle during its local steps, and the
    // bucket fills.
    *seconds = streamed(c, m)                 ? t.stream()
               : m == Measure::Bench && whole ? std::max(t.latency(), t.link())
                                              : t.latency();
    if (cpu != nullptr) *cpu = t.cpu();
    return true;
  }

  // Whether a timed choice between plan's algorithm and its alternative
  // settles on the alternative. Its trials are short runs (tuner.h), and on
  // a link with a token bucket (`burst`) each starts with the credit the
  // bucket regained meanwhile (while the other alternative's run, bound by
  // its rounds' latencies, left the link idle, and during the barrier
  // before it): they compare one operation alone, each round's first bytes
  // free. On the test-bed (4 x 1 at 1 Gbit/s, 4 KiB) a broadcast's binomial
  // runs of five take less an operation (the slowest member's mean) than
  // the link allows: a trace of every trial's times shows the leaves find
  // their data there already, and its tuner keeps binomial
  // (docs/performance.md, "At scale: the simulator"). On a plain link they
  // compare the times of the measure asked for, `seconds` and `other`.
  bool other_wins_trials(Collective c, double bytes, const Group& g, const detail::Plan& plan, double seconds,
                         double other) {
    if (p.burst <= 0) return other_wins(seconds, other);
    double t0 = 0, t1 = 0;
    return network(c, *plan.algorithm, bytes, g, Measure::Latency, &t0) &&
           network(c, *plan.alternative, bytes, g, Measure::Latency, &t1) && other_wins(t0, t1);
  }

  // What the planner of group g's shape runs over the network, with its
  // timed choice (plan/planner.cc, Planner::configure: all_reduce, broadcast
  // and all_to_all).
  Result table_network(Collective c, double bytes, const Group& g, Measure m, bool whole = false) {
    Env& e = env(g.n, g.per_host, g.copies);
    Result r;
    const detail::Plan plan = e.plan(c, bytes);
    if (plan.algorithm->medium != Medium::Network) {
      // A single-host group (a two-level form's cross communicator of one host).
      r.modeled = true;
      r.seconds = shm_time(c, bytes, g.n, p, config.shm_one_shot_bytes, g.n * g.copies, !streamed(c, m));
      r.what = plan.algorithm->name;
      return r;
    }
    r.modeled = network(c, *plan.algorithm, bytes, g, m, &r.seconds, &r.cpu, whole);
    r.what = plan.algorithm->name;
    double other = 0, other_cpu = 0;
    if (r.modeled && plan.tuner && plan.alternative &&
        network(c, *plan.alternative, bytes, g, m, &other, &other_cpu, whole) &&
        other_wins_trials(c, bytes, g, plan, r.seconds, other)) {
      r.seconds = other;
      r.cpu = other_cpu;
      r.what = std::string(plan.alternative->name) + " (timed against " + plan.algorithm->name + ")";
    }
    return r;
  }

  // media/two_level.cc: local steps in shared memory, cross steps among
  // one rank of each host (H ranks; `copies` of them at once).
  Result two_level(Collective c, double bytes, int n, int L, Measure m) {
    const int H = n / L;
    Group cross{H, 1, 1}, cross_all{H, 1, L};
    const std::size_t one_shot = config.shm_one_shot_bytes;
    const bool stream = streamed(c, m);
    auto shm = [&](Collective k, double b) { return shm_time(k, b, L, p, one_shot, n, !stream); };
    // Back-to-back rooted operations on hosts that share the machine's CPUs:
    // the step across hosts (x) and every rank's local step share them
    // (`root`: the root's own copies).
    auto shared = [&](const Result& x, double root) {
      return p.cores > 0 ? (x.cpu + n * p.step_cpu + root) / p.cores : 0.0;
    };
    // all_gather, reduce_scatter, all_to_all: every rank runs both steps.
    auto shm_awake = [&](Collective k, double b) { return shm_time(k, b, L, p, one_shot, n, !stream, true); };
    Result r;
    r.modeled = true;
    r.what = "two_level";
    switch (c) {
      case Collective::AllReduce:
        r = two_level_all_reduce(bytes, n, L, m);
        break;
      case Collective::Broadcast: {
        const Result x = table_network(c, bytes, cross, m);
        r.seconds = stream ? std::max({x.seconds, shm(c, bytes), shared(x, 0)}) : x.seconds + shm(c, bytes);
        r.what += " (" + x.what + " across)";
        break;
      }
      case Collective::Reduce: {
        const Result x = table_network(c, bytes, cross, m);
        r.seconds = stream ? std::max({x.seconds, shm(c, bytes), shared(x, 0)}) : shm(c, bytes) + x.seconds;
        r.what += " (" + x.what + " across)";
        break;
      }
      case Collective::Gather:
      case Collective::Scatter: {
        // A host's L blocks across; the root places (or packs) all n.
        const Result x = table_network(c, L * bytes, cross, m);
        const double local = shm(c, bytes) + p.shm_beta * n * bytes;
        r.seconds = stream ? std::max({x.seconds, local, shared(x, p.shm_beta * n * bytes)}) : local + x.seconds;
        r.what += " (" + x.what + " across)";
        break;
      }
      case Collective::AllGather: {
        const Result x = table_network(c, bytes, cross_all, m);
        r.seconds = x.seconds + shm_awake(c, H * bytes) + p.shm_beta * n * bytes;
        r.what += " (" + x.what + " across)";
        break;
      }
      case Collective::ReduceScatter: {
        const Result x = table_network(c, bytes, cross_all, m);
        r.seconds = p.shm_beta * n * bytes + shm_awake(c, H * bytes) + x.seconds;
        r.what += " (" + x.what + " across)";
        break;
      }
      case Collective::AllToAll: {
        // `bytes`: a rank's whole send buffer, packed by local index, then
        // by host (two copies of it) around the local exchange.
        const Result x = table_network(c, bytes, cross_all, m);
        r.seconds = 2 * p.shm_beta * bytes + shm_awake(c, bytes) + x.seconds;
        r.what += " (" + x.what + " across)";
        break;
      }
      default:
        r.modeled = false;
    }
    return r;
  }

  Result two_level_all_reduce(double S, int n, int L, Measure m) {
    const int H = n / L;
    Env& e = env(n, L);
    const detail::TwoLevelThresholds& th = e.planner.thresholds().two_level;
    const detail::TwoLevelChoices choices = e.planner.two_level_choices(L);
    const std::size_t one_shot = config.shm_one_shot_bytes;
    // The local steps of one operation alone wait for their own host's ranks
    // only: on the test-bed the leader form at 8 B-512 B on 4 x 2 takes what
    // two steps across hosts and two of one host's wake-ups cost, not two of
    // the whole machine's (docs/performance.md, "At scale: the simulator").
    auto shm = [&](Collective k, double b) {
      return shm_time(k, b, L, p, one_shot, n, !streamed(Collective::AllReduce, m), true);
    };
    auto across = [&](double b, int copies) {
      return b > 0 ? table_network(Collective::AllReduce, b, Group{H, 1, copies}, m).seconds : 0.0;
    };
    // One leader per host.
    const auto leader = [&] { return shm(Collective::Reduce, S) + across(S, 1) + shm(Collective::Broadcast, S); };
    // Every local rank with a slice (in pieces: the local steps of one piece
    // overlap the step across hosts of another).
    const auto slices = [&](std::size_t pieces) {
      const std::size_t count = static_cast<std::size_t>(S) / kElem, Lz = static_cast<std::size_t>(L);
      const std::size_t q = count / Lz;
      double t = 0;
      if (q > 0) {
        const std::size_t piece =
            pieces == 0 ? q
                        : std::clamp((q + pieces - 1) / pieces, std::max<std::size_t>(1, th.least_piece_bytes / kElem),
                                     std::max<std::size_t>(1, th.most_piece_bytes / kElem));
        if (piece >= q) {
          const double b = static_cast<double>(q * kElem);
          t = shm(Collective::ReduceScatter, b) + across(b, L) + shm(Collective::AllGather, b);
        } else {
          const double b = static_cast<double>(piece * kElem);
          const double n_pieces = std::ceil(static_cast<double>(q) / piece);
          const double local = shm(Collective::ReduceScatter, b) + shm(Collective::AllGather, b);
          const double cross = across(b, L);
          t = local + cross + (n_pieces - 1) * std::max(local, cross);
        }
      }
      const double tail = static_cast<double>((count - q * Lz) * kElem);
      if (tail > 0) t += shm(Collective::AllReduce, tail) + across(tail, 1);
      return t;
    };
    Result r;
    r.modeled = true;
    const std::size_t bytes = static_cast<std::size_t>(S);
    const int preferred = bytes <= config.two_level_leader_bytes ? 0 : 1;
    const auto pick = [&](double t0, const char* what0, double t1, const char* what1, int pref) {
      const bool one = pref == 0 ? other_wins(t0, t1) : !other_wins(t1, t0);
      r.seconds = one ? t1 : t0;
      r.what = std::string("two_level (") + (one ? what1 : what0) + ")";
    };
    if (choices.flat && choices.flat->covers(bytes)) {
      double flat = 0;
      network(Collective::AllReduce, *detail::find_algorithm(Collective::AllReduce, "recursive_doubling"), S,
              Group{n, L, 1}, m, &flat, nullptr, true);
      pick(leader(), "leader", flat, "flat recursive_doubling", 0);
    } else if (choices.forms && choices.forms->covers(bytes)) {
      pick(leader(), "leader", slices(th.pieces), "slices", preferred);
    } else if (preferred == 1 && choices.pieces && choices.pieces->covers(bytes)) {
      pick(slices(0), "slices whole", slices(th.pieces), "slices in pieces", 1);
    } else if (preferred == 1 && choices.piece_size && choices.piece_size->covers(bytes)) {
      pick(slices(th.fewer_pieces), "slices, pieces of an 8th", slices(th.pieces), "slices, pieces of a 32nd", 1);
    } else {
      r.seconds = preferred == 0 ? leader() : slices(th.pieces);
      r.what = preferred == 0 ? "two_level (leader)" : "two_level (slices)";
    }
    return r;
  }
};

Simulator::Simulator(const Params& p) : impl_(std::make_unique<Impl>()) {
  impl_->p = p;
  impl_->config = detail::Config::from_env();
}
Simulator::~Simulator() = default;

std::vector<const Algorithm*> Simulator::candidates(Collective c, int ranks, int per_host) const {
  const int L = std::min(ranks, per_host);
  const bool single = ranks <= L, two_level = !single && L >= 2 && ranks % L == 0;
  std::vector<const Algorithm*> out;
  for (const Algorithm& a : detail::algorithms()) {
    if (a.collective != c) continue;
    if (a.medium == Medium::SharedMemory && !single) continue;
    if (a.medium == Medium::TwoLevel && !two_level) continue;
    out.push_back(&a);
  }
  return out;
}

Result Simulator::run(Collective c, std::size_t bytes, int ranks, int per_host, const Algorithm* algo, Measure m,
                      int copies) {
  Impl& s = *impl_;
  const int L = std::min(ranks, per_host);
  const Group g{ranks, L, std::max(copies, 1)};
  const double b = static_cast<double>(bytes);
  Result r;
  if (algo == nullptr) {
    const detail::Plan plan = s.env(ranks, L, g.copies).plan(c, b);
    switch (plan.algorithm->medium) {
      case Medium::SharedMemory:
        r.modeled = true;
        r.seconds = shm_time(c, b, ranks, s.p, s.config.shm_one_shot_bytes, ranks, !streamed(c, m));
        r.what = plan.algorithm->name;
        return r;
      case Medium::TwoLevel:
        return s.two_level(c, b, ranks, L, m);
      case Medium::Network:
        return s.table_network(c, b, g, m, true);
    }
    return r;
  }
  if (algo->collective != c) return r;
  r.what = algo->name;
  const bool single = ranks <= L, two_level = !single && L >= 2 && ranks % L == 0;
  switch (algo->medium) {
    case Medium::SharedMemory:
      if (!single) return r;
      r.modeled = true;
      r.seconds = shm_time(c, b, ranks, s.p, s.config.shm_one_shot_bytes, ranks, !streamed(c, m));
      return r;
    case Medium::TwoLevel:
      if (!two_level) return r;
      return s.two_level(c, b, ranks, L, m);
    case Medium::Network:
      r.modeled = s.network(c, *algo, b, g, m, &r.seconds, nullptr, true);
      return r;
  }
  return r;
}

}  // namespace tutti::sim
