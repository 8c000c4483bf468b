// The ZeRO layer's DeepSpeed-style configuration (defaults, every key, errors that name the key,
// warnings for unknown keys, batch arithmetic, schedulers) and the model-state estimator.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "zcoll/zero.hpp"

namespace zcoll::zero {
namespace {

TEST(ZeroConfig, AnEmptyObjectGivesDeepSpeedsDefaults) {
  ParseResult r = parseConfig("{}", 4);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_TRUE(r.warnings.empty());
  const TrainConfig& c = r.config;
  EXPECT_EQ(c.zero.stage, 0);
  EXPECT_FALSE(c.zero.overlapComm);
  EXPECT_TRUE(c.zero.reduceScatter);
  EXPECT_EQ(c.zero.reduceBucketSize, 500000000);
  EXPECT_EQ(c.zero.allgatherBucketSize, 500000000);
  EXPECT_TRUE(c.zero.contiguousGradients);
  EXPECT_EQ(c.zero.stage3PrefetchBucketSize, 50000000);
  EXPECT_EQ(c.zero.stage3ParamPersistenceThreshold, 100000);
  EXPECT_EQ(c.zero.stage3MaxLiveParameters, 1000000000);
  EXPECT_EQ(c.zero.offloadOptimizer.device, OffloadDevice::None);
  EXPECT_FALSE(c.fp16.enabled);
  EXPECT_EQ(c.fp16.initialScalePower, 16);
  EXPECT_EQ(c.fp16.lossScaleWindow, 1000);
  EXPECT_EQ(c.fp16.hysteresis, 2);
  EXPECT_FALSE(c.bf16);
  EXPECT_EQ(c.microBatchPerRank, 1);
  EXPECT_EQ(c.gradientAccumulationSteps, 1);
  EXPECT_EQ(c.trainBatchSize, 4);
  EXPECT_EQ(c.gradientClipping, 0);
  EXPECT_EQ(c.scheduler.type, SchedulerConfig::Type::None);
}

TEST(ZeroConfig, EveryKeyIsRead) {
  const char* text = R"({
    "train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "gradient_clipping": 1.0,
    "zero_optimization": {
      "stage": 3, "overlap_comm": false, "reduce_scatter": true, "reduce_bucket_size": 5e7,
      "allgather_partitions": true, "allgather_bucket_size": 2e8, "contiguous_gradients": false,
      "offload_optimizer": {"device": "cpu", "pin_memory": true},
      "offload_param": {"device": "cpu", "pin_memory": false, "buffer_count": 4},
      "sub_group_size": 1e9, "stage3_prefetch_bucket_size": 1e6, "stage3_param_persistence_threshold": 1e4,
      "stage3_max_live_parameters": 3e8, "stage3_max_reuse_distance": 2e8,
      "stage3_gather_16bit_weights_on_model_save": true},
    "fp16": {"enabled": true, "loss_scale": 0, "initial_scale_power": 12, "loss_scale_window": 500,
             "hysteresis": 3, "min_loss_scale": 0.5},
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.8, 0.95], "eps": 1e-6, "weight_decay": 0.1}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 3e-4,
                  "warmup_num_steps": 10, "total_num_steps": 100, "warmup_type": "linear"}},
    "steps_per_print": 10, "wall_clock_breakdown": false
  })";
  ParseResult r = parseConfig(text, 4);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_TRUE(r.warnings.empty()) << r.warnings.front();
  const TrainConfig& c = r.config;
  EXPECT_EQ(c.zero.stage, 3);
  EXPECT_FALSE(c.zero.overlapComm);
  EXPECT_EQ(c.zero.reduceBucketSize, 50000000);
  EXPECT_EQ(c.zero.allgatherBucketSize, 200000000);
  EXPECT_FALSE(c.zero.contiguousGradients);
  EXPECT_EQ(c.zero.offloadOptimizer.device, OffloadDevice::Cpu);
  EXPECT_TRUE(c.zero.offloadOptimizer.pinMemory);
  EXPECT_EQ(c.zero.offloadParam.device, OffloadDevice::Cpu);
  EXPECT_EQ(c.zero.offloadParam.bufferCount, 4);
  EXPECT_EQ(c.zero.stage3PrefetchBucketSize, 1000000);
  EXPECT_EQ(c.zero.stage3ParamPersistenceThreshold, 10000);
  EXPECT_EQ(c.zero.stage3MaxLiveParameters, 300000000);
  EXPECT_EQ(c.zero.stage3MaxReuseDistance, 200000000);
  EXPECT_TRUE(c.zero.stage3Gather16bitWeightsOnModelSave);
  EXPECT_TRUE(c.fp16.enabled);
  EXPECT_EQ(c.fp16.initialScalePower, 12);
  EXPECT_EQ(c.fp16.lossScaleWindow, 500);
  EXPECT_EQ(c.fp16.hysteresis, 3);
  EXPECT_DOUBLE_EQ(c.fp16.minLossScale, 0.5);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 3e-4);
  EXPECT_DOUBLE_EQ(c.optimizer.beta1, 0.8);
  EXPECT_DOUBLE_EQ(c.optimizer.beta2, 0.95);
  EXPECT_DOUBLE_EQ(c.optimizer.eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.optimizer.weightDecay, 0.1);
  EXPECT_EQ(c.gradientAccumulationSteps, 4);  // 64 / (4 x 4)
  EXPECT_DOUBLE_EQ(c.gradientClipping, 1.0);
  EXPECT_EQ(c.scheduler.type, SchedulerConfig::Type::WarmupDecayLR);
  EXPECT_DOUBLE_EQ(c.scheduler.lrAt(0, 1), 0);
  EXPECT_DOUBLE_EQ(c.scheduler.lrAt(5, 1), 1.5e-4);     // linear warm-up, half way
  EXPECT_DOUBLE_EQ(c.scheduler.lrAt(10, 1), 3e-4);      // peak
  EXPECT_DOUBLE_EQ(c.scheduler.lrAt(55, 1), 1.5e-4);    // linear decay, half way
  EXPECT_DOUBLE_EQ(c.scheduler.lrAt(100, 1), 0);
}

