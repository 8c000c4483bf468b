// examples/zero_train as users run it: `zcoll-run -n 4 zero_train --config FILE --steps N`, one
// process per rank. Stage 3 with offload prints stage 0's loss curve; a run saved at 4 ranks
// resumes at 2; a bad config fails with the key named.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "common/run_command.hpp"

namespace {

using Output = zcoll::test::CommandResult;

Output shell(const std::string& cmd) { return zcoll::test::runCommand(cmd); }

std::vector<double> losses(const std::string& text) {
  std::vector<double> out;
  const std::regex line(R"(^step (\d+) loss ([-+.\deE]+)$)");
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::smatch m;
    const std::string l = text.substr(at, end - at);
    if (std::regex_match(l, m, line)) out.push_back(std::stod(m[2]));
    at = end + 1;
  }
  return out;
}

class ZeroTrain : public testing::Test {
 protected:
  void SetUp() override {
    const char* run = std::getenv("ZCOLL_RUN");
    const char* train = std::getenv("ZCOLL_ZERO_TRAIN");
    if (!run || !train) GTEST_SKIP() << "ZCOLL_RUN and ZCOLL_ZERO_TRAIN are not set (meson test sets them)";
    run_ = run, train_ = train;
    dir_ = testing::TempDir() + "zero_train_" + std::to_string(getpid());
    std::system(("mkdir -p " + dir_).c_str());
  }
  void TearDown() override {
    if (!dir_.empty()) std::system(("rm -rf " + dir_).c_str());
  }
  std::string writeConfig(const std::string& name, const std::string& zero, const std::string& extra = "") {
    const std::string path = dir_ + "/" + name + ".json";
    std::ofstream(path) << "{\"train_micro_batch_size_per_gpu\": 8, \"gradient_clipping\": 1.0,"
                           "\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.003}},"
                           "\"zero_optimization\": {" << zero << "}" << extra << "}";
    return path;
  }
  Output train(int ranks, const std::string& config, const std::string& more) {
    return shell(run_ + " -n " + std::to_string(ranks) + " " + train_ + " --config " + config +
                 " --layers 3 --hidden 64 --input 32 --output 16 " + more);
  }
  std::string run_, train_, dir_;
};

TEST_F(ZeroTrain, StageThreeWithOffloadPrintsStageZerosCurve) {
  const Output ref = train(4, writeConfig("s0", "\"stage\": 0"), "--steps 50");
  ASSERT_EQ(ref.status, 0) << ref.out;
  const std::vector<double> a = losses(ref.out);
  ASSERT_EQ(a.size(), 50u) << ref.out;
  EXPECT_LT(a.back(), 0.5 * a.front());
  EXPECT_NE(ref.out.find("summary: ranks 4 stage 0 dtype fp32"), std::string::npos) << ref.out;
  const Output s3 = train(4, writeConfig("s3", "\"stage\": 3, \"overlap_comm\": true, \"stage3_param_persistence_threshold\": 100, "
                                               "\"offload_optimizer\": {\"device\": \"cpu\"}, \"offload_param\": {\"device\": \"cpu\"}"),
                          "--steps 50");
  ASSERT_EQ(s3.status, 0) << s3.out;
  const std::vector<double> b = losses(s3.out);
  ASSERT_EQ(b.size(), 50u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 1e-5 * a[i]) << "step " << i + 1;
}

// The engine's buffers come from zcollMemAlloc: with the zero-copy threshold lowered to the model's
// small buckets, its reduce-scatters, all-reduces and all-gathers run zero copy (the trace counts
// them) and train the same curve as the copying path.
TEST_F(ZeroTrain, ZeroCopyTrainsTheCopyingPathsCurve) {
  for (const char* stage : {"1", "3"}) {
    const std::string cfg = writeConfig(std::string("zc") + stage, std::string("\"stage\": ") + stage);
    const Output copying = shell("ZCOLL_ZERO_COPY=0 " + run_ + " -n 3 " + train_ + " --config " + cfg +
                                 " --layers 3 --hidden 64 --input 32 --output 16 --steps 20");
    ASSERT_EQ(copying.status, 0) << copying.out;
    const Output zero = shell("ZCOLL_ZERO_COPY=64 ZCOLL_DEBUG=TRACE ZCOLL_DEBUG_SUBSYS=coll " + run_ + " -n 3 " + train_ +
                              " --config " + cfg + " --layers 3 --hidden 64 --input 32 --output 16 --steps 20");
    ASSERT_EQ(zero.status, 0) << zero.out;
    EXPECT_NE(zero.out.find("zero copy over 3 ranks"), std::string::npos) << "stage " << stage;
    const std::vector<double> a = losses(copying.out), b = losses(zero.out);
    ASSERT_EQ(a.size(), 20u) << copying.out;
    ASSERT_EQ(b.size(), 20u) << zero.out;
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 1e-5 * a[i]) << "stage " << stage << " step " << i + 1;
  }
}

TEST_F(ZeroTrain, ASavedRunResumesOnAnotherRankCount) {
  const std::string cfg = writeConfig("s2", "\"stage\": 2");
  const Output first = train(4, cfg, "--steps 5 --save " + dir_ + "/ckpt");
  ASSERT_EQ(first.status, 0) << first.out;
  EXPECT_NE(first.out.find("saved " + dir_ + "/ckpt/step5"), std::string::npos) << first.out;
  const Output resumed = train(2, writeConfig("s1", "\"stage\": 1"), "--steps 3 --load " + dir_ + "/ckpt");
  ASSERT_EQ(resumed.status, 0) << resumed.out;
  EXPECT_NE(resumed.out.find("loaded " + dir_ + "/ckpt at step 5"), std::string::npos) << resumed.out;
  EXPECT_NE(resumed.out.find("step 8 loss"), std::string::npos) << resumed.out;
}

TEST_F(ZeroTrain, ABadConfigNamesTheKey) {
  const Output out = train(2, writeConfig("bad", "\"stage\": 5"), "--steps 1");
  EXPECT_NE(out.status, 0);
  EXPECT_NE(out.out.find("zero_optimization.stage"), std::string::npos) << out.out;
  // "auto" is Hugging Face's to fill: outside zero_optimization (where it is DeepSpeed's default) it fails.
  const Output autoKey = train(2, writeConfig("auto", "\"stage\": 2", ", \"gradient_accumulation_steps\": \"auto\""), "--steps 1");
  EXPECT_NE(autoKey.status, 0);
  EXPECT_NE(autoKey.out.find("gradient_accumulation_steps"), std::string::npos) << autoKey.out;
}

}  // namespace
