// hosts.hpp - which ranks share a host, from the bootstrap's host identities (pure; tested in
// tests/algorithms/patterns_test.cpp). Hosts are numbered in the order of their lowest rank; a host's
// ranks are listed in rank order, and a rank's local index is its place in that list.
#pragma once

#include <cstdint>
#include <vector>

namespace zcoll::patterns {

struct HostLayout {
  int hosts = 1;
  int perHost = 0;                         // ranks on every host when all hosts hold as many, else 0
  std::vector<int> hostOf;                 // rank -> host
  std::vector<int> localIndex;             // rank -> place among its host's ranks
  std::vector<std::vector<int>> members;   // host -> its ranks, ascending
  std::vector<std::vector<int>> columns;   // local index -> the ranks of that index, one per host (perHost > 0)

  static HostLayout fromHostIds(const std::vector<uint64_t>& ids) {
    HostLayout l;
    std::vector<uint64_t> seen;
    for (size_t r = 0; r < ids.size(); ++r) {
      int h = 0;
      while (h < static_cast<int>(seen.size()) && seen[static_cast<size_t>(h)] != ids[r]) ++h;
      if (h == static_cast<int>(seen.size())) {
        seen.push_back(ids[r]);
        l.members.emplace_back();
      }
      l.hostOf.push_back(h);
      l.localIndex.push_back(static_cast<int>(l.members[static_cast<size_t>(h)].size()));
      l.members[static_cast<size_t>(h)].push_back(static_cast<int>(r));
    }
    l.hosts = static_cast<int>(l.members.size());
    l.perHost = l.members.empty() ? 0 : static_cast<int>(l.members[0].size());
    for (const std::vector<int>& m : l.members)
      if (static_cast<int>(m.size()) != l.perHost) l.perHost = 0;
    for (int i = 0; i < l.perHost; ++i) {
      l.columns.emplace_back();
      for (const std::vector<int>& m : l.members) l.columns.back().push_back(m[static_cast<size_t>(i)]);
    }
    return l;
  }
};

// Whether the hosts hold equal runs of consecutive ranks (host h: [h L, (h + 1) L)) and L is a power of
// two: the layout under which a pairwise exchange at distance d < L stays on a host.
inline bool blockHosts(const HostLayout& l) {
  if (l.hosts < 2 || l.perHost < 1 || (l.perHost & (l.perHost - 1)) != 0) return false;
  for (size_t r = 0; r < l.hostOf.size(); ++r)
    if (l.hostOf[r] != static_cast<int>(r) / l.perHost) return false;
  return true;
}


}  // namespace zcoll::patterns
