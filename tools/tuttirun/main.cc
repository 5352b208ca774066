// tuttirun: starts the ranks of a tutti job on this node, or on many hosts.
//
//   tuttirun -n N [--master-addr A] [--master-port P] [--nnodes K --node-rank I]
//            [--tag-output] [--bind-to cores|none] [--timeout SECONDS] [--kill-grace SECONDS] [--keep-going]
//            [--] PROGRAM [ARGS...]
//   tuttirun --hosts H1:N,H2:N,... [--exec-prefix "CMD {host} [{cmd}]"] [--master-addr A]
//            [--master-port P] [...] [--] PROGRAM [ARGS...]
//
// Option parsing and validation live here; process management in
// launcher.cc, output tagging in output.cc, the --hosts helpers in hosts.cc.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "hosts.h"
#include "launcher.h"
#include "tutti/version.h"

extern char** environ;

namespace {

using tuttirun::JobConfig;
using tuttirun::kExitUsage;

constexpr const char* kUsage = "tuttirun [OPTIONS] [--] PROGRAM [ARGS...]";
constexpr const char* kDefaultPrefix = "ssh -o BatchMode=yes {host} {cmd}";

constexpr const char* kFooter = R"(Environment of every rank:
  RANK              node_rank * N + LOCAL_RANK
  WORLD_SIZE        nnodes * N
  LOCAL_RANK        0 .. N-1
  LOCAL_WORLD_SIZE  N
  GROUP_RANK        node rank
  MASTER_ADDR, MASTER_PORT   rendezvous address (a free port is picked when
                    --master-port is not given and --nnodes is 1)
  TUTTI_LAUNCHER    tuttirun
  TUTTI_JOB_SECRET  a random secret per job that authenticates every
                    connection (kept when already set; with --nnodes > 1
                    set the same value on every node)

When a rank exits non-zero or dies of a signal, tuttirun names it on stderr,
sends SIGTERM to the others, SIGKILL after the grace period, and exits with
the rank's code (128+signal for a signal). With --keep-going the others run
on: each failure is named as it happens ("...; the other 3 ranks keep
going"), every rank's end is listed when the last one ends ("tuttirun: end:
rank 2 (pid 99) exited with code 3"), and the exit code is the first
failure's, 0 if none failed. SIGINT, SIGTERM and SIGHUP are
forwarded to every rank; a second one kills all ranks. Exit codes of tuttirun
itself: 2 usage error, 124 timeout, 127 program not executable.
Everything after PROGRAM is passed to it unchanged.

Many hosts: --hosts h0:2,h1:2 starts, on each host I in the order given,
  tuttirun --nnodes K --node-rank I --master-addr A --master-port P -n N PROGRAM...
through the exec prefix (default: ssh -o BatchMode=yes {host} {cmd}); {host}
becomes the host's name, {cmd} that command as one shell-quoted string (with
the job secret TUTTI_JOB_SECRET and the other TUTTI_* variables in front, as
env NAME=VALUE); without {cmd} the command's words are appended and those
variables travel in the environment. A is --master-addr (default: the first
host), P --master-port (default: a port free here). When one host's ranks
fail, the others are stopped and one line names the host, rank and ending.)";

// Prints "Usage: tuttirun [OPTIONS] [--] PROGRAM [ARGS...]".
class Formatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string) const override { return std::string("Usage: ") + kUsage + "\n"; }
};

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "tuttirun: error: %s\nRun 'tuttirun --help' for usage.\n", message.c_str());
  std::exit(kExitUsage);
}

// Binds port 0 on `addr` and returns the port the kernel chose (the socket is
// closed again, so a rank can bind it). 0 and *error on failure.
int pick_free_port(const std::string& addr, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(addr.c_str(), "0", &hints, &res);
  if (rc != 0) {
    *error = ::gai_strerror(rc);
    return 0;
  }
  int port = 0;
  for (addrinfo* ai = res; ai != nullptr && port == 0; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      *error = std::strerror(errno);
      continue;
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
      if (ss.ss_family == AF_INET) port = ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
      if (ss.ss_family == AF_INET6) port = ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
    } else {
      *error = std::strerror(errno);
    }
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return port;
}

// Makes sure descriptors 0, 1 and 2 are open, so that pipes created later
// never take their place.
void ensure_std_fds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
      int n = ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
      if (n >= 0 && n != fd) ::close(n);  // cannot happen: open takes the lowest free fd
    }
  }
}

double parse_seconds(const std::string& text, const char* what) {
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || errno != 0 || !std::isfinite(v) || v < 0) {
    usage_error(std::string(what) + " must be a number of seconds >= 0, got '" + text + "'");
  }
  return v;
}

double kill_grace(const std::string& grace_text, double fallback) {
  if (!grace_text.empty()) return parse_seconds(grace_text, "--kill-grace");
  if (const char* env = std::getenv("TUTTI_KILL_GRACE_SECONDS"); env != nullptr && *env != '\0')
    return parse_seconds(env, "TUTTI_KILL_GRACE_SECONDS");
  return fallback;
}

