#pragma once
// dtype_size() for the library's own hot paths: a table lookup the compiler
// can inline. Only for types already validated (Validator::bytes checks).

#include <cstddef>

#include "tutti/types.h"

namespace tutti::detail {

inline std::size_t elem_size(DataType t) {
  // In the order of DataType's enumerators (a unit test compares every one
  // with dtype_size).
  static constexpr unsigned char kSizes[kNumDataTypes] = {1, 1, 2, 4, 4, 8, 8, 2, 2, 4, 8, 1, 8, 16};
  return kSizes[static_cast<unsigned>(t)];
}

}  // namespace tutti::detail
