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

class HierReduceScatter final : public AlgorithmOf<Collective::ReduceScatter> {
 public:
  using AlgorithmOf::AlgorithmOf;

  Status supports(const OpArgs&, int) const override {
    return notSupported("needs ranks on several hosts (the communicator's host layout)");
  }
  Status supportsOn(const OpArgs&, const patterns::HostLayout& hosts) const override { return hierFits(hosts); }

  double costOn(const OpArgs& op, const patterns::HostLayout& hosts, const CostModel& m) const override {
    const int n = static_cast<int>(hosts.hostOf.size()), h = hosts.hosts, l = std::max(1, hosts.perHost);
    const double s = opSize(op, n);  // the whole input
    return (h - 1 + l - 1) * m.alpha + static_cast<double>(n - 1) / n * s * m.beta + s * m.beta;
  }

  Status run(const OpArgs& op, AlgoContext& ctx) const override {
    if (!ctx.hosts) return notSupported("hier: no host layout in this context");
    const patterns::HostLayout& hl = *ctx.hosts;
    if (Status s = hierFits(hl); !s) return s;
    const int l = hl.perHost, h = hl.hosts, me = ctx.rank;
    const int idx = hl.localIndex[static_cast<size_t>(me)], host = hl.hostOf[static_cast<size_t>(me)];
    const size_t es = dataTypeSize(op.dtype), block = op.count * es;
    if (block == 0) return Status::ok();
    auto* a = static_cast<char*>(ctx.scratch->get(block * static_cast<size_t>(h) * static_cast<size_t>(l + 1)));
    if (!a) return systemError("hier reduce-scatter: scratch", ENOMEM);
    char* b = a + block * static_cast<size_t>(h);
    Primitives prims(op, ctx, name());
    const auto* in = static_cast<const char*>(op.sendbuf);
    for (int j = 0; j < l; ++j)
      for (int k = 0; k < h; ++k)
        prims.copy(b + (static_cast<size_t>(j) * static_cast<size_t>(h) + static_cast<size_t>(k)) * block,
                   in + static_cast<size_t>(hl.members[static_cast<size_t>(k)][static_cast<size_t>(j)]) * block, op.count);
    GroupView local(*ctx.transport, hl.members[static_cast<size_t>(host)].data());
    AlgoContext lc = hierPhase(ctx, local, idx, l);
    OpArgs inside = op;
    if (op.op == RedOp::Avg) inside.op = RedOp::Sum;
    inside.sendbuf = b;
    inside.recvbuf = a;
    inside.count = op.count * static_cast<size_t>(h);
    if (Status s = ringReduceScatter().run(inside, lc); !s) return s;
    GroupView column(*ctx.transport, hl.columns[static_cast<size_t>(idx)].data());
    AlgoContext cc = hierPhase(ctx, column, host, h, ctx.nranks);
    OpArgs across = op;
    across.sendbuf = a;
    if (Status s = ringReduceScatter().run(across, cc); !s) return s;
    return Status::ok();
  }
};

}  // namespace

ZCOLL_ALGORITHM_FACTORY(hierReduceScatter, HierReduceScatter, "hier")

}  // namespace zcoll
