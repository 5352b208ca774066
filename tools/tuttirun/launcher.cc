// Process management of tuttirun.
//
// Process groups. All ranks of a job live in ONE new process group, led by
// the first rank (rank 0 of this node); tuttirun stays in its own group.
//  (a) Ctrl-C: the terminal sends SIGINT to its foreground process group,
//      which holds tuttirun but not the ranks, so every rank receives the
//      signal exactly once: the copy tuttirun forwards. Had the ranks stayed
//      in tuttirun's group, each would get the terminal's SIGINT AND the
//      forwarded one.
//  (b) Killing: kill(-pgid, sig) reaches every rank and every descendant
//      that did not leave the group, with one call and no race against
//      forks. tuttirun never reaps the group leader before the very end (it
//      reads the leader's status with WNOWAIT), so the group id cannot be
//      reused by an unrelated process while tuttirun still signals it.
// Further safety nets: each rank gets PR_SET_PDEATHSIG=SIGKILL (set before
// exec, after checking that tuttirun had not died already), so ranks die with
// tuttirun even if tuttirun is SIGKILLed; tuttirun is a child subreaper, so
// descendants orphaned inside the job (even ones that called setsid) become
// its children and are killed and reaped before it exits.
// Consequences of the ranks running in a background process group: they
// must not read the terminal (they would be stopped by SIGTTIN), so when
// stdin is a terminal every rank gets /dev/null; otherwise only global rank
// 0 inherits stdin. Ctrl-Z stops tuttirun only, not the ranks.
//
// Waiting never spins: SIGCHLD/SIGINT/SIGTERM/SIGHUP are blocked and read
// from a signalfd, which is polled together with the output pipes; poll's
// timeout is the nearest deadline (timeout, kill grace, output drain) or
// infinite.
#include "launcher.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hosts.h"
#include "output.h"
#include "placement.h"
#include "shm_cleanup.h"

extern char** environ;

namespace tuttirun {

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  if (abbrev != nullptr) return std::string("SIG") + abbrev;
  return "signal " + std::to_string(sig);
}

namespace {

using Clock = std::chrono::steady_clock;

// Now plus `s` seconds, saturating: a limit past what the clock holds (1e10
// s, inf) is no limit rather than an overflow into the past.
Clock::time_point after_seconds(double s) {
  const Clock::time_point now = Clock::now();
  const double left = std::chrono::duration<double>(Clock::time_point::max() - now).count();
  if (!(s < left * 0.5)) return Clock::time_point::max();
  return now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(std::max(0.0, s)));
}

// How a rank ended.
struct Ending {
  bool signaled = false;
  int value = 0;  // exit code or signal number
  bool ok() const { return !signaled && value == 0; }
  int exit_code() const { return signaled ? 128 + value : value; }
};

Ending from_wait_status(int status) {
  if (WIFSIGNALED(status)) return {true, WTERMSIG(status)};
  return {false, WEXITSTATUS(status)};
}

std::string describe(const Ending& e) {
  if (!e.signaled) return "exited with code " + std::to_string(e.value);
  std::string name = signal_name(e.value);
  std::string out = "killed by signal " + std::to_string(e.value);
  if (name.rfind("SIG", 0) == 0) out += " (" + name + ")";
  return out;
}

// Children of this (single-threaded) process, from /proc; nullopt when the
// kernel does not offer the list.
std::optional<std::vector<pid_t>> list_children() {
  DIR* dir = ::opendir("/proc/self/task");
  if (dir == nullptr) return std::nullopt;
  std::vector<pid_t> kids;
  bool any = false;
  while (dirent* ent = ::readdir(dir)) {
    if (ent->d_name[0] == '.') continue;
    std::string path = std::string("/proc/self/task/") + ent->d_name + "/children";
    FILE* f = std::fopen(path.c_str(), "r");
    if (f == nullptr) continue;
    any = true;
    long pid = 0;
    while (std::fscanf(f, "%ld", &pid) == 1) kids.push_back(static_cast<pid_t>(pid));
    std::fclose(f);
  }
  ::closedir(dir);
  if (!any) return std::nullopt;
  return kids;
}

