// tree_steps.hpp - one chunk's worth of reduce-up and broadcast-down on a binary tree node
// (patterns/tree.hpp), shared by the tree all-reduce, reduce and broadcast. The tree has no cycle,
// so any slot count works; FIFOs up and down a tree edge are distinct.
#pragma once

#include "algorithms/patterns/tree.hpp"
#include "algorithms/primitives.hpp"

namespace zcoll {

// Reduces `local` with the children's partial results and passes the result up; at the root it is
// written to `dst` (and finalized). `tmp` holds the partial of a node with two children that is not
// the root (n elements; may be dst when dst is valid on every rank).
inline Status treeReduceUp(Primitives& prims, const patterns::TreeNode& t, const char* local, char* dst, char* tmp,
                           size_t n) {
  const bool root = t.parent < 0;
  switch (t.nchildren) {
    case 0:
      return root ? (prims.copy(dst, local, n), prims.finalize(dst, n), Status::ok()) : prims.send(t.parent, local, n);
    case 1:
      return root ? prims.recvReduce(t.children[0], local, dst, n, true)
                  : prims.recvReduceSend(t.children[0], t.parent, local, n);
    default: {
      char* partial = root ? dst : tmp;
      if (Status s = prims.recvReduce(t.children[0], local, partial, n, false); !s) return s;
      return root ? prims.recvReduce(t.children[1], partial, dst, n, true)
                  : prims.recvReduceSend(t.children[1], t.parent, partial, n);
    }
  }
}

// Receives buf from the parent (unless root) and forwards it to the children. A root sends from
// rootSrc when given (else buf).
inline Status treeBroadcastDown(Primitives& prims, const patterns::TreeNode& t, char* buf, size_t n,
                                const char* rootSrc = nullptr) {
  int next = 0;
  const char* src = t.parent < 0 && rootSrc ? rootSrc : buf;
  if (t.parent >= 0) {
    Status s = t.nchildren > 0 ? prims.recvCopySend(t.parent, t.children[next++], buf, n) : prims.recv(t.parent, buf, n);
    if (!s) return s;
  }
  for (; next < t.nchildren; ++next)
    if (Status s = prims.send(t.children[next], src, n); !s) return s;
  return Status::ok();
}

}  // namespace zcoll
