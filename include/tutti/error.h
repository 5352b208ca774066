#pragma once
// The one exception family of tutti.

#include <stdexcept>
#include <string>

// What the public headers declare is libtutti.so's interface: exported,
// while everything else in the library is hidden (-fvisibility=hidden).
#pragma GCC visibility push(default)

namespace tutti {

enum class ErrorKind {
  InvalidArgument,  // the caller passed something meaningless; nothing was sent
  Timeout,          // a deadline passed before the operation could complete
  PeerLost,         // a peer's connection closed or failed
  Mismatch,         // ranks disagree on an operation (kind, size, type, root)
  Aborted,          // the communicator was aborted earlier; carries the root cause
  Internal,         // a broken invariant inside tutti: a bug, please report it
  Unauthenticated,  // the other side of a connection does not hold this job's secret
  Revoked,          // a member revoked the communicator (Communicator::revoke)
};

const char* error_kind_name(ErrorKind k);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message)
      : std::runtime_error(std::string(error_kind_name(kind)) + ": " + message), kind_(kind), message_(message) {}
  ErrorKind kind() const noexcept { return kind_; }
  // The message without the "Kind: " prefix that what() carries.
  const std::string& message() const noexcept { return message_; }

 private:
  ErrorKind kind_;
  std::string message_;
};

}  // namespace tutti

#pragma GCC visibility pop
