// adamw.cpp - see adamw.hpp. Built with -ffp-contract=off (zero/meson.build): no a*b+c may become an
// FMA, so the vector kernels compute exactly what the scalar one does.
#include "adamw.hpp"

// Vectors pass between always-inlined helpers (no ABI is crossed); GCC 12's avx512fintrin.h trips
// -Wmaybe-uninitialized in _mm512_sqrt_ps.
#pragma GCC diagnostic ignored "-Wpsabi"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <algorithm>
#include <cmath>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace zcoll::zero {
namespace {

struct Coefficients {
  float decay, b1, oneMinusB1, b2, oneMinusB2, stepSize, bc2Sqrt, eps, wd;
  bool decoupled;
};

Coefficients coefficients(const AdamStep& a) {
  Coefficients c{};
  c.decay = 1.0f - a.lr * a.weightDecay;
  c.b1 = a.beta1;
  c.oneMinusB1 = 1.0f - a.beta1;
  c.b2 = a.beta2;
  c.oneMinusB2 = 1.0f - a.beta2;
  const double bc1 = a.biasCorrection ? 1.0 - std::pow(static_cast<double>(a.beta1), static_cast<double>(a.step)) : 1.0;
  const double bc2 = a.biasCorrection ? 1.0 - std::pow(static_cast<double>(a.beta2), static_cast<double>(a.step)) : 1.0;
  c.stepSize = static_cast<float>(a.lr / bc1);
  c.bc2Sqrt = static_cast<float>(std::sqrt(bc2));
  c.eps = a.eps;
  c.wd = a.weightDecay;
  c.decoupled = a.decoupled;
  return c;
}

// One element (or one vector of them: the same expression on GCC vector types).
template <typename V, typename S>
inline __attribute__((always_inline)) void update(V& p, V g, V& m, V& v, const Coefficients& c, S sqrtFn) {
  if (c.decoupled) p = p * c.decay;
  else g = g + p * c.wd;
  m = m + c.oneMinusB1 * (g - m);
  v = c.b2 * v + c.oneMinusB2 * (g * g);
  const V denom = sqrtFn(v) / c.bc2Sqrt + c.eps;
  p = p - c.stepSize * (m / denom);
}

inline float scalarSqrt(float x) { return std::sqrt(x); }

void scalarRange(float* p, const float* g, float* m, float* v, size_t n, const Coefficients& c) {
  for (size_t i = 0; i < n; ++i) {
    float pi = p[i], mi = m[i], vi = v[i];
    update(pi, g[i], mi, vi, c, scalarSqrt);
    p[i] = pi, m[i] = mi, v[i] = vi;
  }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
typedef float V8 __attribute__((vector_size(32)));
typedef float V16 __attribute__((vector_size(64)));

struct Sqrt8 {
  __attribute__((target("avx2"))) inline V8 operator()(V8 x) const {
    return reinterpret_cast<V8>(_mm256_sqrt_ps(reinterpret_cast<__m256>(x)));
  }
};
struct Sqrt16 {
  __attribute__((target("avx512f"))) inline V16 operator()(V16 x) const {
    return reinterpret_cast<V16>(_mm512_sqrt_ps(reinterpret_cast<__m512>(x)));
  }
};

// Unaligned loads and stores through memcpy (one vmovups each): a reduced-alignment typedef would
// lose its attribute as a template argument.
template <typename V, typename SqrtV>
inline __attribute__((always_inline)) void vectorRange(float* p, const float* g, float* m, float* v, size_t n,
                                                       const Coefficients& c) {
  constexpr size_t L = sizeof(V) / sizeof(float);
  size_t i = 0;
  for (; i + L <= n; i += L) {
    V pv, gv, mv, vv;
    __builtin_memcpy(&pv, p + i, sizeof(V));
    __builtin_memcpy(&gv, g + i, sizeof(V));
    __builtin_memcpy(&mv, m + i, sizeof(V));
    __builtin_memcpy(&vv, v + i, sizeof(V));
    update(pv, gv, mv, vv, c, SqrtV());
    __builtin_memcpy(p + i, &pv, sizeof(V));
    __builtin_memcpy(m + i, &mv, sizeof(V));
    __builtin_memcpy(v + i, &vv, sizeof(V));
  }
  scalarRange(p + i, g + i, m + i, v + i, n - i, c);
}
__attribute__((target("avx2"))) void rangeAvx2(float* p, const float* g, float* m, float* v, size_t n,
                                              const Coefficients& c) {
  vectorRange<V8, Sqrt8>(p, g, m, v, n, c);
}
__attribute__((target("avx512f"))) void rangeAvx512(float* p, const float* g, float* m, float* v, size_t n,
                                                   const Coefficients& c) {
  vectorRange<V16, Sqrt16>(p, g, m, v, n, c);
}
using RangeFn = void (*)(float*, const float*, float*, float*, size_t, const Coefficients&);
RangeFn bestRange(const char** name) {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return *name = "avx512", rangeAvx512;
  if (__builtin_cpu_supports("avx2")) return *name = "avx2", rangeAvx2;
  return *name = "portable", scalarRange;
}
#else
using RangeFn = void (*)(float*, const float*, float*, float*, size_t, const Coefficients&);
RangeFn bestRange(const char** name) { return *name = "portable", scalarRange; }
#endif

const char* gIsa = nullptr;
const RangeFn gRange = bestRange(&gIsa);

}  // namespace

void adamStepScalar(float* p, const float* g, float* m, float* v, size_t n, const AdamStep& a) {
  scalarRange(p, g, m, v, n, coefficients(a));
}

CpuAdam::CpuAdam(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int t = 1; t < threads; ++t) workers_.emplace_back([this, t] { workerLoop(t); });
}

CpuAdam::~CpuAdam() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  start_.notify_all();
  for (std::thread& t : workers_) t.join();
}

const char* CpuAdam::isa() const { return gIsa; }

// Part `part` of `threads()` contiguous pieces, each a multiple of 64 elements (whole cache lines).
void CpuAdam::runPart(const Job& job, int part) {
  const size_t parts = static_cast<size_t>(threads());
  const size_t per = (job.n + parts - 1) / parts;
  const size_t chunk = (per + 63) / 64 * 64;
  const size_t begin = std::min(job.n, chunk * static_cast<size_t>(part));
  const size_t end = std::min(job.n, begin + chunk);
  if (begin < end) gRange(job.p + begin, job.g + begin, job.m + begin, job.v + begin, end - begin, coefficients(job.a));
}

void CpuAdam::workerLoop(int part) {
  uint64_t seen = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    start_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    const Job job = job_;
    lock.unlock();
    runPart(job, part);
    lock.lock();
    if (--pending_ == 0) done_.notify_one();
  }
}

void CpuAdam::step(float* p, const float* g, float* m, float* v, size_t n, const AdamStep& a) {
  const Job job{p, g, m, v, n, a};
  if (workers_.empty() || n < 4096) {  // small shards: the hand-off would cost more than the work
    gRange(p, g, m, v, n, coefficients(a));
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    job_ = job;
    pending_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  start_.notify_all();
  runPart(job, 0);
  std::unique_lock<std::mutex> lock(mutex_);
  done_.wait(lock, [&] { return pending_ == 0; });
}

}  // namespace zcoll::zero
