// Pure rank arithmetic of the communication patterns (src/patterns), checked
// exhaustively for every world size 1..64 and, where it matters, every root
// and rank. Each pattern is simulated with sets of contributions (one bit per
// rank in a 64-bit mask), without any I/O between ranks.

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <vector>

#include "patterns/binomial.h"
#include "patterns/bruck.h"
#include "patterns/chain.h"
#include "patterns/dissemination.h"
#include "patterns/pairwise.h"
#include "patterns/recursive_doubling.h"
#include "patterns/ring.h"

namespace {

namespace ring = tutti::detail::ring;
namespace binomial = tutti::detail::binomial;
namespace rd = tutti::detail::recursive_doubling;
namespace dissemination = tutti::detail::dissemination;
namespace pairwise = tutti::detail::pairwise;
namespace bruck = tutti::detail::bruck;
namespace chain = tutti::detail::chain;

using Mask = std::uint64_t;  // set of ranks (bit r = rank r)

constexpr int kMaxWorld = 64;

Mask bit(int r) { return Mask(1) << r; }
Mask all_ranks(int n) { return n == 64 ? ~Mask(0) : bit(n) - 1; }
// ceil(log2 n) for n >= 1, computed independently of the headers.
int ceil_log2(int n) {
  int k = 0;
  while ((std::int64_t(1) << k) < n) ++k;
  return k;
}

// ---- ring ------------------------------------------------------------------

TEST(PatternRing, NextPrevAreInversePermutationsFormingOneCycle) {
  for (int n = 1; n <= kMaxWorld; ++n) {
    Mask seen_next = 0, seen_prev = 0;
    for (int r = 0; r < n; ++r) {
      int nx = ring::next(r, n), pv = ring::prev(r, n);
      ASSERT_GE(nx, 0);
      ASSERT_LT(nx, n);
      ASSERT_GE(pv, 0);
      ASSERT_LT(pv, n);
      EXPECT_EQ(ring::prev(nx, n), r) << "n=" << n << " r=" << r;
      EXPECT_EQ(ring::next(pv, n), r) << "n=" << n << " r=" << r;
      seen_next |= bit(nx);
      seen_prev |= bit(pv);
    }
    EXPECT_EQ(seen_next, all_ranks(n)) << "next is not a permutation, n=" << n;
    EXPECT_EQ(seen_prev, all_ranks(n)) << "prev is not a permutation, n=" << n;
    // A single cycle: walking next from 0 visits every rank before returning.
    Mask walked = 0;
    int r = 0;
    for (int i = 0; i < n; ++i) {
      EXPECT_FALSE(walked & bit(r)) << "n=" << n << " cycle shorter than n";
      walked |= bit(r);
      r = ring::next(r, n);
    }
    EXPECT_EQ(r, 0) << "n=" << n;
    EXPECT_EQ(walked, all_ranks(n)) << "n=" << n;
  }
}

TEST(PatternRing, ModHandlesNegatives) {
  for (int n = 1; n <= kMaxWorld; ++n)
    for (int a = -3 * n; a <= 3 * n; ++a) {
      int m = ring::mod(a, n);
      ASSERT_GE(m, 0);
      ASSERT_LT(m, n);
      ASSERT_EQ((a - m) % n, 0) << "a=" << a << " n=" << n;
    }
}

TEST(PatternRing, ReduceScatterScheduleEndsWithFullBlockROnRankR) {
  for (int n = 1; n <= kMaxWorld; ++n) {
    // state[r][b]: the ranks whose contribution to block b rank r holds.
    std::vector<std::vector<Mask>> state(n, std::vector<Mask>(n));
    for (int r = 0; r < n; ++r)
      for (int b = 0; b < n; ++b) state[r][b] = bit(r);

    for (int s = 0; s < n - 1; ++s) {
      std::vector<int> sent_block(n);
      std::vector<Mask> sent(n);
      for (int r = 0; r < n; ++r) {
        int b = ring::rs_send_block(r, s, n);
        ASSERT_GE(b, 0);
        ASSERT_LT(b, n);
        // Pipelining: after step 0, a rank forwards the block it just reduced.
        if (s > 0) {
          EXPECT_EQ(b, ring::rs_recv_block(r, s - 1, n)) << "n=" << n << " r=" << r << " s=" << s;
        }
        sent_block[r] = b;
        sent[r] = state[r][b];
      }
      for (int r = 0; r < n; ++r) {
        int from = ring::prev(r, n);
        int b = ring::rs_recv_block(r, s, n);
        ASSERT_EQ(b, ring::rs_send_block(from, s, n)) << "n=" << n << " r=" << r << " s=" << s;
        ASSERT_EQ(b, sent_block[from]);
        // Reducing must never count a contribution twice.
        ASSERT_EQ(state[r][b] & sent[from], Mask(0))
            << "double-counted contribution, n=" << n << " r=" << r << " s=" << s << " block=" << b;
        state[r][b] |= sent[from];
      }
    }
    for (int r = 0; r < n; ++r)
      EXPECT_EQ(state[r][r], all_ranks(n)) << "rank " << r << " of " << n << " lacks contributions to block " << r;
  }
}

TEST(PatternRing, AllGatherScheduleDeliversEveryBlockExactlyOnce) {
  for (int n = 1; n <= kMaxWorld; ++n) {
    std::vector<Mask> have(n);
    std::vector<std::vector<int>> received(n, std::vector<int>(n, 0));
    for (int r = 0; r < n; ++r) have[r] = bit(r);

    for (int s = 0; s < n - 1; ++s) {
      std::vector<int> sent_block(n);
      for (int r = 0; r < n; ++r) {
        int b = ring::ag_send_block(r, s, n);
        ASSERT_GE(b, 0);
        ASSERT_LT(b, n);
        ASSERT_TRUE(have[r] & bit(b)) << "rank " << r << " forwards block " << b << " it lacks, n=" << n << " s=" << s;
        sent_block[r] = b;
      }
      for (int r = 0; r < n; ++r) {
        int from = ring::prev(r, n);
        int b = ring::ag_recv_block(r, s, n);
        ASSERT_EQ(b, ring::ag_send_block(from, s, n)) << "n=" << n << " r=" << r << " s=" << s;
        ASSERT_EQ(b, sent_block[from]);
        EXPECT_NE(b, r) << "rank receives its own block, n=" << n << " s=" << s;
        ++received[r][b];
        have[r] |= bit(b);
      }
    }
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(have[r], all_ranks(n)) << "rank " << r << " of " << n;
      for (int b = 0; b < n; ++b)
        EXPECT_EQ(received[r][b], b == r ? 0 : 1) << "n=" << n << " rank " << r << " block " << b;
    }
  }
}

