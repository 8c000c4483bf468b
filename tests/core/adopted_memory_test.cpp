// Local registration (core/adopted_memory.hpp): a plain buffer's whole pages move into shared memory in
// place on their second export, keep their address and bytes, and keep the semantics of private
// anonymous memory: munmap ends the registration, madvise(DONTNEED) gives zero pages, a forked child
// gets a private copy; the brk heap is checked at each use. Files and read-only memory stay as they are.
#include <fcntl.h>
#include <linux/mempolicy.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "core/adopted_memory.hpp"

namespace zcoll {
namespace {

constexpr size_t kPage = 4096;

class AdoptedMemory : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* why = nullptr;
    if (!adoptionAvailable(&why)) GTEST_SKIP() << "local registration unavailable here: " << why;
  }
  // An anonymous mapping of `pages` pages (its own, so that munmap is the test's to call).
  static uint8_t* anon(size_t pages, int prot = PROT_READ | PROT_WRITE) {
    void* p = mmap(nullptr, pages * kPage, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
  }
  // `pages` new pages at the brk heap's top (page-aligned: the break moves by *grown bytes); nullptr if
  // the break cannot move. Given back with sbrk(-*grown) once the test has shrunk what it grew.
  static uint8_t* heapPages(size_t pages, intptr_t* grown) {
    auto* top = static_cast<uint8_t*>(sbrk(0));
    const uintptr_t pad = (kPage - reinterpret_cast<uintptr_t>(top) % kPage) % kPage;
    *grown = static_cast<intptr_t>(pad + pages * kPage);
    return sbrk(*grown) == reinterpret_cast<void*>(-1) ? nullptr : top + pad;
  }
  // `pages` fresh pages holding seed's pattern, adopted (exported twice); nullptr if not.
  static uint8_t* adoptedAnon(size_t pages, uint8_t seed, SharedMemRef* ref) {
    uint8_t* m = anon(pages);
    if (!m) return nullptr;
    fill(m, pages * kPage, seed);
    adoptedExport(m, pages * kPage, true, ref);
    return adoptedExport(m, pages * kPage, true, ref) ? m : nullptr;
  }
  static void fill(uint8_t* p, size_t n, uint8_t seed) {
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(seed + i * 7);
  }
  static bool holds(const uint8_t* p, size_t n, uint8_t seed) {
    for (size_t i = 0; i < n; ++i)
      if (p[i] != static_cast<uint8_t>(seed + i * 7)) return false;
    return true;
  }
  // Whether /proc/self/maps maps address a shared from an adopted memfd.
  static bool sharedAt(const void* a) {
    std::ifstream maps("/proc/self/maps");
    for (std::string line; std::getline(maps, line);) {
      uintptr_t lo = 0, hi = 0;
      if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) != 2) continue;
      const auto x = reinterpret_cast<uintptr_t>(a);
      if (lo <= x && x < hi)
        return line.find("/memfd:zcoll-adopt") != std::string::npos && line.find(" rw-s ") != std::string::npos;
    }
    return false;
  }
};

