// dtype.cpp - fp16/bf16 <-> fp32 for the ZeRO layer (parameters in the trainer's precision, master
// weights and the optimizer in fp32). Round to nearest even; NaN stays NaN. fp16 uses F16C when
// the CPU has it (chosen at run time), the compiler's _Float16 otherwise.
#include <cstring>

#include "zcoll/zero.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace zcoll::zero {
namespace {

inline float bf16ToFloat(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t floatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

#if defined(__x86_64__)
__attribute__((target("avx2,f16c"))) void f16ToFloatF16c(const uint16_t* s, float* d, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
  for (; i < n; ++i) d[i] = _cvtsh_ss(s[i]);
}
__attribute__((target("avx2,f16c"))) void floatToF16F16c(const float* s, uint16_t* d, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) d[i] = _cvtss_sh(s[i], _MM_FROUND_TO_NEAREST_INT);
}
bool haveF16c() {
  static const bool have = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return have;
}
#endif

}  // namespace

int dtypeSize(DType type) { return type == DType::F32 ? 4 : 2; }

void toFloat32(DType type, const void* src, float* dst, int64_t n) {
  switch (type) {
    case DType::F32: std::memmove(dst, src, static_cast<size_t>(n) * 4); return;
    case DType::BF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16ToFloat(s[i]);
      return;
    }
    case DType::F16: {
#if defined(__x86_64__)
      if (haveF16c()) return f16ToFloatF16c(static_cast<const uint16_t*>(src), dst, n);
#endif
      const auto* s = static_cast<const _Float16*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(s[i]);
      return;
    }
  }
}

void fromFloat32(DType type, const float* src, void* dst, int64_t n) {
  switch (type) {
    case DType::F32: std::memmove(dst, src, static_cast<size_t>(n) * 4); return;
    case DType::BF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = floatToBf16(src[i]);
      return;
    }
    case DType::F16: {
#if defined(__x86_64__)
      if (haveF16c()) return floatToF16F16c(src, static_cast<uint16_t*>(dst), n);
#endif
      auto* d = static_cast<_Float16*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = static_cast<_Float16>(src[i]);
      return;
    }
  }
}

}  // namespace zcoll::zero
