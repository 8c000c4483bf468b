// cost_model.hpp - the α-β model every algorithm prices itself with, and op sizes in the
// benchmark's convention.
//
//   time = steps x alpha + extra messages in a step x message + bytes through the busiest rank x beta
//
// alpha and beta are measured when a communicator starts (Communicator::calibrate runs the ring
// all-reduce at two sizes on the real transport, so oversubscription and the memory system are in the
// figures) and rank 0's values are used by every rank, so all ranks choose the same algorithm.
#pragma once

#include <cmath>
#include <cstddef>

#include "comm/types.hpp"

namespace zcoll {

struct CostModel {
  double alpha = 2e-6;          // seconds per dependent step (one hop)
  double beta = 1.0 / 4e9;      // seconds per byte through one rank in a step
  double message = 0.25e-6;     // seconds per extra message issued in the same step (fan-out)

  static double log2Ceil(int n) { return n <= 1 ? 0.0 : std::ceil(std::log2(static_cast<double>(n))); }
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

}  // namespace zcoll