// What a child reports through its exec pipe when setup or exec fails.
struct ChildError {
  int stage;  // 0: setpgid, 1: prctl/parent died, 2: redirect, 3: exec
  int err;
};

struct Rank {
  int rank = 0;   // global rank
  int local = 0;  // local rank
  pid_t pid = -1;
  bool running = false;
  Ending ending;
  int out_fd = -1;  // read ends of the output pipes (--tag-output)
  int err_fd = -1;
  std::unique_ptr<LineTagger> out_tag;
  std::unique_ptr<LineTagger> err_tag;
  // --hosts: the host this child starts, and the first report of its
  // tuttirun ("rank 3 (pid 99) exited with code 1; ...").
  const JobConfig::HostChild* host = nullptr;
  std::string inner_report;
  // --bind-to cores: the CPUs the rank runs on (placement.h); empty: no binding.
  std::vector<int> cpus;
};

// The job secret that authenticates every connection of the job: 32 random
// bytes from the kernel, as hex. A secret the caller set is kept (jobs over
// several nodes need the same one on every node, so tuttirun cannot draw it).
std::string make_job_secret(const JobConfig& cfg) {
  const char* given = std::getenv("TUTTI_JOB_SECRET");
  if (given != nullptr && *given != '\0') return "";
  if (!cfg.hosts.empty()) return "";  // --hosts: main drew one and gives it to every host's command
  if (cfg.nnodes > 1) {
    std::fprintf(stderr,
                 "tuttirun: warning: TUTTI_JOB_SECRET is not set, so the job's connections are not authenticated; "
                 "set it to the same random value on every node\n");
    return "";
  }
  std::string error;
  std::string hex = random_secret_hex(&error);
  if (hex.empty()) {
    std::fprintf(stderr, "tuttirun: cannot draw a job secret: %s\n", error.c_str());
    std::exit(1);
  }
  return hex;
}

class Job {
 public:
  explicit Job(const JobConfig& config) : cfg_(config), secret_(make_job_secret(config)) {}
  ~Job();
  int run();

 private:
  bool setup_signals();
  bool spawn(Rank& r);
  [[noreturn]] void exec_child(Rank& r, char* const* argv, char* const* envp, int out_w, int err_w, int report_fd,
                               pid_t parent);
  std::vector<std::string> make_env(const Rank& r) const;
  void loop();
  void handle_signalfd();
  void reap();
  void on_exit(Rank& r, Ending e);
  // The line that names a failed rank (or host) and its ending, then `tail`.
  void report_failure(Rank& r, const Ending& e, const std::string& tail);
  void on_signal(int sig);
  void begin_stop();
  void signal_group(int sig) const;
  void read_pipe(Rank& r, bool is_err);
  void final_cleanup();
  int exit_code() const;
  bool hosts_mode() const { return !cfg_.hosts.empty(); }
  // "rank 3", or "host h1 (node 1, ranks 2-3)".
  std::string label(const Rank& r) const;
  // "rank"/"ranks" or "host"/"hosts".
  std::string unit(int n) const { return std::string(hosts_mode() ? "host" : "rank") + (n == 1 ? "" : "s"); }

  JobConfig cfg_;
  std::string secret_;  // TUTTI_JOB_SECRET for the ranks; "" to pass the caller's through
  std::vector<Rank> ranks_;
  pid_t pgid_ = 0;  // pid of the first rank; 0 before it exists
  int sfd_ = -1;
  int devnull_ = -1;
  bool stdin_is_tty_ = false;
  sigset_t orig_mask_{};
  struct sigaction orig_pipe_ {};
  bool mask_changed_ = false;
  int running_ = 0;

