// adopted_memory.hpp - local registration of plain host buffers (ZCOLL_LOCAL_REGISTER): the pages of
// a buffer that collectives use again are moved into shared memory, so that the processes of this
// host read them in place as they read zcollMemAlloc memory (algorithms/zcopy.hpp).
//
// The first op on a page range only notes it (a one-shot buffer keeps the copying path); the next op
// on it "adopts" the whole pages inside the buffer: a memfd receives their contents and is mapped
// over them (MAP_FIXED, MAP_SHARED), so the buffer's address and bytes stay as they were. The partial
// pages at its ends (head and tail, under a page each) stay private: their bytes travel with the op.
// Only private anonymous memory is adopted (malloc's heap, large blocks and threads' arenas, mmap),
// never a file or the stack.
// What keeps it safe, through UCX's memory hooks (libucm):
//   - munmap, mremap and mmap over an adopted range end its registration (a peer then drops its
//     mapping: the shared-memory generation changes), as UCX's registration cache does; brk, which
//     the hooks do not see, is checked at each use of a range in the brk heap (stillMapped);
//   - madvise(DONTNEED/REMOVE/FREE) first turns the pages back into private zero pages, which is what
//     the caller (an allocator giving memory back) expects of anonymous memory;
//   - a forked child turns every adopted range back into a private copy before it returns from fork,
//     so that parent and child do not share what fork promised to copy (the child pays the copy).
// Without the hooks (UCX absent, or its hooks failed their test) nothing is adopted.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/shared_memory.hpp"

namespace zcoll {

// Finds [p, p + bytes) in adopted memory, or notes or adopts it (adopt: the op asks for it); fills
// *ref for the adopted part [p + ref->head, p + bytes - ref->tail), all but its free generation
// (sharedMemExport's). False: not (yet) shared.
// scope: the other exports of the same call (see ExportScope), or nullptr.
bool adoptedExport(const void* p, size_t bytes, bool adopt, SharedMemRef* ref, ExportScope* scope = nullptr);

// The last communicator that could share memory is gone: every adopted range becomes a private
// mapping of the same pages (no copy) and gives its descriptor up; used again later, it is adopted anew.
void adoptedRelease();

// Whether adoption works in this process; why not, if it does not (installs the hooks on first call).
bool adoptionAvailable(const char** why);

struct AdoptedStats {
  int adopted = 0;  // ranges exportable now
  int stale = 0;    // parts of ranges still shared but no longer registered (reverted at fork)
  uint64_t invalidations = 0;  // registrations ended
  uint64_t heapChecks = 0;     // brk-heap ranges checked by a system call (not vouched for)
};
AdoptedStats adoptedStats();

}  // namespace zcoll
