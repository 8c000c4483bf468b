/** @file zcoll/zero.hpp
 *  The ZeRO layer (DeepSpeed's Zero Redundancy Optimizer on zcoll's public API).
 *
 *  - The DeepSpeed-style JSON configuration (the keys a ZeRO trainer reads, with DeepSpeed's
 *    defaults) and the model-state memory estimator.
 *  - The Engine: a trainer registers its parameters as ordered groups ("layers") and drives the
 *    engine through hooks (fetch/release around a group's use, gradsReady after its backward, step
 *    after each micro-batch); the engine shards optimizer states (stage 1), gradients (stage 2) and
 *    parameters (stage 3), reduces gradients in buckets while backward goes on, prefetches parameters,
 *    runs AdamW on its shard (fp32 master weights), scales the loss for fp16 and saves and loads
 *    sharded checkpoints.
 *
 *  Errors name the argument or key; nothing here throws. */
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "zcoll/zcoll.h"

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
  bool autoCast = false;              ///< "auto_cast": the front end casts floating inputs to fp16
};

/** "optimizer": AdamW (decoupled weight decay) or Adam (decay added to the gradient). As in
 *  DeepSpeed, "type": "Adam" runs AdamW unless "params.adam_w_mode" is false, and the weight decay
 *  defaults to 0 (0.01 with "torch_adam" AdamW, torch.optim.AdamW's). */
