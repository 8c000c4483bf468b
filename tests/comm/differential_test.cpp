// differential_test.cpp - random programs of collectives and point-to-point calls, grouped and
// ungrouped, over 2-5 ranks (threads), one or two communicators, shm and tcp (1 and 2 connections per
// peer), every result checked element by element against a reference computed locally.
//
// Within a group each rank queues its calls in its own random interleaving (collectives of one
// communicator, and transfers between one pair, keep their order, as the API requires); outside
// groups a pair's transfer is a blocking send on one rank and a receive on the other.
// ZCOLL_TEST_DIFF_SECONDS bounds the run (default 20); ZCOLL_TEST_DIFF_SEED replays a run (the seed
// is printed, and every failure names its trial and step).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "zcoll/zcoll.h"

namespace zcoll::test {
namespace {

enum class Kind { AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, AllToAll, Gather, Scatter, P2P, Count };
constexpr const char* kKindNames[] = {"allreduce", "allgather", "reducescatter", "broadcast", "reduce",
                                      "alltoall",  "gather",    "scatter",       "p2p"};

struct Transfer {
  int src, dst;
  size_t count;
};

struct Op {
  Kind kind = Kind::AllReduce;
  int comm = 0;
  size_t count = 0;
  zcollDataType_t dtype = zcollInt32;
  zcollRedOp_t redop = zcollSum;
  int root = 0;
  bool inPlace = false;
  uint32_t salt = 0;                // makes every op's inputs distinct
  std::vector<Transfer> transfers;  // P2P
};

struct Step {
  bool grouped = false;
  std::vector<Op> ops;  // ungrouped: one collective, or one transfer between two ranks
};

struct Shape {
  const char* transports;
  int sockets;
  int nranks;
  int ncomms;
  int chunkBytes;
};

size_t elemSize(zcollDataType_t t) { return t == zcollInt64 || t == zcollFloat64 ? 8 : 4; }

double get(const std::vector<char>& b, zcollDataType_t t, size_t i) {
  switch (t) {
    case zcollInt32: { int32_t v; std::memcpy(&v, b.data() + 4 * i, 4); return v; }
    case zcollInt64: { int64_t v; std::memcpy(&v, b.data() + 8 * i, 8); return static_cast<double>(v); }
    case zcollFloat32: { float v; std::memcpy(&v, b.data() + 4 * i, 4); return v; }
    default: { double v; std::memcpy(&v, b.data() + 8 * i, 8); return v; }
  }
}

void set(std::vector<char>& b, zcollDataType_t t, size_t i, double x) {
  switch (t) {
    case zcollInt32: { int32_t v = static_cast<int32_t>(x); std::memcpy(b.data() + 4 * i, &v, 4); break; }
    case zcollInt64: { int64_t v = static_cast<int64_t>(x); std::memcpy(b.data() + 8 * i, &v, 8); break; }
    case zcollFloat32: { float v = static_cast<float>(x); std::memcpy(b.data() + 4 * i, &v, 4); break; }
    default: std::memcpy(b.data() + 8 * i, &x, 8);
  }
}

// Small integers: every sum of up to 5 is exact in every type.
double value(uint32_t salt, int rank, size_t i) {
  return static_cast<double>((salt * 131u + static_cast<uint32_t>(rank) * 17u + static_cast<uint32_t>(i) * 7u) % 61u) - 30;
}

double reduce(zcollRedOp_t op, uint32_t salt, int nranks, size_t i) {
  double acc = value(salt, 0, i);
  for (int r = 1; r < nranks; ++r) {
    const double v = value(salt, r, i);
    acc = op == zcollSum ? acc + v : op == zcollMax ? std::max(acc, v) : std::min(acc, v);
  }
  return acc;
}

// Elements of a rank's send and receive buffers for op.
size_t sendElems(const Op& op, int n) {
  switch (op.kind) {
    case Kind::ReduceScatter: case Kind::AllToAll: case Kind::Scatter: return op.count * n;
    default: return op.count;
  }
}
size_t recvElems(const Op& op, int n) {
  switch (op.kind) {
    case Kind::AllGather: case Kind::AllToAll: case Kind::Gather: return op.count * n;
    default: return op.count;
  }
}

Op randomCollective(std::mt19937& rng, int n, int ncomms) {
  static constexpr size_t kCounts[] = {0, 1, 3, 17, 100, 1000, 5000};
  static constexpr zcollDataType_t kTypes[] = {zcollInt32, zcollInt64, zcollFloat32, zcollFloat64};
  static constexpr zcollRedOp_t kOps[] = {zcollSum, zcollMax, zcollMin};
  Op op;
  op.kind = static_cast<Kind>(rng() % static_cast<unsigned>(Kind::P2P));
  op.comm = static_cast<int>(rng() % static_cast<unsigned>(ncomms));
  op.count = kCounts[rng() % std::size(kCounts)];
  if (op.kind == Kind::ReduceScatter || op.kind == Kind::AllToAll || op.kind == Kind::Scatter || op.kind == Kind::AllGather ||
      op.kind == Kind::Gather)
    op.count = std::min<size_t>(op.count, 1000);
  op.dtype = kTypes[rng() % std::size(kTypes)];
  op.redop = kOps[rng() % std::size(kOps)];
  op.root = static_cast<int>(rng() % static_cast<unsigned>(n));
  op.inPlace = (op.kind == Kind::AllReduce || op.kind == Kind::Broadcast) && rng() % 2;
  op.salt = static_cast<uint32_t>(rng());
  return op;
}

Op randomTransfers(std::mt19937& rng, int n, int ncomms, int howMany, bool allowSelf) {
  Op op;
  op.kind = Kind::P2P;
  op.comm = static_cast<int>(rng() % static_cast<unsigned>(ncomms));
  op.dtype = rng() % 2 ? zcollInt32 : zcollFloat64;
  op.salt = static_cast<uint32_t>(rng());
  static constexpr size_t kCounts[] = {0, 1, 5, 64, 1000, 3000};
  for (int k = 0; k < howMany; ++k) {
    Transfer t{static_cast<int>(rng() % static_cast<unsigned>(n)), static_cast<int>(rng() % static_cast<unsigned>(n)),
               kCounts[rng() % std::size(kCounts)]};
    if (t.src == t.dst && !allowSelf) t.dst = (t.src + 1) % n;
    op.transfers.push_back(t);
  }
  return op;
}

std::vector<Step> randomProgram(std::mt19937& rng, const Shape& s, int steps) {
  std::vector<Step> prog;
  for (int k = 0; k < steps; ++k) {
    Step st;
    const unsigned what = rng() % 4;
    if (what == 0) {  // ungrouped collective
      st.ops.push_back(randomCollective(rng, s.nranks, s.ncomms));
    } else if (what == 1) {  // ungrouped transfer between two ranks
      st.ops.push_back(randomTransfers(rng, s.nranks, s.ncomms, 1, false));
    } else {  // a group: collectives and transfers on any communicator
      st.grouped = true;
      const int nops = 1 + static_cast<int>(rng() % 5);
      for (int i = 0; i < nops; ++i)
        st.ops.push_back(rng() % 2 ? randomCollective(rng, s.nranks, s.ncomms)
                                   : randomTransfers(rng, s.nranks, s.ncomms, 1 + static_cast<int>(rng() % 6), true));
    }
    prog.push_back(std::move(st));
  }
  return prog;
}

// One rank's buffers for one op (a transfer's: one per transfer this rank takes part in).
struct Buffers {
  std::vector<char> send, recv;
  std::vector<std::vector<char>> out, in;  // per transfer (only those of this rank are sized)
};

zcollResult_t issueCollective(const Op& op, Buffers& b, zcollComm_t comm) {
  const void* sb = op.inPlace ? b.recv.data() : b.send.data();
  void* rb = b.recv.data();
  switch (op.kind) {
    case Kind::AllReduce: return zcollAllReduce(sb, rb, op.count, op.dtype, op.redop, comm, nullptr);
    case Kind::AllGather: return zcollAllGather(sb, rb, op.count, op.dtype, comm, nullptr);
    case Kind::ReduceScatter: return zcollReduceScatter(sb, rb, op.count, op.dtype, op.redop, comm, nullptr);
    case Kind::Broadcast: return zcollBroadcast(sb, rb, op.count, op.dtype, op.root, comm, nullptr);
    case Kind::Reduce: return zcollReduce(sb, rb, op.count, op.dtype, op.redop, op.root, comm, nullptr);
    case Kind::AllToAll: return zcollAlltoAll(sb, rb, op.count, op.dtype, comm, nullptr);
    case Kind::Gather: return zcollGather(sb, rb, op.count, op.dtype, op.root, comm, nullptr);
    case Kind::Scatter: return zcollScatter(sb, rb, op.count, op.dtype, op.root, comm, nullptr);
    default: return zcollInternalError;
  }
}

void fillInputs(const Op& op, int rank, int n, Buffers& b) {
  const size_t es = elemSize(op.dtype);
  if (op.kind == Kind::P2P) {
    b.out.assign(op.transfers.size(), {});
    b.in.assign(op.transfers.size(), {});
    for (size_t t = 0; t < op.transfers.size(); ++t) {
      const Transfer& tr = op.transfers[t];
      if (tr.src == rank) {
        b.out[t].resize(tr.count * es);
        for (size_t i = 0; i < tr.count; ++i) set(b.out[t], op.dtype, i, value(op.salt + static_cast<uint32_t>(t), rank, i));
      }
      if (tr.dst == rank) b.in[t].assign(tr.count * es, 0x5a);
    }
    return;
  }
  b.send.resize(sendElems(op, n) * es);
  b.recv.assign(std::max(recvElems(op, n), sendElems(op, n)) * es, 0x5a);
  std::vector<char>& in = op.inPlace ? b.recv : b.send;
  for (size_t i = 0; i < sendElems(op, n); ++i) set(in, op.dtype, i, value(op.salt, rank, i));
}

// The first wrong element of this rank's results, or "".
std::string check(const Op& op, int rank, int n, const Buffers& b) {
  auto expectAt = [&](const std::vector<char>& buf, size_t i, double want) -> std::string {
    const double got = get(buf, op.dtype, i);
    if (got == want) return "";
    return "element " + std::to_string(i) + ": got " + std::to_string(got) + ", expected " + std::to_string(want);
  };
  std::string e;
  const size_t c = op.count;
  for (size_t i = 0; e.empty() && op.kind != Kind::P2P && i < recvElems(op, n); ++i) {
    const size_t r = i / std::max<size_t>(c, 1), j = i % std::max<size_t>(c, 1);
    switch (op.kind) {
      case Kind::AllReduce: e = expectAt(b.recv, i, reduce(op.redop, op.salt, n, i)); break;
      case Kind::AllGather: e = expectAt(b.recv, i, value(op.salt, static_cast<int>(r), j)); break;
      case Kind::ReduceScatter: e = expectAt(b.recv, i, reduce(op.redop, op.salt, n, rank * c + i)); break;
      case Kind::Broadcast: e = expectAt(b.recv, i, value(op.salt, op.root, i)); break;
      case Kind::Reduce: if (rank == op.root) e = expectAt(b.recv, i, reduce(op.redop, op.salt, n, i)); break;
      case Kind::AllToAll: e = expectAt(b.recv, i, value(op.salt, static_cast<int>(r), rank * c + j)); break;
      case Kind::Gather: if (rank == op.root) e = expectAt(b.recv, i, value(op.salt, static_cast<int>(r), j)); break;
      case Kind::Scatter: e = expectAt(b.recv, i, value(op.salt, op.root, rank * c + i)); break;
      default: break;
    }
  }
  for (size_t t = 0; e.empty() && op.kind == Kind::P2P && t < op.transfers.size(); ++t) {
    const Transfer& tr = op.transfers[t];
    if (tr.dst != rank) continue;
    for (size_t i = 0; e.empty() && i < tr.count; ++i)
      e = expectAt(b.in[t], i, value(op.salt + static_cast<uint32_t>(t), tr.src, i));
    if (!e.empty()) e = "transfer " + std::to_string(t) + " from rank " + std::to_string(tr.src) + ": " + e;
  }
  return e;
}

// One queued call of a group on this rank: a collective, or one side of a transfer.
struct Call {
  size_t op;
  int transfer;  // -1: the collective
  bool isSend;
};

// Runs `prog` as rank `rank`; returns "" or what went wrong first.
std::string runRank(const std::vector<Step>& prog, const Shape& s, int rank, const std::vector<zcollComm_t>& comms,
                    uint32_t shuffleSeed) {
  const int n = s.nranks;
  std::mt19937 rng(shuffleSeed + static_cast<uint32_t>(rank) * 7919u);  // each rank interleaves its own way
  std::vector<Buffers> bufs;
  for (size_t k = 0; k < prog.size(); ++k) {
    const Step& st = prog[k];
    bufs.assign(st.ops.size(), {});
    for (size_t o = 0; o < st.ops.size(); ++o) fillInputs(st.ops[o], rank, n, bufs[o]);
    std::string where = "step " + std::to_string(k) + (st.grouped ? " (group)" : "");
    zcollResult_t res = zcollSuccess;
    if (!st.grouped) {
      const Op& op = st.ops[0];
      zcollComm_t comm = comms[static_cast<size_t>(op.comm)];
      if (op.kind != Kind::P2P) {
        res = issueCollective(op, bufs[0], comm);
      } else {
        const Transfer& tr = op.transfers[0];
        if (rank == tr.src) res = zcollSend(bufs[0].out[0].data(), tr.count, op.dtype, tr.dst, comm, nullptr);
        if (rank == tr.dst) res = zcollRecv(bufs[0].in[0].data(), tr.count, op.dtype, tr.src, comm, nullptr);
      }
    } else {
      // Queues: one per communicator for its collectives, one per (communicator, peer, direction)
      // for transfers; a random merge keeps each queue's order.
      std::vector<std::vector<Call>> queues;
      std::vector<std::tuple<char, int, int>> keys;  // ('c', comm, 0), ('s' or 'r', comm, peer)
      auto queue = [&](char kind, int comm, int peer) -> std::vector<Call>& {
        const auto key = std::make_tuple(kind, comm, peer);
        const auto at = std::find(keys.begin(), keys.end(), key);
        if (at != keys.end()) return queues[static_cast<size_t>(at - keys.begin())];
        keys.push_back(key);
        return queues.emplace_back();
      };
      for (size_t o = 0; o < st.ops.size(); ++o) {
        const Op& op = st.ops[o];
        if (op.kind != Kind::P2P) {
          queue('c', op.comm, 0).push_back(Call{o, -1, false});
          continue;
        }
        for (size_t t = 0; t < op.transfers.size(); ++t) {
          const Transfer& tr = op.transfers[t];
          if (tr.src == rank) queue('s', op.comm, tr.dst).push_back(Call{o, static_cast<int>(t), true});
          if (tr.dst == rank) queue('r', op.comm, tr.src).push_back(Call{o, static_cast<int>(t), false});
        }
      }
      std::vector<size_t> next(queues.size(), 0);
      size_t left = 0;
      for (auto& q : queues) left += q.size();
      if (zcollGroupStart() != zcollSuccess) return where + ": zcollGroupStart failed";
      while (left > 0 && res == zcollSuccess) {
        size_t q = rng() % queues.size();
        while (next[q] == queues[q].size()) q = (q + 1) % queues.size();
        const Call c = queues[q][next[q]++];
        --left;
        const Op& op = st.ops[c.op];
        zcollComm_t comm = comms[static_cast<size_t>(op.comm)];
        if (c.transfer < 0) {
          res = issueCollective(op, bufs[c.op], comm);
        } else {
          const Transfer& tr = op.transfers[static_cast<size_t>(c.transfer)];
          res = c.isSend ? zcollSend(bufs[c.op].out[static_cast<size_t>(c.transfer)].data(), tr.count, op.dtype,
                                     tr.dst, comm, nullptr)
                         : zcollRecv(bufs[c.op].in[static_cast<size_t>(c.transfer)].data(), tr.count, op.dtype,
                                     tr.src, comm, nullptr);
        }
      }
      const zcollResult_t end = zcollGroupEnd();
      if (res == zcollSuccess) res = end;
    }
    if (res != zcollSuccess) return where + ": " + zcollGetErrorString(res) + ": " + zcollGetLastError(nullptr);
    for (size_t o = 0; o < st.ops.size(); ++o)
      if (std::string e = check(st.ops[o], rank, n, bufs[o]); !e.empty())
        return where + ", " + kKindNames[static_cast<int>(st.ops[o].kind)] + " on communicator " +
               std::to_string(st.ops[o].comm) + ": " + e;
  }
  return "";
}

uint32_t seedFromEnv() {
  if (const char* v = getenv("ZCOLL_TEST_DIFF_SEED")) return static_cast<uint32_t>(strtoul(v, nullptr, 10));
  return std::random_device{}();
}

TEST(Differential, RandomProgramsMatchTheReference) {
  const char* secondsText = getenv("ZCOLL_TEST_DIFF_SECONDS");
  const double seconds = secondsText ? atof(secondsText) : 20.0;
  const uint32_t seed = seedFromEnv();
  std::printf("differential: seed %u (ZCOLL_TEST_DIFF_SEED=%u replays it), %.0f s\n", seed, seed, seconds);
  static const Shape kTransports[] = {{"shm", 1, 0, 0, 0}, {"tcp", 1, 0, 0, 0}, {"tcp", 2, 0, 0, 0}};
  static constexpr int kChunks[] = {256, 4096, 0};
  const auto start = std::chrono::steady_clock::now();
  long trials = 0, steps = 0;
  long perTransport[std::size(kTransports)] = {};
  for (uint32_t trial = 0;; ++trial) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > seconds) break;
    std::mt19937 rng(seed + trial * 1000003u);
    const size_t which = trial % std::size(kTransports);
    Shape s = kTransports[which];
    s.nranks = 2 + static_cast<int>(rng() % 4);
    s.ncomms = 1 + static_cast<int>(rng() % 2);
    s.chunkBytes = kChunks[rng() % std::size(kChunks)];
    const std::vector<Step> prog = randomProgram(rng, s, 10 + static_cast<int>(rng() % 30));
    const uint32_t shuffleSeed = static_cast<uint32_t>(rng());

