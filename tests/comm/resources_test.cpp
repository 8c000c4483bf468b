// resources_test.cpp - what a communicator leaves behind (docs/reliability.md): after destroy, and
// after abort of a stuck collective, no thread, file descriptor or shared mapping of it remains;
// under load (100,000 small all-reduces; 1,000 create/destroy cycles) thread count, fd count and
// RSS stay flat. Counts are read from /proc/self, so this suite runs in a process of its own.
#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/common/sanitizers.hpp"
#include "zcoll/zcoll.h"

namespace zcoll::test {
namespace {

int countEntries(const char* dir) {
  DIR* d = opendir(dir);
  if (!d) return -1;
  int n = 0;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') ++n;
  closedir(d);
  return n;
}

struct Usage {
  int threads = 0;
  int fds = 0;
  int sharedMaps = 0;  // shared memfd or /dev/shm mappings (a registered buffer released by the last
                       // destroy stays a private mapping of its memfd: the caller's memory, not shared)
  long rssKiB = 0;
};

Usage usage() {
  Usage u;
  u.threads = countEntries("/proc/self/task");
  u.fds = countEntries("/proc/self/fd") - 1;  // the directory being read
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    const bool shared = line.size() > 30 && line.find(" rw-s ") != std::string::npos;
    if (shared && (line.find("/memfd:") != std::string::npos || line.find("/dev/shm/") != std::string::npos))
      ++u.sharedMaps;
  }
  std::ifstream statm("/proc/self/statm");
  long size = 0, resident = 0;
  statm >> size >> resident;
  u.rssKiB = resident * (sysconf(_SC_PAGESIZE) / 1024);
  return u;
}

// A joined thread can still be listed in /proc/self/task for a moment (the kernel reaps it after
// pthread_join returns): counts are taken once they have settled.
Usage settledUsage() {
  Usage u = usage();
  for (int stable = 0, i = 0; stable < 5 && i < 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const Usage v = usage();
    stable = v.threads == u.threads && v.fds == u.fds ? stable + 1 : 0;
    u = v;
  }
  return u;
}

std::string show(const Usage& u) {
  return "threads " + std::to_string(u.threads) + ", fds " + std::to_string(u.fds) + ", shared maps " +
         std::to_string(u.sharedMaps) + ", rss " + std::to_string(u.rssKiB) + " KiB";
}

zcollConfig_t config(int timeoutMs = 20000) {
  zcollConfig_t c = ZCOLL_CONFIG_INITIALIZER;
  c.timeoutMs = timeoutMs;
  return c;
}

// Creates an n-rank communicator (one thread per rank), runs body(rank, comm) on each, destroys.
template <typename Body>
void withComms(int n, Body&& body, zcollConfig_t cfg = config()) {
  zcollUniqueId id;
  ASSERT_EQ(zcollGetUniqueId(&id), zcollSuccess);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      zcollComm_t comm = nullptr;
      ASSERT_EQ(zcollCommInitRankConfig(&comm, n, id, r, &cfg), zcollSuccess) << zcollGetLastError(nullptr);
      body(r, comm);
      EXPECT_EQ(zcollCommDestroy(comm), zcollSuccess);
    });
  }
  for (auto& t : threads) t.join();
}

// Runtimes start helper threads lazily (ThreadSanitizer's background thread, for one): a first
// communicator before the counts are taken keeps them out of the comparison.
void warmUp() {
  withComms(2, [](int, zcollComm_t comm) {
    float x = 1;
    EXPECT_EQ(zcollAllReduce(&x, &x, 1, zcollFloat, zcollSum, comm, nullptr), zcollSuccess);
  });
}

TEST(Resources, DestroyLeavesNoThreadFdOrMapping) {
  warmUp();
  for (bool async : {false, true}) {  // inline execution, and on the progress thread
    const Usage before = settledUsage();
    withComms(3, [async](int, zcollComm_t comm) {
      std::vector<float> x(100000, 1.0f);
      if (async) {
        zcollRequest_t req = nullptr;
        ASSERT_EQ(zcollAllReduceAsync(x.data(), x.data(), x.size(), zcollFloat, zcollSum, comm, &req), zcollSuccess);
        EXPECT_EQ(zcollWait(req), zcollSuccess);
      } else {
        EXPECT_EQ(zcollAllReduce(x.data(), x.data(), x.size(), zcollFloat, zcollSum, comm, nullptr), zcollSuccess);
      }
      EXPECT_EQ(x[0], 3.0f);
    });
    const Usage after = settledUsage();
    EXPECT_EQ(after.threads, before.threads) << show(before) << " -> " << show(after);
    EXPECT_EQ(after.fds, before.fds) << show(before) << " -> " << show(after);
    EXPECT_EQ(after.sharedMaps, before.sharedMaps) << show(before) << " -> " << show(after);
  }
}

