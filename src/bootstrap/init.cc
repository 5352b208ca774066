// init(): the seed's init_process_group. Reads the job's shape from the
// environment (or options), meets the other ranks through a store and
// connects the transport.
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string_view>
#include <thread>

#include "algorithms/signature.h"
#include "bootstrap/launch_env.h"
#include "common/log.h"
#include "common/tags.h"
#include "core/communicator_impl.h"
#include "net/auth.h"
#include "net/ifname.h"
#include "plan/planner.h"
#include "transport/shm/shm_transport.h"
#include "transport/tcp/tcp_transport.h"

namespace tutti {

using namespace detail;

namespace {

int parse_int(const char* name, const char* value) {
  char* end = nullptr;
  long v = std::strtol(value, &end, 10);
  if (end == value || *end != '\0' || v < 0 || v > (1 << 24))
    throw Error(ErrorKind::InvalidArgument, std::string(name) + "='" + value + "' is not a valid non-negative integer");
  return static_cast<int>(v);
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

std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

std::string hex64(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// The lines of Config::shared_settings() of one scope ('J' job, 'H' host).
std::string settings_lines(const std::string& settings, char scope) {
  std::string out;
  std::size_t at = 0;
  for (std::size_t nl; (nl = settings.find('\n', at)) != std::string::npos; at = nl + 1)
    if (settings[at] == scope) out.append(settings, at, nl + 1 - at);
  return out;
}

// A rank's host record, "pid host-hash job-settings-hash host-settings-hash"
// (written by init below), into its four fields.
void parse_host_record(std::string_view s, int r, int& pid, std::string& host, std::string& job_hash,
                       std::string& host_hash) {
  std::string_view f[4];
  int fields = 0;
  for (std::size_t at = 0; fields < 4; ++fields) {
    std::size_t end = s.find(' ', at);
    if ((fields == 3) != (end == std::string_view::npos)) break;  // three spaces, no more
    if (end == std::string_view::npos) end = s.size();
    if (end == at) break;
    f[fields] = s.substr(at, end - at);
    at = end + 1;
  }
  const char* const pid_end = f[0].data() + f[0].size();
  const auto [next, ec] = std::from_chars(f[0].data(), pid_end, pid);
  if (fields != 4 || ec != std::errc() || next != pid_end)
    throw Error(ErrorKind::InvalidArgument, "init: rank " + std::to_string(r) + "'s host record \"" + std::string(s) +
                                                "\" is not \"pid host job-settings host-settings\": is it a build "
                                                "of another tutti version?");
  host = f[1];
  job_hash = f[2];
  host_hash = f[3];
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
  Planner::validate_overrides(job->config);
  // A malformed list, or one that matches no interface that is up, is
  // refused here, before the rendezvous: every rank then fails with its own
  // message (refused later, rank 0's failure took the store away while the
  // others still used it, and they reported the lost store instead).
  if (!job->config.socket_ifname.empty()) socket_ifname_address(job->config, false);
  // The launcher's variables (torchrun, Open MPI, hydra, Slurm): see
  // launch_env.h. What the caller passed wins, and a caller that passes its
  // own store, rank and size (torch's process groups, whose rank is the
  // group's) has said all they could say: they are not read at all, so that
  // a stale or partial export (WORLD_SIZE alone, an outer launcher's RANK,
  // a MASTER_ADDR of another job) can neither fail nor redirect it.
  const bool caller_placed = options.store && options.rank >= 0 && options.world_size >= 0;
  LaunchEnv launch = caller_placed ? LaunchEnv{} : parse_launch_env(current_environment());
  int rank = options.rank, size = options.world_size;
  if (rank < 0 || size < 0) {
    if (!launch.rank_error.empty()) throw Error(ErrorKind::InvalidArgument, launch.rank_error);
    if (!launch.conflict.empty()) throw Error(ErrorKind::InvalidArgument, launch.conflict);
    if (rank < 0) rank = launch.rank;
    if (size < 0) size = launch.size;
  }
  // The caller placed this rank and the environment is not trusted: the
  // local numbering comes from the hosts, not from those variables.
  if (!launch.rank_error.empty()) launch.local_rank = launch.local_size = -1;
  if (size < 0) size = 1;  // nothing set anywhere: a job of one
  if (rank < 0) rank = 0;
  if (size < 1 || rank >= size)
    throw Error(ErrorKind::InvalidArgument,
                "rank " + std::to_string(rank) + " is not within world size " + std::to_string(size));
  set_log_rank(rank);
  auto timeout = options.timeout.count() > 0 ? options.timeout : job->config.timeout;
  const TimePoint deadline = deadline_after(timeout);
  TUTTI_LOG(Debug, "init: rank " << rank << " of " << size << "; config: " << job->config.describe());

  std::string secret = !options.job_secret.empty() ? options.job_secret : job_secret_from_env();
  if (secret.empty() && !options.store && options.master_addr.empty()) secret = launch.job_key;
  std::string host;
  int port = -1;
  Rendezvous rendezvous;  // rank 0's rendezvous file, if any, goes when init ends
  if (options.store) {
    job->store = options.store;
  } else if (size > 1) {
    if (!options.master_addr.empty()) {
      launch.rendezvous = LaunchEnv::Rendezvous::Master;
      launch.master_addr = options.master_addr;
    }
    if (options.master_port >= 0) launch.master_port = options.master_port;
    rendezvous = open_rendezvous(launch, job->config, rank, size, secret, timeout);
    job->server = std::move(rendezvous.server);
    job->store = rendezvous.store;
    host = rendezvous.host;
    port = rendezvous.port;
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
      const std::vector<Bytes> v = job->store->multi_get({"tutti/job_id", "tutti/link_key"});
      job->job_id = std::stoull(std::string(v[0].begin(), v[0].end()));
      link_key.assign(v[1].begin(), v[1].end());
    }
    // With a store of the caller's, the route to the store's host tells
    // which local address peers can reach: options.master_addr (the caller
    // knows where its store is), else MASTER_ADDR when the environment is
    // read. Only a hint: an address that does not resolve is passed over.
    if (host.empty() && options.store && !options.master_addr.empty()) {
      host = options.master_addr;
      port = options.master_port;
    } else if (host.empty() && !caller_placed) {
      const EnvMap e = current_environment();
      auto addr = e.find("MASTER_ADDR"), p = e.find("MASTER_PORT");
      if (addr != e.end() && !addr->second.empty()) {
        host = addr->second;
        if (p != e.end() && !p->second.empty()) port = parse_int("MASTER_PORT", p->second.c_str());
      }
    }
  }
  const std::string my_host = host_identity();
  // Published with the host: the settings every rank must share.
  const std::string my_settings = job->config.shared_settings();
  const std::string my_host_hash = hex64(fnv1a(my_host));
  const std::string my_job_hash = hex64(fnv1a(settings_lines(my_settings, 'J')));
  const std::string my_host_settings_hash = hex64(fnv1a(settings_lines(my_settings, 'H')));
  // The settings themselves are read only from a rank whose hash (in its
  // host record, below) differs.
  if (size > 1) job->store->set("tutti/settings/" + std::to_string(rank), my_settings);
  // The network transport's factory (transport.h): its address travels
  // with this rank's host record, which the rendezvous reads for the host
  // map; it reads nothing in the address.
  std::unique_ptr<TransportFactory> net;
  std::vector<std::string> host_records, addresses;
  if (size > 1) {
    net = make_tcp_factory(job->config, host, port, secret + "/" + link_key, job->job_id);
    // The host record: "pid host-hash job-settings-hash host-settings-hash",
    // short whatever the settings (each rank reads all of them).
    const std::string record =
        std::to_string(::getpid()) + ' ' + my_host_hash + ' ' + my_job_hash + ' ' + my_host_settings_hash;
    exchange_records(*job->store, rank, size, record, net->address(), host_records, addresses, deadline);
  }
  std::vector<std::string> hosts;        // per host: its hash
  std::vector<std::string> host_hashes;  // per host: its first rank's host-settings hash
  std::vector<int> host_first_rank;
  // The first difference found: job-wide settings against this rank's, a
  // host's against its first rank's (so every rank finds any difference
  // anywhere); (rank, rank it differs from, same host).
  struct Difference {
    int a = -1, b = -1;
    bool same_host = false;
  } diff;
  for (int r = 0; r < size; ++r) {
    std::string h = my_host_hash, job_hash = my_job_hash, host_hash = my_host_settings_hash;
    int pid = static_cast<int>(::getpid());
    if (size > 1) parse_host_record(host_records[static_cast<std::size_t>(r)], r, pid, h, job_hash, host_hash);
    auto it = std::find(hosts.begin(), hosts.end(), h);
    if (diff.a < 0 && job_hash != my_job_hash) diff = {rank, r, false};
    if (diff.a < 0 && it != hosts.end() && host_hashes[static_cast<std::size_t>(it - hosts.begin())] != host_hash)
      diff = {host_first_rank[static_cast<std::size_t>(it - hosts.begin())], r, true};
    if (it == hosts.end()) {
      host_hashes.push_back(host_hash);
      host_first_rank.push_back(r);
    }
    job->host_of.push_back(static_cast<int>(it - hosts.begin()));
    job->pid_of.push_back(pid);
    if (it == hosts.end()) hosts.push_back(h);
  }
  std::string disagreement;
  if (diff.a >= 0) {
    auto settings_of = [&](int r) {
      if (r == rank) return my_settings;
      const Bytes v = job->store->get("tutti/settings/" + std::to_string(r));
      return std::string(v.begin(), v.end());
    };
    disagreement = settings_disagreement(settings_of(diff.a), settings_of(diff.b), diff.same_host, diff.a, diff.b);
  }
  if (!disagreement.empty()) {
    // Every rank finds one (each compares every rank's). Rank 0 usually
    // serves the store (its own, or the caller's in its process): it leaves
    // once the others have read what they need from it (or after 10 s, if
    // one died), so that they report the settings and not a lost store.
    const std::int64_t finders = job->store->add("tutti/settings_disagree", 1);
    if (rank == 0 && finders < size) {
      const TimePoint until = std::min(deadline, Clock::now() + std::chrono::seconds(10));
      while (job->store->add("tutti/settings_disagree", 0) < size && Clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    throw Error(ErrorKind::InvalidArgument, disagreement);
  }
  job->env_local_rank = launch.local_rank;
  job->env_local_size = launch.local_size;
  if (size > 1) {
    job->transport = net->make(rank, size, std::move(addresses), deadline);
  } else {
    job->transport = std::make_shared<TcpTransport>(rank, size, std::vector<std::vector<Fd>>(1),
                                                    job->config.socket_buffer_bytes, job->config.socket_stripe_bytes);
  }
  const bool single_host =
      std::all_of(job->host_of.begin(), job->host_of.end(), [&](int h) { return h == job->host_of[0]; });
  // One host: point-to-point through shared memory (the network transport
  // stays for liveness).
  if (size > 1 && single_host && job->config.transport != Config::Transport::Tcp) {
    char ids[24];
    std::snprintf(ids, sizeof ids, "-%016llx-p2p", static_cast<unsigned long long>(job->job_id));
    job->transport =
        ShmTransport::create(job->transport, *job->store, "/" + job->config.shm_prefix + ids, job->pid_of, deadline);
  }

  job->transport->set_signature_describer(detail::describe_signature_kind);
  // A member's failure fails the communicator here too.
  job->transport->set_comm_failed_handler(
      [j = job.get()](std::uint64_t comm, ErrorKind kind, const std::string& why) { j->fail_comm(comm, kind, why); });
  // A peer lost without a goodbye fails every communicator that includes it.
  job->transport->set_peer_lost_handler([j = job.get()](int peer, const std::string& why) { j->fail_peer(peer, why); });

  auto impl = std::make_shared<detail::CommunicatorImpl>();
  impl->job = job;
  impl->comm_id = mix64(job->job_id);
  impl->rank = rank;
  impl->size = size;
  impl->timeout.store(timeout);
  impl->reproducible.store(impl->job->config.reproducible);
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
