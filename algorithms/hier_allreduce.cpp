// hier_allreduce.cpp - hierarchical all-reduce for ranks on several hosts, each with the same number
// L >= 2 of ranks (H >= 2 hosts): the network carries 1/L of the buffer per rank, in L parallel
// streams per host, in 2(H-1) steps instead of the flat ring's 2(HL-1).
//   1. inside each host, ring reduce-scatter: local rank i holds block i (count / L elements) reduced
//      over its host;
//   2. across hosts, all-reduce of block i among the ranks of local index i (one per host): ring,
//      or halving-doubling for blocks below kRhdBelow bytes;
//   3. inside each host, ring all-gather of the blocks.
// The count % L elements left over go through a flat ring all-reduce. Each phase is an existing
// algorithm run on a GroupView of its ranks; Avg sums in phase 1 and divides by HL once, at the end
// of phase 2 (AlgoContext::avgDivisor), as a flat algorithm does.
#include "algorithms/hier_common.hpp"

namespace zcoll {

const Algorithm& ringReduceScatter();
const Algorithm& ringAllReduce();
const Algorithm& ringAllGather();
const Algorithm& rhdAllReduce();

namespace {

constexpr size_t kRhdBelow = 256 * 1024;

class HierAllReduce final : public HierAlgorithmOf<Collective::AllReduce> {
 public:
  using HierAlgorithmOf::HierAlgorithmOf;

  double costOn(const OpArgs& op, const patterns::HostLayout& hosts, const CostModel& m) const override {
    const int n = static_cast<int>(hosts.hostOf.size()), l = std::max(1, hosts.perHost), h = hosts.hosts;
    const double s = opSize(op, n);
    return 2.0 * (l - 1) * m.localAlpha() + 2.0 * (l - 1) / l * s * m.localBeta() +  // reduce-scatter + all-gather
           2.0 * (h - 1) * m.alpha + 2.0 * (h - 1) / h * (s / l) * m.beta;              // across hosts
  }

  Status run(const OpArgs& op, AlgoContext& ctx) const override {
    HierPlace at;
    if (Status s = hierPlace(ctx, &at); !s) return s;
    const int l = at.perHost, idx = at.local;
    const size_t es = dataTypeSize(op.dtype);
    const size_t block = op.count / static_cast<size_t>(l), tail = op.count - block * static_cast<size_t>(l);
    const auto* send = static_cast<const char*>(op.sendbuf);
    auto* recv = static_cast<char*>(op.recvbuf);
    if (block > 0) {
      char* mine = recv + static_cast<size_t>(idx) * block * es;
      GroupView local(*ctx.transport, at.hostRanks());
      AlgoContext lc = hierPhase(ctx, local, idx, l);
      OpArgs rs = op;
      if (op.op == RedOp::Avg) rs.op = RedOp::Sum;
      rs.coll = Collective::ReduceScatter;
      rs.count = block;
      rs.recvbuf = mine;  // in place when sendbuf == recvbuf: NCCL's convention (recvbuf = sendbuf + idx * block)
      if (Status s = ringReduceScatter().run(rs, lc); !s) return s;
      GroupView column(*ctx.transport, at.columnRanks());
      AlgoContext cc = hierPhase(ctx, column, at.host, at.hosts, ctx.nranks);
      OpArgs ar = op;
      ar.count = block;
      ar.sendbuf = mine;
      ar.recvbuf = mine;
      if (Status s = (block * es < kRhdBelow ? rhdAllReduce() : ringAllReduce()).run(ar, cc); !s) return s;
      OpArgs ag = op;
      ag.coll = Collective::AllGather;
      ag.count = block;
      ag.sendbuf = mine;  // in place: sendbuf = recvbuf + idx * block
      ag.recvbuf = recv;
      if (Status s = ringAllGather().run(ag, lc); !s) return s;
    }
    if (tail > 0) {
      OpArgs t = op;
      t.count = tail;
      t.sendbuf = send + block * static_cast<size_t>(l) * es;
      t.recvbuf = recv + block * static_cast<size_t>(l) * es;
      AlgoContext flat = ctx;
      flat.hosts = nullptr;
      if (Status s = ringAllReduce().run(t, flat); !s) return s;
    }
    return Status::ok();
  }
};

}  // namespace

ZCOLL_ALGORITHM_FACTORY(hierAllReduce, HierAllReduce, "hier")

}  // namespace zcoll