  Clock::time_point job_deadline_ = Clock::time_point::max();
  Clock::time_point kill_deadline_ = Clock::time_point::max();
  Clock::time_point drain_deadline_ = Clock::time_point::max();
  bool stopping_ = false;  // SIGTERM sent to the group
  bool sigkilled_ = false;
  bool ended_ = false;  // every rank exited; group killed, draining output
  bool timed_out_ = false;
  int interrupt_sig_ = 0;  // the signal forwarded to the ranks, if any
  bool failed_after_interrupt_ = false;
  std::optional<Ending> first_failure_;
  int launch_error_ = 0;  // exit code when launching failed
};

Job::~Job() {
  for (Rank& r : ranks_) {
    if (r.out_fd >= 0) ::close(r.out_fd);
    if (r.err_fd >= 0) ::close(r.err_fd);
  }
  if (sfd_ >= 0) ::close(sfd_);
  if (devnull_ >= 0) ::close(devnull_);
  if (mask_changed_) {
    ::sigaction(SIGPIPE, &orig_pipe_, nullptr);
    ::sigprocmask(SIG_SETMASK, &orig_mask_, nullptr);
  }
}

bool Job::setup_signals() {
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) {
    // A signal ignored by whoever started us (nohup, a background job of a
    // non-interactive shell) stays ignored, by tuttirun and, through exec,
    // by the ranks. Blocking it would queue it for the signalfd instead.
    struct sigaction cur {};
    if (::sigaction(s, nullptr, &cur) == 0 && cur.sa_handler == SIG_IGN) continue;
    sigaddset(&mask, s);
  }
  if (::sigprocmask(SIG_BLOCK, &mask, &orig_mask_) != 0) return false;
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  sigemptyset(&ign.sa_mask);
  ::sigaction(SIGPIPE, &ign, &orig_pipe_);
  mask_changed_ = true;
  // An inherited SIG_IGN for SIGCHLD would make children reap themselves.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(SIGCHLD, &dfl, nullptr);
  sfd_ = ::signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
  if (sfd_ < 0) return false;
  ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);  // best effort
  return true;
}

std::string Job::label(const Rank& r) const {
  if (r.host == nullptr) return "rank " + std::to_string(r.rank);
  const JobConfig::HostChild& h = *r.host;
  std::string ranks = h.nproc == 1
                          ? "rank " + std::to_string(h.first_rank)
                          : "ranks " + std::to_string(h.first_rank) + "-" + std::to_string(h.first_rank + h.nproc - 1);
  return "host " + h.name + " (node " + std::to_string(r.rank) + ", " + ranks + ")";
}

std::vector<std::string> Job::make_env(const Rank& r) const {
  if (r.host != nullptr) {
    // A host's child gets our environment as it is, plus what the host
    // command does not carry itself (the job secret, ...).
    std::vector<std::string> env;
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
      std::string_view entry(*e);
      std::string_view name = entry.substr(0, entry.find('='));
      bool replaced = std::any_of(r.host->env.begin(), r.host->env.end(), [&](const std::string& x) {
        return std::string_view(x).substr(0, x.find('=')) == name;
      });
      if (!replaced) env.emplace_back(entry);
    }
    env.insert(env.end(), r.host->env.begin(), r.host->env.end());
    return env;
  }
  static const char* const kOurs[] = {"RANK",       "WORLD_SIZE",  "LOCAL_RANK",  "LOCAL_WORLD_SIZE",
                                      "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT", "TUTTI_LAUNCHER"};
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view entry(*e);
    std::string_view name = entry.substr(0, entry.find('='));
    bool ours = std::any_of(std::begin(kOurs), std::end(kOurs), [&](const char* k) { return name == k; }) ||
                (!secret_.empty() && name == "TUTTI_JOB_SECRET");
    if (!ours) env.emplace_back(entry);
  }
  env.push_back("RANK=" + std::to_string(r.rank));
  env.push_back("WORLD_SIZE=" + std::to_string(cfg_.nnodes * cfg_.nproc));
  env.push_back("LOCAL_RANK=" + std::to_string(r.local));
  env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(cfg_.nproc));
  env.push_back("GROUP_RANK=" + std::to_string(cfg_.node_rank));
  env.push_back("MASTER_ADDR=" + cfg_.master_addr);
  env.push_back("MASTER_PORT=" + std::to_string(cfg_.master_port));
  env.push_back("TUTTI_LAUNCHER=tuttirun");
  if (!secret_.empty()) env.push_back("TUTTI_JOB_SECRET=" + secret_);
  // On one node every rank is ours, so their segments can be named after us
  // and cleaned up at the end (see shm_cleanup.h); a user's prefix wins.
  if (cfg_.nnodes == 1 && !std::getenv("TUTTI_SHM_PREFIX")) env.push_back("TUTTI_SHM_PREFIX=" + job_shm_prefix());
  return env;
}

