#include "common/config.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <sstream>

#include "common/log.h"
#include "tutti/error.h"

namespace tutti::detail {
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

}  // namespace

std::size_t parse_bytes(const std::string& s, const char* what) {
  std::size_t pos = 0;
  unsigned long long v = 0;
  if (s.empty() || s[0] < '0' || s[0] > '9')
    throw Error(ErrorKind::InvalidArgument, std::string(what) + ": cannot parse '" + s + "' as a byte count");
  try {
    v = std::stoull(s, &pos);
  } catch (...) {
    throw Error(ErrorKind::InvalidArgument, std::string(what) + ": cannot parse '" + s + "' as a byte count");
  }
  std::string suffix = s.substr(pos);
  int shift = 0;
  if (suffix == "K" || suffix == "k")
    shift = 10;
  else if (suffix == "M" || suffix == "m")
    shift = 20;
  else if (suffix == "G" || suffix == "g")
    shift = 30;
  else if (!suffix.empty())
    throw Error(ErrorKind::InvalidArgument, std::string(what) + ": unknown suffix in '" + s + "' (use K, M or G)");
  if (v > ((std::uint64_t(1) << 50) >> shift))
    throw Error(ErrorKind::InvalidArgument, std::string(what) + ": '" + s + "' is larger than 2^50 bytes");
  return static_cast<std::size_t>(v << shift);
}

std::map<std::string, std::string> parse_algo_overrides(const std::string& spec) {
  std::map<std::string, std::string> out;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    auto colon = item.find(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == item.size())
      throw Error(ErrorKind::InvalidArgument,
                  "TUTTI_ALGO: expected 'collective:algorithm' but got '" + item + "' in '" + spec + "'");
    out[item.substr(0, colon)] = item.substr(colon + 1);
  }
  return out;
}

