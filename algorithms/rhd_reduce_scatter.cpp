// rhd_reduce_scatter.cpp - reduce-scatter by recursive halving (power-of-two rank counts): log2 N
// steps, (N-1)/N of the input sent per rank. Whole blocks stay together, so each rank ends with
// its own block. The kept half needs a workspace of N/2 blocks: the communicator's scratch.
#include <cerrno>

#include "algorithms/algorithm.hpp"
#include "algorithms/patterns/rhd.hpp"
#include "algorithms/primitives.hpp"

namespace zcoll {
namespace {

using patterns::Range;

class RhdReduceScatter final : public AlgorithmOf<Collective::ReduceScatter> {
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
    if (n == 1) {
      prims.reduceAlone(recv, send, block);
      return Status::ok();
    }
    if (block == 0) return Status::ok();
    // Workspace for the kept half after the first step, indexed from that half's start.
    char* work = nullptr;
    size_t workBase = 0;
    if (n > 2) {
      work = static_cast<char*>(ctx.scratch->get(block * static_cast<size_t>(n / 2) * es));
      if (!work) return systemError("reduce-scatter (rhd): mapping its scratch", ENOMEM);
    }
    Range mine{0, block * static_cast<size_t>(n)};
    const char* cur = send;  // base of this rank's partial sums, indexed by global element
    size_t curBase = 0;
    for (int dist = n / 2; dist >= 1; dist /= 2) {
      const patterns::HalvingStep h = patterns::halve(mine, r, dist, block);
      const int partner = r ^ dist;
      const bool last = dist == 1;
      char* out = last ? recv : work;
      const size_t outBase = last ? h.keep.lo : (cur == send ? h.keep.lo : workBase);
      Status st = exchangeChunks(
          h.give.size(), h.keep.size(), chunk, prims.window(partner),
          [&](size_t o, size_t c) { return prims.send(partner, cur + (h.give.lo + o - curBase) * es, c); },
          [&](size_t o, size_t c) {
            const size_t x = h.keep.lo + o;
            const char* local = cur + (x - curBase) * es;
            return last ? prims.recvReduceOut(partner, local, out + (x - outBase) * es, c)
                        : prims.recvReduce(partner, local, out + (x - outBase) * es, c, false);
          });
      if (!st) return st;
      if (cur == send) workBase = h.keep.lo;
      cur = out;
      curBase = outBase;
      mine = h.keep;
    }
    return Status::ok();
  }
};

}  // namespace

ZCOLL_ALGORITHM_FACTORY(rhdReduceScatter, RhdReduceScatter, "rhd")

}  // namespace zcoll
