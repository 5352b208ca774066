// init(): the seed's init_process_group. Reads the job's shape from the
// environment (or options), meets the other ranks through a store and
// connects the transport.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "algorithms/selection.h"
#include "algorithms/signature.h"
#include "common/log.h"
#include "core/communicator_impl.h"
#include "core/tags.h"
#include "net/auth.h"
#include "net/ifname.h"
#include "transport/shm/shm_transport.h"
#include "transport/tcp/tcp_transport.h"

namespace tutti {

using namespace detail;

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

int parse_int(const char* name, const char* value) {
  char* end = nullptr;
  long v = std::strtol(value, &end, 10);
  if (end == value || *end != '\0' || v < 0 || v > (1 << 24))
    throw Error(ErrorKind::InvalidArgument, std::string(name) + "='" + value + "' is not a valid non-negative integer");
  return static_cast<int>(v);
}

// Rank and size from the first launcher whose variables are set.
void rank_and_size_from_env(int& rank, int& size) {
  static const char* kPairs[][2] = {{"RANK", "WORLD_SIZE"},
                                    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                    {"PMI_RANK", "PMI_SIZE"},
                                    {"SLURM_PROCID", "SLURM_NTASKS"}};
  for (auto& p : kPairs) {
    const char* r = env(p[0]);
    const char* s = env(p[1]);
    if (!r && !s) continue;
    if (!r || !s)
      throw Error(ErrorKind::InvalidArgument, std::string(r ? p[1] : p[0]) + " is not set but " + (r ? p[0] : p[1]) +
                                                  " is; set both (or neither)");
    if (rank < 0) rank = parse_int(p[0], r);
    if (size < 0) size = parse_int(p[1], s);
    return;
  }
}

// Ranks share a host (and could share memory) when hostname, boot id and
// IPC namespace all agree.
std::string host_identity() {
  char name[256] = {0};
  gethostname(name, sizeof name - 1);
  std::string id = name;
  if (FILE* f = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
    char boot[64] = {0};
    if (std::fgets(boot, sizeof boot, f)) {
      id += '/';
      id.append(boot);
    }
    std::fclose(f);
  }
  char ns[128] = {0};
  ssize_t len = readlink("/proc/self/ns/ipc", ns, sizeof ns - 1);
  if (len > 0) {
    id += '/';
    id.append(ns, static_cast<std::size_t>(len));
  }
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
  for (char& c : id)
    if (c == '\n') c = ' ';
  return id;
}

std::uint64_t random_u64() {
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^ (static_cast<std::uint64_t>(getpid()) << 16);
}

}  // namespace

Communicator init() { return init(InitOptions{}); }

