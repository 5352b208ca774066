#pragma once
// One check per collective form: every rank builds every rank's random input
// from shared seeds, runs the op, and compares every element of its output
// with a reference it computes itself (exact for integers; for floats within
// what the order of summation allows). Buffers the op must not touch are
// checked too.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/reference.h"
#include "harness/spawn.h"
#include "tutti/communicator.h"

namespace tutti::testing {

// The dtypes a sweep runs under the sanitizers (scripts/test.sh's second
// stage). Under ASan and UBSan one of each element size (1, 2, 4, 8 and 16
// bytes): slots, rounds and chunks depend on sizes, not on the type. Under
// TSan, which checks one rank's threads and not the kernels, two sizes
// (Float32 and Int8; spawn.h, kThreadSanitized).
inline bool swept_when_sanitized(DataType dt) {
  if (kThreadSanitized) return dt == DataType::Float32 || dt == DataType::Int8;
  return dt == DataType::Float32 || dt == DataType::Int8 || dt == DataType::BFloat16 || dt == DataType::Complex64 ||
         dt == DataType::Complex128;
}

using Buf = std::vector<char>;

struct CaseInfo {
  std::uint64_t id;  // distinct per case; seeds the data
  DataType dtype;
  std::size_t count;
  bool inplace = false;
  bool async = false;
  bool list_form = false;
  int root = 0;
  ReduceOp op;
  // all_reduce and reduce: run the operation in these buffers (each of
  // shared_bytes, from Communicator::alloc_shared) instead of the heap, the
  // data copied in before and out after, when set.
  char* shared[2] = {nullptr, nullptr};
  std::size_t shared_bytes = 0;
  bool shared_send_only = false;  // the receive buffer stays on the heap
  std::string describe(const char* coll, int rank) const;
};

// Random input of `rank` for case `c` (count elements, or `count_override`).
Buf input_of(const CaseInfo& c, int rank, std::size_t salt = 0, std::size_t count_override = ~std::size_t(0));

void check_all_reduce(Communicator& comm, const CaseInfo& c);
void check_reduce(Communicator& comm, const CaseInfo& c);
void check_broadcast(Communicator& comm, const CaseInfo& c);
void check_gather(Communicator& comm, const CaseInfo& c);
void check_all_gather(Communicator& comm, const CaseInfo& c);
void check_scatter(Communicator& comm, const CaseInfo& c);
void check_reduce_scatter(Communicator& comm, const CaseInfo& c);
void check_all_to_all(Communicator& comm, const CaseInfo& c);
void check_all_to_all_v(Communicator& comm, const CaseInfo& c);

// The algorithm the flight recorder names for every operation `op` in a
// Communicator::trace_json(), oldest first ("?" where an entry names none).
std::vector<std::string> algorithms_in_trace(const std::string& js, const std::string& op);

// Runs every collective form over every dtype, valid reduce op, root and the
// given counts (per dtype: counts_for(dtype)). Returns the number of cases.
std::size_t run_collective_sweep(Communicator& comm,
                                 const std::function<std::vector<std::size_t>(DataType)>& counts_for,
                                 std::uint64_t id_base);

}  // namespace tutti::testing
