#include "output.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

namespace tuttirun {

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n > 0) {
      data.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      // Our stdout was left non-blocking by someone else: wait until it drains.
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, 1000) < 0 && errno != EINTR) return false;
      continue;
    }
    return false;
  }
  return true;
}

LineTagger::LineTagger(int fd, std::string prefix) : fd_(fd), prefix_(std::move(prefix)) {}

void LineTagger::feed(std::string_view data) {
  std::string out;
  while (!data.empty()) {
    std::size_t nl = data.find('\n');
    if (nl == std::string_view::npos) {
      partial_.append(data);
      break;
    }
    const std::size_t line_start = out.size();
    out += prefix_;
    out += partial_;
    out.append(data.substr(0, nl + 1));
    if (filter_ && !filter_(std::string_view(out).substr(line_start + prefix_.size(),
                                                         out.size() - 1 - line_start - prefix_.size()))) {
      out.resize(line_start);
    }
    partial_.clear();
    data.remove_prefix(nl + 1);
  }
  while (partial_.size() >= kMaxLine) {
    out += prefix_;
    out.append(partial_, 0, kMaxLine);
    out += '\n';
    partial_.erase(0, kMaxLine);
  }
  if (!out.empty()) write_all(fd_, out);
}

void LineTagger::finish() {
  if (partial_.empty()) return;
  std::string out = prefix_ + partial_ + '\n';
  const bool keep = !filter_ || filter_(partial_);
  partial_.clear();
  if (keep) write_all(fd_, out);
}

}  // namespace tuttirun
