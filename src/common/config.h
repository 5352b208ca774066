#pragma once
// Config: the library's TUTTI_* settings, read when a job initializes
// (Config::from_env) from the one table of settings (common/settings.h),
// which also documents them (docs/configuration.md is generated from it).

#include <chrono>
#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace tutti::detail {

inline constexpr int kMaxSocketsPerPeer = 16;

struct Config {
  // TUTTI_TIMEOUT (seconds, may be fractional): deadline of init and of every op.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  // TUTTI_CHUNK_BYTES: pipelining unit of chunked algorithms, on
  // communicators within one host (chunk_bytes) and spanning hosts
  // (hosts_chunk_bytes: 256 KiB, smaller so the ring's pipeline fills
  // sooner across links, where it is faster for a 16 MiB all_reduce between
  // 4 hosts; on loopback 1 MiB is faster: bench/peers/netbed/compare.sh with
  // VARIANTS="c1m=TUTTI_CHUNK_BYTES=1M", tutti-bench all_reduce -b 1M -e 64M
  // with TUTTI_TRANSPORT=tcp on one host; docs/tuning.md
  // "TUTTI_CHUNK_BYTES"). Set, it applies to both.
  std::size_t chunk_bytes = 1 << 20;
  std::size_t hosts_chunk_bytes = 256 << 10;
  // TUTTI_SMALL_BYTES: all_reduce messages up to this size use recursive
  // doubling over the network, larger ones Rabenseifner or the ring.
  std::size_t small_bytes = 64 << 10;
  // TUTTI_TWO_LEVEL_LEADER_BYTES: two-level all_reduce messages up to this
  // size go through one leader per host (media/two_level.h).
  std::size_t two_level_leader_bytes = 128 << 10;
  // TUTTI_ALGO: "collective:algorithm,..." overrides of the selection table.
  std::map<std::string, std::string> algo;
  // TUTTI_ALGO_TUNING: whether all_reduce, broadcast and all_to_all time
  // two ways of running against each other where the better one depends on
  // the network, and run the faster (algorithms/tuner.h; where each applies:
  // Planner::configure): "auto" on communicators of 3 or more ranks spanning
  // hosts, "on" on every network communicator of 2 or more, "off" never.
  // TUTTI_ALGO naming an algorithm of the collective turns its choice off.
  std::string algo_tuning = "auto";
  // TUTTI_SOCKET_BUFFER_BYTES: SO_SNDBUF/SO_RCVBUF of peer sockets (0: the
  // kernel's sizes and autotuning).
  std::size_t socket_buffer_bytes = 0;
  // TUTTI_TCP_CONGESTION: congestion control of peer connections: a name the
  // kernel allows (reno, cubic, ...), "system" for the kernel's default, or
  // empty (unset): reno where the kernel's default is cubic or bbr, else the
  // kernel's default (net/socket.h).
  std::string tcp_congestion;
  // TUTTI_SOCKETS_PER_PEER: connections that carry the payload of large
  // messages between two ranks, each message split across all of them
  // (1: one connection carries everything; above 1, one more connection
  // carries headers and small messages). At most kMaxSocketsPerPeer.
  int sockets_per_peer = 1;
  // TUTTI_SOCKET_STRIPE_BYTES: messages of at least this size are split
  // across the TUTTI_SOCKETS_PER_PEER connections.
  std::size_t socket_stripe_bytes = 1 << 20;
  // TUTTI_LISTEN_ADDR: address ranks listen on for peers (default: all IPv4,
  // or the interface TUTTI_SOCKET_IFNAME picks).
  std::string listen_addr = "0.0.0.0";
  bool listen_addr_set = false;  // TUTTI_LISTEN_ADDR was given
  // TUTTI_SOCKET_IFNAME: interfaces to use, NCCL's syntax (see net/ifname.h).
  std::string socket_ifname;
  // TUTTI_STORE_LISTEN_ADDR: address rank 0's store server listens on (default: all).
  std::string store_listen_addr;
  // TUTTI_ADVERTISE_ADDR: address published to peers (default: the address this
  // host uses to reach the store).
  std::string advertise_addr;

  // TUTTI_TRANSPORT, read once: Auto (shared memory among ranks of one
  // host, the network otherwise) or Tcp (the network everywhere).
  enum class Transport : std::uint8_t { Auto, Tcp };
  Transport transport = Transport::Auto;
  // TUTTI_SHM_SLOT_BYTES: size of each of the four slots every rank has in a
  // communicator's shared-memory segment (the pipelining unit).
  std::size_t shm_slot_bytes = 256 << 10;
  // TUTTI_SHM_ONESHOT_BYTES: shared-memory reductions up to this size are
  // one-shot (every rank reduces everything); above, two-shot.
  std::size_t shm_one_shot_bytes = 16 << 10;
  // Whether TUTTI_SHM_ONESHOT_BYTES was set: then the forms follow it alone
  // (and shared allocations always run in place); unset, the shared-memory
  // tuners choose them per size.
  bool shm_one_shot_set = false;
  // TUTTI_SHM_CMA_BYTES: shared-memory collectives move blocks of at least
  // this size with one copy straight from the peer's memory
  // (process_vm_readv) when every member's kernel allows it; 0 turns it off.
  std::size_t shm_cma_bytes = 128 << 10;
  // Whether TUTTI_SHM_CMA_BYTES was set: then single copy follows it
  // alone; unset, the shared-memory tuners may turn it off per size
  // (TUTTI_ALGO_TUNING, algorithms/tuner.h).
  bool shm_cma_set = false;

  // TUTTI_SHM_PREFIX: first part of shared-memory segment names
  // (/dev/shm/<prefix>-<job id>-<communicator id>).
  std::string shm_prefix = "tutti";

  // TUTTI_TRACE_BUFFER: operations the flight recorder keeps per
  // communicator (0: off). TUTTI_TRACE_DIR: where dumps go.
  std::size_t trace_buffer = 256;
  // TUTTI_DEBUG=detail: before every collective over the network, ranks
  // exchange the operation's signature and fail with Mismatch if they
  // disagree (shared-memory collectives check every round anyway).
  bool debug_detail = false;
  // TUTTI_REPRODUCIBLE=1: every communicator starts with reproducible sums
  // (Communicator::set_reproducible; reduce/reproducible.h).
  bool reproducible = false;
  std::string trace_dir = "/tmp";

  static Config from_env();
  // "timeout=300000ms chunk_bytes=1048576 ..." for the debug log.
  std::string describe() const;
  // The settings ranks must share, one line each in a fixed order: "J
  // TUTTI_X=value" for every rank of the job (they decide algorithms and
  // message sizes), "H TUTTI_X=value" for every rank of one host (shared
  // memory). Init compares every rank's with its own
  // (settings_disagreement).
  std::string shared_settings() const;
};

// Parses "all_reduce:ring,broadcast:tree". Throws InvalidArgument when malformed.
std::map<std::string, std::string> parse_algo_overrides(const std::string& spec);
// Parses "4M", "64K", "123": bytes. Throws InvalidArgument when malformed.
std::size_t parse_bytes(const std::string& s, const char* what);
// "" when rank `me`'s shared settings (Config::shared_settings) agree with
// rank `them`'s; otherwise the first difference, as "ranks disagree on
// TUTTI_X: 'a' on rank them, 'b' on rank me (...)". Host lines count only
// for ranks on the same host.
std::string settings_disagreement(const std::string& mine, const std::string& theirs, bool same_host, int me, int them);

}  // namespace tutti::detail
