#pragma once
// OpContext: what an algorithm sees of one running operation. Ranks are
// communicator ranks; the context maps them to world ranks, builds tags and
// turns transport failures into errors that name the op, its sequence
// number, the peer and the step.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/scratch.h"
#include "transport/transport.h"
#include "tutti/types.h"

namespace tutti::detail {

struct Pending {
  RequestPtr req;
  int peer = -1;  // communicator rank
  bool is_recv = false;
  std::uint32_t step = 0;
  std::size_t bytes = 0;
};

struct OpContext {
  Transport* transport = nullptr;
  std::uint64_t comm_id = 0;
  std::uint64_t seq = 0;
  int rank = 0;
  int size = 1;
  const std::vector<int>* world = nullptr;  // comm rank -> world rank
  TimePoint deadline = TimePoint::max();
  // Non-zero: the tick (common/ticks.h) the op began at, and `deadline` is
  // not set: a shared-memory op works it out only if it has to sleep.
  std::int64_t start_tick = 0;
  std::size_t chunk_bytes = 1 << 20;
  // Rabenseifner's pipelining unit up to small_pipe_max_bytes (at most
  // chunk_bytes; see all_reduce_rabenseifner.cc). The planner sets all three
  // (common/thresholds.h).
  std::size_t small_pipe_bytes = 64 << 10;
  std::size_t small_pipe_max_bytes = 512 << 10;
  // Added to every step, so that composed algorithms (reduce-scatter then
  // all-gather) run in one op without sharing tags.
  std::uint32_t step_base = 0;
  // What the op is, for error messages: "all_reduce #17 (ring, 4096 B, float32, sum)".
  const char* op_name = "";
  const char* algo = "";
  bool shm = false;  // runs in the communicator's shared-memory segment
  std::size_t bytes = 0;
  const char* dtype_name = nullptr;
  const char* redop_name = nullptr;
  int root = -1;
  bool varying_sizes = false;  // members pass different byte counts (all_to_all_v)
  // Where the operation's record is (the communicator's flight recorder,
  // trace/), set when it starts running: algorithms reach it only through
  // set_algo, which calls record_algo(recorder, trace, name). Null for
  // contexts made elsewhere.
  void (*record_algo)(void* recorder, std::uint64_t trace, const char* algo) = nullptr;
  void* recorder = nullptr;
  std::uint64_t trace = 0;
  // The algorithm chosen as the operation runs: into `algo` and the record.
  void set_algo(const char* name);
  // The operation's signature, carried by its messages (see signature.h).
  std::uint64_t signature() const;
  mutable std::uint64_t sig_cache = 0;
  bool sign_messages = true;  // false: messages carry no signature (0)
  // The communicator's (see Scratch); contexts made elsewhere get their own.
  Scratch* scratch = nullptr;
  char* buffer(int slot, std::size_t bytes) {
    if (!scratch) {
      own_scratch = std::make_shared<Scratch>();
      scratch = own_scratch.get();
    }
    return scratch->get(slot, bytes);
  }
  std::shared_ptr<Scratch> own_scratch;

  Pending isend(int peer, std::uint32_t step, const void* buf, std::size_t len);
  Pending irecv(int peer, std::uint32_t step, void* buf, std::size_t len);
  // Waits with the op deadline; throws tutti::Error naming op, peer and step.
  void wait(const Pending& p);
  void wait_all(std::vector<Pending>& ps);
  // Aborts this communicator's requests in the transport, then throws.
  [[noreturn]] void fail(ErrorKind kind, const std::string& message);
  void send(int peer, std::uint32_t step, const void* buf, std::size_t len) { wait(isend(peer, step, buf, len)); }
  void recv(int peer, std::uint32_t step, void* buf, std::size_t len) { wait(irecv(peer, step, buf, len)); }
  // Posts both, then waits for both.
  void sendrecv(int dst, const void* sbuf, std::size_t slen, int src, void* rbuf, std::size_t rlen, std::uint32_t step);
  // "rank 3: all_reduce #17 (ring, 4096 B, ...): " prefix for error messages.
  std::string where() const;
  std::string describe() const;
};

// Splits [0, bytes) into chunks of at most chunk_bytes, aligned to elem_size.
inline std::size_t chunk_elems(std::size_t chunk_bytes, std::size_t elem_size) {
  std::size_t e = chunk_bytes / elem_size;
  return e ? e : 1;
}

}  // namespace tutti::detail
