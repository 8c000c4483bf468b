// zcopy_allreduce.hpp - the zero-copy all-reduce between the processes of one host, for buffers
// every rank allocated with zcollMemAlloc (comm/shared_memory.hpp).
//
// Each rank owns one slice (as in "direct"), reads that slice of every rank's sendbuff in place,
// reduces it through an L1-sized block and stores the result into that slice of every rank's
// recvbuff: per rank, the buffer is read once and written once, where the copying algorithms move
// it through the transport's slots twice more. Three rounds of small messages through the
// transport frame it: (1) offers - each rank's buffers, or "none"; unless every rank offered, all
// ranks know it and the caller runs the selected algorithm instead; (2) whether each rank could
// map every peer's buffers (same answer everywhere, or the copying fallback again); (3) after the
// stores, "done" - a rank returns once every peer has finished reading its sendbuff and writing its
// recvbuff.
#pragma once

#include "algorithms/algorithm.hpp"

namespace zcoll {

inline constexpr std::string_view kZeroCopyName = "zcopy";

// Runs op (a host all-reduce) zero-copy when every rank's buffers allow it and sets *ran; else
// leaves *ran false having exchanged only the offers (and, when mapping failed somewhere, the
// votes) - the caller then runs the selected algorithm. The transport must map peer memory.
Status zeroCopyAllReduce(const OpArgs& op, AlgoContext& ctx, bool* ran);

}  // namespace zcoll
