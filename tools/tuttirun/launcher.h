// Process management of tuttirun: starting the ranks, watching them, and
// stopping all of them when one fails, on a signal, or at a timeout.
#pragma once

#include <string>
#include <vector>

namespace tuttirun {

struct JobConfig {
  int nproc = 1;      // ranks started on this node
  int nnodes = 1;     // nodes of the job
  int node_rank = 0;  // this node's index in [0, nnodes)
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 1..65535 (main picks one when not given)
  bool tag_output = false;
  // --bind-to cores (the default): each rank runs on an even share of the
  // CPUs tuttirun may use (placement.h); --bind-to none leaves them alone.
  bool bind_cores = true;
  double timeout_s = 0;  // 0: no limit
  double grace_s = 2;    // SIGTERM -> SIGKILL delay
  // --keep-going: a rank that fails does not stop the others; every rank's
  // end is reported when the job ends, and the exit code is the first
  // failure's.
  bool keep_going = false;
  std::vector<std::string> argv;  // program and its arguments

  // --hosts: instead of ranks, one child per host, each starting that host's
  // ranks (a tuttirun --nnodes ... --node-rank I behind an exec prefix).
  // Children are watched, reported and stopped as ranks are; `rank` in the
  // job's bookkeeping is then the node rank.
  struct HostChild {
    std::string name;
    int first_rank = 0;  // global ranks [first_rank, first_rank + nproc)
    int nproc = 0;
    std::vector<std::string> argv;
    std::vector<std::string> env;  // NAME=VALUE added to the child's environment
  };
  std::vector<HostChild> hosts;  // empty: the ranks run on this node
};

// Exit codes besides the ranks' own.
inline constexpr int kExitInternal = 1;   // fork/pipe/... failed
inline constexpr int kExitUsage = 2;      // bad command line
inline constexpr int kExitTimeout = 124;  // --timeout expired
inline constexpr int kExitNoExec = 127;   // the program could not be executed

// Runs the job to the end and returns tuttirun's exit code. When the job was
// stopped by a forwarded signal (SIGINT, ...) this re-raises that signal, so
// a calling shell sees tuttirun die of it; it returns only if that fails.
int run_job(const JobConfig& config);

// "SIGKILL" for 9, "signal 64" for numbers without a name.
std::string signal_name(int sig);

}  // namespace tuttirun