// Runs in the forked child: only system calls on prepared data from here on.
void Job::exec_child(Rank& r, char* const* argv, char* const* envp, int out_w, int err_w, int report_fd, pid_t parent) {
  auto fail = [&](int stage) {
    ChildError ce{stage, errno};
    ssize_t ignored = ::write(report_fd, &ce, sizeof ce);
    (void)ignored;
    ::_exit(kExitNoExec);
  };
  if (::setpgid(0, pgid_) != 0) fail(0);
  if (!r.cpus.empty()) {
    // Best effort: a rank that cannot be bound runs where the scheduler puts it.
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c : r.cpus) CPU_SET(c, &set);
    ::sched_setaffinity(0, sizeof set, &set);
  }
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) fail(1);
  if (::getppid() != parent) {  // tuttirun died before PDEATHSIG was armed
    errno = ESRCH;
    fail(1);
  }
  bool keep_stdin = r.rank == 0 && !stdin_is_tty_;
  if (!keep_stdin && ::dup2(devnull_, 0) < 0) fail(2);
  auto redirect = [&](int from, int to) {
    if (from < 0) return;
    if (from == to) {  // dup2 would keep O_CLOEXEC
      if (::fcntl(to, F_SETFD, 0) != 0) fail(2);
    } else if (::dup2(from, to) < 0) {
      fail(2);
    }
  };
  redirect(out_w, 1);
  redirect(err_w, 2);
  ::sigaction(SIGPIPE, &orig_pipe_, nullptr);
  ::sigprocmask(SIG_SETMASK, &orig_mask_, nullptr);
  ::execvpe(argv[0], argv, envp);
  fail(3);
  ::_exit(kExitNoExec);
}

