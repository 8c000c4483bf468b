// local_register_test.cpp - plain host buffers (their own mappings, as malloc gives large blocks)
// reused by all-reduce, reduce-scatter, all-gather and broadcast run zero copy from their second op
// (ZCOLL_LOCAL_REGISTER, core/adopted_memory.hpp), with partial pages at both ends, alike on every
// rank (their bytes go with the offers) or different per rank (a round of their own), in and out of
// place; every element checked; buffers unmapped and mapped again (likely at the same address) start
// over on the copying path and stay right; heap buffers freed and taken again stay adopted (the memory
// is still the memfd's).
#include <gtest/gtest.h>
#include <malloc.h>
#include <sys/mman.h>

#include <cstdlib>
#include <vector>

#include <cstdint>
#include <string>

#include "core/adopted_memory.hpp"
#include "tests/common/rank_pool.hpp"

namespace zcoll::test {
namespace {

enum class Coll { AllReduce, ReduceScatter, AllGather, Broadcast };
constexpr size_t kCount = 300'003;  // floats: 1.2 MB, above ZCOLL_ZERO_COPY, odd
constexpr int kRoot = 1;

float value(int rank, size_t i, int round) {
  return static_cast<float>((rank + 1) * static_cast<int>(i % 1000 + 1) + round);
}

std::string lastAlgorithm(zcollComm_t comm) {
  char name[64] = {};
  EXPECT_EQ(zcollCommLastAlgorithm(comm, name, sizeof name), zcollSuccess);
  return name;
}

// Ranks x where the buffers come from: their own mappings (malloc's large blocks), or malloc's brk
// heap (the main thread's arena with a high mmap threshold), freed and taken again between generations
// x whether the buffers sit alike in their pages on every rank (64 bytes in, as torch's tensors).
class LocalRegister : public ::testing::TestWithParam<std::tuple<int, bool, bool>> {};

TEST_P(LocalRegister, PlainBuffersRunZeroCopyAndStayRight) {
  const char* why = nullptr;
  if (!adoptionAvailable(&why)) GTEST_SKIP() << "local registration unavailable here: " << why;
  const int n = std::get<0>(GetParam());
  const bool heap = std::get<1>(GetParam());
  const bool alike = std::get<2>(GetParam());
  if (heap && mallopt(M_MMAP_THRESHOLD, 32 << 20) != 1)
    GTEST_SKIP() << "this allocator ignores mallopt (a sanitizer's): no brk heap to test";
  RankPool pool(n, ZCOLL_CONFIG_INITIALIZER);
  ASSERT_TRUE(pool.ok());
  const size_t nn = static_cast<size_t>(n);
  for (Coll coll : {Coll::AllReduce, Coll::ReduceScatter, Coll::AllGather, Coll::Broadcast})
    for (bool inPlace : {false, true})
      for (int generation = 0; generation < 2; ++generation) {
        const size_t sendCount = coll == Coll::ReduceScatter ? nn * kCount : kCount;
        const size_t recvCount = coll == Coll::AllGather ? nn * kCount : kCount;
        // One block per rank, the buffers 64 or 12 (r + 1) bytes past its start: the partial pages alike or not.
        std::vector<void*> blocks(nn);
        const size_t bytes = 12 * nn + 64 + (sendCount + recvCount + 1024) * sizeof(float);
        for (void*& b : blocks) {
          b = heap ? std::malloc(bytes) : mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
          ASSERT_TRUE(b && b != MAP_FAILED);
        }
        pool.run([&](int r, zcollComm_t comm) {
          const size_t offset = alike ? 64 : 12 * static_cast<size_t>(r + 1);
          void* m = blocks[static_cast<size_t>(r)];
          auto* base = reinterpret_cast<float*>(static_cast<uint8_t*>(m) + offset);
          float* recv = base;
          float* send = inPlace ? (coll == Coll::AllGather ? recv + static_cast<size_t>(r) * kCount : recv)
                                : base + recvCount + 256;
          if (inPlace && coll == Coll::ReduceScatter) {
            send = base;
            recv = send + static_cast<size_t>(r) * kCount;
          }
          for (int round = 0; round < 4; ++round) {
            for (size_t i = 0; i < sendCount; ++i) send[i] = value(r, i, round);
            zcollResult_t res = zcollSuccess;
            switch (coll) {
              case Coll::AllReduce:
                res = zcollAllReduce(send, recv, kCount, zcollFloat, zcollSum, comm, nullptr);
                break;
              case Coll::ReduceScatter:
                res = zcollReduceScatter(send, recv, kCount, zcollFloat, zcollSum, comm, nullptr);
                break;
              case Coll::AllGather:
                res = zcollAllGather(send, recv, kCount, zcollFloat, comm, nullptr);
                break;
              case Coll::Broadcast:
                res = zcollBroadcast(send, recv, kCount, zcollFloat, kRoot, comm, nullptr);
                break;
            }
            ASSERT_EQ(res, zcollSuccess) << zcollGetLastError(comm);
            for (size_t i = 0; i < recvCount; ++i) {
              float want = 0;
              if (coll == Coll::AllReduce || coll == Coll::ReduceScatter) {
                const size_t at = coll == Coll::ReduceScatter ? static_cast<size_t>(r) * kCount + i : i;
                for (int p = 0; p < n; ++p) want += value(p, at, round);
              } else if (coll == Coll::AllGather) {
                want = value(static_cast<int>(i / kCount), i % kCount, round);
              } else {
                want = value(kRoot, i, round);
              }
              ASSERT_EQ(recv[i], want) << "collective " << static_cast<int>(coll) << " rank " << r << " element " << i << " round " << round << " generation "
                                       << generation << (inPlace ? " in place" : "");
            }
            // Round 0 notes the buffers; from round 1 they are adopted (new mappings start over).
            if (round >= 1) {
              EXPECT_EQ(lastAlgorithm(comm), "zcopy") << "rank " << r << " round " << round;
            }
          }
        });
        for (void* b : blocks) heap ? std::free(b) : static_cast<void>(munmap(b, bytes));
      }
}

// An all-reduce or reduce-scatter whose buffers are the last zero-copy op's on every rank skips the
// vote (ZeroCopyMemo): page-aligned buffers, and buffers 64 bytes into their first page on every rank
// (whose ends go with the offers). Buffers that change on one rank, alternate between two sets, or are
// unmapped and mapped again (likely at the same address, with other bytes) vote again and stay right.
// Also with 128-byte chunks, too small for an offer (it goes in pieces, the ends in round 2).
class LocalRegisterReused : public ::testing::TestWithParam<std::tuple<int, size_t, int>> {};

TEST_P(LocalRegisterReused, BuffersUsedAgainSkipTheVoteAndStayRight) {
  const char* why = nullptr;
  if (!adoptionAvailable(&why)) GTEST_SKIP() << "local registration unavailable here: " << why;
  const int n = std::get<0>(GetParam());
  const size_t offset = std::get<1>(GetParam());
  const int chunk = std::get<2>(GetParam());
  const size_t nn = static_cast<size_t>(n);
  constexpr size_t kElems = 64 * 1024;  // floats per block: 256 KiB, whole pages
  const size_t bytes = 2 * (nn + 1) * kElems * sizeof(float) + offset;  // a set: sendbuff (n blocks) + recvbuff
  zcollConfig_t config = ZCOLL_CONFIG_INITIALIZER;
  if (chunk > 0) config.chunkBytes = chunk;
  RankPool pool(n, config);
  ASSERT_TRUE(pool.ok());
  auto fresh = [&] {
    void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return m == MAP_FAILED ? nullptr : reinterpret_cast<float*>(static_cast<uint8_t*>(m) + offset);
  };
  std::vector<float*> sets[2];
  for (auto& set : sets)
    for (int r = 0; r < n; ++r) {
      set.push_back(fresh());
      ASSERT_NE(set.back(), nullptr);
    }
  // Which set each op uses on each rank (-1: rank 0 alone on set B), and where set A is mapped again.
  const int plan[] = {0, 0, 0, 0, 1, 1, 0, 0, -1, 0, 0, 2, 0, 0, 0};
  for (bool reduceScatter : {false, true})
    for (bool inPlace : {false, true}) {
      int round = 0;
      for (int step : plan) {
        if (step == 2) {  // set A unmapped and mapped again: new pages, likely at the same addresses
          for (float*& m : sets[0]) {
            ASSERT_EQ(munmap(reinterpret_cast<uint8_t*>(m) - offset, bytes), 0);
            m = fresh();
            ASSERT_NE(m, nullptr);
          }
          continue;
        }
        ++round;
        pool.run([&](int r, zcollComm_t comm) {
          float* base = sets[step == 1 || (step == -1 && r == 0) ? 1 : 0][static_cast<size_t>(r)];
          const size_t sendCount = reduceScatter ? nn * kElems : kElems;
          float* send = base;
          float* recv = inPlace ? (reduceScatter ? base + static_cast<size_t>(r) * kElems : base)
                                : base + nn * kElems;
          for (size_t i = 0; i < sendCount; ++i) send[i] = value(r, i, round);
          const zcollResult_t res =
              reduceScatter ? zcollReduceScatter(send, recv, kElems, zcollFloat, zcollSum, comm, nullptr)
                            : zcollAllReduce(send, recv, kElems, zcollFloat, zcollSum, comm, nullptr);
          ASSERT_EQ(res, zcollSuccess) << zcollGetLastError(comm);
          for (size_t i = 0; i < kElems; ++i) {
            const size_t at = reduceScatter ? static_cast<size_t>(r) * kElems + i : i;
            float want = 0;
            for (int p = 0; p < n; ++p) want += value(p, at, round);
            ASSERT_EQ(recv[i], want) << (reduceScatter ? "reduce-scatter" : "all-reduce") << " rank " << r
                                     << " element " << i << " round " << round << (inPlace ? " in place" : "");
          }
        });
      }
    }
  for (auto& set : sets)
    for (float* m : set) munmap(reinterpret_cast<uint8_t*>(m) - offset, bytes);
}

INSTANTIATE_TEST_SUITE_P(RanksOffsetsAndChunks, LocalRegisterReused,
                         ::testing::Combine(::testing::Values(2, 3, 4), ::testing::Values(size_t{0}, size_t{64}),
                                            ::testing::Values(0, 128)));

INSTANTIATE_TEST_SUITE_P(RanksMemoryAndEnds, LocalRegister,
                         ::testing::Combine(::testing::Values(2, 3, 4), ::testing::Bool(), ::testing::Bool()));

}  // namespace
}  // namespace zcoll::test
