// hier_reduce_scatter.cpp - hierarchical reduce-scatter for ranks on H >= 2 hosts of L >= 2 ranks
// each (any placement): the mirror of hier all-gather.
//   1. sendbuf's blocks into scratch B in (local index, host) order: B[j][h] is the block for the
//      rank of local index j on host h (one copy pass);
//   2. inside each host: ring reduce-scatter of B, local rank i getting A (H blocks: the blocks of
//      column i, summed over its host);
//   3. across hosts: the ranks of local index i reduce-scatter A; rank (h, i) gets its block summed
//      over every host. Avg sums in step 2 and divides by HL once, in step 3.
// In place (recvbuf = sendbuf + rank x count) works: sendbuf is read wholly in step 1.
#include "algorithms/hier_common.hpp"
#include "algorithms/primitives.hpp"

namespace zcoll {

const Algorithm& ringReduceScatter();

namespace {

class HierReduceScatter final : public HierAlgorithmOf<Collective::ReduceScatter> {
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
    Primitives prims(op, ctx, name());
    const auto* in = static_cast<const char*>(op.sendbuf);
    forEachStaged(at, [&](int rank, size_t i) { prims.copy(b + i * block, in + static_cast<size_t>(rank) * block, op.count); });
    GroupView local(*ctx.transport, at.hostRanks());
    AlgoContext lc = hierPhase(ctx, local, at.local, at.perHost);
    OpArgs inside = op;
    if (op.op == RedOp::Avg) inside.op = RedOp::Sum;
    inside.sendbuf = b;
    inside.recvbuf = a;
    inside.count = op.count * static_cast<size_t>(at.hosts);
    if (Status s = ringReduceScatter().run(inside, lc); !s) return s;
    GroupView column(*ctx.transport, at.columnRanks());
    AlgoContext cc = hierPhase(ctx, column, at.host, at.hosts, ctx.nranks);
    OpArgs across = op;
    across.sendbuf = a;
    return ringReduceScatter().run(across, cc);
  }
};

}  // namespace

ZCOLL_ALGORITHM_FACTORY(hierReduceScatter, HierReduceScatter, "hier")

}  // namespace zcoll
