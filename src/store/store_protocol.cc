#include "store/store_protocol.h"

#include <algorithm>
#include <charconv>
#include <cstdio>

#include "tutti/error.h"

namespace tutti::detail {
namespace {

// Byte-wise little-endian so the format does not depend on the host.
void put_u32(Bytes& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}
void put_u64(Bytes& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}
std::uint32_t get_u32(const std::uint8_t* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
std::uint64_t get_u64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

DecodeResult need_more(std::uint64_t n) { return {DecodeStatus::NeedMore, n, {}}; }
DecodeResult invalid(std::string why) { return {DecodeStatus::Invalid, 0, std::move(why)}; }

std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

}  // namespace

const char* store_op_name(std::uint8_t op) {
  switch (static_cast<StoreOp>(op)) {
    case StoreOp::Set:
      return "set";
    case StoreOp::Get:
      return "get";
    case StoreOp::Add:
      return "add";
    case StoreOp::CompareSet:
      return "compare_set";
    case StoreOp::Wait:
      return "wait";
    case StoreOp::Check:
      return "check";
    case StoreOp::DeleteKey:
      return "delete_key";
    case StoreOp::NumKeys:
      return "num_keys";
    case StoreOp::MultiGet:
      return "multi_get";
  }
  return "unknown op";
}

void encode_store_frame(std::uint32_t magic, const StoreFrame& frame, Bytes& out) {
  if (frame.keys.size() > kStoreMaxKeys)
    throw Error(ErrorKind::InvalidArgument, "a store request may name at most " + std::to_string(kStoreMaxKeys) +
                                                " keys, got " + std::to_string(frame.keys.size()));
  if (frame.values.size() > (magic == kStoreRequestMagic ? kStoreMaxRequestValues : kStoreMaxValues))
    throw Error(ErrorKind::Internal, "store frame with " + std::to_string(frame.values.size()) + " values");
  std::uint64_t total = kStoreHeaderBytes;
  for (const auto& k : frame.keys) {
    if (k.size() > kStoreMaxKeyBytes)
      throw Error(ErrorKind::InvalidArgument, "store key " + quote_key(k) + " is " + std::to_string(k.size()) +
                                                  " bytes, more than the limit of " +
                                                  std::to_string(kStoreMaxKeyBytes));
    total += 4 + k.size();
  }
  for (const auto& v : frame.values) {
    if (v.size() > kStoreMaxValueBytes)
      throw Error(ErrorKind::InvalidArgument,
                  "store value of " + std::to_string(v.size()) + " bytes for key " +
                      (frame.keys.empty() ? std::string("(none)") : quote_key(frame.keys[0])) +
                      " is more than the limit of " + std::to_string(kStoreMaxValueBytes));
    total += 8 + v.size();
  }
  if (total > kStoreMaxFrameBytes)
    throw Error(ErrorKind::InvalidArgument, "store request of " + std::to_string(total) +
                                                " bytes is more than the limit of " +
                                                std::to_string(kStoreMaxFrameBytes));
  out.reserve(out.size() + total);
  put_u32(out, magic);
  out.push_back(frame.code);
  out.push_back(0);
  out.push_back(0);
  out.push_back(0);
  put_u32(out, static_cast<std::uint32_t>(frame.keys.size()));
  put_u32(out, static_cast<std::uint32_t>(frame.values.size()));
  put_u64(out, static_cast<std::uint64_t>(frame.arg));
  for (const auto& k : frame.keys) {
    put_u32(out, static_cast<std::uint32_t>(k.size()));
    out.insert(out.end(), k.begin(), k.end());
  }
  for (const auto& v : frame.values) {
    put_u64(out, v.size());
    out.insert(out.end(), v.begin(), v.end());
  }
}

Bytes encode_store_frame(std::uint32_t magic, const StoreFrame& frame) {
  Bytes out;
  encode_store_frame(magic, frame, out);
  return out;
}

DecodeResult decode_store_frame(const std::uint8_t* data, std::size_t len, std::uint32_t magic, StoreFrame* out) {
  if (len < kStoreHeaderBytes) return need_more(kStoreHeaderBytes);
  std::uint32_t m = get_u32(data);
  if (m != magic) return invalid("bad magic " + hex32(m) + " (expected " + hex32(magic) + ")");
  if (data[5] != 0 || data[6] != 0 || data[7] != 0) return invalid("reserved header bytes are not zero");
  std::uint32_t nkeys = get_u32(data + 8);
  std::uint32_t nvalues = get_u32(data + 12);
  if (nkeys > kStoreMaxKeys)
    return invalid(std::to_string(nkeys) + " keys, more than the limit of " + std::to_string(kStoreMaxKeys));
  const std::uint32_t max_values = magic == kStoreRequestMagic ? kStoreMaxRequestValues : kStoreMaxValues;
  if (nvalues > max_values)
    return invalid(std::to_string(nvalues) + " values, more than the limit of " + std::to_string(max_values));

  // First pass: walk the lengths, checking each before trusting it. Every
  // step keeps pos <= kStoreMaxFrameBytes, so nothing below can overflow.
  std::uint64_t pos = kStoreHeaderBytes;
  for (std::uint32_t i = 0; i < nkeys; ++i) {
    if (len < pos + 4) return need_more(pos + 4);
    std::uint32_t klen = get_u32(data + pos);
    if (klen > kStoreMaxKeyBytes)
      return invalid("key " + std::to_string(i) + " is " + std::to_string(klen) + " bytes, more than the limit of " +
                     std::to_string(kStoreMaxKeyBytes));
    pos += 4 + std::uint64_t{klen};
    if (pos > kStoreMaxFrameBytes)
      return invalid("frame longer than the limit of " + std::to_string(kStoreMaxFrameBytes) + " bytes");
  }
  for (std::uint32_t i = 0; i < nvalues; ++i) {
    if (len < pos + 8) return need_more(pos + 8);
    std::uint64_t vlen = get_u64(data + pos);
    if (vlen > kStoreMaxValueBytes)
      return invalid("value " + std::to_string(i) + " is " + std::to_string(vlen) + " bytes, more than the limit of " +
                     std::to_string(kStoreMaxValueBytes));
    pos += 8 + vlen;
    if (pos > kStoreMaxFrameBytes)
      return invalid("frame longer than the limit of " + std::to_string(kStoreMaxFrameBytes) + " bytes");
  }
  if (len < pos) return need_more(pos);

  if (out) {
    // Second pass: the whole frame is present and within limits.
    out->code = data[4];
    out->arg = static_cast<std::int64_t>(get_u64(data + 16));
    out->keys.clear();
    out->values.clear();
    out->keys.reserve(nkeys);
    out->values.reserve(nvalues);
    std::size_t p = kStoreHeaderBytes;
    for (std::uint32_t i = 0; i < nkeys; ++i) {
      std::uint32_t klen = get_u32(data + p);
      p += 4;
      out->keys.emplace_back(reinterpret_cast<const char*>(data + p), klen);
      p += klen;
    }
    for (std::uint32_t i = 0; i < nvalues; ++i) {
      auto vlen = static_cast<std::size_t>(get_u64(data + p));
      p += 8;
      out->values.emplace_back(data + p, data + p + vlen);
      p += vlen;
    }
  }
  return {DecodeStatus::Complete, pos, {}};
}

std::string validate_store_request(const StoreFrame& r) {
  auto shape = [&](std::size_t keys, std::size_t values) -> std::string {
    if (r.keys.size() == keys && r.values.size() == values) return {};
    return std::string(store_op_name(r.code)) + " request with " + std::to_string(r.keys.size()) + " keys and " +
           std::to_string(r.values.size()) + " values (expected " + std::to_string(keys) + " and " +
           std::to_string(values) + ")";
  };
  auto timeout_ok = [&]() -> std::string {
    if (r.arg >= 0) return {};
    return std::string(store_op_name(r.code)) + " request with negative timeout " + std::to_string(r.arg);
  };
  switch (static_cast<StoreOp>(r.code)) {
    case StoreOp::Set:
      return shape(1, 1);
    case StoreOp::Get: {
      std::string e = shape(1, 0);
      return e.empty() ? timeout_ok() : e;
    }
    case StoreOp::Add:
      return shape(1, 0);
    case StoreOp::CompareSet:
      return shape(1, 2);
    case StoreOp::Wait: {
      if (!r.values.empty()) return "wait request with values";
      return timeout_ok();
    }
    case StoreOp::Check:
      return r.values.empty() ? std::string() : std::string("check request with values");
    case StoreOp::DeleteKey:
      return shape(1, 0);
    case StoreOp::NumKeys:
      return shape(0, 0);
    case StoreOp::MultiGet: {
      if (r.keys.empty()) return "multi_get request without keys";
      if (!r.values.empty()) return "multi_get request with values";
      return timeout_ok();
    }
  }
  return "unknown op code " + std::to_string(r.code);
}

DecodeResult take_store_request(Bytes& in, std::uint64_t& need, StoreFrame* request) {
  if (in.size() < need) return need_more(need);
  DecodeResult r = decode_store_frame(in.data(), in.size(), kStoreRequestMagic, request);
  if (r.status == DecodeStatus::NeedMore) need = r.size;
  if (r.status != DecodeStatus::Complete) return r;
  in.erase(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(r.size));
  need = 0;
  if (in.empty() && in.capacity() > kStoreKeepCapacity) Bytes().swap(in);
  std::string bad = validate_store_request(*request);
  if (!bad.empty()) return invalid(std::move(bad));
  return r;
}

StoreOutcome execute_store_request(KeyValueMap& kv, StoreFrame& req) {
  StoreOutcome o;
  StoreFrame& rep = o.reply;
  rep.code = static_cast<std::uint8_t>(StoreStatus::Ok);
  switch (static_cast<StoreOp>(req.code)) {
    case StoreOp::Set:
      kv[req.keys[0]] = std::move(req.values[0]);
      o.changed = true;
      break;
    case StoreOp::Get:
    case StoreOp::MultiGet:
      o.missing = missing_keys(kv, req.keys);
      o.park = !o.missing.empty();
      if (!o.park) rep = store_values_reply(kv, req.keys);
      break;
    case StoreOp::Add:
      try {
        rep.arg = apply_add(kv, req.keys[0], req.arg);
        o.changed = true;
      } catch (const Error& e) {
        rep.code = static_cast<std::uint8_t>(StoreStatus::Error);
        rep.arg = static_cast<std::int64_t>(e.kind());
        rep.values.emplace_back(e.message().begin(), e.message().end());
      }
      break;
    case StoreOp::CompareSet: {
      bool stored = false;
      rep.values.push_back(apply_compare_set(kv, req.keys[0], req.values[0], req.values[1], &stored));
      o.changed = stored;
      break;
    }
    case StoreOp::Wait:
      o.missing = missing_keys(kv, req.keys);
      o.park = !o.missing.empty();
      break;
    case StoreOp::Check:
      rep.arg = missing_keys(kv, req.keys).empty() ? 1 : 0;
      break;
    case StoreOp::DeleteKey:
      rep.arg = static_cast<std::int64_t>(kv.erase(req.keys[0]));
      break;
    case StoreOp::NumKeys:
      rep.arg = static_cast<std::int64_t>(kv.size());
      break;
  }
  return o;
}

StoreFrame store_values_reply(const KeyValueMap& kv, const std::vector<std::string>& keys) {
  StoreFrame rep;
  rep.code = static_cast<std::uint8_t>(StoreStatus::Ok);
  std::uint64_t total = kStoreHeaderBytes;
  for (const auto& k : keys) total += 8 + kv.at(k).size();
  if (total > kStoreMaxFrameBytes) {
    rep.code = static_cast<std::uint8_t>(StoreStatus::Error);
    rep.arg = static_cast<std::int64_t>(ErrorKind::InvalidArgument);
    std::string msg = "store multi_get of " + std::to_string(keys.size()) + " keys: their values take " +
                      std::to_string(total) + " bytes, more than the limit of one reply (" +
                      std::to_string(kStoreMaxFrameBytes) + ")";
    rep.values.emplace_back(msg.begin(), msg.end());
    return rep;
  }
  rep.values.reserve(keys.size());
  for (const auto& k : keys) rep.values.push_back(kv.at(k));
  return rep;
}

bool parse_decimal(const Bytes& value, std::int64_t* out) {
  if (value.empty()) return false;
  const char* b = reinterpret_cast<const char*>(value.data());
  const char* e = b + value.size();
  std::int64_t v = 0;
  auto [ptr, ec] = std::from_chars(b, e, v);
  if (ec != std::errc() || ptr != e) return false;
  *out = v;
  return true;
}

Bytes format_decimal(std::int64_t v) {
  std::string s = std::to_string(v);
  return Bytes(s.begin(), s.end());
}

std::int64_t apply_add(KeyValueMap& kv, const std::string& key, std::int64_t delta) {
  std::int64_t current = 0;
  auto it = kv.find(key);
  if (it != kv.end() && !parse_decimal(it->second, &current)) {
    std::string shown(it->second.begin(), it->second.begin() + std::min<std::size_t>(it->second.size(), 32));
    throw Error(ErrorKind::InvalidArgument, "store add on key " + quote_key(key) +
                                                ": the stored value is not a decimal integer (starts with " +
                                                quote_key(shown) + ")");
  }
  std::int64_t next = 0;
  if (__builtin_add_overflow(current, delta, &next))
    throw Error(ErrorKind::InvalidArgument, "store add on key " + quote_key(key) + ": " + std::to_string(current) +
                                                " + " + std::to_string(delta) + " overflows int64");
  kv[key] = format_decimal(next);
  return next;
}

Bytes apply_compare_set(KeyValueMap& kv, const std::string& key, const Bytes& expected, const Bytes& desired,
                        bool* stored) {
  *stored = false;
  auto it = kv.find(key);
  if (it == kv.end()) {
    if (expected.empty()) {
      kv.emplace(key, desired);
      *stored = true;
      return desired;
    }
    // PyTorch answers `expected` here (the key stays missing), so a caller
    // comparing the result with `desired` sees that nothing was stored.
    return expected;
  }
  if (it->second == expected) {
    it->second = desired;
    *stored = true;
  }
  return it->second;
}

std::string quote_key(const std::string& key) {
  constexpr std::size_t kShown = 200;
  std::string out = "'";
  for (std::size_t i = 0; i < key.size() && i < kShown; ++i) {
    auto c = static_cast<unsigned char>(key[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  if (key.size() > kShown) out += "...(" + std::to_string(key.size()) + " bytes)";
  return out + "'";
}

std::string quote_keys(const std::vector<std::string>& keys) {
  constexpr std::size_t kShown = 16;
  std::string out;
  for (std::size_t i = 0; i < keys.size() && i < kShown; ++i) {
    if (i) out += ", ";
    out += quote_key(keys[i]);
  }
  if (keys.size() > kShown) out += " and " + std::to_string(keys.size() - kShown) + " more";
  return out;
}

std::vector<std::string> missing_keys(const KeyValueMap& kv, const std::vector<std::string>& keys) {
  std::vector<std::string> out;
  for (const auto& k : keys)
    if (!kv.count(k)) out.push_back(k);
  return out;
}

TimePoint store_deadline(TimePoint now, std::int64_t timeout_ms) {
  if (timeout_ms < 0) timeout_ms = 0;
  if (timeout_ms > kStoreMaxTimeoutMs) timeout_ms = kStoreMaxTimeoutMs;
  return now + std::chrono::milliseconds(timeout_ms);
}

}  // namespace tutti::detail
