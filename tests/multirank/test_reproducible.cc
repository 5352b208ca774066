// Reproducible sums (Communicator::set_reproducible, TUTTI_REPRODUCIBLE):
// the same contributions give the same bits on every run whatever the
// algorithm (each forced in turn, or the tuner's), the medium (shared
// memory, TCP), the slot, chunk and one-shot sizes, and which rank holds
// which contribution. One launch per world size (2 to 8) and settings set;
// each rank hashes its result of every case, the runs' hashes must agree,
// and within a run every permutation of the contributions must give the
// same bytes. Every result is also checked against the exact sum.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "harness/spawn.h"
#include "reduce/reduce.h"

namespace tutti::testing {
namespace {

namespace fs = std::filesystem;

// The settings of each run: shared memory as the table has it, timed, with
// small slots and two-shot only, one-shot with single copy; TCP with each
// network algorithm of all_reduce, reduce and reduce_scatter forced, and of
// all_gather and all_to_all, which the mode runs on the network (two of them
// with small chunks), and timed.
const std::vector<std::vector<std::pair<std::string, std::string>>> kRuns = {
    {},
    {{"TUTTI_ALGO_TUNING", "on"},
     {"TUTTI_SHM_SLOT_BYTES", "4096"},
     {"TUTTI_SHM_ONESHOT_BYTES", "0"},
     {"TUTTI_SHM_CMA_BYTES", "0"}},
    {{"TUTTI_SHM_ONESHOT_BYTES", "1M"}, {"TUTTI_SHM_CMA_BYTES", "4096"}},
    {{"TUTTI_TRANSPORT", "tcp"},
     {"TUTTI_ALGO",
      "all_reduce:recursive_doubling,reduce:binomial,reduce_scatter:recursive_halving,all_gather:recursive_doubling,"
      "all_to_all:bruck"}},
    {{"TUTTI_TRANSPORT", "tcp"},
     {"TUTTI_ALGO", "all_reduce:rabenseifner,reduce:chain,reduce_scatter:ring,all_gather:bruck,all_to_all:pairwise"},
     {"TUTTI_CHUNK_BYTES", "4096"}},
    {{"TUTTI_TRANSPORT", "tcp"}, {"TUTTI_ALGO", "all_reduce:ring,all_gather:ring"}, {"TUTTI_CHUNK_BYTES", "1024"}},
    {{"TUTTI_TRANSPORT", "tcp"}, {"TUTTI_ALGO_TUNING", "on"}},
};

const DataType kTypes[] = {DataType::Float32, DataType::Float64,   DataType::BFloat16,
                           DataType::Float16, DataType::Complex64, DataType::Complex128};

std::size_t reals_of(DataType dt) { return dt == DataType::Complex64 || dt == DataType::Complex128 ? 2 : 1; }
DataType real_of(DataType dt) {
  return dt == DataType::Complex64 ? DataType::Float32 : dt == DataType::Complex128 ? DataType::Float64 : dt;
}

std::uint64_t mix(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Contribution `who` of case `id`: random magnitudes over 40 binades (20
// for float16), random signs; in some cases exact cancellation
// (contribution 1 negates contribution 0), values 2^100 apart in a block,
// or infinities and NaN.
double value(std::uint64_t id, int who, std::size_t i, DataType real) {
  if (id % 5 == 1 && who == 1) return -value(id, 0, i, real);
  const std::uint64_t g = mix(id * 1000003 + static_cast<std::uint64_t>(who) * 0x100000001b3ull + i * 7919);
  const int span = real == DataType::Float16 ? 20 : 40;
  const int lo = real == DataType::Float16 ? -12 : -20;
  double v = std::ldexp(1.0 + static_cast<double>(g % 1000000) / 1e6, lo + static_cast<int>((g >> 20) % span));
  if (id % 7 == 3 && real != DataType::Float16 && i % 11 == 0)
    v = std::ldexp(v, static_cast<int>((g >> 30) % 200) - 100);
  if (id % 9 == 4 && i % 13 == 0) v = who == 0 ? std::numeric_limits<double>::infinity() : v;
  if (id % 9 == 4 && i % 17 == 0 && who == 2) v = std::numeric_limits<double>::quiet_NaN();
  return (g >> 63) ? -v : v;
}

void put(char* p, std::size_t i, DataType real, double v) {
  switch (real) {
    case DataType::Float16: {
      const std::uint16_t h = detail::float_to_half(static_cast<float>(v));
      std::memcpy(p + 2 * i, &h, 2);
      return;
    }
    case DataType::BFloat16: {
      const std::uint16_t b = detail::float_to_bfloat16(static_cast<float>(v));
      std::memcpy(p + 2 * i, &b, 2);
      return;
    }
    case DataType::Float32: {
      const float f = static_cast<float>(v);
      std::memcpy(p + 4 * i, &f, 4);
      return;
    }
    default:
      std::memcpy(p + 8 * i, &v, 8);
  }
}

double get(const char* p, std::size_t i, DataType real) {
  switch (real) {
    case DataType::Float16: {
      std::uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      return detail::half_to_float(h);
    }
    case DataType::BFloat16: {
      std::uint16_t b;
      std::memcpy(&b, p + 2 * i, 2);
      return detail::bfloat16_to_float(b);
    }
    case DataType::Float32: {
      float f;
      std::memcpy(&f, p + 4 * i, 4);
      return f;
    }
    default: {
      double d;
      std::memcpy(&d, p + 8 * i, 8);
      return d;
    }
  }
}

std::uint64_t fnv(const std::vector<char>& b) {
  std::uint64_t h = 1469598103934665603ull;
  for (char c : b) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}

// One run: every case, each under three arrangements of the contributions
// (rank r holds contribution perm[r]) and one of them again in memory the
// ranks share; writes rank r's hashes to `file`.
void run_cases(Communicator& comm, const std::string& file) {
  const int n = comm.size(), r = comm.rank();
  EXPECT_FALSE(comm.reproducible());
  comm.set_reproducible(true);
  std::vector<std::vector<int>> perms(3, std::vector<int>(n));
  for (int i = 0; i < n; ++i) {
    perms[0][i] = i;
    perms[1][i] = n - 1 - i;
    perms[2][i] = (i + 1) % n;
  }
  std::vector<std::uint64_t> hashes;
  std::uint64_t id = 0;
  // The largest input: 9001 elements of 16 bytes from each rank.
  const std::size_t most = 9001 * 16 * static_cast<std::size_t>(n);
  char* const shared_in = static_cast<char*>(comm.alloc_shared(most));
  char* const shared_out = static_cast<char*>(comm.alloc_shared(most));
  // From 5 ranks (on 2 cores), and under the sanitizers, one element and
  // one count past every chunk and slot.
  const std::vector<std::size_t> counts =
      kSanitized || n >= 5 ? std::vector<std::size_t>{1, 9001} : std::vector<std::size_t>{1, 77, 9001};
  for (DataType dt : kTypes) {
    // Under ThreadSanitizer one type a width.
    if (kThreadSanitized && (dt == DataType::Float64 || dt == DataType::Float16 || dt == DataType::Complex64)) continue;
    const DataType real = real_of(dt);
    const std::size_t es = dtype_size(dt), per = reals_of(dt);
    for (ReduceOpKind k : {ReduceOpKind::Sum, ReduceOpKind::Avg})
      for (int coll = 0; coll < 3; ++coll)  // all_reduce, reduce, reduce_scatter
        for (std::size_t count : counts) {
          ++id;
          const int root = static_cast<int>(id % static_cast<std::uint64_t>(n));
          const std::size_t in_count = coll == 2 ? count * n : count;
          // Every contribution as the dtype holds it.
          const std::size_t reals = in_count * per;
          std::vector<std::vector<char>> held(n, std::vector<char>(in_count * es));
          for (int q = 0; q < n; ++q)
            for (std::size_t j = 0; j < reals; ++j) put(held[q].data(), j, real, value(id, q, j, real));
          std::vector<char> first;
          for (std::size_t a = 0; a <= perms.size(); ++a) {
            // The last arrangement: the second again, in memory the ranks
            // share (alloc_shared; in shared memory the collectives read
            // and write it directly), all_reduce in place.
            const bool shared = a == perms.size();
            const std::vector<char>& in = held[perms[shared ? 1 : a][r]];
            std::vector<char> out(count * es, 0);
            const void* send = in.data();
            void* recv = out.data();
            if (shared) {
              std::memcpy(shared_in, in.data(), in.size());
              send = shared_in;
              recv = coll == 0 ? shared_in : shared_out;
            }
            if (coll == 0) {
              comm.all_reduce(send, recv, count, dt, ReduceOp(k));
            } else if (coll == 1) {
              comm.reduce(send, recv, count, dt, ReduceOp(k), root);
            } else {
              comm.reduce_scatter(send, recv, count, dt, ReduceOp(k));
            }
            if (shared && (coll != 1 || r == root)) std::memcpy(out.data(), recv, out.size());
            if (coll == 1 && r != root) continue;
            if (!first.empty()) {
              ASSERT_EQ(out, first) << "rank " << r << ", case " << id << " (" << dtype_name(dt)
                                    << "): another arrangement of the same contributions gave other bits";
              continue;
            }
            first = out;
            // The exact sum rounded once (a wrong reduction is not merely
            // reproducible): within one rounding of a sum accurate to 2^-120.
            const int p = real == DataType::Float16    ? 11
                          : real == DataType::BFloat16 ? 8
                          : real == DataType::Float32  ? 24
                                                       : 53;
            for (std::size_t i = 0; i < count * per; ++i) {
              const std::size_t at = (coll == 2 ? static_cast<std::size_t>(r) * count * per : 0) + i;
              // The exact sum, within 2^-120 of it: Neumaier's compensated
              // sum in long double (a plain one where a value is not finite).
              long double want = 0, carry = 0;
              bool finite = true;
              for (int q = 0; q < n; ++q) finite = finite && std::isfinite(get(held[q].data(), at, real));
              for (int q = 0; q < n; ++q) {
                const long double v = get(held[q].data(), at, real);
                const long double t = want + v;
                if (finite) carry += std::fabs(want) >= std::fabs(v) ? (want - t) + v : (v - t) + want;
                want = t;
              }
              want += carry;
              long double tol = 0;
              if (k == ReduceOpKind::Avg) want /= n;
              // One rounding: half an ulp, or half the least subnormal.
              const int lsb_min = real == DataType::Float16    ? -24
                                  : real == DataType::BFloat16 ? -133
                                  : real == DataType::Float32  ? -149
                                                               : -1074;
              tol += std::fabs(want) * std::ldexp(1.0L, 1 - p) + std::ldexp(1.0L, lsb_min - 1);
              const double got = get(out.data(), i, real);
              if (std::isnan(static_cast<double>(want))) {
                EXPECT_TRUE(std::isnan(got)) << "case " << id << " element " << i;
              } else if (std::isinf(static_cast<double>(want))) {
                EXPECT_EQ(got, static_cast<double>(want)) << "case " << id << " element " << i;
              } else {
                EXPECT_LE(std::fabs(static_cast<long double>(got) - want), tol)
                    << "case " << id << " (" << dtype_name(dt) << ", " << count << " elements), element " << i << ": "
                    << got << ", expected " << static_cast<double>(want);
              }
              if (::testing::Test::HasFailure()) return;
            }
          }
          if (!first.empty()) hashes.push_back(fnv(first));
        }
  }
  comm.free_shared(shared_out);
  comm.free_shared(shared_in);
  std::ofstream(file, std::ios::binary)
      .write(reinterpret_cast<const char*>(hashes.data()), static_cast<std::streamsize>(hashes.size() * 8));
}

class Reproducible : public ::testing::TestWithParam<int> {};

TEST_P(Reproducible, SameBitsWhateverTheAlgorithmMediumChunkingAndRankOrder) {
  const int n = GetParam();
  char tmpl[] = "/tmp/tutti-repro-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const fs::path dir(tmpl);
  struct Cleanup {
    fs::path dir;
    ~Cleanup() { fs::remove_all(dir); }
  } cleanup{dir};
  // Under the sanitizers: shared memory, and TCP with two algorithms. From
  // 5 ranks (on 2 cores) the sets that force each algorithm; the single
  // copy, 1 KiB chunk and tuner sets run on 2 to 4.
  const std::vector<std::size_t> runs = kSanitized ? std::vector<std::size_t>{0, 3, 5}
                                        : n >= 5   ? std::vector<std::size_t>{0, 1, 3, 4}
                                                   : std::vector<std::size_t>{0, 1, 2, 3, 4, 5, 6};
  for (std::size_t k : runs) {
    if (HasFailure()) break;
    SpawnOptions o;
    o.env = kRuns[k];
    o.env.push_back({"TUTTI_SHM_PREFIX", shm_prefix_for("repro-" + std::to_string(n))});
    spawn(
        n,
        [&](Communicator& comm) {
          run_cases(comm, (dir / ("run" + std::to_string(k) + "-rank" + std::to_string(comm.rank()))).string());
        },
        o);
  }
  if (HasFailure()) return;
  for (int r = 0; r < n; ++r) {
    const auto read = [&](std::size_t k) {
      std::ifstream f(dir / ("run" + std::to_string(k) + "-rank" + std::to_string(r)), std::ios::binary);
      return std::vector<char>(std::istreambuf_iterator<char>(f), {});
    };
    const std::vector<char> base = read(0);
    ASSERT_FALSE(base.empty()) << "rank " << r;
    for (std::size_t k : runs)
      EXPECT_EQ(read(k), base) << "rank " << r << ": run " << k << " gave other bits than run 0";
  }
}

INSTANTIATE_TEST_SUITE_P(World, Reproducible, ::testing::Range(2, 9),
                         [](const ::testing::TestParamInfo<int>& p) { return "n" + std::to_string(p.param); });

}  // namespace
}  // namespace tutti::testing