TEST(ZeroConfig, StageThreeOverlapsByDefault) {
  ParseResult r = parseConfig(R"({"zero_optimization": {"stage": 3}})", 2);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_TRUE(r.config.zero.overlapComm);
}

// Each bad configuration fails with a message naming the key.
TEST(ZeroConfig, BadValuesFailNamingTheKey) {
  struct Case {
    const char* json;
    const char* mustName;
  } cases[] = {
      {R"({"zero_optimization": {"stage": 4}})", "zero_optimization.stage"},
      {R"({"zero_optimization": {"stage": "2"}})", "zero_optimization.stage"},
      {R"({"zero_optimization": {"stage": 1.5}})", "zero_optimization.stage"},
      {R"({"optimizer": {"type": "AdamW", "params": {"lr": "auto"}}})", "optimizer.params.lr"},
      {R"({"zero_optimization": {"overlap_comm": 1}})", "zero_optimization.overlap_comm"},
      {R"({"zero_optimization": {"reduce_bucket_size": -1}})", "zero_optimization.reduce_bucket_size"},
      {R"({"zero_optimization": {"offload_optimizer": {"device": "gpu"}}})", "zero_optimization.offload_optimizer.device"},
      {R"({"zero_optimization": {"offload_optimizer": {"device": "cpu"}}})", "zero_optimization.offload_optimizer"},
      {R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}})", "offload_param.device"},
      {R"({"zero_optimization": 3})", "zero_optimization"},
      {R"({"fp16": {"enabled": true}, "bf16": {"enabled": true}})", "bf16.enabled"},
      {R"({"fp16": {"enabled": "auto"}})", "fp16.enabled"},
      {R"({"fp16": {"hysteresis": 0}})", "fp16.hysteresis"},
      {R"({"optimizer": {"type": "SGD"}})", "optimizer.type"},
      {R"({"optimizer": {"type": "Adam", "params": {"betas": [0.9]}}})", "optimizer.params.betas"},
      {R"({"optimizer": {"type": "Adam", "params": {"lr": -1}}})", "optimizer.params.lr"},
      {R"({"scheduler": {"type": "OneCycle"}})", "scheduler.type"},
      {R"({"scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": 10}}})", "total_num_steps"},
      {R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_type": "cosine"}}})", "warmup_type"},
      {R"({"train_batch_size": 10, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2})",
       "train_batch_size"},
      {R"({"train_batch_size": 10, "train_micro_batch_size_per_gpu": 3})", "train_batch_size"},
      {R"({"train_micro_batch_size_per_gpu": "auto"})", "train_micro_batch_size_per_gpu"},
      {R"({"gradient_clipping": -1})", "gradient_clipping"},
      {R"([1, 2])", "JSON object"},
      {R"({"zero_optimization": {)", "not valid JSON"},
  };
  for (const Case& c : cases) {
    ParseResult r = parseConfig(c.json, 4);
    EXPECT_FALSE(r.ok) << c.json;
    EXPECT_NE(r.error.find(c.mustName), std::string::npos) << c.json << " -> " << r.error;
  }
}

