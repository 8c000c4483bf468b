// fold_steps.hpp - the two ends of the fold (patterns/rhd.hpp) that the rhd and rd all-reduces
// share: first, a rank that sits out hands its whole input to rank + 1 (which reduces it into its
// recvbuf); last, that rank sends the result back.
#pragma once

#include "algorithms/patterns/rhd.hpp"
#include "algorithms/primitives.hpp"

namespace zcoll {

// The fold's first step for rank r. *done: r sat out and holds the result already. Else *cur is
// where r's partial result lives for the power-of-two part (send, or recv once r absorbed r - 1).
inline Status foldIn(Primitives& prims, const patterns::Fold& fold, int r, const char* send, char* recv, size_t count,
                     bool* done, const char** cur) {
  const size_t es = prims.elemSize(), chunk = prims.chunkElems();
  *done = false;
  *cur = send;
  if (fold.sitsOut(r)) {  // hand everything to r+1, get the result back
    *done = true;
    if (Status s = forChunks(0, count, chunk, [&](size_t o, size_t c) { return prims.send(r + 1, send + o * es, c); }); !s)
      return s;
    return forChunks(0, count, chunk, [&](size_t o, size_t c) { return prims.recv(r + 1, recv + o * es, c); });
  }
  if (!fold.absorbs(r)) return Status::ok();
  *cur = recv;
  return forChunks(0, count, chunk,
                   [&](size_t o, size_t c) { return prims.recvReduce(r - 1, send + o * es, recv + o * es, c, false); });
}

// The fold's last step: an absorbing rank sends the result in recv back to r - 1.
inline Status foldOut(Primitives& prims, const patterns::Fold& fold, int r, const char* recv, size_t count) {
  if (!fold.absorbs(r)) return Status::ok();
  const size_t es = prims.elemSize();
  return forChunks(0, count, prims.chunkElems(), [&](size_t o, size_t c) { return prims.send(r - 1, recv + o * es, c); });
}

}  // namespace zcoll