bool Job::spawn(Rank& r) {
  std::vector<std::string> env = make_env(r);
  std::vector<char*> envp;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = r.host != nullptr ? r.host->argv : cfg_.argv;
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  int out_p[2] = {-1, -1};
  int err_p[2] = {-1, -1};
  int report[2] = {-1, -1};
  auto close_all = [&] {
    for (int* p : {out_p, err_p, report})
      for (int i = 0; i < 2; ++i)
        if (p[i] >= 0) ::close(p[i]);
  };
  // Hosts' children: stdout goes straight through (their own tuttirun tags
  // it), stderr through us, to catch their tuttirun's report.
  const bool pipe_out = cfg_.tag_output && !hosts_mode();
  const bool pipe_err = cfg_.tag_output || hosts_mode();
  bool ok = ::pipe2(report, O_CLOEXEC) == 0;
  if (ok && pipe_out) ok = ::pipe2(out_p, O_CLOEXEC) == 0;
  if (ok && pipe_err) ok = ::pipe2(err_p, O_CLOEXEC) == 0;
  if (!ok) {
    std::fprintf(stderr, "tuttirun: cannot start %s: pipe: %s\n", label(r).c_str(), std::strerror(errno));
    close_all();
    launch_error_ = kExitInternal;
    return false;
  }
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) {
    std::fprintf(stderr, "tuttirun: cannot start %s: fork: %s\n", label(r).c_str(), std::strerror(errno));
    close_all();
    launch_error_ = kExitInternal;
    return false;
  }
  if (pid == 0) exec_child(r, argv.data(), envp.data(), out_p[1], err_p[1], report[1], parent);

  if (pgid_ == 0) pgid_ = pid;
  ::setpgid(pid, pgid_);  // also done by the child; whichever runs first wins
  r.pid = pid;
  r.running = true;
  ++running_;
  ::close(report[1]);
  report[1] = -1;
  // Appended, not "[" + std::to_string(...): g++ 12 at -O3 warns falsely
  // (-Wrestrict, GCC bug 105329) on operator+(const char*, string&&).
  std::string prefix;
  if (!hosts_mode()) prefix.append("[").append(std::to_string(r.rank)).append("] ");
  if (pipe_out) {
    ::close(out_p[1]);
    out_p[1] = -1;
    r.out_fd = out_p[0];
    out_p[0] = -1;
    ::fcntl(r.out_fd, F_SETFL, O_NONBLOCK);
    r.out_tag = std::make_unique<LineTagger>(1, prefix);
  }
  if (pipe_err) {
    ::close(err_p[1]);
    err_p[1] = -1;
    r.err_fd = err_p[0];
    err_p[0] = -1;
    ::fcntl(r.err_fd, F_SETFL, O_NONBLOCK);
    r.err_tag = std::make_unique<LineTagger>(2, prefix);
    if (hosts_mode()) {
      r.err_tag->set_line_filter([this, &r](std::string_view line) {
        constexpr std::string_view kReceived = "tuttirun: received ";
        // Signals we sent the host's tuttirun: we say so ourselves, once.
        if ((stopping_ || interrupt_sig_ != 0) && line.substr(0, kReceived.size()) == kReceived) return false;
        if (r.inner_report.empty()) {
          for (std::string_view head : {"tuttirun: rank ", "tuttirun: cannot "}) {
            if (line.substr(0, head.size()) == head) r.inner_report = std::string(line.substr(10));
          }
        }
        return true;
      });
    }
  }
  // Wait for exec (EOF) or for the child's error report.
  ChildError ce{};
  ssize_t n;
  do {
    n = ::read(report[0], &ce, sizeof ce);
  } while (n < 0 && errno == EINTR);
  close_all();
  if (n != static_cast<ssize_t>(sizeof ce)) return true;
  static const char* const kStage[] = {"setpgid", "parent died", "redirect", "exec"};
  if (ce.stage == 3) {
    std::fprintf(stderr, "tuttirun: cannot execute '%s' (%s): %s\n", args[0].c_str(), label(r).c_str(),
                 std::strerror(ce.err));
  } else {
    std::fprintf(stderr, "tuttirun: cannot start %s: %s: %s\n", label(r).c_str(), kStage[ce.stage & 3],
                 std::strerror(ce.err));
  }
  launch_error_ = ce.stage == 3 ? kExitNoExec : kExitInternal;
  return false;
}

void Job::signal_group(int sig) const {
  if (pgid_ > 0) ::kill(-pgid_, sig);  // never kill(0, ...) or kill(-1, ...)
}

void Job::begin_stop() {
  if (stopping_) return;
  stopping_ = true;
  signal_group(SIGTERM);
  signal_group(SIGCONT);  // a stopped rank would not act on SIGTERM
  if (cfg_.grace_s <= 0) {
    signal_group(SIGKILL);
    sigkilled_ = true;
  } else {
    kill_deadline_ = after_seconds(cfg_.grace_s);
  }
}

