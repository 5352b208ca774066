#include "tutti/types.h"

#include <cmath>

#include "tutti/error.h"
#include "tutti/version.h"

namespace tutti {

const char* version() { return TUTTI_VERSION_STRING; }

std::size_t dtype_size(DataType t) {
  switch (t) {
    case DataType::Int8:
    case DataType::UInt8:
    case DataType::Bool:
      return 1;
    case DataType::Int16:
    case DataType::Float16:
    case DataType::BFloat16:
      return 2;
    case DataType::Int32:
    case DataType::UInt32:
    case DataType::Float32:
      return 4;
    case DataType::Int64:
    case DataType::UInt64:
    case DataType::Float64:
    case DataType::Complex64:
      return 8;
    case DataType::Complex128:
      return 16;
  }
  throw Error(ErrorKind::InvalidArgument, "unknown data type " + std::to_string(static_cast<int>(t)));
}

const char* dtype_name(DataType t) {
  switch (t) {
    case DataType::Int8:
      return "int8";
    case DataType::UInt8:
      return "uint8";
    case DataType::Int16:
      return "int16";
    case DataType::Int32:
      return "int32";
    case DataType::UInt32:
      return "uint32";
    case DataType::Int64:
      return "int64";
    case DataType::UInt64:
      return "uint64";
    case DataType::Float16:
      return "float16";
    case DataType::BFloat16:
      return "bfloat16";
    case DataType::Float32:
      return "float32";
    case DataType::Float64:
      return "float64";
    case DataType::Bool:
      return "bool";
    case DataType::Complex64:
      return "complex64";
    case DataType::Complex128:
      return "complex128";
  }
  return "unknown";
}

bool dtype_is_floating(DataType t) {
  return t == DataType::Float16 || t == DataType::BFloat16 || t == DataType::Float32 || t == DataType::Float64;
}
bool dtype_is_complex(DataType t) { return t == DataType::Complex64 || t == DataType::Complex128; }
bool dtype_is_integer(DataType t) {
  switch (t) {
    case DataType::Int8:
    case DataType::UInt8:
    case DataType::Int16:
    case DataType::Int32:
    case DataType::UInt32:
    case DataType::Int64:
    case DataType::UInt64:
      return true;
    default:
      return false;
  }
}

const char* reduce_op_name(ReduceOpKind k) {
  switch (k) {
    case ReduceOpKind::Sum:
      return "sum";
    case ReduceOpKind::Product:
      return "product";
    case ReduceOpKind::Min:
      return "min";
    case ReduceOpKind::Max:
      return "max";
    case ReduceOpKind::Avg:
      return "avg";
    case ReduceOpKind::BAnd:
      return "band";
    case ReduceOpKind::BOr:
      return "bor";
    case ReduceOpKind::BXor:
      return "bxor";
    case ReduceOpKind::PremulSum:
      return "premul_sum";
  }
  return "unknown";
}

std::string reduce_op_invalid_reason(DataType t, const ReduceOp& op) {
  if (static_cast<unsigned>(t) >= static_cast<unsigned>(kNumDataTypes)) return "unknown data type";
  if (static_cast<unsigned>(op.kind) >= static_cast<unsigned>(kNumReduceOps)) return "unknown reduce op";
  // Called on every reduction: decide first, build text only for a refusal.
  auto pair = [&] { return std::string(reduce_op_name(op.kind)) + " on " + dtype_name(t); };
  const bool bitwise = op.kind == ReduceOpKind::BAnd || op.kind == ReduceOpKind::BOr || op.kind == ReduceOpKind::BXor;
  if (bitwise && (dtype_is_floating(t) || dtype_is_complex(t)))
    return pair() + " is meaningless: bitwise ops need an integer or bool type";
  if ((op.kind == ReduceOpKind::Min || op.kind == ReduceOpKind::Max) && dtype_is_complex(t))
    return pair() + " is meaningless: complex numbers are not ordered";
  if ((op.kind == ReduceOpKind::Avg || op.kind == ReduceOpKind::PremulSum) && t == DataType::Bool)
    return pair() + " is meaningless: bool has no arithmetic";
  if (op.kind == ReduceOpKind::PremulSum) {
    if (!std::isfinite(op.scalar)) return pair() + " needs a finite scalar";
    if (dtype_is_integer(t) && op.scalar != std::floor(op.scalar))
      return pair() + " needs an integral scalar, got " + std::to_string(op.scalar);
  }
  return std::string();
}

const char* error_kind_name(ErrorKind k) {
  switch (k) {
    case ErrorKind::InvalidArgument:
      return "InvalidArgument";
    case ErrorKind::Timeout:
      return "Timeout";
    case ErrorKind::PeerLost:
      return "PeerLost";
    case ErrorKind::Mismatch:
      return "Mismatch";
    case ErrorKind::Aborted:
      return "Aborted";
    case ErrorKind::Internal:
      return "Internal";
    case ErrorKind::Unauthenticated:
      return "Unauthenticated";
    case ErrorKind::Revoked:
      return "Revoked";
  }
  return "Unknown";
}

}  // namespace tutti
