// Ranks that call different collectives, counts, dtypes, reduce ops or roots
// at the same point: every rank gets Mismatch (at that call or, for a rank
// that had nothing to wait for, at its next call on the communicator),
// naming the other rank and both operations. Shared-memory collectives
// carry the operation's signature in every round.
#include <gtest/gtest.h>

#include <functional>

#include "common/errors.h"
#include "harness/spawn.h"

namespace tutti::testing {
namespace {

struct MismatchCase {
  const char* name;
  // What rank r calls; rank 2 is the odd one out.
  std::function<void(Communicator&, int r)> call;
  const char* odd;     // how rank 2's operation is described
  const char* normal;  // how the others' is
};

void run_case(Communicator& world, const MismatchCase& m) {
  std::vector<int> all(world.size());
  for (int i = 0; i < world.size(); ++i) all[i] = i;
  auto g = world.new_group(all);
  g->set_timeout(std::chrono::seconds(20));
  std::string error;
  ErrorKind kind = ErrorKind::Internal;
  try {
    m.call(*g, world.rank());
    g->barrier();
  } catch (const Error& e) {
    error = e.message();
    kind = e.kind();
  }
  SCOPED_TRACE(m.name);
  ASSERT_FALSE(error.empty()) << "no error on rank " << world.rank();
  EXPECT_EQ(kind, ErrorKind::Mismatch) << error;
  EXPECT_NE(error.find(m.odd), std::string::npos) << error;
  EXPECT_NE(error.find(m.normal), std::string::npos) << error;
  world.barrier();
}

TEST(Mismatch, EveryRankLearnsOfEveryKindOfMismatch) {
  spawn(3, [](Communicator& world) {
    std::vector<float> f(8, 1.f);
    std::vector<std::int32_t> i32(8, 1);
    const MismatchCase cases[] = {
        {"kind",
         [&](Communicator& g, int r) {
           if (r == 2) {
             g.broadcast(f.data(), 4, DataType::Float32, 0);
           } else {
             g.all_reduce(f.data(), f.data(), 4, DataType::Float32, ReduceOp::SUM);
           }
         },
         "broadcast (16 B, float32, root 0)", "all_reduce (16 B, float32, sum)"},
        {"count",
         [&](Communicator& g, int r) {
           g.all_reduce(f.data(), f.data(), r == 2 ? 5 : 4, DataType::Float32, ReduceOp::SUM);
         },
         "all_reduce (20 B, float32, sum)", "all_reduce (16 B, float32, sum)"},
        {"dtype",
         [&](Communicator& g, int r) {
           if (r == 2) {
             g.all_reduce(i32.data(), i32.data(), 4, DataType::Int32, ReduceOp::SUM);
           } else {
             g.all_reduce(f.data(), f.data(), 4, DataType::Float32, ReduceOp::SUM);
           }
         },
         "all_reduce (16 B, int32, sum)", "all_reduce (16 B, float32, sum)"},
        {"reduce op",
         [&](Communicator& g, int r) {
           g.all_reduce(f.data(), f.data(), 4, DataType::Float32, r == 2 ? ReduceOp::MAX : ReduceOp::SUM);
         },
         "all_reduce (16 B, float32, max)", "all_reduce (16 B, float32, sum)"},
        {"root",
         [&](Communicator& g, int r) { g.broadcast(f.data(), 4, DataType::Float32, r == 2 ? 1 : 0); },
         "broadcast (16 B, float32, root 1)", "broadcast (16 B, float32, root 0)"},
        {"large count",
         [&](Communicator& g, int r) {
           std::vector<float> big(300000, 1.f);
           g.all_reduce(big.data(), big.data(), r == 2 ? 300000 : 299999, DataType::Float32, ReduceOp::SUM);
         },
         "all_reduce (1200000 B, float32, sum)", "all_reduce (1199996 B, float32, sum)"},
    };
    for (const MismatchCase& m : cases) run_case(world, m);
  });
}

}  // namespace
}  // namespace tutti::testing
