// config.cpp - the DeepSpeed-style JSON configuration of the ZeRO layer (include/zcoll/zero.hpp).
// Defaults are DeepSpeed's. Every key is read through Reader, which names the key in errors and
// reports the keys nobody read as warnings.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

#include "zcoll/zero.hpp"

namespace zcoll::zero {
namespace {

using json = nlohmann::json;

struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string typeName(const json& v) {
  if (v.is_string()) return "a string (\"" + v.get<std::string>() + "\")";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "an integer";
  if (v.is_number_float()) return "a number";
  if (v.is_object()) return "an object";
  if (v.is_array()) return "an array";
  return "null";
}

// One JSON object; `path` prefixes its keys in messages ("zero_optimization.stage").
class Reader {
 public:
  // What a key nobody read means: at the top level a warning (DeepSpeed ignores keys it does not
  // know there), inside a section an error (DeepSpeed's sections refuse them, or pass them on to a
  // constructor that does).
  enum class Unknown { Warn, Refuse };
  // autoIsDefault: "auto" is DeepSpeed's default (zero_optimization), else refused.
  Reader(const json& obj, std::string path, std::vector<std::string>* warnings, Unknown unknown = Unknown::Refuse,
         bool autoIsDefault = false)
      : obj_(obj), path_(std::move(path)), warnings_(warnings), unknown_(unknown), autoIsDefault_(autoIsDefault) {}

  void finish() {
    for (auto it = obj_.begin(); it != obj_.end(); ++it) {
      if (read_.count(it.key())) continue;
      if (unknown_ == Unknown::Refuse) throw ConfigError("unknown key " + name(it.key()) + " (not a DeepSpeed key zcoll knows)");
      warnings_->push_back("unknown key " + name(it.key()) + " (ignored)");
    }
  }

  // Whether the key holds a value ("auto" where it means the default does not).
  bool has(const std::string& key) const {
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) return false;
    return !(autoIsDefault_ && it->is_string() && it->get<std::string>() == "auto");
  }

  const json* find(const std::string& key) {
    read_.insert(key);
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) return nullptr;
    if (it->is_string() && it->get<std::string>() == "auto") {
      if (autoIsDefault_) return nullptr;
      throw ConfigError(name(key) + " is \"auto\": put the value in (\"auto\" is filled by Hugging Face's "
                        "integration, not by DeepSpeed)");
    }
    return &*it;
  }
  // A key zcoll takes only at the value that is DeepSpeed's default (or equivalent here): any other
  // value is refused with `why`.
  void only(const std::string& key, const json& allowed, const std::string& why) {
    if (const json* v = find(key); v && *v != allowed)
      throw ConfigError(name(key) + ": " + v->dump() + " is not supported (" + why + ")");
  }

