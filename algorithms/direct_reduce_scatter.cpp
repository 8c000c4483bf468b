// direct_reduce_scatter.cpp - parallel reduce-scatter: each rank sends every peer that peer's block
// and reduces its own block from all peers' copies. One step per chunk round, (N-1)/N of the input
// sent per rank, N-1 messages in flight.
#include "algorithms/algorithm.hpp"
#include "algorithms/patterns/ring.hpp"
#include "algorithms/primitives.hpp"

namespace zcoll {
namespace {

class DirectReduceScatter final : public AlgorithmOf<Collective::ReduceScatter> {
 public:
  using AlgorithmOf::AlgorithmOf;

  double cost(const OpArgs& op, int n, const CostModel& m) const override {
    const double s = opSize(op, n);
    return m.alpha + (n - 2) * m.message + static_cast<double>(n - 1) / n * s * m.beta;
  }

  Status run(const OpArgs& op, AlgoContext& ctx) const override {
    Primitives prims(op, ctx, name());
    const int n = ctx.nranks, r = ctx.rank;
    const auto [send, recv] = bytesOf(op);
    const size_t es = prims.elemSize(), block = op.count;
    const char* own = send + static_cast<size_t>(r) * block * es;
    if (n == 1) {
      prims.reduceAlone(recv, own, block);
      return Status::ok();
    }
    return forChunks(0, block, prims.chunkElems(), [&](size_t o, size_t c) -> Status {
      for (int k = 1; k < n; ++k) {
        const int peer = patterns::mod(r + k, n);
        if (Status s = prims.send(peer, send + (static_cast<size_t>(peer) * block + o) * es, c); !s) return s;
      }
      for (int k = 1; k < n; ++k) {
        const int peer = patterns::mod(r - k, n);
        const char* local = (k == 1 ? own : recv) + o * es;
        if (Status s = k == n - 1 ? prims.recvReduceOut(peer, local, recv + o * es, c)
                                  : prims.recvReduce(peer, local, recv + o * es, c, false);
            !s)
          return s;
      }
      return Status::ok();
    });
  }
};

}  // namespace

ZCOLL_ALGORITHM_FACTORY(directReduceScatter, DirectReduceScatter, "direct")

}  // namespace zcoll
