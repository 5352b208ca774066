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

}  // namespace

TcpPeers gather_peer_addresses(Store& store, int rank, int size, const Config& config, const std::string& store_host,
                               int store_port, const std::string& record, std::vector<std::string>& records) {
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

  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(addr_key(r));
  // Every address in one request, whatever their number; it waits (up to the
  // store's timeout, init's) until all have published.
  std::vector<Bytes> all;
  try {
    all = store.multi_get(keys);
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::Timeout) throw;
    std::vector<int> missing;
    for (int r = 0; r < size; ++r)
      if (!store.check({addr_key(r)})) missing.push_back(r);
    throw Error(ErrorKind::Timeout, "init: rank " + std::to_string(rank) + ": Timed out after " +
                                        std::to_string(store.timeout().count()) + " ms: " + rank_list(missing) +
                                        " never joined (world size " + std::to_string(size) + ")");
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
