// host_reduce_f16.cpp - see host_reduce_f16.hpp.
#include "kernels/host_reduce_f16.hpp"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#define ZCOLL_F16_TARGET __attribute__((target("avx2,f16c")))
#endif

namespace zcoll {

#if defined(__x86_64__)
namespace {

// The operators as the portable kernels define them: max = (a < b ? b : a), min = (b < a ? b : a).
struct VSum { ZCOLL_F16_TARGET static __m256 apply(__m256 a, __m256 b) { return _mm256_add_ps(a, b); } };
struct VProd { ZCOLL_F16_TARGET static __m256 apply(__m256 a, __m256 b) { return _mm256_mul_ps(a, b); } };
struct VMax { ZCOLL_F16_TARGET static __m256 apply(__m256 a, __m256 b) { return _mm256_max_ps(b, a); } };
struct VMin { ZCOLL_F16_TARGET static __m256 apply(__m256 a, __m256 b) { return _mm256_min_ps(b, a); } };

// fp16 <-> fp32, 8 lanes.
struct Half {
  ZCOLL_F16_TARGET static __m256 load(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  ZCOLL_F16_TARGET static void store(uint16_t* p, __m256 v) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
  }
  // 16 values as two vectors (any split works: the operators are lane-wise).
  ZCOLL_F16_TARGET static void load16(const uint16_t* p, __m256* lo, __m256* hi) {
    *lo = load(p);
    *hi = load(p + 8);
  }
  ZCOLL_F16_TARGET static void store16(uint16_t* p, __m256 lo, __m256 hi) {
    store(p, lo);
    store(p + 8, hi);
  }
};

// bf16 <-> fp32, 8 lanes: the upper half of an fp32; rounding to nearest even, NaN kept quiet.
struct Bf16 {
  ZCOLL_F16_TARGET static __m256 load(const uint16_t* p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  // fp32 -> bf16 in the low half of each 32-bit lane: round to nearest even, NaN kept quiet.
  ZCOLL_F16_TARGET static __m256i round(__m256 v) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i high = _mm256_srli_epi32(u, 16);
    const __m256i lsb = _mm256_and_si256(high, _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
    const __m256i quietNan = _mm256_or_si256(high, _mm256_set1_epi32(0x40));
    // |u| > 0x7f800000 as signed compares: both sides are non-negative after the mask.
    const __m256i isNan =
        _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    return _mm256_blendv_epi8(rounded, quietNan, isNan);  // <= 0xffff: packus keeps it as is
  }
  ZCOLL_F16_TARGET static void store(uint16_t* p, __m256 v) {
    const __m256i r = round(v);
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0xd8);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(packed));
  }
  // 16 values: interleaving zero words below them widens them in place (values 0-3 and 8-11 in
  // lo, 4-7 and 12-15 in hi), and packus puts them back in that order - no permute.
  ZCOLL_F16_TARGET static void load16(const uint16_t* p, __m256* lo, __m256* hi) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i z = _mm256_setzero_si256();
    *lo = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, v));
    *hi = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, v));
  }
  ZCOLL_F16_TARGET static void store16(uint16_t* p, __m256 lo, __m256 hi) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_packus_epi32(round(lo), round(hi)));
  }
};

template <typename T, typename Op>
ZCOLL_F16_TARGET void reduce16(void* dst, const void* a, const void* b, size_t n) {
  auto* d = static_cast<uint16_t*>(dst);
  const auto* x = static_cast<const uint16_t*>(a);
  const auto* y = static_cast<const uint16_t*>(b);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256 xl, xh, yl, yh;
    T::load16(x + i, &xl, &xh);
    T::load16(y + i, &yl, &yh);
    T::store16(d + i, Op::apply(xl, yl), Op::apply(xh, yh));
  }
  for (; i + 8 <= n; i += 8) T::store(d + i, Op::apply(T::load(x + i), T::load(y + i)));
  if (i < n) {  // the tail through an 8-lane buffer: same arithmetic as the body
    uint16_t bx[8] = {}, by[8] = {}, bd[8];
    std::memcpy(bx, x + i, (n - i) * 2);
    std::memcpy(by, y + i, (n - i) * 2);
    T::store(bd, Op::apply(T::load(bx), T::load(by)));
    std::memcpy(d + i, bd, (n - i) * 2);
  }
}

template <typename T>
ZCOLL_F16_TARGET void divide16(void* data, size_t n, int divisor) {
  auto* d = static_cast<uint16_t*>(data);
  const __m256 div = _mm256_set1_ps(static_cast<float>(divisor));
  size_t i = 0;
  for (; i + 8 <= n; i += 8) T::store(d + i, _mm256_div_ps(T::load(d + i), div));
  if (i < n) {
    uint16_t buf[8] = {};
    std::memcpy(buf, d + i, (n - i) * 2);
    T::store(buf, _mm256_div_ps(T::load(buf), div));
    std::memcpy(d + i, buf, (n - i) * 2);
  }
}

template <typename T>
ReduceFn forOp(RedOp op) {
  switch (op) {
    case RedOp::Sum: case RedOp::Avg: return &reduce16<T, VSum>;
    case RedOp::Prod: return &reduce16<T, VProd>;
    case RedOp::Max: return &reduce16<T, VMax>;
    case RedOp::Min: return &reduce16<T, VMin>;
  }
  return nullptr;
}

bool cpuHasF16() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  return has;
}

}  // namespace

ReduceFn simdReduceFunction(DataType type, RedOp op) {
  if (!cpuHasF16()) return nullptr;
  if (type == DataType::Float16) return forOp<Half>(op);
  if (type == DataType::Bfloat16) return forOp<Bf16>(op);
  return nullptr;
}

FinalizeFn simdFinalizeFunction(DataType type, RedOp op) {
  if (op != RedOp::Avg || !cpuHasF16()) return nullptr;
  if (type == DataType::Float16) return &divide16<Half>;
  if (type == DataType::Bfloat16) return &divide16<Bf16>;
  return nullptr;
}

#else

ReduceFn simdReduceFunction(DataType, RedOp) { return nullptr; }
FinalizeFn simdFinalizeFunction(DataType, RedOp) { return nullptr; }

#endif

}  // namespace zcoll
