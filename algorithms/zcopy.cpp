// zcopy.cpp - see zcopy.hpp.
#include "algorithms/zcopy.hpp"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <type_traits>

#include "algorithms/patterns/ring.hpp"
#include "algorithms/primitives.hpp"
#include "core/log.hpp"
#include "kernels/host_reduce_simd.hpp"

namespace zcoll {
namespace {

constexpr uint32_t kOfferMagic = 0x7a63704fu;  // "zcpO"

// Round 1's message, with the references (a small chunk: it travels inside the FIFO's header): the
// op's signature (a check that the ranks run the same collective), whether this rank offers its
// buffers, and where they are. Every op of ZCOLL_ZERO_COPY bytes or more pays this round, zero copy
// or not.
struct Offer {
  uint32_t magic = kOfferMagic;
  uint32_t shared = 0;  // 1: this rank's buffers are shared memory (broadcast's done: mapped the root's)
  uint64_t count = 0;
  int32_t coll = 0;
  int32_t dtype = 0;
  int32_t op = 0;
  int32_t root = 0;
  // Bytes at each end of this rank's shared buffers that are not shared memory (an adopted plain
  // buffer's partial pages, core/adopted_memory.hpp): sent as copies.
  uint32_t head = 0, tail = 0;
  // 1: this rank's ends (its sendbuff's, in whole elements: head, then tail) follow this message in round 1.
  uint32_t endsFollow = 0;
  uint32_t reserved = 0;
};
struct Refs {
  SharedMemRef send, recv;  // recv only for all-reduce (the others write their own recvbuff only)
};
struct Hello {
  Offer offer;
  Refs refs;
};
static_assert(sizeof(Hello) <= 192, "round 1 stays a small chunk");
// Compared byte by byte with the last op's (ZeroCopyMemo): no padding, whose bytes would be arbitrary.
static_assert(std::has_unique_object_representations_v<Hello>);
// The most an end can be: under a page, rounded up to elements.
constexpr size_t kEndMax = 4096 + 64;
// bytes rounded up to whole elements of es bytes.
size_t wholeElems(size_t bytes, size_t es) { return (bytes + es - 1) / es * es; }
// Round 2's message starts with this rank's vote, padded so that the ends after it stay aligned.
constexpr size_t kVoteBytes = 16;

// The op's index space (the sendbuff's bytes; all-reduce's recvbuff has the same) cut in three: the
// ends [0, head) and [size - tail, size), which every rank sent the others in round 2, and the middle,
// which every rank's buffers share. Calls fn(offset, bytes, piece) for the parts of [lo, hi), piece 0
// (head), 1 (middle) or 2 (tail).
struct Ends {
  size_t head, tail, size;
  template <class F>
  void pieces(size_t lo, size_t hi, F&& fn) const {
    const size_t cut[4] = {0, head, size - tail, size};
    for (int k = 0; k < 3; ++k) {
      const size_t a = std::max(lo, cut[k]), b = std::min(hi, cut[k + 1]);
      if (a < b) fn(a, b - a, k);
    }
  }
  // Where byte `off` of end piece 0 or 2 is in a rank's copies of its ends (head, then tail).
  const uint8_t* copied(const uint8_t* copies, size_t off, int piece) const {
    return piece == 0 ? copies + off : copies + head + (off - (size - tail));
  }
};

// The op's result stores: around the cache when the op streams them.
void storeBytes(const AlgoContext& ctx, void* dst, const void* src, size_t len) {
  if (ctx.streamStores) streamBytes(dst, src, len, false);
  else copyBytes(dst, src, len);
}

struct BufferBytes {
  size_t send, recv;
};
BufferBytes bufferBytes(const OpArgs& op, int n) {
  const size_t b = op.count * dataTypeSize(op.dtype), all = b * static_cast<size_t>(n);
  if (op.coll == Collective::AllGather) return {b, all};
  if (op.coll == Collective::ReduceScatter) return {all, b};
  return {b, b};  // all-reduce; broadcast (the root's sendbuff, every rank's recvbuff)
}

// Sends `bytes` of `data` to every peer, then receives `bytes` from every peer into
// out + peer * bytes: one chunk at a time, in the same order on every rank (any FIFO depth suffices).
Status exchange(Primitives& prims, AlgoContext& ctx, const void* data, size_t bytes, uint8_t* out) {
  const int n = ctx.nranks, r = ctx.rank;
  const size_t chunk = prims.chunkElems();
  auto* in = static_cast<const uint8_t*>(data);
  for (size_t off = 0; off < bytes; off += chunk) {
    const size_t len = std::min(chunk, bytes - off);
    for (int k = 1; k < n; ++k)
      if (Status s = prims.send(patterns::mod(r + k, n), in + off, len); !s) return s;
    for (int k = 1; k < n; ++k) {
      const int peer = patterns::mod(r - k, n);
      if (Status s = prims.recv(peer, out + bytes * static_cast<size_t>(peer) + off, len); !s) return s;
    }
  }
  return Status::ok();
}

// `bytes` to or from one peer, in chunks (broadcast's messages, which go one way at a time).
Status sendAll(Primitives& prims, int peer, const void* data, size_t bytes) {
  const size_t chunk = prims.chunkElems();
  for (size_t off = 0; off < bytes; off += chunk)
    if (Status s = prims.send(peer, static_cast<const uint8_t*>(data) + off, std::min(chunk, bytes - off)); !s)
      return s;
  return Status::ok();
}
Status recvAll(Primitives& prims, int peer, void* data, size_t bytes) {
  const size_t chunk = prims.chunkElems();
  for (size_t off = 0; off < bytes; off += chunk)
    if (Status s = prims.recv(peer, static_cast<uint8_t*>(data) + off, std::min(chunk, bytes - off)); !s) return s;
  return Status::ok();
}

// This rank's offer before it looks at its buffers: the op's signature.
Offer signature(const OpArgs& op) {
  Offer o;
  o.count = op.count;
  o.coll = static_cast<int32_t>(op.coll);
  o.dtype = static_cast<int32_t>(op.dtype);
  o.op = static_cast<int32_t>(op.op);
  o.root = op.root;
  return o;
}

// Whether rank p's offer o is for the op this rank runs (mine).
Status sameOp(const OpArgs& op, const Offer& o, const Offer& mine, int p, int r) {
  if (o.magic == kOfferMagic && o.count == mine.count && o.coll == mine.coll && o.dtype == mine.dtype &&
      o.op == mine.op && o.root == mine.root)
    return Status::ok();
  return remoteError("{} #{} ({}): rank {} runs another collective than rank {} (count {} vs {}): the ranks are "
                     "not running the same collective",
                     collectiveName(op.coll), op.seq, kZeroCopyName, p, r, o.count, mine.count);
}

void warnOff(const OpArgs& op, int r, const Status& why) {
  static std::atomic<bool> warned{false};  // once per process: every later op would say the same
  if (!warned.exchange(true))
    ZCOLL_WARN(Coll, r, "{} #{}: zero copy off, the copying algorithms run instead: {}", collectiveName(op.coll),
               op.seq, why.message());
}

// dsts[k][0, bytes) = OP over p of srcs[p][0, bytes), for k < nd: out of cache in one pass with
// non-temporal stores (every destination at the same offset within a line, as buffers of one
// layout are), else through a block in L1.
void reduceInto(const OpArgs& op, const AlgoContext& ctx, const uint8_t* const* srcs, int ns, uint8_t* const* dsts,
                int nd, size_t bytes) {
  const size_t es = dataTypeSize(op.dtype);
  if (bytes == 0) return;
  size_t line = 0;
  const ReduceToAllFn toAll = ctx.streamStores ? streamReduceToAllFunction(op.dtype, op.op, &line) : nullptr;
  bool oneLayout = toAll != nullptr;
  for (int k = 0; k < nd && oneLayout; ++k) {
    const auto at = reinterpret_cast<uintptr_t>(dsts[k]);
    oneLayout = at % es == 0 && at % line == reinterpret_cast<uintptr_t>(dsts[0]) % line;
  }
  if (oneLayout) {
    toAll(reinterpret_cast<void* const*>(dsts), nd, reinterpret_cast<const void* const*>(srcs), ns, bytes / es);
    return;
  }
  const ReduceFn reduce = reduceFunction(op.dtype, op.op);
  const FinalizeFn finalize = finalizeFunction(op.dtype, op.op);
  const int divisor = ctx.avgDivisor > 0 ? ctx.avgDivisor : ctx.nranks;
  constexpr size_t kBlockBytes = 16384;  // in L1 between the reduction and the stores
  alignas(64) uint8_t block[kBlockBytes];
  const size_t step = kBlockBytes / es * es;
  for (size_t off = 0; off < bytes; off += step) {
    const size_t len = std::min(step, bytes - off), k = len / es;
    reduce(block, srcs[0] + off, srcs[1] + off, k);
    for (int p = 2; p < ns; ++p) reduce(block, block, srcs[p] + off, k);
    if (finalize) finalize(block, k, divisor);
    for (int d = 0; d < nd; ++d) storeBytes(ctx, dsts[d] + off, block, len);
  }
}

}  // namespace

bool zeroCopyServes(Collective coll) {
  return coll == Collective::AllReduce || coll == Collective::AllGather || coll == Collective::ReduceScatter ||
         coll == Collective::Broadcast;
}

size_t zeroCopyFootprint(const OpArgs& op, int nranks) {
  const BufferBytes b = bufferBytes(op, nranks);
  return (b.send + b.recv) * static_cast<size_t>(nranks);
}

namespace {

// Broadcast needs only the root's buffer, and only the root waits: (1) the root sends its offer,
// references and ends to each receiver; (2) each receiver copies from the root's buffer mapped here
// and answers "done" (its signature, and whether it could map). A receiver that could not gets the
// bytes from the root through the FIFO instead, so nobody else waits on it: two hops in all.
Status broadcastZeroCopy(const OpArgs& op, AlgoContext& ctx, Primitives& prims, bool* ran) {
  const int n = ctx.nranks, r = ctx.rank, root = op.root;
  Transport* t = ctx.transport;
  const size_t es = dataTypeSize(op.dtype), block = op.count * es;
  const Offer sig = signature(op);
  auto* recv = static_cast<uint8_t*>(op.recvbuf);
  if (r == root) {
    Hello mine{sig, {}};
    const bool shared = t->exportMemory(op.sendbuf, block, &mine.refs.send);
    mine.refs.send.freeGeneration = sharedMemFreeGeneration();
    // The ends in whole elements.
    mine.offer.head = static_cast<uint32_t>(wholeElems(mine.refs.send.head, es));
    mine.offer.tail = static_cast<uint32_t>(wholeElems(mine.refs.send.tail, es));
    mine.offer.shared = shared && mine.offer.head <= kEndMax && mine.offer.tail <= kEndMax &&
                        mine.offer.head + mine.offer.tail <= block;
    auto* in = static_cast<const uint8_t*>(op.sendbuf);
    for (int k = 1; k < n; ++k) {
      const int p = patterns::mod(root + k, n);
      if (Status s = sendAll(prims, p, &mine, sizeof mine); !s) return s;
      if (!mine.offer.shared) continue;
      if (Status s = sendAll(prims, p, in, mine.offer.head); !s) return s;
      if (Status s = sendAll(prims, p, in + block - mine.offer.tail, mine.offer.tail); !s) return s;
    }
    if (!mine.offer.shared) return Status::ok();  // every rank runs the selected algorithm
    if (recv != in) copyBytes(recv, in, block);
    int sent = 0;
    for (int k = 1; k < n; ++k) {
      const int p = patterns::mod(root + k, n);
      Offer done;
      if (Status s = recvAll(prims, p, &done, sizeof done); !s) return s;
      if (Status s = sameOp(op, done, sig, p, r); !s) return s;
      if (done.shared) continue;
      if (Status s = sendAll(prims, p, in, block); !s) return s;
      ++sent;
    }
    if (sent == 0) ZCOLL_TRACE(Coll, r, "broadcast #{}: zero copy over the root's shared buffer", op.seq);
    else ZCOLL_TRACE(Coll, r, "broadcast #{}: {} of {} ranks could not map the root's buffer: sent them the bytes",
                     op.seq, sent, n - 1);
    *ran = true;
    return Status::ok();
  }
  Hello hello;
  if (Status s = recvAll(prims, root, &hello, sizeof hello); !s) return s;
  if (Status s = sameOp(op, hello.offer, sig, root, r); !s) {
    // A root that waits for "done" gets this rank's signature, so that it fails at once too.
    if (hello.offer.shared) (void)sendAll(prims, root, &sig, sizeof sig);
    return s;
  }
  if (!hello.offer.shared) return Status::ok();
  const Ends ends{hello.offer.head, hello.offer.tail, block};
  auto* endBytes = static_cast<uint8_t*>(ctx.scratch->get(2 * kEndMax));
  if (!endBytes) return systemError(fmt::format("broadcast #{} ({}): scratch memory", op.seq, kZeroCopyName), ENOMEM);
  if (Status s = recvAll(prims, root, endBytes, ends.head); !s) return s;
  if (Status s = recvAll(prims, root, endBytes + ends.head, ends.tail); !s) return s;
  void* base = nullptr;
  Status mapped = t->importMemory(root, hello.refs.send, &base);
  Offer done = sig;
  done.shared = mapped.isOk();
  if (mapped) {
    const uint8_t* from = static_cast<const uint8_t*>(base) - hello.refs.send.head;  // the buffer's start
    ends.pieces(0, block, [&](size_t off, size_t len, int piece) {
      storeBytes(ctx, recv + off, piece == 1 ? from + off : ends.copied(endBytes, off, piece), len);
    });
    storeFence();
  } else {
    warnOff(op, r, mapped);
  }
  if (Status s = sendAll(prims, root, &done, sizeof done); !s) return s;
  if (!mapped)
    if (Status s = recvAll(prims, root, recv, block); !s) return s;
  if (mapped) ZCOLL_TRACE(Coll, r, "broadcast #{}: zero copy over the root's shared buffer (ends {} + {} bytes copied)",
                          op.seq, ends.head, ends.tail);
  *ran = true;
  return Status::ok();
}

}  // namespace

Status zeroCopyCollective(const OpArgs& op, AlgoContext& ctx, bool* ran) {
  *ran = false;
  const int n = ctx.nranks, r = ctx.rank;
  Transport* t = ctx.transport;
  const std::string_view coll = collectiveName(op.coll);
  const BufferBytes bytes = bufferBytes(op, n);
  const bool pushes = op.coll == Collective::AllReduce;  // writes into the peers' recvbuffs
  OpArgs ctrl = op;  // the messages of the rounds are bytes
  ctrl.dtype = DataType::Uint8;
  Primitives prims(ctrl, ctx, kZeroCopyName);
  if (op.coll == Collective::Broadcast) return broadcastZeroCopy(op, ctx, prims, ran);

  // Per-op arrays in the communicator's scratch (no allocation per call): round 2's messages received
  // and this rank's, the ends received in round 1, every rank's buffers as mapped here, source and
  // destination pointers, votes.
  const size_t nn = static_cast<size_t>(n), maxMsg = kVoteBytes + 2 * kEndMax, maxEnds = 2 * kEndMax;
  auto* msgs = static_cast<uint8_t*>(
      ctx.scratch->get((nn + 1) * maxMsg + nn * (maxEnds + sizeof(Hello) + 4 * sizeof(void*) + 1)));
  if (!msgs) return systemError(fmt::format("{} #{} ({}): scratch memory", coll, op.seq, kZeroCopyName), ENOMEM);
  uint8_t* myMsg = msgs + nn * maxMsg;
  uint8_t* endsIn = myMsg + maxMsg;
  auto* hellos = reinterpret_cast<Hello*>(endsIn + nn * maxEnds);
  auto** recvs = reinterpret_cast<uint8_t**>(hellos + nn);
  auto** dsts = recvs + nn;
  auto** sends = reinterpret_cast<const uint8_t**>(static_cast<void*>(dsts + nn));
  auto** srcs = sends + nn;
  auto* votes = reinterpret_cast<uint8_t*>(srcs + nn);

  // Round 1: offers and references. Both buffers are asked (not one after a refusal): a plain
  // buffer is adopted on its second use.
  // The higher buffer first: in the brk heap, its check vouches for the one below (ExportScope).
  Hello mine{signature(op), {}};
  ExportScope scope;
  bool sendShared = false, recvShared = !pushes;
  auto exportSend = [&] { sendShared = t->exportMemory(op.sendbuf, bytes.send, &mine.refs.send, &scope); };
  auto exportRecv = [&] { recvShared = t->exportMemory(op.recvbuf, bytes.recv, &mine.refs.recv, &scope); };
  if (pushes && reinterpret_cast<uintptr_t>(op.recvbuf) > reinterpret_cast<uintptr_t>(op.sendbuf)) {
    exportRecv();
    exportSend();
  } else {
    exportSend();
    if (pushes) exportRecv();
  }
  mine.offer.shared = sendShared && recvShared;
  // One generation for both refs: the second export may have ended an older registration (a peer
  // seeing the generation change between the two imports would unmap the first one it just made).
  mine.refs.send.freeGeneration = mine.refs.recv.freeGeneration = sharedMemFreeGeneration();
  mine.offer.head = std::max(mine.refs.send.head, pushes ? mine.refs.recv.head : 0u);
  mine.offer.tail = std::max(mine.refs.send.tail, pushes ? mine.refs.recv.tail : 0u);
  // This rank's ends go right behind its offer, as one chunk: when every rank's are the op's (buffers
  // placed alike, as one allocator places them), no round carries them.
  const size_t es = dataTypeSize(op.dtype);
  const size_t myHead = wholeElems(mine.offer.head, es), myTail = wholeElems(mine.offer.tail, es);
  // (Not with a chunk too small for the offer, which then goes in pieces: ZCOLL_CHUNK_SIZE is at least 8.)
  const bool oneChunk = sizeof(Hello) <= prims.chunkElems();
  mine.offer.endsFollow = oneChunk && mine.offer.shared && myHead + myTail > 0 && myHead <= kEndMax &&
                          myTail <= kEndMax && myHead + myTail <= std::min(bytes.send, prims.chunkElems());
  const auto* in = static_cast<const uint8_t*>(op.sendbuf);
  if (mine.offer.endsFollow) {
    std::memcpy(myMsg, in, myHead);
    std::memcpy(myMsg + myHead, in + bytes.send - myTail, myTail);
  }
  if (!oneChunk) {
    if (Status s = exchange(prims, ctx, &mine, sizeof mine, reinterpret_cast<uint8_t*>(hellos)); !s) return s;
  } else {
    // Every rank sends all before it receives: a FIFO holds the two chunks without its reader.
    for (int k = 1; k < n; ++k) {
      const int p = patterns::mod(r + k, n);
      if (Status s = prims.send(p, &mine, sizeof mine); !s) return s;
      if (mine.offer.endsFollow)
        if (Status s = prims.send(p, myMsg, myHead + myTail); !s) return s;
    }
  }
  for (int k = 1; k < n; ++k) {
    const int p = patterns::mod(r - k, n);
    if (oneChunk)
      if (Status s = prims.recv(p, &hellos[p], sizeof(Hello)); !s) return s;
    const Offer& o = hellos[p].offer;
    if (Status s = sameOp(op, o, mine.offer, p, r); !s) return s;
    if (!o.endsFollow) continue;
    const size_t h = wholeElems(o.head, es), tl = wholeElems(o.tail, es);
    if (!oneChunk || h > kEndMax || tl > kEndMax || h + tl > prims.chunkElems())
      return remoteError("{} #{} ({}): rank {} sent ends of {} + {} bytes (at most {} each, {} together)", coll,
                         op.seq, kZeroCopyName, p, h, tl, kEndMax, prims.chunkElems());
    if (Status s = prims.recv(p, endsIn + static_cast<size_t>(p) * maxEnds, h + tl); !s) return s;
  }
  std::memcpy(static_cast<void*>(&hellos[r]), &mine, sizeof mine);  // the bytes the peers received
  // The op's ends: the most of any rank's, in whole elements. Round 1 carried them when every rank's are these.
  bool all = true, endsSent = true;
  Ends ends{0, 0, bytes.send};
  for (int p = 0; p < n; ++p) {
    const Offer& o = hellos[p].offer;
    all = all && o.shared != 0;
    ends.head = std::max(ends.head, wholeElems(o.head, es));
    ends.tail = std::max(ends.tail, wholeElems(o.tail, es));
  }
  for (int p = 0; p < n; ++p) {
    const Offer& o = hellos[p].offer;
    endsSent = endsSent && wholeElems(o.head, es) == ends.head && wholeElems(o.tail, es) == ends.tail &&
               (o.endsFollow != 0 || ends.head + ends.tail == 0);
  }
  // Every rank saw the same offers: all fall back together.
  if (!all || ends.head > kEndMax || ends.tail > kEndMax || ends.head + ends.tail > ends.size) return Status::ok();

  // The same messages as the last op that ran zero copy (every rank decides alike: all saw these
  // messages and that op's): every rank mapped these buffers then and maps them now from its cache.
  ZeroCopyMemo* memo = ctx.zeroCopyMemo;
  const size_t helloBytes = nn * sizeof(Hello);
  const bool known = memo && memo->hellos.size() == helloBytes &&
                     std::memcmp(memo->hellos.data(), hellos, helloBytes) == 0;
  // Round 2, when the ends are still to be sent (ranks whose ends differ) or when a fallback after the
  // work could not start over (all-reduce writes the peers' recvbuffs, an in-place reduce-scatter its
  // own sendbuff): whether this rank mapped every peer, and its sendbuff's ends if round 1 did not
  // carry the op's. Else that vote rides on round 3, and the ranks run the selected algorithm afresh
  // on their untouched inputs if one could not map.
  const bool round2 = !endsSent || (!known && (pushes || op.coll == Collective::ReduceScatter));

  // Map the peers' buffers. A mapping starts at the shared part: the buffer's start is `head` bytes
  // before it.
  sends[r] = in;
  recvs[r] = static_cast<uint8_t*>(op.recvbuf);
  uint8_t mapped = 1;
  for (int p = 0; p < n && mapped; ++p) {
    if (p == r) continue;
    void *s = nullptr, *d = nullptr;
    Status a = t->importMemory(p, hellos[p].refs.send, &s);
    Status b = a && pushes ? t->importMemory(p, hellos[p].refs.recv, &d) : Status::ok();
    if (!a || !b) {
      // Without a vote the peers move the data already (into this rank's recvbuff too): nobody can fall
      // back, so this rank votes "no" in round 3 and every rank fails the op there (never seen: these
      // very buffers were mapped here in the last op).
      if (known && !round2) {
        ZCOLL_WARN(Coll, r, "{} #{} ({}): rank {}'s buffers, mapped here in the last op, could not be mapped again: {}",
                   coll, op.seq, kZeroCopyName, p, (!a ? a : b).message());
      } else {
        warnOff(op, r, !a ? a : b);
      }
      mapped = 0;
      break;
    }
    sends[p] = static_cast<const uint8_t*>(s) - hellos[p].refs.send.head;
    recvs[p] = pushes ? static_cast<uint8_t*>(d) - hellos[p].refs.recv.head : nullptr;
  }

  const size_t msgBytes = kVoteBytes + (endsSent ? 0 : ends.head + ends.tail);
  if (round2) {
    std::memset(myMsg, 0, kVoteBytes);
    myMsg[0] = mapped;
    if (!endsSent) {
      std::memcpy(myMsg + kVoteBytes, in, ends.head);
      std::memcpy(myMsg + kVoteBytes + ends.head, in + ends.size - ends.tail, ends.tail);
    }
    if (Status s = exchange(prims, ctx, myMsg, msgBytes, msgs); !s) return s;
    for (int p = 0; p < n; ++p)
      if (p != r && !msgs[static_cast<size_t>(p) * msgBytes]) mapped = 0;
    if (!mapped) return Status::ok();
  }
  // Where a rank's byte `off` of piece k is read: its own buffer, the middle mapped, the ends copied
  // (in round 1, or else in round 2).
  auto at = [&](int p, size_t off, int piece) {
    const size_t pp = static_cast<size_t>(p);
    return p == r || piece == 1 ? sends[p] + off
                                : ends.copied(endsSent ? endsIn + pp * maxEnds : msgs + pp * msgBytes + kVoteBytes,
                                              off, piece);
  };

  const size_t block = op.count * es;
  auto* recv = static_cast<uint8_t*>(op.recvbuf);
  if (!mapped) {
    // Round 3 says so: nothing to do here.
  } else if (op.coll == Collective::AllReduce) {
    // Slice r of the middle of every sendbuff into slice r of every recvbuff. In place is safe: each
    // block of the slice is read from every buffer before it is written, and no other rank touches
    // the slice. The ends: every rank reduces them into its own recvbuff from the copies.
    const patterns::BlockPartition slices{(ends.size - ends.head - ends.tail) / es, n};
    const size_t begin = ends.head + slices.offset(r) * es, len = slices.size(r) * es;
    for (int p = 0; p < n; ++p) {
      srcs[p] = sends[p] + begin;
      dsts[p] = recvs[p] + begin;
    }
    reduceInto(op, ctx, srcs, n, dsts, n, len);
    auto reduceEnd = [&](size_t off, size_t bytesOf, int piece) {
      for (int p = 0; p < n; ++p) srcs[p] = at(p, off, piece);
      dsts[0] = recv + off;
      reduceInto(op, ctx, srcs, n, dsts, 1, bytesOf);
    };
    ends.pieces(0, ends.head, reduceEnd);
    ends.pieces(ends.size - ends.tail, ends.size, reduceEnd);
  } else if (op.coll == Collective::ReduceScatter) {
    // Block r of every sendbuff into this rank's recvbuff (in place: recvbuff is block r of its own
    // sendbuff, read before written block by block).
    const size_t mine0 = static_cast<size_t>(r) * block;
    ends.pieces(mine0, mine0 + block, [&](size_t off, size_t len, int piece) {
      for (int p = 0; p < n; ++p) srcs[p] = at(p, off, piece);
      dsts[0] = recv + (off - mine0);
      reduceInto(op, ctx, srcs, n, dsts, 1, len);
    });
  } else {
    // Every sendbuff into its block of this rank's recvbuff, starting after its own (the ranks read
    // different peers at once). In place, the own block is there already.
    for (int k = 0; k < n; ++k) {
      const int p = patterns::mod(r + 1 + k, n);
      uint8_t* d = recv + static_cast<size_t>(p) * block;
      if (d == sends[p]) continue;
      ends.pieces(0, block,
                  [&](size_t off, size_t len, int piece) { storeBytes(ctx, d + off, at(p, off, piece), len); });
    }
  }
  storeFence();
  // Round 3, done: nobody returns while a peer still reads its sendbuff or writes its recvbuff.
  if (Status s = exchange(prims, ctx, &mapped, 1, votes); !s) return s;
  for (int p = 0; p < n; ++p)
    if (p != r && !votes[p]) mapped = 0;
  if (!mapped && known)
    return internalError("{} #{} ({}): a rank could not map again the buffers it mapped in the last op (its "
                         "warning says which); the results are incomplete",
                         coll, op.seq, kZeroCopyName);
  if (!mapped) return Status::ok();  // without round 2: the selected algorithm runs instead
  if (memo && !known) {  // known: the memo holds these bytes already
    const auto* sent = reinterpret_cast<const uint8_t*>(hellos);
    memo->hellos.assign(sent, sent + helloBytes);  // the same size each op: no allocation after the first
  }
  ZCOLL_TRACE(Coll, r, "{} #{}: zero copy over {} ranks' shared buffers (ends {} + {} bytes copied, {}; {})", coll,
              op.seq, n, ends.head, ends.tail, endsSent ? "with the offers" : "in round 2",
              round2 ? "round 2 held" : "no round 2");
  *ran = true;
  return Status::ok();
}

}  // namespace zcoll
