// cost_model.hpp - the α-β model every algorithm prices itself with, and op sizes in the
// benchmark's convention.
//
//   time = steps x alpha + extra messages in a step x message + bytes through the busiest rank x beta
//
// alpha and beta are fitted to the ring's measured all-reduce times (Communicator::calibrate times
// every all-reduce algorithm at kCalibrationBytes on the real transport, so oversubscription and the
// memory system are in the figures); every rank computes the same model from every rank's samples, so
// all ranks choose the same algorithm. All-reduce itself is priced by those measured curves.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string_view>

#include "core/types.hpp"

namespace zcoll {

// Sizes at which each all-reduce algorithm is timed by the calibration: a factor of 2 apart from 2 KiB
// to 2 MiB, where the curves bend and cross (a coarser grid misplaces the crossovers between the
// latency and the bandwidth algorithms). The smallest is pure latency (most ranks get no element); 512 B
// gives every rank at least one element up to 128 ranks; the largest is out of any cache here, so
// the slope beyond it is the memory system's, not the cache's.
inline constexpr size_t kCalibrationBytes[] = {8,          512,        2 * 1024,   4 * 1024,        8 * 1024,
                                               16 * 1024,  32 * 1024,  64 * 1024,  128 * 1024,      256 * 1024,
                                               512 * 1024, 1024 * 1024, 2 * 1024 * 1024, 8 * 1024 * 1024};
inline constexpr int kCalibrationPoints = 14;

// One algorithm's measured all-reduce times at kCalibrationBytes.
struct MeasuredCurve {
  char algo[16] = {};
  float seconds[kCalibrationPoints] = {};
};

// Trivially copyable: rank 0's copy is cached in a file and, when read from it, sent to every rank.
struct CostModel {
  double alpha = 2e-6;          // seconds per dependent step (one hop)
  double beta = 1.0 / 4e9;      // seconds per byte through one rank in a step
  double message = 0.25e-6;     // seconds per extra message issued in the same step (fan-out)
  int curves = 0;               // measured all-reduce algorithms (the main job is priced by measurement)
  int points = 0;               // calibration sizes measured (the first `points` of kCalibrationBytes)
  MeasuredCurve allReduce[8];

  static double log2Ceil(int n) { return n <= 1 ? 0.0 : std::ceil(std::log2(static_cast<double>(n))); }

  // Measured seconds of an all-reduce by `algo` on `bytes` (piecewise linear in log-log between the
  // measured sizes, which follows both the latency- and bandwidth-bound ends; linear in the bytes
  // beyond them; the first figure below them), or -1 if that algorithm was not measured.
  double measured(std::string_view algo, size_t bytes) const {
    const int n = std::clamp(points, 0, kCalibrationPoints);
    for (int i = 0; i < curves && n > 0; ++i) {
      const MeasuredCurve& c = allReduce[i];
      if (algo != c.algo) continue;
      const double x = static_cast<double>(bytes);
      if (x <= kCalibrationBytes[0] || n == 1) return c.seconds[0];
      const double last = static_cast<double>(kCalibrationBytes[n - 1]);
      if (x > last) {  // bandwidth-bound: time grows linearly with the bytes
        const double prev = static_cast<double>(kCalibrationBytes[n - 2]);
        const double slope = std::max(0.0, static_cast<double>(c.seconds[n - 1] - c.seconds[n - 2]) / (last - prev));
        return c.seconds[n - 1] + slope * (x - last);
      }
      int k = 1;
      while (k < n - 1 && x > static_cast<double>(kCalibrationBytes[k])) ++k;
      const double x0 = std::log(static_cast<double>(kCalibrationBytes[k - 1]));
      const double x1 = std::log(static_cast<double>(kCalibrationBytes[k]));
      const double y0 = std::log(std::max(1e-9f, c.seconds[k - 1])), y1 = std::log(std::max(1e-9f, c.seconds[k]));
      return std::exp(y0 + (y1 - y0) * (std::log(x) - x0) / (x1 - x0));
    }
    return -1.0;
  }
};

// The op's size as zcoll-bench and nccl-tests print it: the per-rank buffer for all-reduce,
// broadcast and reduce; the whole (nranks blocks) for the others. ZCOLL_ALGO's ranges use it too.
inline size_t opBytes(Collective coll, size_t count, DataType dtype, int nranks) {
  size_t bytes = count * dataTypeSize(dtype);
  switch (coll) {
    case Collective::AllGather: case Collective::ReduceScatter: case Collective::Gather:
    case Collective::Scatter: case Collective::AllToAll:
      return bytes * static_cast<size_t>(nranks);
    default:
      return bytes;
  }
}

// The figures of one calibration size from paired trials: t[i * trials + tr] is algorithm i's time
// in trial tr (mean over ranks). Within a trial the algorithms ran back to back under the same
// machine conditions; between trials this VM's speed can change severalfold. So each algorithm is
// judged by the median over trials of its time relative to the trial's fastest, and its figure is
// that ratio times the median of the fastest times. out[i] for each of `algos` algorithms.
inline void pairedFigures(const double* t, int algos, int trials, float* out) {
  constexpr int kMax = 16;
  if (algos <= 0 || trials <= 0 || trials > kMax) return;
  double best[kMax], sorted[kMax];
  for (int tr = 0; tr < trials; ++tr) {
    best[tr] = t[tr];
    for (int i = 1; i < algos; ++i) best[tr] = std::min(best[tr], t[i * trials + tr]);
    sorted[tr] = best[tr];
  }
  std::sort(sorted, sorted + trials);
  const double scale = sorted[trials / 2];
  for (int i = 0; i < algos; ++i) {
    double ratio[kMax];
    for (int tr = 0; tr < trials; ++tr) ratio[tr] = best[tr] > 0 ? t[i * trials + tr] / best[tr] : 1.0;
    std::sort(ratio, ratio + trials);
    out[i] = static_cast<float>(ratio[trials / 2] * scale);
  }
}

}  // namespace zcoll