TEST_F(AdoptedMemory, SecondUseMovesTheWholePagesInPlace) {
  uint8_t* m = anon(64);
  ASSERT_NE(m, nullptr);
  uint8_t* buf = m + 100;  // partial pages at both ends
  const size_t bytes = 61 * kPage - 100 + 8;
  fill(m, 64 * kPage, 3);
  SharedMemRef ref;
  EXPECT_FALSE(adoptedExport(buf, bytes, true, &ref)) << "first use: only noted";
  EXPECT_FALSE(adoptedExport(buf, bytes, false, &ref)) << "not wanted (ZCOLL_LOCAL_REGISTER=0)";
  ASSERT_TRUE(adoptedExport(buf, bytes, true, &ref)) << "second use: adopted";
  EXPECT_EQ(ref.head, kPage - 100);
  EXPECT_EQ(ref.bytes, 60 * kPage);
  EXPECT_EQ(ref.tail, bytes - ref.head - ref.bytes);
  EXPECT_EQ(ref.allocBytes, ref.bytes);
  EXPECT_EQ(ref.offset, 0u);
  EXPECT_TRUE(holds(m, 64 * kPage, 3)) << "bytes unchanged, also around the buffer";
  EXPECT_TRUE(sharedAt(buf + ref.head));
  EXPECT_FALSE(sharedAt(buf)) << "the partial head page stays private";
  // Another mapping of the memfd (as a peer makes) sees this process's stores and the other way round.
  const int fd = open(("/proc/self/fd/" + std::to_string(ref.fd)).c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  auto* peer = static_cast<uint8_t*>(mmap(nullptr, ref.allocBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  close(fd);
  ASSERT_NE(peer, MAP_FAILED);
  buf[ref.head + 5] = 0xab;
  EXPECT_EQ(peer[5], 0xab);
  peer[6] = 0xcd;
  EXPECT_EQ(buf[ref.head + 6], 0xcd);
  munmap(peer, ref.allocBytes);
  // Again: found, same id; a part of it too.
  SharedMemRef again;
  ASSERT_TRUE(adoptedExport(buf, bytes, true, &again));
  EXPECT_EQ(again.id, ref.id);
  ASSERT_TRUE(adoptedExport(buf + kPage * 8, kPage * 4, true, &again));
  EXPECT_EQ(again.id, ref.id);
  EXPECT_EQ(again.offset, 8 * kPage);  // page 9 of the mapping is page 8 of the range
  munmap(m, 64 * kPage);
}

TEST_F(AdoptedMemory, MunmapEndsTheRegistration) {
  SharedMemRef ref;
  uint8_t* m = adoptedAnon(32, 1, &ref);
  ASSERT_NE(m, nullptr);
  const AdoptedStats before = adoptedStats();
  const uint64_t generation = sharedMemFreeGeneration();
  ASSERT_EQ(munmap(m, 32 * kPage), 0);
  const AdoptedStats after = adoptedStats();
  EXPECT_EQ(after.adopted, before.adopted - 1);
  EXPECT_EQ(after.invalidations, before.invalidations + 1);
  EXPECT_GT(sharedMemFreeGeneration(), generation) << "peers drop their mappings";
  // New memory at that address is plain again: noted, not found.
  uint8_t* n = static_cast<uint8_t*>(mmap(m, 32 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(n, MAP_FAILED);
  EXPECT_FALSE(adoptedExport(n, 32 * kPage, true, &ref));
  EXPECT_FALSE(sharedAt(n));
  munmap(n, 32 * kPage);
}

TEST_F(AdoptedMemory, MadviseDontNeedGivesZeroPagesAsPrivateMemoryWould) {
  SharedMemRef ref;
  uint8_t* m = adoptedAnon(16, 9, &ref);
  ASSERT_NE(m, nullptr);
  ASSERT_EQ(madvise(m + 4 * kPage, 2 * kPage, MADV_DONTNEED), 0);
  for (size_t i = 4 * kPage; i < 6 * kPage; ++i) ASSERT_EQ(m[i], 0) << "byte " << i;
  EXPECT_TRUE(holds(m, 4 * kPage, 9));
  EXPECT_FALSE(sharedAt(m + 4 * kPage));
  EXPECT_TRUE(sharedAt(m)) << "the rest stays shared (tracked for fork)";
  EXPECT_FALSE(adoptedExport(m, 16 * kPage, true, &ref)) << "the registration ended";
  munmap(m, 16 * kPage);
}

// The brk heap shrinks through brk, which the hooks do not see: each use of an adopted range there
// checks that it is still mapped. Shrunk and grown back (fresh pages at the same addresses), it is
// plain memory again.
TEST_F(AdoptedMemory, TheBrkHeapIsCheckedAtEachUse) {
  intptr_t grown = 0;
  uint8_t* m = heapPages(32, &grown);
  ASSERT_NE(m, nullptr);
  fill(m, 32 * kPage, 2);
  SharedMemRef ref;
  adoptedExport(m, 32 * kPage, true, &ref);
  ASSERT_TRUE(adoptedExport(m, 32 * kPage, true, &ref));
  EXPECT_TRUE(sharedAt(m + 31 * kPage));
  ASSERT_TRUE(adoptedExport(m, 32 * kPage, true, &ref)) << "still there";
  const AdoptedStats before = adoptedStats();
  const uint64_t generation = sharedMemFreeGeneration();
  ASSERT_NE(sbrk(-static_cast<intptr_t>(16 * kPage)), reinterpret_cast<void*>(-1));
  ASSERT_NE(sbrk(static_cast<intptr_t>(16 * kPage)), reinterpret_cast<void*>(-1));
  EXPECT_FALSE(sharedAt(m + 31 * kPage)) << "fresh pages";
  // Released before any use saw it (the last communicator destroyed): the memfd's old bytes must not
  // come back over the fresh pages (malloc's by then: the torch suite's heap was corrupted so).
  std::memset(m + 16 * kPage, 0x3c, 16 * kPage);
  adoptedRelease();
  for (size_t i = 16 * kPage; i < 32 * kPage; ++i) ASSERT_EQ(m[i], 0x3c) << "byte " << i;
  std::memset(m + 16 * kPage, 0, 16 * kPage);
  EXPECT_FALSE(adoptedExport(m, 32 * kPage, true, &ref)) << "not the memfd any more";
  EXPECT_EQ(adoptedStats().invalidations, before.invalidations + 1);
  EXPECT_GT(sharedMemFreeGeneration(), generation);
  EXPECT_TRUE(holds(m, 16 * kPage, 2)) << "the part below the shrink keeps its bytes";
  for (size_t i = 16 * kPage; i < 32 * kPage; ++i) ASSERT_EQ(m[i], 0) << "byte " << i;
  ASSERT_NE(sbrk(-grown), reinterpret_cast<void*>(-1));
}

TEST_F(AdoptedMemory, AForkedChildGetsAPrivateCopy) {
  SharedMemRef ref;
  uint8_t* m = adoptedAnon(16, 5, &ref);
  ASSERT_NE(m, nullptr);
  int toChild[2], toParent[2];
  ASSERT_EQ(pipe(toChild), 0);
  ASSERT_EQ(pipe(toParent), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    char c = 0;
    int status = 0;
    if (!holds(m, 16 * kPage, 5)) status |= 1;  // the parent's bytes at fork
    std::memset(m, 0x11, kPage);                   // not seen by the parent
    if (write(toParent[1], "w", 1) != 1 || read(toChild[0], &c, 1) != 1) status |= 2;
    if (m[kPage] != static_cast<uint8_t>(5 + kPage * 7)) status |= 4;  // the parent's later store not seen
    _exit(status);
  }
  char c = 0;
  ASSERT_EQ(read(toParent[0], &c, 1), 1);
  EXPECT_TRUE(holds(m, kPage, 5)) << "the child's store reached the parent";
  m[kPage] = 0x77;
  ASSERT_EQ(write(toChild[1], "p", 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "bits: 1 bytes at fork, 2 pipe, 4 saw the parent's store";
  EXPECT_TRUE(sharedAt(m)) << "the parent keeps its registration";
  for (int fd : {toChild[0], toChild[1], toParent[0], toParent[1]}) close(fd);
  munmap(m, 16 * kPage);
}

// The check at each use of a brk-heap range: shrunk and grown back between two uses (a buffer freed,
// the heap trimmed, another allocated at the same address), the range is no longer exported. Its
// memfd's pages carry a memory policy no heap page has (where the kernel has NUMA): what the check reads.
TEST_F(AdoptedMemory, AHeapShrunkAndGrownBackBetweenUsesIsSeenAtTheNext) {
  intptr_t grown = 0;
  uint8_t* m = heapPages(8, &grown);
  ASSERT_NE(m, nullptr);
  fill(m, 8 * kPage, 4);
  SharedMemRef ref;
  adoptedExport(m, 8 * kPage, true, &ref);
  ASSERT_TRUE(adoptedExport(m, 8 * kPage, true, &ref));
  int mode = -1;
  if (syscall(SYS_get_mempolicy, &mode, nullptr, 0, m + 7 * kPage, MPOL_F_ADDR) == 0) {
    EXPECT_EQ(mode, MPOL_PREFERRED | MPOL_F_STATIC_NODES) << "the heap range's marker";
  }
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(adoptedExport(m, 8 * kPage, true, &ref)) << "use " << i;
  const AdoptedStats before = adoptedStats();
  ASSERT_NE(sbrk(-static_cast<intptr_t>(2 * kPage)), reinterpret_cast<void*>(-1));
  ASSERT_NE(sbrk(static_cast<intptr_t>(2 * kPage)), reinterpret_cast<void*>(-1));
  fill(m + 6 * kPage, 2 * kPage, 9);
  EXPECT_FALSE(adoptedExport(m, 8 * kPage, true, &ref)) << "the top pages are fresh heap pages now";
  EXPECT_EQ(adoptedStats().invalidations, before.invalidations + 1);
  EXPECT_TRUE(holds(m, 6 * kPage, 4));
  EXPECT_TRUE(holds(m + 6 * kPage, 2 * kPage, 9));
  adoptedRelease();
  ASSERT_NE(sbrk(-grown), reinterpret_cast<void*>(-1));
}

// The exports of one call (ExportScope): a heap range found intact vouches for one below it that was
// intact at some time since the first's adoption, so a call with two such buffers checks one. A range
// below that went with the heap's top before the higher one was adopted over fresh pages is not
// vouched for: its own check finds it gone.
TEST_F(AdoptedMemory, ACheckedHeapRangeVouchesOnlyForOnesBelowItIntactSinceItsAdoption) {
  intptr_t grown = 0;
  uint8_t* low = heapPages(16, &grown);
  ASSERT_NE(low, nullptr);
  uint8_t* high = low + 8 * kPage;
  fill(low, 16 * kPage, 6);
  SharedMemRef ref;
  for (int i = 0; i < 2; ++i) {  // noted, then adopted: the higher first, as zcopy asks
    ExportScope scope;
    adoptedExport(high, 8 * kPage, true, &ref, &scope);
    adoptedExport(low, 8 * kPage, true, &ref, &scope);
  }
  for (int i = 0; i < 3; ++i) {
    ExportScope scope;
    const uint64_t checks = adoptedStats().heapChecks;
    ASSERT_TRUE(adoptedExport(high, 8 * kPage, true, &ref, &scope));
    ASSERT_TRUE(adoptedExport(low, 8 * kPage, true, &ref, &scope));
    EXPECT_EQ(adoptedStats().heapChecks, checks + 1) << "the lower range vouched for, use " << i;
  }
  {  // the lower one first: each is checked
    ExportScope scope;
    const uint64_t checks = adoptedStats().heapChecks;
    ASSERT_TRUE(adoptedExport(low, 8 * kPage, true, &ref, &scope));
    ASSERT_TRUE(adoptedExport(high, 8 * kPage, true, &ref, &scope));
    EXPECT_EQ(adoptedStats().heapChecks, checks + 2);
  }
  // Both go with the heap's top; fresh pages come back; only the higher range is adopted again.
  ASSERT_NE(sbrk(-static_cast<intptr_t>(16 * kPage)), reinterpret_cast<void*>(-1));
  ASSERT_NE(sbrk(static_cast<intptr_t>(16 * kPage)), reinterpret_cast<void*>(-1));
  fill(low, 16 * kPage, 8);
  SharedMemRef other;
  adoptedExport(high + kPage, 6 * kPage, true, &other);
  ASSERT_TRUE(adoptedExport(high + kPage, 6 * kPage, true, &other)) << "adopted over fresh pages";
  ExportScope scope;
  ASSERT_TRUE(adoptedExport(high + kPage, 6 * kPage, true, &other, &scope));
  EXPECT_FALSE(adoptedExport(low, 8 * kPage, true, &ref, &scope)) << "gone before the higher range's adoption";
  EXPECT_TRUE(holds(low, 16 * kPage, 8));
  adoptedRelease();
  ASSERT_NE(sbrk(-grown), reinterpret_cast<void*>(-1));
}

// A range vouched for learns only that it was intact when the vouching check ran. Here another thread's
// frees take the heap's top (and the range's top pages) between the two exports of one call, and a
// range is adopted above on fresh pages meanwhile; that range must not later vouch for the lost pages.
TEST_F(AdoptedMemory, AVouchDatesFromTheCheckThatMadeIt) {
  intptr_t grown = 0;
  uint8_t* m = heapPages(8, &grown);
  ASSERT_NE(m, nullptr);
  fill(m, 8 * kPage, 1);
  SharedMemRef ref;
  adoptedExport(m, 8 * kPage, true, &ref);
  ASSERT_TRUE(adoptedExport(m, 8 * kPage, true, &ref));  // range A = 8 pages
  ExportScope call;
  ASSERT_TRUE(adoptedExport(m, 4 * kPage, true, &ref, &call));  // the call's first buffer: A checked
  // Meanwhile: A's top two pages go with the heap's top, fresh pages come back, C is adopted above A.
  ASSERT_NE(sbrk(-static_cast<intptr_t>(2 * kPage)), reinterpret_cast<void*>(-1));
  ASSERT_NE(sbrk(static_cast<intptr_t>(10 * kPage)), reinterpret_cast<void*>(-1));
  fill(m + 6 * kPage, 10 * kPage, 3);
  uint8_t* c = m + 8 * kPage;
  adoptedExport(c, 8 * kPage, true, &ref);
  ASSERT_TRUE(adoptedExport(c, 8 * kPage, true, &ref));
  ASSERT_TRUE(adoptedExport(m, 2 * kPage, true, &ref, &call)) << "the call's second buffer, vouched for";
  ExportScope later;
  ASSERT_TRUE(adoptedExport(c, 8 * kPage, true, &ref, &later));
  EXPECT_FALSE(adoptedExport(m + 6 * kPage, 2 * kPage, true, &ref, &later)) << "A's top pages are fresh ones";
  EXPECT_TRUE(holds(m + 6 * kPage, 10 * kPage, 3));
  adoptedRelease();
  ASSERT_NE(sbrk(-grown - static_cast<intptr_t>(8 * kPage)), reinterpret_cast<void*>(-1));  // and the 8 pages of C
}

// Each exportable range holds a descriptor: past 64, the one used longest ago gives its up (and its
// buffer is adopted anew on later uses).
TEST_F(AdoptedMemory, AtMost64RangesHoldADescriptor) {
  constexpr int kBuffers = 70;
  uint8_t* m = anon(kBuffers * 3);
  ASSERT_NE(m, nullptr);
  SharedMemRef ref;
  const uint64_t invalidations = adoptedStats().invalidations;
  for (int i = 0; i < kBuffers; ++i) {
    uint8_t* b = m + static_cast<size_t>(i) * 3 * kPage;  // a page apart: separate mappings
    adoptedExport(b, 2 * kPage, true, &ref);
    ASSERT_TRUE(adoptedExport(b, 2 * kPage, true, &ref)) << i;
  }
  EXPECT_LE(adoptedStats().adopted, 64);
  EXPECT_GE(adoptedStats().invalidations, invalidations + kBuffers - 64);
  EXPECT_FALSE(adoptedExport(m, 2 * kPage, true, &ref)) << "the first gave its descriptor up";
  ASSERT_TRUE(adoptedExport(m, 2 * kPage, true, &ref)) << "adopted anew";
  EXPECT_TRUE(adoptedExport(m + static_cast<size_t>(kBuffers - 1) * 3 * kPage, 2 * kPage, true, &ref));
  munmap(m, kBuffers * 3 * kPage);
  EXPECT_EQ(adoptedStats().stale, 0) << "unmapped: nothing left to track";
}

// The last communicator gone: adopted ranges become private mappings of the same pages (no copy, no
// descriptor), no longer exportable; a later use adopts them anew.
TEST_F(AdoptedMemory, ReleaseMakesRangesPrivateInPlace) {
  SharedMemRef ref;
  uint8_t* m = adoptedAnon(16, 4, &ref);
  ASSERT_NE(m, nullptr);
  const int fd = ref.fd;
  adoptedRelease();
  EXPECT_FALSE(sharedAt(m)) << "a private mapping now";
  EXPECT_EQ(fcntl(fd, F_GETFD), -1) << "its descriptor closed";
  EXPECT_TRUE(holds(m, 16 * kPage, 4));
  m[3] = 0x5a;  // a store after the release is the process's alone
  EXPECT_EQ(m[3], 0x5a);
  ASSERT_EQ(madvise(m, kPage, MADV_DONTNEED), 0);
  EXPECT_EQ(m[3], 0) << "given back: zero, as private memory";
  EXPECT_FALSE(adoptedExport(m + kPage, 8 * kPage, true, &ref));
  EXPECT_TRUE(adoptedExport(m + kPage, 8 * kPage, true, &ref)) << "adopted anew";
  munmap(m, 16 * kPage);
}

TEST_F(AdoptedMemory, FilesReadOnlyMemoryAndSmallBuffersStayAsTheyAre) {
  SharedMemRef ref;
  char path[] = "/tmp/zcoll-adopt-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  unlink(path);
  ASSERT_EQ(ftruncate(fd, 16 * kPage), 0);
  void* file = mmap(nullptr, 16 * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  close(fd);
  ASSERT_NE(file, MAP_FAILED);
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(adoptedExport(file, 16 * kPage, true, &ref)) << "a file mapping";
  munmap(file, 16 * kPage);
  uint8_t* ro = anon(16, PROT_READ);
  ASSERT_NE(ro, nullptr);
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(adoptedExport(ro, 16 * kPage, true, &ref)) << "read-only memory";
  munmap(ro, 16 * kPage);
  uint8_t* small = anon(2);
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(adoptedExport(small + 8, kPage, true, &ref)) << "no whole page inside";
  munmap(small, 2 * kPage);
}

// A ref names its process by a cached pid: a forked child's refs name the child.
TEST(SharedMemPid, IsThisProcessAlsoInAForkedChild) {
  ASSERT_EQ(sharedMemPid(), static_cast<int32_t>(getpid()));
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) _exit(sharedMemPid() == static_cast<int32_t>(getpid()) ? 0 : 1);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child's refs name its parent";
  EXPECT_EQ(sharedMemPid(), static_cast<int32_t>(getpid()));
}

}  // namespace
}  // namespace zcoll
