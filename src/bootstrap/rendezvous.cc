// open_rendezvous: the meeting of the ranks that parse_launch_env described.
// With MASTER_ADDR (given, or derived under Slurm) rank 0 serves the store
// there. Under hydra without one, rank 0 serves it on a free port and
// publishes host and port through the PMI-1 wire protocol on PMI_FD; under
// Open MPI, through PMIx (pmix.h), or in a file when the PMIx client library
// is not available (docs/launching.md).
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>

#include "bootstrap/launch_env.h"
#include "bootstrap/pmix.h"
#include "common/completion.h"
#include "common/config.h"
#include "common/log.h"
#include "net/ifname.h"
#include "tutti/error.h"

namespace tutti::detail {

namespace {

std::string my_hostname() {
  char name[256] = {0};
  gethostname(name, sizeof name - 1);
  return name;
}

// The PMI-1 wire protocol of MPICH's hydra: one text line per command.
class Pmi1 {
 public:
  Pmi1(int fd, TimePoint deadline) : fd_(fd), deadline_(deadline) {
    auto r = call("cmd=init pmi_version=1 pmi_subversion=1\n");
    expect(r, "response_to_init");
    kvs_ = value(call("cmd=get_my_kvsname\n"), "kvsname");
  }
  void put(const std::string& key, const std::string& v) {
    std::string line = "cmd=put kvsname=";
    line += kvs_;
    line += " key=";
    line += key;
    line += " value=";
    line += v;
    line += '\n';
    expect(call(line), "put_result");
  }
  void barrier() { expect(call("cmd=barrier_in\n"), "barrier_out"); }
  std::string get(const std::string& key) {
    std::string line = "cmd=get kvsname=";
    line += kvs_;
    line += " key=";
    line += key;
    line += '\n';
    auto r = call(line);
    expect(r, "get_result");
    return value(r, "value");
  }
  void finalize() { expect(call("cmd=finalize\n"), "finalize_ack"); }

 private:
  [[noreturn]] void fail(const std::string& what) {
    std::string m = "PMI (PMI_FD=";
    m += std::to_string(fd_);
    m += "): ";
    m += what;
    throw Error(ErrorKind::PeerLost, m);
  }
  std::string call(const std::string& line) {
    std::size_t off = 0;
    while (off < line.size()) {
      ssize_t n = ::write(fd_, line.data() + off, line.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail("write failed: " + std::string(std::strerror(errno)));
      off += static_cast<std::size_t>(n);
    }
    std::string reply;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()).count();
      if (left <= 0) fail("no reply to '" + line.substr(0, line.size() - 1) + "' in time");
      pollfd p{fd_, POLLIN, 0};
      int rc = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1000)));
      if (rc < 0 && errno == EINTR) continue;
      if (rc <= 0) continue;
      char c;
      ssize_t n = ::read(fd_, &c, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail("the process manager closed the connection");
      if (c == '\n') return reply;
      reply += c;
      if (reply.size() > 65536) fail("reply too long");
    }
  }
  static std::string field(const std::string& reply, const std::string& name) {
    std::size_t pos = 0;
    while (pos < reply.size()) {
      auto sp = reply.find(' ', pos);
      if (sp == std::string::npos) sp = reply.size();
      std::string kv = reply.substr(pos, sp - pos);
      pos = sp + 1;
      if (kv.compare(0, name.size() + 1, name + "=") == 0) return kv.substr(name.size() + 1);
    }
    return {};
  }
  void expect(const std::string& reply, const std::string& cmd) {
    if (field(reply, "cmd") != cmd) fail("expected cmd=" + cmd + ", got '" + reply + "'");
    std::string rc = field(reply, "rc");
    if (!rc.empty() && rc != "0") fail("'" + reply + "'");
  }
  std::string value(const std::string& reply, const std::string& name) {
    std::string v = field(reply, name);
    if (v.empty()) fail("no " + name + " in '" + reply + "'");
    return v;
  }

  int fd_;
  TimePoint deadline_;
  std::string kvs_;
};

void split_host_port(const std::string& text, const std::string& where, std::string& host, int& port) {
  auto sp = text.rfind(':');
  char* end = nullptr;
  long p = sp == std::string::npos ? -1 : std::strtol(text.c_str() + sp + 1, &end, 10);
  if (sp == std::string::npos || sp == 0 || p <= 0 || p > 65535 || (end && *end != '\0' && *end != '\n'))
    throw Error(ErrorKind::PeerLost, "malformed rendezvous record '" + text + "' in " + where);
  host = text.substr(0, sp);
  port = static_cast<int>(p);
}

}  // namespace

Rendezvous::~Rendezvous() {
  if (!file_to_remove.empty()) ::unlink(file_to_remove.c_str());
}

