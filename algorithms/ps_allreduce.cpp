// ps_allreduce.cpp - the parameter-server (sequential) all-reduce, kept as a baseline: every rank
// sends its buffer to rank 0, which reduces the contributions one after another and sends the result
// back to everyone. Rank 0 moves 2(N-1) buffers; the others one each way. Selected only when the
// cost model says it is fastest.
#include "algorithms/algorithm.hpp"
#include "algorithms/primitives.hpp"

namespace zcoll {
namespace {

class PsAllReduce final : public AlgorithmOf<Collective::AllReduce> {
 public:
  using AlgorithmOf::AlgorithmOf;

  double cost(const OpArgs& op, int n, const CostModel& m) const override {
    const double s = opSize(op, n);
    return 2.0 * m.alpha + 2.0 * (n - 2) * m.message + 2.0 * (n - 1) * s * m.beta;
  }

  Status run(const OpArgs& op, AlgoContext& ctx) const override {
    Primitives prims(op, ctx, name());
    const int n = ctx.nranks, r = ctx.rank;
    const auto [send, recv] = bytesOf(op);
    const size_t es = prims.elemSize();
    if (n == 1) {
      prims.reduceAlone(recv, send, op.count);
      return Status::ok();
    }
    return forChunks(0, op.count, prims.chunkElems(), [&](size_t o, size_t c) -> Status {
      const size_t at = o * es;
      if (r != 0) {
        if (Status s = prims.send(0, send + at, c); !s) return s;
        return prims.recv(0, recv + at, c);
      }
      for (int q = 1; q < n; ++q)
        if (Status s = prims.recvReduce(q, (q == 1 ? send : recv) + at, recv + at, c, q == n - 1); !s) return s;
      for (int q = 1; q < n; ++q)
        if (Status s = prims.send(q, recv + at, c); !s) return s;
      return Status::ok();
    });
  }
};

}  // namespace

ZCOLL_ALGORITHM_FACTORY(psAllReduce, PsAllReduce, "ps")

}  // namespace zcoll
