// cost_model.hpp - the α-β model every algorithm prices itself with, and op sizes in the
// benchmark's convention.
//
//   time = steps x alpha + extra messages in a step x message + bytes through the busiest rank x beta
//
// alpha and beta are fitted to the ring's measured all-reduce times (Communicator::calibrate times
// every all-reduce algorithm - any number of them - at kCalibrationBytes on the real transport, so
// oversubscription and the memory system are in the figures); every rank computes the same model from
// every rank's samples, so all ranks choose the same algorithm. All-reduce itself is priced by those
// measured curves.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

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
  std::string algo;  // the algorithm's full name
  std::array<float, kCalibrationPoints> seconds{};
};

struct CostModel {
  double alpha = 2e-6;          // seconds per dependent step (one hop)
  double beta = 1.0 / 4e9;      // seconds per byte through one rank in a step
  double message = 0.25e-6;     // seconds per extra message issued in the same step (fan-out)
  // The same between two ranks of one host, where that hop is faster than the network's (alpha and
  // beta then price the hops between hosts); 0: as alpha, beta. Not measured (calibration times the
  // whole): set for a known machine (zcoll-sim), not serialized.
  double alphaLocal = 0, betaLocal = 0;
  double localAlpha() const { return alphaLocal > 0 ? alphaLocal : alpha; }
  // The transport's slot size: algorithms that take a chunk through all their steps before the next
  // (ring all-reduce, tree all-reduce) pay their latency once per chunk round. 0: one round. Set
  // by the communicator and zcoll-sim, not serialized.
  double chunkBytes = 0;
  double rounds(double bytes) const { return chunkBytes > 0 ? std::max(1.0, std::ceil(bytes / chunkBytes)) : 1.0; }
  double localBeta() const { return betaLocal > 0 ? betaLocal : beta; }
  int points = 0;               // calibration sizes measured (the first `points` of kCalibrationBytes)
  std::vector<MeasuredCurve> allReduce;  // every measured all-reduce algorithm (the main job is priced by measurement)

  static double log2Ceil(int n) { return n <= 1 ? 0.0 : std::ceil(std::log2(static_cast<double>(n))); }

  // Measured seconds of an all-reduce by `algo` on `bytes` (piecewise linear in log-log between the
  // measured sizes, which follows both the latency- and bandwidth-bound ends; linear in the bytes
  // beyond them; the first figure below them), or -1 if that algorithm was not measured.
  double measured(std::string_view algo, size_t bytes) const;

  // The model as bytes, for the calibration cache and for rank 0's copy that every rank adopts;
  // parse() refuses anything that serialize() did not write (false, *out untouched).
  std::string serialize() const;
  static bool parse(std::string_view bytes, CostModel* out);
};

// The op's size as zcoll-bench and nccl-tests print it: the per-rank buffer for all-reduce,
// broadcast and reduce; the whole (nranks blocks) for the others. ZCOLL_ALGO's ranges use it too.
inline size_t opBytes(Collective coll, size_t count, DataType dtype, int nranks) {
  const size_t bytes = count * dataTypeSize(dtype);
  return traits(coll).perRankBlocks ? bytes * static_cast<size_t>(nranks) : bytes;
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
