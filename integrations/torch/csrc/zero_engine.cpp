// zero_engine.cpp - zcoll_torch._C.ZeroEngine: the C++ ZeRO engine (include/zcoll/zero.hpp) for
// zcoll_torch.zero. It runs on a zcoll communicator of its own (so that the process group's
// operations and the engine's never share one), and shows the engine's buffers as tensors that
// alias them (no copy): parameters, gradients.
#include "zero_engine.hpp"

#include <torch/extension.h>

#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <zcoll/zcoll.h>
#include <zcoll/zero.hpp>

#include "adamw.hpp"  // zero/: the engine's CPU Adam, for cpu_adam_step

namespace zcoll_torch {
namespace py = pybind11;
namespace zz = zcoll::zero;

namespace {

// A failed engine call as a Python exception: ValueError for a bad argument, RuntimeError otherwise.
void check(const zz::Result& r) {
  if (r.ok()) return;
  if (r.code == zcollInvalidArgument) throw py::value_error(r.message);
  throw std::runtime_error(r.message);
}

at::ScalarType scalarType(zz::DType t) {
  switch (t) {
    case zz::DType::F16: return at::kHalf;
    case zz::DType::BF16: return at::kBFloat16;
    default: return at::kFloat;
  }
}

class ZeroEngine {
 public:
  ZeroEngine(const py::bytes& uniqueId, int rank, int size, const std::string& configJson,
             const std::vector<std::string>& names, const std::vector<std::vector<int64_t>>& shapes,
             const std::vector<int>& paramGroups, const std::vector<bool>& frozen, int optimizerThreads) {
    const std::string id = uniqueId;
    zcollUniqueId uid;
    if (id.size() != sizeof uid.internal)
      throw py::value_error("unique_id: " + std::to_string(id.size()) + " bytes, expected " + std::to_string(sizeof uid.internal));
    if (names.size() != shapes.size() || names.size() != paramGroups.size() || names.size() != frozen.size())
      throw py::value_error("names, shapes, param_groups and frozen must have one entry per parameter");
    zz::ParseResult parsed = zz::parseConfig(configJson, size);
    if (!parsed.ok) throw py::value_error(parsed.error);
    warnings_ = parsed.warnings;
    std::vector<zz::GroupSpec> groups;
    for (size_t i = 0; i < names.size(); ++i) {
      zz::GroupSpec g;
      g.name = names[i];
      g.shape = shapes[i];
      g.numel = 1;
      for (int64_t d : g.shape) g.numel *= d;
      g.paramGroup = paramGroups[i];
      g.frozen = frozen[i];
      groups.push_back(std::move(g));
    }
    std::memcpy(uid.internal, id.data(), id.size());
    {
      py::gil_scoped_release unlocked;
      const zcollResult_t rc = zcollCommInitRank(&comm_, size, uid, rank);
      if (rc != zcollSuccess)
        throw std::runtime_error(std::string("zcoll_torch.zero: creating the engine's communicator: ") +
                                 zcollGetErrorString(rc) + ": " + zcollGetLastError(nullptr));
      zz::EngineOptions options;
      options.optimizerThreads = optimizerThreads;
      zz::Result r;
      engine_ = zz::Engine::create(comm_, parsed.config, std::move(groups), options, &r);
      if (!engine_) {
        zcollCommDestroy(comm_);
        comm_ = nullptr;
        check(r);
      }
    }
    config_ = parsed.config;
  }
  ~ZeroEngine() { close(); }

  void close() {
    engine_.reset();
    if (comm_) zcollCommDestroy(comm_);
    comm_ = nullptr;
  }

  static py::bytes uniqueId() {
    zcollUniqueId uid;
    const zcollResult_t rc = zcollGetUniqueId(&uid);
    if (rc != zcollSuccess) throw std::runtime_error(std::string("zcollGetUniqueId: ") + zcollGetLastError(nullptr));
    return py::bytes(uid.internal, sizeof uid.internal);
  }

  zz::Engine& e() {
    if (!engine_) throw std::runtime_error("zcoll_torch.zero: the engine is closed");
    return *engine_;
  }

  at::ScalarType dtype() { return scalarType(e().dtype()); }
  std::string dtypeName() {
    switch (e().dtype()) {
      case zz::DType::F16: return "float16";
      case zz::DType::BF16: return "bfloat16";
      default: return "float32";
    }
  }

  void initParams(int g, const at::Tensor& values) {
    checkIndex(g, "init_params");
    const auto& spec = e().groups()[static_cast<size_t>(g)];
    if (values.scalar_type() != at::kFloat || !values.is_contiguous() || values.numel() != spec.numel || !values.is_cpu())
      throw py::value_error("init_params: group '" + spec.name + "' needs a contiguous CPU float32 tensor of " +
                            std::to_string(spec.numel) + " elements");
    check(e().initParams(g, values.data_ptr<float>()));
  }

  // A tensor over the engine's memory (nullptr: none): the caller keeps the engine alive meanwhile.
  at::Tensor view(const void* data, int g, at::ScalarType type) {
    const auto& spec = e().groups()[static_cast<size_t>(g)];
    if (!data) return at::Tensor();
    return torch::from_blob(const_cast<void*>(data), spec.shape, at::TensorOptions().dtype(type));
  }

