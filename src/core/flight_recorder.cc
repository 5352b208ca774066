#include "core/flight_recorder.h"

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

std::int64_t steady_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now().time_since_epoch()).count();
}

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
    case FlightRecorder::State::Queued: return "queued";
    case FlightRecorder::State::Running: return "running";
    case FlightRecorder::State::Done: return "done";
    case FlightRecorder::State::Failed: return "failed";
    case FlightRecorder::State::Posted: return "posted";
  }
  return "?";
}

}  // namespace

FlightRecorder::Entry* FlightRecorder::find(std::uint64_t handle) {
  if (handle == 0) return nullptr;
  Entry& e = entries_[handle % entries_.size()];
  return e.handle == handle ? &e : nullptr;
}

std::uint64_t FlightRecorder::begin(const OpContext& ctx, State state) {
  if (entries_.empty()) return 0;
  const std::int64_t now = steady_us();
  std::lock_guard<std::mutex> lock(mu_);
  const std::uint64_t h = next_++;
  Entry& e = entries_[h % entries_.size()];
  e.handle = h;
  e.seq = ctx.seq;
  e.op = ctx.op_name;
  e.algo = ctx.algo;
  e.dtype = ctx.dtype_name;
  e.redop = ctx.redop_name;
  e.bytes = ctx.bytes;
  e.root = ctx.root;
  e.peer = -1;
  e.tag = -1;
  e.state = state;
  e.enqueued_us = now;
  e.started_us = state == State::Running ? now : 0;
  e.ended_us = 0;
  e.error.clear();
  e.request.reset();
  return h;
}

void FlightRecorder::running(std::uint64_t handle) {
  if (handle == 0) return;
  const std::int64_t now = steady_us();
  std::lock_guard<std::mutex> lock(mu_);
  if (Entry* e = find(handle)) {
    e->state = State::Running;
    e->started_us = now;
  }
}

void FlightRecorder::end(std::uint64_t handle, bool ok, const std::string& error) {
  if (handle == 0) return;
  const std::int64_t now = steady_us();
  std::lock_guard<std::mutex> lock(mu_);
  if (Entry* e = find(handle)) {
    e->state = ok ? State::Done : State::Failed;
    e->ended_us = now;
    if (!ok) e->error = error;
  }
}

void FlightRecorder::posted(const char* op, std::uint64_t number, int peer, int tag, std::size_t bytes,
                            const char* dtype, const std::shared_ptr<Completion>& req) {
  if (entries_.empty()) return;
  const std::int64_t now = steady_us();
  std::lock_guard<std::mutex> lock(mu_);
  const std::uint64_t h = next_++;
  Entry& e = entries_[h % entries_.size()];
  e = Entry{};
  e.handle = h;
  e.seq = number;
  e.op = op;
  e.dtype = dtype;
  e.bytes = bytes;
  e.peer = peer;
  e.tag = tag;
  e.state = State::Posted;
  e.enqueued_us = e.started_us = now;
  e.request = req;
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
  const std::uint64_t n = entries_.size();
  for (std::uint64_t h = next_ > n ? next_ - n : 1; h < next_; ++h) {
    const Entry& e = entries_[h % n];
    if (e.handle != h) continue;
    State state = e.state;
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
    os << (first ? "" : ",") << "{\"seq\":" << e.seq << ",\"op\":";
    first = false;
    json_string(os, e.op);
    if (*e.algo) {
      os << ",\"algo\":";
      json_string(os, e.algo);
    }
    os << ",\"bytes\":" << e.bytes;
    if (e.dtype) {
      os << ",\"dtype\":";
      json_string(os, e.dtype);
    }
    if (e.redop) {
      os << ",\"redop\":";
      json_string(os, e.redop);
    }
    if (e.root >= 0) os << ",\"root\":" << e.root;
    if (e.peer >= -1 && e.tag >= 0) os << ",\"peer\":" << e.peer << ",\"tag\":" << e.tag;
    os << ",\"state\":\"" << state_name(state) << "\",\"enqueued_us\":" << e.enqueued_us;
    if (e.started_us) os << ",\"started_us\":" << e.started_us;
    if (e.ended_us) os << ",\"ended_us\":" << e.ended_us;
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
  std::vector<std::weak_ptr<const TraceSource>> sources;
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

void register_trace_source(std::weak_ptr<const TraceSource> source) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!r.enabled) return;
  std::erase_if(r.sources, [](const auto& w) { return w.expired(); });
  r.sources.push_back(std::move(source));
}

std::string dump_traces(const std::string& reason) {
  Registry& r = registry();
  std::vector<std::shared_ptr<const TraceSource>> live;
  std::string path;
  std::uint64_t job;
  int rank;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    if (!r.enabled) return "";
    for (auto& w : r.sources)
      if (auto s = w.lock()) live.push_back(std::move(s));
    char name[96];
    std::snprintf(name, sizeof name, "/tutti-trace-%016llx-%d.json", static_cast<unsigned long long>(r.job_id),
                  r.world_rank);
    path = r.dir + name;
    job = r.job_id;
    rank = r.world_rank;
  }
  std::ostringstream os;
  char id[24];
  std::snprintf(id, sizeof id, "%016llx", static_cast<unsigned long long>(job));
  const auto wall = std::chrono::duration_cast<std::chrono::microseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
  os << "{\"job\":\"" << id << "\",\"world_rank\":" << rank << ",\"pid\":" << ::getpid() << ",\"reason\":";
  json_string(os, reason.c_str());
  os << ",\"steady_now_us\":" << steady_us() << ",\"wall_now_us\":" << wall << ",\"communicators\":[";
  for (std::size_t i = 0; i < live.size(); ++i) os << (i ? "," : "") << live[i]->trace_json();
  os << "]}\n";
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
