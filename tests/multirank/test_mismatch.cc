// Ranks that call different collectives, counts, dtypes, reduce ops or roots
// at the same point: every rank gets Mismatch (at that call or, for a rank
// that had nothing to wait for, at its next call on the communicator),
// naming the other rank and both operations. Shared-memory collectives
// carry the operation's signature in every round, network messages in
// every frame; a rank that finds a mismatch tells the other members.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <random>

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
  // The same over TCP without TUTTI_DEBUG=detail, where the rank that
  // receives a mismatched message names it by its frame's signature (kind,
  // dtype, op, root) or its length.
  const char* frame_odd = nullptr;
  const char* frame_normal = nullptr;
};

// `warm`: the group has run an operation before the mismatched one (its
// first operation also sets up shared memory, which compares signatures).
void run_case(Communicator& world, const MismatchCase& m, bool frames_only = false, bool warm = false) {
  std::vector<int> all(world.size());
  for (int i = 0; i < world.size(); ++i) all[i] = i;
  auto g = world.new_group(all);
  g->set_timeout(std::chrono::seconds(20));
  std::string error;
  ErrorKind kind = ErrorKind::Internal;
  // A rank that had nothing to wait for when the others found the mismatch
  // learns of it at its next call (here: a second barrier).
  for (int attempt = 0; attempt < 2 && error.empty(); ++attempt) {
    try {
      if (attempt == 0) {
        // A rank still in the first operation when the others have found
        // the mismatch learns of it there.
        if (warm) g->barrier();
        m.call(*g, world.rank());
      }
      g->barrier();
    } catch (const Error& e) {
      error = e.message();
      kind = e.kind();
    }
  }
  SCOPED_TRACE(m.name);
  SCOPED_TRACE(warm ? "after a first operation" : "as the group's first operation");
  ASSERT_FALSE(error.empty()) << "no error on rank " << world.rank();
  EXPECT_EQ(kind, ErrorKind::Mismatch) << error;
  const char* odd = frames_only && m.frame_odd ? m.frame_odd : m.odd;
  const char* normal = frames_only && m.frame_normal ? m.frame_normal : m.normal;
  EXPECT_NE(error.find(odd), std::string::npos) << "rank " << world.rank() << " looked for " << odd << " in: " << error;
  EXPECT_NE(error.find(normal), std::string::npos)
      << "rank " << world.rank() << " looked for " << normal << " in: " << error;
  world.barrier();
}

class Mismatch : public ::testing::TestWithParam<std::string> {};

