// The bootstrap tree (bootstrap/tree.hpp): every rank but 0 is the child of exactly one rank, the
// subtrees are contiguous and partition their parent's, and the depth is about log_fanout(n).
#include "bootstrap/tree.hpp"

#include <gtest/gtest.h>

#include <cmath>

namespace zcoll {
namespace {

TEST(BootstrapTree, SubtreesAreContiguousAndPartitionTheirParents) {
  for (int fanout : {2, 4, 8})
    for (int n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 17, 100, 127, 128, 129, 1000, 1024, 3000, 16384}) {
      std::vector<int> parentOf(static_cast<size_t>(n), -2);
      std::vector<int> depth(static_cast<size_t>(n), 0);
      int maxDepth = 0;
      for (int r = 0; r < n; ++r) {
        const TreeNode t = treeNode(r, n, fanout);
        ASSERT_GT(t.end, r);
        ASSERT_LE(t.end, n);
        ASSERT_LE(t.children.size(), static_cast<size_t>(fanout));
        ASSERT_EQ(t.children.size(), t.childEnd.size());
        // Children tile (r, end) in order.
        int next = r + 1;
        for (size_t j = 0; j < t.children.size(); ++j) {
          ASSERT_EQ(t.children[j], next) << "n " << n << " rank " << r;
          ASSERT_GT(t.childEnd[j], t.children[j]);
          const TreeNode c = treeNode(t.children[j], n, fanout);
          ASSERT_EQ(c.parent, r);
          ASSERT_EQ(c.end, t.childEnd[j]);
          next = t.childEnd[j];
        }
        ASSERT_EQ(next, t.end) << "n " << n << " rank " << r;
        parentOf[static_cast<size_t>(r)] = t.parent;
        if (r > 0) {
          ASSERT_GE(t.parent, 0);
          ASSERT_LT(t.parent, r);
          depth[static_cast<size_t>(r)] = depth[static_cast<size_t>(t.parent)] + 1;
          maxDepth = std::max(maxDepth, depth[static_cast<size_t>(r)]);
        }
      }
      EXPECT_EQ(parentOf[0], -1);
      EXPECT_EQ(treeNode(0, n, fanout).end, n);
      // Parts of nearly equal size: depth within one level of log_fanout(n).
      if (n > 1) {
        EXPECT_LE(maxDepth, static_cast<int>(std::ceil(std::log(n) / std::log(fanout))) + 1) << n;
      }
    }
}

}  // namespace
}  // namespace zcoll
