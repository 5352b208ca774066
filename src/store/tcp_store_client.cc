// The client of a TcpStoreServer: one blocking connection, one request at a
// time under a mutex. get and wait carry their timeout to the server, which
// parks them and answers TIMEOUT itself; the client only stops reading at that
// deadline plus a margin, for a server that is gone or stuck. Any I/O failure
// leaves the stream at an unknown point, so the connection is then closed and
// every later call fails with PeerLost naming the first failure.

#include <algorithm>
#include <mutex>

#include "net/auth.h"
#include "net/socket.h"
#include "store/store_protocol.h"
#include "tutti/error.h"
#include "tutti/store.h"

namespace tutti {
namespace {

using detail::Clock;
using detail::DecodeStatus;
using detail::StoreFrame;
using detail::StoreOp;
using detail::StoreStatus;
using detail::TimePoint;

// How long past the server's deadline the client keeps waiting for its answer.
constexpr std::chrono::seconds kReplyMargin{3};

class TcpStoreClient final : public Store {
 public:
  using Store::set;
  using Store::wait;

  TcpStoreClient(const std::string& host, int port, std::chrono::milliseconds timeout, const std::string& secret) {
    set_timeout(timeout);
    detail::SockAddr addr = detail::resolve(host, port);
    name_ = "store server " + addr.to_string();
    if (addr.to_string().rfind(host, 0) != 0 && !host.empty()) name_ += " (" + host + ")";
    const TimePoint deadline = detail::store_deadline(Clock::now(), timeout.count());
    try {
      fd_ = detail::connect_tcp(addr, deadline);
    } catch (const Error& e) {
      throw Error(e.kind(),
                  "cannot connect to " + name_ + " within " + std::to_string(timeout.count()) + " ms: " + e.message());
    }
    try {
      detail::authenticate_to_server(fd_.get(), secret, detail::AuthRole::Store, deadline, name_);
    } catch (const Error& e) {
      if (e.kind() == ErrorKind::Unauthenticated)
        throw Error(e.kind(), e.message() + (secret.empty() ? " (TUTTI_JOB_SECRET is not set in this process)" : ""));
      throw Error(e.kind(), "authenticating to " + name_ + ": " + e.message());
    }
  }

  void set(const std::string& key, const Bytes& value) override {
    StoreFrame req = request(StoreOp::Set, {key});
    req.values.push_back(value);
    StoreFrame rep = call(req, "store set of key " + detail::quote_key(key), -1);
    expect_ok(rep, 0, "set");
  }

  Bytes get(const std::string& key) override {
    StoreFrame req = request(StoreOp::Get, {key});
    req.arg = timeout().count();
    StoreFrame rep = call(req, "store get of key " + detail::quote_key(key), req.arg);
    if (rep.code == static_cast<std::uint8_t>(StoreStatus::Timeout))
      throw Error(ErrorKind::Timeout, "store get: Timed out after " + std::to_string(req.arg) + " ms waiting for key " +
                                          detail::quote_key(key) + " (" + name_ + ")");
    expect_ok(rep, 1, "get");
    return std::move(rep.values[0]);
  }

  std::vector<Bytes> multi_get(const std::vector<std::string>& keys) override {
    std::vector<Bytes> out;
    out.reserve(keys.size());
    // One request per kStoreMaxKeys keys, all within one timeout.
    const detail::TimePoint deadline = detail::deadline_after(timeout());
    for (std::size_t first = 0; first < keys.size(); first += detail::kStoreMaxKeys) {
      const std::size_t n = std::min<std::size_t>(detail::kStoreMaxKeys, keys.size() - first);
      std::vector<std::string> part(keys.begin() + static_cast<std::ptrdiff_t>(first),
                                    keys.begin() + static_cast<std::ptrdiff_t>(first + n));
      StoreFrame req = request(StoreOp::MultiGet, part);
      req.arg = std::max<std::int64_t>(
          0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - detail::Clock::now()).count());
      StoreFrame rep = call(req, "store multi_get of keys " + detail::quote_keys(req.keys), req.arg);
      if (rep.code == static_cast<std::uint8_t>(StoreStatus::Timeout))
        throw Error(ErrorKind::Timeout, "store multi_get: Timed out after " + std::to_string(req.arg) +
                                            " ms; missing keys: " + detail::quote_keys(rep.keys) + " (" + name_ + ")");
      expect_ok(rep, n, "multi_get");
      for (auto& v : rep.values) out.push_back(std::move(v));
    }
    return out;
  }

