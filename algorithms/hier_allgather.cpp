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

class HierAllGather final : public AlgorithmOf<Collective::AllGather> {
 public:
  using AlgorithmOf::AlgorithmOf;

  Status supports(const OpArgs&, int) const override {
    return notSupported("needs ranks on several hosts (the communicator's host layout)");
  }
  Status supportsOn(const OpArgs&, const patterns::HostLayout& hosts) const override { return hierFits(hosts); }

  double costOn(const OpArgs& op, const patterns::HostLayout& hosts, const CostModel& m) const override {
    const int n = static_cast<int>(hosts.hostOf.size()), h = hosts.hosts, l = std::max(1, hosts.perHost);
    const double s = opSize(op, n);  // the whole output
    // The same bytes as the ring in fewer steps, plus the copy pass.
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
    if (!a) return systemError("hier all-gather: scratch", ENOMEM);
    char* b = a + block * static_cast<size_t>(h);
    GroupView column(*ctx.transport, hl.columns[static_cast<size_t>(idx)].data());
    AlgoContext cc = hierPhase(ctx, column, host, h);
    OpArgs across = op;
    across.recvbuf = a;
    if (Status s = ringAllGather().run(across, cc); !s) return s;
    GroupView local(*ctx.transport, hl.members[static_cast<size_t>(host)].data());
    AlgoContext lc = hierPhase(ctx, local, idx, l);
    OpArgs inside = op;
    inside.sendbuf = a;
    inside.recvbuf = b;
    inside.count = op.count * static_cast<size_t>(h);
    if (Status s = ringAllGather().run(inside, lc); !s) return s;
    Primitives prims(op, ctx, name());
    auto* out = static_cast<char*>(op.recvbuf);
    for (int j = 0; j < l; ++j)
      for (int k = 0; k < h; ++k)
        prims.copy(out + static_cast<size_t>(hl.members[static_cast<size_t>(k)][static_cast<size_t>(j)]) * block,
                   b + (static_cast<size_t>(j) * static_cast<size_t>(h) + static_cast<size_t>(k)) * block, op.count);
    return Status::ok();
  }
};

}  // namespace

ZCOLL_ALGORITHM_FACTORY(hierAllGather, HierAllGather, "hier")

}  // namespace zcoll