// ---- binomial ----------------------------------------------------------------

TEST(PatternBinomial, VirtualRealRoundTrip) {
  for (int n = 1; n <= kMaxWorld; ++n)
    for (int root = 0; root < n; ++root)
      for (int r = 0; r < n; ++r) {
        int v = binomial::to_virtual(r, root, n);
        ASSERT_GE(v, 0);
        ASSERT_LT(v, n);
        ASSERT_EQ(binomial::to_real(v, root, n), r) << "n=" << n << " root=" << root << " r=" << r;
      }
}

TEST(PatternBinomial, SpanningTreeForEveryRoot) {
  for (int n = 1; n <= kMaxWorld; ++n) {
    const int max_depth = ceil_log2(n);
    for (int root = 0; root < n; ++root) {
      EXPECT_EQ(binomial::parent(root, root, n), -1) << "n=" << n << " root=" << root;
      // Walk down from the root via children; every rank must be reached once.
      std::vector<int> depth(n, -1);
      std::vector<int> stack{root};
      depth[root] = 0;
      int reached = 1;
      while (!stack.empty()) {
        int r = stack.back();
        stack.pop_back();
        for (int c : binomial::children(r, root, n)) {
          ASSERT_GE(c, 0) << "n=" << n << " root=" << root << " r=" << r;
          ASSERT_LT(c, n) << "n=" << n << " root=" << root << " r=" << r;
          ASSERT_EQ(depth[c], -1) << "rank " << c << " reached twice, n=" << n << " root=" << root;
          EXPECT_EQ(binomial::parent(c, root, n), r) << "n=" << n << " root=" << root << " child=" << c;
          depth[c] = depth[r] + 1;
          ++reached;
          stack.push_back(c);
        }
      }
      EXPECT_EQ(reached, n) << "n=" << n << " root=" << root;
      for (int r = 0; r < n; ++r) {
        EXPECT_GE(depth[r], 0) << "rank " << r << " unreachable, n=" << n << " root=" << root;
        EXPECT_LE(depth[r], max_depth) << "n=" << n << " root=" << root << " r=" << r;
        // Upward: parent chain reaches the root in exactly depth[r] hops, and
        // every non-root rank appears among its parent's children.
        int hops = 0;
        for (int x = r; x != root; x = binomial::parent(x, root, n)) {
          int p = binomial::parent(x, root, n);
          ASSERT_GE(p, 0) << "n=" << n << " root=" << root << " x=" << x;
          auto ch = binomial::children(p, root, n);
          EXPECT_NE(std::find(ch.begin(), ch.end(), x), ch.end()) << "n=" << n << " root=" << root << " x=" << x;
          ASSERT_LE(++hops, n);
        }
        EXPECT_EQ(hops, depth[r]) << "n=" << n << " root=" << root << " r=" << r;
      }
    }
  }
}

