// trace_test.cpp - ZCOLL_TRACE writes, per rank, Chrome trace events of every collective (in order,
// with its algorithm) and of the algorithm steps inside it.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "zcoll/zcoll.h"

namespace {

TEST(Trace, EveryCollectiveAndItsStepsPerRank) {
  char dir[] = "/tmp/zcoll-trace-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string pattern = std::string(dir) + "/t.json";
  setenv("ZCOLL_TRACE", pattern.c_str(), 1);
  zcollUniqueId id;
  ASSERT_EQ(zcollGetUniqueId(&id), zcollSuccess);
  const int n = 3, ops = 5;
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r)
    ranks.emplace_back([&, r] {
      zcollComm_t comm = nullptr;
      ASSERT_EQ(zcollCommInitRank(&comm, n, id, r), zcollSuccess) << zcollGetLastError(nullptr);
      std::vector<float> x(300000, 1.0f);
      for (int i = 0; i < ops; ++i)
        EXPECT_EQ(zcollAllReduce(x.data(), x.data(), x.size(), zcollFloat, zcollSum, comm, nullptr), zcollSuccess);
      EXPECT_EQ(zcollBroadcast(x.data(), x.data(), 1000, zcollFloat, 0, comm, nullptr), zcollSuccess);
      EXPECT_EQ(zcollCommDestroy(comm), zcollSuccess);
    });
  for (auto& t : ranks) t.join();
  unsetenv("ZCOLL_TRACE");

  for (int r = 0; r < n; ++r) {
    const std::string path = std::string(dir) + "/t.rank" + std::to_string(r) + ".json";
    std::ifstream f(path);
    ASSERT_TRUE(f.good()) << path;
    const nlohmann::json doc = nlohmann::json::parse(f);
    std::vector<nlohmann::json> colls;
    int steps = 0;
    for (const auto& e : doc["traceEvents"]) {
      if (e["ph"] != "X") continue;
      EXPECT_EQ(e["pid"], r);
      EXPECT_GE(e["dur"].get<double>(), 0.0);
      if (e["cat"] == "coll") colls.push_back(e);
      if (e["cat"] == "step") ++steps;
    }
    ASSERT_EQ(colls.size(), static_cast<size_t>(ops + 1)) << path;
    for (int i = 0; i < ops; ++i) {
      EXPECT_EQ(colls[i]["name"], "allreduce #" + std::to_string(i));
      EXPECT_EQ(colls[i]["args"]["seq"], i);
      EXPECT_EQ(colls[i]["args"]["count"], 300000);
      EXPECT_FALSE(colls[i]["args"]["algo"].get<std::string>().empty());
    }
    EXPECT_EQ(colls[ops]["name"], "broadcast #" + std::to_string(ops));
    EXPECT_GT(steps, ops);  // 1.2 MB in 256 KiB chunks: several steps per all-reduce
    EXPECT_EQ(doc["otherData"]["dropped_events"], 0);
    unlink(path.c_str());
  }
  rmdir(dir);
}

}  // namespace
