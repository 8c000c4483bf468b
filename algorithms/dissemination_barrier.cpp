// dissemination_barrier.cpp - barrier by dissemination: in round k each rank signals rank r + 2^k and
// waits for rank r - 2^k; after ceil(log2 N) rounds every rank has heard, directly or not, from all.
#include "algorithms/algorithm.hpp"
#include "algorithms/patterns/ring.hpp"
#include "algorithms/primitives.hpp"

namespace zcoll {
namespace {

class DisseminationBarrier final : public AlgorithmOf<Collective::Barrier> {
 public:
  using AlgorithmOf::AlgorithmOf;

  Status run(const OpArgs& op, AlgoContext& ctx) const override {
    Primitives prims(op, ctx, name());  // op.dtype is uint8: one-byte tokens
    const int n = ctx.nranks, r = ctx.rank;
    static const char kToken = 1;
    char sink = 0;
    for (int dist = 1; dist < n; dist *= 2) {
      if (Status s = prims.send(patterns::mod(r + dist, n), &kToken, 1); !s) return s;
      if (Status s = prims.recv(patterns::mod(r - dist, n), &sink, 1); !s) return s;
    }
    return Status::ok();
  }
};

}  // namespace

ZCOLL_ALGORITHM_FACTORY(disseminationBarrier, DisseminationBarrier, "dissemination")

}  // namespace zcoll