TEST_P(Mismatch, EveryRankLearnsOfEveryKindOfMismatch) {
  SpawnOptions o;
  const bool detail = GetParam() == "tcp_detail";
  const bool frames_only = GetParam() == "tcp";
  o.env = {{"TUTTI_TRANSPORT", detail ? "tcp" : GetParam()}, {"TUTTI_DEBUG", detail ? "detail" : "off"}};
  spawn(
      3,
      [frames_only](Communicator& world) {
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
            {"root", [&](Communicator& g, int r) { g.broadcast(f.data(), 4, DataType::Float32, r == 2 ? 1 : 0); },
             "broadcast (16 B, float32, root 1)", "broadcast (16 B, float32, root 0)"},
            // Broadcasts of up to 8 bytes go in packed records (ShmGroup::publish_packed).
            {"packed dtype",
             [&](Communicator& g, int r) {
               if (r == 2) {
                 g.broadcast(i32.data(), 2, DataType::Int32, 0);
               } else {
                 g.broadcast(f.data(), 2, DataType::Float32, 0);
               }
             },
             "broadcast (8 B, int32, root 0)", "broadcast (8 B, float32, root 0)"},
            {"packed count",
             [&](Communicator& g, int r) { g.broadcast(f.data(), r == 2 ? 1 : 2, DataType::Float32, 0); },
             "broadcast (4 B, float32, root 0)", "broadcast (8 B, float32, root 0)"},
            // Rank 2 is a root too: nobody reads its record; the next packed
            // broadcast's check of the previous round finds it.
            {"packed roots, then a packed broadcast",
             [&](Communicator& g, int r) {
               g.broadcast(f.data(), 1, DataType::Float32, r == 2 ? 2 : 0);
               g.broadcast(f.data(), 1, DataType::Float32, 0);
             },
             "broadcast (4 B, float32, root 2)", "broadcast (4 B, float32, root 0)"},
            {"large count",
             [&](Communicator& g, int r) {
               std::vector<float> big(300000, 1.f);
               g.all_reduce(big.data(), big.data(), r == 2 ? 300000 : 299999, DataType::Float32, ReduceOp::SUM);
             },
             // Over TCP this size runs Rabenseifner: on 3 ranks the first halving
             // round swaps half the buffer between ranks 1 and 2.
             "all_reduce (1200000 B, float32, sum)", "all_reduce (1199996 B, float32, sum)"},
            // Nothing meets: rank 2's gather only sends to the root, whose
            // scatter only sends. Found at the next operation, which meets the
            // stale messages.
            {"messages that never meet",
             [&](Communicator& g, int r) {
               std::vector<float> in(3 * 4, 2.f), out(4, 0.f);
               if (r == 2) {
                 g.gather(in.data(), out.data(), 4, DataType::Float32, 0);
               } else {
                 g.scatter(in.data(), out.data(), 4, DataType::Float32, 0);
               }
             },
             "gather (16 B, float32, root 0)", "scatter (16 B, float32, root 0)"},
        };
        for (const MismatchCase& m : cases)
          for (bool warm : {false, true}) run_case(world, m, frames_only, warm);
      },
      o);
}

// Without TUTTI_DEBUG ("tcp" above and here), network messages carry the
// operation's signature: the ranks whose messages meet find out and tell the
// others (here every pair exchanges directly).
TEST(MismatchTcp, FramesCarryTheSignature) {
  SpawnOptions o;
  o.env = {{"TUTTI_TRANSPORT", "tcp"}};
  spawn(
      2,
      [](Communicator& world) {
        std::vector<float> f(4, 1.f);
        std::vector<std::int32_t> i32(4, 1);
        const MismatchCase cases[] = {
            {"dtype",
             [&](Communicator& g, int r) {
               if (r == 1) {
                 g.all_reduce(i32.data(), i32.data(), 4, DataType::Int32, ReduceOp::SUM);
               } else {
                 g.all_reduce(f.data(), f.data(), 4, DataType::Float32, ReduceOp::SUM);
               }
             },
             "all_reduce (16 B, int32, sum)", "all_reduce (16 B, float32, sum)"},
            {"reduce op",
             [&](Communicator& g, int r) {
               g.all_reduce(f.data(), f.data(), 4, DataType::Float32, r == 1 ? ReduceOp::MAX : ReduceOp::SUM);
             },
             "all_reduce (16 B, float32, max)", "all_reduce (16 B, float32, sum)"},
        };
        for (const MismatchCase& m : cases) run_case(world, m);
      },
      o);
}

// A count one element apart over TCP on 3 ranks, the odd rank first: with
// 1 Mi floats the per-message lengths of Rabenseifner's steps mostly agree,
// so only the byte count hashed in every message's signature shows it.
// Every rank fails at once with Mismatch naming both counts (before, two
// ranks returned wrong sums and the third timed out blaming a rank that took
// part).
TEST(MismatchTcp, ACountOneElementApartIsFoundWhateverTheMessageLengths) {
  SpawnOptions o;
  o.env = {{"TUTTI_TRANSPORT", "tcp"}};
  o.op_timeout = std::chrono::seconds(30);
  spawn(
      3,
      [](Communicator& world) {
        for (int odd : {0, 2}) {
          SCOPED_TRACE("odd rank " + std::to_string(odd));
          auto g = world.new_group(std::vector<int>{0, 1, 2});
          const std::size_t n = (1u << 20) + (world.rank() == odd ? 1 : 0);
          std::vector<float> x(n, 0.5f);
          const auto t0 = std::chrono::steady_clock::now();
          try {
            g->all_reduce(x.data(), x.data(), n, DataType::Float32, ReduceOp::SUM);
            ADD_FAILURE() << "all_reduce of disagreeing counts returned";
          } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::Mismatch) << e.what();
            EXPECT_NE(e.message().find("all_reduce (4194308 B, float32, sum)"), std::string::npos) << e.what();
            EXPECT_NE(e.message().find("4194304 B"), std::string::npos) << e.what();
          }
          EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
          world.barrier();
        }
      },
      o);
}