struct OptimizerConfig {
  std::string type = "AdamW"; ///< "AdamW" (decoupled) or "Adam" (L2-coupled)
  bool given = false;         ///< an "optimizer" section was present (DeepSpeed needs one or a client optimizer)
  double lr = 1e-3;           ///< "params.lr"
  double beta1 = 0.9;         ///< "params.betas"[0]
  double beta2 = 0.999;       ///< "params.betas"[1]
  double eps = 1e-8;          ///< "params.eps"
  double weightDecay = 0.01;  ///< "params.weight_decay" (from JSON: DeepSpeed's default, above)
  bool biasCorrection = true; ///< "params.bias_correction"
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
  /** "gradient_predivide_factor" f: gradients are scaled by 1/f before their reduction and by f/ranks
   *  after; "prescale_gradients": true makes f the rank count. */
  double gradientPredivideFactor = 1;
  bool prescaleGradients = false;    ///< "prescale_gradients"
  /** What a training front end (zcoll_torch.zero) does with the configuration: its log, data loader
   *  and checkpoint tags. */
  struct FrontEnd {
    int64_t stepsPerPrint = 10;      ///< "steps_per_print": log the step, lr and loss scale every N steps
    bool wallClockBreakdown = false; ///< "wall_clock_breakdown": log forward/backward/step times
    bool memoryBreakdown = false;    ///< "memory_breakdown": log the engine's memory
    bool dumpState = false;          ///< "dump_state": log the configuration at start
    bool dataloaderDropLast = false; ///< "dataloader_drop_last"
    std::string tagValidation = "Warn"; ///< "checkpoint.tag_validation": Ignore, Warn or Fail on differing tags
  };
  FrontEnd frontEnd;                 ///< the front end's keys (above)
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

/** Element type of the parameters and gradients the trainer computes with: fp32, or fp16/bf16
 *  (mixed precision: fp32 master weights in the optimizer). */
enum class DType {
  F32,  /**< float */
  F16,  /**< IEEE half (fp16.enabled) */
  BF16  /**< bfloat16 (bf16.enabled) */
};
/** Bytes per element of a DType. */
int dtypeSize(DType type);
/** Converts n elements of `type` to float. */
void toFloat32(DType type, const void* src, float* dst, int64_t n);
/** Converts n floats to `type`, rounding to nearest even. */
void fromFloat32(DType type, const float* src, void* dst, int64_t n);

/** The outcome of an engine call: code zcollSuccess, or the failure and a message naming what
 *  failed (the argument, the key, the group, the peer). */
struct Result {
  zcollResult_t code = zcollSuccess; ///< zcollSuccess or the failure
  std::string message;               ///< empty on success
  /** Whether the call succeeded. */
  bool ok() const { return code == zcollSuccess; }
};

/** One parameter group, registered in the order the model uses them. */
struct GroupSpec {
  std::string name;           ///< unique, non-empty (a checkpoint's key)
  int64_t numel = 0;          ///< elements, > 0
  std::vector<int64_t> shape; ///< optional (checkpoints record it); its product must be numel
  int paramGroup = 0;         ///< its optimizer settings: setParamGroup(paramGroup, ...) (torch's param_groups)
  bool frozen = false;        ///< takes no gradient, no reduction and no optimizer update (requires_grad=False)
};

/** One optimizer parameter group's settings (torch's param_groups entries). */
struct ParamGroupOptions {
  double lr = 1e-3;          ///< "lr" (the scheduler's value instead when the config has a "scheduler")
  double beta1 = 0.9;        ///< "betas"[0]
  double beta2 = 0.999;      ///< "betas"[1]
  double eps = 1e-8;         ///< "eps"
  double weightDecay = 0.01; ///< "weight_decay"
};

/** Whether the next step() ends a gradient accumulation. */
enum class Boundary {
  Auto, /**< every gradient_accumulation_steps micro-batches */
  Yes,  /**< this micro-batch ends one */
  No    /**< this micro-batch does not (torch's no_sync) */
};

/** Options that are not part of a DeepSpeed config. */
struct EngineOptions {
  int optimizerThreads = 0; ///< CPU AdamW threads per rank; 0: this host's cores / ranks (at least 1)
  bool log = true;          ///< rank 0 prints one line to stderr per skipped (overflowed) step
};

/** Counters since the engine was created (steps: since training began). Bytes are per rank, as the ZeRO paper counts them: an
 *  all-reduce of S bytes moves 2S, a reduce-scatter or an all-gather S (the payload of the whole
 *  buffer; each rank sends (N-1)/N of it). */
struct EngineStats {
  int64_t steps = 0;            ///< optimizer steps taken (a loaded checkpoint's included)
  int64_t skippedSteps = 0;     ///< boundaries skipped because of an fp16 overflow
  int64_t microSteps = 0;       ///< step() calls (a loaded checkpoint's included)
  double lossScale = 1;         ///< the current loss scale
  double lr = 0;                ///< the learning rate of the last step
  double gradNorm = 0;          ///< the global gradient norm of the last step (after unscaling)
  int64_t reduceBytes = 0;      ///< gradient all-reduce / reduce-scatter bytes
  int64_t gatherBytes = 0;      ///< parameter all-gather bytes
  int64_t collectives = 0;      ///< collectives issued
  int64_t prefetches = 0;       ///< stage 3 all-gathers issued ahead of their fetch
  double commWaitSeconds = 0;   ///< time the caller spent blocked on communication (exposed)
  double optimizerSeconds = 0;  ///< time in the optimizer (unscale, clip, AdamW, write-back)
};

/** Model-state and buffer bytes of this rank, as allocated. */
struct EngineMemory {
  int64_t paramBytes = 0;     ///< compute-precision parameters (full or shard, persistent groups)
  int64_t gradBytes = 0;      ///< gradients (full or shard)
  int64_t optimizerBytes = 0; ///< fp32 master weights, momentum and variance
  int64_t deviceBytes = 0;    ///< model states where compute runs (as estimateModelStates)
  int64_t hostBytes = 0;      ///< model states offloaded to host memory
  int64_t bufferBytes = 0;    ///< buckets, gathered parameters and scratch, now
  int64_t peakBufferBytes = 0; ///< the same, at its highest
};

/** The ZeRO engine of one rank. Every rank of the communicator creates one with the same groups
 *  and configuration and calls the same hooks in the same order (as for collectives). One thread
 *  at a time; the communicator must outlive it and serve no other thread meanwhile.
 *
 *  A training step of a trainer:
 *  @code
 *  for each micro-batch:
 *    forward: for g in order:  fetch(g); use params(g); release(g)
 *    seed the loss gradient with lossScale()
 *    backward: for g in reverse: fetch(g); add dL/dparams into grads(g); gradsReady(g); release(g)
 *    step(&stepped)   // the optimizer runs at the gradient-accumulation boundary
 *  @endcode
 *  Gradients accumulate: grads(g) holds zeros or the sum of this accumulation's earlier
 *  micro-batches, and the trainer adds its gradient into it (GEMM with beta = 1). The engine
 *  averages over ranks and micro-batches and divides out the loss scale. */
class Engine {
 public:
  /** Creates the engine (collective over comm): checks that every rank registered the same groups
   *  and configuration, lays out and allocates the model states. On failure returns nullptr and sets
   *  *result. */
  static std::unique_ptr<Engine> create(zcollComm_t comm, const TrainConfig& config, std::vector<GroupSpec> groups,
                                        const EngineOptions& options, Result* result);
  virtual ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /** The trainer's element type (from the config's fp16/bf16 sections). */
  virtual DType dtype() const = 0;
  /** The groups, as registered. */
  virtual const std::vector<GroupSpec>& groups() const = 0;

