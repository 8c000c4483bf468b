// rhd_allgather.cpp - all-gather by recursive doubling (power-of-two rank counts): log2 N steps;
// at distance d each rank swaps everything it holds (d blocks) with rank r ^ d.
#include "algorithms/algorithm.hpp"
#include "algorithms/patterns/rhd.hpp"
#include "algorithms/primitives.hpp"

namespace zcoll {
namespace {

class RhdAllGather final : public AlgorithmOf<Collective::AllGather> {
 public:
  using AlgorithmOf::AlgorithmOf;

  Status supports(int nranks) const override { return requirePowerOfTwo(nranks); }

  double cost(const OpArgs& op, int n, const CostModel& m) const override {
    const double s = opSize(op, n);
    return patterns::log2Floor(n) * m.alpha + static_cast<double>(n - 1) / n * s * m.beta;
  }

  Status run(const OpArgs& op, AlgoContext& ctx) const override {
    Primitives prims(op, ctx, name());
    const int n = ctx.nranks, r = ctx.rank;
    const auto [send, recv] = bytesOf(op);
    const size_t es = prims.elemSize(), chunk = prims.chunkElems(), block = op.count;
    prims.copy(recv + static_cast<size_t>(r) * block * es, send, block);
    for (int dist = 1; dist < n; dist *= 2) {
      const int partner = r ^ dist;
      // Blocks held: the aligned group of `dist` blocks containing r; the partner holds the other.
      const size_t mine = static_cast<size_t>(r & ~(dist - 1)) * block;
      const size_t theirs = static_cast<size_t>(partner & ~(dist - 1)) * block;
      const size_t len = static_cast<size_t>(dist) * block;
      Status st = exchangeChunks(
          len, len, chunk, prims.window(partner), [&](size_t o, size_t c) { return prims.send(partner, recv + (mine + o) * es, c); },
          [&](size_t o, size_t c) { return prims.recv(partner, recv + (theirs + o) * es, c); });
      if (!st) return st;
    }
    return Status::ok();
  }
};

}  // namespace

ZCOLL_ALGORITHM_FACTORY(rhdAllGather, RhdAllGather, "rhd")

}  // namespace zcoll
