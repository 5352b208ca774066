#pragma once
// What the backend's operations share: checks of torch's arguments (each
// error names the argument), torch's dtypes and reduce ops as tutti's, and
// the staging of tensors that are not contiguous.

#include <ATen/ATen.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <utility>
#include <vector>

#include "tutti/tutti.h"

namespace tutti_torch {

// InvalidArgument: "ProcessGroupTutti.<op>: <what>".
[[noreturn]] void invalid(const char* op, const std::string& what);
tutti::DataType dtype_of(const at::Tensor& t, const char* op);
std::string layout_name(const at::Tensor& t);
// A defined, dense CPU tensor; `what` names the argument in the message
// ("the tensor", "output 2", ...).
void check_tensor(const at::Tensor& t, const char* op, const std::string& what);
// The one tensor of a per-process list, checked.
at::Tensor& single(std::vector<at::Tensor>& v, const char* op, const std::string& what);
inline std::size_t count_of(const at::Tensor& t) { return static_cast<std::size_t>(t.numel()); }
inline std::size_t bytes_of(const at::Tensor& t) { return static_cast<std::size_t>(t.numel()) * t.element_size(); }
// `b` (named `what`) has a's dtype / `want` elements.
void same_kind(const at::Tensor& a, const at::Tensor& b, const char* op, const std::string& what);
void same_numel(std::size_t want, const at::Tensor& b, const char* op, const std::string& what);
tutti::ReduceOp reduce_op(const c10d::ReduceOp& op, const char* name);
// InvalidArgument where the reduction means nothing for the dtype.
void check_op(const tutti::ReduceOp& op, tutti::DataType dt, const char* name);
// A size with an optional K, M or G suffix (an environment variable's value).
std::size_t parse_bytes(const char* name, const char* v, std::size_t dflt);
// Lengths and offsets (elements) of all_to_all blocks along dimension 0.
void split_lengths(const at::Tensor& t, const std::vector<int64_t>& splits, int n, const char* what,
                   std::vector<std::size_t>& counts, std::vector<std::size_t>& displs);

// The indices of `ts` by dtype, the dtypes in order of first appearance:
// coalesced calls run one collective per dtype.
std::vector<std::pair<at::ScalarType, std::vector<std::size_t>>> by_dtype(const std::vector<at::Tensor>& ts);

// One collective of a coalesced call: send and receive buffers, count, dtype.
struct Part {
  const void* s;
  void* r;
  std::size_t n;
  tutti::DataType dt;
};

// Contiguous stand-ins for tensors that are not, and the copies back.
struct Stage {
  std::vector<at::Tensor> keep;                         // every tensor the operation touches
  std::vector<std::pair<at::Tensor, at::Tensor>> back;  // (caller's, staging): copied after the operation

  at::Tensor in(const at::Tensor& t) {
    keep.push_back(t);
    if (t.is_contiguous()) return t;
    at::Tensor c = t.contiguous();
    keep.push_back(c);
    return c;
  }
  at::Tensor out(const at::Tensor& t) {
    keep.push_back(t);
    if (t.is_contiguous()) return t;
    at::Tensor c = at::empty(t.sizes(), t.options());
    keep.push_back(c);
    back.emplace_back(t, c);
    return c;
  }
  at::Tensor inout(const at::Tensor& t) {
    keep.push_back(t);
    if (t.is_contiguous()) return t;
    at::Tensor c = t.contiguous();
    keep.push_back(c);
    back.emplace_back(t, c);
    return c;
  }
  // Flattens `ts` (one dtype) into one new contiguous tensor.
  at::Tensor flat_in(const std::vector<at::Tensor>& ts) {
    std::int64_t total = 0;
    for (auto& t : ts) total += t.numel();
    at::Tensor f = at::empty({total}, ts.at(0).options().memory_format(std::nullopt));
    std::int64_t off = 0;
    for (auto& t : ts) {
      keep.push_back(t);
      if (t.numel()) f.narrow(0, off, t.numel()).view(t.sizes()).copy_(t);
      off += t.numel();
    }
    keep.push_back(f);
    return f;
  }
  // Copies slices of `flat` (from `offset`) into `ts` after the operation.
  void flat_back(const at::Tensor& flat, std::int64_t offset, const std::vector<at::Tensor>& ts) {
    for (auto& t : ts) {
      keep.push_back(t);
      if (t.numel()) back.emplace_back(t, flat.narrow(0, offset, t.numel()).view(t.sizes()));
      offset += t.numel();
    }
  }
  std::function<void()> after() {
    if (back.empty()) return nullptr;
    return [b = back] {
      for (auto& [user, staged] : b) user.copy_(staged);
    };
  }
};

// Sets a communicator's timeout for the calls made in its scope (inline
// operations read it when they start).
struct TimeoutScope {
  tutti::Communicator& c;
  std::chrono::milliseconds saved{0};
  bool set = false;
  TimeoutScope(tutti::Communicator& comm, std::chrono::milliseconds t) : c(comm) {
    if (t.count() > 0) {
      saved = c.timeout();
      c.set_timeout(t);
      set = true;
    }
  }
  ~TimeoutScope() {
    if (set) c.set_timeout(saved);
  }
};

}  // namespace tutti_torch
