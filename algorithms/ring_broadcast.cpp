// ring_broadcast.cpp - pipelined chain broadcast along the ring from the root: every rank but the
// last receives each chunk and forwards it at once, so the time is ~ (size + (N-2) chunks) / bw.
#include "algorithms/algorithm.hpp"
#include "algorithms/patterns/ring.hpp"
#include "algorithms/primitives.hpp"

namespace zcoll {
namespace {

class RingBroadcast final : public AlgorithmOf<Collective::Broadcast> {
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
    const int next = patterns::ringNext(r, n), prev = patterns::ringPrev(r, n);
    const size_t chunk = prims.chunkElems();
    const size_t rounds = patterns::chunkRounds(op.count, chunk);
    for (size_t round = 0; round < rounds; ++round) {
      const patterns::ChunkSpan c = patterns::chunkOf(op.count, chunk, round);
      const size_t off = c.begin * es;
      Status s;
      if (pos == 0) {
        if (n > 1) s = prims.send(next, send + off, c.n);
        prims.copy(recv + off, send + off, c.n);  // while the next rank takes the chunk
      } else if (pos < n - 1) {
        s = prims.recvCopySend(prev, next, recv + off, c.n);
      } else {
        s = prims.recv(prev, recv + off, c.n);
      }
      if (!s) return s;
    }
    return Status::ok();
  }
};

}  // namespace

ZCOLL_ALGORITHM_FACTORY(ringBroadcast, RingBroadcast, "ring")

}  // namespace zcoll
