// reduce_micro.cpp - Google Benchmark of the host reduction kernels (kernels/) against
// the machine's own bandwidth for the same traffic: `a += b` and memcpy written as plain loops.
//
//   build/bench/micro/zcoll-micro [--benchmark_filter=float32]
//
// Every dtype x op at 256 KiB per operand (in cache) and 64 MiB (memory); memcpy also at 4 MiB (in a
// last-level cache, out of a core's own: what tools/sim-validate takes a core's cache misses to cost).
// bytes_per_second counts what a kernel moves: two operands read and one result written (dst = a OP b,
// dst == a here, as in the collectives' in-place steps). Compare a kernel's figure with
// `add_assign/float32` at the same size: the performance issue asks for >= 80 % of it.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/host_reduce.hpp"
#include "kernels/host_reduce_f16.hpp"
#include "kernels/host_reduce_simd.hpp"

namespace {

using zcoll::DataType;
using zcoll::RedOp;

constexpr size_t kSizes[] = {size_t{256} << 10, size_t{64} << 20};

// Operands of `bytes` each, page-aligned and touched, with values that stay finite under every op.
struct Operands {
  explicit Operands(size_t bytes) : bytes(bytes), a(bytes / 8 + 512), b(bytes / 8 + 512) {
    pa = align(a.data());
    pb = align(b.data());
    std::memset(pa, 0, bytes);
    for (size_t i = 0; i < bytes; ++i) static_cast<uint8_t*>(pb)[i] = static_cast<uint8_t>(i % 3 == 0 ? 0x3c : 0);
  }
  static void* align(uint64_t* p) {
    return reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(p) + 4095) & ~uintptr_t{4095});
  }
  size_t bytes;
  std::vector<uint64_t> a, b;
  void* pa;
  void* pb;
};

// The kernel zcoll runs (the run-time choice, named in the label), or the portable one.
void kernel(benchmark::State& state, DataType type, RedOp op, size_t bytes, bool portable) {
  Operands o(bytes);
  const zcoll::ReduceFn fn = portable ? zcoll::portableReduceFunction(type, op) : zcoll::reduceFunction(type, op);
  if (portable) state.SetLabel("portable");
  else if (zcoll::simdReduceFunction(type, op)) state.SetLabel("avx2+f16c");
  else if (zcoll::nativeSimdReduceFunction(type, op, zcoll::cpuSimdLevel()))
    state.SetLabel(zcoll::simdLevelName(zcoll::cpuSimdLevel()));
  else state.SetLabel("portable");
  const size_t n = bytes / zcoll::dataTypeSize(type);
  for (auto _ : state) {
    fn(o.pa, o.pa, o.pb, n);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(3 * bytes));
}

// The machine's `a += b`: no aliasing, built for the best vector unit the benchmark host has (AVX2
// here when present, else the baseline), so the kernels are measured against the real ceiling.
void addLoop(float* __restrict a, const float* __restrict b, size_t n) {
  for (size_t i = 0; i < n; ++i) a[i] += b[i];
}
#if defined(__x86_64__)
__attribute__((target("avx2"))) void addLoopAvx2(float* __restrict a, const float* __restrict b, size_t n) {
  for (size_t i = 0; i < n; ++i) a[i] += b[i];
}
#endif

void addAssign(benchmark::State& state, size_t bytes) {
  Operands o(bytes);
  float* a = static_cast<float*>(o.pa);
  const float* b = static_cast<const float*>(o.pb);
  const size_t n = bytes / sizeof(float);
  void (*loop)(float*, const float*, size_t) = addLoop;
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2")) loop = addLoopAvx2;
#endif
  for (auto _ : state) {
    loop(a, b, n);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(3 * bytes));
}

void copy(benchmark::State& state, size_t bytes) {
  Operands o(bytes);
  for (auto _ : state) {
    std::memcpy(o.pa, o.pb, bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(2 * bytes));
}

std::string sizeName(size_t bytes) {
  return bytes >= (size_t{1} << 20) ? std::to_string(bytes >> 20) + "MiB" : std::to_string(bytes >> 10) + "KiB";
}

}  // namespace

int main(int argc, char** argv) {
  for (size_t bytes : kSizes) {
    benchmark::RegisterBenchmark(("add_assign/float32/" + sizeName(bytes)).c_str(), addAssign, bytes);
    benchmark::RegisterBenchmark(("memcpy/" + sizeName(bytes)).c_str(), copy, bytes);
    for (int t = 0; t < zcoll::kNumDataTypes; ++t)
      for (int op = 0; op < zcoll::kNumRedOps; ++op) {
        const auto type = static_cast<DataType>(t);
        const auto red = static_cast<RedOp>(op);
        const std::string name = "reduce/" + std::string(zcoll::dataTypeName(type)) + "/" +
                                 std::string(zcoll::redOpName(red)) + "/" + sizeName(bytes);
        benchmark::RegisterBenchmark(name.c_str(), kernel, type, red, bytes, false);
        if (red == RedOp::Sum)  // what the vector kernels gain
          benchmark::RegisterBenchmark(("portable/" + name).c_str(), kernel, type, red, bytes, true);
      }
  }
  benchmark::RegisterBenchmark("memcpy/4MiB", copy, size_t{4} << 20);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