    setenv("ZCOLL_SOCKETS_PER_PEER", std::to_string(s.sockets).c_str(), 1);
    std::vector<zcollUniqueId> ids(static_cast<size_t>(s.ncomms));
    for (auto& id : ids) ASSERT_EQ(zcollGetUniqueId(&id), zcollSuccess);
    std::vector<std::string> errors(static_cast<size_t>(s.nranks));
    std::vector<std::thread> ranks;
    for (int r = 0; r < s.nranks; ++r)
      ranks.emplace_back([&, r] {
        zcollConfig_t cfg = ZCOLL_CONFIG_INITIALIZER;
        cfg.transports = s.transports;
        cfg.timeoutMs = 60000;
        if (s.chunkBytes) cfg.chunkBytes = s.chunkBytes;
        std::vector<zcollComm_t> comms;
        for (const zcollUniqueId& id : ids) {
          zcollComm_t c = nullptr;
          if (zcollCommInitRankConfig(&c, s.nranks, id, r, &cfg) != zcollSuccess) {
            errors[static_cast<size_t>(r)] = std::string("init: ") + zcollGetLastError(nullptr);
            break;
          }
          comms.push_back(c);
        }
        if (errors[static_cast<size_t>(r)].empty()) errors[static_cast<size_t>(r)] = runRank(prog, s, r, comms, shuffleSeed);
        for (zcollComm_t c : comms) zcollCommDestroy(c);
      });
    for (auto& t : ranks) t.join();
    unsetenv("ZCOLL_SOCKETS_PER_PEER");
    for (int r = 0; r < s.nranks; ++r)
      if (!errors[static_cast<size_t>(r)].empty())
        FAIL() << "seed " << seed << ", trial " << trial << " (" << s.transports << ", " << s.sockets
               << " socket(s) per peer, " << s.nranks << " ranks, " << s.ncomms << " communicator(s), chunk "
               << s.chunkBytes << "), rank " << r << ": " << errors[static_cast<size_t>(r)];
    ++trials;
    steps += static_cast<long>(prog.size());
    ++perTransport[which];
  }
  std::printf("differential: %ld trials, %ld steps, no mismatch (shm %ld, tcp/1 %ld, tcp/2 %ld trials)\n", trials,
              steps, perTransport[0], perTransport[1], perTransport[2]);
  EXPECT_GT(trials, 0);
}

}  // namespace
}  // namespace zcoll::test
