// cuda_reduce.cu - see cuda_reduce.hpp. Built for sm_90 plus PTX (meson feature `cuda`).
#include "kernels/cuda_reduce.hpp"
#include "kernels/reduce_ops.hpp"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace zcoll::cuda {
namespace {

struct Bf16 {
  uint16_t bits;
};

// Loads to the compute type and stores back, as host_reduce.cpp's Traits.
template <typename T>
struct Traits {
  using Compute = T;
  __device__ static T load(T v) { return v; }
  __device__ static T store(T v) { return v; }
};
template <>
struct Traits<__half> {
  using Compute = float;
  __device__ static float load(__half v) { return __half2float(v); }
  __device__ static __half store(float v) { return __float2half_rn(v); }
};
template <>
struct Traits<Bf16> {
  using Compute = float;
  __device__ static float load(Bf16 v) { return __uint_as_float(static_cast<uint32_t>(v.bits) << 16); }
  __device__ static Bf16 store(float f) { return Bf16{reduce_ops::bf16FromFloatBits(__float_as_uint(f))}; }
};

template <typename T, typename Op>
__device__ T combine(T x, T y, int divisor) {
  using Tr = Traits<T>;
  using C = typename Tr::Compute;
  C v = Op::apply(Tr::load(x), Tr::load(y));
  if (divisor > 0) v = Tr::load(Tr::store(v)) / static_cast<C>(divisor);  // rounded, then divided: host order
  return Tr::store(v);
}

// Vectors of 16 bytes while every pointer is aligned, then the scalar tail.
template <typename T, typename Op>
__global__ void reduceKernel(T* dst, T* dst2, const T* a, const T* b, size_t n, int divisor, bool vectors) {
  constexpr int V = 16 / sizeof(T);
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t nvec = vectors ? n / V : 0;
  for (size_t i = first; i < nvec; i += stride) {
    const uint4 x = reinterpret_cast<const uint4*>(a)[i];
    const uint4 y = reinterpret_cast<const uint4*>(b)[i];
    uint4 r;
    const T* xv = reinterpret_cast<const T*>(&x);
    const T* yv = reinterpret_cast<const T*>(&y);
    T* rv = reinterpret_cast<T*>(&r);
#pragma unroll
    for (int k = 0; k < V; ++k) rv[k] = combine<T, Op>(xv[k], yv[k], divisor);
    reinterpret_cast<uint4*>(dst)[i] = r;
    if (dst2) reinterpret_cast<uint4*>(dst2)[i] = r;
  }
  for (size_t i = nvec * V + first; i < n; i += stride) {
    const T r = combine<T, Op>(a[i], b[i], divisor);
    dst[i] = r;
    if (dst2) dst2[i] = r;
  }
}

template <typename T>
__global__ void divideKernel(T* data, size_t n, int divisor) {
  using Tr = Traits<T>;
  using C = typename Tr::Compute;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    data[i] = Tr::store(static_cast<C>(Tr::load(data[i]) / static_cast<C>(divisor)));
}

constexpr int kThreads = 512;

int blocksFor(size_t work, int maxBlocks) {
  const size_t want = (work + kThreads - 1) / kThreads;
  return static_cast<int>(want < static_cast<size_t>(maxBlocks) ? (want ? want : 1) : maxBlocks);
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

template <typename T, typename Op>
int launchTyped(void* dst, void* dst2, const void* a, const void* b, size_t n, int divisor, cudaStream_t s,
                int maxBlocks) {
  constexpr int V = 16 / sizeof(T);
  const bool vectors = aligned16(dst) && aligned16(a) && aligned16(b) && (!dst2 || aligned16(dst2));
  const size_t work = vectors ? n / V + n % V : n;
  reduceKernel<T, Op><<<blocksFor(work, maxBlocks), kThreads, 0, s>>>(
      static_cast<T*>(dst), static_cast<T*>(dst2), static_cast<const T*>(a), static_cast<const T*>(b), n, divisor,
      vectors);
  return static_cast<int>(cudaGetLastError());
}

template <typename T>
int launchOp(void* dst, void* dst2, const void* a, const void* b, size_t n, RedOp op, int divisor, cudaStream_t s,
             int maxBlocks) {
  switch (op) {
    case RedOp::Sum: case RedOp::Avg: return launchTyped<T, reduce_ops::Sum>(dst, dst2, a, b, n, divisor, s, maxBlocks);
    case RedOp::Prod: return launchTyped<T, reduce_ops::Prod>(dst, dst2, a, b, n, divisor, s, maxBlocks);
    case RedOp::Max: return launchTyped<T, reduce_ops::Max>(dst, dst2, a, b, n, divisor, s, maxBlocks);
    case RedOp::Min: return launchTyped<T, reduce_ops::Min>(dst, dst2, a, b, n, divisor, s, maxBlocks);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

template <typename T>
int launchDiv(void* data, size_t n, int divisor, cudaStream_t s, int maxBlocks) {
  divideKernel<T><<<blocksFor(n, maxBlocks), kThreads, 0, s>>>(static_cast<T*>(data), n, divisor);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int launchReduce(void* dst, void* dst2, const void* a, const void* b, size_t n, DataType type, RedOp op, int divisor,
                 void* stream, int maxBlocks) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (type) {
    case DataType::Int8: return launchOp<int8_t>(dst, dst2, a, b, n, op, divisor, s, maxBlocks);
    case DataType::Uint8: return launchOp<uint8_t>(dst, dst2, a, b, n, op, divisor, s, maxBlocks);
    case DataType::Int32: return launchOp<int32_t>(dst, dst2, a, b, n, op, divisor, s, maxBlocks);
    case DataType::Uint32: return launchOp<uint32_t>(dst, dst2, a, b, n, op, divisor, s, maxBlocks);
    case DataType::Int64: return launchOp<int64_t>(dst, dst2, a, b, n, op, divisor, s, maxBlocks);
    case DataType::Uint64: return launchOp<uint64_t>(dst, dst2, a, b, n, op, divisor, s, maxBlocks);
    case DataType::Float16: return launchOp<__half>(dst, dst2, a, b, n, op, divisor, s, maxBlocks);
    case DataType::Float32: return launchOp<float>(dst, dst2, a, b, n, op, divisor, s, maxBlocks);
    case DataType::Float64: return launchOp<double>(dst, dst2, a, b, n, op, divisor, s, maxBlocks);
    case DataType::Bfloat16: return launchOp<Bf16>(dst, dst2, a, b, n, op, divisor, s, maxBlocks);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

int launchDivide(void* data, size_t n, DataType type, int divisor, void* stream, int maxBlocks) {
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (type) {
    case DataType::Int8: return launchDiv<int8_t>(data, n, divisor, s, maxBlocks);
    case DataType::Uint8: return launchDiv<uint8_t>(data, n, divisor, s, maxBlocks);
    case DataType::Int32: return launchDiv<int32_t>(data, n, divisor, s, maxBlocks);
    case DataType::Uint32: return launchDiv<uint32_t>(data, n, divisor, s, maxBlocks);
    case DataType::Int64: return launchDiv<int64_t>(data, n, divisor, s, maxBlocks);
    case DataType::Uint64: return launchDiv<uint64_t>(data, n, divisor, s, maxBlocks);
    case DataType::Float16: return launchDiv<__half>(data, n, divisor, s, maxBlocks);
    case DataType::Float32: return launchDiv<float>(data, n, divisor, s, maxBlocks);
    case DataType::Float64: return launchDiv<double>(data, n, divisor, s, maxBlocks);
    case DataType::Bfloat16: return launchDiv<Bf16>(data, n, divisor, s, maxBlocks);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // namespace zcoll::cuda