void Job::on_exit(Rank& r, Ending e) {
  r.running = false;
  r.ending = e;
  --running_;
  if (e.ok()) return;
  if (interrupt_sig_ != 0 && !first_failure_ && !timed_out_) {
    // Ranks are expected to die after a forwarded signal: no report, but do
    // not let the survivors run on.
    failed_after_interrupt_ = true;
    begin_stop();
    return;
  }
  if (stopping_) return;  // we are stopping them ourselves
  if (cfg_.keep_going) {
    if (!first_failure_) first_failure_ = e;
    std::string tail;
    if (running_ == 1) tail = "; the other " + unit(1) + " keeps going";
    if (running_ > 1) tail = "; the other " + std::to_string(running_) + " " + unit(running_) + " keep going";
    report_failure(r, e, tail);
    return;
  }
  if (first_failure_) return;
  first_failure_ = e;
  std::string tail;
  if (running_ == 1) tail = "; stopping the other " + unit(1);
  if (running_ > 1) tail = "; stopping the other " + std::to_string(running_) + " " + unit(running_);
  report_failure(r, e, tail);
  begin_stop();
}

void Job::report_failure(Rank& r, const Ending& e, const std::string& tail) {
  if (r.host != nullptr && r.err_fd >= 0) {
    // Its tuttirun's report may still be in the pipe: read what is there.
    pollfd p{r.err_fd, POLLIN, 0};
    while (r.err_fd >= 0 && ::poll(&p, 1, 0) > 0) {
      read_pipe(r, true);
      p.fd = r.err_fd;
    }
  }
  if (r.host != nullptr) {
    // One line naming the host, and the rank and its ending as the host's
    // tuttirun reported them (relayed above), or the child's own ending
    // when it reported none (ssh failed, tuttirun could not start, ...).
    std::string what = describe(e);
    if (!r.inner_report.empty()) {
      what = r.inner_report.substr(0, std::min(r.inner_report.find("; stopping"), r.inner_report.find("; the other")));
    }
    std::fprintf(stderr, "tuttirun: %s: %s%s\n", label(r).c_str(), what.c_str(), tail.c_str());
  } else {
    std::fprintf(stderr, "tuttirun: rank %d (pid %ld) %s%s\n", r.rank, static_cast<long>(r.pid), describe(e).c_str(),
                 tail.c_str());
  }
}

