// zero_train - trains a small MLP with the ZeRO engine on synthetic data.
//   zcoll-run -n 4 zero_train --config ds_config.json --steps 50
// Rank 0 prints `step N loss X` per optimizer step (the mean over every rank's micro-batches), then
// a summary: step time, exposed communication, bytes moved per step and per-rank memory beside the
// estimator's figures.
#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "mlp.hpp"
#include "zcoll/zcoll.h"
#include "zcoll/zero.hpp"

namespace {

namespace zz = zcoll::zero;

int usage(const char* msg) {
  if (msg) std::fprintf(stderr, "zero_train: %s\n", msg);
  std::fprintf(stderr,
               "usage: zero_train --config FILE [--steps N] [--layers L] [--hidden H] [--input I] [--output O]\n"
               "                  [--seed S] [--save DIR] [--load DIR] [--quiet]\n"
               "  run it under a launcher: zcoll-run -n 4 zero_train --config ds_config.json --steps 50\n");
  return 2;
}

bool intArg(const char* name, const char* value, int64_t lo, int64_t* out) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(value, &end, 10);
  if (errno || !end || *end || v < lo) {
    std::fprintf(stderr, "zero_train: %s %s: not an integer >= %" PRId64 "\n", name, value, lo);
    return false;
  }
  *out = v;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string configPath, saveDir, loadDir;
  int64_t steps = 20, layers = 4, hidden = 1024, input = 256, output = 256, seed = 1;
  bool quiet = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    auto take = [&](int64_t lo, int64_t* out) { return v && intArg(a.c_str(), argv[++i], lo, out); };
    if (a == "-h" || a == "--help") return usage(nullptr), 0;
    if (a == "--config" && v) configPath = argv[++i];
    else if (a == "--save" && v) saveDir = argv[++i];
    else if (a == "--load" && v) loadDir = argv[++i];
    else if (a == "--quiet") quiet = true;
    else if (a == "--steps") { if (!take(0, &steps)) return 2; }
    else if (a == "--layers") { if (!take(1, &layers)) return 2; }
    else if (a == "--hidden") { if (!take(1, &hidden)) return 2; }
    else if (a == "--input") { if (!take(1, &input)) return 2; }
    else if (a == "--output") { if (!take(1, &output)) return 2; }
    else if (a == "--seed") { if (!take(0, &seed)) return 2; }
    else return usage(("unknown or incomplete option " + a).c_str());
  }
  if (configPath.empty()) return usage("--config is required");

  zcollComm_t comm = nullptr;
  if (zcollCommInitFromEnv(&comm, nullptr) != zcollSuccess) {
    std::fprintf(stderr, "zero_train: %s (run it under zcoll-run, torchrun, mpirun or srun)\n", zcollGetLastError(nullptr));
    return 1;
  }
  int rank = 0, ranks = 1;
  zcollCommUserRank(comm, &rank);
  zcollCommCount(comm, &ranks);
  auto fatal = [&](const std::string& msg) {
    std::fprintf(stderr, "zero_train: rank %d: %s\n", rank, msg.c_str());
    zcollCommAbort(comm);
    return 1;
  };

  const zz::ParseResult cfg = zz::parseConfigFile(configPath, ranks);
  if (!cfg.ok) return fatal(cfg.error);
  if (rank == 0)
    for (const std::string& w : cfg.warnings) std::fprintf(stderr, "zero_train: warning: %s\n", w.c_str());

  zero_train::MlpShape shape;
  shape.layers = static_cast<int>(layers), shape.hidden = static_cast<int>(hidden), shape.input = static_cast<int>(input);
  shape.output = static_cast<int>(output), shape.batch = static_cast<int>(cfg.config.microBatchPerRank);
  shape.seed = static_cast<uint64_t>(seed);
  zero_train::Mlp model(shape);
  zz::Result r;
  auto engine = zz::Engine::create(comm, cfg.config, model.groups(), zz::EngineOptions{}, &r);
  if (!engine) return fatal(r.message);
  for (int g = 0; g < static_cast<int>(model.groups().size()); ++g) {
    const std::vector<float> v = model.initialValues(g);
    if (!(r = engine->initParams(g, v.data())).ok()) return fatal(r.message);
  }
  int64_t firstStep = 0;
  if (!loadDir.empty()) {
    if (!(r = engine->loadCheckpoint(loadDir, "")).ok()) return fatal(r.message);
    firstStep = engine->stats().steps;
    if (rank == 0 && !quiet) std::printf("loaded %s at step %" PRId64 "\n", loadDir.c_str(), firstStep);
  }

  const int gas = static_cast<int>(cfg.config.gradientAccumulationSteps);
  std::vector<double> stepSeconds;
  for (int64_t s = firstStep; s < firstStep + steps; ++s) {
    const auto t0 = std::chrono::steady_clock::now();
    double lossSum = 0;
    for (int m = 0; m < gas; ++m) {
      std::string error;
      const double loss = model.microBatch(*engine, s, m, rank, &error);
      if (std::isnan(loss) && !error.empty()) return fatal(error);
      lossSum += loss;
      bool stepped = false;
      if (!(r = engine->step(&stepped)).ok()) return fatal(r.message);
    }
    stepSeconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    double mean = lossSum / gas;
    if (zcollAllReduce(&mean, &mean, 1, zcollFloat64, zcollAvg, comm, nullptr) != zcollSuccess)
      return fatal(zcollGetLastError(comm));
    if (rank == 0 && !quiet) std::printf("step %" PRId64 " loss %.9g\n", s + 1, mean);
    std::fflush(stdout);
  }
  if (!saveDir.empty()) {
    if (!(r = engine->saveCheckpoint(saveDir, "step" + std::to_string(firstStep + steps))).ok()) return fatal(r.message);
    if (rank == 0 && !quiet) std::printf("saved %s/step%" PRId64 "\n", saveDir.c_str(), firstStep + steps);
  }

  // Summary (rank 0): the median step after the first two, exposed communication, bytes, memory.
  const zz::EngineStats st = engine->stats();
  const zz::EngineMemory mem = engine->memory();
  if (rank == 0 && steps > 0) {
    std::vector<double> t(stepSeconds.begin() + std::min<int64_t>(2, steps - 1), stepSeconds.end());
    std::sort(t.begin(), t.end());
    const double median = t[t.size() / 2];
    const int64_t P = model.parameters();
    const double psiBytes = static_cast<double>(P) * zz::dtypeSize(engine->dtype());
    const auto& z = cfg.config.zero;
    const zz::MemoryEstimate est = zz::estimateModelStates(P, ranks, z.stage, z.offloadOptimizer.device != zz::OffloadDevice::None,
                                                           z.offloadParam.device != zz::OffloadDevice::None);
    std::printf("summary: ranks %d stage %d dtype %s parameters %" PRId64 " steps %" PRId64 " skipped %" PRId64 " loss_scale %g\n",
                ranks, z.stage, engine->dtype() == zz::DType::F32 ? "fp32" : engine->dtype() == zz::DType::F16 ? "fp16" : "bf16",
                P, st.steps, st.skippedSteps, st.lossScale);
    std::printf("summary: step_ms %.3f comm_wait_ms_per_step %.3f optimizer_ms_per_step %.3f\n", median * 1e3,
                st.commWaitSeconds * 1e3 / static_cast<double>(steps), st.optimizerSeconds * 1e3 / static_cast<double>(steps));
    std::printf("summary: per step per rank: reduce %.3f psi, gather %.3f psi, total %.3f psi (psi = %.0f bytes), prefetches %" PRId64 "\n",
                st.reduceBytes / psiBytes / steps, st.gatherBytes / psiBytes / steps,
                (st.reduceBytes + st.gatherBytes) / psiBytes / steps, psiBytes, st.prefetches / std::max<int64_t>(steps, 1));
    std::printf("summary: memory device %" PRId64 " host %" PRId64 " (params %" PRId64 " grads %" PRId64 " optimizer %" PRId64
                ") buffers peak %" PRId64 "; estimate device %" PRId64 " host %" PRId64 "\n",
                mem.deviceBytes, mem.hostBytes, mem.paramBytes, mem.gradBytes, mem.optimizerBytes, mem.peakBufferBytes,
                est.deviceBytes, est.hostBytes);
  }
  engine.reset();
  zcollCommDestroy(comm);
  return 0;
}