// DeepSpeed ignores top-level keys it does not know (a warning here) and refuses unknown keys inside
// its sections (so does zcoll).
TEST(ZeroConfig, UnknownTopLevelKeysWarnUnknownSectionKeysFail) {
  ParseResult r = parseConfig(R"({"zero_optimization": {"stage": 1}, "unknown_top": true})", 2);
  ASSERT_TRUE(r.ok) << r.error;
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(r.warnings[0].find("unknown_top"), std::string::npos) << r.warnings[0];
  for (const char* text : {R"({"zero_optimization": {"stage": 1, "stage3_magic": 1}})",
                           R"({"optimizer": {"type": "AdamW", "params": {"momentum": 0.9}}})",
                           R"({"fp16": {"enabled": true, "scale": 2}})"}) {
    r = parseConfig(text, 2);
    EXPECT_FALSE(r.ok) << text;
    EXPECT_NE(r.error.find("unknown key"), std::string::npos) << r.error;
  }
}

// DeepSpeed's optimizer section: "Adam" is AdamW unless adam_w_mode is false; weight decay 0 unless
// torch_adam builds torch.optim.AdamW; bias_correction honoured; amsgrad refused.
TEST(ZeroConfig, OptimizerKeysMeanWhatDeepSpeedMeans) {
  struct Case {
    const char* json;
    const char* type;
    double weightDecay;
    bool biasCorrection;
  } cases[] = {
      {R"({"optimizer": {"type": "Adam"}})", "AdamW", 0, true},
      {R"({"optimizer": {"type": "Adam", "params": {"adam_w_mode": false}}})", "Adam", 0, true},
      {R"({"optimizer": {"type": "AdamW", "params": {"adam_w_mode": false}}})", "AdamW", 0, true},
      {R"({"optimizer": {"type": "AdamW", "params": {"torch_adam": true}}})", "AdamW", 0.01, true},
      {R"({"optimizer": {"type": "Adam", "params": {"torch_adam": true, "adam_w_mode": false}}})", "Adam", 0, true},
      {R"({"optimizer": {"type": "AdamW", "params": {"bias_correction": false, "weight_decay": 0.1}}})", "AdamW", 0.1, false},
      {R"({"optimizer": {"type": "AdamW", "params": {"amsgrad": false}}})", "AdamW", 0, true},
  };
  for (const Case& c : cases) {
    ParseResult r = parseConfig(c.json, 2);
    ASSERT_TRUE(r.ok) << c.json << ": " << r.error;
    EXPECT_TRUE(r.config.optimizer.given);
    EXPECT_EQ(r.config.optimizer.type, c.type) << c.json;
    EXPECT_DOUBLE_EQ(r.config.optimizer.weightDecay, c.weightDecay) << c.json;
    EXPECT_EQ(r.config.optimizer.biasCorrection, c.biasCorrection) << c.json;
  }
  EXPECT_FALSE(parseConfig("{}", 2).config.optimizer.given);
  ParseResult r = parseConfig(R"({"optimizer": {"type": "AdamW", "params": {"amsgrad": true}}})", 2);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("optimizer.params.amsgrad"), std::string::npos) << r.error;
}

