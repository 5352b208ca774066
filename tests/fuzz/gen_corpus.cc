// Writes the seed corpus of the fuzz targets: well-formed inputs that reach
// deep into each parser (every store op, pipelined requests, parked gets and
// waits; a valid hello followed by frames that match, mismatch, arrive
// unexpected, belong to an aborted communicator, or end mid-message).
//
//   gen_corpus <dir>   writes <dir>/store_stream/* and <dir>/transport_stream/*
//
// The checked-in tests/fuzz/corpus/ is its output.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "store/store_protocol.h"
#include "transport/tcp/frame.h"

namespace d = tutti::detail;
namespace fs = std::filesystem;
using tutti::Bytes;

namespace {

void write(const fs::path& dir, const std::string& name, const Bytes& b) {
  fs::create_directories(dir);
  std::ofstream f(dir / name, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

Bytes bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }

void request(Bytes& out, d::StoreOp op, std::vector<std::string> keys, std::vector<Bytes> values = {},
             std::int64_t arg = 0) {
  d::StoreFrame f;
  f.code = static_cast<std::uint8_t>(op);
  f.keys = std::move(keys);
  f.values = std::move(values);
  f.arg = arg;
  d::encode_store_frame(d::kStoreRequestMagic, f, out);
}

void store_seeds(const fs::path& dir) {
  using Op = d::StoreOp;
  // Every op once, in an order where each finds what it needs.
  Bytes all;
  request(all, Op::Set, {"tutti/tcp/0"}, {bytes("127.0.0.1 40000")});
  request(all, Op::Get, {"tutti/tcp/0"}, {}, 1000);
  request(all, Op::Add, {"counter"}, {}, 5);
  request(all, Op::Add, {"counter"}, {}, -7);
  request(all, Op::CompareSet, {"cas"}, {Bytes{}, bytes("first")});
  request(all, Op::CompareSet, {"cas"}, {bytes("first"), bytes("second")});
  request(all, Op::Wait, {"tutti/tcp/0", "counter"}, {}, 1000);
  request(all, Op::MultiGet, {"tutti/tcp/0", "counter", "tutti/tcp/0"}, {}, 1000);
  request(all, Op::Check, {"cas", "missing"});
  request(all, Op::DeleteKey, {"cas"});
  request(all, Op::NumKeys, {});
  for (std::uint8_t pieces : {0, 1, 7, 200}) {
    Bytes in{pieces};
    in.insert(in.end(), all.begin(), all.end());
    write(dir, "every-op-pieces-" + std::to_string(pieces), in);
  }
  // A get and a wait that park (their keys never come), an add on a value
  // that is not a number, a compare_set on a missing key.
  Bytes park{0};
  request(park, Op::Get, {"never"}, {}, 0);
  write(dir, "get-parks", park);
  Bytes wait{3};
  request(wait, Op::Set, {"a"}, {bytes("1")});
  request(wait, Op::Wait, {"a", "b", "c", "b"}, {}, 50);
  request(wait, Op::MultiGet, {"c", "a"}, {}, 50);
  write(dir, "wait-parks", wait);
  Bytes add{0};
  request(add, Op::Set, {"text"}, {bytes("not a number")});
  request(add, Op::Add, {"text"}, {}, 1);
  request(add, Op::Add, {"max"}, {}, INT64_MAX);
  request(add, Op::Add, {"max"}, {}, 1);
  write(dir, "add-errors", add);
  Bytes cas{0};
  request(cas, Op::CompareSet, {"none"}, {bytes("expected"), bytes("desired")});
  request(cas, Op::Get, {std::string("\x00\xff key", 6)}, {}, 0);
  write(dir, "cas-missing-binary-key", cas);
  // A frame cut short, and one of the wrong shape.
  Bytes cut{0};
  request(cut, Op::Set, {"k"}, {Bytes(100, 7)});
  cut.resize(cut.size() - 10);
  write(dir, "truncated", cut);
  d::StoreFrame bad;
  bad.code = static_cast<std::uint8_t>(Op::Set);
  bad.keys = {"k"};
  Bytes shape{0};
  d::encode_store_frame(d::kStoreRequestMagic, bad, shape);
  write(dir, "wrong-shape", shape);
}

void put_header(Bytes& out, std::uint64_t comm, std::uint64_t tag, std::uint64_t len, std::uint8_t fill) {
  d::FrameHeader h;
  h.comm_id = comm;
  h.tag = tag;
  h.bytes = len;
  const auto* p = reinterpret_cast<const std::uint8_t*>(&h);  // the wire layout is the struct's
  out.insert(out.end(), p, p + sizeof h);
  out.insert(out.end(), len, fill);
}

Bytes hello_prefix(std::uint8_t config) {
  d::Hello h;
  h.rank = 1;
  h.world_size = 2;
  h.job_id = 42;
  Bytes out{config};
  const auto* p = reinterpret_cast<const std::uint8_t*>(&h);
  out.insert(out.end(), p, p + sizeof h);
  return out;
}

void transport_seeds(const fs::path& dir) {
  // Frames for the receives the fuzzer posts (comm 1 tag 1: 16 and 8 bytes;
  // comm 1 tag 2: 0 bytes; comm 2: aborted), plus unexpected ones.
  Bytes frames;
  put_header(frames, 1, 1, 16, 0xa1);
  put_header(frames, 1, 2, 0, 0);
  put_header(frames, 2, 1, 64, 0xb2);
  put_header(frames, 1, 1, 8, 0xc3);
  put_header(frames, 3, 3, 21, 0xd4);
  put_header(frames, 1, 1, 5, 0xe5);  // length mismatch with the 8-byte receive
  for (std::uint8_t config : {0x00, 0x1f, 0x0b, 0xe4}) {
    Bytes in = hello_prefix(config);
    in.insert(in.end(), frames.begin(), frames.end());
    write(dir, "frames-config-" + std::to_string(config), in);
  }
  Bytes cut = hello_prefix(0x1f);
  put_header(cut, 1, 1, 16, 0x11);
  cut.resize(cut.size() - 4);  // ends mid-payload
  write(dir, "ends-mid-payload", cut);
  Bytes half = hello_prefix(0x01);
  put_header(half, 1, 1, 0, 0);
  half.resize(half.size() - 20);  // ends mid-header
  write(dir, "ends-mid-header", half);
  Bytes corrupt = hello_prefix(0x03);
  put_header(corrupt, 1, 2, 0, 0);
  Bytes bad_magic;
  put_header(bad_magic, 1, 1, 4, 0);
  bad_magic[0] ^= 0xff;
  corrupt.insert(corrupt.end(), bad_magic.begin(), bad_magic.end());
  write(dir, "bad-magic", corrupt);
  Bytes version = hello_prefix(0x01);
  put_header(version, 1, 1, 0, 0);
  version[1 + sizeof(d::Hello) + 4] = 2;  // frame version 2
  write(dir, "bad-version", version);
  write(dir, "hello-only", hello_prefix(0x1f));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: gen_corpus <dir>\n");
    return 2;
  }
  fs::path root = argv[1];
  store_seeds(root / "store_stream");
  transport_seeds(root / "transport_stream");
  return 0;
}
