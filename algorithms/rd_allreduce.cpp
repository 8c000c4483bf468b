// rd_allreduce.cpp - recursive-doubling all-reduce (MPICH's and Open MPI's choice for short
// vectors): over the p = 2^floor(log2 N) ranks left after folding (patterns/rhd.hpp), log2 p steps;
// at the step of distance d a rank exchanges its whole partial vector with rank v ^ d and reduces
// the two. Every rank holds the full result after the last step: log2 p dependent messages where
// every other algorithm needs at least two per pair (a reduction, then a distribution) - the latency
// optimum - at the price of log2 p full vectors sent, so it wins only for short vectors. A folded
// pair adds one full send before and one after. Both partners of a step reduce the same two partial
// vectors (each op is commutative), so all ranks end with bitwise the same result.
// recvbuf is the workspace: no scratch.
#include "algorithms/algorithm.hpp"
#include "algorithms/fold_steps.hpp"

namespace zcoll {
namespace {

class RdAllReduce final : public AlgorithmOf<Collective::AllReduce> {
 public:
  using AlgorithmOf::AlgorithmOf;

  double cost(const OpArgs& op, int n, const CostModel& m) const override {
    const double s = opSize(op, n);
    const patterns::Fold f = patterns::Fold::of(n);
    const double steps = patterns::log2Floor(f.p) + (f.rem > 0 ? 2.0 : 0.0);
    // Each step also reduces the whole vector (the others spread that work over the ranks): a
    // second pass of S per step, so the latency win holds only below about alpha/beta bytes.
    return steps * m.alpha + 2.0 * steps * s * m.beta;
  }

  // Hosts of L consecutive ranks: the first log2 L exchanges stay on a host.
  double costOn(const OpArgs& op, const patterns::HostLayout& hosts, const CostModel& m) const override {
    const int n = static_cast<int>(hosts.hostOf.size());
    const patterns::Fold f = patterns::Fold::of(n);
    if (!patterns::blockHosts(hosts) || f.rem > 0 || hosts.perHost > f.p) return cost(op, n, m);
    const double s = opSize(op, n);
    const double local = patterns::log2Floor(hosts.perHost), remote = patterns::log2Floor(f.p) - local;
    return local * (m.localAlpha() + 2.0 * s * m.localBeta()) + remote * (m.alpha + 2.0 * s * m.beta);
  }

  Status run(const OpArgs& op, AlgoContext& ctx) const override {
    Primitives prims(op, ctx, name());
    const int n = ctx.nranks, r = ctx.rank;
    const auto [send, recv] = bytesOf(op);
    const size_t es = prims.elemSize(), chunk = prims.chunkElems(), count = op.count;
    if (n == 1) {
      prims.reduceAlone(recv, send, count);
      return Status::ok();
    }
    const patterns::Fold fold = patterns::Fold::of(n);
    bool done = false;
    const char* cur = send;  // this rank's partial result
    if (Status s = foldIn(prims, fold, r, send, recv, count, &done, &cur); !s || done) return s;
    const int v = fold.virtualRank(r);
    for (int dist = 1; dist < fold.p; dist *= 2) {
      const int partner = fold.realRank(v ^ dist);
      const bool last = dist * 2 >= fold.p;
      const bool out = last && !fold.absorbs(r);  // nothing reads the result again
      const char* from = cur;
      // Chunk by chunk: ours out, theirs in and reduced with ours into recv (a chunk of ours has
      // left before recv's copy of it is overwritten: in place and after the first step).
      Status st = exchangeChunks(
          count, count, chunk, prims.window(partner), [&](size_t o, size_t c) { return prims.send(partner, from + o * es, c); },
          [&](size_t o, size_t c) {
            return out ? prims.recvReduceOut(partner, from + o * es, recv + o * es, c)
                       : prims.recvReduce(partner, from + o * es, recv + o * es, c, last);
          });
      if (!st) return st;
      cur = recv;
    }
    return foldOut(prims, fold, r, recv, count);
  }
};

}  // namespace

ZCOLL_ALGORITHM_FACTORY(rdAllReduce, RdAllReduce, "rd")

}  // namespace zcoll