  /** Sets group g's initial values (fp32, numel elements; every rank passes the same). Before the
   *  first step; not collective. */
  virtual Result initParams(int g, const float* values) = 0;
  /** Group g's parameters are needed: returns when they are present (stage 3 all-gathers them,
   *  waiting for a prefetch if one is on its way, and prefetches the groups that follow in the order
   *  recorded during the first step). Collective at stage 3. */
  virtual Result fetch(int g) = 0;
  /** Group g's parameters in dtype(), valid from fetch(g) to release(g) (at stages 0-2 always). */
  virtual const void* params(int g) const = 0;
  /** Group g's parameters are not needed now: stage 3 frees them unless they are persistent or
   *  needed again soon (stage3_max_reuse_distance). */
  virtual Result release(int g) = 0;
  /** Group g's gradient buffer (dtype(), numel elements), valid until gradsReady(g). */
  virtual void* grads(int g, Result* result) = 0;
  /** Group g's gradient of this micro-batch has been added: the engine may reduce it (when its
   *  bucket is complete, asynchronously). Collective (in the same order on every rank). */
  virtual Result gradsReady(int g) = 0;
  /** Sets the settings of the groups registered with this paramGroup, from the next step on (every
   *  paramGroup starts with the config's optimizer settings). Every rank sets the same. */
  virtual Result setParamGroup(int paramGroup, const ParamGroupOptions& options) = 0;
  /** Overrides whether the current micro-batch ends a gradient accumulation: set before its first
   *  gradsReady (stages 0-1 reduce only at a boundary); step() returns it to Auto. Every rank sets
   *  the same. */
  virtual Result setBoundary(Boundary boundary) = 0;
  /** Whether step() will run the optimizer (the current micro-batch ends an accumulation). */
  virtual bool atBoundary() const = 0;
  /** Ends a micro-batch. At the gradient-accumulation boundary: finishes the reductions, unscales,
   *  skips the step on fp16 overflow (adjusting the loss scale), clips by global norm, runs AdamW on
   *  this rank's shard and brings every rank's parameters up to date. *stepped (may be null) says
   *  whether the optimizer ran. Collective. */
  virtual Result step(bool* stepped) = 0;
  /** Multiply the loss (the gradient's seed) by this: the fp16 loss scale, 1 otherwise. */
  virtual double lossScale() const = 0;
  /** The learning rate the next step will use (optimizer lr, or the scheduler's). */
  virtual double learningRate() const = 0;

  /** Every rank gets group g's fp32 master weights (numel elements) in out. Collective. */
  virtual Result gatherMaster(int g, float* out) = 0;
  /** Saves a sharded checkpoint into dir/tag (one file per rank, meta.json) and writes tag into
   *  dir/latest. Collective. */
  virtual Result saveCheckpoint(const std::string& dir, const std::string& tag) = 0;
  /** Loads dir/tag (tag empty: the one dir/latest names), written by any number of ranks at any
   *  stage: each rank reads only what it owns. Collective. */
  virtual Result loadCheckpoint(const std::string& dir, const std::string& tag) = 0;
  /** Rank 0 writes the parameters in dtype() to a safetensors file. At stage 3 this needs
   *  stage3_gather_16bit_weights_on_model_save. Collective. */
  virtual Result saveModel(const std::string& path) = 0;

  /** Counters. */
  virtual EngineStats stats() const = 0;
  /** Allocated bytes. */
  virtual EngineMemory memory() const = 0;

 protected:
  Engine() = default;
};

}  // namespace zcoll::zero