// The path of this tuttirun, for the hosts' command lines (every host is
// expected to have tuttirun at the same path, as with mpirun).
std::string self_path(const char* argv0) {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n > 0) return std::string(buf, static_cast<std::size_t>(n));
  return argv0;
}

// --hosts: one child per host, each a tuttirun --nnodes K --node-rank I
// behind the exec prefix; the parent watches and stops them as ranks.
int run_hosts(const CLI::App& app, JobConfig& cfg, const std::string& hosts_text, const std::string& prefix_text,
              int master_port, const std::string& grace_text) {
  if (app.count("--nnodes") > 0 || app.count("--node-rank") > 0)
    usage_error("--hosts sets --nnodes and --node-rank itself; do not pass them");
  std::vector<tuttirun::HostEntry> hosts;
  std::string error;
  if (!tuttirun::parse_hosts(hosts_text, app.count("-n") > 0 ? cfg.nproc : 0, &hosts, &error)) usage_error(error);
  const int nproc = hosts.front().nproc;
  const int nnodes = static_cast<int>(hosts.size());
  if (static_cast<long long>(nnodes) * nproc > 0x7fffffff) usage_error("nnodes * N is too large");
  std::vector<std::string> prefix;
  if (!tuttirun::split_words(prefix_text, &prefix, &error)) usage_error("--exec-prefix: " + error);
  if (prefix.empty()) usage_error("--exec-prefix must not be empty");

  const std::string master_addr = app.count("--master-addr") > 0 ? cfg.master_addr : hosts.front().name;
  if (master_addr.empty()) usage_error("--master-addr must not be empty");
  int port = master_port;
  if (port == 0) {
    // A guess: free here, and most likely on the first host too.
    port = pick_free_port("0.0.0.0", &error);
    if (port == 0) {
      std::fprintf(stderr, "tuttirun: cannot pick a free port: %s (pass --master-port)\n", error.c_str());
      return tuttirun::kExitInternal;
    }
  }
  const double child_grace = kill_grace(grace_text, cfg.grace_s);
  // Each host's tuttirun gets its own grace to stop its ranks; ours covers
  // that and the way through the prefix.
  cfg.grace_s = child_grace + 3;

  // One secret for the whole job (kept when the caller set one); the ranks
  // of every host need the same.
  std::string secret;
  if (const char* s = std::getenv("TUTTI_JOB_SECRET"); s != nullptr && *s != '\0') {
    secret = s;
  } else {
    secret = tuttirun::random_secret_hex(&error);
    if (secret.empty()) {
      std::fprintf(stderr, "tuttirun: cannot draw a job secret: %s\n", error.c_str());
      return tuttirun::kExitInternal;
    }
  }
  // Over a {cmd} prefix (ssh) the far side does not inherit our environment:
  // the secret and the TUTTI_* settings go in front of the command.
  std::vector<std::pair<std::string, std::string>> remote_env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string entry(*e);
    std::size_t eq = entry.find('=');
    std::string name = entry.substr(0, eq);
    if (eq == std::string::npos || name.rfind("TUTTI_", 0) != 0) continue;
    if (name == "TUTTI_LAUNCHER" || name == "TUTTI_JOB_SECRET") continue;
    remote_env.emplace_back(name, entry.substr(eq + 1));
  }
  remote_env.emplace_back("TUTTI_JOB_SECRET", secret);

  char grace_buf[32];
  std::snprintf(grace_buf, sizeof grace_buf, "%g", child_grace);
  const std::string self = self_path(app.get_name().c_str());
  for (int i = 0; i < nnodes; ++i) {
    std::vector<std::string> cmd = {
        self,        "--nnodes",      std::to_string(nnodes), "--node-rank", std::to_string(i),     "--master-addr",
        master_addr, "--master-port", std::to_string(port),   "-n",          std::to_string(nproc), "--kill-grace",
        grace_buf};
    if (cfg.tag_output) cmd.push_back("--tag-output");
    if (cfg.keep_going) cmd.push_back("--keep-going");
    if (!cfg.bind_cores) {
      cmd.push_back("--bind-to");
      cmd.push_back("none");
    }
    cmd.push_back("--");
    cmd.insert(cmd.end(), cfg.argv.begin(), cfg.argv.end());
    tuttirun::HostCommand hc = tuttirun::host_command(prefix, hosts[i].name, cmd, remote_env);
    JobConfig::HostChild child;
    child.name = hosts[i].name;
    child.first_rank = i * nproc;
    child.nproc = nproc;
    child.argv = std::move(hc.argv);
    if (!hc.env_in_command) child.env.push_back("TUTTI_JOB_SECRET=" + secret);
    cfg.hosts.push_back(std::move(child));
  }
  cfg.nproc = nproc;
  cfg.nnodes = nnodes;
  cfg.master_addr = master_addr;
  cfg.master_port = port;
  return tuttirun::run_job(cfg);
}

}  // namespace

