#include "tensors.h"

#include <algorithm>
#include <map>
#include <sstream>

namespace tutti_torch {

using tutti::DataType;
using tutti::Error;
using tutti::ErrorKind;

[[noreturn]] void invalid(const char* op, const std::string& what) {
  throw Error(ErrorKind::InvalidArgument, std::string("ProcessGroupTutti.") + op + ": " + what);
}

DataType dtype_of(const at::Tensor& t, const char* op) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return DataType::Float32;
    case at::kDouble:
      return DataType::Float64;
    case at::kHalf:
      return DataType::Float16;
    case at::kBFloat16:
      return DataType::BFloat16;
    case at::kChar:
      return DataType::Int8;
    case at::kByte:
      return DataType::UInt8;
    case at::kShort:
      return DataType::Int16;
    case at::kInt:
      return DataType::Int32;
    case at::kLong:
      return DataType::Int64;
    case at::kBool:
      return DataType::Bool;
    case at::kComplexFloat:
      return DataType::Complex64;
    case at::kComplexDouble:
      return DataType::Complex128;
    default:
      invalid(op, std::string("tensors of dtype ") + c10::toString(t.scalar_type()) + " have no tutti data type");
  }
}

std::string layout_name(const at::Tensor& t) {
  std::ostringstream o;
  o << t.layout();
  return o.str();
}

// `what` names the argument in the message ("the tensor", "output 2", ...).
void check_tensor(const at::Tensor& t, const char* op, const std::string& what) {
  if (!t.defined()) invalid(op, what + " is undefined");
  if (t.device().type() != c10::DeviceType::CPU)
    invalid(op, what + " is on device " + t.device().str() + "; tutti moves CPU tensors");
  if (t.layout() != c10::kStrided)
    invalid(op, what + " has layout " + layout_name(t) + "; tutti moves dense (strided) tensors here");
}

at::Tensor& single(std::vector<at::Tensor>& v, const char* op, const std::string& what) {
  if (v.size() != 1)
    invalid(op, "expects one tensor per process, got " + std::to_string(v.size()) +
                    " (lists of several tensors are for multi-device collectives)");
  check_tensor(v[0], op, what);
  return v[0];
}

void same_kind(const at::Tensor& a, const at::Tensor& b, const char* op, const std::string& what) {
  if (a.scalar_type() != b.scalar_type())
    invalid(op, what + " has dtype " + c10::toString(b.scalar_type()) + ", expected " + c10::toString(a.scalar_type()));
}

void same_numel(std::size_t want, const at::Tensor& b, const char* op, const std::string& what) {
  if (count_of(b) != want)
    invalid(op, what + " has " + std::to_string(b.numel()) + " elements, expected " + std::to_string(want));
}

tutti::ReduceOp reduce_op(const c10d::ReduceOp& op, const char* name) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return tutti::ReduceOpKind::Sum;
    case c10d::ReduceOp::AVG:
      return tutti::ReduceOpKind::Avg;
    case c10d::ReduceOp::PRODUCT:
      return tutti::ReduceOpKind::Product;
    case c10d::ReduceOp::MIN:
      return tutti::ReduceOpKind::Min;
    case c10d::ReduceOp::MAX:
      return tutti::ReduceOpKind::Max;
    case c10d::ReduceOp::BAND:
      return tutti::ReduceOpKind::BAnd;
    case c10d::ReduceOp::BOR:
      return tutti::ReduceOpKind::BOr;
    case c10d::ReduceOp::BXOR:
      return tutti::ReduceOpKind::BXor;
    case c10d::ReduceOp::PREMUL_SUM: {
      // PREMUL_SUM's factor travels in the op's supplement (the only
      // supplement torch has), a double or a one-element tensor.
      auto* s = dynamic_cast<c10d::PreMulSumSupplement*>(op.supplement_.get());
      if (!s) invalid(name, "PREMUL_SUM without its factor (make it with torch.distributed._make_nccl_premul_sum)");
      double f = s->double_factor;
      if (s->tensor_factor.defined()) {
        const at::Tensor& ft = s->tensor_factor;
        if (ft.numel() != 1) invalid(name, "PREMUL_SUM's factor tensor must hold one element");
        f = ft.to(c10::kCPU).to(at::kDouble).item<double>();
      }
      return tutti::ReduceOp::premul_sum(f);
    }
    default:
      invalid(name, "unknown reduce op " + std::to_string(static_cast<int>(op.op_)));
  }
}

void check_op(const tutti::ReduceOp& op, DataType dt, const char* name) {
  std::string why = tutti::reduce_op_invalid_reason(dt, op);
  if (!why.empty()) invalid(name, why);
}

std::size_t parse_bytes(const char* name, const char* v, std::size_t dflt) {
  if (!v || !*v) return dflt;
  char* end = nullptr;
  unsigned long long n = std::strtoull(v, &end, 10);
  if (end == v) throw Error(ErrorKind::InvalidArgument, std::string(name) + ": '" + v + "' is not a size");
  std::string suffix(end);
  if (suffix == "K" || suffix == "k")
    n <<= 10;
  else if (suffix == "M" || suffix == "m")
    n <<= 20;
  else if (suffix == "G" || suffix == "g")
    n <<= 30;
  else if (!suffix.empty())
    throw Error(ErrorKind::InvalidArgument, std::string(name) + ": '" + v + "' is not a size (K, M or G suffix)");
  return static_cast<std::size_t>(n);
}

// Lengths and offsets (elements) of all_to_all blocks along dimension 0.
void split_lengths(const at::Tensor& t, const std::vector<int64_t>& splits, int n, const char* what,
                   std::vector<std::size_t>& counts, std::vector<std::size_t>& displs) {
  const std::int64_t dim0 = t.dim() ? t.size(0) : 1;
  const std::int64_t row = dim0 ? t.numel() / dim0 : 1;
  counts.assign(n, 0);
  displs.assign(n, 0);
  std::int64_t each = 0;
  if (splits.empty()) {
    if (dim0 % n != 0)
      invalid("alltoall_base", std::string(what) + "'s first dimension (" + std::to_string(dim0) +
                                   ") does not split evenly among " + std::to_string(n) + " ranks");
    each = dim0 / n;
  } else {
    if (static_cast<int>(splits.size()) != n)
      invalid("alltoall_base", std::string(what) + " split sizes have " + std::to_string(splits.size()) +
                                   " entries, the group has " + std::to_string(n) + " ranks");
    std::int64_t sum = 0;
    for (auto s : splits) {
      if (s < 0) invalid("alltoall_base", std::string(what) + " split sizes must not be negative");
      sum += s;
    }
    if (sum != dim0)
      invalid("alltoall_base", std::string(what) + " split sizes add up to " + std::to_string(sum) +
                                   ", its first dimension is " + std::to_string(dim0));
  }
  std::size_t off = 0;
  for (int i = 0; i < n; ++i) {
    counts[i] = static_cast<std::size_t>(row * (splits.empty() ? each : splits[i]));
    displs[i] = off;
    off += counts[i];
  }
}

std::vector<std::pair<at::ScalarType, std::vector<std::size_t>>> by_dtype(const std::vector<at::Tensor>& ts) {
  std::vector<std::pair<at::ScalarType, std::vector<std::size_t>>> out;
  for (std::size_t j = 0; j < ts.size(); ++j) {
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& g) { return g.first == ts[j].scalar_type(); });
    if (it == out.end()) {
      out.push_back({ts[j].scalar_type(), {}});
      it = out.end() - 1;
    }
    it->second.push_back(j);
  }
  return out;
}

}  // namespace tutti_torch
