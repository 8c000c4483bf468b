// group.hpp - zcollGroupStart/End: per-thread queue of calls that run together at the outer end.
//
// At the end, each communicator runs all its send/recv calls as one batch (so exchanges cannot
// deadlock), then its collectives in call order: every rank runs a group's calls in that one order,
// however it interleaved them (send/recv and collectives share each pair's FIFO). With one communicator they run on the calling thread;
// with several (one thread driving several ranks), each communicator's calls go to its progress
// thread at once and the end waits for all of them.
#pragma once

#include "algorithms/algorithm.hpp"
#include "zcoll/zcoll.h"

namespace zcoll {

bool groupActive();
Status groupStart();
Status groupEnd();
// Queues a validated call; for SendRecv, `item` is the one transfer.
Status groupAdd(zcollComm_t comm, const OpArgs& op, const P2PItem* item, zcollStream_t stream);

}  // namespace zcoll
