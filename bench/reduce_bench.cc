// Reduction kernel throughput against memcpy, at an L2-sized (64 KiB) and a
// memory-sized (8 MiB) buffer. Bytes/s counts the bytes of one input, so a
// kernel matching memcpy's number moves 1.5x memcpy's traffic (read dst and
// src, write dst vs read src, write dst).
//
// Args: {bytes, simd}: simd=0 forces the portable loops.

#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "reduce/reduce.h"
#include "tutti/types.h"

namespace {

using tutti::DataType;
using tutti::ReduceOpKind;

void fill(std::vector<unsigned char>& v, DataType t) {
  // Small finite values in every format: 1.0-ish floats, halves, bfloat16s.
  const std::size_t n = v.size() / tutti::dtype_size(t);
  for (std::size_t i = 0; i < n; ++i) {
    switch (t) {
      case DataType::Float32: {
        const float f = 1.0f + static_cast<float>(i % 7) / 8;
        std::memcpy(&v[i * 4], &f, 4);
        break;
      }
      case DataType::Float16: {
        const std::uint16_t h = tutti::detail::float_to_half(1.0f + static_cast<float>(i % 7) / 8);
        std::memcpy(&v[i * 2], &h, 2);
        break;
      }
      case DataType::BFloat16: {
        const std::uint16_t b = tutti::detail::float_to_bfloat16(1.0f + static_cast<float>(i % 7) / 8);
        std::memcpy(&v[i * 2], &b, 2);
        break;
      }
      default: break;
    }
  }
}

void BM_ReduceSum(benchmark::State& state, DataType t) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  tutti::detail::set_reduce_simd_allowed(state.range(1) != 0);
  std::vector<unsigned char> dst(bytes), src(bytes);
  fill(dst, t);
  fill(src, t);
  const std::size_t count = bytes / tutti::dtype_size(t);
  for (auto _ : state) {
    // dst grows (float16 reaches inf eventually); SSE/AVX arithmetic runs
    // at the same speed on inf, and there are no subnormals on the way.
    tutti::detail::reduce_inplace(dst.data(), src.data(), count, t, ReduceOpKind::Sum);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  tutti::detail::set_reduce_simd_allowed(true);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
}

void BM_Memcpy(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  std::vector<unsigned char> dst(bytes, 1), src(bytes, 2);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
}

void sizes(benchmark::internal::Benchmark* b) {
  for (int64_t bytes : {int64_t{64} << 10, int64_t{8} << 20})
    for (int64_t simd : {0, 1}) b->Args({bytes, simd});
}

BENCHMARK_CAPTURE(BM_ReduceSum, float32, DataType::Float32)->Apply(sizes);
BENCHMARK_CAPTURE(BM_ReduceSum, bfloat16, DataType::BFloat16)->Apply(sizes);
BENCHMARK_CAPTURE(BM_ReduceSum, float16, DataType::Float16)->Apply(sizes);
BENCHMARK(BM_Memcpy)->Arg(int64_t{64} << 10)->Arg(int64_t{8} << 20);

}  // namespace

BENCHMARK_MAIN();
