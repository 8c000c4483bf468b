// host_reduce_simd.cpp - see host_reduce_simd.hpp. One template, written with GCC/Clang vector
// extensions, instantiated inside functions built for AVX2 and for AVX-512 (target attributes), so
// the baseline build stays portable and the CPU picks at run time.
#include "kernels/host_reduce_simd.hpp"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace zcoll {

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// The operators below pass vectors by value between always-inlined functions: no ABI is crossed.
#pragma GCC diagnostic ignored "-Wpsabi"
namespace {

#define ZCOLL_ALWAYS_INLINE inline __attribute__((always_inline))

// The operators exactly as the portable kernels define them: integers wrap (sum and product are
// computed in the unsigned type), max = (a < b ? b : a), min = (b < a ? b : a), lane by lane.
struct Sum {
  template <typename V> static ZCOLL_ALWAYS_INLINE V apply(V a, V b) { return a + b; }
};
struct Prod {
  template <typename V> static ZCOLL_ALWAYS_INLINE V apply(V a, V b) { return a * b; }
};
struct Max {
  template <typename V> static ZCOLL_ALWAYS_INLINE V apply(V a, V b) { return a < b ? b : a; }
};
struct Min {
  template <typename V> static ZCOLL_ALWAYS_INLINE V apply(V a, V b) { return b < a ? b : a; }
};

// Sum and product of integers run on the unsigned type of the same width (wrapping, no UB).
template <typename T, bool Unsigned>
struct Compute {
  using type = T;
};
template <typename T>
struct Compute<T, true> {
  using type = std::make_unsigned_t<T>;
};
template <typename T, typename Op>
using ComputeType =
    typename Compute<T, std::is_integral_v<T> && (std::is_same_v<Op, Sum> || std::is_same_v<Op, Prod>)>::type;

// dst[i] = a[i] OP b[i] with vectors of Bytes bytes, four at a time, then one at a time, then a
// scalar tail. dst may equal a or b (each lane is read before it is written).
template <typename T, typename Op, int Bytes>
ZCOLL_ALWAYS_INLINE void body(void* dst, const void* a, const void* b, size_t n) {
  using C = ComputeType<T, Op>;
  typedef C V __attribute__((vector_size(Bytes)));
  // The same vector at any element alignment (unaligned loads and stores), aliasing anything.
  typedef C VU __attribute__((vector_size(Bytes), aligned(alignof(C)), may_alias));
  typedef C CU __attribute__((aligned(alignof(C)), may_alias));
  constexpr size_t L = Bytes / sizeof(C);
  VU* d = static_cast<VU*>(dst);
  const VU* x = static_cast<const VU*>(a);
  const VU* y = static_cast<const VU*>(b);
  const size_t vectors = n / L;
  size_t v = 0;
  for (; v + 4 <= vectors; v += 4) {
    const V r0 = Op::apply(V(x[v]), V(y[v]));
    const V r1 = Op::apply(V(x[v + 1]), V(y[v + 1]));
    const V r2 = Op::apply(V(x[v + 2]), V(y[v + 2]));
    const V r3 = Op::apply(V(x[v + 3]), V(y[v + 3]));
    d[v] = r0;
    d[v + 1] = r1;
    d[v + 2] = r2;
    d[v + 3] = r3;
  }
  for (; v < vectors; ++v) d[v] = Op::apply(V(x[v]), V(y[v]));
  CU* ds = static_cast<CU*>(dst);
  const CU* xs = static_cast<const CU*>(a);
  const CU* ys = static_cast<const CU*>(b);
  for (size_t i = vectors * L; i < n; ++i) ds[i] = static_cast<C>(Op::apply(C(xs[i]), C(ys[i])));
}

template <typename T, typename Op>
__attribute__((target("avx2"))) void kernelAvx2(void* dst, const void* a, const void* b, size_t n) {
  body<T, Op, 32>(dst, a, b, n);
}
template <typename T, typename Op>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) void kernelAvx512(void* dst, const void* a,
                                                                                const void* b, size_t n) {
  body<T, Op, 64>(dst, a, b, n);
}

// dsts[k][i] = srcs[0][i] OP srcs[1][i] OP ... for every k, the vectors stored around the cache.
// Every dsts[k] sits at the same offset within a Bytes-byte line (the caller checks) and at a multiple
// of the element size: a scalar head reaches the line boundary, aligned non-temporal stores follow,
// a scalar tail ends. The sources stay unaligned.
template <typename T, typename Op, int Bytes, typename Store>
ZCOLL_ALWAYS_INLINE void bodyToAll(void* const* dsts, int nd, const void* const* srcs, int ns, size_t n, Store store) {
  using C = ComputeType<T, Op>;
  typedef C V __attribute__((vector_size(Bytes)));
  typedef C VU __attribute__((vector_size(Bytes), aligned(alignof(C)), may_alias));
  typedef C CU __attribute__((aligned(alignof(C)), may_alias));
  constexpr size_t L = Bytes / sizeof(C);
  auto src = [&](int p) { return static_cast<const CU*>(srcs[p]); };
  auto dst = [&](int k) { return static_cast<CU*>(dsts[k]); };
  auto scalar = [&](size_t i) {
    C acc = src(0)[i];
    for (int p = 1; p < ns; ++p) acc = static_cast<C>(Op::apply(acc, C(src(p)[i])));
    for (int k = 0; k < nd; ++k) dst(k)[i] = acc;
  };
  const size_t misaligned = reinterpret_cast<uintptr_t>(dsts[0]) % Bytes;
  const size_t head = std::min(n, misaligned ? (Bytes - misaligned) / sizeof(C) : 0);
  size_t i = 0;
  for (; i < head; ++i) scalar(i);
  if (ns == 2 && nd == 2) {  // two ranks: unrolled
    const CU *x = src(0), *y = src(1);
    CU *d0 = dst(0), *d1 = dst(1);
    for (; i + 2 * L <= n; i += 2 * L) {
      const V r0 = Op::apply(V(*reinterpret_cast<const VU*>(x + i)), V(*reinterpret_cast<const VU*>(y + i)));
      const V r1 = Op::apply(V(*reinterpret_cast<const VU*>(x + i + L)), V(*reinterpret_cast<const VU*>(y + i + L)));
      store(d0 + i, r0);
      store(d1 + i, r0);
      store(d0 + i + L, r1);
      store(d1 + i + L, r1);
    }
  }
  for (; i + L <= n; i += L) {
    V acc = V(*reinterpret_cast<const VU*>(src(0) + i));
    for (int p = 1; p < ns; ++p) acc = Op::apply(acc, V(*reinterpret_cast<const VU*>(src(p) + i)));
    for (int k = 0; k < nd; ++k) store(dst(k) + i, acc);
  }
  for (; i < n; ++i) scalar(i);
}

