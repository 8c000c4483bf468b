// shared_memory.cpp - see shared_memory.hpp.
#include "core/shared_memory.hpp"

#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <map>
#include <mutex>
#include <shared_mutex>

#include "core/adopted_memory.hpp"
#include "core/socket.hpp"

namespace zcoll {
namespace {

struct Allocation {
  size_t bytes;
  int fd;
  uint64_t id;
  uint64_t dev, ino;
};

struct Registry {
  std::shared_mutex mutex;
  std::map<uintptr_t, Allocation> byStart;  // start address -> allocation
  uint64_t nextId = 1;
};

std::atomic<uint64_t> gFrees{0};  // lock-free: memory hooks step it (core/adopted_memory.cpp)

std::atomic<int32_t> gPid{0};  // 0: not read yet in this process

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: frees may come from static destructors
  return *r;
}

}  // namespace

Status sharedMemAlloc(size_t size, void** out) {
  if (size == 0) return invalidArgument("size: 0 (nothing to allocate)");
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  if (size > PTRDIFF_MAX - page) return invalidArgument("size = {}: beyond the address space", size);
  const size_t bytes = (size + page - 1) / page * page;
  Fd fd(::memfd_create("zcoll-mem", MFD_CLOEXEC));
  if (!fd.valid()) return systemError("memfd_create (zcollMemAlloc)", errno);
  if (::ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0)
    return systemError(fmt::format("ftruncate of a {}-byte shared allocation", bytes), errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return systemError("fstat (zcollMemAlloc)", errno);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) return systemError(fmt::format("mmap of a {}-byte shared allocation", bytes), errno);
  ::madvise(p, bytes, MADV_HUGEPAGE);  // best effort: shmem THP may be off
  Registry& r = registry();
  std::unique_lock lock(r.mutex);
  r.byStart[reinterpret_cast<uintptr_t>(p)] =
      Allocation{bytes, fd.release(), r.nextId++, static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
  *out = p;
  return Status::ok();
}

Status sharedMemFree(void* ptr) {
  if (!ptr) return invalidArgument("ptr: NULL pointer");
  Registry& r = registry();
  Allocation a{};
  {
    std::unique_lock lock(r.mutex);
    auto it = r.byStart.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == r.byStart.end())
      return invalidArgument("ptr = {}: not the start of a live zcollMemAlloc allocation", ptr);
    a = it->second;
    r.byStart.erase(it);
    sharedMemFreed();
  }
  ::munmap(ptr, a.bytes);
  ::close(a.fd);
  return Status::ok();
}

int32_t sharedMemPid() {
  int32_t pid = gPid.load(std::memory_order_relaxed);
  if (pid != 0) return pid;
  static const bool forgetAtFork =
      ::pthread_atfork(nullptr, nullptr, [] { gPid.store(0, std::memory_order_relaxed); }) == 0;
  pid = static_cast<int32_t>(::getpid());
  if (forgetAtFork) gPid.store(pid, std::memory_order_relaxed);
  return pid;
}

bool sharedMemFind(const void* p, size_t bytes, SharedMemRef* ref) {
  Registry& r = registry();
  const auto addr = reinterpret_cast<uintptr_t>(p);
  std::shared_lock lock(r.mutex);
  if (r.byStart.empty()) return false;
  auto it = r.byStart.upper_bound(addr);
  if (it == r.byStart.begin()) return false;
  --it;
  const Allocation& a = it->second;
  const uintptr_t offset = addr - it->first;
  if (offset > a.bytes || bytes > a.bytes - offset) return false;
  ref->pid = sharedMemPid();
  ref->fd = a.fd;
  ref->id = a.id;
  ref->dev = a.dev;
  ref->ino = a.ino;
  ref->allocBytes = a.bytes;
  ref->offset = offset;
  ref->bytes = bytes;
  ref->freeGeneration = sharedMemFreeGeneration();
  ref->head = ref->tail = 0;
  return true;
}

bool sharedMemExport(const void* p, size_t bytes, bool adopt, SharedMemRef* ref, ExportScope* scope) {
  if (sharedMemFind(p, bytes, ref)) return true;
  if (!adoptedExport(p, bytes, adopt, ref, scope)) return false;
  // After any move it made: a peer holding an older range of these pages (ended by it) drops it.
  ref->freeGeneration = sharedMemFreeGeneration();
  return true;
}

uint64_t sharedMemFreeGeneration() { return gFrees.load(std::memory_order_acquire); }
void sharedMemFreed() { gFrees.fetch_add(1, std::memory_order_acq_rel); }

}  // namespace zcoll