TEST(PatternBinomial, ChildrenDistinctLargestSubtreeFirst) {
  for (int n = 1; n <= kMaxWorld; ++n)
    for (int root = 0; root < n; ++root)
      for (int r = 0; r < n; ++r) {
        const int v = binomial::to_virtual(r, root, n);
        const auto ch = binomial::children(r, root, n);
        // Expected: v + 2^k for each 2^k below v's lowest set bit (below n
        // for the root) with v + 2^k < n, in decreasing k.
        std::vector<int> expect;
        const int limit = v == 0 ? n : (v & -v);
        for (int m = 1; m < limit && v + m < n; m <<= 1) expect.insert(expect.begin(), (v + m + root) % n);
        EXPECT_EQ(ch, expect) << "n=" << n << " root=" << root << " r=" << r;

        Mask seen = 0;
        int prev_offset = 1 << 30;
        for (int c : ch) {
          EXPECT_FALSE(seen & bit(c)) << "duplicate child " << c << ", n=" << n << " root=" << root << " r=" << r;
          seen |= bit(c);
          int off = binomial::to_virtual(c, root, n) - v;
          EXPECT_TRUE(off > 0 && std::has_single_bit(static_cast<unsigned>(off)))
              << "n=" << n << " root=" << root << " r=" << r << " c=" << c;
          // Largest subtree first: a child at offset 2^k spans up to 2^k ranks.
          EXPECT_LT(off, prev_offset) << "children not in decreasing subtree order, n=" << n << " root=" << root
                                      << " r=" << r;
          prev_offset = off;
        }
      }
}

// ---- recursive doubling ------------------------------------------------------

