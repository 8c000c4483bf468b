// zcopy.hpp - zero copy between the processes of one host, for buffers allocated with
// zcollMemAlloc (core/shared_memory.hpp): all-reduce, reduce-scatter, all-gather and broadcast read
// the peers' buffers in place instead of moving the data twice through the transport's slots.
//
// Small messages through the transport frame it: (1) offers - whether each rank's buffers are
// shareable, and where they are, followed by the sendbuff's ends that are not shared memory; unless
// every rank offered, all ranks know it and the caller runs the selected algorithm instead (all that an
// op on other memory pays); (2) whether each rank could map every peer's buffers (the same answer
// everywhere, or the fallback again), with the ends again when they differ between ranks - only where
// needed: an all-gather votes in (3) and, after a "no", runs the selected algorithm afresh on its
// untouched inputs, and an op whose offers are the last zero-copy op's needs no vote (ZeroCopyMemo);
// (3) after the data moved, "done" - a rank returns once every peer has finished reading its sendbuff
// (and, for all-reduce, writing its recvbuff). Between them:
//   all-reduce     rank r reduces slice r (the ring's block partition) of every rank's sendbuff
//                  and stores it into every rank's recvbuff (both buffers of every rank shared)
//   reduce-scatter rank r reduces block r of every rank's sendbuff into its own recvbuff
//   all-gather     rank r copies every rank's sendbuff into its own recvbuff
// (the last two need only the sendbuffs shared). Broadcast, which needs only the root's, takes two
// hops: the root's offer to each receiver, which copies the root's sendbuff into its recvbuff and
// answers "done" (a receiver that cannot map it gets the bytes sent instead). Per rank the data is
// read once and written once.
#pragma once

#include <cstdint>
#include <vector>

#include "algorithms/algorithm.hpp"

namespace zcoll {

inline constexpr std::string_view kZeroCopyName = "zcopy";

// What a communicator keeps between its zero-copy ops: the round-1 messages of every rank in the last
// op that ran zero copy. An all-reduce or reduce-scatter whose messages are the same, with its ends in
// (1), skips the vote (2): every rank mapped those very buffers then and still has them mapped (a
// peer's mappings go only when its free generation, part of each reference, changes).
struct ZeroCopyMemo {
  std::vector<uint8_t> hellos;
};

// Whether zero copy serves this collective at all (all-reduce, reduce-scatter, all-gather, broadcast).
bool zeroCopyServes(Collective coll);
// The bytes of all ranks' buffers of op together (send + recv, times nranks): what decides whether
// its stores go around the cache.
size_t zeroCopyFootprint(const OpArgs& op, int nranks);

// Runs op (a host collective zeroCopyServes) zero-copy when every rank's buffers allow it and sets
// *ran; else leaves *ran false having exchanged only the offers (and, when mapping failed
// somewhere, the references and votes) - the caller then runs the selected algorithm. The
// transport must map peer memory (Transport::mapsPeerMemory).
Status zeroCopyCollective(const OpArgs& op, AlgoContext& ctx, bool* ran);

}  // namespace zcoll
