// reduce_ops.hpp - the element arithmetic of the reductions, defined once for the host kernels
// (host_reduce.cpp) and the GPU kernels (cuda_reduce.cu), so both give the same bits: signed
// integers wrap (computed in the unsigned type, as in NCCL), max/min keep `a < b ? b : a`'s NaN rule,
// bf16 rounds to nearest even from fp32 bits.
#pragma once

#include <cstdint>
#include <type_traits>

#ifdef __CUDACC__
#define ZCOLL_HOST_DEVICE __host__ __device__
#else
#define ZCOLL_HOST_DEVICE
#endif

namespace zcoll::reduce_ops {

template <typename C>
ZCOLL_HOST_DEVICE inline C addWrap(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}

template <typename C>
ZCOLL_HOST_DEVICE inline C mulWrap(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    // Promote small types to unsigned int so the product cannot overflow a signed int.
    using W = std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;
    return static_cast<C>(static_cast<U>(static_cast<W>(static_cast<U>(a)) * static_cast<W>(static_cast<U>(b))));
  } else {
    return a * b;
  }
}

struct Sum { template <typename C> ZCOLL_HOST_DEVICE static C apply(C a, C b) { return addWrap(a, b); } };
struct Prod { template <typename C> ZCOLL_HOST_DEVICE static C apply(C a, C b) { return mulWrap(a, b); } };
struct Max { template <typename C> ZCOLL_HOST_DEVICE static C apply(C a, C b) { return a < b ? b : a; } };
struct Min { template <typename C> ZCOLL_HOST_DEVICE static C apply(C a, C b) { return b < a ? b : a; } };

// bf16 from the bits of an fp32 value: round to nearest even; NaN stays NaN (made quiet).
ZCOLL_HOST_DEVICE inline uint16_t bf16FromFloatBits(uint32_t u) {
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

}  // namespace zcoll::reduce_ops
