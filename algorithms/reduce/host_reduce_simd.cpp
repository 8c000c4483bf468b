// host_reduce_simd.cpp - see host_reduce_simd.hpp. One template, written with GCC/Clang vector
// extensions, instantiated inside functions built for AVX2 and for AVX-512 (target attributes), so
// the baseline build stays portable and the CPU picks at run time.
#include "algorithms/reduce/host_reduce_simd.hpp"

#include <cstdint>
#include <type_traits>

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
  switch (type) {
    case DataType::Int8: return forOp<int8_t>(op, level);
    case DataType::Uint8: return forOp<uint8_t>(op, level);
    case DataType::Int32: return forOp<int32_t>(op, level);
    case DataType::Uint32: return forOp<uint32_t>(op, level);
    case DataType::Int64: return forOp<int64_t>(op, level);
    case DataType::Uint64: return forOp<uint64_t>(op, level);
    case DataType::Float32: return forOp<float>(op, level);
    case DataType::Float64: return forOp<double>(op, level);
    case DataType::Float16:
    case DataType::Bfloat16: return nullptr;
  }
  return nullptr;
}

#else

SimdLevel cpuSimdLevel() { return SimdLevel::Portable; }
ReduceFn nativeSimdReduceFunction(DataType, RedOp, SimdLevel) { return nullptr; }

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