  at::Tensor params(int g) {
    checkIndex(g, "params");
    return view(e().params(g), g, dtype());
  }

  at::Tensor grads(int g) {
    checkIndex(g, "grads");
    zz::Result r;
    void* p = e().grads(g, &r);
    check(r);
    return view(p, g, dtype());
  }

  at::Tensor gatherMaster(int g) {
    checkIndex(g, "gather_master");
    const auto& spec = e().groups()[static_cast<size_t>(g)];
    at::Tensor out = at::empty(spec.shape, at::kFloat);
    zz::Result r;
    {
      py::gil_scoped_release unlocked;
      r = e().gatherMaster(g, out.data_ptr<float>());
    }
    check(r);
    return out;
  }

  void setParamGroup(int k, double lr, double beta1, double beta2, double eps, double weightDecay) {
    zz::ParamGroupOptions o;
    o.lr = lr, o.beta1 = beta1, o.beta2 = beta2, o.eps = eps, o.weightDecay = weightDecay;
    check(e().setParamGroup(k, o));
  }

  void setBoundary(const std::string& b) {
    if (b == "auto") check(e().setBoundary(zz::Boundary::Auto));
    else if (b == "yes") check(e().setBoundary(zz::Boundary::Yes));
    else if (b == "no") check(e().setBoundary(zz::Boundary::No));
    else throw py::value_error("set_boundary: \"" + b + "\" is not auto, yes or no");
  }

  template <typename F>
  void unlocked(F&& f) {
    zz::Result r;
    {
      py::gil_scoped_release released;
      r = f(e());
    }
    check(r);
  }

  bool step() {
    bool stepped = false;
    unlocked([&](zz::Engine& x) { return x.step(&stepped); });
    return stepped;
  }

  py::dict stats() {
    using namespace pybind11::literals;
    const zz::EngineStats s = e().stats();
    return py::dict("steps"_a = s.steps, "skipped_steps"_a = s.skippedSteps, "micro_steps"_a = s.microSteps,
                    "loss_scale"_a = s.lossScale, "lr"_a = s.lr, "grad_norm"_a = s.gradNorm,
                    "reduce_bytes"_a = s.reduceBytes, "gather_bytes"_a = s.gatherBytes, "collectives"_a = s.collectives,
                    "prefetches"_a = s.prefetches, "comm_wait_seconds"_a = s.commWaitSeconds,
                    "optimizer_seconds"_a = s.optimizerSeconds);
  }

  py::dict memory() {
    using namespace pybind11::literals;
    const zz::EngineMemory m = e().memory();
    return py::dict("param_bytes"_a = m.paramBytes, "grad_bytes"_a = m.gradBytes,
                    "optimizer_bytes"_a = m.optimizerBytes, "device_bytes"_a = m.deviceBytes,
                    "host_bytes"_a = m.hostBytes, "buffer_bytes"_a = m.bufferBytes,
                    "peak_buffer_bytes"_a = m.peakBufferBytes);
  }

  py::dict config() const {
    py::dict d;
    d["stage"] = config_.zero.stage;
    d["gradient_accumulation_steps"] = config_.gradientAccumulationSteps;
    d["train_batch_size"] = config_.trainBatchSize;
    d["train_micro_batch_size_per_gpu"] = config_.microBatchPerRank;
    d["gradient_clipping"] = config_.gradientClipping;
    d["optimizer_type"] = config_.optimizer.type;
    d["lr"] = config_.optimizer.lr;
    d["betas"] = py::make_tuple(config_.optimizer.beta1, config_.optimizer.beta2);
    d["eps"] = config_.optimizer.eps;
    d["weight_decay"] = config_.optimizer.weightDecay;
    d["scheduler"] = config_.scheduler.type != zz::SchedulerConfig::Type::None;
    d["fp16"] = config_.fp16.enabled;
    d["bf16"] = config_.bf16;
    d["stage3_gather_16bit_weights_on_model_save"] = config_.zero.stage3Gather16bitWeightsOnModelSave;
    d["auto_cast"] = config_.fp16.autoCast;
    const zz::TrainConfig::FrontEnd& f = config_.frontEnd;
    d["steps_per_print"] = f.stepsPerPrint;
    d["wall_clock_breakdown"] = f.wallClockBreakdown;
    d["memory_breakdown"] = f.memoryBreakdown;
    d["dump_state"] = f.dumpState;
    d["dataloader_drop_last"] = f.dataloaderDropLast;
    d["tag_validation"] = f.tagValidation;
    return d;
  }

  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  void checkIndex(int g, const char* what) {
    if (g < 0 || g >= static_cast<int>(e().groups().size()))
      throw py::index_error(std::string(what) + ": parameter " + std::to_string(g) + " is not registered");
  }

