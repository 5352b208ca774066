// tuttirun: starts the ranks of a tutti job on this node.
//
//   tuttirun -n N [--master-addr A] [--master-port P] [--nnodes K --node-rank I]
//            [--tag-output] [--timeout SECONDS] [--kill-grace SECONDS] [--] PROGRAM [ARGS...]
//
// Option parsing and validation live here; process management in
// launcher.cc, output tagging in output.cc.
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

#include "launcher.h"

#ifndef TUTTI_VERSION
#define TUTTI_VERSION "unknown"
#endif

namespace {

using tuttirun::JobConfig;
using tuttirun::kExitUsage;

constexpr const char* kUsage = "tuttirun [OPTIONS] [--] PROGRAM [ARGS...]";

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
the rank's code (128+signal for a signal). SIGINT, SIGTERM and SIGHUP are
forwarded to every rank; a second one kills all ranks. Exit codes of tuttirun
itself: 2 usage error, 124 timeout, 127 program not executable.
Everything after PROGRAM is passed to it unchanged.)";

// Prints "Usage: tuttirun [OPTIONS] [--] PROGRAM [ARGS...]".
class Formatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string) const override {
    return std::string("Usage: ") + kUsage + "\n";
  }
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

}  // namespace

int main(int argc, char** argv) {
  ensure_std_fds();

  CLI::App app{"Starts N ranks of PROGRAM on this node for a tutti job.", "tuttirun"};
  app.formatter(std::make_shared<Formatter>());
  app.footer(kFooter);
  app.prefix_command();  // everything from PROGRAM on is left to the program
  app.set_version_flag("--version", TUTTI_VERSION);

  JobConfig cfg;
  int master_port = 0;
  std::string grace_text;
  app.add_option("-n,--nproc-per-node", cfg.nproc, "number of ranks to start on this node (N)")
      ->required()
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--master-addr", cfg.master_addr, "address of rank 0's store (required with --nnodes > 1)")
      ->capture_default_str();
  app.add_option("--master-port", master_port, "port of rank 0's store (required with --nnodes > 1)")
      ->check(CLI::Range(1, 65535));
  app.add_option("--nnodes", cfg.nnodes, "number of nodes (K)")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--node-rank", cfg.node_rank, "index of this node in [0, K)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_flag("--tag-output", cfg.tag_output, "prefix every output line with '[RANK] '");
  app.add_option("--timeout", cfg.timeout_s, "wall-clock limit of the job; exit 124 past it")
      ->check(CLI::PositiveNumber)
      ->type_name("SECONDS");
  app.add_option("--kill-grace", grace_text,
                 "seconds between SIGTERM and SIGKILL when stopping ranks "
                 "(default: $TUTTI_KILL_GRACE_SECONDS, else 2)")
      ->type_name("SECONDS");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    usage_error(e.what());
  }

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

  if (!grace_text.empty()) {
    cfg.grace_s = parse_seconds(grace_text, "--kill-grace");
  } else if (const char* env = std::getenv("TUTTI_KILL_GRACE_SECONDS"); env != nullptr && *env != '\0') {
    cfg.grace_s = parse_seconds(env, "TUTTI_KILL_GRACE_SECONDS");
  }

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
