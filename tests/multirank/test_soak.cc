// Soak: 10,000 random collectives (random kind, dtype, reduce op, count,
// root, form) over random sub-groups of 5 ranks, every element of every
// result checked; 2,500 under the sanitizers (scripts/test.sh's second
// stage), where the same paths run at a tenth of the speed. Over shared memory (small slots and thresholds, so that
// one-shot, two-shot, inline, multi-round and single-copy paths all run)
// and over TCP.
#include <gtest/gtest.h>

#include <random>

#include "harness/spawn.h"
#include "multirank/collective_checks.h"

namespace tutti::testing {
namespace {

class Soak : public ::testing::TestWithParam<std::string> {};

constexpr int kSoakOps = kSanitized ? 2500 : 10000;

TEST_P(Soak, ThousandsOfRandomOpsOverRandomGroups) {
  SpawnOptions o;
  o.env = transport_env(GetParam());
  o.env.insert(o.env.end(), {{"TUTTI_SHM_SLOT_BYTES", "4K"},
                             {"TUTTI_SHM_ONESHOT_BYTES", "512"},
                             {"TUTTI_SHM_CMA_BYTES", "2K"},
                             {"TUTTI_CHUNK_BYTES", "4K"},
                             {"TUTTI_SMALL_BYTES", "256"}});
  o.timeout = std::chrono::seconds(600);
  spawn(
      5,
      [](Communicator& world) {
        const int r = world.rank();
        // The groups: the world, two disjoint halves, an overlapping split
        // ordered backwards, a pair and a single rank.
        std::vector<std::optional<Communicator>> groups;
        groups.emplace_back(world.new_group(std::vector<int>{0, 1, 2, 3, 4}));
        groups.emplace_back(world.new_group(std::vector<int>{0, 2, 4}));
        groups.emplace_back(world.new_group(std::vector<int>{1, 3}));
        groups.emplace_back(world.split(r < 3 ? 0 : 1, -r));
        groups.emplace_back(world.new_group(std::vector<int>{4, 1}));
        groups.emplace_back(world.new_group(std::vector<int>{2}));
        std::mt19937_64 rng(20261130);  // the same sequence on every rank
        const std::size_t counts[] = {1, 3, 17, 100, 333, 1000, 4099};
        std::size_t ran = 0;
        for (int i = 0; i < kSoakOps; ++i) {
          const int g = static_cast<int>(rng() % groups.size());
          CaseInfo c;
          c.id = 1000000 + static_cast<std::uint64_t>(i);
          c.dtype = static_cast<DataType>(rng() % kNumDataTypes);
          c.count = counts[rng() % 7];
          c.inplace = rng() % 2;
          c.async = rng() % 3 == 0;
          c.list_form = rng() % 2;
          ReduceOp op(static_cast<ReduceOpKind>(rng() % kNumReduceOps));
          if (op.kind == ReduceOpKind::PremulSum) op.scalar = dtype_is_integer(c.dtype) ? 3.0 : 0.5;
          if (!reduce_op_invalid_reason(c.dtype, op).empty()) op = ReduceOp(ReduceOpKind::Max);
          if (!reduce_op_invalid_reason(c.dtype, op).empty()) op = ReduceOp(ReduceOpKind::BXor);  // complex: no MAX
          if (!reduce_op_invalid_reason(c.dtype, op).empty()) op = ReduceOp(ReduceOpKind::Sum);
          c.op = op;
          const int kind = static_cast<int>(rng() % 9);
          const std::uint64_t root_pick = rng();
          if (!groups[g]) continue;  // not a member: the others run it without us
          Communicator& comm = *groups[g];
          c.root = static_cast<int>(root_pick % comm.size());
          switch (kind) {
            case 0:
              check_all_reduce(comm, c);
              break;
            case 1:
              check_reduce(comm, c);
              break;
            case 2:
              check_broadcast(comm, c);
              break;
            case 3:
              check_gather(comm, c);
              break;
            case 4:
              check_all_gather(comm, c);
              break;
            case 5:
              check_scatter(comm, c);
              break;
            case 6:
              check_reduce_scatter(comm, c);
              break;
            case 7:
              check_all_to_all(comm, c);
              break;
            default:
              check_all_to_all_v(comm, c);
              break;
          }
          ++ran;
          if (::testing::Test::HasFailure()) {
            ADD_FAILURE() << "stopped at op " << i << " (group " << g << ")";
            return;
          }
        }
        // Every rank took part in its share; together they ran all of them.
        std::uint64_t mine = ran, total = 0;
        world.all_reduce(&mine, &total, 1, DataType::UInt64, ReduceOp::SUM);
        if (r == 0) std::printf("soak: %llu rank-ops checked\n", static_cast<unsigned long long>(total));
        EXPECT_GT(total, static_cast<std::uint64_t>(kSoakOps));
      },
      o);
}

INSTANTIATE_TEST_SUITE_P(World, Soak, ::testing::Values("auto", "tcp", "striped"), transport_name);

}  // namespace
}  // namespace tutti::testing
