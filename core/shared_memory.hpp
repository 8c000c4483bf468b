// shared_memory.hpp - host memory that the other processes of this host can map: zcollMemAlloc.
//
// Each allocation is its own memfd, mapped shared here and kept open, so that a peer process can
// open it through /proc/<pid>/fd/<fd> and map the same pages (the shm transport's importMemory):
// collectives on such buffers then read the peers' inputs and write their results in place,
// without the two copies through the transport's slots (algorithms/zcopy.hpp).
// A process-wide registry finds the allocation holding an address; it is touched once per
// operation, never per chunk.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/status.hpp"

namespace zcoll {

// Where a range of shared memory is, as a peer on this host needs it to map the range. id is unique
// within the process (never reused); dev/ino identify the memfd so that a peer can check that the
// file it opened is this one (a pid of another PID namespace would name another process).
struct SharedMemRef {
  int32_t pid = 0;
  int32_t fd = -1;
  uint64_t id = 0;
  uint64_t dev = 0;
  uint64_t ino = 0;
  uint64_t allocBytes = 0;  // the whole allocation (what a peer maps)
  uint64_t offset = 0;      // of the range in it
  uint64_t bytes = 0;       // of the range
  uint64_t freeGeneration = 0;  // sharedMemFreeGeneration() when the ref was made
  // Bytes of the caller's range before and after the shared part (an adopted plain buffer's partial
  // pages, core/adopted_memory.hpp; 0 for zcollMemAlloc memory): [offset, +bytes) is the shared part.
  uint32_t head = 0, tail = 0;
};

// size bytes of shared host memory (rounded up to pages), zero-filled. InvalidArgument for size 0.
Status sharedMemAlloc(size_t size, void** out);
// Frees an allocation of sharedMemAlloc, named by its start. InvalidArgument for any other pointer.
Status sharedMemFree(void* ptr);
// The exports of one call, whose buffers stay allocated until it returns: a brk-heap range checked for
// one buffer vouches for another's below it (core/adopted_memory.cpp), so a call checks one, not each.
struct ExportScope {
  uintptr_t end = 0;     // the highest heap range found intact in this call (0: none yet)
  uint64_t adopted = 0;  // when it was adopted (the table's clock)
  uint64_t checked = 0;  // when it was found intact (a range it vouches for was intact then)
};

// Whether [p, p + bytes) lies inside one allocation; fills *ref if so. ref->freeGeneration counts
// this process's sharedMemFree calls: a peer that sees it change drops its mappings of this
// process's allocations (they may be freed), so that freed memory does not stay alive there.
bool sharedMemFind(const void* p, size_t bytes, SharedMemRef* ref);
// sharedMemFind, else (adopt: ZCOLL_LOCAL_REGISTER) plain memory registered on its reuse
// (core/adopted_memory.hpp), whose ref may leave a head and a tail out.
bool sharedMemExport(const void* p, size_t bytes, bool adopt, SharedMemRef* ref, ExportScope* scope = nullptr);
// This process's id (a ref's pid) without a system call per op: cached, and read again in a forked child.
int32_t sharedMemPid();
// The free generation (see sharedMemFind), and its step when memory a peer may map goes away.
uint64_t sharedMemFreeGeneration();
void sharedMemFreed();

}  // namespace zcoll