  zcollComm_t comm_ = nullptr;
  std::unique_ptr<zz::Engine> engine_;
  zz::TrainConfig config_;
  std::vector<std::string> warnings_;
};

}  // namespace

namespace {

// One step of the engine's CPU Adam/AdamW on fp32 CPU tensors, in place (DeepSpeedCPUAdam's role):
// what the engine runs on its shard, for benchmarks and for callers with their own flat states.
void cpuAdamStep(at::Tensor p, const at::Tensor& g, at::Tensor m, at::Tensor v, double lr, double beta1, double beta2,
                 double eps, double weightDecay, int64_t step, bool adamw, int threads) {
  const at::Tensor* all[] = {&p, &g, &m, &v};
  for (const at::Tensor* t : all)
    if (t->scalar_type() != at::kFloat || !t->is_contiguous() || t->device().type() != at::kCPU)
      throw py::value_error("cpu_adam_step: p, g, m and v must be contiguous float32 CPU tensors");
  const int64_t n = p.numel();
  if (g.numel() != n || m.numel() != n || v.numel() != n)
    throw py::value_error("cpu_adam_step: p, g, m and v must have the same number of elements");
  if (step < 1) throw py::value_error("cpu_adam_step: step must be >= 1 (it counts from 1)");
  static std::unique_ptr<zz::CpuAdam> adam;
  if (!adam || (threads > 0 && adam->threads() != threads)) adam = std::make_unique<zz::CpuAdam>(threads);
  zz::AdamStep a;
  a.lr = static_cast<float>(lr), a.beta1 = static_cast<float>(beta1), a.beta2 = static_cast<float>(beta2);
  a.eps = static_cast<float>(eps), a.weightDecay = static_cast<float>(weightDecay), a.step = step, a.decoupled = adamw;
  py::gil_scoped_release unlocked;
  adam->step(p.data_ptr<float>(), g.data_ptr<float>(), m.data_ptr<float>(), v.data_ptr<float>(), static_cast<size_t>(n), a);
}

}  // namespace

void defineZeroEngine(py::module_& m) {
  m.def("cpu_adam_step", &cpuAdamStep, py::arg("p"), py::arg("g"), py::arg("m"), py::arg("v"), py::arg("lr"),
        py::arg("beta1"), py::arg("beta2"), py::arg("eps"), py::arg("weight_decay"), py::arg("step"),
        py::arg("adamw") = true, py::arg("threads") = 0,
        "one step of the ZeRO engine's CPU Adam (AdamW when adamw) on fp32 CPU tensors, in place");
  py::class_<ZeroEngine>(m, "ZeroEngine", "The C++ ZeRO engine of one rank (zcoll/zero.hpp), on its own communicator.")
      .def(py::init<const py::bytes&, int, int, const std::string&, const std::vector<std::string>&,
                    const std::vector<std::vector<int64_t>>&, const std::vector<int>&, const std::vector<bool>&, int>(),
           py::arg("unique_id"), py::arg("rank"), py::arg("size"), py::arg("config_json"), py::arg("names"),
           py::arg("shapes"), py::arg("param_groups"), py::arg("frozen"), py::arg("optimizer_threads") = 0)
      .def_static("unique_id", &ZeroEngine::uniqueId)
      .def("close", &ZeroEngine::close)
      .def("dtype", &ZeroEngine::dtypeName, "the training precision: float32, float16 or bfloat16")
      .def("config", &ZeroEngine::config)
      .def("warnings", &ZeroEngine::warnings)
      .def("init_params", &ZeroEngine::initParams)
      .def("params", &ZeroEngine::params)
      .def("grads", &ZeroEngine::grads)
      .def("fetch", [](ZeroEngine& z, int g) { z.unlocked([g](zz::Engine& x) { return x.fetch(g); }); })
      .def("release", [](ZeroEngine& z, int g) { z.unlocked([g](zz::Engine& x) { return x.release(g); }); })
      .def("grads_ready", [](ZeroEngine& z, int g) { z.unlocked([g](zz::Engine& x) { return x.gradsReady(g); }); })
      .def("set_param_group", &ZeroEngine::setParamGroup)
      .def("set_boundary", &ZeroEngine::setBoundary)
      .def("at_boundary", [](ZeroEngine& z) { return z.e().atBoundary(); })
      .def("step", &ZeroEngine::step)
      .def("loss_scale", [](ZeroEngine& z) { return z.e().lossScale(); })
      .def("learning_rate", [](ZeroEngine& z) { return z.e().learningRate(); })
      .def("gather_master", &ZeroEngine::gatherMaster)
      .def("save_checkpoint",
           [](ZeroEngine& z, const std::string& dir, const std::string& tag) {
             z.unlocked([&](zz::Engine& x) { return x.saveCheckpoint(dir, tag); });
           })
      .def("load_checkpoint",
           [](ZeroEngine& z, const std::string& dir, const std::string& tag) {
             z.unlocked([&](zz::Engine& x) { return x.loadCheckpoint(dir, tag); });
           })
      .def("save_model",
           [](ZeroEngine& z, const std::string& path) { z.unlocked([&](zz::Engine& x) { return x.saveModel(path); }); })
      .def("stats", &ZeroEngine::stats)
      .def("memory", &ZeroEngine::memory);
}

}  // namespace zcoll_torch
