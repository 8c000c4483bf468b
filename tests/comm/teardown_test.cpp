// teardown_test.cpp - a rank that destroys its communicator right after its last op must not fail
// a peer that is still taking that op's last bytes (docs/reliability.md: a peer that handed over
// all it owed is not a failure). Per transport: cycles of (create, ring send/recv and an
// all-reduce, destroy at once), ranks finishing in a random order; every op before destroy succeeds.
// ZCOLL_TEST_TEARDOWN_CYCLES sets the cycles per transport (default 1000).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "zcoll/zcoll.h"

namespace zcoll::test {
namespace {

int cycles() {
  const char* v = getenv("ZCOLL_TEST_TEARDOWN_CYCLES");
  return v ? atoi(v) : 1000;
}

struct Case {
  const char* transports;
  int socketsPerPeer;
};

class Teardown : public ::testing::TestWithParam<Case> {};

TEST_P(Teardown, DestroyRightAfterTheLastOp) {
  const Case c = GetParam();
  zcollConfig_t cfg = ZCOLL_CONFIG_INITIALIZER;
  cfg.transports = c.transports;
  cfg.timeoutMs = 20000;
  cfg.chunkBytes = 4096;  // a 64 KiB message is 16 frames: several in flight at destroy
  setenv("ZCOLL_SOCKETS_PER_PEER", std::to_string(c.socketsPerPeer).c_str(), 1);
  setenv("UCX_NET_DEVICES", "lo", 0);
  const int n = cycles();
  std::mt19937 rng(12345);
  int failures = 0;
  for (int cycle = 0; cycle < n && failures == 0; ++cycle) {
    const int nranks = 2 + cycle % 3;
    const size_t count = cycle % 2 ? 16384 : 37;
    std::vector<int> delayUs(static_cast<size_t>(nranks));
    for (int& d : delayUs) d = static_cast<int>(rng() % 300);
    zcollUniqueId id;
    ASSERT_EQ(zcollGetUniqueId(&id), zcollSuccess);
    std::vector<std::string> errors(static_cast<size_t>(nranks));
    std::vector<std::thread> ranks;
    for (int r = 0; r < nranks; ++r) {
      ranks.emplace_back([&, r] {
        std::string& err = errors[static_cast<size_t>(r)];
        zcollComm_t comm = nullptr;
        if (zcollCommInitRankConfig(&comm, nranks, id, r, &cfg) != zcollSuccess) {
          err = std::string("init: ") + zcollGetLastError(nullptr);
          return;
        }
        const int next = (r + 1) % nranks, prev = (r + nranks - 1) % nranks;
        std::vector<int32_t> out(count), in(count, -1), sum(count, r + 1);
        for (size_t i = 0; i < count; ++i) out[i] = r * 100000 + static_cast<int32_t>(i);
        std::this_thread::sleep_for(std::chrono::microseconds(delayUs[static_cast<size_t>(r)]));
        zcollResult_t res = zcollAllReduce(sum.data(), sum.data(), count, zcollInt32, zcollSum, comm, nullptr);
        if (res == zcollSuccess) {
          zcollGroupStart();
          zcollSend(out.data(), count, zcollInt32, next, comm, nullptr);
          zcollRecv(in.data(), count, zcollInt32, prev, comm, nullptr);
          res = zcollGroupEnd();
        }
        if (res != zcollSuccess) err = zcollGetLastError(comm);
        for (size_t i = 0; err.empty() && i < count; ++i)
          if (in[i] != prev * 100000 + static_cast<int32_t>(i) || sum[i] != nranks * (nranks + 1) / 2)
            err = "wrong data at element " + std::to_string(i);
        // At once: no barrier, so a peer may still be taking this rank's last frames.
        if (zcollCommDestroy(comm) != zcollSuccess && err.empty()) err = std::string("destroy: ") + zcollGetLastError(nullptr);
      });
    }
    for (auto& t : ranks) t.join();
    if (cycle == 0 && errors[0].find("is built and usable here") != std::string::npos)
      GTEST_SKIP() << c.transports << " is not available: " << errors[0];
    for (int r = 0; r < nranks; ++r)
      if (!errors[static_cast<size_t>(r)].empty()) {
        ADD_FAILURE() << "cycle " << cycle << " (" << nranks << " ranks, " << count << " elements), rank " << r
                      << ": " << errors[static_cast<size_t>(r)];
        ++failures;
      }
  }
  unsetenv("ZCOLL_SOCKETS_PER_PEER");
}

INSTANTIATE_TEST_SUITE_P(Transports, Teardown,
                         ::testing::Values(Case{"shm", 1}, Case{"tcp", 1}, Case{"tcp", 2}, Case{"ucx", 1}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(info.param.transports) + "_" +
                                  std::to_string(info.param.socketsPerPeer) + "sockets";
                         });

}  // namespace
}  // namespace zcoll::test
