// host_copy.hpp - the copy every primitive uses between user buffers and transport slots.
//
// glibc's memcpy switches to `rep movsb` above a few KiB; on AMD Zen cores that path runs about 3x
// slower when source and destination are not equally aligned within a cache line - which is the
// common case here (slots are 64-byte aligned, glibc's large mallocs sit 16 bytes past a page start).
// copyBytes keeps memcpy for small or mutually aligned copies and otherwise uses a vector loop that
// aligns the destination and streams 128 bytes per iteration (AVX2 when the CPU has it).
#pragma once

#include <cstddef>

namespace zcoll {

void copyBytes(void* dst, const void* src, size_t bytes);

// The same copy with non-temporal stores: dst's lines go to memory without being read first or kept
// in the cache (half the memory traffic of a copy into a buffer that is out of cache anyway). For
// results this operation does not read again, in operations larger than the cache. Ends with a
// store fence unless `fence` is false (the caller then fences before the data is published).
void streamBytes(void* dst, const void* src, size_t bytes, bool fence = true);
void storeFence();

}  // namespace zcoll