TEST(PatternRecursiveDoubling, FoldPartitionsRanks) {
  for (int n = 1; n <= kMaxWorld; ++n) {
    const int p = rd::largest_pow2_le(n);
    EXPECT_TRUE(std::has_single_bit(static_cast<unsigned>(p)));
    EXPECT_LE(p, n);
    EXPECT_GT(2 * p, n);
    const int rem = n - p;
    Mask folded_out = 0, vranks = 0;
    for (int r = 0; r < n; ++r) {
      auto f = rd::fold(r, n);
      EXPECT_EQ(f.p, p);
      EXPECT_EQ(f.rem, rem);
      if (f.vrank < 0) {
        EXPECT_EQ(f.vrank, -1);
        folded_out |= bit(r);
      } else {
        ASSERT_LT(f.vrank, p) << "n=" << n << " r=" << r;
        EXPECT_FALSE(vranks & bit(f.vrank)) << "vrank " << f.vrank << " used twice, n=" << n;
        vranks |= bit(f.vrank);
        EXPECT_EQ(rd::real_rank(f.vrank, f), r) << "n=" << n << " r=" << r;
      }
    }
    Mask expect_out = 0;
    for (int r = 0; r < 2 * rem; r += 2) expect_out |= bit(r);
    EXPECT_EQ(folded_out, expect_out) << "n=" << n;
    EXPECT_EQ(vranks, all_ranks(p)) << "n=" << n;
  }
}

TEST(PatternRecursiveDoubling, SimulatedAllReduceReachesEveryRank) {
  for (int n = 1; n <= kMaxWorld; ++n) {
    std::vector<Mask> data(n);
    for (int r = 0; r < n; ++r) data[r] = bit(r);
    const auto f0 = rd::fold(0, n);
    const int p = f0.p, rem = f0.rem;

    // Fold: even ranks below 2*rem hand their data to the odd neighbour.
    for (int r = 0; r < 2 * rem; r += 2) {
      ASSERT_EQ(rd::fold(r, n).vrank, -1);
      ASSERT_GE(rd::fold(r + 1, n).vrank, 0) << "n=" << n << " r=" << r + 1;
      ASSERT_EQ(data[r + 1] & data[r], Mask(0));
      data[r + 1] |= data[r];
    }
    // Exchange rounds among the p participants.
    int rounds = 0;
    for (int mask = 1; mask < p; mask <<= 1, ++rounds) {
      std::vector<Mask> next = data;
      for (int v = 0; v < p; ++v) {
        const int me = rd::real_rank(v, f0);
        const auto f = rd::fold(me, n);
        ASSERT_EQ(f.vrank, v);
        const int peer = rd::partner(v, mask, f);
        ASSERT_GE(peer, 0);
        ASSERT_LT(peer, n);
        ASSERT_NE(peer, me) << "n=" << n << " v=" << v << " mask=" << mask;
        const auto pf = rd::fold(peer, n);
        ASSERT_GE(pf.vrank, 0) << "partner " << peer << " is folded out, n=" << n << " v=" << v << " mask=" << mask;
        EXPECT_EQ(pf.vrank, v ^ mask);
        EXPECT_EQ(rd::partner(pf.vrank, mask, pf), me)
            << "partner not symmetric, n=" << n << " v=" << v << " mask=" << mask;
        ASSERT_EQ(data[me] & data[peer], Mask(0))
            << "double-counted contribution, n=" << n << " v=" << v << " mask=" << mask;
        next[me] = data[me] | data[peer];
      }
      data = next;
    }
    EXPECT_EQ(1 << rounds, p);
    // Unfold: odd ranks below 2*rem hand the result back.
    for (int r = 1; r < 2 * rem; r += 2) data[r - 1] = data[r];
    for (int r = 0; r < n; ++r) EXPECT_EQ(data[r], all_ranks(n)) << "rank " << r << " of " << n;
  }
}

// ---- dissemination -------------------------------------------------------------

TEST(PatternDissemination, RoundsIsCeilLog2) {
  for (int n = 1; n <= kMaxWorld; ++n) EXPECT_EQ(dissemination::rounds(n), ceil_log2(n)) << "n=" << n;
  EXPECT_EQ(dissemination::rounds(1), 0);
  EXPECT_EQ(dissemination::rounds(2), 1);
  EXPECT_EQ(dissemination::rounds(3), 2);
  EXPECT_EQ(dissemination::rounds(64), 6);
  EXPECT_EQ(dissemination::rounds(65), 7);
}