int main(int argc, char** argv) {
  ensure_std_fds();

  CLI::App app{"Starts N ranks of PROGRAM on this node for a tutti job.", "tuttirun"};
  app.formatter(std::make_shared<Formatter>());
  app.footer(kFooter);
  app.prefix_command();  // everything from PROGRAM on is left to the program
  app.set_version_flag("--version", TUTTI_VERSION_STRING);

  JobConfig cfg;
  int master_port = 0;
  std::string grace_text;
  std::string hosts_text;
  std::string prefix_text = kDefaultPrefix;
  app.add_option("-n,--nproc-per-node", cfg.nproc, "number of ranks to start on this node (N)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--hosts", hosts_text, "start the job on these hosts: H1:N,H2:N,... (N ranks on each)")
      ->type_name("LIST");
  app.add_option("--exec-prefix", prefix_text, "how to run a command on a host, with --hosts")
      ->type_name("CMD")
      ->capture_default_str();
  app.add_option("--master-addr", cfg.master_addr, "address of rank 0's store (required with --nnodes > 1)")
      ->capture_default_str();
  app.add_option("--master-port", master_port, "port of rank 0's store (required with --nnodes > 1)")
      ->check(CLI::Range(1, 65535));
  app.add_option("--nnodes", cfg.nnodes, "number of nodes (K)")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--node-rank", cfg.node_rank, "index of this node in [0, K)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_flag("--tag-output", cfg.tag_output, "prefix every output line with '[RANK] '");
  std::string bind_text = "cores";
  app.add_option("--bind-to", bind_text,
                 "cores: each rank runs on its share of the CPUs tuttirun may use (one CPU, shared "
                 "round robin, when ranks outnumber them); none: no binding")
      ->check(CLI::IsMember({"cores", "none"}))
      ->capture_default_str();
  app.add_option("--timeout", cfg.timeout_s, "wall-clock limit of the job; exit 124 past it")
      ->check(CLI::PositiveNumber)
      ->type_name("SECONDS");
  app.add_option("--kill-grace", grace_text,
                 "seconds between SIGTERM and SIGKILL when stopping ranks "
                 "(default: $TUTTI_KILL_GRACE_SECONDS, else 2)")
      ->type_name("SECONDS");
  app.add_flag("--keep-going", cfg.keep_going,
               "a rank that fails does not stop the others: each failure is named as it happens, every "
               "rank's end when the job ends, and the exit code is the first failure's");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    usage_error(e.what());
  }
  cfg.bind_cores = bind_text == "cores";

  // The program and its arguments: prefix_command() leaves them, unchanged,
  // in remaining(), behind the "--" if one was given.
  std::vector<std::string> rest = app.remaining();
  bool had_separator = !rest.empty() && rest.front() == "--";
  if (had_separator) rest.erase(rest.begin());
  if (rest.empty()) usage_error("no program given");
  if (!had_separator && rest.front().size() > 1 && rest.front()[0] == '-') {
    usage_error("unknown option '" + rest.front() + "'");
  }
  cfg.argv = std::move(rest);
  if (!hosts_text.empty() || app.count("--hosts") > 0)
    return run_hosts(app, cfg, hosts_text, prefix_text, master_port, grace_text);
  if (app.count("--exec-prefix") > 0) usage_error("--exec-prefix needs --hosts");
  if (app.count("-n") == 0) usage_error("-n N (ranks on this node) is required");

  if (cfg.node_rank >= cfg.nnodes) {
    usage_error("--node-rank " + std::to_string(cfg.node_rank) + " is out of range for --nnodes " +
                std::to_string(cfg.nnodes));
  }
  if (static_cast<long long>(cfg.nnodes) * cfg.nproc > 0x7fffffff) usage_error("nnodes * N is too large");
  if (cfg.nnodes > 1) {
    if (app.count("--master-addr") == 0) usage_error("--master-addr is required with --nnodes > 1");
    if (app.count("--master-port") == 0) usage_error("--master-port is required with --nnodes > 1");
  }
  if (cfg.master_addr.empty()) usage_error("--master-addr must not be empty");

  cfg.grace_s = kill_grace(grace_text, cfg.grace_s);

  if (master_port != 0) {
    cfg.master_port = master_port;
  } else {
    std::string error;
    cfg.master_port = pick_free_port(cfg.master_addr, &error);
    if (cfg.master_port == 0) {
      std::fprintf(stderr, "tuttirun: cannot pick a free port on %s: %s (pass --master-port)\n",
                   cfg.master_addr.c_str(), error.c_str());
      return tuttirun::kExitInternal;
    }
  }
  return tuttirun::run_job(cfg);
}