// Legacy names, "auto" in zero_optimization, a 0 bucket, offload_param below stage 3: as DeepSpeed.
TEST(ZeroConfig, LegacyKeysAutoAndZeroBucketsAreDeepSpeeds) {
  ParseResult r = parseConfig(R"({"zero_optimization": {"stage": 2, "cpu_offload": true,
      "cpu_offload_use_pin_memory": true, "reduce_bucket_size": 0, "allgather_bucket_size": "auto",
      "stage3_prefetch_bucket_size": "auto", "prefetch_bucket_size": 7, "offload_param": {"device": "cpu"}},
      "bfloat16": {"enabled": true}})", 2);
  ASSERT_TRUE(r.ok) << r.error;
  const TrainConfig& c = r.config;
  EXPECT_EQ(c.zero.offloadOptimizer.device, OffloadDevice::Cpu);
  EXPECT_TRUE(c.zero.offloadOptimizer.pinMemory);
  EXPECT_TRUE(c.bf16);
  EXPECT_EQ(c.zero.reduceBucketSize, 1);  // one parameter per bucket
  EXPECT_EQ(c.zero.allgatherBucketSize, 500000000);
  EXPECT_EQ(c.zero.stage3PrefetchBucketSize, 7);
  EXPECT_EQ(c.zero.offloadParam.device, OffloadDevice::None);  // stage 2: not offloaded, as in DeepSpeed
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_NE(r.warnings[0].find("offload_param applies at stage 3 only"), std::string::npos) << r.warnings[0];
  r = parseConfig(R"({"zero_optimization": {"stage": 3, "cpu_offload_params": true}})", 2);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.config.zero.offloadParam.device, OffloadDevice::Cpu);
}

// gradient_predivide_factor, prescale_gradients and communication_data_type as DeepSpeed reads them;
// the front end's keys; features zcoll does not have refused unless switched off.
TEST(ZeroConfig, CommunicationFrontEndAndFeatureKeys) {
  ParseResult r = parseConfig(R"({"gradient_predivide_factor": 2.0, "communication_data_type": "fp32",
      "steps_per_print": 5, "wall_clock_breakdown": true, "dump_state": true, "dataloader_drop_last": true,
      "checkpoint": {"tag_validation": "Fail"}, "tensorboard": {"enabled": false}, "sparse_gradients": false,
      "zero_allow_untested_optimizer": true, "fp16": {"enabled": false, "auto_cast": true}})", 2);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_TRUE(r.warnings.empty()) << r.warnings.front();
  EXPECT_DOUBLE_EQ(r.config.gradientPredivideFactor, 2.0);
  EXPECT_EQ(r.config.frontEnd.stepsPerPrint, 5);
  EXPECT_TRUE(r.config.frontEnd.wallClockBreakdown);
  EXPECT_TRUE(r.config.frontEnd.dumpState);
  EXPECT_TRUE(r.config.frontEnd.dataloaderDropLast);
  EXPECT_EQ(r.config.frontEnd.tagValidation, "Fail");
  EXPECT_TRUE(r.config.fp16.autoCast);
  r = parseConfig(R"({"prescale_gradients": true, "bf16": {"enabled": true}, "communication_data_type": "bf16"})", 2);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_TRUE(r.config.prescaleGradients);
  struct Case {
    const char* json;
    const char* mustName;
  } refused[] = {
      {R"({"communication_data_type": "bf16"})", "communication_data_type"},
      {R"({"bf16": {"enabled": true}, "communication_data_type": "fp32"})", "communication_data_type"},
      {R"({"prescale_gradients": true, "gradient_predivide_factor": 2})", "gradient_predivide_factor"},
      {R"({"bf16": {"enabled": true}, "bfloat16": {"enabled": false}})", "bfloat16.enabled"},
      {R"({"tensorboard": {"enabled": true}})", "tensorboard"},
      {R"({"amp": {"enabled": true}})", "amp"},
      {R"({"activation_checkpointing": {"partition_activations": true}})", "activation_checkpointing"},
      {R"({"sparse_gradients": true})", "sparse_gradients"},
      {R"({"fp16": {"enabled": true, "fp16_master_weights_and_grads": true}})", "fp16_master_weights_and_grads"},
      {R"({"zero_optimization": {"stage": 3, "zero_quantized_weights": true}})", "zero_quantized_weights"},
      {R"({"zero_optimization": {"stage": 3, "load_from_fp32_weights": false}})", "load_from_fp32_weights"},
      {R"({"zero_optimization": {"stage": 1, "cpu_offload": true, "offload_optimizer": {"device": "cpu"}}})", "cpu_offload"},
      {R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "ratio": 0.5}}})", "ratio"},
      {R"({"checkpoint": {"tag_validation": "Maybe"}})", "checkpoint.tag_validation"},
      {R"({"scheduler": {"type": "WarmupLR", "params": {"last_batch_iteration": 5}}})", "last_batch_iteration"},
  };
  for (const Case& c : refused) {
    r = parseConfig(c.json, 4);
    EXPECT_FALSE(r.ok) << c.json;
    EXPECT_NE(r.error.find(c.mustName), std::string::npos) << c.json << " -> " << r.error;
  }
}

