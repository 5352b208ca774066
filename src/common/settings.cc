#include "common/settings.h"

#include <cstdlib>
#include <cstring>
#include <sstream>

#include "common/config.h"
#include "tutti/error.h"

namespace tutti::detail {
namespace {

constexpr std::uint64_t kMaxBytes = std::uint64_t(1) << 50;

[[noreturn]] void invalid(const Setting& s, const std::string& value, const std::string& want) {
  throw Error(ErrorKind::InvalidArgument, std::string(s.name) + ": expected " + want + ", got '" + value + "'");
}

std::string range_text(const Setting& s);

// The store functions know their own entry by name (find_setting is cheap:
// the table is short and init reads it once).
const Setting* entry(const char* name) { return find_setting(name); }

void store_timeout(Config& c, const std::string& v) {
  c.timeout = std::chrono::milliseconds(setting_millis(*entry("TUTTI_TIMEOUT"), v));
}
std::string shown_timeout(const Config& c) { return std::to_string(c.timeout.count()) + "ms"; }

void store_chunk(Config& c, const std::string& v) {
  c.chunk_bytes = setting_bytes(*entry("TUTTI_CHUNK_BYTES"), v);
  c.hosts_chunk_bytes = c.chunk_bytes;  // set, it applies to both
}
std::string shown_chunk(const Config& c) {
  return std::to_string(c.chunk_bytes) + "," + std::to_string(c.hosts_chunk_bytes);
}

void store_algo(Config& c, const std::string& v) { c.algo = parse_algo_overrides(v); }
std::string shown_algo(const Config& c) {
  std::string out;
  for (const auto& [k, a] : c.algo) out.append(out.empty() ? "" : ",").append(k).append(":").append(a);
  return out;
}

void store_one_shot(Config& c, const std::string& v) {
  c.shm_one_shot_bytes = setting_bytes(*entry("TUTTI_SHM_ONESHOT_BYTES"), v);
  c.shm_one_shot_set = true;
}
std::string shown_one_shot(const Config& c) {
  return c.shm_one_shot_set ? std::to_string(c.shm_one_shot_bytes) : "(unset)";
}

void store_cma(Config& c, const std::string& v) {
  c.shm_cma_bytes = setting_bytes(*entry("TUTTI_SHM_CMA_BYTES"), v);
  c.shm_cma_set = true;
}
// Unset differs from any value: the tuners choose where it is unset.
std::string shown_cma(const Config& c) { return c.shm_cma_set ? std::to_string(c.shm_cma_bytes) : "(unset)"; }

void store_shm_prefix(Config& c, const std::string& v) {
  if (v.find('/') != std::string::npos) invalid(*entry("TUTTI_SHM_PREFIX"), v, "a name without '/'");
  c.shm_prefix = v;
}

void store_debug(Config& c, const std::string& v) { c.debug_detail = v == "detail"; }
void store_reproducible(Config& c, const std::string& v) { c.reproducible = v == "1"; }
std::string shown_reproducible(const Config& c) { return c.reproducible ? "1" : "0"; }
std::string shown_debug(const Config& c) { return c.debug_detail ? "detail" : ""; }

// The table allows these values alone (kSettings: "auto|tcp").
void store_transport(Config& c, const std::string& v) {
  c.transport = v == "tcp" ? Config::Transport::Tcp : Config::Transport::Auto;
}
std::string shown_transport(const Config& c) { return c.transport == Config::Transport::Tcp ? "tcp" : "auto"; }

void store_listen_addr(Config& c, const std::string& v) {
  c.listen_addr = v;
  c.listen_addr_set = true;
}

#define FIELD_BYTES(name, field) [](Config& c, const std::string& v) { c.field = setting_bytes(*entry(name), v); }
#define FIELD_INTEGER(name, field) \
  [](Config& c, const std::string& v) { c.field = static_cast<decltype(c.field)>(std::stoll(v)); }
#define FIELD_TEXT(field) [](Config& c, const std::string& v) { c.field = v; }
#define SHOWN(field) [](const Config& c) { return std::to_string(c.field); }
#define SHOWN_TEXT(field) [](const Config& c) { return std::string(c.field); }

const Setting kSettings[] = {
    {"TUTTI_TIMEOUT", "library", Kind::Seconds, 1, 10000000000, nullptr, R"doc(`300`)doc", Agreement::None,
     R"doc(Deadline in seconds (fractions allowed, 0.001–1e7) of `init()` and of every operation. `InitOptions::timeout` and `Communicator::set_timeout` override it.)doc",
     store_timeout, shown_timeout},
    {"TUTTI_LOG", "library", Kind::Choice, 0, 0, "off|none|warn|warning|info|debug|trace", R"doc(`warn`)doc",
     Agreement::None,
     R"doc(`off`, `warn`, `info`, `debug` or `trace`; lines go to stderr as `[tutti HH:MM:SS.us rank R pid P LEVEL] ...`. Read once per process.)doc",
     nullptr, nullptr},
    {"TUTTI_CHUNK_BYTES", "library", Kind::Bytes, 64, kMaxBytes, nullptr,
     R"doc(`1M` within a host, `256K` across hosts)doc", Agreement::Job,
     R"doc(Pipelining unit of the chunked network algorithms (ring, chunked tree broadcast and reduce, chain): 1 MiB on communicators within one host, 256 KiB on those spanning hosts. Set, it applies to both (docs/tuning.md, "TUTTI_CHUNK_BYTES").)doc",
     store_chunk, shown_chunk},
    {"TUTTI_SMALL_BYTES", "library", Kind::Bytes, 0, kMaxBytes, nullptr, R"doc(`64K`)doc", Agreement::Job,
     R"doc(all_reduce messages up to this many bytes use recursive doubling over the network; larger ones Rabenseifner or the ring (docs/tuning.md).)doc",
     FIELD_BYTES("TUTTI_SMALL_BYTES", small_bytes), SHOWN(small_bytes)},
    {"TUTTI_TWO_LEVEL_LEADER_BYTES", "library", Kind::Bytes, 0, kMaxBytes, nullptr, R"doc(`128K`)doc", Agreement::Job,
     R"doc(two-level all_reduce (communicators spanning hosts with equal ranks on each) up to this many bytes goes through one leader per host; larger ones are reduced in slices, one per local rank, across hosts in parallel (docs/tuning.md).)doc",
     FIELD_BYTES("TUTTI_TWO_LEVEL_LEADER_BYTES", two_level_leader_bytes), SHOWN(two_level_leader_bytes)},
    {"TUTTI_ALGO", "library", Kind::Algorithms, 0, 0, nullptr, R"doc((the table))doc", Agreement::Job,
     R"doc(Overrides the selection table per collective, at every size: `all_reduce:ring,broadcast:binomial`, with the names of the registry (docs/algorithms.md, or `tutti-config --algorithms`). An unknown collective or algorithm is refused at init, naming the known ones (docs/tuning.md, "TUTTI_ALGO").)doc",
     store_algo, shown_algo},
    {"TUTTI_ALGO_TUNING", "library", Kind::Choice, 0, 0, "auto|on|off", R"doc(`auto`)doc", Agreement::Job,
     R"doc(Whether the planner times two ways of running an operation against each other, where the better one depends on the network or the machine, and runs the faster (docs/tuning.md, "TUTTI_ALGO_TUNING", "Timed choice" and "Timed choice in shared memory"). `auto`: on communicators of 3 or more ranks spanning hosts (and every two-level one) and on one-host communicators of 2 or more ranks in shared memory; `on`: also on every communicator whose collectives go over the network; `off`: the table alone, so that floating-point results repeat from run to run (TUTTI_REPRODUCIBLE makes them independent of the algorithm too).)doc",
     FIELD_TEXT(algo_tuning), SHOWN_TEXT(algo_tuning)},
    {"TUTTI_TRANSPORT", "library", Kind::Choice, 0, 0, "auto|tcp", R"doc(`auto`)doc", Agreement::Host,
     R"doc(`auto`: collectives of a communicator whose ranks all share a host (same hostname, boot id and IPC namespace) run over shared memory, others over TCP; `tcp`: TCP everywhere. Point-to-point goes through shared memory when every rank of the job is on one host (and may read the others' memory), through TCP otherwise (docs/tuning.md, "TUTTI_TRANSPORT").)doc",
     store_transport, shown_transport},
    {"TUTTI_SHM_SLOT_BYTES", "library", Kind::Bytes, 256, 1073741824, nullptr, R"doc(`256K`)doc", Agreement::Host,
     R"doc(Size of each of the four slots every rank owns in a communicator's shared-memory segment; the pipelining unit of shared-memory collectives. Each rank maps `1,024 + n·(148,736 + 4·slot)` bytes per single-host communicator of n ranks (docs/tuning.md, "TUTTI_SHM_SLOT_BYTES").)doc",
     FIELD_BYTES("TUTTI_SHM_SLOT_BYTES", shm_slot_bytes), SHOWN(shm_slot_bytes)},
    {"TUTTI_SHM_ONESHOT_BYTES", "library", Kind::Bytes, 0, kMaxBytes, nullptr, R"doc(`16K`)doc", Agreement::Host,
     R"doc(Set, shared-memory reductions up to this size are one-shot (every rank reduces all inputs), above two-shot (each reduces a slice, then all gather), and collectives on shared allocations always run in place. Unset, both choices are timed per size class (docs/tuning.md, "Timed choice in shared memory").)doc",
     store_one_shot, shown_one_shot},
    {"TUTTI_SHM_CMA_BYTES", "library", Kind::Bytes, 0, kMaxBytes, nullptr, R"doc(`128K`)doc", Agreement::Host, R"doc(Shared-memory collectives move blocks of at least this size with one copy straight from (or, for broadcast's root, into) the peer's memory (`process_vm_readv`, `process_vm_writev`) instead of two copies through the segment, when every member may read and write every other's memory; `0` turns it off. Unset, these rules are timed against copying only, per size class above 8 KiB; set (even to `128K`), they apply every time (docs/tuning.md, "TUTTI_SHM_CMA_BYTES").)doc",
     store_cma, shown_cma},
    {"TUTTI_SHM_PREFIX", "library", Kind::Text, 0, 64, nullptr,
     R"doc(`tutti` (`tutti-run<pid>` under tuttirun on one node))doc", Agreement::Host,
     R"doc(Segment names are `/dev/shm/<prefix>-<job id>-<communicator id>`; the names disappear as soon as every member has mapped the segment, and tuttirun removes leftovers of its own prefix when the job ends. At most 64 characters, no `/`.)doc",
     store_shm_prefix, SHOWN_TEXT(shm_prefix)},
    {"TUTTI_DEBUG", "library", Kind::Choice, 0, 0, "detail|off", R"doc(`off`)doc", Agreement::Job,
     R"doc(`detail`: before every collective over the network, every rank sends every other the operation's signature (kind, dtype, reduce op, root, bytes), and all fail with `Mismatch` naming both operations if any differ. Without it every mismatch is still found, but where the ranks' messages never meet (a gather against a scatter) only at their next operation that receives (docs/tuning.md, "TUTTI_DEBUG").)doc",
     store_debug, shown_debug},
    {"TUTTI_REPRODUCIBLE", "library", Kind::Choice, 0, 0, "0|1", R"doc(`0`)doc", Agreement::Job,
     R"doc(`1`: every communicator starts with reproducible sums (`Communicator::set_reproducible`): all_reduce, reduce and reduce_scatter of floats and complex numbers with SUM and AVG give bits that depend on the ranks' contributions alone, whatever the algorithm, medium or rank order (docs/algorithms.md, "Reproducible sums").)doc",
     store_reproducible, shown_reproducible},
    {"TUTTI_TRACE_BUFFER", "library", Kind::Integer, 0, 1048576, nullptr, R"doc(`256`)doc", Agreement::None,
     R"doc(Operations the flight recorder keeps per communicator (0 turns it off, at most 1048576). See docs/errors.md.)doc",
     FIELD_INTEGER("TUTTI_TRACE_BUFFER", trace_buffer), SHOWN(trace_buffer)},
    {"TUTTI_TRACE_DIR", "library", Kind::Text, 0, 0, nullptr, R"doc(`/tmp`)doc", Agreement::None,
     R"doc(Where flight-recorder dumps go: `<dir>/tutti-trace-<job id>-<world rank>.json`, written when an operation fails or times out, on SIGUSR1, and by `Communicator::dump_trace()`.)doc",
     FIELD_TEXT(trace_dir), SHOWN_TEXT(trace_dir)},
    {"TUTTI_SOCKET_BUFFER_BYTES", "library", Kind::Bytes, 0, kMaxBytes, nullptr, R"doc(`0`)doc", Agreement::None,
     R"doc(`SO_SNDBUF`/`SO_RCVBUF` of peer sockets; `0` keeps the kernel's sizes and its autotuning, which a set size turns off for the socket (docs/tuning.md, "TUTTI_SOCKET_BUFFER_BYTES").)doc",
     FIELD_BYTES("TUTTI_SOCKET_BUFFER_BYTES", socket_buffer_bytes), SHOWN(socket_buffer_bytes)},
    {"TUTTI_TCP_CONGESTION", "library", Kind::Text, 0, 15, nullptr,
     R"doc((unset: `reno` where the kernel's default is `cubic` or `bbr`))doc", Agreement::None,
     R"doc(Congestion control of peer connections (`TCP_CONGESTION`): a name the kernel allows this process (`/proc/sys/net/ipv4/tcp_allowed_congestion_control`), or `system` for the kernel's default; a name the kernel refuses is `InvalidArgument` at init. Unset, peer connections use reno where the kernel's default is cubic or bbr, and keep any other default (docs/tuning.md, "TUTTI_TCP_CONGESTION").)doc",
     FIELD_TEXT(tcp_congestion), SHOWN_TEXT(tcp_congestion)},
    {"TUTTI_SOCKETS_PER_PEER", "library", Kind::Integer, 1, kMaxSocketsPerPeer, nullptr, R"doc(`1`)doc",
     Agreement::None,
     R"doc(Data connections between two ranks: above 1, each pair has this many plus one for headers and small messages, and every message of at least `TUTTI_SOCKET_STRIPE_BYTES` is split across them. The connecting (higher) rank's value decides for the pair (docs/tuning.md, "TUTTI_SOCKETS_PER_PEER and TUTTI_SOCKET_STRIPE_BYTES").)doc",
     FIELD_INTEGER("TUTTI_SOCKETS_PER_PEER", sockets_per_peer), SHOWN(sockets_per_peer)},
    {"TUTTI_SOCKET_STRIPE_BYTES", "library", Kind::Bytes, 4096, kMaxBytes, nullptr, R"doc(`1M`)doc", Agreement::None,
     R"doc(Messages of at least this size are striped across the `TUTTI_SOCKETS_PER_PEER` data connections (at least `4096`).)doc",
     FIELD_BYTES("TUTTI_SOCKET_STRIPE_BYTES", socket_stripe_bytes), SHOWN(socket_stripe_bytes)},
    {"TUTTI_JOB_SECRET", "library, tuttirun", Kind::Text, 0, 0, nullptr, R"doc((drawn by tuttirun))doc",
     Agreement::None,
     R"doc(The job's secret: every store and peer connection proves by HMAC-SHA256 challenge and response that both sides hold it, and a process that holds another fails with `Unauthenticated`. Unset, tuttirun draws one for the job it starts on one node or with `--hosts`; a job started otherwise (`--nnodes`, other launchers) sets the same value on every rank, or its store connections are checked for the protocol only (docs/tuning.md, "TUTTI_JOB_SECRET").)doc",
     nullptr, nullptr},
    {"TUTTI_LISTEN_ADDR", "library", Kind::Text, 0, 0, nullptr, R"doc((the advertised address))doc", Agreement::None,
     R"doc(Address each rank listens on for its peers. Unset: the address it advertises (`TUTTI_ADVERTISE_ADDR`, else the route to the store: loopback for a job on loopback) when that is an address of this host, else `0.0.0.0`; with `TUTTI_SOCKET_IFNAME`, the picked interface's address (docs/errors.md, "Careless and hostile use").)doc",
     store_listen_addr, SHOWN_TEXT(listen_addr)},
    {"TUTTI_ADVERTISE_ADDR", "library", Kind::Text, 0, 0, nullptr, R"doc((auto))doc", Agreement::None,
     R"doc(Address a rank publishes to its peers; by default the address `TUTTI_SOCKET_IFNAME` picks, else the local address of the route to the store, skipping loopback when the store's address is not loopback (docs/launching.md).)doc",
     FIELD_TEXT(advertise_addr), SHOWN_TEXT(advertise_addr)},
    {"TUTTI_SOCKET_IFNAME", "library", Kind::Text, 0, 0, nullptr, R"doc((unset))doc", Agreement::None, R"doc(Network interfaces to use, in NCCL's syntax: `eth,ib` (name prefixes), `^docker,lo` (all but these), `=eth0` (exact names), `^=eth0`. Ranks listen on and publish the first address of the first matching interface that is up, and a list that matches nothing, or a malformed one, is `InvalidArgument` at init (docs/tuning.md, "TUTTI_SOCKET_IFNAME").)doc",
     FIELD_TEXT(socket_ifname), SHOWN_TEXT(socket_ifname)},
    {"TUTTI_STORE_LISTEN_ADDR", "library", Kind::Text, 0, 0, nullptr, R"doc((MASTER_ADDR or all))doc", Agreement::None,
     R"doc(Address rank 0's store server listens on. Unset: `MASTER_ADDR` when it is an IP address of this host, else every interface (a host name may resolve here to another address than on the other hosts).)doc",
     FIELD_TEXT(store_listen_addr), SHOWN_TEXT(store_listen_addr)},
    {"TUTTI_PMIX", "library", Kind::Choice, 0, 0, "0|1", R"doc((unset: PMIx where mpirun serves it))doc",
     Agreement::None,
     R"doc(`0`: do not use PMIx under Open MPI (meet through a file in `TUTTI_RENDEZVOUS_DIR`); unset: use it when mpirun serves it and `libpmix.so.2` loads (docs/launching.md).)doc",
     nullptr, nullptr},
    {"TUTTI_RENDEZVOUS_DIR", "library", Kind::Text, 0, 0, nullptr, R"doc(`/tmp`)doc", Agreement::None,
     R"doc(Where rank 0 of an Open MPI job without `MASTER_ADDR` publishes its store when PMIx cannot be used (a shared file system for many hosts).)doc",
     nullptr, nullptr},
    {"TUTTI_LAUNCHER", "library", Kind::Text, 0, 0, nullptr, R"doc((set by tuttirun))doc", Agreement::None,
     R"doc(Set by tuttirun in its ranks' environment (`tuttirun`): torchrun's variables under it then describe the ranks, and those of an outer launcher are not compared (docs/launching.md). Not for users to set.)doc",
     nullptr, nullptr},
    {"TUTTI_TORCH_INLINE_BYTES", "tutti.torch", Kind::Bytes, 0, kMaxBytes, nullptr, R"doc(`256K`)doc", Agreement::None,
     R"doc(Collectives of a tutti process group moving at most this many bytes run in the calling thread and return a finished Work; larger ones run on the communicator's worker thread and return a pending Work, as point-to-point calls always do. `0`: every collective asynchronous (docs/tuning.md, "TUTTI_TORCH_INLINE_BYTES").)doc",
     nullptr, nullptr},
    {"TUTTI_KILL_GRACE_SECONDS", "tuttirun", Kind::Seconds, 0, 10000000000, nullptr, R"doc(`2`)doc", Agreement::None,
     R"doc(Time between SIGTERM and SIGKILL when tuttirun stops the ranks (`--kill-grace` overrides).)doc", nullptr,
     nullptr},
};

}  // namespace

std::span<const Setting> settings() { return kSettings; }

const Setting* find_setting(const std::string& name) {
  for (const Setting& s : kSettings)
    if (name == s.name) return &s;
  return nullptr;
}

std::string setting_env(const char* name) {
  if (!find_setting(name))
    throw Error(ErrorKind::Internal, std::string("setting_env: ") + name + " is not in the settings table");
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::uint64_t setting_bytes(const Setting& s, const std::string& value) {
  std::uint64_t v = 0;
  try {
    v = parse_bytes(value, s.name);
  } catch (const Error&) {
    invalid(s, value, "a byte count (K, M or G suffix), " + range_text(s));
  }
  if (v < s.lo || v > s.hi) invalid(s, value, "a byte count, " + range_text(s));
  return v;
}

std::uint64_t setting_millis(const Setting& s, const std::string& value) {
  char* end = nullptr;
  const double secs = std::strtod(value.c_str(), &end);
  // NaN fails every comparison, so the test is written to reject it.
  const double ms = secs * 1000.0;
  if (value.empty() || end == value.c_str() || *end != '\0' ||
      !(ms >= static_cast<double>(s.lo) && ms <= static_cast<double>(s.hi)))
    invalid(s, value, "seconds " + range_text(s));
  return static_cast<std::uint64_t>(ms + 0.5);
}

void check_setting(const Setting& s, const std::string& value) {
  switch (s.kind) {
    case Kind::Seconds:
      setting_millis(s, value);
      return;
    case Kind::Bytes:
      setting_bytes(s, value);
      return;
    case Kind::Integer: {
      char* end = nullptr;
      const long long v = std::strtoll(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || v < static_cast<long long>(s.lo) || v > static_cast<long long>(s.hi))
        invalid(s, value, "an integer " + range_text(s));
      return;
    }
    case Kind::Choice: {
      std::string choices = s.choices;
      std::stringstream ss(choices);
      for (std::string c; std::getline(ss, c, '|');)
        if (c == value) return;
      invalid(s, value, range_text(s));
    }
    case Kind::Text:
      if (s.hi && value.size() > s.hi) invalid(s, value, "at most " + std::to_string(s.hi) + " characters");
      return;
    case Kind::Algorithms:
      parse_algo_overrides(value);
      return;
  }
}

namespace {

std::string bytes_text(std::uint64_t v) {
  if (v && v % (1 << 30) == 0) return std::to_string(v >> 30) + "G";
  if (v && v % (1 << 20) == 0) return std::to_string(v >> 20) + "M";
  if (v && v % (1 << 10) == 0) return std::to_string(v >> 10) + "K";
  return std::to_string(v);
}

std::string range_text(const Setting& s) {
  switch (s.kind) {
    case Kind::Seconds: {
      auto secs = [](std::uint64_t ms) {
        if (ms % 1000 == 0) return std::to_string(ms / 1000);
        std::ostringstream os;
        os << static_cast<double>(ms) / 1000.0;
        return os.str();
      };
      return "from " + secs(s.lo) + " to " + secs(s.hi);
    }
    case Kind::Bytes:
      if (s.hi >= kMaxBytes) return s.lo ? "at least " + bytes_text(s.lo) : "any";
      return "from " + bytes_text(s.lo) + " to " + bytes_text(s.hi);
    case Kind::Integer:
      return "from " + std::to_string(s.lo) + " to " + std::to_string(s.hi);
    case Kind::Choice: {
      std::string out = "one of ";
      std::string choices = s.choices;
      std::stringstream ss(choices);
      bool first = true;
      for (std::string c; std::getline(ss, c, '|'); first = false) out += (first ? "`" : ", `") + c + "`";
      return out;
    }
    case Kind::Text:
      return s.hi ? "at most " + std::to_string(s.hi) + " characters" : "any";
    case Kind::Algorithms:
      return "`collective:algorithm,...`";
  }
  return "";
}

std::string kind_text(Kind k) {
  switch (k) {
    case Kind::Seconds:
      return "seconds";
    case Kind::Bytes:
      return "bytes";
    case Kind::Integer:
      return "integer";
    case Kind::Choice:
      return "choice";
    case Kind::Text:
      return "text";
    case Kind::Algorithms:
      return "overrides";
  }
  return "";
}

const char* agreement_text(Agreement a) {
  switch (a) {
    case Agreement::Job:
      return "every rank";
    case Agreement::Host:
      return "ranks of a host";
    case Agreement::None:
      return "";
  }
  return "";
}

}  // namespace

std::string settings_markdown() {
  std::string out =
      "| variable | read by | type | range | default | must agree | meaning |\n"
      "|---|---|---|---|---|---|---|\n";
  for (const Setting& s : kSettings) {
    out.append("| `").append(s.name).append("` | ").append(s.readers).append(" | ").append(kind_text(s.kind));
    out.append(" | ").append(range_text(s)).append(" | ").append(s.fallback).append(" | ");
    out.append(agreement_text(s.agree)).append(" | ").append(s.doc).append(" |\n");
  }
  return out;
}

}  // namespace tutti::detail
