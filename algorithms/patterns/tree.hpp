// tree.hpp - pure arithmetic of binary trees over ranks (heap order on ranks relabelled so that the
// root is 0): parent (v-1)/2, children 2v+1 and 2v+2. The second tree of a double binary tree is the
// mirror image (v -> n-1-v relabelled with the root kept at 0), so that ranks that are leaves in one
// tree are mostly inner nodes in the other.
#pragma once

namespace zcoll::patterns {

struct TreeNode {
  int parent = -1;    // real rank, -1 at the root
  int children[2] = {-1, -1};
  int nchildren = 0;
};

// Node of `rank` in the binary tree over n ranks rooted at `root`; mirror picks the second tree.
constexpr TreeNode binaryTree(int rank, int root, int n, bool mirror = false) {
  auto toVirtual = [&](int r) {
    int v = (r - root + n) % n;
    return mirror && v != 0 ? n - v : v;
  };
  auto toReal = [&](int v) {
    int u = mirror && v != 0 ? n - v : v;
    return (u + root) % n;
  };
  TreeNode t;
  int v = toVirtual(rank);
  if (v > 0) t.parent = toReal((v - 1) / 2);
  for (int c = 2 * v + 1; c <= 2 * v + 2 && c < n; ++c) t.children[t.nchildren++] = toReal(c);
  return t;
}

}  // namespace zcoll::patterns