TEST(ZeroConfig, BatchSizesDeriveTheMissingOne) {
  ParseResult r = parseConfig(R"({"train_batch_size": 32, "gradient_accumulation_steps": 2})", 4);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.config.microBatchPerRank, 4);
  r = parseConfig(R"({"train_micro_batch_size_per_gpu": 3, "gradient_accumulation_steps": 5})", 2);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.config.trainBatchSize, 30);
  r = parseConfig(R"({"train_batch_size": 12})", 3);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.config.microBatchPerRank, 4);
  EXPECT_EQ(r.config.gradientAccumulationSteps, 1);
}

TEST(ZeroConfig, WarmupLogRisesToThePeakAndStays) {
  ParseResult r = parseConfig(
      R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 0.01, "warmup_num_steps": 100}}})", 1);
  ASSERT_TRUE(r.ok) << r.error;
  const SchedulerConfig& s = r.config.scheduler;
  EXPECT_DOUBLE_EQ(s.lrAt(0, 1), 0);             // log(1) / log(100)
  EXPECT_NEAR(s.lrAt(9, 1), 0.005, 1e-12);        // log(10) / log(100) = 1/2
  EXPECT_DOUBLE_EQ(s.lrAt(100, 1), 0.01);
  EXPECT_DOUBLE_EQ(s.lrAt(100000, 1), 0.01);
}

TEST(ZeroConfig, AFileThatIsMissingIsAnError) {
  ParseResult r = parseConfigFile("/nonexistent/ds_config.json", 2);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("/nonexistent/ds_config.json"), std::string::npos);
}

// The ZeRO paper's formulas (mixed-precision Adam): 16P, 4P + 12P/N, 2P + 14P/N, 16P/N.
TEST(ZeroEstimate, TheFourStagesAndOffload) {
  const int64_t P = 1'000'000'000;  // 1B parameters, 64 ranks (the paper's Figure 1 uses 7.5B and 64)
  EXPECT_EQ(estimateModelStates(P, 64, 0, false, false).deviceBytes, 16 * P);
  EXPECT_EQ(estimateModelStates(P, 64, 1, false, false).deviceBytes, 4 * P + 12 * P / 64);
  EXPECT_EQ(estimateModelStates(P, 64, 2, false, false).deviceBytes, 2 * P + 14 * P / 64);
  EXPECT_EQ(estimateModelStates(P, 64, 3, false, false).deviceBytes, 16 * P / 64);
  for (int stage = 0; stage <= 3; ++stage) EXPECT_EQ(estimateModelStates(P, 64, stage, false, false).hostBytes, 0);
  MemoryEstimate m = estimateModelStates(P, 4, 2, true, false);
  EXPECT_EQ(m.deviceBytes, 2 * P);
  EXPECT_EQ(m.hostBytes, 14 * P / 4);
  m = estimateModelStates(P, 4, 3, true, true);
  EXPECT_EQ(m.deviceBytes, 0);
  EXPECT_EQ(m.hostBytes, 16 * P / 4);
  m = estimateModelStates(P, 4, 1, true, false);
  EXPECT_EQ(m.deviceBytes, 4 * P);
  EXPECT_EQ(m.hostBytes, 12 * P / 4);
  // Device + host is the model's share whatever is offloaded.
  for (int stage = 1; stage <= 3; ++stage) {
    const MemoryEstimate a = estimateModelStates(P + 7, 3, stage, false, false);
    const MemoryEstimate b = estimateModelStates(P + 7, 3, stage, true, stage == 3);
    EXPECT_EQ(a.deviceBytes + a.hostBytes, b.deviceBytes + b.hostBytes) << stage;
  }
}

}  // namespace
}  // namespace zcoll::zero
