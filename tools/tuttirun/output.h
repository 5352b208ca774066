// Output helpers of tuttirun: robust writes and per-rank line tagging.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <utility>

namespace tuttirun {

// Writes all of `data` to `fd`, retrying on EINTR and waiting on EAGAIN.
// Returns false when the descriptor refuses the data (EPIPE, EBADF, ...);
// callers drop output then, they never fail the job for it.
bool write_all(int fd, std::string_view data);

// Splits a byte stream into lines and writes each one to `fd` prefixed by
// `prefix` (e.g. "[3] "). Complete lines from one feed() go out in a single
// write(), so lines of different ranks never mix. A line longer than
// kMaxLine is broken into tagged pieces rather than buffered without bound.
class LineTagger {
 public:
  static constexpr std::size_t kMaxLine = 64 * 1024;

  LineTagger(int fd, std::string prefix);

  void feed(std::string_view data);
  // Called with every complete line (without prefix and newline) before it
  // is written; the line is dropped when it returns false.
  void set_line_filter(std::function<bool(std::string_view)> filter) { filter_ = std::move(filter); }
  // Emits a pending partial line, terminated by '\n'. Idempotent.
  void finish();

 private:
  int fd_;
  std::string prefix_;
  std::string partial_;
  std::function<bool(std::string_view)> filter_;
};

}  // namespace tuttirun
