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
  Reader(const json& obj, std::string path, std::vector<std::string>* warnings)
      : obj_(obj), path_(std::move(path)), warnings_(warnings) {}

  // Keys present but never read: unknown to zcoll (a warning, as DeepSpeed does for extras).
  void finish() {
    for (auto it = obj_.begin(); it != obj_.end(); ++it)
      if (!read_.count(it.key())) warnings_->push_back("unknown key " + name(it.key()) + " (ignored)");
  }

  const json* find(const std::string& key) {
    read_.insert(key);
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) return nullptr;
    if (it->is_string() && it->get<std::string>() == "auto")
      throw ConfigError(name(key) + " is \"auto\": put the value in (zcoll fills no \"auto\")");
    return &*it;
  }

  void boolean(const std::string& key, bool* out) {
    if (const json* v = find(key)) {
      if (!v->is_boolean()) throw ConfigError(name(key) + ": expected true or false, got " + typeName(*v));
      *out = v->get<bool>();
    }
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
  std::set<std::string> read_;
};

void readOffload(Reader& parent, const std::string& key, std::vector<std::string>* warnings, OffloadConfig* out) {
  const json* o = parent.object(key);
  if (!o) return;
  Reader r(*o, parent.name(key), warnings);
  std::string device = "none";
  r.string("device", &device);
  if (device == "none") out->device = OffloadDevice::None;
  else if (device == "cpu") out->device = OffloadDevice::Cpu;
  else if (device == "nvme") out->device = OffloadDevice::Nvme;
  else throw ConfigError(r.name("device") + ": \"" + device + "\" is not one of none, cpu, nvme");
  r.boolean("pin_memory", &out->pinMemory);
  r.string("nvme_path", &out->nvmePath);
  r.integer("buffer_count", &out->bufferCount, 1, 1 << 20);
  // DeepSpeed's tuning knobs of its NVMe and pipelined paths: accepted, not used.
  for (const char* k : {"buffer_size", "max_in_cpu", "pipeline_read", "pipeline_write", "fast_init", "ratio"}) r.find(k);
  if (out->device == OffloadDevice::Nvme)
    throw ConfigError(parent.name(key) + ".device: \"nvme\" is not supported (use \"cpu\")");
  r.finish();
}

void readZero(Reader& top, std::vector<std::string>* warnings, ZeroOptimization* z) {
  const json* o = top.object("zero_optimization");
  if (!o) return;
  Reader r(*o, "zero_optimization", warnings);
  r.integer("stage", &z->stage, 0, 3);
  z->overlapComm = z->stage == 3;  // DeepSpeed's default depends on the stage
  r.boolean("overlap_comm", &z->overlapComm);
  r.boolean("reduce_scatter", &z->reduceScatter);
  r.integer("reduce_bucket_size", &z->reduceBucketSize, 1, INT64_MAX / 8);
  r.boolean("allgather_partitions", &z->allgatherPartitions);
  r.integer("allgather_bucket_size", &z->allgatherBucketSize, 1, INT64_MAX / 8);
  r.boolean("contiguous_gradients", &z->contiguousGradients);
  readOffload(r, "offload_optimizer", warnings, &z->offloadOptimizer);
  readOffload(r, "offload_param", warnings, &z->offloadParam);
  r.integer("sub_group_size", &z->subGroupSize, 0, INT64_MAX / 8);
  r.integer("stage3_prefetch_bucket_size", &z->stage3PrefetchBucketSize, 0, INT64_MAX / 8);
  r.integer("stage3_param_persistence_threshold", &z->stage3ParamPersistenceThreshold, 0, INT64_MAX / 8);
  r.integer("stage3_max_live_parameters", &z->stage3MaxLiveParameters, 0, INT64_MAX / 8);
  r.integer("stage3_max_reuse_distance", &z->stage3MaxReuseDistance, 0, INT64_MAX / 8);
  r.boolean("stage3_gather_16bit_weights_on_model_save", &z->stage3Gather16bitWeightsOnModelSave);
  r.boolean("stage3_gather_fp16_weights_on_model_save", &z->stage3Gather16bitWeightsOnModelSave);  // older name
  r.boolean("round_robin_gradients", &z->roundRobinGradients);
  // DeepSpeed keys with no effect here (single-copy load, elastic checkpoints, ...): accepted.
  for (const char* k : {"load_from_fp32_weights", "elastic_checkpoint", "ignore_unused_parameters",
                        "use_multi_rank_bucket_allreduce", "memory_efficient_linear"})
    r.find(k);
  if (z->offloadOptimizer.device != OffloadDevice::None && z->stage == 0)
    throw ConfigError("zero_optimization.offload_optimizer needs stage 1, 2 or 3 (stage is 0)");
  if (z->offloadParam.device != OffloadDevice::None && z->stage != 3)
    throw ConfigError("zero_optimization.offload_param needs stage 3 (stage is " + std::to_string(z->stage) + ")");
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
    r.find("auto_cast");
    r.finish();
  }
  if (const json* o = top.object("bf16")) {
    Reader r(*o, "bf16", warnings);
    r.boolean("enabled", &c->bf16);
    r.finish();
  }
  if (c->fp16.enabled && c->bf16) throw ConfigError("fp16.enabled and bf16.enabled are both true: choose one");
}

void readOptimizer(Reader& top, std::vector<std::string>* warnings, OptimizerConfig* opt) {
  const json* o = top.object("optimizer");
  if (!o) return;
  Reader r(*o, "optimizer", warnings);
  r.string("type", &opt->type);
  if (opt->type != "Adam" && opt->type != "AdamW")
    throw ConfigError("optimizer.type: \"" + opt->type + "\" is not supported (Adam, AdamW)");
  if (opt->type == "Adam") opt->weightDecay = 0;  // torch.optim.Adam's default
  if (const json* p = r.object("params")) {
    Reader pr(*p, "optimizer.params", warnings);
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
    bool adamW = opt->type == "AdamW";
    pr.boolean("adam_w_mode", &adamW);
    if (adamW) opt->type = "AdamW";
    for (const char* k : {"bias_correction", "torch_adam", "amsgrad"}) pr.find(k);
    pr.finish();
  }
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
    pr.find("last_batch_iteration");
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
    Reader top(doc, "", &res.warnings);
    readZero(top, &res.warnings, &res.config.zero);
    readFp16(top, &res.warnings, &res.config);
    readOptimizer(top, &res.warnings, &res.config.optimizer);
    readScheduler(top, &res.warnings, &res.config.scheduler);
    readBatch(top, ranks, &res.config);
    top.real("gradient_clipping", &res.config.gradientClipping, 0, 1e30);
    for (const char* k : {"steps_per_print", "wall_clock_breakdown", "zero_allow_untested_optimizer", "prescale_gradients",
                          "gradient_predivide_factor", "communication_data_type", "dump_state"})
      top.find(k);  // DeepSpeed's logging and tuning keys: accepted, not used
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
