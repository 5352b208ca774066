// The TCP transport's frames and hello (transport/tcp/frame.h).
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include "common/errors.h"
#include "common/tags.h"
#include "transport/tcp/frame.h"
#include "tutti/error.h"

namespace {

namespace d = tutti::detail;

// ---- frame header / hello --------------------------------------------------------------

TEST(CoreFrame, HeaderAcceptsGood) {
  d::FrameHeader h;
  EXPECT_EQ(d::validate_frame_header(h), "");
  h.comm_id = ~std::uint64_t(0);
  h.tag = d::p2p_tag(INT_MAX);
  h.signature = 0x1234567890abcdefull;
  h.bytes = d::kMaxFrameBytes;  // the bound itself is allowed
  EXPECT_EQ(d::validate_frame_header(h), "");
  h.flags = d::kFrameLostNotice;
  h.bytes = d::kMaxNoticeBytes;
  EXPECT_EQ(d::validate_frame_header(h), "");
  h.flags = d::kFrameGoodbye;
  h.bytes = 0;
  EXPECT_EQ(d::validate_frame_header(h), "");
}

TEST(CoreFrame, HeaderRejectsBadFlags) {
  d::FrameHeader h;
  h.flags = 0x8000;
  EXPECT_EQ(d::validate_frame_header(h), "unknown frame flags 32768");
  h.flags = d::kFrameGoodbye;
  h.bytes = 1;
  EXPECT_EQ(d::validate_frame_header(h), "goodbye frame with a payload");
  h.flags = d::kFrameLostNotice;
  h.bytes = d::kMaxNoticeBytes + 1;
  EXPECT_EQ(d::validate_frame_header(h), "lost-peer notice of 1025 bytes");
}

TEST(CoreFrame, HeaderRejectsBadFields) {
  d::FrameHeader h;
  h.magic = 0x12345678;
  EXPECT_EQ(d::validate_frame_header(h), "bad frame magic " + std::to_string(0x12345678u));
  h = {};
  h.magic = d::kHelloMagic;  // a hello where a frame was expected
  EXPECT_CONTAINS(d::validate_frame_header(h), "bad frame magic");

  h = {};
  h.version = 2;
  EXPECT_EQ(d::validate_frame_header(h), "unsupported frame version 2");
  h.version = 0;
  EXPECT_EQ(d::validate_frame_header(h), "unsupported frame version 0");

  h = {};
  h.bytes = d::kMaxFrameBytes + 1;
  EXPECT_EQ(d::validate_frame_header(h), "frame claims " + std::to_string(d::kMaxFrameBytes + 1) + " bytes");
  h.bytes = ~std::uint64_t(0);
  EXPECT_CONTAINS(d::validate_frame_header(h), "frame claims");
}

d::Hello good_hello(int rank, int world, std::uint64_t job) {
  d::Hello h;
  h.rank = rank;
  h.world_size = world;
  h.job_id = job;
  return h;
}

TEST(CoreFrame, HelloAcceptsGood) {
  for (int world : {1, 2, 5, 64})
    for (int rank = 0; rank < world; ++rank) EXPECT_EQ(d::validate_hello(good_hello(rank, world, 42), world, 42), "");
}

TEST(CoreFrame, HelloRejectsBadFields) {
  d::Hello h = good_hello(1, 4, 42);
  h.magic = d::kFrameMagic;
  EXPECT_EQ(d::validate_hello(h, 4, 42), "not a tutti peer (bad hello magic)");

  h = good_hello(1, 4, 42);
  h.version = 7;
  EXPECT_EQ(d::validate_hello(h, 4, 42), "peer speaks protocol version 7");

  h = good_hello(1, 8, 42);
  EXPECT_EQ(d::validate_hello(h, 4, 42), "peer believes the world has 8 ranks, this rank 4");

  for (int bad_rank : {-1, 4, 100}) {
    h = good_hello(bad_rank, 4, 42);
    EXPECT_EQ(d::validate_hello(h, 4, 42), "peer claims rank " + std::to_string(bad_rank));
  }

  h = good_hello(1, 4, 43);
  EXPECT_EQ(d::validate_hello(h, 4, 42), "peer belongs to another job");
}

TEST(CoreFrame, IncomingHelloMustComeFromAnotherRank) {
  // Either side of a pair connects (on first use).
  EXPECT_EQ(d::check_incoming_hello(good_hello(3, 4, 42), 1, 4, 42), "");
  EXPECT_EQ(d::check_incoming_hello(good_hello(0, 4, 42), 2, 4, 42), "");
  EXPECT_EQ(d::check_incoming_hello(good_hello(1, 4, 42), 1, 4, 42), "peer claims this rank's own number 1");
  // validate_hello's checks come first.
  EXPECT_EQ(d::check_incoming_hello(good_hello(3, 4, 43), 1, 4, 42), "peer belongs to another job");
  EXPECT_EQ(d::check_incoming_hello(good_hello(-1, 4, 42), 1, 4, 42), "peer claims rank -1");
}

TEST(CoreFrame, HelloSaysWhichOfThePairsConnectionsItIs) {
  d::Hello h = good_hello(2, 4, 42);
  for (int count : {1, 2, 5, 17})
    for (int index = 0; index < count; ++index) {
      h.link = d::hello_link(count, index);
      EXPECT_EQ(d::hello_link_count(h), count);
      EXPECT_EQ(d::hello_link_index(h), index);
      EXPECT_EQ(d::validate_hello(h, 4, 42), "");
    }
  EXPECT_EQ(d::hello_link(1, 0), 0);  // one connection: as before the field existed
  h.link = d::hello_link(3, 3);
  EXPECT_EQ(d::validate_hello(h, 4, 42), "peer opens connection 3 of 3");
  h.link = d::hello_link(18, 0);
  EXPECT_EQ(d::validate_hello(h, 4, 42), "peer opens connection 0 of 18");
}

// Stripes tile the message exactly, in order, in multiples of 4 KiB but the
// last non-empty one.
TEST(CoreFrame, StripesTileTheMessage) {
  for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{4095}, std::size_t{4096}, std::size_t{4097},
                            std::size_t{12288}, std::size_t{12289}, std::size_t{1} << 20, (std::size_t{1} << 30) + 3})
    for (int n = 1; n <= 16; ++n) {
      std::size_t next = 0;
      bool ended = false;
      for (int i = 0; i < n; ++i) {
        d::StripeExtent e = d::stripe_extent(bytes, n, i);
        EXPECT_EQ(e.offset, next) << bytes << " " << n << " " << i;
        if (ended) {
          EXPECT_EQ(e.length, 0u);
        }
        EXPECT_LE(e.length, (bytes + std::size_t(n) - 1) / std::size_t(n) + 4095);  // balanced
        if (e.length % 4096 != 0) ended = true;                                     // only the last may be ragged
        if (e.length == 0) ended = true;
        next = e.offset + e.length;
      }
      EXPECT_EQ(next, bytes) << bytes << " over " << n;
    }
}

}  // namespace
