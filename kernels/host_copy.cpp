// host_copy.cpp - see host_copy.hpp.
#include "kernels/host_copy.hpp"

#include <atomic>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace zcoll {
namespace {

constexpr size_t kSmall = 2048;  // below this glibc does not use rep movsb

typedef char Vec32 __attribute__((vector_size(32), aligned(1)));
typedef char Vec32Aligned __attribute__((vector_size(32), aligned(32)));

// The shape of every copy loop here: align the destination to Align bytes (the head by memcpy),
// block(d, s) for each whole Block bytes, the tail by memcpy. The source stays unaligned. n must
// cover the head (callers copy >= kSmall bytes).
template <size_t Align, size_t Block, typename F>
inline __attribute__((always_inline)) void alignedBlocks(char* d, const char* s, size_t n, F&& block) {
  const size_t head = (Align - (reinterpret_cast<uintptr_t>(d) & (Align - 1))) & (Align - 1);
  std::memcpy(d, s, head);
  d += head;
  s += head;
  n -= head;
  for (; n >= Block; n -= Block, d += Block, s += Block) block(d, s);
  std::memcpy(d, s, n);
}

template <bool kAvx2>
inline void copyLoop(char* d, const char* s, size_t n) {
  alignedBlocks<32, 128>(d, s, n, [](char* o, const char* i) {
    const Vec32 a = *reinterpret_cast<const Vec32*>(i);
    const Vec32 b = *reinterpret_cast<const Vec32*>(i + 32);
    const Vec32 c = *reinterpret_cast<const Vec32*>(i + 64);
    const Vec32 e = *reinterpret_cast<const Vec32*>(i + 96);
    *reinterpret_cast<Vec32Aligned*>(o) = a;
    *reinterpret_cast<Vec32Aligned*>(o + 32) = b;
    *reinterpret_cast<Vec32Aligned*>(o + 64) = c;
    *reinterpret_cast<Vec32Aligned*>(o + 96) = e;
  });
}

__attribute__((target("avx2"))) void copyAvx2(char* d, const char* s, size_t n) { copyLoop<true>(d, s, n); }
void copyBaseline(char* d, const char* s, size_t n) { copyLoop<false>(d, s, n); }

using CopyFn = void (*)(char*, const char*, size_t);
CopyFn pickCopy() { return __builtin_cpu_supports("avx2") ? &copyAvx2 : &copyBaseline; }
const CopyFn gCopy = pickCopy();

#if defined(__x86_64__)
// Non-temporal stores of aligned 32-byte (AVX) or 16-byte (SSE2, every x86-64) vectors; the source
// stays unaligned.
__attribute__((target("avx2"))) void streamAvx2(char* d, const char* s, size_t n) {
  alignedBlocks<32, 128>(d, s, n, [](char* o, const char* i) __attribute__((target("avx2"))) {
    for (int k = 0; k < 128; k += 32)
      _mm256_stream_si256(reinterpret_cast<__m256i*>(o + k), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(i + k)));
  });
}
void streamSse2(char* d, const char* s, size_t n) {
  alignedBlocks<16, 64>(d, s, n, [](char* o, const char* i) {
    for (int k = 0; k < 64; k += 16)
      _mm_stream_si128(reinterpret_cast<__m128i*>(o + k), _mm_loadu_si128(reinterpret_cast<const __m128i*>(i + k)));
  });
}
CopyFn pickStream() { return __builtin_cpu_supports("avx2") ? &streamAvx2 : &streamSse2; }
#else
CopyFn pickStream() { return &copyBaseline; }
#endif
const CopyFn gStream = pickStream();

}  // namespace

void storeFence() {
#if defined(__x86_64__)
  _mm_sfence();
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

void streamBytes(void* dst, const void* src, size_t bytes, bool fence) {
  if (bytes < kSmall) {
    std::memcpy(dst, src, bytes);
    return;
  }
  gStream(static_cast<char*>(dst), static_cast<const char*>(src), bytes);
  if (fence) storeFence();
}

void copyBytes(void* dst, const void* src, size_t bytes) {
  if (bytes < kSmall || ((reinterpret_cast<uintptr_t>(dst) ^ reinterpret_cast<uintptr_t>(src)) & 63) == 0) {
    std::memcpy(dst, src, bytes);
    return;
  }
  gCopy(static_cast<char*>(dst), static_cast<const char*>(src), bytes);
}

}  // namespace zcoll
