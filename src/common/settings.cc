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
std::string shown_debug(const Config& c) { return c.debug_detail ? "detail" : ""; }

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

const Setting kSettings[] =
    {
        {"TUTTI_TIMEOUT", "library", Kind::Seconds, 1, 10000000000, nullptr, R"doc(`300`)doc", Agreement::None,
         R"doc(Deadline in seconds (fractions allowed, 0.001–1e7) of `init()` and of every operation. `InitOptions::timeout` and `Communicator::set_timeout` override it.)doc",
         store_timeout, shown_timeout},
        {"TUTTI_LOG", "library", Kind::Choice, 0, 0, "off|none|warn|warning|info|debug|trace", R"doc(`warn`)doc",
         Agreement::None,
         R"doc(`off`, `warn`, `info`, `debug` or `trace`; lines go to stderr as `[tutti HH:MM:SS.us rank R pid P LEVEL] ...`. Read once per process.)doc",
         nullptr, nullptr},
        {"TUTTI_CHUNK_BYTES", "library", Kind::Bytes, 64, kMaxBytes, nullptr,
         R"doc(`1M` within a host, `256K` across hosts)doc", Agreement::Job,
         R"doc(Pipelining unit of the chunked network algorithms (ring, chunked tree broadcast/reduce, chain): 1 MiB on communicators within one host, 256 KiB on those spanning hosts, where the ring's pipeline fills sooner: large all_reduces between test-bed hosts run faster with 256 KiB, those on loopback with 1 MiB (docs/tuning.md, "TUTTI_CHUNK_BYTES"). Rabenseifner's steps up to 512 KiB go in 32 KiB units across hosts and 64 KiB within one (docs/tuning.md), or in this size where smaller. Set, it applies to both. At least 64. K/M/G suffixes.)doc",
         store_chunk, shown_chunk},
        {"TUTTI_SMALL_BYTES", "library", Kind::Bytes, 0, kMaxBytes, nullptr, R"doc(`64K`)doc", Agreement::Job,
         R"doc(all_reduce messages up to this many bytes use recursive doubling over the network; larger ones Rabenseifner or the ring (docs/tuning.md).)doc",
         FIELD_BYTES("TUTTI_SMALL_BYTES", small_bytes), SHOWN(small_bytes)},
        {"TUTTI_TWO_LEVEL_LEADER_BYTES", "library", Kind::Bytes, 0, kMaxBytes, nullptr, R"doc(`128K`)doc",
         Agreement::Job,
         R"doc(two-level all_reduce (communicators spanning hosts with equal ranks on each) up to this many bytes goes through one leader per host; larger ones are reduced in slices, one per local rank, across hosts in parallel (docs/tuning.md).)doc",
         FIELD_BYTES("TUTTI_TWO_LEVEL_LEADER_BYTES", two_level_leader_bytes), SHOWN(two_level_leader_bytes)},
        {"TUTTI_ALGO", "library", Kind::Algorithms, 0, 0, nullptr, R"doc((the table))doc", Agreement::Job,
         R"doc(Overrides the selection table per collective: `all_reduce:ring,broadcast:binomial`. The names are the registry's: docs/algorithms.md, or `tutti-config --algorithms`. Every network algorithm works for every number of ranks. Unknown collectives or algorithms are refused at init, with the list of known ones. `two_level` (all_reduce, broadcast, all_gather, reduce_scatter) is the default for communicators that span hosts with equal ranks per host; naming another algorithm there runs it flat over all members.)doc",
         store_algo, shown_algo},
        {"TUTTI_ALGO_TUNING", "library", Kind::Choice, 0, 0, "auto|on|off", R"doc(`auto`)doc", Agreement::Job,
         R"doc(Whether all_reduce, broadcast and all_to_all time two ways of running against each other where the better one depends on the network, and run the faster: all_reduce over the network above `TUTTI_SMALL_BYTES`/32 up to `TUTTI_SMALL_BYTES` (2–64 KiB), recursive doubling against Rabenseifner, and above 512 KiB up to 4 MiB Rabenseifner against the ring (both in runs of five of each, the first untimed, the mean of the rest); broadcast over the network above 2 KiB up to 256 KiB where the table runs binomial, binomial against scatter + all_gather (in runs of five of each after a barrier, the first untimed, the slowest member's mean of the rest); all_to_all over the network above 16 B a peer where the table runs Bruck, Bruck against pairwise (as all_reduce); in two levels (communicators spanning hosts with equal ranks on each) up to `TUTTI_TWO_LEVEL_LEADER_BYTES`/8 (16 KiB) the leader form against recursive doubling over the whole communicator (in runs of five of each, the first untimed, the mean of the rest), above it up to 8× it (16 KiB–1 MiB) the leader form against the slices, and above that from slices of 512 KiB a rank up to slices of 4 MiB (at most 16 MiB), the slices whole against the slices in pieces, then up to slices of 32 MiB pieces of an 8th of a slice against a 32nd; in shared memory, where `TUTTI_SHM_CMA_BYTES` is unset, single copy against copying through the segment for every collective that has both, above 8 KiB (four trials of each in a row, the fastest of each, the members' minimum: docs/tuning.md, "Timed choice in shared memory"). Per size class (powers of two), after one untimed operation of each, both run (twice each, alternately, where no runs are named), the members add up their mean times (broadcast: take the slowest) in the next operation and all run the faster (the table's choice unless the other is at least 5% faster) until the class's next trials, after 24, 96, 384, … up to 6,144 operations (docs/tuning.md, "Timed choice"). `auto`: on communicators of 3 or more ranks spanning hosts (and every two-level one), and in shared memory on every communicator of 2 or more ranks; `on`: also on every communicator whose collectives go over the network (2 or more ranks; one host needs `TUTTI_TRANSPORT=tcp`); `off`: the table alone (the same algorithm every run, so floating-point sums repeat bit for bit from run to run; tuned runs are identical across ranks but may differ from run to run in the last bits). `TUTTI_ALGO` naming an algorithm of all_reduce, broadcast or all_to_all other than `two_level` turns that collective's choices over the network off; naming any all_reduce algorithm, `two_level` included, turns off the two-level form's timing against recursive doubling. Every rank must use the same setting (init checks). `TUTTI_LOG=debug` logs each choice.)doc",
         FIELD_TEXT(algo_tuning), SHOWN_TEXT(algo_tuning)},
        {"TUTTI_TRANSPORT", "library", Kind::Choice, 0, 0, "auto|tcp", R"doc(`auto`)doc", Agreement::Host,
         R"doc(`auto`: collectives of a communicator whose ranks all share a host (same hostname, boot id and IPC namespace) run over shared memory, others over TCP. `tcp`: TCP everywhere. Point-to-point goes through shared memory when every rank of the job is on one host (and may read the others' memory), through TCP otherwise.)doc",
         FIELD_TEXT(transport), SHOWN_TEXT(transport)},
        {"TUTTI_SHM_SLOT_BYTES",
         "library", Kind::Bytes, 256, 1073741824, nullptr, R"doc(`256K`)doc", Agreement::Host, R"doc(Size of each of the four slots every rank owns in a communicator's shared-memory segment; the pipelining unit of shared-memory collectives. 256 B – 1 GiB. Each rank maps `1,024 + n·(148,736 + 4·slot)` bytes per single-host communicator (n ranks): about 9 MiB for 8 ranks at the default.)doc",
         FIELD_BYTES("TUTTI_SHM_SLOT_BYTES", shm_slot_bytes), SHOWN(shm_slot_bytes)},
        {"TUTTI_SHM_ONESHOT_BYTES", "library", Kind::Bytes, 0, kMaxBytes, nullptr, R"doc(`16K`)doc", Agreement::Host,
         R"doc(Shared-memory reductions up to this size are one-shot (every rank reduces all inputs); above, two-shot (each reduces a slice, then all gather).)doc",
         FIELD_BYTES("TUTTI_SHM_ONESHOT_BYTES", shm_one_shot_bytes), SHOWN(shm_one_shot_bytes)},
        {"TUTTI_SHM_CMA_BYTES", "library", Kind::Bytes, 0, kMaxBytes, nullptr, R"doc(`128K`)doc", Agreement::Host,
         R"doc(Shared-memory collectives move blocks (per-rank pieces, reduction slices) of at least this size with one copy straight from (or, for broadcast's root, into) the peer's memory (`process_vm_readv`, `process_vm_writev`) instead of two copies through the segment, when every member may read and write every other's memory (same user, no ptrace restriction, same PID namespace — checked at the first collective); `0` turns it off. Unset, the rules below apply as the first of two alternatives that each collective times against copying only, per size class above 8 KiB (`TUTTI_ALGO_TUNING`; docs/tuning.md, "Timed choice in shared memory"); set (even to `128K`), they apply as they are, every time. Ranks of a host where one sets it and another does not fail init. Broadcast uses a quarter of it, all_gather, all_to_all, reduce_scatter, all_reduce and reduce an eighth, when every rank has a core of its own; all_reduce and reduce copy through the segment once a rank's slice reaches 8 MiB (exceeds 512 KiB when ranks outnumber cores), all_gather once the gathered result reaches 8 MiB when ranks outnumber cores, and then too all_to_all from 512 KiB a rank and broadcast from 128 KiB — docs/tuning.md.)doc",
         store_cma, shown_cma},
        {"TUTTI_SHM_PREFIX", "library", Kind::Text, 0, 64, nullptr,
         R"doc(`tutti` (`tutti-run<pid>` under tuttirun on one node))doc", Agreement::Host,
         R"doc(Segment names are `/dev/shm/<prefix>-<job id>-<communicator id>`; the names disappear as soon as every member has mapped the segment, and tuttirun removes leftovers of its own prefix when the job ends. At most 64 characters, no `/`.)doc",
         store_shm_prefix, SHOWN_TEXT(shm_prefix)},
        {"TUTTI_DEBUG", "library", Kind::Choice, 0, 0, "detail|off", R"doc(`off`)doc", Agreement::Job,
         R"doc(`detail`: before every collective over the network, every rank sends every other the operation's signature (kind, dtype, reduce op, root, bytes) and all fail with `Mismatch` naming both operations if any differ. Shared-memory collectives check every round anyway, and network messages always carry the signature: a receive that meets a message of another operation fails with `Mismatch`, and so does one that finds a message of an operation this rank has already completed (ranks whose messages never met, e.g. gather against scatter, find out at their next operation that receives). This option makes every mismatch fail at the operation itself.)doc",
         store_debug, shown_debug},
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
         R"doc(Congestion control of peer connections (`TCP_CONGESTION`): a name the kernel allows this process (`/proc/sys/net/ipv4/tcp_allowed_congestion_control`; with `CAP_NET_ADMIN` any in `tcp_available_congestion_control`), or `system` for the kernel's default. Unset, peer connections use reno where the kernel's default is cubic or bbr, and keep any other default (dctcp, …): bbr stalls bursts of collective traffic, and cubic leaves 1–16 MiB messages slower than reno (docs/tuning.md, "TUTTI_TCP_CONGESTION"). A name the kernel refuses is `InvalidArgument` at init, naming what it allows. Store connections keep the kernel's default.)doc",
         FIELD_TEXT(tcp_congestion), SHOWN_TEXT(tcp_congestion)},
        {"TUTTI_SOCKETS_PER_PEER", "library", Kind::Integer, 1, kMaxSocketsPerPeer, nullptr, R"doc(`1`)doc",
         Agreement::None,
         R"doc(Connections between two ranks that carry the payload of large messages (1–16). Above 1, each pair has this many data connections plus one for headers and small messages, and every message of at least `TUTTI_SOCKET_STRIPE_BYTES` is split across the data connections. The connecting (higher) rank's value decides for the pair.)doc",
         FIELD_INTEGER("TUTTI_SOCKETS_PER_PEER", sockets_per_peer), SHOWN(sockets_per_peer)},
        {"TUTTI_SOCKET_STRIPE_BYTES", "library", Kind::Bytes, 4096, kMaxBytes, nullptr, R"doc(`1M`)doc",
         Agreement::None,
         R"doc(Messages of at least this size are striped across the `TUTTI_SOCKETS_PER_PEER` data connections (at least `4096`).)doc",
         FIELD_BYTES("TUTTI_SOCKET_STRIPE_BYTES", socket_stripe_bytes), SHOWN(socket_stripe_bytes)},
        {"TUTTI_JOB_SECRET", "library, tuttirun", Kind::Text, 0, 0, nullptr, R"doc((drawn by tuttirun))doc",
         Agreement::None,
         R"doc(The job's secret: every store and peer connection proves by HMAC-SHA256 challenge and response that both sides hold it (it never crosses the wire); a side that does not is refused and logged, and the process that holds another secret fails with `Unauthenticated`. tuttirun draws 32 random bytes per job on one node and keeps a value already set; jobs over several nodes (and jobs started by other launchers) set the same value on every rank. `InitOptions::job_secret` overrides it. Unset: store connections are checked for the protocol only, and peer links with a key drawn per job and kept in the store. tuttirun: With `--hosts`, kept and passed to every host's ranks when set; otherwise tuttirun draws one for the job.)doc",
         nullptr, nullptr},
        {"TUTTI_LISTEN_ADDR", "library", Kind::Text, 0, 0, nullptr, R"doc((the advertised address))doc",
         Agreement::None,
         R"doc(Address each rank listens on for its peers. Unset: the address it advertises (`TUTTI_ADVERTISE_ADDR`, else the route to the store: loopback for a job on loopback) when that is an address of this host, else `0.0.0.0`; with `TUTTI_SOCKET_IFNAME`, the picked interface's address (docs/errors.md, "Careless and hostile use").)doc",
         store_listen_addr, SHOWN_TEXT(listen_addr)},
        {"TUTTI_ADVERTISE_ADDR", "library", Kind::Text, 0, 0, nullptr, R"doc((auto))doc", Agreement::None,
         R"doc(Address a rank publishes to its peers; by default the address `TUTTI_SOCKET_IFNAME` picks, else the local address of the route to the store, skipping loopback when the store's address is not loopback (docs/launching.md).)doc",
         FIELD_TEXT(advertise_addr), SHOWN_TEXT(advertise_addr)},
        {"TUTTI_SOCKET_IFNAME", "library", Kind::Text, 0, 0, nullptr, R"doc((unset))doc", Agreement::None,
         R"doc(Network interfaces to use, NCCL's syntax: `eth,ib` (name prefixes), `^docker,lo` (all but these), `=eth0` (exact names), `^=eth0`. Ranks listen on and publish the first address of the first matching interface that is up (IPv4 first); rank 0's store listens on `MASTER_ADDR` only when that is one of the picked addresses. Matching nothing, or a malformed list, is `InvalidArgument` at init.)doc",
         FIELD_TEXT(socket_ifname), SHOWN_TEXT(socket_ifname)},
        {"TUTTI_STORE_LISTEN_ADDR", "library", Kind::Text, 0, 0, nullptr, R"doc((MASTER_ADDR or all))doc",
         Agreement::None,
         R"doc(Address rank 0's store server listens on. Unset: `MASTER_ADDR` when it is an IP address of this host, else every interface (a host name may resolve here to another address than on the other hosts).)doc",
         FIELD_TEXT(store_listen_addr), SHOWN_TEXT(store_listen_addr)},
        {"TUTTI_PMIX", "library", Kind::Choice, 0, 0, "0|1", R"doc((unset: PMIx where mpirun serves it))doc",
         Agreement::None,
         R"doc(`0`: do not use PMIx under Open MPI (meet through a file in `TUTTI_RENDEZVOUS_DIR`); unset: use it when mpirun serves it and `libpmix.so.2` loads (docs/launching.md).)doc",
         nullptr, nullptr},
        {"TUTTI_RENDEZVOUS_DIR", "library", Kind::Text, 0, 0, nullptr, R"doc(`/tmp`)doc", Agreement::None,
         R"doc(Where rank 0 of an Open MPI job without `MASTER_ADDR` publishes its store when PMIx cannot be used (a shared file system for many hosts).)doc",
         nullptr, nullptr},
        {"TUTTI_LAUNCHER", "library", Kind::Text, 0, 0, nullptr, R"doc((set by tuttirun))doc", Agreement::None, R"doc(Set by tuttirun in its ranks' environment (`tuttirun`): torchrun's variables under it then describe the ranks, and those of an outer launcher are not compared (docs/launching.md). Not for users to set.)doc",
         nullptr, nullptr},
        {"TUTTI_TORCH_INLINE_BYTES", "tutti.torch", Kind::Bytes, 0, kMaxBytes, nullptr, R"doc(`256K`)doc",
         Agreement::None,
         R"doc(Collectives of a tutti process group moving at most this many bytes run in the calling thread with tutti's blocking calls (the returned Work is already finished); larger ones run on the communicator's worker thread and return a pending Work. `0`: every collective asynchronous. Point-to-point is always asynchronous. K/M/G suffixes.)doc",
         nullptr, nullptr},
        {"TUTTI_KILL_GRACE_SECONDS", "tuttirun", Kind::Seconds, 0, 10000000000, nullptr, R"doc(`2`)doc",
         Agreement::None,
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
