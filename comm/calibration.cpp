// calibration.cpp - Communicator::calibrate: the measured cost model (docs/algorithms.md, "Selection
// and the cost model") and its cache file. Runs once per communicator, at creation; collective.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "comm/communicator.hpp"
#include "core/log.hpp"

namespace zcoll {

namespace {

// The calibration cache: one file per (version, host, rank count, chunking) key, holding the key and
// the model's bytes (CostModel::serialize).
constexpr uint64_t kCacheMagic = 0x7a636f6c6c434d32ull;  // "zcollCM2"
constexpr long kMaxCacheBytes = 1 << 20;

bool readCache(const std::string& path, uint64_t key, CostModel* out) {
  if (path.empty()) return false;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  uint64_t head[2] = {};
  std::string bytes;
  bool ok = std::fread(head, sizeof head, 1, f) == 1 && head[0] == kCacheMagic && head[1] == key;
  if (ok) {
    char buf[4096];
    size_t got;
    while ((got = std::fread(buf, 1, sizeof buf, f)) > 0 && static_cast<long>(bytes.size()) < kMaxCacheBytes)
      bytes.append(buf, got);
  }
  std::fclose(f);
  return ok && CostModel::parse(bytes, out);
}

void writeCache(const std::string& path, uint64_t key, const CostModel& m) {
  if (path.empty()) return;
  const size_t slash = path.rfind('/');
  if (slash != std::string::npos) {
    std::string dir = path.substr(0, slash);
    for (size_t i = 1; i <= dir.size(); ++i)
      if (i == dir.size() || dir[i] == '/') ::mkdir(dir.substr(0, i).c_str(), 0755);
  }
  const std::string tmp = fmt::format("{}.{}.tmp", path, getpid());
  const uint64_t head[2] = {kCacheMagic, key};
  const std::string bytes = m.serialize();
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return;
  const bool ok = std::fwrite(head, sizeof head, 1, f) == 1 && std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  if (std::fclose(f) == 0 && ok) std::rename(tmp.c_str(), path.c_str());  // atomic for concurrent jobs
  else std::remove(tmp.c_str());
}

// Rank 0's cached model, when it has one, adopted by every rank: two bootstrap all-gathers (its size,
// then its bytes). False on every rank when rank 0 has none.
Status shareCachedModel(Bootstrap& bootstrap, int rank, int nranks, const std::string* cached, CostModel* out,
                        bool* adopted) {
  *adopted = false;
  std::vector<uint64_t> sizes(static_cast<size_t>(nranks));
  if (rank == 0 && cached) sizes[0] = cached->size();
  if (Status s = bootstrap.allGather(sizes.data(), sizeof(uint64_t)); !s) return s;
  const size_t n = sizes[0];
  if (n == 0) return Status::ok();
  std::string all(n * static_cast<size_t>(nranks), '\0');
  if (rank == 0) std::memcpy(all.data(), cached->data(), n);
  if (Status s = bootstrap.allGather(all.data(), n); !s) return s;
  if (!CostModel::parse(std::string_view(all.data(), n), out))
    return internalError("calibration: rank 0's cached cost model ({} bytes) does not parse here", n);
  *adopted = true;
  return Status::ok();
}

}  // namespace

Status Communicator::calibrate() {
  if (nranks_ == 1) return Status::ok();
  // The probe times every all-reduce algorithm at 14 sizes, which takes minutes beyond a few ranks:
  // there the built-in figures serve, unless asked (2).
  if (nranks_ > kCalibrateMaxRanks && !config_.recalibrate) {
    ZCOLL_INFO(Init, rank_, "calibration: skipped at {} ranks (more than {}; ZCOLL_CALIBRATE=2 measures)", nranks_,
               kCalibrateMaxRanks);
    return Status::ok();
  }
  const int n = nranks_;
  const uint64_t host = bootstrap_->peers()[0].hostHash;
  const std::string keyText = fmt::format("{}:{}:{}:{}x{}:{}:{}:{}:{}:{}", ZCOLL_VERSION_CODE, host, n, selector_.hosts().hosts,
                                          selector_.hosts().perHost, transport_->name(), config_.spinNs, hostChunkBytes_,
                                          config_.fifoSlots, allAlgorithms().size());
  const uint64_t key = fnv1a(keyText.data(), keyText.size());
  const std::string path =
      config_.calibrationDir.empty() ? std::string() : fmt::format("{}/cost-model-{:016x}.bin", config_.calibrationDir, key);

  // Rank 0 decides between the cache and a fresh measurement; everyone follows it.
  {
    CostModel cached;
    std::string bytes;
    if (rank_ == 0 && !config_.recalibrate && readCache(path, key, &cached)) bytes = cached.serialize();
    bool adopted = false;
    if (Status s = shareCachedModel(*bootstrap_, rank_, n, bytes.empty() ? nullptr : &bytes, &cached, &adopted); !s)
      return s;
    if (adopted) {
      selector_.setModel(cached);
      return Status::ok();
    }
  }

  constexpr size_t kMaxFloats = kCalibrationBytes[kCalibrationPoints - 1] / sizeof(float);
  HostScratch probe;  // its own memory: the algorithms may use scratch_
  auto* buf = static_cast<float*>(probe.get(2 * kMaxFloats * sizeof(float)));
  if (!buf) return systemError("calibration buffers", ENOMEM);
  std::vector<const Algorithm*> algos;
  const Algorithm* barrier = nullptr;
  for (const Algorithm* a : allAlgorithms()) {
    if (a->collective() == Collective::AllReduce && !a->eager() && a->supportsOn(selector_.hosts()).isOk())
      algos.push_back(a);
    if (a->collective() == Collective::Barrier) barrier = a;
  }
  if (!barrier) return internalError("calibration needs a barrier algorithm");
  const OpArgs barrierOp{Collective::Barrier, nullptr, nullptr, 0, DataType::Uint8};
  // At each size, every algorithm runs a few ops in turn per trial (so all see the same machine).
  // Several ops per sample smooth out the scheduler's hiccups when ranks share cores.
  static constexpr int kWarmup[kCalibrationPoints] = {3, 3, 3, 3, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1};
  static constexpr int kTrials[kCalibrationPoints] = {9, 9, 9, 9, 9, 9, 9, 9, 7, 7, 7, 5, 5, 5};
  // A sample must outlast the barrier's exit skew (small sizes loop 128 times at 2 ranks; with more
  // ranks each op is slower and fewer suffice), and from 64 KiB to 1 MiB it must reach the pipeline's
  // steady state rather than its start-up (8-32 ops).
  static constexpr int kOpsAt2Ranks[kCalibrationPoints] = {128, 128, 64, 48, 32, 24, 16, 32, 32, 32, 16, 8, 4, 2};
  static constexpr int kMinOps[kCalibrationPoints] = {16, 16, 16, 12, 8, 8, 8, 4, 4, 4, 4, 4, 4, 2};
  int opsPerSample[kCalibrationPoints];
  for (int k = 0; k < kCalibrationPoints; ++k) opsPerSample[k] = std::max(kMinOps[k], kOpsAt2Ranks[k] * 2 / n);
  constexpr int kMaxTrials = *std::max_element(std::begin(kTrials), std::end(kTrials));
  const size_t curves = algos.size();
  CostModel m;
  // Sizes of more than 256 chunks per rank would make the probe slow with small chunks: they are left
  // out and extrapolated.
  m.points = 0;
  while (m.points < kCalibrationPoints &&
         (m.points < 2 || kCalibrationBytes[m.points] <= 256 * hostChunkBytes_))
    ++m.points;
  m.allReduce.resize(curves);
  for (size_t i = 0; i < curves; ++i) m.allReduce[i].algo = std::string(algos[i]->name());
  // Every rank's seconds per op: rank r's [point][algorithm][trial] at sample(r, k, i, trial).
  const size_t perRank = static_cast<size_t>(kCalibrationPoints) * curves * kMaxTrials;
  std::vector<float> samples(perRank * static_cast<size_t>(n));
  auto sample = [&](int r, int k, size_t i, int trial) -> float& {
    return samples[static_cast<size_t>(r) * perRank + (static_cast<size_t>(k) * curves + i) * kMaxTrials +
                   static_cast<size_t>(trial)];
  };
  // Trials are the outer loop: trial t of every size runs before trial t+1 of any, so a burst of
  // load from elsewhere (this VM's neighbours stall it for milliseconds) lands in one trial of a few
  // sizes - which the median discards - rather than in every trial of one size.
  constexpr int kMaxWarmup = *std::max_element(std::begin(kWarmup), std::end(kWarmup));
  for (int trial = -kMaxWarmup; trial < kMaxTrials; ++trial) {
    for (int k = 0; k < m.points; ++k) {
      if (trial < -kWarmup[k] || trial >= kTrials[k]) continue;
      OpArgs op{Collective::AllReduce, buf, buf + kMaxFloats, kCalibrationBytes[k] / sizeof(float), DataType::Float32,
                RedOp::Sum};
      // One untimed op first: the previous size left other data in the caches, and the benchmark
      // (like a training loop) repeats one size with warm caches. All algorithms share the buffers.
      if (Status s = execute(op, *algos[static_cast<size_t>(trial + kMaxWarmup) % algos.size()]); !s) return s;
      // The order rotates with the trial, so no algorithm always comes first after the barrier.
      for (size_t j = 0; j < algos.size(); ++j) {
        const size_t i = (j + static_cast<size_t>(trial + kMaxWarmup)) % algos.size();
        // Start together, as the benchmark does: otherwise a sample includes waiting for peers
        // still finishing the previous algorithm's ops.
        if (Status s = execute(barrierOp, *barrier); !s) return s;
        const int64_t start = nowNs();
        for (int rep = 0; rep < opsPerSample[k]; ++rep)
          if (Status s = execute(op, *algos[i]); !s) return s;
        if (trial >= 0) sample(rank_, k, i, trial) = static_cast<float>(static_cast<double>(nowNs() - start) * 1e-9 / opsPerSample[k]);
      }
    }
  }
  // A sample is the mean over ranks (as zcoll-bench reports it: one rank alone may finish early, e.g.
  // the root of a broadcast phase); the figures come from the paired trials (pairedFigures). Every
  // rank gets every rank's samples and computes the same model.
  if (Status s = bootstrap_->allGather(samples.data(), perRank * sizeof(float)); !s) return s;
  std::vector<double> t(curves * kMaxTrials);
  std::vector<float> figures(curves);
  for (int k = 0; k < m.points; ++k) {
    for (size_t i = 0; i < curves; ++i)
      for (int tr = 0; tr < kTrials[k]; ++tr) {
        double sum = 0;
        for (int r = 0; r < n; ++r) sum += sample(r, k, i, tr);
        t[i * static_cast<size_t>(kTrials[k]) + static_cast<size_t>(tr)] = sum / n;
      }
    pairedFigures(t.data(), static_cast<int>(curves), kTrials[k], figures.data());
    for (size_t i = 0; i < curves; ++i) m.allReduce[i].seconds[static_cast<size_t>(k)] = figures[i];
  }
  if (rank_ == 0)
    for (const MeasuredCurve& c : m.allReduce) {
      std::string row;
      for (int k = 0; k < m.points; ++k) row += fmt::format(" {:.2f}", c.seconds[static_cast<size_t>(k)] * 1e6);
      ZCOLL_INFO(Init, rank_, "calibration: {} ranks, all-reduce by {:<6} (us at {} sizes from 8 B):{}", n,
                 c.algo, m.points, row);
    }
  // The analytic model of the other collectives, from the ring's figures.
  for (const MeasuredCurve& c : m.allReduce) {
    if (c.algo != "ring") continue;
    m.alpha = std::max(c.seconds[0] / (2.0 * (n - 1)), 1e-8);
    m.beta = std::max((c.seconds[m.points - 1] - c.seconds[0]) /
                          (2.0 * (n - 1) / n * static_cast<double>(kCalibrationBytes[m.points - 1])),
                      1e-12);
    m.message = 0.1 * m.alpha;
  }
  selector_.setModel(m);
  if (rank_ == 0) writeCache(path, key, m);
  return Status::ok();
}

}  // namespace zcoll
