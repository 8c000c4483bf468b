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
