// ring_allgather.cpp - ring all-gather: N-1 steps per chunk round, each rank sends (N-1)/N of the
// output. Step 0 sends the own block (and copies it into place when out-of-place), steps 1..N-2
// receive and forward, step N-1 only receives.
#include "algorithms/algorithm.hpp"
#include "algorithms/patterns/ring.hpp"
#include "algorithms/primitives.hpp"

namespace zcoll {
namespace {

class RingAllGather final : public AlgorithmOf<Collective::AllGather> {
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
    const size_t block = op.count;
    const int next = patterns::ringNext(r, n), prev = patterns::ringPrev(r, n);
    const size_t chunk = prims.chunkElems();
    const size_t rounds = patterns::chunkRounds(block, chunk);
    for (size_t round = 0; round < rounds; ++round) {
      const patterns::ChunkSpan c = patterns::chunkOf(block, chunk, round);
      auto out = [&](int b) { return recv + (static_cast<size_t>(b) * block + c.begin) * es; };
      // Own chunk out first (from sendbuff), then its local copy: the peer copies it meanwhile.
      if (n > 1)
        if (Status s = prims.send(next, send + c.begin * es, c.n); !s) return s;
      prims.copy(out(r), send + c.begin * es, c.n);
      if (n == 1) continue;
      for (int step = 1; step < n - 1; ++step)
        if (Status s = prims.recvCopySend(prev, next, out(patterns::allGatherBlock(r, step, n)), c.n); !s) return s;
      if (Status s = prims.recv(prev, out(patterns::allGatherBlock(r, n - 1, n)), c.n); !s) return s;
    }
    return Status::ok();
  }
};

}  // namespace

ZCOLL_ALGORITHM_FACTORY(ringAllGather, RingAllGather, "ring")

}  // namespace zcoll
