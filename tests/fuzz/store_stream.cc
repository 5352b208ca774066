// Fuzzes the TCP store server's side of one client's connection: the input
// is the client's byte stream, cut into pieces as recv() may deliver it and
// run through take_store_request and execute_store_request, the functions
// the server's process() and handle() call, against one key-value map.
//
// Input: byte 0 seeds the piece sizes (0: the whole stream at once); the
// rest is the stream.
//
// Beyond memory and UB errors (ASan, UBSan), it checks that
//  - NeedMore asks for more than is buffered and leaves the buffer alone;
//  - a complete request re-encodes to exactly the bytes it came from (the
//    encoding is canonical), so nothing in a frame is ignored;
//  - every reply the server would send, including the TIMEOUT answer of a
//    parked get or wait, encodes and decodes back (as a client reads it) to
//    itself.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "fuzz_check.h"
#include "store/store_protocol.h"

namespace d = tutti::detail;

namespace {

void check_reply(const d::StoreFrame& rep) {
  tutti::Bytes wire = d::encode_store_frame(d::kStoreReplyMagic, rep);
  d::StoreFrame back;
  d::DecodeResult r = d::decode_store_frame(wire.data(), wire.size(), d::kStoreReplyMagic, &back);
  FUZZ_CHECK(r.status == d::DecodeStatus::Complete);
  FUZZ_CHECK(r.size == wire.size());
  FUZZ_CHECK(back.code == rep.code && back.arg == rep.arg);
  FUZZ_CHECK(back.keys == rep.keys && back.values == rep.values);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  std::uint32_t rng = data[0];
  const std::uint8_t* stream = data + 1;
  const std::size_t len = size - 1;

  d::KeyValueMap kv;
  tutti::Bytes in;
  std::uint64_t need = 0;
  std::size_t fed = 0, consumed = 0;
  bool dead = false;  // the server dropped the client
  while (!dead && fed < len) {
    std::size_t piece = len - fed;
    if (rng != 0) {
      rng = rng * 1103515245u + 12345u;
      piece = std::min<std::size_t>(piece, 1 + (rng >> 16) % 61);
    }
    in.insert(in.end(), stream + fed, stream + fed + piece);
    fed += piece;
    while (true) {
      // No spare capacity, so that AddressSanitizer sees any read past the
      // buffered bytes.
      in.shrink_to_fit();
      d::StoreFrame req;
      const std::size_t before = in.size();
      d::DecodeResult r = d::take_store_request(in, need, &req);
      if (r.status == d::DecodeStatus::NeedMore) {
        FUZZ_CHECK(in.size() == before);
        FUZZ_CHECK(need > before);
        FUZZ_CHECK(need <= d::kStoreMaxFrameBytes + 8);
        break;
      }
      if (r.status == d::DecodeStatus::Invalid) {
        FUZZ_CHECK(!r.error.empty());
        dead = true;
        break;
      }
      FUZZ_CHECK(r.size >= d::kStoreHeaderBytes && r.size <= before);
      FUZZ_CHECK(in.size() == before - r.size);
      FUZZ_CHECK(d::validate_store_request(req).empty());
      tutti::Bytes again = d::encode_store_frame(d::kStoreRequestMagic, req);
      FUZZ_CHECK(again.size() == r.size);
      FUZZ_CHECK(std::memcmp(again.data(), stream + consumed, again.size()) == 0);
      consumed += r.size;

      d::StoreOutcome o = d::execute_store_request(kv, req);
      if (o.park) {
        FUZZ_CHECK(!o.missing.empty());
        for (const auto& k : o.missing) FUZZ_CHECK(kv.count(k) == 0);
        // What the server answers at the deadline (finish_parked).
        d::StoreFrame timeout;
        timeout.code = static_cast<std::uint8_t>(d::StoreStatus::Timeout);
        timeout.arg = req.arg;
        timeout.keys = d::missing_keys(kv, req.keys);
        FUZZ_CHECK(timeout.keys == o.missing);
        check_reply(timeout);
      } else {
        FUZZ_CHECK(o.missing.empty());
        check_reply(o.reply);
        if (o.changed) FUZZ_CHECK(kv.count(req.keys[0]) == 1);
      }
    }
  }
  return 0;
}
