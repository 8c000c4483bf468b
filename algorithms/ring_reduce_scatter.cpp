// ring_reduce_scatter.cpp - ring reduce-scatter leaving block r on rank r; N-1 steps per chunk
// round, each rank sends (N-1)/N of the input.
//   step 0        send           block r-1
//   steps 1..N-2  recvReduceSend block r-1-s
//   step N-1      recvReduce     block r  -> recvbuf (finalized)
#include "algorithms/algorithm.hpp"
#include "algorithms/patterns/ring.hpp"
#include "algorithms/primitives.hpp"

namespace zcoll {
namespace {

class RingReduceScatter final : public AlgorithmOf<Collective::ReduceScatter> {
 public:
  using AlgorithmOf::AlgorithmOf;

  double cost(const OpArgs& op, int n, const CostModel& m) const override {
    const double s = opSize(op, n);
    return (n - 1) * m.alpha + static_cast<double>(n - 1) / n * s * m.beta;
  }

  Status run(const OpArgs& op, AlgoContext& ctx) const override {
    Primitives prims(op, ctx, name());
    const int n = ctx.nranks, r = ctx.rank;
    const auto [send, recv] = bytesOf(op);
    const size_t es = prims.elemSize();
    const size_t block = op.count;  // elements per rank
    if (n == 1) {
      prims.reduceAlone(recv, send, block);
      return Status::ok();
    }
    const int next = patterns::ringNext(r, n), prev = patterns::ringPrev(r, n);
    const size_t chunk = prims.chunkElems();
    const size_t rounds = patterns::chunkRounds(block, chunk);
    for (size_t round = 0; round < rounds; ++round) {
      const patterns::ChunkSpan c = patterns::chunkOf(block, chunk, round);
      auto in = [&](int b) { return send + (static_cast<size_t>(b) * block + c.begin) * es; };
      if (Status s = prims.send(next, in(patterns::reduceScatterBlock(r, 0, n)), c.n); !s) return s;
      for (int step = 1; step < n - 1; ++step)
        if (Status s = prims.recvReduceSend(prev, next, in(patterns::reduceScatterBlock(r, step, n)), c.n); !s)
          return s;
      if (Status s = prims.recvReduceOut(prev, in(r), recv + c.begin * es, c.n); !s) return s;
    }
    return Status::ok();
  }
};

}  // namespace

ZCOLL_ALGORITHM_FACTORY(ringReduceScatter, RingReduceScatter, "ring")

}  // namespace zcoll
