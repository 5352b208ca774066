#include "trace/flight_recorder.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>
#include <thread>

#include "algorithms/context.h"
#include "common/log.h"

namespace tutti::detail {

namespace {

void json_string(std::ostringstream& os, const char* s) {
  os << '"';
  for (; *s; ++s) {
    const unsigned char c = static_cast<unsigned char>(*s);
    if (c == '"' || c == '\\') {
      os << '\\' << *s;
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      os << buf;
    } else {
      os << *s;
    }
  }
  os << '"';
}

const char* state_name(FlightRecorder::State s) {
  switch (s) {
    case FlightRecorder::State::Queued:
      return "queued";
    case FlightRecorder::State::Running:
      return "running";
    case FlightRecorder::State::Done:
      return "done";
    case FlightRecorder::State::Failed:
      return "failed";
    case FlightRecorder::State::Posted:
      return "posted";
  }
  return "?";
}

}  // namespace

FlightRecorder::Entry& FlightRecorder::claim() {
  const std::uint64_t h = next_.load(std::memory_order_relaxed);
  next_.store(h + 1, std::memory_order_relaxed);
  Entry& e = entries_[h % entries_.size()];
  e.handle.store(0, std::memory_order_relaxed);  // a concurrent dump skips it while it changes
  return e;
}

std::uint64_t FlightRecorder::begin(const OpContext& ctx, State state, std::int64_t now) {
  if (entries_.empty()) return 0;
  if (now == 0) now = ticks();
  const std::uint64_t h = next_.load(std::memory_order_relaxed);
  Entry& e = claim();
  e.seq.store(ctx.seq, std::memory_order_relaxed);
  e.op.store(ctx.op_name, std::memory_order_relaxed);
  e.algo.store(ctx.algo, std::memory_order_relaxed);
  e.dtype.store(ctx.dtype_name, std::memory_order_relaxed);
  e.redop.store(ctx.redop_name, std::memory_order_relaxed);
  e.bytes.store(ctx.bytes, std::memory_order_relaxed);
  e.root.store(ctx.root, std::memory_order_relaxed);
  e.peer.store(-1, std::memory_order_relaxed);
  e.tag.store(-1, std::memory_order_relaxed);
  e.state.store(state, std::memory_order_relaxed);
  e.enqueued.store(now, std::memory_order_relaxed);
  e.started.store(state == State::Running ? now : 0, std::memory_order_relaxed);
  e.ended.store(0, std::memory_order_relaxed);
  e.handle.store(h, std::memory_order_release);
  return h;
}

void FlightRecorder::running(std::uint64_t handle) {
  if (Entry* e = find(handle)) {
    e->started.store(ticks(), std::memory_order_relaxed);
    e->state.store(State::Running, std::memory_order_release);
  }
}

void FlightRecorder::end(std::uint64_t handle, bool ok, const std::string& error) {
  if (Entry* e = find(handle)) {
    e->ended.store(ticks(), std::memory_order_relaxed);
    if (!ok) {
      std::lock_guard<std::mutex> lock(mu_);
      e->error = error;
    }
    e->state.store(ok ? State::Done : State::Failed, std::memory_order_release);
  }
}

void FlightRecorder::posted(const char* op, std::uint64_t number, int peer, int tag, std::size_t bytes,
                            const char* dtype, const std::shared_ptr<Completion>& req) {
  if (entries_.empty()) return;
  const std::int64_t now = ticks();
  const std::uint64_t h = next_.load(std::memory_order_relaxed);
  Entry& e = claim();
  e.seq.store(number, std::memory_order_relaxed);
  e.op.store(op, std::memory_order_relaxed);
  e.algo.store("", std::memory_order_relaxed);
  e.dtype.store(dtype, std::memory_order_relaxed);
  e.redop.store(nullptr, std::memory_order_relaxed);
  e.bytes.store(bytes, std::memory_order_relaxed);
  e.root.store(-1, std::memory_order_relaxed);
  e.peer.store(peer, std::memory_order_relaxed);
  e.tag.store(tag, std::memory_order_relaxed);
  e.state.store(State::Posted, std::memory_order_relaxed);
  e.enqueued.store(now, std::memory_order_relaxed);
  e.started.store(now, std::memory_order_relaxed);
  e.ended.store(0, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    e.request = req;
  }
  e.handle.store(h, std::memory_order_release);
}

std::string FlightRecorder::json(std::uint64_t comm_id, int rank, int size, const std::vector<int>& world) const {
  std::ostringstream os;
  char id[24];
  std::snprintf(id, sizeof id, "%016llx", static_cast<unsigned long long>(comm_id));
  os << "{\"id\":\"" << id << "\",\"rank\":" << rank << ",\"size\":" << size << ",\"world_ranks\":[";
  for (std::size_t i = 0; i < world.size(); ++i) os << (i ? "," : "") << world[i];
  os << "],\"ops\":[";
  std::lock_guard<std::mutex> lock(mu_);
  bool first = true;
  const std::uint64_t n = entries_.size(), next = next_.load(std::memory_order_acquire);
  for (std::uint64_t h = next > n ? next - n : 1; h < next; ++h) {
    const Entry& e = entries_[h % n];
    if (e.handle.load(std::memory_order_acquire) != h) continue;
    State state = e.state.load(std::memory_order_acquire);
    std::string error = e.error;
    if (state == State::Posted) {
      if (auto req = e.request.lock()) {
        if (req->done()) {
          state = req->ok() ? State::Done : State::Failed;
          if (!req->ok()) error = req->error_message();
        }
      } else {
        state = State::Done;  // nobody holds it any more: waited for, or dropped
      }
    }
    const char* algo = e.algo.load(std::memory_order_relaxed);
    const char* dtype = e.dtype.load(std::memory_order_relaxed);
    const char* redop = e.redop.load(std::memory_order_relaxed);
    const int root = e.root.load(std::memory_order_relaxed), tag = e.tag.load(std::memory_order_relaxed);
    const std::int64_t started = e.started.load(std::memory_order_relaxed);
    const std::int64_t ended = e.ended.load(std::memory_order_relaxed);
    os << (first ? "" : ",") << "{\"seq\":" << e.seq.load(std::memory_order_relaxed) << ",\"op\":";
    first = false;
    json_string(os, e.op.load(std::memory_order_relaxed));
    if (*algo) {
      os << ",\"algo\":";
      json_string(os, algo);
    }
    os << ",\"bytes\":" << e.bytes.load(std::memory_order_relaxed);
    if (dtype) {
      os << ",\"dtype\":";
      json_string(os, dtype);
    }
    if (redop) {
      os << ",\"redop\":";
      json_string(os, redop);
    }
    if (root >= 0) os << ",\"root\":" << root;
    if (tag >= 0) os << ",\"peer\":" << e.peer.load(std::memory_order_relaxed) << ",\"tag\":" << tag;
    os << ",\"state\":\"" << state_name(state)
       << "\",\"enqueued_us\":" << ticks_to_steady_us(e.enqueued.load(std::memory_order_relaxed));
    if (started) os << ",\"started_us\":" << ticks_to_steady_us(started);
    if (ended) os << ",\"ended_us\":" << ticks_to_steady_us(ended);
    if (!error.empty()) {
      os << ",\"error\":";
      json_string(os, error.c_str());
    }
    os << "}";
  }
  os << "]}";
  return os.str();
}

// ---- the process-wide registry and the dump ------------------------------------

namespace {

struct Registry {
  std::mutex mu;
  bool configured = false;
  bool enabled = false;
  std::uint64_t job_id = 0;
  int world_rank = -1;
  std::string dir;
  std::vector<const TraceSource*> sources;
  int pipe_w = -1;  // SIGUSR1 -> dump thread
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: the dump thread may outlive main
  return *r;
}

void on_sigusr1(int) {
  const int fd = registry().pipe_w;
  if (fd >= 0) {
    const char c = 1;
    [[maybe_unused]] ssize_t n = ::write(fd, &c, 1);
  }
}

}  // namespace

void configure_traces(std::uint64_t job_id, int world_rank, const std::string& dir, bool enabled) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.configured) return;
  r.configured = true;
  ticks_to_steady_us(ticks());  // fixes the origin of the tick conversion now
  r.enabled = enabled;
  r.job_id = job_id;
  r.world_rank = world_rank;
  r.dir = dir;
  if (!enabled) return;
  struct sigaction old {};
  if (::sigaction(SIGUSR1, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) return;  // someone else's
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return;
  r.pipe_w = fds[1];
  std::thread([fd = fds[0]] {
    char c;
    while (::read(fd, &c, 1) == 1) dump_traces("SIGUSR1");
  }).detach();
  struct sigaction sa {};
  sa.sa_handler = on_sigusr1;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGUSR1, &sa, nullptr);
}

