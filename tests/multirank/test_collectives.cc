// Every collective x every dtype x every valid reduce op x every root x
// counts {0, 1, 7, one past the chunk}, on world sizes 1..8: one launch per
// world size, all cases inside.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

#include "harness/spawn.h"
#include "multirank/collective_checks.h"

namespace tutti::testing {
namespace {

constexpr std::size_t kChunkBytes = 256;  // small, so tiny counts still cross chunk boundaries

// (world size, mode): "shm" runs the shared-memory collectives copying
// through the segment (every rank is on this host), "cma" the same with
// every non-empty block read straight from the peers (process_vm_readv),
// "tcp" the network algorithms, "striped" the same with large messages split
// across three data connections per pair (harness/spawn.h).
class Collectives : public ::testing::TestWithParam<std::tuple<int, std::string>> {
 protected:
  int world() const { return std::get<0>(GetParam()); }
  std::vector<std::pair<std::string, std::string>> transport_env() const {
    const std::string& mode = std::get<1>(GetParam());
    if (mode == "striped") return tutti::testing::transport_env(mode);
    return {{"TUTTI_TRANSPORT", mode == "tcp" ? "tcp" : "auto"}, {"TUTTI_SHM_CMA_BYTES", mode == "cma" ? "1" : "0"}};
  }
  std::vector<std::pair<std::string, std::string>> env() const {
    // Small slots, chunks and thresholds, so that small counts already cross
    // round and chunk boundaries and take both one-shot and two-shot paths.
    auto e = transport_env();
    e.insert(e.end(), {{"TUTTI_CHUNK_BYTES", std::to_string(kChunkBytes)},
                       {"TUTTI_SMALL_BYTES", "64"},
                       {"TUTTI_SHM_SLOT_BYTES", "256"},
                       {"TUTTI_SHM_ONESHOT_BYTES", "64"}});
    return e;
  }
};

// The shared-memory copy path only ("shm").
class ShmCollectives : public Collectives {};

TEST_P(Collectives, EveryOpDtypeReduceOpRootAndCount) {
  SpawnOptions o;
  o.env = env();
  spawn(
      world(),
      [](Communicator& comm) {
        auto counts = [](DataType dt) {
          // Every dtype, but under TSan (collective_checks.h).
          if (kThreadSanitized && !swept_when_sanitized(dt)) return std::vector<std::size_t>{};
          return std::vector<std::size_t>{0, 1, 7, kChunkBytes / dtype_size(dt) + 1};
        };
        std::size_t cases = run_collective_sweep(comm, counts, 1000);
        if (comm.rank() == 0) std::printf("world %d: %zu cases\n", comm.size(), cases);
      },
      o);
}

// With the default slots and thresholds, messages between the control
// line's 232 bytes and 8 KiB travel in the ring (one-shot reductions, and
// a root's or senders' rounds running ahead): exactly 8 KiB, a little over
// 2 KiB and a little over 300 bytes, every op, dtype, reduce op and root.
TEST_P(ShmCollectives, RingSizedMessagesWithDefaultSettings) {
  SpawnOptions o;
  o.env = transport_env();
  spawn(
      world(),
      [](Communicator& comm) {
        auto counts = [](DataType dt) {
          // Under the sanitizers fewer dtypes (collective_checks.h): the
          // ring's slots and rounds depend on sizes, and the plain build runs
          // all fourteen.
          if (kSanitized && !swept_when_sanitized(dt)) return std::vector<std::size_t>{};
          const std::size_t es = dtype_size(dt);
          return std::vector<std::size_t>{8192 / es, 2048 / es + 1, 300 / es + 1};
        };
        std::size_t cases = run_collective_sweep(comm, counts, 2000);
        if (comm.rank() == 0) std::printf("world %d: %zu cases\n", comm.size(), cases);
      },
      o);
}

// Bytes per rank of the large-message test: 4 MiB, or TUTTI_TEST_LARGE_BYTES
// (the sanitizer runs of scripts/test.sh use less, to stay within time).
std::size_t large_bytes() {
  const char* v = std::getenv("TUTTI_TEST_LARGE_BYTES");
  if (!v || !*v) return std::size_t{4} << 20;
  return std::max<std::size_t>(std::strtoull(v, nullptr, 10), 64u << 10);
}

// ~4 MB per rank for float32, bfloat16 and int64: large messages through the
// chunked pipelines (chunk 256 KiB, so every step crosses chunk boundaries).
// Chunk and slot sizes scale with large_bytes(), so a smaller run crosses as
// many boundaries. Fewer world sizes than the sweep: the reference
// computation dominates.
class LargeCollectives : public Collectives {};

TEST_P(LargeCollectives, LargeMessages) {
  const std::size_t large = large_bytes();
  SpawnOptions o;
  o.env = transport_env();
  o.env.insert(o.env.end(), {{"TUTTI_CHUNK_BYTES", std::to_string(large / 16)},
                             {"TUTTI_SHM_SLOT_BYTES", std::to_string(large / 64)}});
  // Copying through shared memory, outputs of 16 MiB and more (reductions'
  // of 8 MiB when ranks share cores) are written with stores that bypass
  // the caches: one all_reduce and one all_gather that large (not in the
  // sanitizer runs' smaller setting).
  const bool streamed = std::get<1>(GetParam()) == "shm" && large >= (std::size_t{4} << 20);
  spawn(
      world(),
      [large, streamed](Communicator& comm) {
        const int n = comm.size();
        std::uint64_t id = 900000;
        if (streamed) {
          CaseInfo c;
          c.dtype = DataType::Float32;
          c.count = 4 * large / sizeof(float) + 5;  // > 16 MiB, not a multiple of 16 bytes
          c.op = ReduceOpKind::Sum;
          c.id = ++id;
          check_all_reduce(comm, c);
          c.count = 4 * large / sizeof(float) / n + 3;
          c.id = ++id;
          check_all_gather(comm, c);
        }
        for (DataType dt : {DataType::Float32, DataType::BFloat16, DataType::Int64}) {
          CaseInfo c;
          c.dtype = dt;
          c.count = large / dtype_size(dt) + 3;
          c.op = ReduceOpKind::Sum;
          c.id = ++id;
          check_all_reduce(comm, c);
          c.id = ++id;
          c.op = ReduceOpKind::Max;
          c.inplace = true;
          check_all_reduce(comm, c);
          c.op = ReduceOpKind::Sum;
          c.inplace = false;
          c.root = n - 1;
          c.id = ++id;
          check_reduce(comm, c);
          c.id = ++id;
          check_broadcast(comm, c);
          // Per-rank blocks of the gathering ops: 4 MB in all.
          c.count = large / dtype_size(dt) / n + 1;
          c.id = ++id;
          check_all_gather(comm, c);
          c.id = ++id;
          check_reduce_scatter(comm, c);
          c.id = ++id;
          check_all_to_all(comm, c);
          c.id = ++id;
          check_all_to_all_v(comm, c);  // blocks of 0 to count + 1 elements: whole, and in pieces
          c.id = ++id;
          check_gather(comm, c);
          c.id = ++id;
          check_scatter(comm, c);
        }
      },
      o);
}

std::string param_name(const ::testing::TestParamInfo<std::tuple<int, std::string>>& p) {
  return "n" + std::to_string(std::get<0>(p.param)) + "_" + std::get<1>(p.param);
}

INSTANTIATE_TEST_SUITE_P(World, LargeCollectives,
                         ::testing::Combine(::testing::Values(1, 2, 3, 5, 8), ::testing::Values("shm", "cma", "tcp")),
                         param_name);
INSTANTIATE_TEST_SUITE_P(Striped, LargeCollectives,
                         ::testing::Combine(::testing::Values(2, 5), ::testing::Values("striped")), param_name);

INSTANTIATE_TEST_SUITE_P(World, Collectives,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 5, 7, 8),
                                            ::testing::Values("shm", "cma", "tcp")),
                         param_name);
INSTANTIATE_TEST_SUITE_P(World, ShmCollectives,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 5, 7, 8), ::testing::Values("shm")),
                         param_name);

}  // namespace
}  // namespace tutti::testing
