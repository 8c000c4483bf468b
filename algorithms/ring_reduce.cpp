// ring_reduce.cpp - pipelined chain reduce towards the root, the mirror of ring_broadcast: the rank
// furthest from the root sends, each rank on the way reduces its own data into the chunk and
// forwards it, the root reduces the last contribution into recvbuf (and finalizes Avg).
#include "algorithms/algorithm.hpp"
#include "algorithms/patterns/ring.hpp"
#include "algorithms/primitives.hpp"

namespace zcoll {
namespace {

class RingReduce final : public AlgorithmOf<Collective::Reduce> {
 public:
  using AlgorithmOf::AlgorithmOf;

  double cost(const OpArgs& op, int n, const CostModel& m) const override {
    const double s = opSize(op, n);
    return (n - 1) * m.alpha + s * m.beta;
  }

  Status run(const OpArgs& op, AlgoContext& ctx) const override {
    Primitives prims(op, ctx, name());
    const int n = ctx.nranks, r = ctx.rank;
    const auto [send, recv] = bytesOf(op);
    const size_t es = prims.elemSize();
    const int pos = patterns::chainPosition(r, op.root, n);
    // Data flows from position n-1 down to position 0 (the root): receive from the ring's next rank.
    const int from = patterns::ringNext(r, n), to = patterns::ringPrev(r, n);
    const size_t chunk = prims.chunkElems();
    const size_t rounds = patterns::chunkRounds(op.count, chunk);
    for (size_t round = 0; round < rounds; ++round) {
      const patterns::ChunkSpan c = patterns::chunkOf(op.count, chunk, round);
      const size_t off = c.begin * es;
      Status s;
      if (n == 1) {
        prims.copy(recv + off, send + off, c.n);
        prims.finalize(recv + off, c.n);
      } else if (pos == n - 1) {
        s = prims.send(to, send + off, c.n);
      } else if (pos > 0) {
        s = prims.recvReduceSend(from, to, send + off, c.n);
      } else {
        s = prims.recvReduceOut(from, send + off, recv + off, c.n);
      }
      if (!s) return s;
    }
    return Status::ok();
  }
};

}  // namespace

ZCOLL_ALGORITHM_FACTORY(ringReduce, RingReduce, "ring")

}  // namespace zcoll
