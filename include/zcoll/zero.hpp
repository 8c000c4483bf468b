/** @file zcoll/zero.hpp
 *  The ZeRO layer (DeepSpeed's Zero Redundancy Optimizer on zcoll's public API).
 *
 *  This part: the DeepSpeed-style JSON configuration (the keys a ZeRO trainer reads, with
 *  DeepSpeed's defaults) and the model-state memory estimator. Errors name the key; nothing here
 *  throws. */
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

/** The ZeRO layer. */
namespace zcoll::zero {

/** Where offloaded state lives. */
enum class OffloadDevice {
  None, /**< not offloaded */
  Cpu,  /**< host memory */
  Nvme  /**< NVMe (refused by this version) */
};

/** "offload_optimizer" / "offload_param". */
struct OffloadConfig {
  OffloadDevice device = OffloadDevice::None; ///< "device": none, cpu (nvme is refused)
  bool pinMemory = false;                     ///< "pin_memory": page-locked host buffers
  std::string nvmePath;                       ///< "nvme_path" (device nvme only)
  int64_t bufferCount = 5;                    ///< "buffer_count"
};

/** "zero_optimization". Sizes are in elements, as in DeepSpeed. */
struct ZeroOptimization {
  int stage = 0;                                   ///< "stage": 0 to 3
  bool overlapComm = false;                        ///< "overlap_comm" (DeepSpeed: true by default at stage 3)
  bool reduceScatter = true;                       ///< "reduce_scatter": reduce-scatter instead of all-reduce
  int64_t reduceBucketSize = 500'000'000;          ///< "reduce_bucket_size"
  bool allgatherPartitions = true;                 ///< "allgather_partitions"
  int64_t allgatherBucketSize = 500'000'000;       ///< "allgather_bucket_size"
  bool contiguousGradients = true;                 ///< "contiguous_gradients"
  OffloadConfig offloadOptimizer;                  ///< "offload_optimizer" (stages 1-3)
  OffloadConfig offloadParam;                      ///< "offload_param" (stage 3)
  int64_t subGroupSize = 1'000'000'000;            ///< "sub_group_size"
  int64_t stage3PrefetchBucketSize = 50'000'000;   ///< "stage3_prefetch_bucket_size"
  int64_t stage3ParamPersistenceThreshold = 100'000; ///< "stage3_param_persistence_threshold"
  int64_t stage3MaxLiveParameters = 1'000'000'000; ///< "stage3_max_live_parameters"
  int64_t stage3MaxReuseDistance = 1'000'000'000;  ///< "stage3_max_reuse_distance"
  bool stage3Gather16bitWeightsOnModelSave = false; ///< "stage3_gather_16bit_weights_on_model_save"
  bool roundRobinGradients = false;                ///< "round_robin_gradients"
};

/** "fp16": dynamic loss scaling when lossScale is 0. */
struct Fp16Config {
  bool enabled = false;               ///< "enabled"
  double lossScale = 0;               ///< "loss_scale": 0 for dynamic scaling
  int initialScalePower = 16;         ///< "initial_scale_power": the first scale is 2^this
  int64_t lossScaleWindow = 1000;     ///< "loss_scale_window": steps without overflow before raising
  int hysteresis = 2;                 ///< "hysteresis": overflows tolerated before lowering
  bool consecutiveHysteresis = false; ///< "consecutive_hysteresis"
  double minLossScale = 1;            ///< "min_loss_scale"
};

/** "optimizer": Adam or AdamW (decoupled weight decay). */
struct OptimizerConfig {
  std::string type = "AdamW"; ///< "type": Adam or AdamW
  double lr = 1e-3;           ///< "params.lr"
  double beta1 = 0.9;         ///< "params.betas"[0]
  double beta2 = 0.999;       ///< "params.betas"[1]
  double eps = 1e-8;          ///< "params.eps"
  double weightDecay = 0.01;  ///< "params.weight_decay" (default 0 for Adam)
};

/** "scheduler": WarmupLR (warm up, then constant) or WarmupDecayLR (then linear decay to 0 at
 *  totalNumSteps); none keeps the optimizer's lr. */
struct SchedulerConfig {
  /** "type". */
  enum class Type {
    None,         /**< no scheduler */
    WarmupLR,     /**< warm-up, then constant */
    WarmupDecayLR /**< warm-up, then linear decay */
  };
  /** "params.warmup_type". */
  enum class Warmup {
    Log,   /**< log(step + 1) / log(warmup steps) */
    Linear /**< step / warmup steps */
  };
  Type type = Type::None;          ///< "type"
  double warmupMinLr = 0;          ///< "params.warmup_min_lr"
  double warmupMaxLr = 1e-3;       ///< "params.warmup_max_lr"
  int64_t warmupNumSteps = 1000;   ///< "params.warmup_num_steps"
  int64_t totalNumSteps = 0;       ///< "params.total_num_steps" (WarmupDecayLR: required)
  Warmup warmupType = Warmup::Log; ///< "params.warmup_type"
  /** The learning rate at a (0-based) step; optimizerLr without a scheduler. */
  double lrAt(int64_t step, double optimizerLr) const;
};

/** A whole configuration. train_batch_size = train_micro_batch_size_per_gpu x
 *  gradient_accumulation_steps x ranks: any two given determine the third; all three must agree. */
struct TrainConfig {
  ZeroOptimization zero;             ///< "zero_optimization"
  Fp16Config fp16;                   ///< "fp16"
  bool bf16 = false;                 ///< "bf16.enabled"
  OptimizerConfig optimizer;         ///< "optimizer"
  SchedulerConfig scheduler;         ///< "scheduler"
  int64_t trainBatchSize = 0;        ///< "train_batch_size" (derived when absent)
  int64_t microBatchPerRank = 1;     ///< "train_micro_batch_size_per_gpu"
  int64_t gradientAccumulationSteps = 1; ///< "gradient_accumulation_steps"
  double gradientClipping = 0;       ///< "gradient_clipping": global norm, 0 for none
};

/** What parseConfig returns. */
struct ParseResult {
  bool ok = false;                   ///< whether the configuration is valid
  std::string error;                 ///< when !ok: the reason, naming the key
  std::vector<std::string> warnings; ///< unknown keys (ignored), named
  TrainConfig config;                ///< when ok: the configuration, defaults filled in
};

/** Reads a DeepSpeed-style JSON configuration for a job of `ranks` ranks. */
ParseResult parseConfig(std::string_view json, int ranks);
/** The same, from a file. */
ParseResult parseConfigFile(const std::string& path, int ranks);

/** Per-rank model-state bytes. */
struct MemoryEstimate {
  int64_t deviceBytes = 0; ///< where compute runs
  int64_t hostBytes = 0;   ///< offloaded to host memory
};

/** Per-rank model-state bytes by the ZeRO paper's formulas for mixed-precision Adam (2 bytes of
 *  16-bit parameters, 2 of 16-bit gradients and 12 of fp32 master weights, momentum and variance
 *  per parameter): stage 0 16P, stage 1 4P + 12P/N, stage 2 2P + 14P/N, stage 3 16P/N. Offloading
 *  the optimizer moves the 12-byte part (and, at stage 2-3, the gradient shard it reads) to host
 *  memory; offloading parameters (stage 3) moves the 16-bit parameter shard too. */
MemoryEstimate estimateModelStates(int64_t params, int ranks, int stage, bool offloadOptimizer, bool offloadParam);

}  // namespace zcoll::zero
