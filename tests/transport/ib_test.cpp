// ib_test.cpp - the ib transport's choice and refusal on a host without an RDMA device (this one:
// tools/rdma-check runs the transport itself on soft-RoCE in a qemu guest): named as the last
// choice it fails every rank with a message that says which rank lacks a port and why, leaving no
// descriptor behind; in a list with another transport after it, every rank falls through to that one.
#include <dirent.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <string>
#include <thread>
#include <vector>

#include "comm/handles.hpp"
#include "tests/common/rank_pool.hpp"

namespace {

using zcoll::test::RankPool;

bool hasRdmaDevice() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list) ibv_free_device_list(list);
  return list && n > 0;
}

int openFds() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d)) ++n;
    closedir(d);
  }
  return n;
}

zcollConfig_t withTransports(const char* transports) {
  zcollConfig_t c = ZCOLL_CONFIG_INITIALIZER;
  c.transports = transports;
  c.timeoutMs = 20'000;
  return c;
}

TEST(IbTransport, ForcedWithoutADeviceFailsEveryRankNamingWhy) {
  if (hasRdmaDevice()) GTEST_SKIP() << "this host has an RDMA device: the ib transport would work here";
  const int before = openFds();
  zcollUniqueId id;
  ASSERT_EQ(zcollGetUniqueId(&id), zcollSuccess);
  const zcollConfig_t config = withTransports("ib");
  std::vector<zcollResult_t> results(2, zcollSuccess);
  std::vector<std::string> messages(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      zcollComm_t comm = nullptr;
      results[r] = zcollCommInitRankConfig(&comm, 2, id, r, &config);
      messages[r] = zcollGetLastError(nullptr);
      if (comm) zcollCommDestroy(comm);
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(results[r], zcollSuccess) << "rank " << r;
    EXPECT_NE(messages[r].find("ib transport"), std::string::npos) << messages[r];
    EXPECT_NE(messages[r].find("ibv_get_device_list"), std::string::npos) << messages[r];
  }
  // Rank 1 names rank 0 (the lowest rank without a port), rank 0 its own failure.
  EXPECT_NE(messages[1].find("rank 0 has no usable RDMA port"), std::string::npos) << messages[1];
  EXPECT_EQ(openFds(), before) << "a failed creation left descriptors open";
}

TEST(IbTransport, WithoutADeviceEveryRankFallsThroughToTheNextTransport) {
  if (hasRdmaDevice()) GTEST_SKIP() << "this host has an RDMA device: ib would be chosen";
  for (int n : {2, 3}) {
    RankPool pool(n, withTransports("ib,tcp"));
    ASSERT_TRUE(pool.ok());
    pool.run([&](int rank, zcollComm_t comm) {
      EXPECT_EQ(comm->impl->transportName(), "tcp");
      std::vector<float> v(100'003, static_cast<float>(rank + 1));
      ASSERT_EQ(zcollAllReduce(v.data(), v.data(), v.size(), zcollFloat, zcollSum, comm, nullptr), zcollSuccess)
          << zcollGetLastError(comm);
      for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], static_cast<float>(n * (n + 1) / 2)) << i;
    });
  }
}

TEST(IbTransport, BadDeviceListIsInvalidArgument) {
  zcollUniqueId id;
  ASSERT_EQ(zcollGetUniqueId(&id), zcollSuccess);
  setenv("ZCOLL_IB_HCA", "mlx5_0:0", 1);
  zcollComm_t comm = nullptr;
  const zcollConfig_t config = withTransports("ib");
  EXPECT_EQ(zcollCommInitRankConfig(&comm, 1, id, 0, &config), zcollInvalidArgument);
  EXPECT_NE(std::string(zcollGetLastError(nullptr)).find("ZCOLL_IB_HCA='mlx5_0:0'"), std::string::npos)
      << zcollGetLastError(nullptr);
  unsetenv("ZCOLL_IB_HCA");
}

}  // namespace
