// adopted_memory.cpp - see adopted_memory.hpp.
//
// The memory hooks run inside munmap, madvise and brk, maybe called by malloc with its locks held: the
// table is a fixed array under a spinlock, and nothing under that lock allocates, logs or calls a
// hooked function (the mappings here are raw system calls).
#include "core/adopted_memory.hpp"

#include <fcntl.h>
#include <linux/mempolicy.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string_view>

#ifdef ZCOLL_HAVE_UCM
#include <ucm/api/ucm.h>
#endif

namespace zcoll {
namespace {

constexpr uintptr_t kPage = 4096;
constexpr int kMaxRanges = 512;
// Exportable ranges hold a descriptor each: beyond this many, the one used longest ago gives its up
// (it stays shared until unmapped, Stale; used again, it is adopted anew).
constexpr int kMaxAdopted = 64;
constexpr int kMaxCandidates = 16;
constexpr std::string_view kMemfdName = "zcoll-adopt";
// Ids of adopted ranges are apart from zcollMemAlloc's (a peer caches its mappings by id).
constexpr uint64_t kIdBase = uint64_t{1} << 62;

// Adopted: shared, exportable (holds its memfd). Stale: still shared, no longer exportable (reverted at
// fork). Private: released (adoptedRelease): a private mapping of its memfd, tracked for madvise only.
enum class State : uint8_t { Free, Adopted, Stale, Private };

struct Range {
  uintptr_t begin, end;
  State state;
  bool heap;    // in the brk heap (see stillMapped)
  bool marked;  // heap: its memfd carries kMarker (see stillMapped)
  int fd;     // Adopted: the memfd (peers open it through /proc/<pid>/fd)
  uint64_t id, dev, ino;
  uint64_t used;  // Adopted: when last exported (the table's clock)
  uint64_t adoptedAt, intactAt;  // heap: when adopted, when last known intact (see vouches)
};

struct Table {
  std::atomic<bool> locked{false};
  Range ranges[kMaxRanges];
  uintptr_t candBegin[kMaxCandidates], candEnd[kMaxCandidates];
  int nextCand;
  uint64_t nextId, clock;
  uint64_t invalidations;
  uint64_t heapChecks;
  bool full;  // a range could not be tracked (then adoption stops: see track)
  int pagemap;  // /proc/self/pagemap + 1 (0: not open; a forked child reopens its own)
};
constinit Table gTable{};  // constant-initialized: hooks may fire before any constructor ran

void lock() {
  while (gTable.locked.exchange(true, std::memory_order_acquire))
    while (gTable.locked.load(std::memory_order_relaxed)) __builtin_ia32_pause();
}
void unlock() { gTable.locked.store(false, std::memory_order_release); }

void* rawMmap(uintptr_t addr, size_t len, int prot, int flags, int fd) {
  return reinterpret_cast<void*>(::syscall(SYS_mmap, addr, len, prot, flags, fd, 0));
}
void rawMunmap(void* p, size_t len) { ::syscall(SYS_munmap, p, len); }

// Under the lock: an entry for [b, e) in that state, or the table is full (adoption then stops: a
// shared range nobody tracks would not be reverted at fork).
void track(uintptr_t b, uintptr_t e, State state) {
  if (b >= e) return;
  for (Range& r : gTable.ranges)
    if (r.state == State::Free) {
      r = Range{b, e, state, false, false, -1, 0, 0, 0, 0, 0, 0};
      return;
    }
  gTable.full = true;
}

// Under the lock: [b, e) is unmapped, moved, or (zero: reverted to zero pages first) given back.
// Returns whether an exportable range ended.
bool forgetLocked(uintptr_t b, uintptr_t e, bool zero) {
  bool ended = false;
  for (Range& r : gTable.ranges) {
    if (r.state == State::Free || r.end <= b || e <= r.begin) continue;
    const uintptr_t lo = b > r.begin ? b : r.begin, hi = e < r.end ? e : r.end;
    if (zero) rawMmap(lo, hi - lo, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1);
    if (r.state == State::Adopted) {
      ::close(r.fd);
      ++gTable.invalidations;
      ended = true;
    }
    const Range was = r;
    r.state = State::Free;
    const State outer = was.state == State::Private ? State::Private : State::Stale;
    track(was.begin, lo, outer);
    track(hi, was.end, outer);
  }
  for (int i = 0; i < kMaxCandidates; ++i)
    if (gTable.candBegin[i] < e && b < gTable.candEnd[i]) gTable.candBegin[i] = gTable.candEnd[i] = 0;
  return ended;
}

// Under the lock: beyond kMaxAdopted exportable ranges, the one used longest ago closes its memfd.
bool demoteOldest() {
  int adopted = 0;
  Range* oldest = nullptr;
  for (Range& r : gTable.ranges)
    if (r.state == State::Adopted) {
      ++adopted;
      if (!oldest || r.used < oldest->used) oldest = &r;
    }
  if (adopted <= kMaxAdopted) return false;
  ::close(oldest->fd);
  oldest->fd = -1;
  oldest->state = State::Stale;
  ++gTable.invalidations;
  return true;
}

void forget(uintptr_t b, uintptr_t e, bool zero) {
  lock();
  const bool ended = forgetLocked(b, e, zero);
  unlock();
  if (ended) sharedMemFreed();
}

#ifdef ZCOLL_HAVE_UCM
// Before each call that unmaps, moves or gives back pages (the native events, which say which call:
// madvise's pages must turn into zero pages, mremap's must keep their bytes).
void onMemoryEvent(ucm_event_type_t type, ucm_event_t* ev, void*) {
  auto page = [](const void* a) { return reinterpret_cast<uintptr_t>(a) & ~(kPage - 1); };
  auto end = [](const void* a, size_t len) { return (reinterpret_cast<uintptr_t>(a) + len + kPage - 1) & ~(kPage - 1); };
  switch (type) {
    case UCM_EVENT_MUNMAP:
      forget(page(ev->munmap.address), end(ev->munmap.address, ev->munmap.size), false);
      break;
    case UCM_EVENT_MREMAP:
      forget(page(ev->mremap.address), end(ev->mremap.address, ev->mremap.old_size), false);
      break;
    case UCM_EVENT_MMAP:
      if (ev->mmap.flags & MAP_FIXED) forget(page(ev->mmap.address), end(ev->mmap.address, ev->mmap.size), false);
      break;
    case UCM_EVENT_SHMAT:
      if (ev->shmat.shmaddr) forget(page(ev->shmat.shmaddr), UINTPTR_MAX, false);  // its size is not known here
      break;
    case UCM_EVENT_MADVISE: {
      const int a = ev->madvise.advice;
      if (a == MADV_DONTNEED || a == MADV_REMOVE || a == MADV_FREE || a == 24 /* MADV_DONTNEED_LOCKED */)
        forget(page(ev->madvise.addr), end(ev->madvise.addr, ev->madvise.length), true);
      break;
    }
    default:
      break;
  }
}
constexpr int kEvents = UCM_EVENT_MUNMAP | UCM_EVENT_MREMAP | UCM_EVENT_MMAP | UCM_EVENT_SHMAT | UCM_EVENT_MADVISE;
#endif

// fork: the child turns every shared range back into a private copy (fork's promise) and closes the
// memfds it inherited. The prepare handler only snapshots the table: holding the lock across fork
// would deadlock with a thread in free() that holds a malloc lock (fork takes those after the
// handlers) and waits for this lock in a hook. A range adopted between the snapshot and the fork
// stays shared in the child (an adoption racing a fork of another thread).
Range gForkSnapshot[kMaxRanges];
void forkPrepare() {
  lock();
  std::memcpy(static_cast<void*>(gForkSnapshot), static_cast<const void*>(gTable.ranges), sizeof gForkSnapshot);
  unlock();
}
void forkChild() {
  gTable.locked.store(false, std::memory_order_relaxed);  // its holder, if any, is not in the child
  for (Range& r : gForkSnapshot) {
    if (r.state == State::Free || r.state == State::Private) continue;  // Private forks as private memory does
    const size_t len = r.end - r.begin;
    // (msync fails on a range no longer mapped: nothing to copy then)
    void* copy = ::msync(reinterpret_cast<void*>(r.begin), len, MS_ASYNC) != 0
                     ? MAP_FAILED
                     : rawMmap(0, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1);
    if (copy != MAP_FAILED) {
      std::memcpy(copy, reinterpret_cast<void*>(r.begin), len);
      if (::syscall(SYS_mremap, copy, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, r.begin) == -1) rawMunmap(copy, len);
    }
    struct stat st {};  // still that memfd (the parent may have closed it after the snapshot)
    if (r.state == State::Adopted && ::fstat(r.fd, &st) == 0 && static_cast<uint64_t>(st.st_ino) == r.ino) ::close(r.fd);
  }
  for (Range& r : gTable.ranges) r.state = State::Free;
  for (int i = 0; i < kMaxCandidates; ++i) gTable.candBegin[i] = gTable.candEnd[i] = 0;
  if (gTable.pagemap > 0) ::close(gTable.pagemap - 1);
  gTable.pagemap = 0;
}

// A heap range's memfd pages carry a memory policy no heap page has: preferred node, static nodes.
// They are populated before it is set, so it places nothing; get_mempolicy reads it back from the
// mapping at an address (mbind and get_mempolicy are plain system calls: no hook, no allocation).
constexpr int kMarker = MPOL_PREFERRED | MPOL_F_STATIC_NODES;

bool mark(uintptr_t b, size_t len) {
  unsigned long node0 = 1;
  return ::syscall(SYS_mbind, b, len, kMarker, &node0, sizeof node0 * 8, 0) == 0;
}

// Under the lock: whether a brk-heap range still maps its memfd. The heap shrinks through brk, which
// UCM's hooks do not see here, and may grow back with fresh pages at the same addresses. Shrinking
// takes the top first, so the range's last page tells: the mapping there still has the marker policy
// (one get_mempolicy, 0.4 us here), or without it (a kernel without NUMA) /proc/self/pagemap's bit 61
// marks a file or shared page (one pread, 0.85 us). A private page, or none, means the range is gone.
bool stillMapped(const Range& r) {
  if (!r.heap) return true;
  ++gTable.heapChecks;
  if (r.marked) {
    int mode = -1;
    return ::syscall(SYS_get_mempolicy, &mode, nullptr, 0, r.end - kPage, MPOL_F_ADDR) == 0 && mode == kMarker;
  }
  if (gTable.pagemap == 0) gTable.pagemap = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC) + 1;
  uint64_t entry = 0;
  const off_t at = static_cast<off_t>((r.end - kPage) / kPage * sizeof entry);
  if (gTable.pagemap <= 0 || ::pread(gTable.pagemap - 1, &entry, sizeof entry, at) != sizeof entry) return false;
  return (entry >> 63 & 1) && (entry >> 61 & 1);
}

// Under the lock: whether a heap range found intact earlier in the same call vouches for r. A range
// is intact exactly when the heap's top stayed above its end since it was adopted (hooks see every
// other way its pages could go); so the scope's range, intact when checked, says the top stayed above
// scope->end from its adoption to that check, and r, below it and intact at some time in between, was
// intact at that check too - which is all r learns (its intactAt): the lock was let go since, and
// only the caller's buffer inside r is sure to stay (it is allocated until the call returns).
bool vouches(const ExportScope* scope, const Range& r) {
  return scope && scope->end != 0 && r.end <= scope->end && r.intactAt >= scope->adopted;
}

// Under the lock: r (a heap range) was just checked (or adopted) and is intact, at the table's clock.
void intact(Range& r, ExportScope* scope) {
  r.intactAt = gTable.clock;
  if (scope && r.end > scope->end) *scope = ExportScope{r.end, r.adoptedAt, gTable.clock};
}

struct Hooks {
  bool ok = false;
  const char* why = "not tried";
};

const Hooks& hooks() {
  static const Hooks h = [] {
    Hooks x;
#ifdef ZCOLL_HAVE_UCM
    const int events = kEvents;
    if (ucm_set_event_handler(events, -1, onMemoryEvent, nullptr) != UCS_OK) {
      x.why = "UCX's memory hooks could not be installed (UCX_MEM_EVENTS=no, or another hook holds them)";
    } else if (ucm_test_events(kEvents) != UCS_OK) {
      ucm_unset_event_handler(events, onMemoryEvent, nullptr);
      x.why = "UCX's memory hooks failed their test (munmap and madvise are not seen)";
    } else if (::pthread_atfork(forkPrepare, nullptr, forkChild) != 0) {
      ucm_unset_event_handler(events, onMemoryEvent, nullptr);
      x.why = "pthread_atfork failed";
    } else {
      x.ok = true;
      x.why = "";
    }
#else
    x.why = "built without UCX's memory hooks (libucm)";
#endif
    return x;
  }();
  return h;
}

// Where the brk heap starts (/proc/self/stat's start_brk, field 47); 0 if unknown (every range below
// the break then counts as heap: checked, never missed).
uintptr_t heapStart() {
  static const uintptr_t start = [] {
    uintptr_t v = 0;
    if (FILE* f = std::fopen("/proc/self/stat", "re")) {
      char buf[1024];
      const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
      std::fclose(f);
      buf[n] = 0;
      const char* at = std::strrchr(buf, ')');
      for (int field = 2; at && *at && field < 47; ++at)
        if (*at == ' ') ++field;
      if (at) v = static_cast<uintptr_t>(std::strtoull(at, nullptr, 10));
    }
    return v;
  }();
  return start;
}

// Whether every page of [b, e) is private anonymous read-write memory or adopted memory, mapped
// without holes, and the process is far from its mapping limit (each adoption splits a mapping).
bool plainPages(uintptr_t b, uintptr_t e, bool* heap) {
  FILE* f = std::fopen("/proc/self/maps", "re");
  if (!f) return false;
  char line[512];
  uintptr_t covered = b;
  long lines = 0;
  bool ok = true;
  while (std::fgets(line, sizeof line, f)) {
    ++lines;
    uintptr_t lo = 0, hi = 0;
    char perms[8] = {};
    unsigned long long inode = 0;
    int pathAt = 0;
    if (std::sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %7s %*s %*s %llu %n", &lo, &hi, perms, &inode, &pathAt) < 4)
      continue;
    if (hi <= b || e <= lo || !ok) continue;
    std::string_view path(line + pathAt);
    while (!path.empty() && (path.back() == '\n' || path.back() == ' ')) path.remove_suffix(1);
    const bool anon = std::string_view(perms) == "rw-p" && inode == 0 &&
                      (path.empty() || path == "[heap]" || path.starts_with("[anon:"));
    // ours: adopted (shared), or released (a private mapping of the memfd)
    const bool ours = (std::string_view(perms) == "rw-s" || std::string_view(perms) == "rw-p") &&
                      path.starts_with("/memfd:") && path.substr(7).starts_with(kMemfdName);
    ok = (anon || ours) && lo <= covered;
    covered = hi;
  }
  std::fclose(f);
  // In the brk heap: by address, since a range adopted before shows as its memfd, not as [heap].
  const uintptr_t brk = static_cast<uintptr_t>(::syscall(SYS_brk, 0));
  *heap = b < brk && heapStart() < e;
  long limit = 65530;
  if (FILE* m = std::fopen("/proc/sys/vm/max_map_count", "re")) {
    if (std::fscanf(m, "%ld", &limit) != 1) limit = 65530;
    std::fclose(m);
  }
  return ok && covered >= e && lines + 64 < limit;
}

void fill(const Range& r, uintptr_t p, size_t bytes, uintptr_t b, uintptr_t e, SharedMemRef* ref) {
  ref->pid = sharedMemPid();
  ref->fd = r.fd;
  ref->id = r.id;
  ref->dev = r.dev;
  ref->ino = r.ino;
  ref->allocBytes = r.end - r.begin;
  ref->offset = b - r.begin;
  ref->bytes = e - b;
  ref->head = static_cast<uint32_t>(b - p);
  ref->tail = static_cast<uint32_t>(p + bytes - e);
}

// Moves [b, e) into a new memfd mapped in place; false if it cannot (the pages stay as they were).
bool adopt(uintptr_t p, size_t bytes, uintptr_t b, uintptr_t e, SharedMemRef* ref, ExportScope* scope) {
  bool heap = false;
  if (!plainPages(b, e, &heap)) return false;
  const size_t len = e - b;
  const int fd = ::memfd_create(kMemfdName.data(), MFD_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  void* staging = MAP_FAILED;
  if (::ftruncate(fd, static_cast<off_t>(len)) == 0 && ::fstat(fd, &st) == 0)
    staging = rawMmap(0, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd);
  if (staging == MAP_FAILED) {
    ::close(fd);
    return false;
  }
  lock();
  // Room for the new range and the outer parts of the two older ones it may cut.
  int free = 0;
  for (const Range& r : gTable.ranges) free += r.state == State::Free;
  bool done = false, ended = false;
  if (free >= 3 && !gTable.full) {
    // Under the lock: a hook (munmap, madvise) of another thread on these pages waits for the move.
    std::memcpy(staging, reinterpret_cast<void*>(b), len);
    if (rawMmap(b, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_POPULATE, fd) != MAP_FAILED) {
      ended = forgetLocked(b, e, false);  // older ranges on these pages end; their outer parts stay tracked
      for (Range& r : gTable.ranges)
        if (r.state == State::Free) {
          r = Range{b, e, State::Adopted, heap, heap && mark(b, len), fd, kIdBase + ++gTable.nextId,
                    static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino), ++gTable.clock,
                    gTable.clock, gTable.clock};
          if (heap) intact(r, scope);
          fill(r, p, bytes, b, e, ref);
          done = true;
          break;
        }
      ended = demoteOldest() || ended;
    }
  }
  unlock();
  rawMunmap(staging, len);
  if (!done) ::close(fd);
  if (ended) sharedMemFreed();
  return done;
}

}  // namespace

bool adoptionAvailable(const char** why) {
  const Hooks& h = hooks();
  if (why) *why = h.why;
  return h.ok;
}

bool adoptedExport(const void* ptr, size_t bytes, bool wanted, SharedMemRef* ref, ExportScope* scope) {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  const uintptr_t b = (p + kPage - 1) & ~(kPage - 1), e = (p + bytes) & ~(kPage - 1);
  if (!wanted || e <= b || !hooks().ok) return false;
  lock();
  bool ended = false;
  for (Range& r : gTable.ranges)
    if (r.state == State::Adopted && r.begin <= b && e <= r.end) {
      const bool vouched = r.heap && vouches(scope, r);
      if (r.heap && !vouched && !stillMapped(r)) {  // gone with the heap's top: it starts over below
        ended = forgetLocked(r.begin, r.end, false);
        break;
      }
      fill(r, p, bytes, b, e, ref);
      r.used = ++gTable.clock;
      if (vouched) r.intactAt = std::max(r.intactAt, scope->checked);
      else if (r.heap) intact(r, scope);
      unlock();
      return true;
    }
  // Seen before (and not unmapped since): adopt; else note it.
  bool seen = false;
  for (int i = 0; i < kMaxCandidates && !seen; ++i)
    if (gTable.candBegin[i] <= b && e <= gTable.candEnd[i] && gTable.candEnd[i] > 0) {
      seen = true;
      gTable.candBegin[i] = gTable.candEnd[i] = 0;
    }
  if (!seen) {
    const int i = gTable.nextCand++ % kMaxCandidates;
    gTable.candBegin[i] = b;
    gTable.candEnd[i] = e;
  }
  const bool full = gTable.full;
  unlock();
  if (ended) sharedMemFreed();
  if (!seen || full) return false;
  return adopt(p, bytes, b, e, ref, scope);
}

void adoptedRelease() {
  bool ended = false;
  lock();
  for (Range& r : gTable.ranges) {
    if (r.state != State::Adopted) continue;
    // A brk-heap range the heap's top took away (and maybe gave back as fresh pages, now malloc's):
    // the memfd's old bytes must not go back over them.
    if (!stillMapped(r)) {
      ended = forgetLocked(r.begin, r.end, false) || ended;
      continue;
    }
    // The same pages, now private: no copy, and a store of another thread lands either in the file
    // before or in its private copy after (mmap replaces the mapping atomically).
    if (rawMmap(r.begin, r.end - r.begin, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, r.fd) == MAP_FAILED)
      continue;  // stays Adopted
    ::close(r.fd);
    r.fd = -1;
    r.state = State::Private;
    ended = true;
  }
  unlock();
  if (ended) sharedMemFreed();
}

AdoptedStats adoptedStats() {
  AdoptedStats s;
  lock();
  for (const Range& r : gTable.ranges) {
    if (r.state == State::Adopted) ++s.adopted;
    if (r.state == State::Stale) ++s.stale;
  }
  s.invalidations = gTable.invalidations;
  s.heapChecks = gTable.heapChecks;
  unlock();
  return s;
}

}  // namespace zcoll
