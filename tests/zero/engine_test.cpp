// The ZeRO engine across ranks (threads of this process, each with its own communicator), training
// examples/zero_train's MLP: stages 0-3 with and without offload give stage 0's losses and weights
// (fp32), mixed precision trains, fp16 overflows are skipped, per-rank memory follows the
// estimator, checkpoints load onto other rank counts and stages, and bad use fails with errors
// that say what is wrong on every rank.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <malloc.h>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/rank_pool.hpp"
#include "common/sanitizers.hpp"
#include "adamw.hpp"
#include "mlp.hpp"
#include "zcoll/zero.hpp"

namespace zcoll::zero {
namespace {

using zcoll::test::RankPool;
using zero_train::Mlp;
using zero_train::MlpShape;

MlpShape smallShape() {
  MlpShape s;
  s.input = 16, s.hidden = 48, s.output = 8, s.layers = 3, s.batch = 8, s.seed = 7;
  return s;  // 3560 parameters in 6 groups
}

// A DeepSpeed config: the common part plus `zero` (the zero_optimization object) and `extra` keys.
std::string config(int stage, const std::string& zero = "", const std::string& extra = "") {
  std::string z = "\"stage\": " + std::to_string(stage) + ", \"overlap_comm\": true, \"reduce_bucket_size\": 1000";
  if (!zero.empty()) z += ", " + zero;
  std::string c = "{\"train_micro_batch_size_per_gpu\": 8, \"gradient_clipping\": 1.0,"
                  "\"optimizer\": {\"type\": \"AdamW\", \"params\": {\"lr\": 0.003, \"weight_decay\": 0.01}},"
                  "\"scheduler\": {\"type\": \"WarmupLR\", \"params\": {\"warmup_min_lr\": 0, \"warmup_max_lr\": 0.003,"
                  " \"warmup_num_steps\": 5, \"warmup_type\": \"linear\"}},"
                  "\"zero_optimization\": {" + z + "}";
  if (!extra.empty()) c += ", " + extra;
  return c + "}";
}

const std::string kStage3Keys =
    "\"stage3_param_persistence_threshold\": 50, \"stage3_prefetch_bucket_size\": 3000, "
    "\"stage3_max_live_parameters\": 3000, \"stage3_max_reuse_distance\": 1000";
const std::string kOffload = "\"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": true}";
const std::string kOffloadParam = "\"offload_param\": {\"device\": \"cpu\"}";

struct Training {
  std::vector<double> losses;               // rank 0: the mean over ranks per step
  std::vector<std::vector<float>> weights;  // rank 0: every group's master weights at the end
  std::vector<EngineMemory> memory;         // per rank
  EngineStats stats;                        // rank 0
  std::vector<std::string> errors;          // per rank: the first failure
};

using Hook = std::function<Result(int rank, Engine& engine)>;

// Trains `steps` steps on every rank of the pool. `beforeTraining` runs after init (e.g. a load).
Training train(RankPool& pool, const std::string& json, int steps, MlpShape shape = smallShape(), const Hook& beforeTraining = {},
          const Hook& afterTraining = {}) {
  Training run;
  run.memory.resize(static_cast<size_t>(pool.nranks()));
  run.errors.resize(static_cast<size_t>(pool.nranks()));
  std::mutex mu;
  pool.run([&](int rank, zcollComm_t comm) {
    auto failed = [&](const std::string& msg) {
      std::lock_guard lock(mu);
      run.errors[static_cast<size_t>(rank)] = msg;
    };
    const ParseResult cfg = parseConfig(json, pool.nranks());
    if (!cfg.ok) return failed(cfg.error);
    Mlp model(shape);
    Result r;
    EngineOptions options;
    options.optimizerThreads = 1;
    options.log = false;
    auto engine = Engine::create(comm, cfg.config, model.groups(), options, &r);
    if (!engine) return failed(r.message);
    for (int g = 0; g < static_cast<int>(model.groups().size()); ++g) {
      const std::vector<float> v = model.initialValues(g);
      if (!(r = engine->initParams(g, v.data())).ok()) return failed(r.message);
    }
    if (beforeTraining && !(r = beforeTraining(rank, *engine)).ok()) return failed(r.message);
    const int64_t first = engine->stats().steps;
    for (int64_t s = first; s < first + steps; ++s) {
      double sum = 0;
      for (int m = 0; m < cfg.config.gradientAccumulationSteps; ++m) {
        std::string error;
        const double loss = model.microBatch(*engine, s, m, rank, &error);
        if (!error.empty()) return failed(error);
        sum += loss;
        if (!(r = engine->step(nullptr)).ok()) return failed(r.message);
      }
      double mean = sum / static_cast<double>(cfg.config.gradientAccumulationSteps);
      if (zcollAllReduce(&mean, &mean, 1, zcollFloat64, zcollAvg, comm, nullptr) != zcollSuccess)
        return failed(zcollGetLastError(comm));
      if (rank == 0) run.losses.push_back(mean);
    }
    std::vector<std::vector<float>> weights;
    for (int g = 0; g < static_cast<int>(model.groups().size()); ++g) {
      weights.emplace_back(static_cast<size_t>(model.groups()[static_cast<size_t>(g)].numel));
      if (!(r = engine->gatherMaster(g, weights.back().data())).ok()) return failed(r.message);
    }
    if (afterTraining && !(r = afterTraining(rank, *engine)).ok()) return failed(r.message);
    std::lock_guard lock(mu);
    run.memory[static_cast<size_t>(rank)] = engine->memory();
    if (rank == 0) run.weights = std::move(weights), run.stats = engine->stats();
  });
  return run;
}

void expectNoErrors(const Training& run) {
  for (size_t r = 0; r < run.errors.size(); ++r) EXPECT_EQ(run.errors[r], "") << "rank " << r;
}

void expectSameCurve(const Training& ref, const Training& run, double rel, const std::string& what) {
  ASSERT_EQ(run.losses.size(), ref.losses.size()) << what;
  for (size_t i = 0; i < ref.losses.size(); ++i)
    ASSERT_NEAR(run.losses[i], ref.losses[i], rel * std::abs(ref.losses[i])) << what << ": step " << i + 1;
}

void expectSameWeights(const Training& ref, const Training& run, double tol, const std::string& what) {
  ASSERT_EQ(run.weights.size(), ref.weights.size()) << what;
  for (size_t g = 0; g < ref.weights.size(); ++g)
    for (size_t i = 0; i < ref.weights[g].size(); ++i)
      ASSERT_NEAR(run.weights[g][i], ref.weights[g][i], tol) << what << ": group " << g << " element " << i;
}

class ZeroEngine : public testing::Test {
 protected:
  static void SetUpTestSuite() { pool4_ = new RankPool(4, ZCOLL_CONFIG_INITIALIZER); }
  static void TearDownTestSuite() { delete pool4_; }
  static RankPool* pool4_;
};
RankPool* ZeroEngine::pool4_ = nullptr;

// The acceptance test: 50 steps, fp32, every stage with and without offload against stage 0.
TEST_F(ZeroEngine, EveryStageAndOffloadGivesStageZerosLossCurve) {
  const Training ref = train(*pool4_, config(0), 50);
  expectNoErrors(ref);
  ASSERT_EQ(ref.losses.size(), 50u);
  EXPECT_LT(ref.losses.back(), 0.5 * ref.losses.front()) << "the model does not learn";
  const std::vector<std::pair<std::string, std::string>> variants = {
      {"stage 1", config(1)},
      {"stage 2", config(2)},
      {"stage 3", config(3, kStage3Keys)},
      {"stage 1 offload", config(1, kOffload)},
      {"stage 2 offload", config(2, kOffload)},
      {"stage 3 offload optimizer and parameters", config(3, kStage3Keys + ", " + kOffload + ", " + kOffloadParam)},
      {"stage 2 without overlap", config(2, "\"overlap_comm\": false")},
      {"stage 1, reduce_scatter false", config(1, "\"reduce_scatter\": false")},
      {"stage 2, reduce_scatter false", config(2, "\"reduce_scatter\": false")},
      {"stage 3 with default stage3 keys", config(3)},
  };
  for (const auto& [name, json] : variants) {
    SCOPED_TRACE(name);
    const Training run = train(*pool4_, json, 50);
    expectNoErrors(run);
    expectSameCurve(ref, run, 1e-5, name);
    expectSameWeights(ref, run, 1e-4, name);
  }
}

TEST_F(ZeroEngine, GradientAccumulationMatchesAcrossStages) {
  const std::string gas = "\"gradient_accumulation_steps\": 3";
  const Training ref = train(*pool4_, config(0, "", gas), 12);
  expectNoErrors(ref);
  for (int stage : {1, 2, 3}) {
    const Training run = train(*pool4_, config(stage, stage == 3 ? kStage3Keys : "", gas), 12);
    expectNoErrors(run);
    expectSameCurve(ref, run, 1e-5, "stage " + std::to_string(stage));
    EXPECT_EQ(run.stats.steps, 12);
    EXPECT_EQ(run.stats.microSteps, 36);
  }
}

TEST_F(ZeroEngine, ThreeRanksPadTheirShards) {
  RankPool pool3(3, ZCOLL_CONFIG_INITIALIZER);
  const Training ref = train(pool3, config(0), 15);
  expectNoErrors(ref);
  for (int stage : {1, 2, 3}) {
    const Training run = train(pool3, config(stage, stage == 3 ? kStage3Keys : ""), 15);
    expectNoErrors(run);
    expectSameCurve(ref, run, 1e-5, "stage " + std::to_string(stage));
    expectSameWeights(ref, run, 1e-4, "stage " + std::to_string(stage));
  }
}

TEST_F(ZeroEngine, MixedPrecisionTrainsAtEveryStage) {
  for (const std::string prec : {"\"bf16\": {\"enabled\": true}", "\"fp16\": {\"enabled\": true, \"initial_scale_power\": 12}"}) {
    const Training ref = train(*pool4_, config(0, "", prec), 30);
    expectNoErrors(ref);
    ASSERT_EQ(ref.losses.size(), 30u);
    EXPECT_LT(ref.losses.back(), 0.6 * ref.losses.front()) << prec;
    for (int stage : {1, 2, 3}) {
      const Training run = train(*pool4_, config(stage, stage == 3 ? kStage3Keys : kOffload, prec), 30);
      expectNoErrors(run);
      // 16-bit gradients are rounded at different points by different reductions: close, not equal.
      expectSameCurve(ref, run, 3e-2, prec + " stage " + std::to_string(stage));
    }
  }
}

TEST_F(ZeroEngine, Fp16OverflowSkipsTheStepAndLowersTheScale) {
  // 2^30 times the gradients overflows fp16: steps are skipped until the scale comes down.
  const std::string fp16 = "\"fp16\": {\"enabled\": true, \"initial_scale_power\": 30, \"hysteresis\": 1}";
  for (int stage : {0, 2, 3}) {
    const Training run = train(*pool4_, config(stage, stage == 3 ? kStage3Keys : "", fp16), 30);
    expectNoErrors(run);
    EXPECT_GT(run.stats.skippedSteps, 0) << "stage " << stage;
    EXPECT_EQ(run.stats.steps + run.stats.skippedSteps, 30);
    EXPECT_LT(run.stats.lossScale, std::ldexp(1.0, 30));
    EXPECT_GT(run.stats.steps, 10);
    for (double l : run.losses) EXPECT_TRUE(std::isfinite(l));
  }
}

// gradient_predivide_factor and prescale_gradients (DeepSpeed's): the 4 ranks' fp16 gradients are
// divided before their sum, so a loss scale 4x higher fits; in fp32 the curve is unchanged.
TEST_F(ZeroEngine, PredividedGradientsOverflowLessAndKeepTheCurve) {
  const std::string fp16 = "\"fp16\": {\"enabled\": true, \"initial_scale_power\": 30, \"hysteresis\": 1}";
  for (int stage : {0, 2}) {
    const Training plain = train(*pool4_, config(stage, "", fp16), 30);
    const Training predivided = train(*pool4_, config(stage, "", fp16 + ", \"gradient_predivide_factor\": 4"), 30);
    const Training prescaled = train(*pool4_, config(stage, "", fp16 + ", \"prescale_gradients\": true"), 30);
    for (const Training* t : {&plain, &predivided, &prescaled}) expectNoErrors(*t);
    EXPECT_LT(predivided.stats.skippedSteps, plain.stats.skippedSteps) << "stage " << stage;
    EXPECT_EQ(prescaled.stats.skippedSteps, predivided.stats.skippedSteps) << "stage " << stage;
    EXPECT_GT(predivided.stats.lossScale, plain.stats.lossScale) << "stage " << stage;
    const Training ref = train(*pool4_, config(stage), 20);
    const Training run = train(*pool4_, config(stage, "", "\"gradient_predivide_factor\": 4"), 20);
    expectSameCurve(ref, run, 1e-5, "fp32 predivided, stage " + std::to_string(stage));
  }
}

// Per-rank model-state bytes at 4 ranks against the estimator (bf16: the formulas' 2-byte
// parameters and gradients, 12 bytes of fp32 states).
TEST_F(ZeroEngine, MemoryFollowsTheEstimator) {
  MlpShape shape = smallShape();
  shape.input = 64, shape.hidden = 256, shape.output = 64, shape.layers = 3;  // ~99k parameters
  const int64_t params = Mlp(shape).parameters();
  struct Case {
    int stage;
    bool offOpt, offParam;
  };
  for (const Case c : {Case{0, false, false}, Case{1, false, false}, Case{2, false, false}, Case{3, false, false},
                       Case{1, true, false}, Case{2, true, false}, Case{3, true, false}, Case{3, true, true}}) {
    std::string z = c.stage == 3 ? "\"stage3_param_persistence_threshold\": 0" : "";
    if (c.offOpt) z += std::string(z.empty() ? "" : ", ") + kOffload;
    if (c.offParam) z += ", " + kOffloadParam;
    const Training run = train(*pool4_, config(c.stage, z, "\"bf16\": {\"enabled\": true}"), 2, shape);
    expectNoErrors(run);
    const MemoryEstimate est = estimateModelStates(params, 4, c.stage, c.offOpt, c.offParam);
    for (size_t r = 0; r < run.memory.size(); ++r) {
      const EngineMemory& m = run.memory[r];
      SCOPED_TRACE("stage " + std::to_string(c.stage) + (c.offOpt ? " offload optimizer" : "") +
                   (c.offParam ? " offload param" : "") + ", rank " + std::to_string(r));
      EXPECT_NEAR(static_cast<double>(m.deviceBytes), static_cast<double>(est.deviceBytes), 0.05 * est.deviceBytes + 64);
      EXPECT_NEAR(static_cast<double>(m.hostBytes), static_cast<double>(est.hostBytes), 0.05 * est.hostBytes + 64);
    }
  }
}

// Bytes of zcollMemAlloc memory mapped in this process (its buffers are memfds named zcoll-mem).
double sharedMemoryBytes() {
  std::ifstream maps("/proc/self/maps");
  double bytes = 0;
  for (std::string line; std::getline(maps, line);) {
    if (line.find("/memfd:zcoll-mem") == std::string::npos) continue;
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2) bytes += static_cast<double>(hi - lo);
  }
  return bytes;
}

