// zcoll/zero.hpp - the ZeRO layer (DeepSpeed's Zero Redundancy Optimizer on zcoll's public API).
//
// This part: the DeepSpeed-style JSON configuration (the keys a ZeRO trainer reads, with DeepSpeed's
// defaults) and the model-state memory estimator. Errors name the key; nothing here throws.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace zcoll::zero {

enum class OffloadDevice { None, Cpu, Nvme };

struct OffloadConfig {
  OffloadDevice device = OffloadDevice::None;
  bool pinMemory = false;
  std::string nvmePath;  // device "nvme" only
  int64_t bufferCount = 5;
};

// "zero_optimization"
struct ZeroOptimization {
  int stage = 0;
  bool overlapComm = false;  // DeepSpeed: true by default at stage 3, false below
  bool reduceScatter = true;
  int64_t reduceBucketSize = 500'000'000;  // elements
  bool allgatherPartitions = true;
  int64_t allgatherBucketSize = 500'000'000;
  bool contiguousGradients = true;
  OffloadConfig offloadOptimizer;
  OffloadConfig offloadParam;
  int64_t subGroupSize = 1'000'000'000;
  int64_t stage3PrefetchBucketSize = 50'000'000;
  int64_t stage3ParamPersistenceThreshold = 100'000;
  int64_t stage3MaxLiveParameters = 1'000'000'000;
  int64_t stage3MaxReuseDistance = 1'000'000'000;
  bool stage3Gather16bitWeightsOnModelSave = false;
  bool roundRobinGradients = false;
};

// "fp16": dynamic loss scaling when lossScale is 0.
struct Fp16Config {
  bool enabled = false;
  double lossScale = 0;
  int initialScalePower = 16;
  int64_t lossScaleWindow = 1000;
  int hysteresis = 2;
  bool consecutiveHysteresis = false;
  double minLossScale = 1;
};

// "optimizer": Adam or AdamW (decoupled weight decay).
struct OptimizerConfig {
  std::string type = "AdamW";
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weightDecay = 0.01;
};

// "scheduler": WarmupLR (warm up, then constant) or WarmupDecayLR (then linear decay to 0 at
// totalNumSteps); none keeps the optimizer's lr.
struct SchedulerConfig {
  enum class Type { None, WarmupLR, WarmupDecayLR };
  enum class Warmup { Log, Linear };
  Type type = Type::None;
  double warmupMinLr = 0;
  double warmupMaxLr = 1e-3;
  int64_t warmupNumSteps = 1000;
  int64_t totalNumSteps = 0;  // WarmupDecayLR: required
  Warmup warmupType = Warmup::Log;
  // The learning rate at a (0-based) step.
  double lrAt(int64_t step, double optimizerLr) const;
};

struct TrainConfig {
  ZeroOptimization zero;
  Fp16Config fp16;
  bool bf16 = false;
  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  // train_batch_size = train_micro_batch_size_per_gpu x gradient_accumulation_steps x ranks: any
  // two given determine the third; all three given must agree.
  int64_t trainBatchSize = 0;
  int64_t microBatchPerRank = 1;
  int64_t gradientAccumulationSteps = 1;
  double gradientClipping = 0;  // 0: off
};

struct ParseResult {
  bool ok = false;
  std::string error;                  // names the key, when !ok
  std::vector<std::string> warnings;  // unknown keys (ignored)
  TrainConfig config;
};

// Reads a DeepSpeed-style JSON configuration for a job of `ranks` ranks.
ParseResult parseConfig(std::string_view json, int ranks);
ParseResult parseConfigFile(const std::string& path, int ranks);

// Per-rank model-state bytes by the ZeRO paper's formulas for mixed-precision Adam (2 bytes of
// 16-bit parameters, 2 of 16-bit gradients and 12 of fp32 master weights, momentum and variance per
// parameter): stage 0 16P, stage 1 4P + 12P/N, stage 2 2P + 14P/N, stage 3 16P/N. Offloading the
// optimizer moves the 12-byte part (and, at stage 2-3, the gradient shard it reads) to host memory;
// offloading parameters (stage 3) moves the 16-bit parameter shard too.
struct MemoryEstimate {
  int64_t deviceBytes = 0;  // per rank, where compute runs
  int64_t hostBytes = 0;    // per rank, offloaded
};
MemoryEstimate estimateModelStates(int64_t params, int ranks, int stage, bool offloadOptimizer, bool offloadParam);

}  // namespace zcoll::zero
