// host_reduce.cpp - see host_reduce.hpp.
#include "kernels/host_reduce.hpp"


#include "kernels/host_reduce_f16.hpp"
#include "kernels/host_reduce_simd.hpp"
#include "kernels/reduce_ops.hpp"

#include <array>
#include <cstdint>
#include <cstring>

namespace zcoll {
namespace {

struct Bf16 {
  uint16_t bits;
};

template <typename T>
struct Traits {  // native arithmetic types
  using Compute = T;
  static Compute load(T v) { return v; }
  static T store(Compute v) { return v; }
};
template <>
struct Traits<_Float16> {
  using Compute = float;
  static float load(_Float16 v) { return static_cast<float>(v); }
  static _Float16 store(float v) { return static_cast<_Float16>(v); }
};
template <>
struct Traits<Bf16> {
  using Compute = float;
  static float load(Bf16 v) { return bf16ToFloat(v.bits); }
  static Bf16 store(float v) { return Bf16{floatToBf16(v)}; }
};

template <typename T, typename Op>
void reduceKernel(void* dst, const void* a, const void* b, size_t n) {
  using Tr = Traits<T>;
  T* d = static_cast<T*>(dst);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) d[i] = Tr::store(Op::apply(Tr::load(x[i]), Tr::load(y[i])));
}

template <typename T>
void divideKernel(void* data, size_t n, int divisor) {
  using Tr = Traits<T>;
  using C = typename Tr::Compute;
  T* d = static_cast<T*>(data);
  const C div = static_cast<C>(divisor);
  for (size_t i = 0; i < n; ++i) d[i] = Tr::store(static_cast<C>(Tr::load(d[i]) / div));
}

template <typename T>
ReduceFn forOp(RedOp op) {
  switch (op) {
    case RedOp::Sum: case RedOp::Avg: return &reduceKernel<T, reduce_ops::Sum>;
    case RedOp::Prod: return &reduceKernel<T, reduce_ops::Prod>;
    case RedOp::Max: return &reduceKernel<T, reduce_ops::Max>;
    case RedOp::Min: return &reduceKernel<T, reduce_ops::Min>;
  }
  return nullptr;
}

}  // namespace

float halfToFloat(uint16_t h) {
  _Float16 v;
  std::memcpy(&v, &h, 2);
  return static_cast<float>(v);
}
uint16_t floatToHalf(float f) {
  _Float16 v = static_cast<_Float16>(f);
  uint16_t h;
  std::memcpy(&h, &v, 2);
  return h;
}
float bf16ToFloat(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t floatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return reduce_ops::bf16FromFloatBits(u);
}

namespace {
ReduceFn pickReduceFunction(DataType type, RedOp op) {
  if (ReduceFn f = simdReduceFunction(type, op)) return f;
  if (ReduceFn f = nativeSimdReduceFunction(type, op, cpuSimdLevel())) return f;
  return portableReduceFunction(type, op);
}
}  // namespace

ReduceFn reduceFunction(DataType type, RedOp op) {
  // Chosen once per type x op (every operation asks: a lookup, not the CPU-dispatch chain).
  static const auto table = [] {
    std::array<std::array<ReduceFn, kNumRedOps>, kNumDataTypes> t{};
    for (int d = 0; d < kNumDataTypes; ++d)
      for (int o = 0; o < kNumRedOps; ++o) t[d][o] = pickReduceFunction(static_cast<DataType>(d), static_cast<RedOp>(o));
    return t;
  }();
  const int d = static_cast<int>(type), o = static_cast<int>(op);
  if (d < 0 || d >= kNumDataTypes || o < 0 || o >= kNumRedOps) return nullptr;
  return table[d][o];
}

ReduceFn portableReduceFunction(DataType type, RedOp op) {
  switch (type) {
    case DataType::Int8: return forOp<int8_t>(op);
    case DataType::Uint8: return forOp<uint8_t>(op);
    case DataType::Int32: return forOp<int32_t>(op);
    case DataType::Uint32: return forOp<uint32_t>(op);
    case DataType::Int64: return forOp<int64_t>(op);
    case DataType::Uint64: return forOp<uint64_t>(op);
    case DataType::Float16: return forOp<_Float16>(op);
    case DataType::Float32: return forOp<float>(op);
    case DataType::Float64: return forOp<double>(op);
    case DataType::Bfloat16: return forOp<Bf16>(op);
  }
  return nullptr;
}

FinalizeFn finalizeFunction(DataType type, RedOp op) {
  if (op != RedOp::Avg) return nullptr;
  if (FinalizeFn f = simdFinalizeFunction(type, op)) return f;
  switch (type) {
    case DataType::Int8: return &divideKernel<int8_t>;
    case DataType::Uint8: return &divideKernel<uint8_t>;
    case DataType::Int32: return &divideKernel<int32_t>;
    case DataType::Uint32: return &divideKernel<uint32_t>;
    case DataType::Int64: return &divideKernel<int64_t>;
    case DataType::Uint64: return &divideKernel<uint64_t>;
    case DataType::Float16: return &divideKernel<_Float16>;
    case DataType::Float32: return &divideKernel<float>;
    case DataType::Float64: return &divideKernel<double>;
    case DataType::Bfloat16: return &divideKernel<Bf16>;
  }
  return nullptr;
}

}  // namespace zcoll
