// Reduction kernel throughput against memcpy, at an L2-sized (64 KiB), a
// last-level-cache-or-memory (8 MiB) and a memory-sized (64 MiB) buffer, for
// each SIMD level of the kernels this CPU has (baseline, avx2, avx512).
//
// Byte convention, the same for every benchmark here, memcpy included:
// bytes/s counts the buffer bytes once per iteration (the bytes of one
// input), not the bytes moved. memcpy moves 2x that (read src, write dst),
// reduce_inplace 3x (read dst, read src, write dst); so a kernel whose
// number is 2/3 of memcpy's uses the same memory bandwidth as memcpy, and
// one matching memcpy's number moves 1.5x memcpy's traffic.
//
// Names: memcpy/<size> and <dtype>_<op>/<level>/<size>. Levels the CPU
// lacks are not registered.

#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "reduce/reduce.h"
#include "tutti/types.h"

namespace {

using tutti::DataType;
using tutti::ReduceOpKind;
using tutti::detail::ReduceSimdLevel;

// Two buffers of the largest size, shared by every benchmark (allocating
// and filling 2 x 64 MiB per benchmark run would dominate a short run).
// They are refilled whenever the dtype or size changes. Both start on a
// 64-byte boundary (like framework tensors), so that neither 256- nor
// 512-bit accesses split cache lines more than the other.
struct Buffers {
  std::vector<unsigned char> dst_storage, src_storage;
  unsigned char* dst = nullptr;
  unsigned char* src = nullptr;
  std::size_t capacity = 0;
  DataType dtype = DataType::Bool;  // nothing filled yet
  std::size_t bytes = 0;
};

unsigned char* align64(std::vector<unsigned char>& v) {
  const auto p = reinterpret_cast<std::uintptr_t>(v.data());
  return v.data() + ((64 - p % 64) % 64);
}

Buffers& buffers() {
  static Buffers b;
  return b;
}

// Small finite values in every format: 1.0-ish floats, halves, bfloat16s,
// tiled from one period of 7 elements.
void fill(unsigned char* p, std::size_t bytes, DataType t) {
  const std::size_t elem = tutti::dtype_size(t);
  unsigned char period[7 * 4];
  for (int i = 0; i < 7; ++i) {
    const float f = 1.0f + static_cast<float>(i) / 8;
    if (t == DataType::Float32) {
      std::memcpy(period + 4 * i, &f, 4);
    } else {
      const std::uint16_t h =
          t == DataType::Float16 ? tutti::detail::float_to_half(f) : tutti::detail::float_to_bfloat16(f);
      std::memcpy(period + 2 * i, &h, 2);
    }
  }
  const std::size_t step = 7 * elem;
  std::size_t off = 0;
  for (; off + step <= bytes; off += step) std::memcpy(p + off, period, step);
  std::memcpy(p + off, period, bytes - off);
}

void prepare(DataType t, std::size_t bytes) {
  Buffers& b = buffers();
  if (b.capacity < bytes) {
    b.dst_storage.assign(bytes + 64, 0);
    b.src_storage.assign(bytes + 64, 0);
    b.dst = align64(b.dst_storage);
    b.src = align64(b.src_storage);
    b.capacity = bytes;
    b.bytes = 0;
  }
  if (b.dtype != t || b.bytes != bytes) {
    fill(b.dst, bytes, t);
    fill(b.src, bytes, t);
    b.dtype = t;
    b.bytes = bytes;
  }
}

void BM_Reduce(benchmark::State& state, DataType t, ReduceOpKind op, ReduceSimdLevel level, std::size_t bytes) {
  prepare(t, bytes);
  Buffers& b = buffers();
  tutti::detail::set_reduce_simd_max_level(level);
  if (tutti::detail::reduce_simd_level() != level) {
    state.SkipWithError("SIMD level not supported");
    tutti::detail::set_reduce_simd_allowed(true);
    return;
  }
  const std::size_t count = bytes / tutti::dtype_size(t);
  for (auto _ : state) {
    // Sums grow (float16 reaches inf eventually); SSE/AVX arithmetic runs
    // at the same speed on inf, and there are no subnormals on the way.
    tutti::detail::reduce_inplace(b.dst, b.src, count, t, op);
    benchmark::DoNotOptimize(b.dst);
    benchmark::ClobberMemory();
  }
  tutti::detail::set_reduce_simd_allowed(true);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
}

void BM_Memcpy(benchmark::State& state, std::size_t bytes) {
  Buffers& b = buffers();
  if (b.capacity < bytes) prepare(DataType::Float32, bytes);
  for (auto _ : state) {
    std::memcpy(b.dst, b.src, bytes);
    benchmark::DoNotOptimize(b.dst);
    benchmark::ClobberMemory();
  }
  // memcpy leaves dst == src: make the next reduction benchmark refill.
  b.bytes = 0;
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
}

std::string size_name(std::size_t bytes) {
  return bytes >= (std::size_t{1} << 20) ? std::to_string(bytes >> 20) + "MiB" : std::to_string(bytes >> 10) + "KiB";
}

void register_all() {
  struct Kernel {
    const char* name;
    DataType dtype;
    ReduceOpKind op;
  };
  const Kernel kernels[] = {
      {"float32_sum", DataType::Float32, ReduceOpKind::Sum},
      {"float32_max", DataType::Float32, ReduceOpKind::Max},
      {"bfloat16_sum", DataType::BFloat16, ReduceOpKind::Sum},
      {"float16_sum", DataType::Float16, ReduceOpKind::Sum},
  };
  const ReduceSimdLevel levels[] = {ReduceSimdLevel::Baseline, ReduceSimdLevel::Avx2, ReduceSimdLevel::Avx512};
  for (std::size_t bytes : {std::size_t{64} << 10, std::size_t{8} << 20, std::size_t{64} << 20}) {
    benchmark::RegisterBenchmark(("memcpy/" + size_name(bytes)).c_str(), BM_Memcpy, bytes);
    for (const Kernel& k : kernels)
      for (ReduceSimdLevel level : levels)
        if (tutti::detail::reduce_simd_level_supported(level))
          benchmark::RegisterBenchmark(
              (std::string(k.name) + "/" + tutti::detail::reduce_simd_level_name(level) + "/" + size_name(bytes))
                  .c_str(),
              BM_Reduce, k.dtype, k.op, level, bytes);
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
