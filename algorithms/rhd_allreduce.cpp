// rhd_allreduce.cpp - Rabenseifner all-reduce: reduce-scatter by recursive halving, all-gather by
// recursive doubling, over the p = 2^floor(log2 N) ranks left after folding (patterns/rhd.hpp).
// Each participant sends 2(p-1)/p of the buffer in 2 log2 p steps; a folded pair adds one full send
// before and one after. recvbuf is the workspace: no scratch.
#include "algorithms/algorithm.hpp"
#include "algorithms/fold_steps.hpp"

namespace zcoll {
namespace {

using patterns::Range;

class RhdAllReduce final : public AlgorithmOf<Collective::AllReduce> {
 public:
  using AlgorithmOf::AlgorithmOf;

  double cost(const OpArgs& op, int n, const CostModel& m) const override {
    const double s = opSize(op, n);
    const patterns::Fold f = patterns::Fold::of(n);
    const double folded = f.rem > 0 ? 1.0 : 0.0;
    return (2.0 * patterns::log2Floor(f.p) + 2.0 * folded) * m.alpha +
           (2.0 * (f.p - 1) / f.p * s + 2.0 * folded * s) * m.beta;
  }

  // Hosts of L consecutive ranks: the first log2 L halving steps (and the last doubling ones) stay on
  // a host and carry S (1 - 1/L) of the bytes each way; the others cross with S (1/L - 1/p).
  double costOn(const OpArgs& op, const patterns::HostLayout& hosts, const CostModel& m) const override {
    const int n = static_cast<int>(hosts.hostOf.size());
    const patterns::Fold f = patterns::Fold::of(n);
    if (!patterns::blockHosts(hosts) || f.rem > 0 || hosts.perHost > f.p) return cost(op, n, m);
    const double s = opSize(op, n), l = hosts.perHost, p = f.p;
    const double localSteps = patterns::log2Floor(hosts.perHost), remoteSteps = patterns::log2Floor(f.p) - localSteps;
    return 2.0 * (localSteps * m.localAlpha() + remoteSteps * m.alpha) +
           2.0 * (s * (1 - 1 / l) * m.localBeta() + s * (1 / l - 1 / p) * m.beta);
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
    const char* cur = send;  // where this rank's partial sums live
    if (Status s = foldIn(prims, fold, r, send, recv, count, &done, &cur); !s || done) return s;
    const int v = fold.virtualRank(r);
    struct Taken {
      Range whole;  // the range before the halving step
      Range given;  // the half sent away (the partner's half when doubling back)
      int dist;
    } taken[32];
    int steps = 0;
    Range mine{0, count};
    // Nearest partner first: the largest halves go between neighbouring ranks (a host's, when ranks
    // are numbered host by host) and only the smallest cross to the far ones.
    for (int dist = 1; dist < fold.p; dist *= 2) {
      const patterns::HalvingStep h = patterns::halve(mine, v, dist, 1);
      const int partner = fold.realRank(v ^ dist);
      // Send the half we give away; reduce the partner's copy of the half we keep.
      const char* from = cur;
      Status st = exchangeChunks(
          h.give.size(), h.keep.size(), chunk, prims.window(partner),
          [&](size_t o, size_t c) { return prims.send(partner, from + (h.give.lo + o) * es, c); },
          [&](size_t o, size_t c) {
            const size_t at = (h.keep.lo + o) * es;
            return prims.recvReduce(partner, from + at, recv + at, c, false);
          });
      if (!st) return st;
      taken[steps++] = {mine, h.give, dist};
      mine = h.keep;
      cur = recv;
    }
    prims.finalize(recv + mine.lo * es, mine.size());
    // Recursive doubling: undo the halving steps in reverse, exchanging whole owned ranges.
    for (int i = steps - 1; i >= 0; --i) {
      const int dist = taken[i].dist;
      const int partner = fold.realRank(v ^ dist);
      const Range theirs = taken[i].given;
      Status st = exchangeChunks(
          mine.size(), theirs.size(), chunk, prims.window(partner),
          [&](size_t o, size_t c) { return prims.send(partner, recv + (mine.lo + o) * es, c); },
          [&](size_t o, size_t c) { return prims.recv(partner, recv + (theirs.lo + o) * es, c); });
      if (!st) return st;
      mine = taken[i].whole;
    }
    return foldOut(prims, fold, r, recv, count);
  }
};

}  // namespace

ZCOLL_ALGORITHM_FACTORY(rhdAllReduce, RhdAllReduce, "rhd")

}  // namespace zcoll