  void boolean(const std::string& key, bool* out) {
    if (const json* v = find(key)) {
      if (!v->is_boolean()) throw ConfigError(name(key) + ": expected true or false, got " + typeName(*v));
      *out = v->get<bool>();
    }
  }
  // A boolean whose value makes no difference here (a schedule that gives the same result either way).
  void anyBoolean(const std::string& key) {
    bool unused = false;
    boolean(key, &unused);
  }
  void integer(const std::string& key, int64_t* out, int64_t min, int64_t max) {
    if (const json* v = find(key)) {
      double d = 0;
      if (v->is_number_integer() || v->is_number_unsigned()) d = static_cast<double>(v->get<int64_t>());
      else if (v->is_number_float() && std::nearbyint(v->get<double>()) == v->get<double>()) d = v->get<double>();  // 5e8
      else throw ConfigError(name(key) + ": expected an integer, got " + typeName(*v));
      if (d < static_cast<double>(min) || d > static_cast<double>(max))
        throw ConfigError(name(key) + ": " + number(d) + " is out of range [" + std::to_string(min) + ", " +
                          std::to_string(max) + "]");
      *out = static_cast<int64_t>(d);
    }
  }
  void integer(const std::string& key, int* out, int min, int max) {
    int64_t v = *out;
    integer(key, &v, min, max);
    *out = static_cast<int>(v);
  }
  void real(const std::string& key, double* out, double min, double max) {
    if (const json* v = find(key)) {
      if (!v->is_number()) throw ConfigError(name(key) + ": expected a number, got " + typeName(*v));
      const double d = v->get<double>();
      if (!(d >= min && d <= max))
        throw ConfigError(name(key) + ": " + number(d) + " is out of range [" + number(min) + ", " + number(max) + "]");
      *out = d;
    }
  }
  void string(const std::string& key, std::string* out) {
    if (const json* v = find(key)) {
      if (!v->is_string()) throw ConfigError(name(key) + ": expected a string, got " + typeName(*v));
      *out = v->get<std::string>();
    }
  }
  // A nested object; nullptr when absent.
  const json* object(const std::string& key) {
    const json* v = find(key);
    if (v && !v->is_object()) throw ConfigError(name(key) + ": expected an object, got " + typeName(*v));
    return v;
  }
  std::string name(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

 private:
  static std::string number(double d) {
    std::ostringstream s;
    s << d;
    return s.str();
  }
  const json& obj_;
  std::string path_;
  std::vector<std::string>* warnings_;
  Unknown unknown_;
  bool autoIsDefault_;
  std::set<std::string> read_;
};

void readOffload(Reader& parent, const std::string& key, std::vector<std::string>* warnings, OffloadConfig* out) {
  const json* o = parent.object(key);
  if (!o) return;
  Reader r(*o, parent.name(key), warnings, Reader::Unknown::Refuse, /*autoIsDefault=*/true);
  std::string device = "none";
  r.string("device", &device);
  if (device == "none") out->device = OffloadDevice::None;
  else if (device == "cpu") out->device = OffloadDevice::Cpu;
  else if (device == "nvme") out->device = OffloadDevice::Nvme;
  else throw ConfigError(r.name("device") + ": \"" + device + "\" is not one of none, cpu, nvme");
  r.boolean("pin_memory", &out->pinMemory);
  if (out->device == OffloadDevice::Nvme)
    throw ConfigError(parent.name(key) + ".device: \"nvme\" is not supported (use \"cpu\")");
  // The NVMe path's knobs: DeepSpeed reads them only with device "nvme", which is refused above.
  r.string("nvme_path", &out->nvmePath);
  r.integer("buffer_count", &out->bufferCount, 1, 1 << 20);
  for (const char* k : {"buffer_size", "max_in_cpu", "pipeline_read", "pipeline_write", "fast_init"}) r.find(k);
  r.only("ratio", 1.0, "a partial optimizer offload; zcoll offloads all of it");
  r.finish();
}

// An integer key under its DeepSpeed name or its alias (DeepSpeed takes both; both given must agree).
void aliased(Reader& r, const std::string& key, const std::string& alias, int64_t* out) {
  int64_t a = *out, b = *out;
  r.integer(key, &a, 0, INT64_MAX / 8);
  r.integer(alias, &b, 0, INT64_MAX / 8);
  if (r.has(key) && r.has(alias) && a != b)
    throw ConfigError(r.name(key) + " and " + r.name(alias) + " (the same setting) differ");
  *out = r.has(key) ? a : b;
}

void readZero(Reader& top, std::vector<std::string>* warnings, ZeroOptimization* z) {
  const json* o = top.object("zero_optimization");
  if (!o) return;
  Reader r(*o, "zero_optimization", warnings, Reader::Unknown::Refuse, /*autoIsDefault=*/true);
  r.integer("stage", &z->stage, 0, 3);
  z->overlapComm = z->stage == 3;  // DeepSpeed's default depends on the stage
  r.boolean("overlap_comm", &z->overlapComm);
  r.boolean("reduce_scatter", &z->reduceScatter);
  // 0 is DeepSpeed's "one parameter per bucket": the smallest bucket does that here too.
  r.integer("reduce_bucket_size", &z->reduceBucketSize, 0, INT64_MAX / 8);
  z->reduceBucketSize = std::max<int64_t>(z->reduceBucketSize, 1);
  // Schedules that give the same result whatever their value (zcoll gathers the updated parameters
  // with all-gathers of its own buckets, into contiguous buffers, copying gradients on every rank).
  r.boolean("allgather_partitions", &z->allgatherPartitions);
  r.integer("allgather_bucket_size", &z->allgatherBucketSize, 0, INT64_MAX / 8);
  r.boolean("contiguous_gradients", &z->contiguousGradients);
  r.boolean("round_robin_gradients", &z->roundRobinGradients);
  r.anyBoolean("use_multi_rank_bucket_allreduce");
  r.anyBoolean("log_trace_cache_warnings");
  // DeepSpeed's legacy offload switches, as DeepSpeed maps them.
  bool cpuOffload = false, cpuOffloadParams = false, pin = false;
  r.boolean("cpu_offload", &cpuOffload);
  r.boolean("cpu_offload_params", &cpuOffloadParams);
  r.boolean("cpu_offload_param", &cpuOffloadParams);
  r.boolean("cpu_offload_use_pin_memory", &pin);
  readOffload(r, "offload_optimizer", warnings, &z->offloadOptimizer);
  readOffload(r, "offload_param", warnings, &z->offloadParam);
  if (cpuOffload) {
    if (r.has("offload_optimizer")) throw ConfigError("zero_optimization.cpu_offload and offload_optimizer: keep one");
    z->offloadOptimizer.device = OffloadDevice::Cpu;
    z->offloadOptimizer.pinMemory = pin;
  }
  if (cpuOffloadParams) {
    if (r.has("offload_param")) throw ConfigError("zero_optimization.cpu_offload_params and offload_param: keep one");
    z->offloadParam.device = OffloadDevice::Cpu;
    z->offloadParam.pinMemory = pin;
  }
  r.integer("sub_group_size", &z->subGroupSize, 0, INT64_MAX / 8);
  aliased(r, "stage3_prefetch_bucket_size", "prefetch_bucket_size", &z->stage3PrefetchBucketSize);
  aliased(r, "stage3_param_persistence_threshold", "param_persistence_threshold", &z->stage3ParamPersistenceThreshold);
  aliased(r, "stage3_max_live_parameters", "max_live_parameters", &z->stage3MaxLiveParameters);
  aliased(r, "stage3_max_reuse_distance", "max_reuse_distance", &z->stage3MaxReuseDistance);
  r.boolean("stage3_gather_16bit_weights_on_model_save", &z->stage3Gather16bitWeightsOnModelSave);
  r.boolean("stage3_gather_fp16_weights_on_model_save", &z->stage3Gather16bitWeightsOnModelSave);  // older names
  r.boolean("gather_16bit_weights_on_model_save", &z->stage3Gather16bitWeightsOnModelSave);
  // DeepSpeed's defaults, which are what zcoll does; other values are features it does not have.
  r.only("load_from_fp32_weights", true, "checkpoints always restore the fp32 master weights");
  r.anyBoolean("elastic_checkpoint");  // either way: zcoll's checkpoints load at any rank count and stage
  r.only("ignore_unused_parameters", true, "a parameter without a gradient in a step is always tolerated");
  r.only("memory_efficient_linear", true, "stage 3 always runs its own linear, which keeps no weight copy");
  r.only("override_module_apply", true, "module.apply under zcoll_torch.zero.Init always sees gathered parameters");
  r.only("legacy_stage1", false, "DeepSpeed's old stage 1 implementation");
  r.only("model_persistence_threshold", json(INT64_MAX), "a cap on the persistent parameters of the model");
  r.only("zero_hpz_partition_size", 1, "ZeRO++'s hierarchical partitioning");
  r.only("zero_quantized_weights", false, "ZeRO++'s quantized weights");
  r.only("zero_quantized_nontrainable_weights", false, "ZeRO++'s quantized weights");
  r.only("zero_quantized_gradients", false, "ZeRO++'s quantized gradients");
  r.only("mics_shard_size", -1, "MiCS sharding");
  r.only("mics_hierarchical_params_gather", false, "MiCS sharding");
  r.only("pipeline_loading_checkpoint", false, "pipeline-parallel checkpoint loading");
  if (z->offloadOptimizer.device != OffloadDevice::None && z->stage == 0)
    throw ConfigError("zero_optimization.offload_optimizer needs stage 1, 2 or 3 (stage is 0)");
  // As in DeepSpeed, offload_param applies at stage 3 only: below, the parameters stay where they are.
  if (z->offloadParam.device != OffloadDevice::None && z->stage != 3) {
    warnings->push_back("zero_optimization.offload_param applies at stage 3 only (stage is " +
                        std::to_string(z->stage) + "): the parameters are not offloaded");
    z->offloadParam = OffloadConfig{};
  }
  r.finish();
}

void readFp16(Reader& top, std::vector<std::string>* warnings, TrainConfig* c) {
  if (const json* o = top.object("fp16")) {
    Reader r(*o, "fp16", warnings);
    Fp16Config& f = c->fp16;
    r.boolean("enabled", &f.enabled);
    r.real("loss_scale", &f.lossScale, 0, 1e30);
    r.integer("initial_scale_power", &f.initialScalePower, 0, 64);
    r.integer("loss_scale_window", &f.lossScaleWindow, 1, INT64_MAX / 8);
    r.integer("hysteresis", &f.hysteresis, 1, 1 << 20);
    r.boolean("consecutive_hysteresis", &f.consecutiveHysteresis);
    r.real("min_loss_scale", &f.minLossScale, 0, 1e30);
    r.boolean("auto_cast", &f.autoCast);
    r.only("fp16_master_weights_and_grads", false, "the master weights and gradients are fp32");
    r.finish();
  }
  // "bfloat16" is DeepSpeed's older name of the section.
  for (const char* section : {"bf16", "bfloat16"}) {
    if (const json* o = top.object(section)) {
      Reader r(*o, section, warnings);
      bool on = false;
      r.boolean("enabled", &on);
      r.only("immediate_grad_update", false, "gradients are reduced per bucket, not applied per parameter");
      r.finish();
      if (top.has("bf16") && top.has("bfloat16") && on != c->bf16)
        throw ConfigError("bf16.enabled and bfloat16.enabled (the same setting) differ");
      c->bf16 = on;
    }
  }
  if (c->fp16.enabled && c->bf16) throw ConfigError("fp16.enabled and bf16.enabled are both true: choose one");
}

void readOptimizer(Reader& top, std::vector<std::string>* warnings, OptimizerConfig* opt) {
  const json* o = top.object("optimizer");
  if (!o) return;
  Reader r(*o, "optimizer", warnings);
  opt->given = true;
  std::string type;
  r.string("type", &type);
  if (type != "Adam" && type != "AdamW")
    throw ConfigError("optimizer.type: \"" + type + "\" is not supported (Adam, AdamW)");
  // DeepSpeed: "AdamW" is decoupled; "Adam" too unless adam_w_mode is false. Its FusedAdam and CPU
  // Adam decay by 0 by default; with torch_adam it builds torch.optim.Adam/AdamW (AdamW: 0.01).
  bool adamW = true, torchAdam = false;
  opt->weightDecay = 0;
  if (const json* p = r.object("params")) {
    Reader pr(*p, "optimizer.params", warnings);
    pr.boolean("adam_w_mode", &adamW);
    pr.boolean("torch_adam", &torchAdam);
    adamW = adamW || type == "AdamW";
    if (torchAdam && adamW) opt->weightDecay = 0.01;
    pr.boolean("bias_correction", &opt->biasCorrection);
    if (torchAdam && pr.has("bias_correction"))
      throw ConfigError("optimizer.params.bias_correction: torch_adam builds torch.optim.Adam, which has no such "
                        "argument (DeepSpeed fails there too)");
    pr.only("amsgrad", false, "the AMSGrad variant (DeepSpeed's FusedAdam and CPU Adam refuse it too)");
    pr.real("lr", &opt->lr, 0, 1e6);
    if (const json* b = pr.find("betas")) {
      if (!b->is_array() || b->size() != 2 || !(*b)[0].is_number() || !(*b)[1].is_number())
        throw ConfigError("optimizer.params.betas: expected two numbers, got " + typeName(*b));
      opt->beta1 = (*b)[0].get<double>();
      opt->beta2 = (*b)[1].get<double>();
      if (!(opt->beta1 >= 0 && opt->beta1 < 1 && opt->beta2 >= 0 && opt->beta2 < 1))
        throw ConfigError("optimizer.params.betas: each must be in [0, 1)");
    }
    pr.real("eps", &opt->eps, 0, 1);
    pr.real("weight_decay", &opt->weightDecay, 0, 1e6);
    pr.finish();
  }
  opt->type = adamW ? "AdamW" : "Adam";
  r.finish();
}

void readScheduler(Reader& top, std::vector<std::string>* warnings, SchedulerConfig* s) {
  const json* o = top.object("scheduler");
  if (!o) return;
  Reader r(*o, "scheduler", warnings);
  std::string type;
  r.string("type", &type);
  if (type == "WarmupLR") s->type = SchedulerConfig::Type::WarmupLR;
  else if (type == "WarmupDecayLR") s->type = SchedulerConfig::Type::WarmupDecayLR;
  else throw ConfigError("scheduler.type: \"" + type + "\" is not supported (WarmupLR, WarmupDecayLR)");
  if (const json* p = r.object("params")) {
    Reader pr(*p, "scheduler.params", warnings);
    pr.real("warmup_min_lr", &s->warmupMinLr, 0, 1e6);
    pr.real("warmup_max_lr", &s->warmupMaxLr, 0, 1e6);
    pr.integer("warmup_num_steps", &s->warmupNumSteps, 0, INT64_MAX / 8);
    pr.integer("total_num_steps", &s->totalNumSteps, 0, INT64_MAX / 8);
    std::string warmup = "log";
    pr.string("warmup_type", &warmup);
    if (warmup == "log") s->warmupType = SchedulerConfig::Warmup::Log;
    else if (warmup == "linear") s->warmupType = SchedulerConfig::Warmup::Linear;
    else throw ConfigError("scheduler.params.warmup_type: \"" + warmup + "\" is not one of log, linear");
    pr.only("last_batch_iteration", -1, "a scheduler resumed by hand; load_checkpoint restores its step");
    pr.finish();
  }
  if (s->type == SchedulerConfig::Type::WarmupDecayLR && s->totalNumSteps <= s->warmupNumSteps)
    throw ConfigError("scheduler.params.total_num_steps: WarmupDecayLR needs it above warmup_num_steps (" +
                      std::to_string(s->warmupNumSteps) + ")");
  r.finish();
}

void readBatch(Reader& top, int ranks, TrainConfig* c) {
  int64_t total = 0, micro = 0, accum = 0;
  top.integer("train_batch_size", &total, 1, INT64_MAX / 8);
  top.integer("train_micro_batch_size_per_gpu", &micro, 1, INT64_MAX / 8);
  top.integer("gradient_accumulation_steps", &accum, 1, INT64_MAX / 8);
  const int64_t n = ranks;
  if (total && micro && accum) {
    if (total != micro * accum * n)
      throw ConfigError("train_batch_size (" + std::to_string(total) + ") must equal train_micro_batch_size_per_gpu (" +
                        std::to_string(micro) + ") x gradient_accumulation_steps (" + std::to_string(accum) +
                        ") x ranks (" + std::to_string(n) + ")");
  } else if (total && micro) {
    if (total % (micro * n))
      throw ConfigError("train_batch_size (" + std::to_string(total) + ") is not a multiple of " +
                        "train_micro_batch_size_per_gpu x ranks (" + std::to_string(micro * n) + ")");
    accum = total / (micro * n);
  } else if (total && accum) {
    if (total % (accum * n))
      throw ConfigError("train_batch_size (" + std::to_string(total) + ") is not a multiple of " +
                        "gradient_accumulation_steps x ranks (" + std::to_string(accum * n) + ")");
    micro = total / (accum * n);
  } else if (total) {
    accum = 1;
    if (total % n) throw ConfigError("train_batch_size (" + std::to_string(total) + ") is not a multiple of ranks (" +
                                     std::to_string(n) + ")");
    micro = total / n;
  } else {
    if (!micro) micro = 1;
    if (!accum) accum = 1;
  }
  c->microBatchPerRank = micro;
  c->gradientAccumulationSteps = accum;
  c->trainBatchSize = micro * accum * n;
}

// How gradients are reduced: in the training precision, scaled around the sum as DeepSpeed does.
void readCommunication(Reader& top, TrainConfig* c) {
  top.real("gradient_predivide_factor", &c->gradientPredivideFactor, 1e-30, 1e30);
  top.boolean("prescale_gradients", &c->prescaleGradients);
  if (c->prescaleGradients && top.has("gradient_predivide_factor") && c->gradientPredivideFactor != 1)
    throw ConfigError("prescale_gradients and gradient_predivide_factor: DeepSpeed uses the factor only without "
                      "prescaling: keep one");
  std::string comm;
  top.string("communication_data_type", &comm);
  if (comm.empty()) return;
  const std::string training = c->fp16.enabled ? "fp16" : c->bf16 ? "bf16" : "fp32";
  if (comm != "fp32" && comm != "fp16" && comm != "bf16")
    throw ConfigError("communication_data_type: \"" + comm + "\" is not one of fp32, fp16, bf16");
  if (comm != training)
    throw ConfigError("communication_data_type: \"" + comm + "\" is not supported with " + training +
                      " training: gradients are reduced in the training precision (" + training + ")");
}

// The front end's log, data loader and checkpoint tags (zcoll_torch.zero honours them).
void readFrontEnd(Reader& top, std::vector<std::string>* warnings, TrainConfig::FrontEnd* r) {
  top.integer("steps_per_print", &r->stepsPerPrint, 1, INT64_MAX / 8);
  top.boolean("wall_clock_breakdown", &r->wallClockBreakdown);
  top.boolean("memory_breakdown", &r->memoryBreakdown);
  top.boolean("dump_state", &r->dumpState);
  top.boolean("dataloader_drop_last", &r->dataloaderDropLast);
  // Adam and AdamW, the only optimizers the engine runs, are on DeepSpeed's tested list; offload
  // always runs the engine's CPU Adam (DeepSpeed's zero_force_ds_cpu_optimizer).
  top.anyBoolean("zero_allow_untested_optimizer");
  top.anyBoolean("zero_force_ds_cpu_optimizer");
  if (const json* o = top.object("checkpoint")) {
    Reader c(*o, "checkpoint", warnings);
    c.string("tag_validation", &r->tagValidation);
    if (r->tagValidation != "Ignore" && r->tagValidation != "Warn" && r->tagValidation != "Fail")
      throw ConfigError("checkpoint.tag_validation: \"" + r->tagValidation + "\" is not one of Ignore, Warn, Fail");
    c.only("use_node_local_storage", false, "every rank writes into the one checkpoint directory");
    c.only("load_universal", false, "zcoll's checkpoints load at any rank count and stage without conversion");
    c.finish();
  }
}

// DeepSpeed features zcoll does not have: a section that would turn one on is refused, naming it;
// one that leaves it off is accepted.
void refuseFeatures(Reader& top) {
  // Sections with an "enabled" switch.
  for (const char* k : {"amp", "tensorboard", "wandb", "csv_monitor", "comet", "flops_profiler", "comms_logger",
                        "autotuning", "elasticity", "compression_training", "data_efficiency", "curriculum_learning",
                        "eigenvalue", "progressive_layer_drop", "hybrid_engine", "nebula", "quantize_training",
                        "torch_autocast", "compile", "weight_quantization"}) {
    const json* v = top.find(k);
    if (!v) continue;
    if (!v->is_object()) throw ConfigError(std::string(k) + ": expected an object, got " + typeName(*v));
    auto e = v->find("enabled");
    if (e != v->end() && e->is_boolean() && !e->get<bool>()) continue;
    throw ConfigError(std::string(k) + " is not supported by zcoll_torch.zero (leave it out, or \"enabled\": false)");
  }
  // Sections that act whenever present.
  for (const char* k : {"activation_checkpointing", "sparse_attention", "pipeline", "aio", "data_types",
                        "sequence_parallel_size", "seq_parallel_communication_data_type"}) {
    if (top.find(k))
      throw ConfigError(std::string(k) + " is not supported by zcoll_torch.zero (zcoll has no such feature: leave it out)");
  }
  top.only("sparse_gradients", false, "sparse gradients are reduced dense");
  top.only("fp32_allreduce", false, "gradients are reduced in the training precision");
  top.only("disable_allgather", false, "the updated parameters are always all-gathered");
}

}  // namespace