  std::int64_t add(const std::string& key, std::int64_t delta) override {
    StoreFrame req = request(StoreOp::Add, {key});
    req.arg = delta;
    StoreFrame rep = call(req, "store add on key " + detail::quote_key(key), -1);
    expect_ok(rep, 0, "add");
    return rep.arg;
  }

  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override {
    StoreFrame req = request(StoreOp::CompareSet, {key});
    req.values = {expected, desired};
    StoreFrame rep = call(req, "store compare_set of key " + detail::quote_key(key), -1);
    expect_ok(rep, 1, "compare_set");
    return std::move(rep.values[0]);
  }

  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    StoreFrame req = request(StoreOp::Wait, keys);
    req.arg = timeout.count() < 0 ? 0 : timeout.count();
    StoreFrame rep = call(req, "store wait for keys " + detail::quote_keys(keys), req.arg);
    if (rep.code == static_cast<std::uint8_t>(StoreStatus::Timeout))
      throw Error(ErrorKind::Timeout, "store wait: Timed out after " + std::to_string(req.arg) +
                                          " ms; missing keys: " + detail::quote_keys(rep.keys) + " (" + name_ + ")");
    expect_ok(rep, 0, "wait");
  }

  bool check(const std::vector<std::string>& keys) override {
    StoreFrame rep = call(request(StoreOp::Check, keys), "store check of keys " + detail::quote_keys(keys), -1);
    expect_ok(rep, 0, "check");
    return rep.arg != 0;
  }

  bool delete_key(const std::string& key) override {
    StoreFrame rep = call(request(StoreOp::DeleteKey, {key}), "store delete_key of key " + detail::quote_key(key), -1);
    expect_ok(rep, 0, "delete_key");
    return rep.arg != 0;
  }

  std::int64_t num_keys() override {
    StoreFrame rep = call(request(StoreOp::NumKeys, {}), "store num_keys", -1);
    expect_ok(rep, 0, "num_keys");
    return rep.arg;
  }

 private:
  static StoreFrame request(StoreOp op, std::vector<std::string> keys) {
    StoreFrame f;
    f.code = static_cast<std::uint8_t>(op);
    f.keys = std::move(keys);
    return f;
  }

  // Sends `req` and reads its reply. `parked_ms` >= 0: the server may hold
  // the request that long; otherwise it answers at once and the store
  // timeout bounds the exchange. `what` starts every error message.
  StoreFrame call(const StoreFrame& req, const std::string& what, std::int64_t parked_ms) {
    Bytes wire = detail::encode_store_frame(detail::kStoreRequestMagic, req);  // limits fail before sending
    std::lock_guard<std::mutex> lock(mu_);
    if (!fd_.valid())
      throw Error(ErrorKind::PeerLost, what + ": the connection to " + name_ + " was lost earlier (" + lost_ + ")");
    auto now = Clock::now();
    TimePoint deadline = parked_ms >= 0 ? detail::store_deadline(now, parked_ms) + kReplyMargin
                                        : detail::store_deadline(now, timeout().count());
    StoreFrame rep;
    try {
      detail::write_full(fd_.get(), wire.data(), wire.size(), deadline, name_);
      Bytes buf(detail::kStoreHeaderBytes);
      detail::read_full(fd_.get(), buf.data(), buf.size(), deadline, name_);
      while (true) {
        auto r = detail::decode_store_frame(buf.data(), buf.size(), detail::kStoreReplyMagic, &rep);
        if (r.status == DecodeStatus::Complete) break;
        if (r.status == DecodeStatus::Invalid)
          throw Error(ErrorKind::Internal, name_ + " sent a malformed reply: " + r.error);
        // The decoder asks for the next length field or the rest; reading
        // what is there beyond it too keeps a reply of many values from
        // being decoded again from its start for each one (one reply per
        // request: nothing past this frame can come).
        const std::size_t old = buf.size(), need = static_cast<std::size_t>(r.size) - old;
        buf.resize(old + std::max<std::size_t>(need, 256u << 10));
        buf.resize(old + detail::read_at_least(fd_.get(), buf.data() + old, need, buf.size() - old, deadline, name_));
      }
    } catch (const Error& e) {
      lost_ = e.message();
      fd_.reset();
      throw Error(e.kind(), what + ": " + e.message());
    }
    if (rep.code == static_cast<std::uint8_t>(StoreStatus::Error)) {
      auto kind = ErrorKind::Internal;
      if (rep.arg >= 0 && rep.arg <= static_cast<std::int64_t>(ErrorKind::Revoked))
        kind = static_cast<ErrorKind>(rep.arg);
      std::string msg = rep.values.empty() ? what + " failed" : std::string(rep.values[0].begin(), rep.values[0].end());
      throw Error(kind, msg + " (" + name_ + ")");
    }
    return rep;
  }

  void expect_ok(const StoreFrame& rep, std::size_t values, const char* op) {
    if (rep.code == static_cast<std::uint8_t>(StoreStatus::Ok) && rep.values.size() == values) return;
    throw Error(ErrorKind::Internal, std::string("unexpected reply to store ") + op + " from " + name_ + " (status " +
                                         std::to_string(rep.code) + ", " + std::to_string(rep.values.size()) +
                                         " values)");
  }

  std::mutex mu_;
  detail::Fd fd_;
  std::string name_;  // "store server 10.0.0.1:29500 (host)"
  std::string lost_;  // why fd_ was closed
};

}  // namespace

std::shared_ptr<Store> make_tcp_store_client(const std::string& host, int port, std::chrono::milliseconds timeout,
                                             const std::string& secret) {
  return std::make_shared<TcpStoreClient>(host, port, timeout, secret);
}

}  // namespace tutti
