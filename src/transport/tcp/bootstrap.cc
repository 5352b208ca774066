// Building the full mesh of peer connections through the store.
#include <poll.h>
#include <unistd.h>

#include <algorithm>

#include "common/log.h"
#include "net/auth.h"
#include "net/ifname.h"
#include "transport/tcp/tcp_transport.h"

namespace tutti::detail {
namespace {

std::string addr_key(int r) { return "tutti/tcp/" + std::to_string(r); }

std::chrono::milliseconds remaining(TimePoint deadline) {
  auto d = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return d.count() > 0 ? d : std::chrono::milliseconds(1);
}

// "rank 3" or "ranks 1, 2".
std::string rank_list(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size() && i < 32; ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > 32) s += ", ... (" + std::to_string(ranks.size()) + " in all)";
  return s;
}

}  // namespace

std::vector<std::vector<Fd>> connect_mesh(Store& store, int rank, int size, std::uint64_t job_id,
                                          const std::string& key, const Config& config, const std::string& store_host,
                                          int store_port, TimePoint deadline) {
  std::vector<std::vector<Fd>> fds(size);
  if (size == 1) return fds;
  // Where to listen and what to publish: TUTTI_LISTEN_ADDR, TUTTI_ADVERTISE_ADDR,
  // TUTTI_SOCKET_IFNAME and the route to the store (net/ifname.h).
  const PeerAddress addr = choose_peer_address(config, store_host, store_port);
  Fd listener = listen_tcp(addr.listen, 0);
  const int port = local_address(listener.get()).port();
  const std::string& host = addr.advertise;
  store.set(addr_key(rank), host + " " + std::to_string(port));
  TUTTI_LOG(Debug, "listening for peers on " << host << ":" << port);

  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(addr_key(r));
  try {
    store.wait(keys, remaining(deadline));
  } catch (const Error& e) {
    if (e.kind() != ErrorKind::Timeout) throw;
    std::vector<int> missing;
    for (int r = 0; r < size; ++r)
      if (!store.check({addr_key(r)})) missing.push_back(r);
    throw Error(ErrorKind::Timeout, "init: rank " + std::to_string(rank) + ": Timed out after " +
                                        std::to_string(store.timeout().count()) + " ms: " + rank_list(missing) +
                                        " never joined (world size " + std::to_string(size) + ")");
  }

  // Every pair has `links` connections (TUTTI_SOCKETS_PER_PEER data
  // connections and one for headers, or one for everything); the connecting
  // rank's setting decides, and its hello says which connection each is.
  const int links = config.sockets_per_peer > 1 ? config.sockets_per_peer + 1 : 1;
  Hello hello;
  hello.rank = rank;
  hello.world_size = size;
  hello.job_id = job_id;
  // The lower ranks' addresses in one request, whatever their number.
  std::vector<Bytes> lower;
  if (rank > 0) lower = store.multi_get(std::vector<std::string>(keys.begin(), keys.begin() + rank));
  for (int r = 0; r < rank; ++r) {
    std::string v(lower[static_cast<std::size_t>(r)].begin(), lower[static_cast<std::size_t>(r)].end());
    auto sp = v.rfind(' ');
    std::string peer_host = v.substr(0, sp);
    int peer_port = std::stoi(v.substr(sp + 1));
    const std::string who = "rank " + std::to_string(r) + " (" + peer_host + ":" + std::to_string(peer_port) + ")";
    for (int l = 0; l < links; ++l) {
      Fd fd = connect_tcp(resolve(peer_host, peer_port), deadline);
      try {
        authenticate_to_server(fd.get(), key, AuthRole::Peer, deadline, who);
      } catch (const Error& e) {
        throw Error(e.kind(), "init: rank " + std::to_string(rank) + " connecting to " +
                                  (e.kind() == ErrorKind::Unauthenticated ? "" : who + ": ") + e.message());
      }
      hello.link = hello_link(links, l);
      write_full(fd.get(), &hello, sizeof hello, deadline, who);
      fds[r].push_back(std::move(fd));
    }
  }

  // Connections still to come: one per higher rank until its first hello
  // says how many it opens.
  auto complete = [&](int r) {
    return !fds[r].empty() && std::all_of(fds[r].begin(), fds[r].end(), [](const Fd& f) { return f.valid(); });
  };
  set_nonblocking(listener.get(), true);
  for (;;) {
    std::vector<int> missing;
    for (int r = rank + 1; r < size; ++r)
      if (!complete(r)) missing.push_back(r);
    if (missing.empty()) break;
    pollfd p{listener.get(), POLLIN, 0};
    int ms = static_cast<int>(remaining(deadline).count());
    if (Clock::now() >= deadline || ::poll(&p, 1, ms) == 0) {
      throw Error(ErrorKind::Timeout,
                  "init: rank " + std::to_string(rank) + ": Timed out waiting for " + rank_list(missing) +
                      " to connect (" +
                      (missing.size() == 1 ? "it published its address" : "they published their addresses") +
                      " but never connected)");
    }
    Fd conn(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!conn.valid()) continue;
    set_nonblocking(conn.get(), false);
    Hello h;
    std::string who = peer_address(conn.get()).to_string();
    // A stranger that connects and stays silent costs at most a second.
    const TimePoint budget = std::min(deadline, Clock::now() + std::chrono::seconds(1));
    if (std::string bad = authenticate_client(conn.get(), key, AuthRole::Peer, budget); !bad.empty()) {
      TUTTI_LOG(Warn, "refused connection from " << who << ": it " << bad);
      continue;
    }
    try {
      read_full(conn.get(), &h, sizeof h, budget, who);
    } catch (const Error& e) {
      TUTTI_LOG(Warn, "refused connection from " << who << ": " << e.message());
      continue;
    }
    std::string bad = check_incoming_hello(h, rank, size, job_id);
    if (bad.empty()) {
      std::vector<Fd>& mine = fds[h.rank];
      const int count = hello_link_count(h), index = hello_link_index(h);
      if (mine.empty()) mine.resize(static_cast<std::size_t>(count));
      if (static_cast<int>(mine.size()) != count)
        bad = "rank " + std::to_string(h.rank) + " opens " + std::to_string(count) + " connections, before " +
              std::to_string(mine.size());
      else if (mine[static_cast<std::size_t>(index)].valid())
        bad = "rank " + std::to_string(h.rank) + " connected twice";
      else
        mine[static_cast<std::size_t>(index)] = std::move(conn);
    }
    if (!bad.empty()) TUTTI_LOG(Warn, "refused connection from " << who << ": " << bad);
  }
  return fds;
}

}  // namespace tutti::detail