// A collective stuck on a peer that never comes: abort from another thread returns it within a
// second, and after destroy nothing of the communicator remains.
TEST(Resources, AbortOfAStuckCollectiveLeavesNothing) {
  warmUp();
  const Usage before = settledUsage();
  zcollUniqueId id;
  ASSERT_EQ(zcollGetUniqueId(&id), zcollSuccess);
  zcollComm_t comms[2] = {};
  zcollConfig_t cfg = config(600000);
  std::thread t1([&] { ASSERT_EQ(zcollCommInitRankConfig(&comms[1], 2, id, 1, &cfg), zcollSuccess); });
  ASSERT_EQ(zcollCommInitRankConfig(&comms[0], 2, id, 0, &cfg), zcollSuccess);
  t1.join();
  std::atomic<bool> returned{false};
  zcollResult_t result = zcollSuccess;
  std::thread stuck([&] {
    std::vector<float> x(100000, 1.0f);
    result = zcollAllReduce(x.data(), x.data(), x.size(), zcollFloat, zcollSum, comms[0], nullptr);
    returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(returned.load());
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(zcollCommAbort(comms[0]), zcollSuccess);
  stuck.join();
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
  std::printf("abort latency: %lld ms\n", static_cast<long long>(ms));
  EXPECT_LT(ms, 1000);
  EXPECT_EQ(result, zcollAborted);
  EXPECT_EQ(zcollCommAbort(comms[1]), zcollSuccess);  // abort also frees: no destroy after it
  const Usage after = settledUsage();
  EXPECT_EQ(after.threads, before.threads) << show(before) << " -> " << show(after);
  EXPECT_EQ(after.fds, before.fds) << show(before) << " -> " << show(after);
  EXPECT_EQ(after.sharedMaps, before.sharedMaps) << show(before) << " -> " << show(after);
}

// AddressSanitizer holds freed memory in quarantine (up to 256 MiB), so RSS says nothing about
// leaks there (LeakSanitizer checks those); the release build checks RSS.
constexpr bool kRssMeaningful = !kAddressSanitizer;

bool within5Percent(double before, double after) { return !kRssMeaningful || after <= before * 1.05 + 1e-9; }

TEST(Soak, HundredThousandSmallAllReducesStayFlat) {
  const int kOps = getenv("ZCOLL_SOAK_OPS") ? atoi(getenv("ZCOLL_SOAK_OPS")) : 100000;
  Usage warm, end;
  withComms(2, [&](int rank, zcollComm_t comm) {
    float x[16];
    for (int i = 0; i < kOps; ++i) {
      if (i == kOps / 10) {  // after warm-up: allocator pools and lazily mapped pages are in place
        zcollBarrier(comm, nullptr);
        if (rank == 0) warm = usage();
        zcollBarrier(comm, nullptr);
      }
      for (float& v : x) v = static_cast<float>(rank + 1);
      ASSERT_EQ(zcollAllReduce(x, x, 16, zcollFloat, zcollSum, comm, nullptr), zcollSuccess);
      ASSERT_EQ(x[7], 3.0f);
    }
    zcollBarrier(comm, nullptr);
    if (rank == 0) end = usage();
    zcollBarrier(comm, nullptr);
  });
  std::printf("%d all-reduces: %s -> %s\n", kOps, show(warm).c_str(), show(end).c_str());
  EXPECT_EQ(end.threads, warm.threads);
  EXPECT_EQ(end.fds, warm.fds);
  EXPECT_TRUE(within5Percent(static_cast<double>(warm.rssKiB), static_cast<double>(end.rssKiB)))
      << show(warm) << " -> " << show(end);
}

TEST(Soak, ThousandCreateDestroyCyclesStayFlat) {
  const int kCycles = getenv("ZCOLL_SOAK_CYCLES") ? atoi(getenv("ZCOLL_SOAK_CYCLES")) : 1000;
  Usage warm;
  const auto start = std::chrono::steady_clock::now();
  for (int c = 0; c < kCycles; ++c) {
    if (c == kCycles / 10) warm = settledUsage();
    withComms(2, [](int rank, zcollComm_t comm) {
      float x = static_cast<float>(rank + 1);
      EXPECT_EQ(zcollAllReduce(&x, &x, 1, zcollFloat, zcollSum, comm, nullptr), zcollSuccess);
      EXPECT_EQ(x, 3.0f);
    });
    if (HasFailure()) return;
  }
  const Usage end = settledUsage();
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%d create/destroy cycles in %.1f s: %s -> %s\n", kCycles, sec, show(warm).c_str(), show(end).c_str());
  EXPECT_EQ(end.threads, warm.threads);
  EXPECT_EQ(end.fds, warm.fds);
  EXPECT_EQ(end.sharedMaps, warm.sharedMaps);
  EXPECT_TRUE(within5Percent(static_cast<double>(warm.rssKiB), static_cast<double>(end.rssKiB)))
      << show(warm) << " -> " << show(end);
}

}  // namespace
}  // namespace zcoll::test
