// direct_allreduce.cpp - the parallel ("direct") all-reduce: every rank owns one slice; in phase 1
// each rank sends every peer that peer's slice and reduces its own slice from all peers' copies; in
// phase 2 it sends its reduced slice to every peer and receives theirs. Two steps per chunk round
// whatever N is (latency-bound sizes), N-1 messages in flight per phase, 2(N-1)/N of the buffer
// sent per rank. Each element is reduced by exactly one rank, so every rank gets identical values.
// Deadlock-free with >= 2 slots: a rank cannot run more than one round ahead of any peer.
#include "algorithms/algorithm.hpp"
#include "algorithms/patterns/ring.hpp"
#include "algorithms/primitives.hpp"

namespace zcoll {
namespace {

class DirectAllReduce final : public AlgorithmOf<Collective::AllReduce> {
 public:
  using AlgorithmOf::AlgorithmOf;

  double cost(const OpArgs& op, int n, const CostModel& m) const override {
    const double s = opSize(op, n);
    return 2.0 * m.alpha + 2.0 * (n - 2) * m.message + 2.0 * (n - 1) / n * s * m.beta;
  }

  // Over hosts of L: (N - L)/N of each phase's bytes leave the host (through its network link, one
  // after another), the rest stays.
  double costOn(const OpArgs& op, const patterns::HostLayout& hosts, const CostModel& m) const override {
    const int n = static_cast<int>(hosts.hostOf.size());
    if (hosts.hosts < 2 || hosts.perHost < 1) return cost(op, n, m);
    const double s = opSize(op, n), l = hosts.perHost;
    return 2.0 * m.alpha + 2.0 * (n - 2) * m.message + 2.0 * (n - l) / n * s * m.beta +
           2.0 * (l - 1) / n * s * m.localBeta();
  }

  Status run(const OpArgs& op, AlgoContext& ctx) const override {
    Primitives prims(op, ctx, name());
    const int n = ctx.nranks, r = ctx.rank;
    const auto [send, recv] = bytesOf(op);
    const size_t es = prims.elemSize(), chunk = prims.chunkElems();
    if (n == 1) {
      prims.reduceAlone(recv, send, op.count);
      return Status::ok();
    }
    const patterns::BlockPartition slices{op.count, n};
    const size_t rounds = patterns::chunkRounds(slices.maxSize(), chunk);
    for (size_t round = 0; round < rounds; ++round) {
      auto at = [&](int slice, size_t* len) {
        patterns::ChunkSpan c = patterns::chunkOf(slices.size(slice), chunk, round);
        *len = c.n;
        return (slices.offset(slice) + c.begin) * es;
      };
      size_t len = 0;
      for (int k = 1; k < n; ++k) {
        const int peer = patterns::mod(r + k, n);
        const size_t off = at(peer, &len);
        if (Status s = prims.send(peer, send + off, len); !s) return s;
      }
      const size_t own = at(r, &len);
      if (n == 2) {  // one peer: the reduction goes into its slot and dst at once
        if (Status s = prims.recvReduceCopySend(1 - r, 1 - r, send + own, recv + own, len, true); !s) return s;
      } else {
        for (int k = 1; k < n; ++k) {
          const int peer = patterns::mod(r - k, n);
          if (Status s = prims.recvReduce(peer, (k == 1 ? send : recv) + own, recv + own, len, k == n - 1); !s)
            return s;
        }
        for (int k = 1; k < n; ++k)
          if (Status s = prims.send(patterns::mod(r + k, n), recv + own, len); !s) return s;
      }
      for (int k = 1; k < n; ++k) {
        const int peer = patterns::mod(r - k, n);
        const size_t off = at(peer, &len);
        if (Status s = prims.recv(peer, recv + off, len); !s) return s;
      }
    }
    return Status::ok();
  }
};

}  // namespace

ZCOLL_ALGORITHM_FACTORY(directAllReduce, DirectAllReduce, "direct")

}  // namespace zcoll