Communicator init(const InitOptions& options) {
  auto job = std::make_shared<JobState>();
  job->config = Config::from_env();
  validate_algo_overrides(job->config);
  if (!job->config.socket_ifname.empty()) parse_ifname_filter(job->config.socket_ifname);  // malformed: refused here
  int rank = options.rank, size = options.world_size;
  if (rank < 0 || size < 0) rank_and_size_from_env(rank, size);
  if (size < 0) size = 1;  // nothing set anywhere: a job of one
  if (rank < 0) rank = 0;
  if (size < 1 || rank >= size)
    throw Error(ErrorKind::InvalidArgument,
                "rank " + std::to_string(rank) + " is not within world size " + std::to_string(size));
  set_log_rank(rank);
  auto timeout = options.timeout.count() > 0 ? options.timeout : job->config.timeout;
  const TimePoint deadline = deadline_after(timeout);
  TUTTI_LOG(Debug, "init: rank " << rank << " of " << size << "; config: " << job->config.describe());

  const std::string secret = !options.job_secret.empty() ? options.job_secret : job_secret_from_env();
  std::string host;
  int port = -1;
  if (options.store) {
    job->store = options.store;
  } else if (size > 1) {
    host = !options.master_addr.empty() ? options.master_addr : (env("MASTER_ADDR") ? env("MASTER_ADDR") : "");
    if (options.master_port >= 0) {
      port = options.master_port;
    } else if (const char* p = env("MASTER_PORT")) {
      port = parse_int("MASTER_PORT", p);
    }
    if (host.empty())
      throw Error(ErrorKind::InvalidArgument,
                  "MASTER_ADDR is not set: rank " + std::to_string(rank) + " cannot find the rendezvous of " +
                      std::to_string(size) + " ranks (set MASTER_ADDR and MASTER_PORT, or launch with tuttirun)");
    if (port <= 0 || port > 65535)
      throw Error(ErrorKind::InvalidArgument, "MASTER_PORT is not set or not a valid port (rank " +
                                                  std::to_string(rank) + ")");
    if (rank == 0)
      job->server = std::make_unique<TcpStoreServer>(store_listen_address(job->config, host), port, secret);
    job->store = make_tcp_store_client(host, port, timeout, secret);
  }

  // Every job gets a random id (a job of one too: it names shared memory).
  job->job_id = random_u64();
  // Peer connections prove they hold the secret and a key drawn for this
  // job, which only readers of its store learn.
  std::string link_key = random_hex(32);
  if (size > 1) {
    job->store->set_timeout(timeout);
    if (rank == 0) {
      job->store->set("tutti/link_key", link_key);
      job->store->set("tutti/job_id", std::to_string(job->job_id));
    } else {
      job->job_id = std::stoull(job->store->get_string("tutti/job_id"));
      link_key = job->store->get_string("tutti/link_key");
    }
    // With a store of the caller's, the route to MASTER_ADDR (when set)
    // tells which local address peers can reach.
    if (host.empty() && env("MASTER_ADDR")) {
      host = env("MASTER_ADDR");
      if (const char* p = env("MASTER_PORT")) port = parse_int("MASTER_PORT", p);
    }
  }
  const std::string my_host = host_identity();
  if (size > 1) job->store->set("tutti/host/" + std::to_string(rank), my_host);
  std::vector<Fd> peers(size);
  if (size > 1) peers = connect_mesh(*job->store, rank, size, job->job_id, secret + "/" + link_key, job->config, host, port, deadline);
  // Every rank has published its host before its address, so these do not wait.
  std::vector<std::string> hosts;
  for (int r = 0; r < size; ++r) {
    std::string h = size > 1 ? job->store->get_string("tutti/host/" + std::to_string(r)) : my_host;
    auto it = std::find(hosts.begin(), hosts.end(), h);
    job->host_of.push_back(static_cast<int>(it - hosts.begin()));
    if (it == hosts.end()) hosts.push_back(h);
  }
  if (const char* v = env("LOCAL_RANK")) job->env_local_rank = parse_int("LOCAL_RANK", v);
  if (const char* v = env("LOCAL_WORLD_SIZE")) job->env_local_size = parse_int("LOCAL_WORLD_SIZE", v);
  job->transport = std::make_shared<TcpTransport>(rank, size, std::move(peers), job->config.socket_buffer_bytes);
  const bool single_host =
      std::all_of(job->host_of.begin(), job->host_of.end(), [&](int h) { return h == job->host_of[0]; });
  // One host: point-to-point through shared memory (the network transport
  // stays for liveness).
  if (size > 1 && single_host && job->config.transport != "tcp") {
    char ids[24];
    std::snprintf(ids, sizeof ids, "-%016llx-p2p", static_cast<unsigned long long>(job->job_id));
    job->transport = ShmTransport::create(job->transport, *job->store, "/" + job->config.shm_prefix + ids, deadline);
  }

  job->transport->set_signature_describer(detail::describe_signature_kind);
  // A member's failure fails the communicator here too.
  job->transport->set_comm_failed_handler([j = job.get()](std::uint64_t comm, ErrorKind kind, const std::string& why) {
    j->fail_comm(comm, kind, why);
  });
  // A peer lost without a goodbye fails every communicator that includes it.
  job->transport->set_peer_lost_handler(
      [j = job.get()](int peer, const std::string& why) { j->fail_peer(peer, why); });

  auto impl = std::make_shared<Communicator::Impl>();
  impl->job = job;
  impl->comm_id = mix64(job->job_id);
  impl->rank = rank;
  impl->size = size;
  impl->timeout.store(timeout);
  auto map = std::make_shared<std::vector<int>>();
  for (int r = 0; r < size; ++r) {
    impl->world.push_back(r);
    map->push_back(r);
  }
  impl->world_to_comm = map;
  impl->set_topology();
  impl->recorder.set_capacity(job->config.trace_buffer);
  detail::configure_traces(job->job_id, rank, job->config.trace_dir, job->config.trace_buffer > 0);
  detail::register_trace_source(impl.get());
  job->add_comm(impl.get());
  TUTTI_LOG(Info, "joined: rank " << rank << " of " << size << " on " << hosts.size() << " host(s)");
  return Communicator(impl);
}

}  // namespace tutti