double SchedulerConfig::lrAt(int64_t step, double optimizerLr) const {
  if (type == Type::None) return optimizerLr;
  if (step < warmupNumSteps) {
    double f;
    if (warmupType == Warmup::Log) f = std::log(static_cast<double>(step + 1)) / std::log(static_cast<double>(warmupNumSteps));
    else f = static_cast<double>(step) / static_cast<double>(warmupNumSteps);
    return warmupMinLr + (warmupMaxLr - warmupMinLr) * f;
  }
  if (type == Type::WarmupLR) return warmupMaxLr;
  const double left = static_cast<double>(totalNumSteps - step) / static_cast<double>(totalNumSteps - warmupNumSteps);
  return warmupMaxLr * std::max(0.0, left);
}

ParseResult parseConfig(std::string_view text, int ranks) {
  ParseResult res;
  try {
    if (ranks < 1) throw ConfigError("ranks: " + std::to_string(ranks) + " is not a rank count");
    json doc = json::parse(text.begin(), text.end());
    if (!doc.is_object()) throw ConfigError("the configuration must be a JSON object, got " + typeName(doc));
    Reader top(doc, "", &res.warnings, Reader::Unknown::Warn);
    readZero(top, &res.warnings, &res.config.zero);
    readFp16(top, &res.warnings, &res.config);
    readOptimizer(top, &res.warnings, &res.config.optimizer);
    readScheduler(top, &res.warnings, &res.config.scheduler);
    readBatch(top, ranks, &res.config);
    top.real("gradient_clipping", &res.config.gradientClipping, 0, 1e30);
    readCommunication(top, &res.config);
    readFrontEnd(top, &res.warnings, &res.config.frontEnd);
    refuseFeatures(top);
    top.finish();
    res.ok = true;
  } catch (const json::parse_error& e) {
    res.error = std::string("the configuration is not valid JSON: ") + e.what();
  } catch (const ConfigError& e) {
    res.error = e.what();
  } catch (const std::exception& e) {
    res.error = std::string("configuration: ") + e.what();
  }
  if (!res.ok) res.config = TrainConfig{};
  return res;
}

