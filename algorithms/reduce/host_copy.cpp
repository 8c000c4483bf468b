// host_copy.cpp - see host_copy.hpp.
#include "algorithms/reduce/host_copy.hpp"

#include <cstdint>
#include <cstring>

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

}  // namespace

void copyBytes(void* dst, const void* src, size_t bytes) {
  if (bytes < kSmall || ((reinterpret_cast<uintptr_t>(dst) ^ reinterpret_cast<uintptr_t>(src)) & 63) == 0) {
    std::memcpy(dst, src, bytes);
    return;
  }
  gCopy(static_cast<char*>(dst), static_cast<const char*>(src), bytes);
}

}  // namespace zcoll