TEST(PatternDissemination, EveryRankHearsFromEveryRank) {
  for (int n = 1; n <= kMaxWorld; ++n) {
    const int rounds = dissemination::rounds(n);
    std::vector<Mask> know(n);
    for (int r = 0; r < n; ++r) know[r] = bit(r);
    for (int k = 0; k < rounds; ++k) {
      if (n > 1) {
        // Not done early: ceil(log2 n) rounds are needed, not just enough.
        bool all_done = true;
        for (int r = 0; r < n; ++r) all_done &= know[r] == all_ranks(n);
        EXPECT_FALSE(all_done) << "n=" << n << " finished before round " << k;
      }
      std::vector<Mask> next = know;
      Mask targets = 0;
      for (int r = 0; r < n; ++r) {
        const int from = dissemination::from(r, k, n);
        const int to = dissemination::to(r, k, n);
        ASSERT_GE(from, 0);
        ASSERT_LT(from, n);
        ASSERT_GE(to, 0);
        ASSERT_LT(to, n);
        EXPECT_EQ(dissemination::to(from, k, n), r) << "n=" << n << " r=" << r << " k=" << k;
        EXPECT_EQ(dissemination::from(to, k, n), r) << "n=" << n << " r=" << r << " k=" << k;
        targets |= bit(to);
        next[r] |= know[from];
      }
      EXPECT_EQ(targets, all_ranks(n)) << "signal targets not a permutation, n=" << n << " k=" << k;
      know = next;
    }
    for (int r = 0; r < n; ++r) EXPECT_EQ(know[r], all_ranks(n)) << "rank " << r << " of " << n;
  }
}

// ---- pairwise ------------------------------------------------------------------

TEST(PatternPairwise, EachStepIsAPermutationAndEveryPairMeetsOnce) {
  for (int n = 1; n <= kMaxWorld; ++n) {
    std::vector<std::vector<int>> met(n, std::vector<int>(n, 0));
    for (int s = 1; s < n; ++s) {
      Mask targets = 0, sources = 0;
      for (int r = 0; r < n; ++r) {
        const int to = pairwise::send_to(r, s, n);
        const int from = pairwise::recv_from(r, s, n);
        ASSERT_GE(to, 0);
        ASSERT_LT(to, n);
        ASSERT_GE(from, 0);
        ASSERT_LT(from, n);
        EXPECT_NE(to, r) << "n=" << n << " s=" << s;
        EXPECT_EQ(pairwise::recv_from(to, s, n), r) << "n=" << n << " r=" << r << " s=" << s;
        EXPECT_EQ(pairwise::send_to(from, s, n), r) << "n=" << n << " r=" << r << " s=" << s;
        targets |= bit(to);
        sources |= bit(from);
        ++met[r][to];
      }
      EXPECT_EQ(targets, all_ranks(n)) << "send_to not a permutation, n=" << n << " s=" << s;
      EXPECT_EQ(sources, all_ranks(n)) << "recv_from not a permutation, n=" << n << " s=" << s;
    }
    for (int a = 0; a < n; ++a)
      for (int b = 0; b < n; ++b)
        EXPECT_EQ(met[a][b], a == b ? 0 : 1) << "n=" << n << " pair (" << a << "," << b << ")";
  }
}

// ---- recursive halving / doubling over participants ----------------------------

TEST(PatternRecursiveDoubling, FirstRealSplitsRanksIntoParticipantRanges) {
  for (int n = 1; n <= kMaxWorld; ++n) {
    for (int r = 0; r < n; ++r) {
      const rd::Fold f = rd::fold(r, n);
      EXPECT_EQ(rd::first_real(0, f), 0) << "n=" << n;
      EXPECT_EQ(rd::first_real(f.p, f), n) << "n=" << n;
      for (int v = 0; v < f.p; ++v) {
        const int lo = rd::first_real(v, f), hi = rd::first_real(v + 1, f);
        EXPECT_EQ(hi - lo, v < f.rem ? 2 : 1) << "n=" << n << " v=" << v;
        // The participant's own real rank is in its range, and is the last.
        EXPECT_EQ(rd::real_rank(v, f), hi - 1) << "n=" << n << " v=" << v;
      }
    }
  }
}

