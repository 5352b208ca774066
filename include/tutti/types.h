#pragma once
// Element types and reduction operators of tutti's public API.

#include <complex>
#include <cstddef>
#include <cstdint>
#include <string>

// What the public headers declare is libtutti.so's interface: exported,
// while everything else in the library is hidden (-fvisibility=hidden).
#pragma GCC visibility push(default)

namespace tutti {

// 16-bit floating-point storage types. They are plain bit containers: tutti
// converts them to float32 for arithmetic (round-to-nearest-even on the way
// back), so user code may store IEEE half / bfloat16 bits produced elsewhere.
struct float16_t {
  std::uint16_t bits;
};
struct bfloat16_t {
  std::uint16_t bits;
};

enum class DataType : std::uint8_t {
  Int8,
  UInt8,
  Int16,
  Int32,
  UInt32,
  Int64,
  UInt64,
  Float16,
  BFloat16,
  Float32,
  Float64,
  Bool,
  Complex64,
  Complex128,
};
inline constexpr int kNumDataTypes = 14;

// Size in bytes of one element.
std::size_t dtype_size(DataType t);
// Lower-case name ("float32", "bfloat16", ...).
const char* dtype_name(DataType t);
bool dtype_is_floating(DataType t);  // float16, bfloat16, float32, float64
bool dtype_is_complex(DataType t);
bool dtype_is_integer(DataType t);  // signed and unsigned integers, not bool

template <class T>
struct dtype_of;
template <>
struct dtype_of<std::int8_t> {
  static constexpr DataType value = DataType::Int8;
};
template <>
struct dtype_of<std::uint8_t> {
  static constexpr DataType value = DataType::UInt8;
};
template <>
struct dtype_of<std::int16_t> {
  static constexpr DataType value = DataType::Int16;
};
template <>
struct dtype_of<std::int32_t> {
  static constexpr DataType value = DataType::Int32;
};
template <>
struct dtype_of<std::uint32_t> {
  static constexpr DataType value = DataType::UInt32;
};
template <>
struct dtype_of<std::int64_t> {
  static constexpr DataType value = DataType::Int64;
};
template <>
struct dtype_of<std::uint64_t> {
  static constexpr DataType value = DataType::UInt64;
};
template <>
struct dtype_of<float16_t> {
  static constexpr DataType value = DataType::Float16;
};
template <>
struct dtype_of<bfloat16_t> {
  static constexpr DataType value = DataType::BFloat16;
};
template <>
struct dtype_of<float> {
  static constexpr DataType value = DataType::Float32;
};
template <>
struct dtype_of<double> {
  static constexpr DataType value = DataType::Float64;
};
template <>
struct dtype_of<bool> {
  static constexpr DataType value = DataType::Bool;
};
template <>
struct dtype_of<std::complex<float>> {
  static constexpr DataType value = DataType::Complex64;
};
template <>
struct dtype_of<std::complex<double>> {
  static constexpr DataType value = DataType::Complex128;
};
template <class T>
inline constexpr DataType dtype_of_v = dtype_of<T>::value;

enum class ReduceOpKind : std::uint8_t {
  Sum,
  Product,
  Min,
  Max,
  Avg,  // sum divided by the number of ranks (integer types: truncating division)
  BAnd,
  BOr,
  BXor,
  PremulSum,  // each rank's input multiplied by `scalar`, then summed
};
inline constexpr int kNumReduceOps = 9;
const char* reduce_op_name(ReduceOpKind k);

// A reduction operator; PremulSum carries its scalar. Implicitly built from a
// kind so that `ReduceOpKind::Sum` can be passed where a ReduceOp is expected.
struct ReduceOp {
  ReduceOpKind kind = ReduceOpKind::Sum;
  double scalar = 1.0;

  ReduceOp() = default;
  ReduceOp(ReduceOpKind k) : kind(k) {}  // NOLINT(google-explicit-constructor)
  static ReduceOp premul_sum(double s) {
    ReduceOp op(ReduceOpKind::PremulSum);
    op.scalar = s;
    return op;
  }
  static constexpr ReduceOpKind SUM = ReduceOpKind::Sum;
  static constexpr ReduceOpKind PRODUCT = ReduceOpKind::Product;
  static constexpr ReduceOpKind MIN = ReduceOpKind::Min;
  static constexpr ReduceOpKind MAX = ReduceOpKind::Max;
  static constexpr ReduceOpKind AVG = ReduceOpKind::Avg;
  static constexpr ReduceOpKind BAND = ReduceOpKind::BAnd;
  static constexpr ReduceOpKind BOR = ReduceOpKind::BOr;
  static constexpr ReduceOpKind BXOR = ReduceOpKind::BXor;
};

// Whether `op` means something for `t`. Bitwise ops need integer or bool
// types; Min/Max are undefined on complex numbers; Avg and PremulSum need a
// numeric (non-bool) type, and PremulSum on integer types needs an integral
// scalar. Returns an empty string when valid, otherwise the reason.
std::string reduce_op_invalid_reason(DataType t, const ReduceOp& op);

}  // namespace tutti

#pragma GCC visibility pop