Rendezvous open_rendezvous(const LaunchEnv& launch, const Config& config, int rank, int size, const std::string& secret,
                           std::chrono::milliseconds timeout) {
  Rendezvous rv;
  const TimePoint deadline = deadline_after(timeout);
  const std::string me = std::to_string(rank);
  if (launch.rendezvous == LaunchEnv::Rendezvous::Master) {
    if (launch.master_addr.empty())
      throw Error(ErrorKind::InvalidArgument,
                  "MASTER_ADDR is not set: rank " + me + " cannot find the rendezvous of " + std::to_string(size) +
                      " ranks (set MASTER_ADDR and MASTER_PORT, or launch with tuttirun, srun, mpirun or mpiexec)");
    if (launch.master_port <= 0 || launch.master_port > 65535)
      throw Error(ErrorKind::InvalidArgument, "MASTER_PORT is not set or not a valid port (rank " + me + ")");
    rv.host = launch.master_addr;
    rv.port = launch.master_port;
    TUTTI_LOG(Debug, "rendezvous at " << rv.host << ":" << rv.port
                                      << (launch.master_from.empty() ? "" : " (" + launch.master_from + ")"));
    if (rank == 0) rv.server = std::make_unique<TcpStoreServer>(store_listen_address(config, rv.host), rv.port, secret);
    rv.store = make_tcp_store_client(rv.host, rv.port, timeout, secret);
    return rv;
  }
  // Rank 0 serves the store on a free port and publishes "host:port".
  const std::string host = my_hostname();
  std::string record;
  if (rank == 0) {
    rv.server = std::make_unique<TcpStoreServer>(store_listen_address(config, ""), 0, secret);
    record = host;
    record += ':';
    record += std::to_string(rv.server->port());
  }
  std::string where;
  LaunchEnv::Rendezvous how = launch.rendezvous;
  std::string no_pmix;  // why PMIx could not be used, for the file's timeout message
  if (how == LaunchEnv::Rendezvous::Pmix) {
    no_pmix = pmix_unavailable();
    if (!no_pmix.empty()) how = LaunchEnv::Rendezvous::File;
  }
  if (how == LaunchEnv::Rendezvous::Pmix) {
    where = "PMIx";
    TUTTI_LOG(Debug, "rendezvous through PMIx: rank 0 puts its store address, the others get it after a fence");
    record = pmix_exchange(rank, record, deadline);
  } else if (how == LaunchEnv::Rendezvous::Pmi) {
    where = "PMI";
    TUTTI_LOG(Debug, "rendezvous through PMI-1 on PMI_FD=" << launch.pmi_fd);
    Pmi1 pmi(launch.pmi_fd, deadline);
    if (rank == 0) pmi.put("tutti_store", record);
    pmi.barrier();
    if (rank != 0) record = pmi.get("tutti_store");
    pmi.finalize();
  } else {
    const std::string& path = launch.rendezvous_file;
    where = path;
    TUTTI_LOG(Debug, "rendezvous through the file "
                         << path << (no_pmix.empty() ? "" : " (PMIx is not available: " + no_pmix + ")"));
    if (rank == 0) {
      std::string tmp = path;
      tmp += ".tmp";
      tmp += std::to_string(::getpid());
      int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      if (fd < 0)
        throw Error(ErrorKind::PeerLost, "cannot create the rendezvous file " + tmp + ": " + std::strerror(errno));
      std::string line = record;
      line += '\n';
      bool ok = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
      ::close(fd);
      if (!ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
        ::unlink(tmp.c_str());
        throw Error(ErrorKind::PeerLost, "cannot write the rendezvous file " + path);
      }
      rv.file_to_remove = path;
    } else {
      for (;;) {
        struct stat st {};
        int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd >= 0 && ::fstat(fd, &st) == 0 && st.st_uid == ::getuid()) {
          char buf[512] = {0};
          ssize_t n = ::read(fd, buf, sizeof buf - 1);
          ::close(fd);
          if (n > 0 && buf[n - 1] == '\n') {
            record.assign(buf, static_cast<std::size_t>(n - 1));
            break;
          }
        } else if (fd >= 0) {
          ::close(fd);
        }
        if (Clock::now() >= deadline)
          throw Error(ErrorKind::Timeout,
                      "rank " + me + ": Timed out waiting for rank 0's rendezvous file " + path +
                          " (the ranks of an mpirun without MASTER_ADDR must share its directory, "
                          "TUTTI_RENDEZVOUS_DIR or /tmp" +
                          (no_pmix.empty() ? std::string(")") : "; PMIx was not used: " + no_pmix + ")"));
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
  }
  split_host_port(record, where, rv.host, rv.port);
  // On rank 0's host, meet through loopback.
  const std::string connect_to = rv.host == host ? std::string("127.0.0.1") : rv.host;
  rv.store = make_tcp_store_client(connect_to, rv.port, timeout, secret);
  return rv;
}

namespace {

std::string record_key(int r) { return "tutti/rank/" + std::to_string(r); }

// "rank 3" or "ranks 1, 2".
std::string rank_list(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size() && i < 32; ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  if (ranks.size() > 32) s += ", ... (" + std::to_string(ranks.size()) + " in all)";
  return s;
}

// The ranks whose record is not in the store, for the message of a
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
    for (int r = first; r < end; ++r) keys.push_back(record_key(r));
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

void exchange_records(Store& store, int rank, int size, const std::string& record, const std::string& address,
                      std::vector<std::string>& records, std::vector<std::string>& addresses, TimePoint deadline) {
  // "record\naddress": the record is one line, the address whatever bytes.
  store.set(record_key(rank), record + "\n" + address);
  // Every record in one request per 65,536 ranks; it waits (until init's
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
      for (int r = first; r < std::min(size, first + kPerRequest); ++r) keys.push_back(record_key(r));
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
  addresses.clear();
  for (int r = 0; r < size; ++r) {
    const Bytes& v = all[static_cast<std::size_t>(r)];
    const auto nl = std::find(v.begin(), v.end(), static_cast<std::uint8_t>('\n'));
    if (nl == v.end())
      throw Error(ErrorKind::InvalidArgument, "init: rank " + std::to_string(r) + "'s record \"" +
                                                  std::string(v.begin(), v.end()) +
                                                  "\" has no address: is it a build of another tutti version?");
    records.emplace_back(v.begin(), nl);
    addresses.emplace_back(nl + 1, v.end());
  }
}

}  // namespace tutti::detail
