#pragma once
// The binary wire protocol of the TCP store, and the value semantics that
// every store kind shares (add, compare_set, key quoting), kept here so that
// the memory, file and TCP stores cannot drift apart.
//
// Requests and replies use one frame layout; all integers are little-endian:
//
//   u32 magic     kRequestMagic or kReplyMagic
//   u8  code      an Op (request) or a Status (reply)
//   u8  zero[3]   reserved, must be zero
//   u32 nkeys     <= kMaxKeys
//   u32 nvalues   <= kMaxRequestValues (request), kMaxValues (reply)
//   i64 arg       request: timeout in ms (get, wait) or delta (add);
//                 reply: the result (add, check, delete_key, num_keys) or the
//                 ErrorKind of a Status::Error reply
//   nkeys   x { u32 length <= kMaxKeyBytes,   bytes }
//   nvalues x { u64 length <= kMaxValueBytes, bytes }
//
// The decoder checks every length the moment it becomes readable, before
// anything is allocated, so a peer can never make the reader buffer more than
// kMaxFrameBytes for one frame. Decoding is pure (bytes in, Frame out) so it
// can be unit-tested and fuzzed without sockets.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/completion.h"
#include "tutti/store.h"

namespace tutti::detail {

inline constexpr std::uint32_t kStoreRequestMagic = 0x51525454;  // "TTRQ" on the wire
inline constexpr std::uint32_t kStoreReplyMagic = 0x53525454;    // "TTRS" on the wire
inline constexpr std::size_t kStoreHeaderBytes = 24;
inline constexpr std::uint32_t kStoreMaxKeyBytes = 4096;
inline constexpr std::uint64_t kStoreMaxValueBytes = std::uint64_t{64} << 20;
inline constexpr std::uint32_t kStoreMaxKeys = 65536;
// A request carries at most two values (compare_set's expected and desired);
// a reply one per key (multi_get).
inline constexpr std::uint32_t kStoreMaxRequestValues = 2;
inline constexpr std::uint32_t kStoreMaxValues = kStoreMaxKeys;
// Two maximal values plus room for many keys; also caps wait/check key lists.
inline constexpr std::uint64_t kStoreMaxFrameBytes = std::uint64_t{160} << 20;
// The longest a parked request may wait; longer timeouts are clamped so that
// deadline arithmetic cannot overflow.
inline constexpr std::int64_t kStoreMaxTimeoutMs = std::int64_t{365} * 24 * 3600 * 1000;

enum class StoreOp : std::uint8_t {
  Set = 1,         // keys {k}, values {v}
  Get = 2,         // keys {k}, arg timeout ms      -> Ok values {v} | Timeout keys {k}
  Add = 3,         // keys {k}, arg delta           -> Ok arg new value | Error
  CompareSet = 4,  // keys {k}, values {exp, des}   -> Ok values {stored}
  Wait = 5,        // keys ks,  arg timeout ms      -> Ok | Timeout keys missing
  Check = 6,       // keys ks                       -> Ok arg 0/1
  DeleteKey = 7,   // keys {k}                      -> Ok arg 0/1
  NumKeys = 8,     // nothing                       -> Ok arg count
  MultiGet = 9,    // keys ks,  arg timeout ms      -> Ok values vs (in key order) | Timeout keys missing
};

enum class StoreStatus : std::uint8_t {
  Ok = 0,
  Timeout = 1,  // a parked get/wait reached its deadline
  Error = 2,    // arg: ErrorKind; values {message}
};

const char* store_op_name(std::uint8_t op);

struct StoreFrame {
  std::uint8_t code = 0;
  std::int64_t arg = 0;
  std::vector<std::string> keys;
  std::vector<Bytes> values;
};

// Appends the encoding of `frame` to `out`. Throws InvalidArgument when the
// frame breaks a limit (so a client fails before sending anything).
void encode_store_frame(std::uint32_t magic, const StoreFrame& frame, Bytes& out);
Bytes encode_store_frame(std::uint32_t magic, const StoreFrame& frame);

enum class DecodeStatus { Complete, NeedMore, Invalid };

struct DecodeResult {
  DecodeStatus status = DecodeStatus::NeedMore;
  // Complete: bytes the frame occupies. NeedMore: the total buffered bytes
  // needed before decoding can make progress (never above kStoreMaxFrameBytes).
  std::uint64_t size = 0;
  std::string error;  // Invalid: why
};

// Decodes the frame at the start of data[0, len). Never reads past len and
// never allocates for a frame that is incomplete or breaks a limit. `out` is
// filled only when the result is Complete (it may be null to only measure).
DecodeResult decode_store_frame(const std::uint8_t* data, std::size_t len, std::uint32_t magic, StoreFrame* out);

// Op-specific shape checks of a decoded request (key/value counts, timeout
// sign). Returns "" when the request is well-formed, else the reason.
std::string validate_store_request(const StoreFrame& request);

// ---- the server's side of one client's stream ------------------------------
// Pure (no I/O), so that the fuzz tests feed them arbitrary bytes.

// A connection buffer this large is released once empty.
inline constexpr std::size_t kStoreKeepCapacity = std::size_t{1} << 20;

// Takes the next request off the front of `in`, the bytes received from one
// client and not yet decoded. `need` carries from call to call how many bytes
// must be buffered before decoding can progress (0 to start). Complete:
// `*request` holds a well-formed request and its bytes are gone from `in`.
// NeedMore: only `need` changed. Invalid: the client broke the protocol
// (malformed frame, or a request of the wrong shape) and `error` says how;
// its stream cannot be resynchronized.
DecodeResult take_store_request(Bytes& in, std::uint64_t& need, StoreFrame* request);

// ---- semantics shared by every store kind ---------------------------------

using KeyValueMap = std::unordered_map<std::string, Bytes>;

// Parses a decimal int64 that fills the whole value.
bool parse_decimal(const Bytes& value, std::int64_t* out);
Bytes format_decimal(std::int64_t v);

// add(): missing counts as 0. Throws InvalidArgument naming the key when the
// stored value is not a decimal integer or the sum overflows.
std::int64_t apply_add(KeyValueMap& kv, const std::string& key, std::int64_t delta);

// compare_set() with PyTorch c10d TCPStore::compareSet semantics (see
// include/tutti/store.h). `*stored` says whether `kv` changed.
Bytes apply_compare_set(KeyValueMap& kv, const std::string& key, const Bytes& expected, const Bytes& desired,
                        bool* stored);

// "'key'" with non-printable bytes escaped, long keys shortened.
std::string quote_key(const std::string& key);
// "'a', 'b', 'c'" (the first 16, then "and N more").
std::string quote_keys(const std::vector<std::string>& keys);
// The keys of `keys` missing from `kv`, in order.
std::vector<std::string> missing_keys(const KeyValueMap& kv, const std::vector<std::string>& keys);

// The deadline `timeout_ms` from `now`, clamped to [0, kStoreMaxTimeoutMs].
TimePoint store_deadline(TimePoint now, std::int64_t timeout_ms);

// The reply to a get or multi_get whose keys are all in `kv`: their values in
// key order, or an InvalidArgument error where they would not fit in one
// frame (kStoreMaxFrameBytes).
StoreFrame store_values_reply(const KeyValueMap& kv, const std::vector<std::string>& keys);

// What the TCP store server does with one well-formed request (one that
// validate_store_request accepts), applied to `kv`.
struct StoreOutcome {
  // A get, multi_get or wait whose keys are not all there: park the request until
  // `missing` exist or its deadline passes. Otherwise: answer `reply`.
  bool park = false;
  std::vector<std::string> missing;
  StoreFrame reply;
  // The request created or changed request.keys[0]: wake its waiters.
  bool changed = false;
};
// May move values out of `request` (its keys stay).
StoreOutcome execute_store_request(KeyValueMap& kv, StoreFrame& request);

}  // namespace tutti::detail