TEST(PatternRecursiveDoubling, GroupsAreAlignedAndHoldTheirMember) {
  for (int p = 1; p <= kMaxWorld; p *= 2)
    for (int v = 0; v < p; ++v)
      for (int size = 1; size <= p; size *= 2) {
        const rd::Range g = rd::group(v, size);
        EXPECT_EQ(g.hi - g.lo, size);
        EXPECT_EQ(g.lo % size, 0);
        EXPECT_TRUE(g.lo <= v && v < g.hi) << "p=" << p << " v=" << v << " size=" << size;
      }
}

Mask range_mask(rd::Range g) {
  Mask m = 0;
  for (int i = g.lo; i < g.hi; ++i) m |= bit(i);
  return m;
}

TEST(PatternRecursiveDoubling, SimulatedHalvingThenDoublingReducesAndGathersEveryRange) {
  for (int p = 1; p <= kMaxWorld; p *= 2) {
    // partial[v][b]: the participants whose input participant v holds for range b.
    std::vector<std::vector<Mask>> partial(p, std::vector<Mask>(p));
    for (int v = 0; v < p; ++v)
      for (int b = 0; b < p; ++b) partial[v][b] = bit(v);
    for (int mask = p / 2; mask >= 1; mask >>= 1) {
      auto next = partial;
      for (int v = 0; v < p; ++v) {
        const int pv = v ^ mask;
        const rd::Range keep = rd::group(v, mask), give = rd::group(pv, mask);
        // Halves of the group held so far; what the partner gives is what v keeps.
        EXPECT_EQ(range_mask(keep) | range_mask(give), range_mask(rd::group(v, 2 * mask)));
        EXPECT_EQ(range_mask(keep) & range_mask(give), 0u);
        const rd::Range partner_give = rd::group(v, mask);
        EXPECT_EQ(partner_give.lo, keep.lo);
        for (int b = keep.lo; b < keep.hi; ++b) {
          EXPECT_EQ(partial[v][b] & partial[pv][b], 0u) << "a contribution counted twice, p=" << p;
          next[v][b] = partial[v][b] | partial[pv][b];
        }
      }
      partial = next;
    }
    for (int v = 0; v < p; ++v) EXPECT_EQ(partial[v][v], all_ranks(p)) << "p=" << p << " v=" << v;
    // Doubling: v holds group(v, mask) entering each round.
    std::vector<Mask> have(p);
    for (int v = 0; v < p; ++v) have[v] = bit(v);
    for (int mask = 1; mask < p; mask <<= 1) {
      auto next = have;
      for (int v = 0; v < p; ++v) {
        EXPECT_EQ(have[v], range_mask(rd::group(v, mask)));
        EXPECT_EQ(have[v ^ mask], range_mask(rd::group(v ^ mask, mask)));
        next[v] = have[v] | have[v ^ mask];
      }
      have = next;
    }
    for (int v = 0; v < p; ++v) EXPECT_EQ(have[v], all_ranks(p));
  }
}

// ---- Bruck -----------------------------------------------------------------------

