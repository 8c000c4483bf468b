// host_copy.cpp - see host_copy.hpp.
#include "algorithms/reduce/host_copy.hpp"

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

template <bool kAvx2>
inline void copyLoop(char* d, const char* s, size_t n) {
  // Align the destination to 32 bytes; the source stays unaligned.
  const size_t head = (32 - (reinterpret_cast<uintptr_t>(d) & 31)) & 31;
  std::memcpy(d, s, head);
  d += head;
  s += head;
  n -= head;
  for (; n >= 128; n -= 128, d += 128, s += 128) {
    const Vec32 a = *reinterpret_cast<const Vec32*>(s);
    const Vec32 b = *reinterpret_cast<const Vec32*>(s + 32);
    const Vec32 c = *reinterpret_cast<const Vec32*>(s + 64);
    const Vec32 e = *reinterpret_cast<const Vec32*>(s + 96);
    *reinterpret_cast<Vec32Aligned*>(d) = a;
    *reinterpret_cast<Vec32Aligned*>(d + 32) = b;
    *reinterpret_cast<Vec32Aligned*>(d + 64) = c;
    *reinterpret_cast<Vec32Aligned*>(d + 96) = e;
  }
  std::memcpy(d, s, n);
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
  const size_t head = (32 - (reinterpret_cast<uintptr_t>(d) & 31)) & 31;
  std::memcpy(d, s, head);
  d += head;
  s += head;
  n -= head;
  for (; n >= 128; n -= 128, d += 128, s += 128) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 32));
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 64));
    const __m256i e = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + 32), b);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + 64), c);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + 96), e);
  }
  std::memcpy(d, s, n);
}
void streamSse2(char* d, const char* s, size_t n) {
  const size_t head = (16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15;
  std::memcpy(d, s, head);
  d += head;
  s += head;
  n -= head;
  for (; n >= 64; n -= 64, d += 64, s += 64)
    for (int i = 0; i < 64; i += 16)
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
  std::memcpy(d, s, n);
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
