// hier_common.hpp - what the hierarchical algorithms (hier_*.cpp) share: whether a host layout suits
// them, and a context for one phase run on a subset of the ranks (a GroupView).
#pragma once

#include "algorithms/algorithm.hpp"
#include "algorithms/group_view.hpp"

namespace zcoll {

// H >= 2 hosts with the same number L >= 2 of ranks each.
inline Status hierFits(const patterns::HostLayout& hosts) {
  if (hosts.hosts < 2) return notSupported("all ranks are on one host");
  if (hosts.perHost < 2)
    return notSupported("{}", hosts.perHost == 0 ? "the hosts hold different numbers of ranks" : "one rank per host");
  return Status::ok();
}

// The base of the hierarchical algorithms: they serve only a communicator whose host layout fits.
template <Collective C>
class HierAlgorithmOf : public AlgorithmOf<C> {
 public:
  using AlgorithmOf<C>::AlgorithmOf;
  Status supports(int) const final {
    return notSupported("needs ranks on several hosts (the communicator's host layout)");
  }
  Status supportsOn(const patterns::HostLayout& hosts) const final { return hierFits(hosts); }
};

// This rank's place in the layout: its host and local index, and the ranks of its two groups.
struct HierPlace {
  const patterns::HostLayout* layout = nullptr;
  int hosts = 0, perHost = 0, host = 0, local = 0;
  const int* hostRanks() const { return layout->members[static_cast<size_t>(host)].data(); }
  const int* columnRanks() const { return layout->columns[static_cast<size_t>(local)].data(); }
  // The rank of local index j on host k.
  int rankAt(int k, int j) const { return layout->members[static_cast<size_t>(k)][static_cast<size_t>(j)]; }
};

inline Status hierPlace(const AlgoContext& ctx, HierPlace* out) {
  if (!ctx.hosts) return notSupported("hier: no host layout in this context");
  if (Status s = hierFits(*ctx.hosts); !s) return s;
  out->layout = ctx.hosts;
  out->hosts = ctx.hosts->hosts;
  out->perHost = ctx.hosts->perHost;
  out->host = ctx.hosts->hostOf[static_cast<size_t>(ctx.rank)];
  out->local = ctx.hosts->localIndex[static_cast<size_t>(ctx.rank)];
  return Status::ok();
}

// All-gather's and reduce-scatter's staging: scratch `a` of H blocks, then `b` of L x H blocks in
// (local index, host) order.
// The price of the staged all-gather and reduce-scatter: the ring's bytes of the whole buffer S in
// (H-1) + (L-1) steps, plus the local copy pass of S.
inline double hierStagedCost(const OpArgs& op, const patterns::HostLayout& hosts, const CostModel& m) {
  const int n = static_cast<int>(hosts.hostOf.size()), h = hosts.hosts, l = std::max(1, hosts.perHost);
  const double s = opSize(op, n);
  return (h - 1 + l - 1) * m.alpha + static_cast<double>(n - 1) / n * s * m.beta + s * m.beta;
}

inline Status hierStaging(const AlgoContext& ctx, const HierPlace& at, size_t block, char** a, char** b) {
  const size_t h = static_cast<size_t>(at.hosts);
  *a = static_cast<char*>(ctx.scratch->get(block * h * (static_cast<size_t>(at.perHost) + 1)));
  if (!*a) return systemError("hier: scratch", ENOMEM);
  *b = *a + block * h;
  return Status::ok();
}
// fn(rank, i) for every rank and the index i of its block in `b`.
template <typename Fn>
void forEachStaged(const HierPlace& at, Fn&& fn) {
  for (int j = 0; j < at.perHost; ++j)
    for (int k = 0; k < at.hosts; ++k) fn(at.rankAt(k, j), static_cast<size_t>(j) * static_cast<size_t>(at.hosts) + static_cast<size_t>(k));
}

// The context of a phase on `view`, where this rank is `rank` of `n`; Avg divides by `divisor` (0: n).
inline AlgoContext hierPhase(const AlgoContext& ctx, GroupView& view, int rank, int n, int divisor = 0) {
  AlgoContext c = ctx;
  c.transport = &view;
  c.rank = rank;
  c.nranks = n;
  c.hosts = nullptr;
  c.avgDivisor = divisor;
  return c;
}

}  // namespace zcoll