template <typename T, typename Op>
__attribute__((target("avx2"))) void toAllAvx2(void* const* dsts, int nd, const void* const* srcs, int ns, size_t n) {
  bodyToAll<T, Op, 32>(dsts, nd, srcs, ns, n, [](void* p, auto v) __attribute__((target("avx2"))) {
    _mm256_stream_si256(static_cast<__m256i*>(p), reinterpret_cast<const __m256i&>(v));
  });
}
template <typename T, typename Op>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) void toAllAvx512(void* const* dsts, int nd,
                                                                               const void* const* srcs, int ns,
                                                                               size_t n) {
  bodyToAll<T, Op, 64>(dsts, nd, srcs, ns, n,
                       [](void* p, auto v) __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq"))) {
                         _mm512_stream_si512(static_cast<__m512i*>(p), reinterpret_cast<const __m512i&>(v));
                       });
}

template <typename T>
ReduceToAllFn toAllForOp(RedOp op, SimdLevel level) {
  const bool wide = level == SimdLevel::Avx512;
  switch (op) {
    case RedOp::Sum: return wide ? &toAllAvx512<T, Sum> : &toAllAvx2<T, Sum>;
    case RedOp::Prod: return wide ? &toAllAvx512<T, Prod> : &toAllAvx2<T, Prod>;
    case RedOp::Max: return wide ? &toAllAvx512<T, Max> : &toAllAvx2<T, Max>;
    case RedOp::Min: return wide ? &toAllAvx512<T, Min> : &toAllAvx2<T, Min>;
    case RedOp::Avg: return nullptr;  // needs the division: the caller reduces through a block
  }
  return nullptr;
}

template <typename T>
ReduceFn forOp(RedOp op, SimdLevel level) {
  const bool wide = level == SimdLevel::Avx512;
  switch (op) {
    case RedOp::Sum: case RedOp::Avg: return wide ? &kernelAvx512<T, Sum> : &kernelAvx2<T, Sum>;
    case RedOp::Prod: return wide ? &kernelAvx512<T, Prod> : &kernelAvx2<T, Prod>;
    case RedOp::Max: return wide ? &kernelAvx512<T, Max> : &kernelAvx2<T, Max>;
    case RedOp::Min: return wide ? &kernelAvx512<T, Min> : &kernelAvx2<T, Min>;
  }
  return nullptr;
}

// f(T{}) for the native type T of `type` (the kernels' template argument); nullptr for fp16/bf16.
template <typename F>
auto byNativeType(DataType type, F&& f) -> decltype(f(float{})) {
  switch (type) {
    case DataType::Int8: return f(int8_t{});
    case DataType::Uint8: return f(uint8_t{});
    case DataType::Int32: return f(int32_t{});
    case DataType::Uint32: return f(uint32_t{});
    case DataType::Int64: return f(int64_t{});
    case DataType::Uint64: return f(uint64_t{});
    case DataType::Float32: return f(float{});
    case DataType::Float64: return f(double{});
    case DataType::Float16:
    case DataType::Bfloat16: return nullptr;
  }
  return nullptr;
}

}  // namespace

SimdLevel cpuSimdLevel() {
  static const SimdLevel level = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
      return SimdLevel::Avx512;
    if (__builtin_cpu_supports("avx2")) return SimdLevel::Avx2;
    return SimdLevel::Portable;
  }();
  return level;
}

ReduceFn nativeSimdReduceFunction(DataType type, RedOp op, SimdLevel level) {
  if (level == SimdLevel::Portable) return nullptr;
  return byNativeType(type, [&](auto t) { return forOp<decltype(t)>(op, level); });
}

ReduceToAllFn streamReduceToAllFunction(DataType type, RedOp op, size_t* lineBytes) {
  const SimdLevel level = cpuSimdLevel();
  if (level == SimdLevel::Portable) return nullptr;
  *lineBytes = level == SimdLevel::Avx512 ? 64 : 32;
  return byNativeType(type, [&](auto t) { return toAllForOp<decltype(t)>(op, level); });
}

#else

SimdLevel cpuSimdLevel() { return SimdLevel::Portable; }
ReduceFn nativeSimdReduceFunction(DataType, RedOp, SimdLevel) { return nullptr; }
ReduceToAllFn streamReduceToAllFunction(DataType, RedOp, size_t*) { return nullptr; }

#endif

const char* simdLevelName(SimdLevel level) {
  switch (level) {
    case SimdLevel::Avx512: return "avx512";
    case SimdLevel::Avx2: return "avx2";
    case SimdLevel::Portable: break;
  }
  return "portable";
}

}  // namespace zcoll
