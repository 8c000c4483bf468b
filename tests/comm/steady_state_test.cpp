// steady_state_test.cpp - the steady state of a communicator takes no page fault and allocates
// nothing: after warm-up, every collective at several sizes runs hundreds of times with the
// process's minor-fault count (getrusage) and its operator new count unchanged. Its own executable:
// it replaces the global operator new to count.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include "tests/common/rank_pool.hpp"
#include "tests/common/sanitizers.hpp"
#include "zcoll/zcoll.h"

namespace {
std::atomic<long> gNews{0};

void* counted(size_t n, size_t align = 0) {
  gNews.fetch_add(1, std::memory_order_relaxed);
  if (n == 0) n = 1;
  void* p = align > alignof(std::max_align_t) ? std::aligned_alloc(align, (n + align - 1) / align * align) : std::malloc(n);
  if (!p) throw std::bad_alloc();
  return p;
}
}  // namespace

void* operator new(size_t n) { return counted(n); }
void* operator new[](size_t n) { return counted(n); }
void* operator new(size_t n, std::align_val_t a) { return counted(n, static_cast<size_t>(a)); }
void* operator new[](size_t n, std::align_val_t a) { return counted(n, static_cast<size_t>(a)); }
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  try { return counted(n); } catch (...) { return nullptr; }
}
void* operator new[](size_t n, const std::nothrow_t&) noexcept {
  try { return counted(n); } catch (...) { return nullptr; }
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { std::free(p); }

namespace {

constexpr bool kSanitized = zcoll::test::kAddressSanitizer || zcoll::test::kThreadSanitizer;

long minorFaults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// Every collective the benchmark measures, at a small, a middle and a large size.
void runAll(zcollComm_t comm, std::vector<float>& a, std::vector<float>& b, int nranks) {
  for (size_t count : {size_t{2}, size_t{16} << 10, size_t{1} << 20}) {
    ASSERT_EQ(zcollAllReduce(a.data(), b.data(), count, zcollFloat, zcollSum, comm, nullptr), zcollSuccess);
    ASSERT_EQ(zcollAllReduce(a.data(), a.data(), count, zcollFloat, zcollSum, comm, nullptr), zcollSuccess);
    const size_t per = count / nranks ? count / nranks : 1;
    ASSERT_EQ(zcollAllGather(a.data(), b.data(), per, zcollFloat, comm, nullptr), zcollSuccess);
    ASSERT_EQ(zcollReduceScatter(a.data(), b.data(), per, zcollFloat, zcollSum, comm, nullptr), zcollSuccess);
    ASSERT_EQ(zcollBroadcast(a.data(), b.data(), count, zcollFloat, 0, comm, nullptr), zcollSuccess);
    ASSERT_EQ(zcollReduce(a.data(), b.data(), count, zcollFloat, zcollSum, 1, comm, nullptr), zcollSuccess);
  }
  ASSERT_EQ(zcollBarrier(comm, nullptr), zcollSuccess);
}

TEST(SteadyState, CollectivesTakeNoPageFaultAndAllocateNothing) {
  if (kSanitized) GTEST_SKIP() << "sanitizers allocate shadow memory and replace the allocator";
  constexpr int kRanks = 2, kRounds = 100;
  zcoll::test::RankPool pool(kRanks, ZCOLL_CONFIG_INITIALIZER);
  ASSERT_TRUE(pool.ok());
  std::vector<std::vector<float>> a(kRanks), b(kRanks);
  for (int r = 0; r < kRanks; ++r) a[r].assign(size_t{2} << 20, 1.0f), b[r].assign(size_t{2} << 20, 0.0f);  // touched
  // Built before the counts are taken: the pool's run() returns once every rank is done.
  const zcoll::test::RankPool::Fn warmUp = [&](int r, zcollComm_t comm) {
    for (int w = 0; w < 5; ++w) runAll(comm, a[r], b[r], kRanks);  // scratch, pools, pages
  };
  const zcoll::test::RankPool::Fn rounds = [&](int r, zcollComm_t comm) {
    for (int i = 0; i < kRounds; ++i) runAll(comm, a[r], b[r], kRanks);
  };
  pool.run(warmUp);
  const long faultsBefore = minorFaults(), newsBefore = gNews.load();
  pool.run(rounds);
  const long faultsAfter = minorFaults(), newsAfter = gNews.load();
  std::printf("%d rounds of 18 collectives on %d ranks: %ld minor page faults, %ld allocations\n", kRounds, kRanks,
              faultsAfter - faultsBefore, newsAfter - newsBefore);
  EXPECT_GT(newsBefore, 0) << "the count must see the library's allocations (creating a communicator makes some)";
  EXPECT_EQ(faultsAfter - faultsBefore, 0);
  EXPECT_EQ(newsAfter - newsBefore, 0);
}

}  // namespace

namespace {

// The zero-copy all-reduce on zcollMemAlloc buffers (in-process ranks: each maps the others' memfds
// like a process would): after the first op maps the peers' buffers, no fault and no allocation.
TEST(SteadyState, ZeroCopyAllReduceTakesNoPageFaultAndAllocatesNothing) {
  if (kSanitized) GTEST_SKIP() << "sanitizers allocate shadow memory and replace the allocator";
  constexpr int kRanks = 2, kRounds = 100;
  constexpr size_t kCount = size_t{1} << 20;  // 4 MiB: above ZCOLL_ZERO_COPY's default
  zcoll::test::RankPool pool(kRanks, ZCOLL_CONFIG_INITIALIZER);
  ASSERT_TRUE(pool.ok());
  float* a[kRanks] = {};
  float* b[kRanks] = {};
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_EQ(zcollMemAlloc(reinterpret_cast<void**>(&a[r]), kCount * sizeof(float)), zcollSuccess);
    ASSERT_EQ(zcollMemAlloc(reinterpret_cast<void**>(&b[r]), kCount * sizeof(float)), zcollSuccess);
    for (size_t i = 0; i < kCount; ++i) a[r][i] = 1.0f, b[r][i] = 0.0f;  // touched
  }
  auto op = [&](int r, zcollComm_t comm) {
    ASSERT_EQ(zcollAllReduce(a[r], b[r], kCount, zcollFloat, zcollSum, comm, nullptr), zcollSuccess);
  };
  const zcoll::test::RankPool::Fn warmUp = [&](int r, zcollComm_t comm) {
    for (int w = 0; w < 5; ++w) op(r, comm);
  };
  const zcoll::test::RankPool::Fn rounds = [&](int r, zcollComm_t comm) {
    for (int i = 0; i < kRounds; ++i) op(r, comm);
  };
  pool.run(warmUp);
  const long faultsBefore = minorFaults(), newsBefore = gNews.load();
  pool.run(rounds);
  const long faultsAfter = minorFaults(), newsAfter = gNews.load();
  std::printf("%d zero-copy all-reduces of 4 MiB on %d ranks: %ld minor page faults, %ld allocations\n", kRounds,
              kRanks, faultsAfter - faultsBefore, newsAfter - newsBefore);
  EXPECT_EQ(faultsAfter - faultsBefore, 0);
  EXPECT_EQ(newsAfter - newsBefore, 0);
  for (int r = 0; r < kRanks; ++r) {
    for (size_t i = 0; i < kCount; i += 4099) ASSERT_EQ(b[r][i], 2.0f) << "rank " << r << " element " << i;
    EXPECT_EQ(zcollMemFree(a[r]), zcollSuccess);
    EXPECT_EQ(zcollMemFree(b[r]), zcollSuccess);
  }
}

}  // namespace
