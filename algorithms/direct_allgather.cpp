// direct_allgather.cpp - parallel all-gather: each rank sends its block to every peer and receives
// every peer's block. One step per chunk round, N-1 messages in flight.
#include "algorithms/algorithm.hpp"
#include "algorithms/patterns/ring.hpp"
#include "algorithms/primitives.hpp"

namespace zcoll {
namespace {

class DirectAllGather final : public AlgorithmOf<Collective::AllGather> {
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
    return forChunks(0, block, prims.chunkElems(), [&](size_t o, size_t c) -> Status {
      for (int k = 1; k < n; ++k)
        if (Status s = prims.send(patterns::mod(r + k, n), send + o * es, c); !s) return s;
      // The local copy while the peers take the chunk (it is in cache from the sends).
      prims.copy(recv + (static_cast<size_t>(r) * block + o) * es, send + o * es, c);
      for (int k = 1; k < n; ++k) {
        const int peer = patterns::mod(r - k, n);
        if (Status s = prims.recv(peer, recv + (static_cast<size_t>(peer) * block + o) * es, c); !s) return s;
      }
      return Status::ok();
    });
  }
};

}  // namespace

ZCOLL_ALGORITHM_FACTORY(directAllGather, DirectAllGather, "direct")

}  // namespace zcoll