ParseResult parseConfigFile(const std::string& path, int ranks) {
  std::ifstream in(path);
  if (!in) {
    ParseResult res;
    res.error = "cannot read the configuration file " + path;
    return res;
  }
  std::stringstream text;
  text << in.rdbuf();
  return parseConfig(text.str(), ranks);
}

namespace {
int64_t shard(int64_t bytes, int ranks) { return (bytes + ranks - 1) / ranks; }
}  // namespace

MemoryEstimate estimateModelStates(int64_t params, int ranks, int stage, bool offloadOptimizer, bool offloadParam) {
  MemoryEstimate m;
  if (params < 0 || ranks < 1 || stage < 0 || stage > 3) return m;
  const int64_t p16 = 2 * params, g16 = 2 * params, states = 12 * params;  // per the ZeRO paper (K = 12)
  const int64_t n = ranks;
  switch (stage) {
    case 0: m.deviceBytes = p16 + g16 + states; break;
    case 1: m.deviceBytes = p16 + g16 + shard(states, n); break;
    case 2: m.deviceBytes = p16 + shard(g16, n) + shard(states, n); break;
    default: m.deviceBytes = shard(p16, n) + shard(g16, n) + shard(states, n); break;
  }
  if (offloadOptimizer && stage >= 1) {
    // The optimizer states move to the host; from stage 2 the gradient shard they update goes too.
    m.deviceBytes -= shard(states, n) + (stage >= 2 ? shard(g16, n) : 0);
    m.hostBytes += shard(states, n) + (stage >= 2 ? shard(g16, n) : 0);
  }
  if (offloadParam && stage == 3) {
    m.deviceBytes -= shard(p16, n);
    m.hostBytes += shard(p16, n);
  }
  return m;
}

}  // namespace zcoll::zero
