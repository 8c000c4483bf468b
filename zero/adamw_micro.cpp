// adamw_micro.cpp - Google Benchmark of the CPU Adam step (zero/adamw.*) on a shard in cache
// (256 KiB per array) and in memory (64 MiB per array), beside a plain scalar loop and beside the
// machine's bandwidth for the same traffic (4 arrays read, 3 written per element, on as many
// threads, with trivial arithmetic).
//   build/zero/zcoll-adam-micro [--benchmark_filter=64MiB]
#include <benchmark/benchmark.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "adamw.hpp"

namespace {

using zcoll::zero::AdamStep;

constexpr double kBytesPerElement = 28;  // p, g, m, v read; p, m, v written

struct Shard {
  explicit Shard(size_t n) : p(n, 0.5f), g(n, 0.01f), m(n, 0.0f), v(n, 0.0f) {}
  std::vector<float> p, g, m, v;
};

AdamStep params() {
  AdamStep a;
  a.lr = 1e-4f;
  a.step = 10;
  return a;
}

void scalar(benchmark::State& state, size_t n) {
  Shard s(n);
  const AdamStep a = params();
  for (auto _ : state) {
    zcoll::zero::adamStepScalar(s.p.data(), s.g.data(), s.m.data(), s.v.data(), n, a);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBytesPerElement * static_cast<double>(n)));
  state.SetLabel("scalar, 1 thread");
}

void vectorised(benchmark::State& state, size_t n) {
  Shard s(n);
  zcoll::zero::CpuAdam adam;
  const AdamStep a = params();
  for (auto _ : state) {
    adam.step(s.p.data(), s.g.data(), s.m.data(), s.v.data(), n, a);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBytesPerElement * static_cast<double>(n)));
  state.SetLabel(std::string(adam.isa()) + ", " + std::to_string(adam.threads()) + " threads");
}

// The same memory traffic with nothing to compute, split over the same number of threads.
void traffic(benchmark::State& state, size_t n) {
  Shard s(n);
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  auto part = [&](int t) {
    const size_t per = (n + threads - 1) / threads, b = std::min(n, per * t), e = std::min(n, b + per);
    float* __restrict p = s.p.data();
    const float* __restrict g = s.g.data();
    float* __restrict m = s.m.data();
    float* __restrict v = s.v.data();
    for (size_t i = b; i < e; ++i) {
      const float gi = g[i];
      p[i] += gi;
      m[i] += gi;
      v[i] += gi;
    }
  };
  for (auto _ : state) {
    std::vector<std::thread> ts;
    for (int t = 1; t < threads; ++t) ts.emplace_back(part, t);
    part(0);
    for (auto& t : ts) t.join();
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * kBytesPerElement * static_cast<double>(n)));
  state.SetLabel(std::to_string(threads) + " threads");
}

}  // namespace

int main(int argc, char** argv) {
  for (size_t bytes : {size_t{256} << 10, size_t{64} << 20}) {
    const size_t n = bytes / sizeof(float);
    const std::string size = bytes >= (1u << 20) ? std::to_string(bytes >> 20) + "MiB" : std::to_string(bytes >> 10) + "KiB";
    benchmark::RegisterBenchmark(("adam/scalar/" + size).c_str(), scalar, n)->UseRealTime();
    benchmark::RegisterBenchmark(("adam/cpu/" + size).c_str(), vectorised, n)->UseRealTime();
    benchmark::RegisterBenchmark(("traffic/" + size).c_str(), traffic, n)->UseRealTime();
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
