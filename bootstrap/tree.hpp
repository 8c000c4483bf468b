// tree.hpp - the bootstrap's tree over the ranks (pure; tests/bootstrap/tree_test.cpp).
//
// Rank 0 is the root; node r's subtree is the contiguous range [r, end); the ranks after r in it are
// split into up to `fanout` nearly equal consecutive parts, whose first ranks are r's children. So a
// subtree's blocks of an all-gather are contiguous (one message up per child), the depth is about
// log_fanout(n), and each rank sends the whole table to at most `fanout` children.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace zcoll {

inline constexpr int kBootstrapFanout = 4;

struct TreeNode {
  int parent = -1;          // -1 at the root
  int end = 0;              // this rank's subtree is [rank, end)
  std::vector<int> children;  // first rank of each part, in order
  std::vector<int> childEnd;  // end of each child's subtree
};

// The first rank of part `j` of the `k` parts of [lo, hi).
constexpr int treePartStart(int lo, int hi, int k, int j) {
  return lo + static_cast<int>(static_cast<int64_t>(hi - lo) * j / k);
}

inline TreeNode treeNode(int rank, int n, int fanout = kBootstrapFanout) {
  TreeNode t;
  int lo = 0, hi = n;
  while (lo != rank) {  // descend from the root to the part holding rank
    const int k = std::min(fanout, hi - lo - 1);
    int j = k - 1;
    while (treePartStart(lo + 1, hi, k, j) > rank) --j;
    t.parent = lo;
    const int start = treePartStart(lo + 1, hi, k, j), stop = treePartStart(lo + 1, hi, k, j + 1);
    lo = start;
    hi = stop;
  }
  t.end = hi;
  const int k = std::min(fanout, hi - lo - 1);
  for (int j = 0; j < k; ++j) {
    t.children.push_back(treePartStart(lo + 1, hi, k, j));
    t.childEnd.push_back(treePartStart(lo + 1, hi, k, j + 1));
  }
  return t;
}

}  // namespace zcoll
