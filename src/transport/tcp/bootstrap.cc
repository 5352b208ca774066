// The TCP transport's factory (tcp_transport.h, make_tcp_factory): where a
// rank listens and what it publishes, then the transport, which makes each
// connection on first use (tcp_handshake.cc) but for the two ring
// neighbours', made before init returns.
#include "common/log.h"
#include "net/ifname.h"
#include "net/socket.h"
#include "transport/tcp/tcp_transport.h"

namespace tutti::detail {
namespace {

class TcpFactory final : public TransportFactory {
 public:
  TcpFactory(const Config& config, std::string store_host, int store_port, std::string key, std::uint64_t job_id)
      : config_(config),
        store_host_(std::move(store_host)),
        store_port_(store_port),
        key_(std::move(key)),
        job_id_(job_id) {}

  std::string address() override {
    // TUTTI_LISTEN_ADDR, TUTTI_ADVERTISE_ADDR, TUTTI_SOCKET_IFNAME and the
    // route to the store (net/ifname.h).
    const PeerAddress addr = choose_peer_address(config_, store_host_, store_port_);
    listener_ = listen_tcp(addr.listen, 0);
    const int port = local_address(listener_.get()).port();
    TUTTI_LOG(Debug, "listening for peers on " << addr.advertise << ":" << port);
    // A congestion control the kernel refuses fails here, before anything is sent.
    congestion_ = choose_congestion(config_.tcp_congestion);
    if (!congestion_.empty())
      TUTTI_LOG(Debug, "peer connections use TCP congestion control "
                           << congestion_
                           << (config_.tcp_congestion.empty() ? " in place of the kernel's default" : ""));
    return addr.advertise + " " + std::to_string(port);
  }

  std::shared_ptr<Transport> make(int rank, int size, std::vector<std::string> addresses, TimePoint deadline) override {
    TcpPeers peers;
    peers.listener = std::move(listener_);
    peers.addresses = std::move(addresses);
    peers.key = key_;
    peers.job_id = job_id_;
    peers.links = config_.sockets_per_peer > 1 ? config_.sockets_per_peer + 1 : 1;
    peers.congestion = congestion_;
    peers.connect_timeout = config_.timeout;
    auto tcp = std::make_shared<TcpTransport>(rank, size, std::move(peers), config_.socket_buffer_bytes,
                                              config_.socket_stripe_bytes);
    // The connections to the two ring neighbours now, so that a rank that
    // cannot be reached or does not hold the job's secret fails init, on
    // both sides of the pair (and no rank leaves init before its
    // neighbours are up). The others are made on first use.
    for (const int peer : {(rank + 1) % size, (rank + size - 1) % size}) {
      ErrorKind kind = ErrorKind::PeerLost;
      if (std::string bad = tcp->connect_now(peer, deadline, &kind); !bad.empty())
        throw Error(kind, "init: rank " + std::to_string(rank) +
                              (kind == ErrorKind::Unauthenticated ? " connecting to " : ": ") + bad);
    }
    return tcp;
  }

 private:
  const Config& config_;
  std::string store_host_;
  int store_port_;
  std::string key_;
  std::uint64_t job_id_;
  Fd listener_;
  std::string congestion_;
};

}  // namespace

std::unique_ptr<TransportFactory> make_tcp_factory(const Config& config, const std::string& store_host, int store_port,
                                                   std::string key, std::uint64_t job_id) {
  return std::make_unique<TcpFactory>(config, store_host, store_port, std::move(key), job_id);
}

}  // namespace tutti::detail
