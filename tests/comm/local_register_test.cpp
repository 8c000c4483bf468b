// local_register_test.cpp - plain host buffers (their own mappings, as malloc gives large blocks)
// reused by all-reduce, reduce-scatter, all-gather and broadcast run zero copy from their second op
// (ZCOLL_LOCAL_REGISTER, core/adopted_memory.hpp), with partial pages at both ends that differ per
// rank, in and out of place; every element checked; buffers unmapped and mapped again (likely at the
// same address) start over on the copying path and stay right.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdint>
#include <string>

#include "core/adopted_memory.hpp"
#include "tests/common/rank_pool.hpp"

namespace zcoll::test {
namespace {

enum class Coll { AllReduce, ReduceScatter, AllGather, Broadcast };
constexpr size_t kCount = 300'003;  // floats: above ZCOLL_ZERO_COPY's 1 MiB, odd
constexpr int kRoot = 1;

float value(int rank, size_t i, int round) {
  return static_cast<float>((rank + 1) * static_cast<int>(i % 1000 + 1) + round);
}

std::string lastAlgorithm(zcollComm_t comm) {
  char name[64] = {};
  EXPECT_EQ(zcollCommLastAlgorithm(comm, name, sizeof name), zcollSuccess);
  return name;
}

class LocalRegister : public ::testing::TestWithParam<int> {};

TEST_P(LocalRegister, PlainBuffersRunZeroCopyAndStayRight) {
  const char* why = nullptr;
  if (!adoptionAvailable(&why)) GTEST_SKIP() << "local registration unavailable here: " << why;
  const int n = GetParam();
  RankPool pool(n, ZCOLL_CONFIG_INITIALIZER);
  ASSERT_TRUE(pool.ok());
  const size_t nn = static_cast<size_t>(n);
  for (Coll coll : {Coll::AllReduce, Coll::ReduceScatter, Coll::AllGather, Coll::Broadcast})
    for (bool inPlace : {false, true})
      for (int generation = 0; generation < 2; ++generation)
        pool.run([&](int r, zcollComm_t comm) {
          const size_t sendCount = coll == Coll::ReduceScatter ? nn * kCount : kCount;
          const size_t recvCount = coll == Coll::AllGather ? nn * kCount : kCount;
          // One mapping per rank, the buffers 12 (r + 1) bytes past its start: the partial pages differ.
          const size_t offset = 12 * static_cast<size_t>(r + 1);
          const size_t bytes = offset + (sendCount + recvCount + 1024) * sizeof(float);
          void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
          ASSERT_NE(m, MAP_FAILED);
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
              ASSERT_EQ(recv[i], want) << "rank " << r << " element " << i << " round " << round << " generation "
                                       << generation << (inPlace ? " in place" : "");
            }
            // Round 0 notes the buffers; from round 1 they are adopted (new mappings start over).
            if (round >= 1) EXPECT_EQ(lastAlgorithm(comm), "zcopy") << "rank " << r << " round " << round;
          }
          // Every rank done reading the others' buffers before this one goes away.
          ASSERT_EQ(zcollBarrier(comm, nullptr), zcollSuccess);
          munmap(m, bytes);
        });
}

INSTANTIATE_TEST_SUITE_P(Ranks, LocalRegister, ::testing::Values(2, 3, 4));

}  // namespace
}  // namespace zcoll::test
