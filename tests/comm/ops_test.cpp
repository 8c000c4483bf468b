// ops_test.cpp - point-to-point and groups, nonblocking requests, one thread driving several ranks,
// timeouts that name the peer and the step (abort from another thread: resources_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <numeric>
#include <stdlib.h>
#include <string>
#include <thread>
#include <vector>

#include "tests/common/rank_pool.hpp"

namespace zcoll::test {
namespace {

zcollConfig_t config(int chunkBytes = 256, int timeoutMs = 60000) {
  zcollConfig_t c = ZCOLL_CONFIG_INITIALIZER;
  c.chunkBytes = chunkBytes;
  c.fifoSlots = 2;
  c.timeoutMs = timeoutMs;
  return c;
}

std::vector<int32_t> pattern(int from, int to, size_t n) {
  std::vector<int32_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = from * 1000003 + to * 1009 + static_cast<int32_t>(i);
  return v;
}

class SendRecv : public ::testing::TestWithParam<int> {};

// Every rank sends to every rank (itself included) and receives from every rank, in one group,
// with sizes that need many chunks: an all-to-all built from send/recv.
TEST_P(SendRecv, GroupedAllToAll) {
  const int n = GetParam();
  RankPool pool(n, config());
  for (size_t count : {size_t{0}, size_t{1}, size_t{333}}) {
    pool.run([&](int rank, zcollComm_t comm) {
      std::vector<std::vector<int32_t>> out(n), in(n, std::vector<int32_t>(count, -1));
      ASSERT_EQ(zcollGroupStart(), zcollSuccess);
      for (int p = 0; p < n; ++p) {
        out[p] = pattern(rank, p, count);
        ASSERT_EQ(zcollSend(out[p].data(), count, zcollInt32, p, comm, nullptr), zcollSuccess);
        ASSERT_EQ(zcollRecv(in[p].data(), count, zcollInt32, p, comm, nullptr), zcollSuccess);
      }
      ASSERT_EQ(zcollGroupEnd(), zcollSuccess) << zcollGetLastError(comm);
      for (int p = 0; p < n; ++p) EXPECT_EQ(in[p], pattern(p, rank, count)) << "rank " << rank << " from " << p;
    });
  }
}

// Ungrouped: pairs exchange in a fixed order (even ranks send first), several messages in a row.
TEST_P(SendRecv, BlockingPairs) {
  const int n = GetParam();
  if (n % 2) GTEST_SKIP() << "pairs need an even rank count";
  RankPool pool(n, config());
  pool.run([&](int rank, zcollComm_t comm) {
    int peer = rank ^ 1;
    for (size_t count : {size_t{5}, size_t{200}, size_t{0}, size_t{1000}}) {
      std::vector<int32_t> out = pattern(rank, peer, count), in(count, -1);
      if (rank % 2 == 0) {
        ASSERT_EQ(zcollSend(out.data(), count, zcollInt32, peer, comm, nullptr), zcollSuccess);
        ASSERT_EQ(zcollRecv(in.data(), count, zcollInt32, peer, comm, nullptr), zcollSuccess);
      } else {
        ASSERT_EQ(zcollRecv(in.data(), count, zcollInt32, peer, comm, nullptr), zcollSuccess);
        ASSERT_EQ(zcollSend(out.data(), count, zcollInt32, peer, comm, nullptr), zcollSuccess);
      }
      EXPECT_EQ(in, pattern(peer, rank, count));
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, SendRecv, ::testing::Values(1, 2, 3, 4, 5, 8));

// Nobody leaves the barrier before the last rank enters it.
TEST(Barrier, NobodyLeavesEarly) {
  for (int n : {1, 2, 3, 5, 8}) {
    RankPool pool(n, config());
    std::atomic<int> entered{0};
    pool.run([&](int rank, zcollComm_t comm) {
      for (int round = 0; round < 5; ++round) {
        if (rank == round % n) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        entered.fetch_add(1);
        ASSERT_EQ(zcollBarrier(comm, nullptr), zcollSuccess) << zcollGetLastError(comm);
        EXPECT_GE(entered.load(), n * (round + 1)) << "rank " << rank << " left barrier " << round << " early";
        ASSERT_EQ(zcollBarrier(comm, nullptr), zcollSuccess);  // nobody starts the next round before all checked
      }
    });
  }
}

// ZCOLL_CHECK=1: ranks that issue different collectives all fail at once with both calls named, and
// the communicator carries on with the next (matching) call.
TEST(Check, MismatchedCallsFailEveryRankAndNameThem) {
  setenv("ZCOLL_CHECK", "1", 1);
  RankPool pool(3, config());
  unsetenv("ZCOLL_CHECK");
  pool.run([&](int rank, zcollComm_t comm) {
    std::vector<float> buf(64, 1.0f);
    zcollResult_t r = rank == 2 ? zcollBroadcast(buf.data(), buf.data(), 10, zcollFloat, 0, comm, nullptr)
                                : zcollAllReduce(buf.data(), buf.data(), rank == 0 ? 10 : 11, zcollFloat, zcollSum,
                                                 comm, nullptr);
    EXPECT_EQ(r, zcollInvalidUsage) << "rank " << rank;
    const std::string msg = zcollGetLastError(comm);
    EXPECT_NE(msg.find("ranks disagree"), std::string::npos) << msg;
    EXPECT_NE(msg.find(rank == 0 ? "count 11" : "count 10"), std::string::npos) << msg;
    // Matching calls work afterwards.
    std::fill(buf.begin(), buf.end(), 1.0f);
    ASSERT_EQ(zcollAllReduce(buf.data(), buf.data(), 64, zcollFloat, zcollSum, comm, nullptr), zcollSuccess)
        << zcollGetLastError(comm);
    EXPECT_EQ(buf[63], 3.0f);
  });
}

// Without ZCOLL_CHECK, zero copy's own signature check: a broadcast whose receiver passes another
// count fails on both ranks at once (the receiver answers the root's offer with its signature), not
// at the timeout.
TEST(Check, MismatchedZeroCopyBroadcastFailsBothRanksAtOnce) {
  RankPool pool(2, config(256 * 1024, 30'000));
  pool.run([&](int rank, zcollComm_t comm) {
    void* buf = nullptr;
    ASSERT_EQ(zcollMemAlloc(&buf, 1 << 20), zcollSuccess);
    const auto start = std::chrono::steady_clock::now();
    const zcollResult_t r = zcollBroadcast(buf, buf, rank == 0 ? 100'000 : 100'001, zcollFloat, 0, comm, nullptr);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_NE(r, zcollSuccess) << "rank " << rank;
    const std::string msg = zcollGetLastError(comm);
    EXPECT_NE(msg.find("not running the same collective"), std::string::npos) << msg;
    EXPECT_LT(seconds, 10.0) << "rank " << rank << ": " << msg;
    EXPECT_EQ(zcollMemFree(buf), zcollSuccess);
  });
}

TEST(SendRecvSelf, UnmatchedSelfSendIsAnError) {
  RankPool pool(1, config());
  pool.run([&](int, zcollComm_t comm) {
    int32_t x = 7;
    EXPECT_EQ(zcollSend(&x, 1, zcollInt32, 0, comm, nullptr), zcollInvalidUsage);
    EXPECT_NE(std::string(zcollGetLastError(comm)).find("matching zcollRecv"), std::string::npos);
  });
}

TEST(Async, RequestsCompleteInOrder) {
  RankPool pool(3, config(4096));
  pool.run([&](int rank, zcollComm_t comm) {
    constexpr int kOps = 6;
    constexpr size_t kCount = 5000;
    std::vector<std::vector<float>> in(kOps, std::vector<float>(kCount)), out(kOps, std::vector<float>(kCount));
    std::vector<zcollRequest_t> reqs(kOps);
    for (int k = 0; k < kOps; ++k) {
      std::fill(in[k].begin(), in[k].end(), static_cast<float>(rank + k));
      ASSERT_EQ(zcollAllReduceAsync(in[k].data(), out[k].data(), kCount, zcollFloat, zcollSum, comm, &reqs[k]),
                zcollSuccess);
    }
    // A blocking call issued meanwhile runs after the queued ones.
    float one = 1, sum = 0;
    ASSERT_EQ(zcollAllReduce(&one, &sum, 1, zcollFloat, zcollSum, comm, nullptr), zcollSuccess);
    EXPECT_EQ(sum, 3.0f);
    for (int k = 0; k < kOps; ++k) {
      if (k % 2) {
        int done = 0;
        while (!done) ASSERT_EQ(zcollTest(reqs[k], &done), zcollSuccess);
      } else {
        ASSERT_EQ(zcollWait(reqs[k]), zcollSuccess);
      }
      EXPECT_EQ(out[k][0], static_cast<float>(0 + 1 + 2 + 3 * k));
      EXPECT_EQ(out[k][kCount - 1], out[k][0]);
    }
    // A released request is refused, not waited on twice.
    EXPECT_EQ(zcollWait(reqs[0]), zcollInvalidUsage);
    int done = 0;
    EXPECT_EQ(zcollTest(reqs[1], &done), zcollInvalidUsage);
  });
}

// NCCL's "one thread, several ranks": a group spanning the communicators of every rank.
TEST(Group, OneThreadDrivesAllRanks) {
  constexpr int n = 4;
  zcollUniqueId id;
  ASSERT_EQ(zcollGetUniqueId(&id), zcollSuccess);
  std::vector<zcollComm_t> comms(n);
  zcollConfig_t cfg = config();
  ASSERT_EQ(zcollGroupStart(), zcollSuccess);
  // Init is collective: start them on threads, then the group below drives all four.
  std::vector<std::thread> init;
  for (int r = 0; r < n; ++r)
    init.emplace_back([&, r] { EXPECT_EQ(zcollCommInitRankConfig(&comms[r], n, id, r, &cfg), zcollSuccess); });
  for (auto& t : init) t.join();
  std::vector<std::vector<float>> bufs(n, std::vector<float>(1000));
  for (int r = 0; r < n; ++r) {
    std::iota(bufs[r].begin(), bufs[r].end(), static_cast<float>(r));
    ASSERT_EQ(zcollAllReduce(bufs[r].data(), bufs[r].data(), 1000, zcollFloat, zcollSum, comms[r], nullptr),
              zcollSuccess);
  }
  ASSERT_EQ(zcollGroupEnd(), zcollSuccess) << zcollGetLastError(nullptr);
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(bufs[r][0], 0.0f + 1 + 2 + 3);
    EXPECT_EQ(bufs[r][999], 4 * 999.0f + 6);
    EXPECT_EQ(zcollCommDestroy(comms[r]), zcollSuccess);
  }
}

// A group mixing send/recv and collectives on one communicator, each rank queuing them in its own
// order (issue 26: the collective used to consume the peer's point-to-point bytes). A ring exchange
// beside an all-reduce and a broadcast, at sizes of one chunk and of many.
class MixedGroup : public ::testing::TestWithParam<int> {};

TEST_P(MixedGroup, SendRecvAndCollectivesInAnyOrder) {
  const int n = GetParam();
  RankPool pool(n, config());
  for (size_t count : {size_t{64}, size_t{1000}}) {
    pool.run([&](int rank, zcollComm_t comm) {
      const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
      std::vector<int32_t> out = pattern(rank, next, count), in(count, -1), sum(count), bc(count);
      for (size_t i = 0; i < count; ++i) sum[i] = rank * 7 + static_cast<int32_t>(i);
      for (size_t i = 0; i < count; ++i) bc[i] = rank == n - 1 ? static_cast<int32_t>(3 * i + 1) : -5;
      auto send = [&] { return zcollSend(out.data(), count, zcollInt32, next, comm, nullptr); };
      auto recv = [&] { return zcollRecv(in.data(), count, zcollInt32, prev, comm, nullptr); };
      auto allReduce = [&] {
        return zcollAllReduce(sum.data(), sum.data(), count, zcollInt32, zcollSum, comm, nullptr);
      };
      auto bcast = [&] { return zcollBroadcast(bc.data(), bc.data(), count, zcollInt32, n - 1, comm, nullptr); };
      // Three interleavings; the collectives keep their order on every rank.
      const std::function<zcollResult_t()> orders[3][4] = {
          {send, allReduce, recv, bcast}, {allReduce, bcast, recv, send}, {recv, allReduce, send, bcast}};
      ASSERT_EQ(zcollGroupStart(), zcollSuccess);
      for (const auto& call : orders[rank % 3]) ASSERT_EQ(call(), zcollSuccess);
      ASSERT_EQ(zcollGroupEnd(), zcollSuccess) << zcollGetLastError(comm);
      EXPECT_EQ(in, pattern(prev, rank, count)) << "rank " << rank << " from " << prev;
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(sum[i], 7 * n * (n - 1) / 2 + n * static_cast<int32_t>(i)) << "rank " << rank << " at " << i;
        ASSERT_EQ(bc[i], static_cast<int32_t>(3 * i + 1)) << "rank " << rank << " at " << i;
      }
    });
  }
}

// The same across two communicators in one group: a collective on one, send/recv on both.
TEST_P(MixedGroup, AcrossTwoCommunicators) {
  const int n = GetParam();
  RankPool pool(n, config());
  zcollUniqueId id2;
  ASSERT_EQ(zcollGetUniqueId(&id2), zcollSuccess);
  pool.run([&](int rank, zcollComm_t comm) {
    zcollComm_t comm2 = nullptr;
    zcollConfig_t cfg = config();
    ASSERT_EQ(zcollCommInitRankConfig(&comm2, n, id2, rank, &cfg), zcollSuccess) << zcollGetLastError(nullptr);
    const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    const size_t count = 777;
    std::vector<int32_t> out = pattern(rank, next, count), in1(count, -1), in2(count, -1), sum(count, rank + 1);
    ASSERT_EQ(zcollGroupStart(), zcollSuccess);
    if (rank % 2) {
      ASSERT_EQ(zcollRecv(in2.data(), count, zcollInt32, prev, comm2, nullptr), zcollSuccess);
      ASSERT_EQ(zcollSend(out.data(), count, zcollInt32, next, comm, nullptr), zcollSuccess);
      ASSERT_EQ(zcollAllReduce(sum.data(), sum.data(), count, zcollInt32, zcollSum, comm, nullptr), zcollSuccess);
      ASSERT_EQ(zcollSend(out.data(), count, zcollInt32, next, comm2, nullptr), zcollSuccess);
      ASSERT_EQ(zcollRecv(in1.data(), count, zcollInt32, prev, comm, nullptr), zcollSuccess);
    } else {
      ASSERT_EQ(zcollAllReduce(sum.data(), sum.data(), count, zcollInt32, zcollSum, comm, nullptr), zcollSuccess);
      ASSERT_EQ(zcollSend(out.data(), count, zcollInt32, next, comm2, nullptr), zcollSuccess);
      ASSERT_EQ(zcollRecv(in1.data(), count, zcollInt32, prev, comm, nullptr), zcollSuccess);
      ASSERT_EQ(zcollSend(out.data(), count, zcollInt32, next, comm, nullptr), zcollSuccess);
      ASSERT_EQ(zcollRecv(in2.data(), count, zcollInt32, prev, comm2, nullptr), zcollSuccess);
    }
    ASSERT_EQ(zcollGroupEnd(), zcollSuccess) << zcollGetLastError(nullptr);
    EXPECT_EQ(in1, pattern(prev, rank, count));
    EXPECT_EQ(in2, pattern(prev, rank, count));
    EXPECT_EQ(sum, std::vector<int32_t>(count, n * (n + 1) / 2));
    EXPECT_EQ(zcollCommDestroy(comm2), zcollSuccess);
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, MixedGroup, ::testing::Values(2, 3, 4));

// A receive from any source (torch.distributed's recv without a source): rank 0 takes every other
// rank's message in whatever order they come, each whole and named by its sender.
class RecvAny : public ::testing::TestWithParam<const char*> {};

TEST_P(RecvAny, TakesEachSendersWholeMessage) {
  zcollConfig_t cfg = config();
  cfg.transports = GetParam();
  RankPool pool(4, cfg);
  for (size_t count : {size_t{1}, size_t{10}, size_t{1000}}) {
    pool.run([&](int rank, zcollComm_t comm) {
      if (rank != 0) {
        std::vector<int32_t> out = pattern(rank, 0, count);
        EXPECT_EQ(zcollSend(out.data(), count, zcollInt32, 0, comm, nullptr), zcollSuccess) << zcollGetLastError(comm);
        return;
      }
      std::vector<int> seen;
      for (int k = 1; k < 4; ++k) {
        std::vector<int32_t> in(count, -1);
        int from = -7;
        ASSERT_EQ(zcollRecvAny(in.data(), count, zcollInt32, &from, comm, nullptr), zcollSuccess)
            << zcollGetLastError(comm);
        ASSERT_GE(from, 1);
        ASSERT_LT(from, 4);
        EXPECT_EQ(in, pattern(from, 0, count)) << "from " << from;
        seen.push_back(from);
      }
      std::sort(seen.begin(), seen.end());
      EXPECT_EQ(seen, (std::vector<int>{1, 2, 3}));
    });
  }
  pool.run([&](int rank, zcollComm_t comm) {
    if (rank) return;
    int32_t x = 0;
    int from = 0;
    EXPECT_EQ(zcollRecvAny(&x, 1, zcollInt32, nullptr, comm, nullptr), zcollInvalidArgument);
    EXPECT_NE(std::string(zcollGetLastError(comm)).find("peer"), std::string::npos);
    ASSERT_EQ(zcollGroupStart(), zcollSuccess);
    EXPECT_EQ(zcollRecvAny(&x, 1, zcollInt32, &from, comm, nullptr), zcollInvalidUsage);
    ASSERT_EQ(zcollGroupEnd(), zcollSuccess);
  });
}

INSTANTIATE_TEST_SUITE_P(Transports, RecvAny, ::testing::Values("shm", "tcp"));

// One thread at a time per communicator (zcoll.h): a second thread's call while the first is inside
// one is refused with InvalidUsage naming the rule, and the first call and later ones are unharmed.
TEST(Threads, SecondThreadOnABusyCommunicatorIsRefused) {
  RankPool pool(2, config());
  pool.run([&](int rank, zcollComm_t comm) {
    std::vector<float> x(1000, static_cast<float>(rank + 1));
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // rank 0 waits inside its call
    } else {
      std::thread other([comm] {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        std::vector<float> y(10, 1.0f);
        EXPECT_EQ(zcollAllReduce(y.data(), y.data(), y.size(), zcollFloat, zcollSum, comm, nullptr), zcollInvalidUsage);
        EXPECT_NE(std::string(zcollGetLastError(comm)).find("one thread at a time"), std::string::npos)
            << zcollGetLastError(comm);
        zcollRequest_t req = nullptr;
        EXPECT_EQ(zcollAllReduceAsync(y.data(), y.data(), y.size(), zcollFloat, zcollSum, comm, &req),
                  zcollInvalidUsage);
      });
      EXPECT_EQ(zcollAllReduce(x.data(), x.data(), x.size(), zcollFloat, zcollSum, comm, nullptr), zcollSuccess)
          << zcollGetLastError(comm);
      other.join();
    }
    if (rank == 1) {
      EXPECT_EQ(zcollAllReduce(x.data(), x.data(), x.size(), zcollFloat, zcollSum, comm, nullptr), zcollSuccess);
    }
    EXPECT_EQ(x, std::vector<float>(1000, 3.0f));
    EXPECT_EQ(zcollAllReduce(x.data(), x.data(), x.size(), zcollFloat, zcollSum, comm, nullptr), zcollSuccess)
        << zcollGetLastError(comm);
    EXPECT_EQ(x, std::vector<float>(1000, 6.0f));
  });
}

// A peer that never joins the collective: the caller fails with Timeout, naming the op and peer,
// and the communicator reports the error and refuses further work.
TEST(Failures, TimeoutNamesThePeer) {
  RankPool pool(2, config(256, 300));
  pool.run([&](int rank, zcollComm_t comm) {
    if (rank == 1) return;
    float x = 1, y = 0;
    auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(zcollAllReduce(&x, &y, 1, zcollFloat, zcollSum, comm, nullptr), zcollTimeout);
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(ms, 1300);
    std::string msg = zcollGetLastError(comm);
    EXPECT_NE(msg.find("allreduce #0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rank 1"), std::string::npos) << msg;
    // The algorithm (eager for 4 bytes) and what it waited for.
    EXPECT_NE(msg.find("(eager, 1 x float)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("waiting for data from rank 1"), std::string::npos) << msg;
    zcollResult_t async = zcollSuccess;
    EXPECT_EQ(zcollCommGetAsyncError(comm, &async), zcollSuccess);
    EXPECT_EQ(async, zcollTimeout);
    EXPECT_EQ(zcollAllReduce(&x, &y, 1, zcollFloat, zcollSum, comm, nullptr), zcollTimeout);
  });
}

// A rank late by more than half the timeout is no failure: the ranks waiting on it tell their peers
// whom they wait on (tcp's waiting notices, between frames) and that they wait no more; results
// before, during and after stay right.
TEST(Failures, ALateRankIsNoFailureOverTcp) {
  setenv("ZCOLL_SOCKETS_PER_PEER", "2", 1);  // notices on the first connection, frames on both
  zcollConfig_t c = config(4096, 1000);
  c.transports = "tcp";
  RankPool pool(3, c);
  unsetenv("ZCOLL_SOCKETS_PER_PEER");
  pool.run([&](int rank, zcollComm_t comm) {
    for (int round = 0; round < 6; ++round) {
      const size_t n = round % 2 ? 1 : 50'000;  // eager and ring
      if (rank == round % 3 && round < 3) std::this_thread::sleep_for(std::chrono::milliseconds(700));
      std::vector<int32_t> in(n), out(n, -1);
      for (size_t i = 0; i < n; ++i) in[i] = rank * 7 + static_cast<int32_t>(i % 1000) + round;
      ASSERT_EQ(zcollAllReduce(in.data(), out.data(), n, zcollInt32, zcollSum, comm, nullptr), zcollSuccess)
          << zcollGetLastError(comm);
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(out[i], 21 + 3 * (static_cast<int32_t>(i % 1000) + round)) << "round " << round << " element " << i;
    }
  });
}

// An operation returns only once its frames are in the kernel's hands (Transport::idle): the root
// of a broadcast much larger than the sockets' buffers but not than its FIFO, which then blocks
// outside zcoll until the other rank's broadcast has returned, must not starve it. Before the fix
// the root's last frames stayed in tcp's send ring and rank 1 timed out.
TEST(Completion, OpLeavesNothingUnsentOverTcp) {
  zcollConfig_t c = config(2 << 20, 20000);
  c.fifoSlots = 16;  // 32 MiB of FIFO per peer
  c.transports = "tcp";
  RankPool pool(2, c);
  const size_t n = (24u << 20) / sizeof(int32_t);
  std::atomic<bool> received{false};
  pool.run([&](int rank, zcollComm_t comm) {
    std::vector<int32_t> buf = rank == 0 ? pattern(0, 1, n) : std::vector<int32_t>(n, -1);
    // Rank 1 comes late: the root's sockets fill (the kernel grows no window nobody reads) and the
    // rest of the broadcast waits in the root's FIFO when its call ends.
    if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ASSERT_EQ(zcollBroadcast(buf.data(), buf.data(), n, zcollInt32, 0, comm, nullptr), zcollSuccess)
        << zcollGetLastError(comm);
    if (rank == 1) {
      EXPECT_EQ(buf, pattern(0, 1, n));
      received = true;
      return;
    }
    // An application-level wait on the peer, outside zcoll.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!received && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_TRUE(received) << "rank 1's broadcast did not return while rank 0 waited outside zcoll";
  });
}

// zcollCommRegister/Deregister (ncclCommRegister's shape): bad arguments name themselves; buffers
// registered or not give the same results (over shm registration only records the buffer; the ib
// transport's zero-copy path runs in tools/rdma-check).
TEST(Register, ArgumentsAndResults) {
  RankPool pool(2, config(4096));
  pool.run([&](int rank, zcollComm_t comm) {
    std::vector<float> in(10000, static_cast<float>(rank + 1)), out(10000, 0);
    void* h = nullptr;
    EXPECT_EQ(zcollCommRegister(comm, in.data(), 0, &h), zcollInvalidArgument);
    EXPECT_NE(std::string(zcollGetLastError(comm)).find("size"), std::string::npos);
    EXPECT_EQ(zcollCommRegister(comm, nullptr, 16, &h), zcollInvalidArgument);
    EXPECT_NE(std::string(zcollGetLastError(comm)).find("buff"), std::string::npos);
    EXPECT_EQ(zcollCommRegister(comm, in.data(), 16, nullptr), zcollInvalidArgument);
    EXPECT_NE(std::string(zcollGetLastError(comm)).find("handle"), std::string::npos);
    EXPECT_EQ(zcollCommRegister(nullptr, in.data(), 16, &h), zcollInvalidArgument);
    ASSERT_EQ(zcollCommRegister(comm, in.data(), in.size() * sizeof(float), &h), zcollSuccess) << zcollGetLastError(comm);
    void* h2 = nullptr;  // the same range twice: two handles
    ASSERT_EQ(zcollCommRegister(comm, in.data(), in.size() * sizeof(float), &h2), zcollSuccess);
    EXPECT_NE(h, h2);
    ASSERT_EQ(zcollAllReduce(in.data(), out.data(), in.size(), zcollFloat, zcollSum, comm, nullptr), zcollSuccess);
    for (float v : out) ASSERT_EQ(v, 3.0f);
    EXPECT_EQ(zcollCommDeregister(comm, h), zcollSuccess);
    EXPECT_EQ(zcollCommDeregister(comm, h), zcollInvalidArgument);  // twice
    EXPECT_NE(std::string(zcollGetLastError(comm)).find("handle"), std::string::npos);
    int local = 0;
    EXPECT_EQ(zcollCommDeregister(comm, &local), zcollInvalidArgument);
    EXPECT_EQ(zcollCommDeregister(comm, nullptr), zcollInvalidArgument);
    // h2 is left for zcollCommDestroy (RankPool destroys the communicator).
  });
}

}  // namespace
}  // namespace zcoll::test