// The engine's byte counts are what it really allocated: malloc's own figures and the zcollMemAlloc
// mappings (HostBuffer's first choice) across create().
TEST(ZeroEngineMemory, CountsMatchTheAllocator) {
  if (zcoll::test::kAddressSanitizer || zcoll::test::kThreadSanitizer)
    GTEST_SKIP() << "a sanitizer's allocator: mallinfo2 does not see its allocations";
  RankPool pool(1, ZCOLL_CONFIG_INITIALIZER);
  MlpShape shape = smallShape();
  shape.input = 128, shape.hidden = 512, shape.output = 128, shape.layers = 3;  // ~400k parameters
  for (int stage : {0, 1, 2, 3}) {
    pool.run([&](int, zcollComm_t comm) {
      const TrainConfig cfg = parseConfig(config(stage, "", "\"bf16\": {\"enabled\": true}"), 1).config;
      const std::vector<GroupSpec> groups = Mlp(shape).groups();
      const struct mallinfo2 before = mallinfo2();
      const double sharedBefore = sharedMemoryBytes();
      Result r;
      auto engine = Engine::create(comm, cfg, groups, EngineOptions{1, false}, &r);
      ASSERT_NE(engine, nullptr) << r.message;
      const struct mallinfo2 after = mallinfo2();
      const double allocated = static_cast<double>((after.uordblks + after.hblkhd) - (before.uordblks + before.hblkhd)) +
                               (sharedMemoryBytes() - sharedBefore);
      const EngineMemory m = engine->memory();
      const double counted = static_cast<double>(m.paramBytes + m.gradBytes + m.optimizerBytes + m.bufferBytes);
      EXPECT_NEAR(allocated, counted, 0.05 * counted) << "stage " << stage;
    });
  }
}