// all_to_all_v sends a block larger than the chunk in pieces, after its
// size: counts that disagree by whole pieces (the first pieces alike) still
// fail both ranks with Mismatch at once, naming both sizes, not after the
// timeout waiting for a piece never sent. Rank 1 expects one piece more
// from rank 0 than it sends, one piece less, then 8 bytes (the length of a
// size: an 8-byte block goes after its size too).
TEST(MismatchTcp, AllToAllVCountsThatDifferByWholePieces) {
  SpawnOptions o;
  o.env = {{"TUTTI_TRANSPORT", "tcp"}, {"TUTTI_CHUNK_BYTES", "65536"}};
  spawn(
      2,
      [](Communicator& world) {
        const int r = world.rank();
        const std::size_t piece = 65536 / sizeof(float);
        std::mt19937 gen(77 + r);
        std::uniform_real_distribution<float> dist(-1.f, 1.f);
        for (int c = 0; c < 3; ++c) {
          SCOPED_TRACE(c == 0 ? "a piece more" : c == 1 ? "a piece less" : "8 bytes");
          auto g = world.new_group(std::vector<int>{0, 1});
          g->set_timeout(std::chrono::seconds(60));
          // Rank 0 sends rank 1 three pieces and half a piece, rank 1 sends rank 0 two.
          const std::size_t to1 = 3 * piece + piece / 2, to0 = 2 * piece;
          const std::size_t expected_from0 = c == 0 ? to1 + piece : c == 1 ? to1 - piece : 2;
          // Counts by peer (index r: the rank's own block).
          const std::size_t scounts[2] = {r == 0 ? piece : to0, r == 0 ? to1 : piece};
          const std::size_t rcounts[2] = {r == 0 ? piece : expected_from0, r == 0 ? to0 : piece};
          const std::size_t sd[2] = {0, scounts[0]}, rd[2] = {0, rcounts[0]};
          std::vector<float> in(scounts[0] + scounts[1]), out(rcounts[0] + rcounts[1]);
          for (float& x : in) x = dist(gen);
          std::string error;
          ErrorKind kind = ErrorKind::Internal;
          const auto t0 = std::chrono::steady_clock::now();
          for (int attempt = 0; attempt < 2 && error.empty(); ++attempt) {
            try {
              if (attempt == 0) g->all_to_all_v(in.data(), scounts, sd, out.data(), rcounts, rd, DataType::Float32);
              g->barrier();
            } catch (const Error& e) {
              error = e.message();
              kind = e.kind();
            }
          }
          ASSERT_FALSE(error.empty()) << "no error on rank " << r;
          EXPECT_EQ(kind, ErrorKind::Mismatch) << error;
          EXPECT_NE(error.find("all_to_all_v"), std::string::npos) << error;
          const std::string why = "rank 0 sends this rank " + std::to_string(to1 * sizeof(float)) +
                                  " bytes, where this rank expects " + std::to_string(expected_from0 * sizeof(float));
          EXPECT_NE(error.find(why), std::string::npos) << error;
          EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10)) << error;
          world.barrier();
        }
      },
      o);
}

INSTANTIATE_TEST_SUITE_P(World, Mismatch, ::testing::Values("auto", "tcp_detail", "tcp"), transport_name);

}  // namespace
}  // namespace tutti::testing
