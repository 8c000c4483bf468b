// check.cpp - ZCOLL_CHECK=1: before every collective the ranks all-gather the call's signature
// (collective, count, type, op, root, sequence number) over the transport and compare them. A
// mismatch fails the call on every rank with both calls in the message, instead of a hang or
// silently wrong data; the FIFOs stay in step, so the communicator remains usable. Costs a ring
// all-gather of N x 48 bytes per collective: a debugging mode.
#include <cstring>

#include "algorithms/patterns/ring.hpp"
#include "algorithms/primitives.hpp"
#include "comm/communicator.hpp"

namespace zcoll {
namespace {

constexpr uint32_t kSignatureMagic = 0x7a536967u;  // "zSig"

struct Signature {
  uint32_t magic;
  int32_t coll;
  uint64_t count;
  int32_t dtype;
  int32_t op;  // -1 where the collective does not reduce
  int32_t root;  // -1 where it has no root
  int32_t rank;
  uint64_t seq;
  uint64_t pad;
};

Signature signatureOf(const OpArgs& op, int rank) {
  Signature s{};
  s.magic = kSignatureMagic;
  s.coll = static_cast<int32_t>(op.coll);
  s.count = op.count;
  s.dtype = static_cast<int32_t>(op.dtype);
  s.op = traits(op.coll).reduces ? static_cast<int32_t>(op.op) : -1;
  s.root = traits(op.coll).rooted ? op.root : -1;
  s.rank = rank;
  s.seq = op.seq;
  return s;
}

std::string describe(const Signature& s) {
  if (s.magic != kSignatureMagic) return "something that is not a zcoll call signature";
  const auto coll = static_cast<Collective>(s.coll);
  std::string text = fmt::format("{} #{} (count {}, {}", collectiveName(coll), s.seq, s.count,
                                 dataTypeName(static_cast<DataType>(s.dtype)));
  if (s.op >= 0) text += fmt::format(", {}", redOpName(static_cast<RedOp>(s.op)));
  if (s.root >= 0) text += fmt::format(", root {}", s.root);
  return text + ")";
}

bool sameCall(const Signature& a, const Signature& b) {
  return a.magic == b.magic && a.coll == b.coll && a.count == b.count && a.dtype == b.dtype && a.op == b.op &&
         a.root == b.root && a.seq == b.seq;
}

}  // namespace

Status Communicator::checkSignature(const OpArgs& op) {
  const size_t bytes = sizeof(Signature);
  signatures_.resize(bytes * static_cast<size_t>(nranks_));  // grows once
  char* all = signatures_.data();
  const Signature mine = signatureOf(op, rank_);
  std::memcpy(all + static_cast<size_t>(rank_) * bytes, &mine, bytes);

  Waiter waiter = newWaiter(transport_.get());
  AlgoContext ctx = context(&waiter, transport_.get());
  OpArgs carrier{op.coll, nullptr, nullptr, bytes, DataType::Uint8};
  carrier.seq = op.seq;
  Primitives prims(carrier, ctx, "ZCOLL_CHECK");
  const int next = patterns::ringNext(rank_, nranks_), prev = patterns::ringPrev(rank_, nranks_);
  for (int step = 0; step < nranks_ - 1; ++step) {
    char* out = all + static_cast<size_t>(patterns::allGatherBlock(rank_, step, nranks_)) * bytes;
    char* in = all + static_cast<size_t>(patterns::allGatherBlock(rank_, step + 1, nranks_)) * bytes;
    Status s = exchangeChunks(
        bytes, bytes, prims.chunkElems(), prims.window(next), [&](size_t o, size_t c) { return prims.send(next, out + o, c); },
        [&](size_t o, size_t c) { return prims.recv(prev, in + o, c); });
    if (!s) return std::move(s).withContext("ZCOLL_CHECK: exchanging call signatures");
  }
  for (int q = 0; q < nranks_; ++q) {
    Signature theirs;
    std::memcpy(&theirs, all + static_cast<size_t>(q) * bytes, bytes);
    if (!sameCall(mine, theirs))
      return invalidUsage("ZCOLL_CHECK: ranks disagree on the call: rank {} called {} but rank {} called {}", rank_,
                          describe(mine), q, describe(theirs));
  }
  return Status::ok();
}

}  // namespace zcoll
