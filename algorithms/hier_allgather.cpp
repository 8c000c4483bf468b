// hier_allgather.cpp - hierarchical all-gather for ranks on H >= 2 hosts of L >= 2 ranks each (any
// placement of ranks on hosts): every block crosses the network once per other host, in L parallel
// streams per host, in (H-1) + (L-1) steps instead of the flat ring's HL-1.
//   1. across hosts: the ranks of local index i (one per host) all-gather their blocks into scratch
//      A (H blocks, in host order);
//   2. inside each host: ring all-gather of the A's into scratch B (L x H blocks: B[j][h] is the
//      block of the rank of local index j on host h);
//   3. B's blocks to their ranks' places in recvbuf (one copy pass).
// Scratch: (H + HL) blocks. In place (sendbuf = recvbuf + rank x count) works: recvbuf is written only
// in step 3, after sendbuf was read.
#include "algorithms/hier_common.hpp"
#include "algorithms/primitives.hpp"

namespace zcoll {

const Algorithm& ringAllGather();

namespace {

class HierAllGather final : public HierAlgorithmOf<Collective::AllGather> {
 public:
  using HierAlgorithmOf::HierAlgorithmOf;

  double costOn(const OpArgs& op, const patterns::HostLayout& hosts, const CostModel& m) const override {
    return hierStagedCost(op, hosts, m);
  }

  Status run(const OpArgs& op, AlgoContext& ctx) const override {
    HierPlace at;
    if (Status s = hierPlace(ctx, &at); !s) return s;
    const size_t block = op.count * dataTypeSize(op.dtype);
    if (block == 0) return Status::ok();
    char *a = nullptr, *b = nullptr;
    if (Status s = hierStaging(ctx, at, block, &a, &b); !s) return s;
    GroupView column(*ctx.transport, at.columnRanks());
    AlgoContext cc = hierPhase(ctx, column, at.host, at.hosts);
    OpArgs across = op;
    across.recvbuf = a;
    if (Status s = ringAllGather().run(across, cc); !s) return s;
    GroupView local(*ctx.transport, at.hostRanks());
    AlgoContext lc = hierPhase(ctx, local, at.local, at.perHost);
    OpArgs inside = op;
    inside.sendbuf = a;
    inside.recvbuf = b;
    inside.count = op.count * static_cast<size_t>(at.hosts);
    if (Status s = ringAllGather().run(inside, lc); !s) return s;
    Primitives prims(op, ctx, name());
    auto* out = static_cast<char*>(op.recvbuf);
    forEachStaged(at, [&](int rank, size_t i) { prims.copy(out + static_cast<size_t>(rank) * block, b + i * block, op.count); });
    return Status::ok();
  }
};

}  // namespace

ZCOLL_ALGORITHM_FACTORY(hierAllGather, HierAllGather, "hier")

}  // namespace zcoll
