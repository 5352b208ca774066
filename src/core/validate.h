#pragma once
// Argument checks shared by every operation. All throw InvalidArgument
// before anything is sent, with the rank, the op and the bad value.

#include <cstddef>
#include <string>

#include "common/dtype.h"
#include "tutti/error.h"
#include "tutti/types.h"

namespace tutti::detail {

struct Validator {
  int rank;
  int size;
  const char* op;

  // The checks inline; building a message out of line (they are on the
  // latency path of every call).
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(ErrorKind::InvalidArgument, "rank " + std::to_string(rank) + ": " + op + ": " + what);
  }
  std::size_t bytes(std::size_t count, DataType dtype) const {
    if (static_cast<unsigned>(dtype) >= static_cast<unsigned>(kNumDataTypes)) [[unlikely]]
      bad_dtype(dtype);
    std::size_t es = elem_size(dtype);
    if (count > (std::size_t(1) << 52) / es) [[unlikely]]
      too_large(count);
    return count * es;
  }
  void buffer(const void* p, std::size_t count, const char* name) const {
    if (!p && count) [[unlikely]]
      null_buffer(count, name);
  }
  void reduce_op(DataType dtype, const ReduceOp& op) const {
    // Sum and product suit every type: decided without building a string.
    if (static_cast<unsigned>(dtype) < static_cast<unsigned>(kNumDataTypes) &&
        (op.kind == ReduceOpKind::Sum || op.kind == ReduceOpKind::Product))
      return;
    std::string why = reduce_op_invalid_reason(dtype, op);
    if (!why.empty()) fail(why);
  }
  void root(int r) const {
    if (r < 0 || r >= size) [[unlikely]]
      bad_root(r);
  }
  [[noreturn, gnu::cold, gnu::noinline]] void bad_dtype(DataType dtype) const {
    fail("unknown data type " + std::to_string(static_cast<int>(dtype)));
  }
  [[noreturn, gnu::cold, gnu::noinline]] void too_large(std::size_t count) const {
    fail("count " + std::to_string(count) + " is too large");
  }
  [[noreturn, gnu::cold, gnu::noinline]] void null_buffer(std::size_t count, const char* name) const {
    fail(std::string(name) + " is null but count is " + std::to_string(count));
  }
  [[noreturn, gnu::cold, gnu::noinline]] void bad_root(int r) const {
    fail("root " + std::to_string(r) + " is not a rank of this communicator (size " + std::to_string(size) + ")");
  }
  void tag(int t) const {
    if (t < 0) fail("tag " + std::to_string(t) + " is negative; tags are in [0, 2^31)");
  }
  void peer(int p, bool allow_any) const {
    if (allow_any && p == -1) return;
    if (p < 0 || p >= size)
      fail("peer " + std::to_string(p) + " is not a rank of this communicator (size " + std::to_string(size) + ")");
  }
};

}  // namespace tutti::detail
