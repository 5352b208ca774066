// Message tags (common/tags.h): the fields, their widths, the kinds.
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/errors.h"
#include "common/tags.h"
#include "tutti/error.h"

namespace {

using tutti::Error;
using tutti::ErrorKind;
namespace d = tutti::detail;

using tutti::testing::expect_error;

// ---- tags ------------------------------------------------------------------

constexpr std::uint64_t kMaxSeq = (std::uint64_t(1) << d::kTagSeqBits) - 1;
constexpr std::uint32_t kMaxStep = (std::uint32_t(1) << d::kTagStepBits) - 1;

TEST(CoreTags, CollectiveTagPacksSeqAndStep) {
  const std::pair<std::uint64_t, std::uint32_t> cases[] = {
      {0, 0}, {1, 0}, {0, 1}, {12345, 678}, {kMaxSeq, 0}, {0, kMaxStep}, {kMaxSeq, kMaxStep}};
  for (auto [seq, step] : cases) {
    std::uint64_t t = d::collective_tag(seq, step);
    EXPECT_EQ(t >> 62, d::kTagKindCollective) << seq << "/" << step;
    EXPECT_EQ((t >> d::kTagStepBits) & kMaxSeq, seq);
    EXPECT_EQ(t & kMaxStep, step);
    EXPECT_EQ(t, (seq << 24) | step);
  }
}

TEST(CoreTags, DistinctSeqStepGiveDistinctTags) {
  std::set<std::uint64_t> tags;
  std::vector<std::uint64_t> seqs;
  for (std::uint64_t s = 0; s < 64; ++s) seqs.push_back(s);
  for (std::uint64_t s : {std::uint64_t(1) << 20, std::uint64_t(1) << 37, kMaxSeq - 1, kMaxSeq}) seqs.push_back(s);
  std::vector<std::uint32_t> steps;
  for (std::uint32_t s = 0; s < 64; ++s) steps.push_back(s);
  for (std::uint32_t s : {1u << 8, 1u << 16, 1u << 23, kMaxStep - 1, kMaxStep}) steps.push_back(s);
  for (auto seq : seqs)
    for (auto step : steps) EXPECT_TRUE(tags.insert(d::collective_tag(seq, step)).second) << seq << "/" << step;
  EXPECT_EQ(tags.size(), seqs.size() * steps.size());
}

TEST(CoreTags, OverWideFieldsThrowInternal) {
  Error e = expect_error([] { d::collective_tag(kMaxSeq + 1, 0); });
  EXPECT_EQ(e.kind(), ErrorKind::Internal);
  EXPECT_CONTAINS(e.message(), "op sequence number " + std::to_string(kMaxSeq + 1));
  EXPECT_CONTAINS(e.message(), "38 bits");

  e = expect_error([] { d::collective_tag(~std::uint64_t(0), 0); });
  EXPECT_EQ(e.kind(), ErrorKind::Internal);
  EXPECT_CONTAINS(e.message(), "op sequence number");

  e = expect_error([] { d::collective_tag(0, kMaxStep + 1); });
  EXPECT_EQ(e.kind(), ErrorKind::Internal);
  EXPECT_CONTAINS(e.message(), "algorithm step " + std::to_string(kMaxStep + 1));
  EXPECT_CONTAINS(e.message(), "24 bits");

  e = expect_error([] { d::collective_tag(5, 0xffffffffu); });
  EXPECT_EQ(e.kind(), ErrorKind::Internal);
  EXPECT_CONTAINS(e.message(), "algorithm step");
}

TEST(CoreTags, P2PTagRejectsNegative) {
  for (int bad : {-1, -42, INT_MIN}) {
    Error e = expect_error([&] { d::p2p_tag(bad); });
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_CONTAINS(e.message(), "tag " + std::to_string(bad) + " is negative");
  }
  EXPECT_NO_THROW(d::p2p_tag(0));
  EXPECT_NO_THROW(d::p2p_tag(INT_MAX));
}

TEST(CoreTags, P2PAndCollectiveTagsNeverCollide) {
  // Every collective tag has kind bit 62 clear, every p2p tag has it set.
  for (int t : {0, 1, 2, 12345, 1 << 24, INT_MAX}) {
    std::uint64_t p = d::p2p_tag(t);
    EXPECT_EQ(p >> 62, d::kTagKindP2P);
    EXPECT_EQ(p & ((std::uint64_t(1) << 62) - 1), static_cast<std::uint64_t>(t));
  }
  std::set<std::uint64_t> coll;
  for (std::uint64_t seq : {std::uint64_t(0), std::uint64_t(1), kMaxSeq})
    for (std::uint32_t step : {0u, 1u, kMaxStep}) coll.insert(d::collective_tag(seq, step));
  EXPECT_LT(*coll.rbegin(), d::p2p_tag(0));  // largest collective < smallest p2p
  for (int t : {0, 1, 2, 12345, 1 << 24, INT_MAX}) EXPECT_EQ(coll.count(d::p2p_tag(t)), 0u);
  // Small values that would coincide without the kind bit.
  for (int t = 0; t < 1000; ++t) EXPECT_NE(d::p2p_tag(t), d::collective_tag(0, static_cast<std::uint32_t>(t)));
}

}  // namespace