Config Config::from_env() {
  Config c;
  if (const char* v = env("TUTTI_TIMEOUT")) {
    char* end = nullptr;
    double secs = std::strtod(v, &end);
    // NaN fails every comparison, so the test is written to reject it.
    if (end == v || *end != '\0' || !(secs >= 0.001 && secs <= 1e7))
      throw Error(ErrorKind::InvalidArgument,
                  std::string("TUTTI_TIMEOUT: expected seconds between 0.001 and 1e7, got '") + v + "'");
    c.timeout = std::chrono::milliseconds(static_cast<long long>(secs * 1000.0 + 0.5));
  }
  if (const char* v = env("TUTTI_CHUNK_BYTES")) {
    c.chunk_bytes = parse_bytes(v, "TUTTI_CHUNK_BYTES");
    if (c.chunk_bytes < 64) throw Error(ErrorKind::InvalidArgument, "TUTTI_CHUNK_BYTES: must be at least 64");
    c.hosts_chunk_bytes = c.chunk_bytes;
  }
  if (const char* v = env("TUTTI_SMALL_BYTES")) c.small_bytes = parse_bytes(v, "TUTTI_SMALL_BYTES");
  if (const char* v = env("TUTTI_TWO_LEVEL_LEADER_BYTES"))
    c.two_level_leader_bytes = parse_bytes(v, "TUTTI_TWO_LEVEL_LEADER_BYTES");
  if (const char* v = env("TUTTI_ALGO")) c.algo = parse_algo_overrides(v);
  if (const char* v = env("TUTTI_SOCKET_BUFFER_BYTES"))
    c.socket_buffer_bytes = parse_bytes(v, "TUTTI_SOCKET_BUFFER_BYTES");
  if (const char* v = env("TUTTI_TCP_CONGESTION")) {
    c.tcp_congestion = v;
    if (c.tcp_congestion.size() > 15)
      throw Error(ErrorKind::InvalidArgument, std::string("TUTTI_TCP_CONGESTION: expected 'system' or a congestion "
                                                          "control name of at most 15 characters, got '") +
                                                  v + "'");
  }
  if (const char* v = env("TUTTI_SOCKETS_PER_PEER")) {
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    c.sockets_per_peer = *end == '\0' && n >= 1 && n <= kMaxSocketsPerPeer ? static_cast<int>(n) : 0;
    if (c.sockets_per_peer == 0)
      throw Error(ErrorKind::InvalidArgument, "TUTTI_SOCKETS_PER_PEER: must be between 1 and " +
                                                  std::to_string(kMaxSocketsPerPeer) + ", got '" + v + "'");
  }
  if (const char* v = env("TUTTI_SOCKET_STRIPE_BYTES")) {
    c.socket_stripe_bytes = parse_bytes(v, "TUTTI_SOCKET_STRIPE_BYTES");
    if (c.socket_stripe_bytes < 4096)
      throw Error(ErrorKind::InvalidArgument, "TUTTI_SOCKET_STRIPE_BYTES: must be at least 4096");
  }
  if (const char* v = env("TUTTI_LISTEN_ADDR")) {
    c.listen_addr = v;
    c.listen_addr_set = true;
  }
  if (const char* v = env("TUTTI_SOCKET_IFNAME")) c.socket_ifname = v;  // checked by init (net/ifname.h)
  if (const char* v = env("TUTTI_ADVERTISE_ADDR")) c.advertise_addr = v;
  if (const char* v = env("TUTTI_STORE_LISTEN_ADDR")) c.store_listen_addr = v;
  if (const char* v = env("TUTTI_ALGO_TUNING")) {
    c.algo_tuning = v;
    if (c.algo_tuning != "auto" && c.algo_tuning != "on" && c.algo_tuning != "off")
      throw Error(ErrorKind::InvalidArgument,
                  std::string("TUTTI_ALGO_TUNING: expected 'auto', 'on' or 'off', got '") + v + "'");
  }
  if (const char* v = env("TUTTI_TRANSPORT")) {
    c.transport = v;
    if (c.transport != "auto" && c.transport != "tcp")
      throw Error(ErrorKind::InvalidArgument,
                  std::string("TUTTI_TRANSPORT: expected 'auto' or 'tcp', got '") + v + "'");
  }
  if (const char* v = env("TUTTI_SHM_SLOT_BYTES")) {
    c.shm_slot_bytes = parse_bytes(v, "TUTTI_SHM_SLOT_BYTES");
    if (c.shm_slot_bytes < 256 || c.shm_slot_bytes > (std::size_t(1) << 30))
      throw Error(ErrorKind::InvalidArgument, "TUTTI_SHM_SLOT_BYTES: must be between 256 and 1G");
  }
  if (const char* v = env("TUTTI_SHM_PREFIX")) {
    c.shm_prefix = v;
    if (c.shm_prefix.size() > 64 || c.shm_prefix.find('/') != std::string::npos)
      throw Error(ErrorKind::InvalidArgument, "TUTTI_SHM_PREFIX: at most 64 characters, no '/'");
  }
  if (const char* v = env("TUTTI_SHM_ONESHOT_BYTES")) c.shm_one_shot_bytes = parse_bytes(v, "TUTTI_SHM_ONESHOT_BYTES");
  if (const char* v = env("TUTTI_TRACE_BUFFER")) {
    c.trace_buffer = parse_bytes(v, "TUTTI_TRACE_BUFFER");
    if (c.trace_buffer > (1u << 20)) throw Error(ErrorKind::InvalidArgument, "TUTTI_TRACE_BUFFER: at most 1048576");
  }
  if (const char* v = env("TUTTI_TRACE_DIR")) c.trace_dir = v;
  if (const char* v = env("TUTTI_DEBUG")) {
    const std::string d = v;
    if (d != "detail" && d != "off" && !d.empty())
      throw Error(ErrorKind::InvalidArgument, "TUTTI_DEBUG: expected 'detail' or 'off', got '" + d + "'");
    c.debug_detail = d == "detail";
  }
  if (const char* v = env("TUTTI_SHM_CMA_BYTES")) {
    c.shm_cma_bytes = parse_bytes(v, "TUTTI_SHM_CMA_BYTES");
    c.shm_cma_set = true;
  }
  return c;
}

