// Meeting the peers through the store: every rank's address, no connection
// (connections are made on first use: tcp_handshake.cc).
#include <algorithm>

#include "common/log.h"
#include "net/ifname.h"
#include "transport/tcp/tcp_transport.h"

namespace tutti::detail {
namespace {

std::string addr_key(int r) { return "tutti/tcp/" + std::to_string(r); }

// "rank 3" or "ranks 1, 2".
std::string rank_list(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size() && i < 32; ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > 32) s += ", ... (" + std::to_string(ranks.size()) + " in all)";
  return s;
}

// The ranks whose address is not in the store, for the message of a
// timed-out init: found by halving ranges (a check of a range is one store
// request, true when all of it is there), at most kShown of them and for at
// most a moment, whatever the world's size; the ranges not searched are
// named as such.
std::string missing_ranks(Store& store, int size, std::string (*list)(const std::vector<int>&)) {
  constexpr std::size_t kShown = 32;
  const auto until = Clock::now() + std::chrono::milliseconds(500);
  std::vector<int> missing;
  std::vector<std::pair<int, int>> todo{{0, size}}, unsearched;  // [first, end), searched depth first
  auto all_there = [&](int first, int end) {
    std::vector<std::string> keys;
    for (int r = first; r < end; ++r) keys.push_back(addr_key(r));
    return store.check(keys);
  };
  while (!todo.empty()) {
    auto [first, end] = todo.back();
    todo.pop_back();
    if (missing.size() >= kShown || Clock::now() >= until) {
      unsearched.emplace_back(first, end);
      continue;
    }
    // One request checks up to 4,096 keys; below 64, rank by rank.
    if (end - first <= 4096 && all_there(first, end)) continue;
    if (end - first <= 64) {
      int r = first;
      for (; r < end && missing.size() < kShown && Clock::now() < until; ++r)
        if (!all_there(r, r + 1)) missing.push_back(r);
      if (r < end) unsearched.emplace_back(r, end);
      continue;
    }
    const int mid = first + (end - first) / 2;
    todo.emplace_back(mid, end);
    todo.emplace_back(first, mid);
  }
  if (missing.empty()) return "some ranks";
  std::string s = list(missing);
  if (unsearched.empty()) return s;
  long long left = 0;
  for (auto [a, b] : unsearched) left += b - a;
  return s + " and maybe others of the " + std::to_string(left) + " ranks not searched";
}

}  // namespace

TcpPeers gather_peer_addresses(Store& store, int rank, int size, const Config& config, const std::string& store_host,
                               int store_port, const std::string& record, std::vector<std::string>& records,
                               TimePoint deadline) {
  TcpPeers peers;
  peers.links = config.sockets_per_peer > 1 ? config.sockets_per_peer + 1 : 1;
  peers.connect_timeout = config.timeout;
  // Where to listen and what to publish: TUTTI_LISTEN_ADDR, TUTTI_ADVERTISE_ADDR,
  // TUTTI_SOCKET_IFNAME and the route to the store (net/ifname.h).
  const PeerAddress addr = choose_peer_address(config, store_host, store_port);
  peers.listener = listen_tcp(addr.listen, 0);
  const int port = local_address(peers.listener.get()).port();
  // "host port\nrecord"
  store.set(addr_key(rank), addr.advertise + " " + std::to_string(port) + "\n" + record);
  TUTTI_LOG(Debug, "listening for peers on " << addr.advertise << ":" << port);

  // Every address in one request per 65,536 ranks; it waits (until init's
  // deadline) until all have published. The keys are made a request at a
  // time: a world size far beyond the ranks that came costs no more time
  // than the timeout (and no memory for keys nobody will read).
  const auto full_timeout = store.timeout();
  std::vector<Bytes> all;
  all.reserve(static_cast<std::size_t>(size));
  try {
    constexpr int kPerRequest = 65536;
    std::vector<std::string> keys;
    for (int first = 0; first < size; first += kPerRequest) {
      keys.clear();
      for (int r = first; r < std::min(size, first + kPerRequest); ++r) keys.push_back(addr_key(r));
      store.set_timeout(std::max(std::chrono::milliseconds(1),
                                 std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now())));
      for (Bytes& v : store.multi_get(keys)) all.push_back(std::move(v));
    }
    store.set_timeout(full_timeout);
  } catch (const Error& e) {
    store.set_timeout(full_timeout);
    if (e.kind() != ErrorKind::Timeout) throw;
    throw Error(ErrorKind::Timeout, "init: rank " + std::to_string(rank) + ": Timed out after " +
                                        std::to_string(full_timeout.count()) +
                                        " ms: " + missing_ranks(store, size, rank_list) + " never joined (world size " +
                                        std::to_string(size) + ")");
  }
  records.clear();
  for (int r = 0; r < size; ++r) {
    const Bytes& v = all[static_cast<std::size_t>(r)];
    const auto nl = std::find(v.begin(), v.end(), static_cast<std::uint8_t>('\n'));
    if (nl == v.end())
      throw Error(ErrorKind::InvalidArgument, "init: rank " + std::to_string(r) + "'s address record \"" +
                                                  std::string(v.begin(), v.end()) +
                                                  "\" has no host record: is it a build of another tutti version?");
    peers.addresses.emplace_back(v.begin(), nl);
    records.emplace_back(nl + 1, v.end());
  }
  return peers;
}

}  // namespace tutti::detail