void register_trace_source(const TraceSource* source) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.enabled) r.sources.push_back(source);
}

void unregister_trace_source(const TraceSource* source) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::erase(r.sources, source);
}

std::string dump_traces(const std::string& reason) {
  Registry& r = registry();
  // One dump at a time per process: two threads (an error, SIGUSR1,
  // dump_trace()) must not write the same file together.
  static std::mutex* writing = new std::mutex;
  std::lock_guard<std::mutex> one_at_a_time(*writing);
  std::ostringstream os;
  std::string path;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    if (!r.enabled) return "";
    char name[96];
    std::snprintf(name, sizeof name, "/tutti-trace-%016llx-%d.json", static_cast<unsigned long long>(r.job_id),
                  r.world_rank);
    path = r.dir + name;
    char id[24];
    std::snprintf(id, sizeof id, "%016llx", static_cast<unsigned long long>(r.job_id));
    const auto wall =
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count();
    os << "{\"job\":\"" << id << "\",\"world_rank\":" << r.world_rank << ",\"pid\":" << ::getpid() << ",\"reason\":";
    json_string(os, reason.c_str());
    os << ",\"steady_now_us\":" << steady_us() << ",\"wall_now_us\":" << wall << ",\"communicators\":[";
    for (std::size_t k = 0; k < r.sources.size(); ++k) os << (k ? "," : "") << r.sources[k]->trace_json();
    os << "]}\n";
  }
  // Written aside and renamed, so a reader never sees half a dump.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << os.str();
    if (!f.good()) {
      TUTTI_LOG(Warn, "cannot write the flight recorder to " << tmp);
      return "";
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return "";
  TUTTI_LOG(Info, "flight recorder written to " << path << " (" << reason << ")");
  return path;
}

}  // namespace tutti::detail