std::vector<float> readSafetensor(const std::string& path, const std::string& name) {
  std::ifstream in(path, std::ios::binary);
  uint64_t len = 0;
  in.read(reinterpret_cast<char*>(&len), 8);
  std::string header(len, ' ');
  in.read(header.data(), static_cast<std::streamsize>(len));
  const auto j = nlohmann::json::parse(header);
  const auto range = j.at(name).at("data_offsets");
  std::vector<float> out((range[1].get<size_t>() - range[0].get<size_t>()) / 4);
  in.seekg(static_cast<std::streamoff>(8 + len + range[0].get<size_t>()));
  in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(out.size() * 4));
  return out;
}

TEST_F(ZeroEngine, CheckpointsLoadOntoOtherRankCountsAndStages) {
  const std::string dir = testing::TempDir() + "zero_ckpt_" + std::to_string(getpid());
  // 4 ranks at stage 2 train 4 steps and save; the same run goes on to 8 steps.
  const Training saved = train(*pool4_, config(2), 4, smallShape(), {},
                          [&](int, Engine& e) { return e.saveCheckpoint(dir, "step4"); });
  expectNoErrors(saved);
  const Training straight = train(*pool4_, config(2), 8);
  expectNoErrors(straight);

  // The same weights on 2 ranks at stage 3, 3 ranks at stage 0 (no training after the load).
  auto load = [&](int, Engine& e) { return e.loadCheckpoint(dir, ""); };
  MlpShape other = smallShape();
  other.seed = 99;  // different initial values: the load must replace all of them
  for (const auto& [ranks, stage] : std::vector<std::pair<int, int>>{{2, 3}, {3, 0}, {1, 1}}) {
    RankPool pool(ranks, ZCOLL_CONFIG_INITIALIZER);
    const Training loaded = train(pool, config(stage, stage == 3 ? kStage3Keys : ""), 0, other, load);
    expectNoErrors(loaded);
    other.seed = 99;
    SCOPED_TRACE(std::to_string(ranks) + " ranks, stage " + std::to_string(stage));
    expectSameWeights(saved, loaded, 0, "loaded");
  }
  // 4 ranks at stage 1 go on from the checkpoint: the optimizer states and counters came back too.
  const Training resumed = train(*pool4_, config(1), 4, smallShape(), load);
  expectNoErrors(resumed);
  ASSERT_EQ(resumed.losses.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(resumed.losses[i], straight.losses[4 + i], 1e-5 * straight.losses[4 + i]);
  expectSameWeights(straight, resumed, 1e-5, "resumed");
  EXPECT_EQ(resumed.stats.steps, 8);

  // zcoll-zero-consolidate writes the full fp32 weights.
  const char* tool = std::getenv("ZCOLL_ZERO_CONSOLIDATE");
  if (tool) {
    const std::string out = dir + "/full.safetensors";
    const std::string cmd = std::string(tool) + " " + dir + " " + out + " > /dev/null";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    const auto groups = Mlp(smallShape()).groups();
    for (size_t g = 0; g < groups.size(); ++g) EXPECT_EQ(readSafetensor(out, groups[g].name), saved.weights[g]) << groups[g].name;
  } else {
    ADD_FAILURE() << "ZCOLL_ZERO_CONSOLIDATE is not set (meson sets it)";
  }
  std::system(("rm -rf " + dir).c_str());
}

TEST_F(ZeroEngine, SaveModelWritesTheWeightsOnRankZero) {
  const std::string path = testing::TempDir() + "zero_model_" + std::to_string(getpid()) + ".safetensors";
  for (int stage : {1, 3}) {
    const std::string z = stage == 3 ? kStage3Keys + ", \"stage3_gather_16bit_weights_on_model_save\": true" : "";
    const Training run = train(*pool4_, config(stage, z), 2, smallShape(), {}, [&](int, Engine& e) { return e.saveModel(path); });
    expectNoErrors(run);
    const auto groups = Mlp(smallShape()).groups();
    for (size_t g = 0; g < groups.size(); ++g) EXPECT_EQ(readSafetensor(path, groups[g].name), run.weights[g]);
    std::remove(path.c_str());
  }
  const Training refused = train(*pool4_, config(3, kStage3Keys), 1, smallShape(), {}, [&](int, Engine& e) { return e.saveModel(path); });
  for (const std::string& e : refused.errors) EXPECT_NE(e.find("stage3_gather_16bit_weights_on_model_save"), std::string::npos) << e;
}

// Registration and configuration that differ between ranks fail on every rank, naming the cause.
TEST_F(ZeroEngine, MismatchedRegistrationsFailOnEveryRank) {
  struct Case {
    std::function<void(int rank, std::vector<GroupSpec>&, TrainConfig&)> change;
    std::string expect;  // on ranks that did nothing wrong themselves
  };
  const std::vector<Case> cases = {
      {[](int rank, std::vector<GroupSpec>& g, TrainConfig&) { if (rank == 2) g[1].name = "renamed"; },
       "group 1 differs between rank 0 and rank 2"},
      {[](int rank, std::vector<GroupSpec>& g, TrainConfig&) { if (rank == 1) g.pop_back(); }, "rank 1 5 groups"},
      {[](int rank, std::vector<GroupSpec>& g, TrainConfig&) { if (rank == 3) g[0].numel = 0, g[0].shape.clear(); },
       "rank 3 rejected its own arguments"},
      {[](int rank, std::vector<GroupSpec>&, TrainConfig& c) { if (rank == 1) c.zero.stage = 3; },
       "rank 1's configuration differs"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> errors(4);
    pool4_->run([&](int rank, zcollComm_t comm) {
      TrainConfig cfg = parseConfig(config(2), 4).config;
      std::vector<GroupSpec> groups = Mlp(smallShape()).groups();
      c.change(rank, groups, cfg);
      Result r;
      auto engine = Engine::create(comm, cfg, groups, EngineOptions{}, &r);
      EXPECT_EQ(engine, nullptr);
      EXPECT_EQ(r.code, zcollInvalidArgument);
      errors[static_cast<size_t>(rank)] = r.message;
    });
    int matching = 0;
    for (const std::string& e : errors) matching += e.find(c.expect) != std::string::npos;
    EXPECT_GE(matching, 3) << c.expect << "\n" << errors[0] << "\n" << errors[1] << "\n" << errors[2] << "\n" << errors[3];
  }
  // The bad rank's own message names the group.
  std::string own;
  pool4_->run([&](int rank, zcollComm_t comm) {
    std::vector<GroupSpec> groups = Mlp(smallShape()).groups();
    if (rank == 0) groups[4].shape = {3, 3};
    Result r;
    auto engine = Engine::create(comm, parseConfig(config(1), 4).config, groups, EngineOptions{}, &r);
    if (rank == 0) own = r.message;
  });
  EXPECT_NE(own.find("groups[4] ('layer2.weight').shape"), std::string::npos) << own;
}

TEST_F(ZeroEngine, BadCallsAreRefusedWithTheirArgumentNamed) {
  pool4_->run([&](int rank, zcollComm_t comm) {
    Mlp model(smallShape());
    Result r;
    auto engine = Engine::create(comm, parseConfig(config(2), 4).config, model.groups(), EngineOptions{}, &r);
    ASSERT_NE(engine, nullptr) << r.message;
    r = engine->fetch(-1);
    EXPECT_EQ(r.code, zcollInvalidArgument);
    EXPECT_NE(r.message.find("fetch: group -1"), std::string::npos) << r.message;
    EXPECT_EQ(engine->grads(6, &r), nullptr);
    EXPECT_NE(r.message.find("grads: group 6 is not in [0, 6)"), std::string::npos) << r.message;
    EXPECT_EQ(engine->initParams(0, nullptr).code, zcollInvalidArgument);
    // Gradients marked twice, and written after their bucket went to reduction.
    ASSERT_NE(engine->grads(5, &r), nullptr);
    ASSERT_TRUE(engine->gradsReady(5).ok());
    r = engine->gradsReady(5);
    EXPECT_EQ(r.code, zcollInvalidUsage);
    EXPECT_NE(r.message.find("already marked ready"), std::string::npos) << r.message;
    for (int g = 4; g >= 0; --g) {
      ASSERT_NE(engine->grads(g, &r), nullptr) << r.message;
      ASSERT_TRUE(engine->gradsReady(g).ok());
    }
    EXPECT_EQ(engine->grads(0, &r), nullptr);
    EXPECT_EQ(r.code, zcollInvalidUsage);
    EXPECT_TRUE(engine->step(nullptr).ok());
    r = engine->saveCheckpoint("/tmp", "a/b");
    EXPECT_EQ(r.code, zcollInvalidArgument);
    EXPECT_NE(r.message.find("tag"), std::string::npos);
    // A checkpoint that is not there fails on every rank (collectively) and leaves the engine usable.
    r = engine->loadCheckpoint("/nonexistent/zcoll", "tag");
    EXPECT_FALSE(r.ok());
    if (rank == 0) {
      EXPECT_NE(r.message.find("/nonexistent/zcoll/tag/meta.json"), std::string::npos) << r.message;
    }
    EXPECT_TRUE(engine->step(nullptr).ok());
  });
}

// Parameter groups with their own settings, a frozen group and a caller-set boundary (what
// zcoll_torch.zero builds on): after two micro-batches (the first marked "not a boundary"), each
// group's weights are torch's AdamW step with its settings on the mean gradient; the frozen group
// keeps its values and refuses gradients.
TEST_F(ZeroEngine, ParamGroupsFrozenGroupsAndTheBoundary) {
  const std::vector<int64_t> sizes = {37, 20, 11};
  const ParamGroupOptions opts[2] = {{0.01, 0.8, 0.99, 1e-6, 0.1}, {0.002, 0.9, 0.999, 1e-8, 0.0}};
  auto init = [](int g, int64_t i) { return 0.01f * static_cast<float>((g + 1) * (i % 13)) - 0.05f; };
  auto grad = [](int rank, int micro, int g, int64_t i) { return 0.001f * static_cast<float>((rank + 1) * (micro + 2) * (g + i % 7)); };
  for (int stage = 0; stage <= 3; ++stage) {
    pool4_->run([&](int rank, zcollComm_t comm) {
      std::vector<GroupSpec> groups = {{"a", sizes[0], {}, 0, false}, {"b", sizes[1], {}, 1, false}, {"frozen", sizes[2], {}, 0, true}};
      Result r;
      auto engine = Engine::create(comm, parseConfig("{\"train_batch_size\": 4, \"zero_optimization\": {\"stage\": " +
                                                         std::to_string(stage) + ", \"reduce_bucket_size\": 40}}", 4).config,
                                   groups, EngineOptions{}, &r);
      ASSERT_NE(engine, nullptr) << r.message;
      for (int g = 0; g < 3; ++g) {
        std::vector<float> v(static_cast<size_t>(sizes[static_cast<size_t>(g)]));
        for (int64_t i = 0; i < sizes[static_cast<size_t>(g)]; ++i) v[static_cast<size_t>(i)] = init(g, i);
        ASSERT_TRUE(engine->initParams(g, v.data()).ok());
      }
      for (int k = 0; k < 2; ++k) ASSERT_TRUE(engine->setParamGroup(k, opts[k]).ok());
      EXPECT_EQ(engine->setParamGroup(2, opts[0]).code, zcollInvalidArgument);
      EXPECT_EQ(engine->grads(2, &r), nullptr);
      EXPECT_NE(r.message.find("frozen"), std::string::npos) << r.message;
      for (int micro = 0; micro < 2; ++micro) {
        if (micro == 0) {
          ASSERT_TRUE(engine->setBoundary(Boundary::No).ok());
        }
        EXPECT_EQ(engine->atBoundary(), micro == 1);
        for (int g = 2; g >= 0; --g) {
          if (engine->fetch(g).code != zcollSuccess) FAIL() << "fetch";
          if (g < 2) {
            float* gp = static_cast<float*>(engine->grads(g, &r));
            ASSERT_NE(gp, nullptr) << r.message;
            for (int64_t i = 0; i < sizes[static_cast<size_t>(g)]; ++i) gp[i] += grad(rank, micro, g, i);
            ASSERT_TRUE(engine->gradsReady(g).ok());
          }
          ASSERT_TRUE(engine->release(g).ok());
        }
        bool stepped = true;
        ASSERT_TRUE(engine->step(&stepped).ok());
        EXPECT_EQ(stepped, micro == 1) << "stage " << stage << " micro-batch " << micro;
      }
      for (int g = 0; g < 3; ++g) {
        const size_t n = static_cast<size_t>(sizes[static_cast<size_t>(g)]);
        std::vector<float> got(n), want(n), mean(n, 0.f), m(n, 0.f), v(n, 0.f);
        ASSERT_TRUE(engine->gatherMaster(g, got.data()).ok());
        for (size_t i = 0; i < n; ++i) {
          want[i] = init(g, static_cast<int64_t>(i));
          for (int q = 0; q < 4; ++q)
            for (int micro = 0; micro < 2; ++micro) mean[i] += grad(q, micro, g, static_cast<int64_t>(i));
          mean[i] *= 0.25f;  // over ranks (gradient_accumulation_steps is 1)
        }
        if (g < 2) {
          AdamStep a;
          a.lr = static_cast<float>(opts[g].lr), a.beta1 = static_cast<float>(opts[g].beta1);
          a.beta2 = static_cast<float>(opts[g].beta2), a.eps = static_cast<float>(opts[g].eps);
          a.weightDecay = static_cast<float>(opts[g].weightDecay), a.step = 1, a.decoupled = true;
          adamStepScalar(want.data(), mean.data(), m.data(), v.data(), n, a);
        }
        for (size_t i = 0; i < n; ++i)
          ASSERT_NEAR(got[i], want[i], 1e-6) << "stage " << stage << " group " << g << " element " << i;
      }
    });
  }
}

// A rank that stops answering makes the others fail within the communicator's timeout.
TEST(ZeroEngineFailure, ADeadPeerFailsTheOthersWithinTheTimeout) {
  zcollConfig_t cfg = ZCOLL_CONFIG_INITIALIZER;
  cfg.timeoutMs = 2000;
  RankPool pool(3, cfg);
  pool.run([&](int rank, zcollComm_t comm) {
    Mlp model(smallShape());
    Result r;
    auto engine = Engine::create(comm, parseConfig(config(2), 3).config, model.groups(), EngineOptions{}, &r);
    ASSERT_NE(engine, nullptr) << r.message;
    if (rank == 2) return;  // dies: no more calls
    const auto t0 = std::chrono::steady_clock::now();
    std::string error;
    double loss = model.microBatch(*engine, 0, 0, rank, &error);
    if (error.empty()) r = engine->step(nullptr);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_TRUE(!error.empty() || !r.ok()) << loss;
    EXPECT_LT(took, 10.0);
    r = engine->step(nullptr);
    EXPECT_EQ(r.code, zcollInvalidUsage);
    EXPECT_NE(r.message.find("failed earlier"), std::string::npos) << r.message;
  });
}

}  // namespace
}  // namespace zcoll::zero