TEST(PatternBruck, SimulatedAllGatherFillsEverySlotOnce) {
  for (int n = 1; n <= kMaxWorld; ++n) {
    std::vector<std::vector<int>> slot(n, std::vector<int>(n, -1));  // owner of the block in slot i
    for (int r = 0; r < n; ++r) slot[r][0] = r;
    for (int k = 0; k < bruck::rounds(n); ++k) {
      const int dist = 1 << k, c = bruck::ag_count(k, n);
      ASSERT_GT(c, 0);
      auto next = slot;
      for (int r = 0; r < n; ++r) {
        const int to = bruck::ag_send_to(r, k, n);
        EXPECT_EQ(bruck::ag_recv_from(to, k, n), r) << "n=" << n << " k=" << k;
        for (int i = 0; i < c; ++i) {
          ASSERT_NE(slot[r][i], -1) << "sends an empty slot, n=" << n;
          ASSERT_EQ(slot[to][dist + i], -1) << "overwrites a slot, n=" << n;
          next[to][dist + i] = slot[r][i];
        }
      }
      slot = next;
    }
    EXPECT_EQ(bruck::rounds(n), ceil_log2(n));
    for (int r = 0; r < n; ++r)
      for (int i = 0; i < n; ++i) EXPECT_EQ(slot[r][i], bruck::ag_slot_owner(r, i, n)) << "n=" << n;
  }
}

TEST(PatternBruck, SimulatedAllToAllDeliversEveryBlock) {
  for (int n = 1; n <= kMaxWorld; ++n) {
    // (source, destination) of the block in each slot.
    std::vector<std::vector<std::pair<int, int>>> slot(n, std::vector<std::pair<int, int>>(n));
    for (int r = 0; r < n; ++r)
      for (int i = 0; i < n; ++i) slot[r][i] = {r, bruck::a2a_initial_dest(r, i, n)};
    for (int k = 0; k < bruck::rounds(n); ++k) {
      auto next = slot;
      for (int r = 0; r < n; ++r) {
        const int to = bruck::a2a_send_to(r, k, n);
        EXPECT_EQ(bruck::a2a_recv_from(to, k, n), r);
        for (int i = 0; i < n; ++i)
          if (bruck::a2a_moves(i, k)) next[to][i] = slot[r][i];
      }
      slot = next;
    }
    for (int d = 0; d < n; ++d)
      for (int i = 0; i < n; ++i) {
        EXPECT_EQ(slot[d][i].second, d) << "n=" << n << " slot " << i;
        EXPECT_EQ(slot[d][i].first, bruck::a2a_final_source(d, i, n)) << "n=" << n << " slot " << i;
      }
  }
}

// ---- chain and binomial subtrees ----------------------------------------------------

TEST(PatternChain, VisitsEveryRankOnceFromTheRoot) {
  for (int n = 1; n <= kMaxWorld; ++n)
    for (int root = 0; root < n; ++root) {
      EXPECT_EQ(chain::prev(root, root, n), -1);
      Mask seen = 0;
      int r = root, hops = 0;
      while (r != -1) {
        ASSERT_FALSE(seen & bit(r));
        seen |= bit(r);
        const int nx = chain::next(r, root, n);
        if (nx != -1) {
          EXPECT_EQ(chain::prev(nx, root, n), r);
        }
        r = nx;
        ++hops;
      }
      EXPECT_EQ(seen, all_ranks(n));
      EXPECT_EQ(hops, n);
    }
}

TEST(PatternBinomial, ChildSubtreesPartitionTheParentsRange) {
  for (int n = 1; n <= kMaxWorld; ++n)
    for (int root = 0; root < n; ++root)
      for (int r = 0; r < n; ++r) {
        const int v = binomial::to_virtual(r, root, n);
        Mask covered = bit(v);
        for (int c : binomial::children(r, root, n)) {
          const int cv = binomial::to_virtual(c, root, n);
          for (int u = cv; u < binomial::subtree_end(cv, n); ++u) {
            EXPECT_FALSE(covered & bit(u)) << "n=" << n << " root=" << root << " r=" << r;
            covered |= bit(u);
          }
        }
        Mask want = 0;
        for (int u = v; u < binomial::subtree_end(v, n); ++u) want |= bit(u);
        EXPECT_EQ(covered, want) << "n=" << n << " root=" << root << " r=" << r;
      }
}

}  // namespace