std::string Config::describe() const {
  std::ostringstream os;
  os << "timeout=" << timeout.count() << "ms chunk_bytes=" << chunk_bytes << " hosts_chunk_bytes=" << hosts_chunk_bytes
     << " small_bytes=" << small_bytes << " two_level_leader_bytes=" << two_level_leader_bytes
     << " socket_buffer_bytes=" << socket_buffer_bytes
     << " tcp_congestion=" << (tcp_congestion.empty() ? "(auto)" : tcp_congestion)
     << " sockets_per_peer=" << sockets_per_peer << " socket_stripe_bytes=" << socket_stripe_bytes
     << " listen_addr=" << listen_addr << " advertise_addr=" << (advertise_addr.empty() ? "(auto)" : advertise_addr)
     << " socket_ifname=" << (socket_ifname.empty() ? "(default)" : socket_ifname) << " transport=" << transport
     << " algo_tuning=" << algo_tuning << " shm_slot_bytes=" << shm_slot_bytes
     << " shm_one_shot_bytes=" << shm_one_shot_bytes << " shm_cma_bytes=" << shm_cma_bytes << " algo=";
  bool first = true;
  for (auto& [k, v] : algo) {
    os << (first ? "" : ",") << k << ":" << v;
    first = false;
  }
  if (first) os << "(table)";
  os << " log=" << static_cast<int>(log_level());
  return os.str();
}

std::string Config::shared_settings() const {
  std::string algos;
  for (auto& [k, v] : algo) algos += (algos.empty() ? "" : ",") + k + ":" + v;
  std::string s;
  auto line = [&s](const char* scope, const char* name, const std::string& value) {
    s += std::string(scope) + " " + name + "=" + value + "\n";
  };
  line("J", "TUTTI_CHUNK_BYTES", std::to_string(chunk_bytes) + "," + std::to_string(hosts_chunk_bytes));
  line("J", "TUTTI_SMALL_BYTES", std::to_string(small_bytes));
  line("J", "TUTTI_TWO_LEVEL_LEADER_BYTES", std::to_string(two_level_leader_bytes));
  line("J", "TUTTI_ALGO", algos);
  line("J", "TUTTI_ALGO_TUNING", algo_tuning);
  line("J", "TUTTI_DEBUG", debug_detail ? "detail" : "");
  line("H", "TUTTI_TRANSPORT", transport);
  line("H", "TUTTI_SHM_SLOT_BYTES", std::to_string(shm_slot_bytes));
  line("H", "TUTTI_SHM_ONESHOT_BYTES", std::to_string(shm_one_shot_bytes));
  // Unset differs from any value: the tuners choose where it is unset.
  line("H", "TUTTI_SHM_CMA_BYTES", shm_cma_set ? std::to_string(shm_cma_bytes) : "(unset)");
  line("H", "TUTTI_SHM_PREFIX", shm_prefix);
  return s;
}

std::string settings_disagreement(const std::string& mine, const std::string& theirs, bool same_host, int me,
                                  int them) {
  if (mine == theirs) return "";
  const std::string other = "rank " + std::to_string(them);
  if (theirs.empty()) return other + " published no settings: it runs another version of tutti";
  // The lines that count ("J TUTTI_X=value"; "H ..." only on the same host).
  auto lines = [same_host](const std::string& s) {
    std::vector<std::string> out;
    std::size_t at = 0;
    for (std::size_t nl; (nl = s.find('\n', at)) != std::string::npos; at = nl + 1)
      if (same_host || s.compare(at, 2, "H ") != 0) out.push_back(s.substr(at, nl - at));
    return out;
  };
  const std::vector<std::string> a = lines(mine), b = lines(theirs);
  const std::string another = other + " publishes other settings: it runs another version of tutti";
  if (a.size() != b.size()) return another;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) continue;
    const std::size_t eq = a[i].find('=');
    if (eq == std::string::npos || eq < 2 || b[i].compare(0, eq + 1, a[i], 0, eq + 1) != 0) return another;
    return "ranks disagree on " + a[i].substr(2, eq - 2) + ": '" + b[i].substr(eq + 1) + "' on " + other + ", '" +
           a[i].substr(eq + 1) + "' on rank " + std::to_string(me) + " (every rank of " +
           (a[i][0] == 'H' ? "a host" : "a job") + " must use the same value)";
  }
  return "";
}

}  // namespace tutti::detail