void Job::reap() {
  for (Rank& r : ranks_) {
    if (!r.running) continue;
    if (r.pid == pgid_) {
      // Peek only: the leader's zombie keeps the process group id reserved.
      siginfo_t si{};
      if (::waitid(P_PID, static_cast<id_t>(r.pid), &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == r.pid) {
        bool exited = si.si_code == CLD_EXITED;
        on_exit(r, Ending{!exited, si.si_status});
      }
      continue;
    }
    int status = 0;
    if (::waitpid(r.pid, &status, WNOHANG) == r.pid) on_exit(r, from_wait_status(status));
  }
  // Orphaned descendants handed to us as subreaper.
  if (auto kids = list_children()) {
    for (pid_t k : *kids) {
      bool is_rank = std::any_of(ranks_.begin(), ranks_.end(), [&](const Rank& r) { return r.pid == k; });
      if (!is_rank) ::waitpid(k, nullptr, WNOHANG);
    }
  }
}

void Job::on_signal(int sig) {
  if (ended_) return;
  if (interrupt_sig_ == 0 && !stopping_) {
    interrupt_sig_ = sig;
    std::fprintf(stderr, "tuttirun: received %s; forwarding it to %d running %s\n", signal_name(sig).c_str(), running_,
                 unit(running_).c_str());
    signal_group(sig);
    return;
  }
  // A second signal, or one while we are stopping the job already.
  std::fprintf(stderr, "tuttirun: received %s %s; killing all %s\n", signal_name(sig).c_str(),
               stopping_ ? "while stopping" : "again", unit(2).c_str());
  stopping_ = true;
  signal_group(SIGKILL);
  sigkilled_ = true;
}

void Job::handle_signalfd() {
  bool child = false;
  signalfd_siginfo si{};
  while (::read(sfd_, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
    if (si.ssi_signo == SIGCHLD) {
      child = true;
    } else {
      on_signal(static_cast<int>(si.ssi_signo));
    }
  }
  if (child) reap();
}

void Job::read_pipe(Rank& r, bool is_err) {
  int& fd = is_err ? r.err_fd : r.out_fd;
  LineTagger& tag = is_err ? *r.err_tag : *r.out_tag;
  char buf[65536];
  ssize_t n = ::read(fd, buf, sizeof buf);
  if (n > 0) {
    tag.feed(std::string_view(buf, static_cast<std::size_t>(n)));
    return;
  }
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  tag.finish();  // EOF or error: flush the partial line, stop watching
  ::close(fd);
  fd = -1;
}

void Job::loop() {
  std::vector<pollfd> pfds;
  std::vector<std::pair<Rank*, bool>> owners;
  for (;;) {
    Clock::time_point now = Clock::now();
    if (running_ == 0 && !ended_) {
      // Everyone is gone: descendants still holding our pipes go too.
      ended_ = true;
      signal_group(SIGKILL);
      drain_deadline_ = now + std::chrono::seconds(1);
    }
    pfds.clear();
    owners.clear();
    pfds.push_back({sfd_, POLLIN, 0});
    for (Rank& r : ranks_) {
      if (r.out_fd >= 0) {
        pfds.push_back({r.out_fd, POLLIN, 0});
        owners.emplace_back(&r, false);
      }
      if (r.err_fd >= 0) {
        pfds.push_back({r.err_fd, POLLIN, 0});
        owners.emplace_back(&r, true);
      }
    }
    if (ended_ && (owners.empty() || now >= drain_deadline_)) break;

    Clock::time_point next = Clock::time_point::max();
    if (!stopping_) next = std::min(next, job_deadline_);
    if (stopping_ && !sigkilled_) next = std::min(next, kill_deadline_);
    if (ended_) next = std::min(next, drain_deadline_);
    int timeout_ms = -1;
    if (next != Clock::time_point::max()) {
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1;
      timeout_ms = static_cast<int>(std::clamp<long long>(ms, 0, 60'000));
    }
    int rc = ::poll(pfds.data(), pfds.size(), timeout_ms);
    if (rc < 0 && errno != EINTR) {
      std::fprintf(stderr, "tuttirun: poll: %s\n", std::strerror(errno));
      begin_stop();
    }
    if (rc > 0) {
      if (pfds[0].revents != 0) handle_signalfd();
      for (std::size_t i = 1; i < pfds.size(); ++i) {
        if (pfds[i].revents != 0) read_pipe(*owners[i - 1].first, owners[i - 1].second);
      }
    }
    now = Clock::now();
    if (!stopping_ && !ended_ && now >= job_deadline_) {
      timed_out_ = true;
      std::string list;
      for (const Rank& r : ranks_) {
        if (r.running) list += (list.empty() ? "" : ", ") + (r.host ? r.host->name : std::to_string(r.rank));
      }
      std::fprintf(stderr, "tuttirun: timeout of %g s expired; %s still running: %s; stopping %s\n", cfg_.timeout_s,
                   unit(running_).c_str(), list.c_str(), running_ == 1 ? "it" : "them");
      begin_stop();
    }
    if (stopping_ && !sigkilled_ && !ended_ && now >= kill_deadline_) {
      signal_group(SIGKILL);
      sigkilled_ = true;
    }
  }
  for (Rank& r : ranks_) {
    if (r.out_tag) r.out_tag->finish();
    if (r.err_tag) r.err_tag->finish();
  }
}

void Job::final_cleanup() {
  Clock::time_point deadline = Clock::now() + std::chrono::seconds(2);
  for (;;) {
    signal_group(SIGKILL);
    std::optional<std::vector<pid_t>> kids = list_children();
    if (!kids) break;  // no /proc: the waitpid(-1) loop below does what it can
    bool others = false;
    for (pid_t k : *kids) {
      if (k == pgid_) continue;
      ::kill(k, SIGKILL);  // still our child, so the pid cannot be stale
      if (::waitpid(k, nullptr, WNOHANG) != k) others = true;
    }
    if (!others || Clock::now() >= deadline) break;
    pollfd p{sfd_, POLLIN, 0};
    ::poll(&p, 1, 20);
    signalfd_siginfo si{};
    while (::read(sfd_, &si, sizeof si) > 0) {
    }
  }
  // Finally the leader, then anything left.
  if (pgid_ > 0) ::waitpid(pgid_, nullptr, WNOHANG);
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
  if (!hosts_mode() && cfg_.nnodes == 1 && !std::getenv("TUTTI_SHM_PREFIX")) remove_job_segments(job_shm_prefix());
}

int Job::exit_code() const {
  if (timed_out_) return kExitTimeout;
  if (first_failure_) return first_failure_->exit_code();
  if (failed_after_interrupt_) return 128 + interrupt_sig_;
  return 0;
}

int Job::run() {
  if (!setup_signals()) {
    std::fprintf(stderr, "tuttirun: cannot set up signal handling: %s\n", std::strerror(errno));
    return kExitInternal;
  }
  devnull_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  stdin_is_tty_ = ::isatty(0) != 0;
  if (devnull_ < 0) {
    std::fprintf(stderr, "tuttirun: cannot open /dev/null: %s\n", std::strerror(errno));
    return kExitInternal;
  }
  if (cfg_.timeout_s > 0) {
    job_deadline_ = after_seconds(cfg_.timeout_s);
  }
  if (hosts_mode()) {
    ranks_.resize(cfg_.hosts.size());
    for (std::size_t i = 0; i < cfg_.hosts.size(); ++i) {
      ranks_[i].rank = static_cast<int>(i);
      ranks_[i].host = &cfg_.hosts[i];
    }
  } else {
    ranks_.resize(static_cast<std::size_t>(cfg_.nproc));
    const std::vector<int> allowed = cfg_.bind_cores ? allowed_cpus() : std::vector<int>{};
    for (int i = 0; i < cfg_.nproc; ++i) {
      ranks_[i].local = i;
      ranks_[i].rank = cfg_.node_rank * cfg_.nproc + i;
      ranks_[i].cpus = rank_cpus(allowed, i, cfg_.nproc);
    }
  }
  for (Rank& r : ranks_) {
    if (!spawn(r)) {
      final_cleanup();
      return launch_error_;
    }
  }
  loop();
  final_cleanup();
  if (cfg_.keep_going) {
    // Every rank's end (host's, with --hosts), in rank order.
    for (const Rank& r : ranks_) {
      if (r.host != nullptr)
        std::fprintf(stderr, "tuttirun: end: %s: %s\n", label(r).c_str(), describe(r.ending).c_str());
      else
        std::fprintf(stderr, "tuttirun: end: rank %d (pid %ld) %s\n", r.rank, static_cast<long>(r.pid),
                     describe(r.ending).c_str());
    }
  }
  int code = exit_code();
  if (failed_after_interrupt_ && !timed_out_ && !first_failure_) {
    // Die of the signal we forwarded, so that a calling shell stops too.
    int sig = interrupt_sig_;
    ::close(sfd_);
    sfd_ = -1;
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    ::sigaction(sig, &dfl, nullptr);
    ::raise(sig);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    ::sigprocmask(SIG_UNBLOCK, &one, nullptr);
  }
  return code;
}

}  // namespace

int run_job(const JobConfig& config) {
  Job job(config);
  return job.run();
}

}  // namespace tuttirun
