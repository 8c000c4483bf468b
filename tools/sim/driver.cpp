// driver.cpp - the ranks of a simulated communicator running an op sweep (driver.hpp).
#include "tools/sim/driver.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>

#include <fmt/format.h>

#include "algorithms/cost_model.hpp"
#include "algorithms/registry.hpp"
#include "algorithms/scratch.hpp"
#include "core/config.hpp"
#include "tests/common/typed.hpp"
#include "transport/wait.hpp"

namespace zcoll::sim {
namespace {

// Page-aligned memory, as zcoll-bench's buffers: the cache model (--llc-bytes) sees their blocks the
// same way in every run, wherever the allocator put them.
using Bytes = std::unique_ptr<unsigned char, void (*)(void*)>;
void* pageAlignedAlloc(size_t bytes) { return std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096); }
Bytes pageAligned(size_t bytes) { return Bytes(static_cast<unsigned char*>(pageAlignedAlloc(bytes)), std::free); }

// Scratch that maps lazily: a page costs memory only once an algorithm touches it (thousands of ranks).
class LazyScratch final : public Scratch {
 public:
  ~LazyScratch() override { release(); }

 protected:
  void* acquire(size_t bytes) override { return pageAlignedAlloc(bytes); }
  void drop(void* p, size_t) override { std::free(p); }
};

// One op's buffers and expected outputs, as the matrix lays them out (tests/common/typed.hpp).
struct Case {
  size_t count = 0;         // the API's count (per-rank blocks for the collectives of nranks blocks)
  size_t sendElems = 0, recvElems = 0;
  std::vector<unsigned char> expected;  // the whole expected output of the op, all ranks' blocks
};

Case makeCase(const Options& a, size_t bytes) {
  Case c;
  const size_t es = dataTypeSize(a.dtype), n = static_cast<size_t>(a.ranks);
  c.count = traits(a.coll).perRankBlocks ? bytes / es / n : bytes / es;
  test::bufferElems(a.coll, c.count, n, &c.sendElems, &c.recvElems);
  if (!a.check) return c;
  const auto t = static_cast<zcollDataType_t>(a.dtype);
  const auto op = static_cast<zcollRedOp_t>(a.op);
  if (traits(a.coll).reduces) {  // element i of the reduction, for every i of the largest output
    const size_t all = std::max(c.sendElems, c.recvElems);
    c.expected.resize(all * es);
    for (size_t i = 0; i < all; ++i) test::storeExpected(t, op, a.ranks, c.expected.data(), i, i);
  }
  return c;
}

// Inputs of `rank` and the number of wrong output elements (matrix_test.cpp's rules, root 0).
void fill(const Options& a, const Case& c, int rank, void* send) {
  const auto op = traits(a.coll).reduces ? static_cast<zcollRedOp_t>(a.op) : zcollSum;
  test::fillInput(static_cast<zcollDataType_t>(a.dtype), op, rank, send, c.sendElems);
}

size_t wrong(const Options& a, const Case& c, int rank, const void* recv) {
  const size_t es = dataTypeSize(a.dtype), n = c.count;
  const auto t = static_cast<zcollDataType_t>(a.dtype);
  std::vector<unsigned char> want(c.recvElems * es);
  size_t elems = c.recvElems;
  switch (a.coll) {
    case Collective::AllReduce: std::memcpy(want.data(), c.expected.data(), n * es); break;
    case Collective::Reduce: if (rank != 0) elems = 0; else std::memcpy(want.data(), c.expected.data(), n * es); break;
    case Collective::ReduceScatter: std::memcpy(want.data(), c.expected.data() + rank * n * es, n * es); break;
    case Collective::Broadcast: test::fillInput(t, zcollSum, 0, want.data(), n); break;
    case Collective::AllGather: case Collective::Gather:
      if (a.coll == Collective::Gather && rank != 0) elems = 0;
      for (int q = 0; q < a.ranks && elems; ++q) test::fillInput(t, zcollSum, q, want.data() + q * n * es, n);
      break;
    case Collective::Scatter: test::fillInput(t, zcollSum, 0, want.data(), n, static_cast<size_t>(rank) * n); break;
    case Collective::AllToAll:
      for (int q = 0; q < a.ranks; ++q)
        test::fillInput(t, zcollSum, q, want.data() + q * n * es, n, static_cast<size_t>(rank) * n);
      break;
    default: break;
  }
  return test::countMismatches(recv, want.data(), elems, es);
}

// The ranks' meeting point between ops: the last to arrive runs `between` and wakes the others. Ops
// start in rank order: where ranks share cores, who starts on each sets which of several steady states
// a loop settles into, and that should not be the order in which the last op ended.
class TaskBarrier {
 public:
  TaskBarrier(Scheduler& s, int n, std::function<void()> between) : sched_(s), n_(n), between_(std::move(between)) {}
  void arriveAndWait() {
    if (++arrived_ < n_) {
      waiting_.push_back(sched_.current());
      sched_.block();
      return;
    }
    between_();
    arrived_ = 0;
    // Apart from waiting_: while this rank yields, one that needs nobody (a broadcast's root) may end
    // its next op and arrive again.
    std::vector<int> others;
    others.swap(waiting_);
    std::sort(others.begin(), others.end());
    const auto after = std::lower_bound(others.begin(), others.end(), sched_.current());
    for (auto t = others.begin(); t != after; ++t) sched_.wake(*t);
    sched_.yield(true);  // the ranks before this one start first (timed: an OS's ranks that share cores)
    for (auto t = after; t != others.end(); ++t) sched_.wake(*t);
  }

 private:
  Scheduler& sched_;
  int n_, arrived_ = 0;
  std::function<void()> between_;
  std::vector<int> waiting_;
};

// Which ranks share a host, as the selector and the hierarchical algorithms see it.
patterns::HostLayout hostsOf(const Topology& topo) {
  std::vector<uint64_t> hostIds;
  for (int r = 0; r < topo.ranks; ++r) hostIds.push_back(static_cast<uint64_t>(topo.hostOf(r)));
  return patterns::HostLayout::fromHostIds(hostIds);
}

}  // namespace

bool sweep(const Options& a, const Topology& topo, const std::vector<size_t>& sizes, const std::string& algo,
           std::vector<Row>* rows, std::string* error) {
  std::vector<AlgoRule> rules;
  if (!algo.empty())
    if (Status s = parseAlgoOverride(std::string(collectiveName(a.coll)) + ":" + algo, &rules); !s) {
      *error = s.message();
      return false;
    }
  const patterns::HostLayout hosts = hostsOf(topo);
  CostModel model;  // the analytic model of this network: its slowest hop, a message's software cost
  const bool network = topo.perHost > 0 && topo.perHost < topo.ranks;  // more than one host
  model.alpha = ((network ? topo.nicAlphaUs : topo.intraAlphaUs) + topo.sendOverheadUs) * 1e-6;
  model.beta = 1.0 / ((network ? topo.nicGBps : topo.intraGBps) * 1e9);
  model.message = topo.sendOverheadUs * 1e-6;
  model.alphaLocal = (topo.intraAlphaUs + topo.sendOverheadUs) * 1e-6;  // a host's links
  model.betaLocal = 1.0 / (topo.intraGBps * 1e9);
  model.chunkBytes = static_cast<double>(a.chunk);
  AlgorithmSelector selector(rules, model, a.ranks, 2048);
  selector.setHosts(hosts);
  Scheduler sched;
  SimNetwork net(topo, sched, static_cast<size_t>(a.chunk), a.slots, !a.nodata);
  net.setReducing(traits(a.coll).reduces);

  const size_t es = dataTypeSize(a.dtype);
  Case current;
  double startUs = 0;
  uint64_t messages = 0;
  double switches = 0;
  std::atomic<bool> abort{false};
  size_t wrongTotal = 0;
  std::string firstFailure;  // the first rank's to fail (the others' then say they were aborted)
  const Algorithm* chosen = nullptr;  // rank 0's, for the row
  size_t k = 0;
  // Every rank's buffers for the largest size, kept from size to size as zcoll-bench's are (--nodata: one
  // pair for all ranks, never touched: sizesOnly, so it costs no memory).
  Options shape = a;
  shape.check = false;
  const Case largest = makeCase(shape, sizes.empty() ? 0 : *std::max_element(sizes.begin(), sizes.end()));
  const size_t sendBytes = largest.sendElems * es + 64, recvBytes = largest.recvElems * es + 64;
  Bytes sharedSend = a.nodata ? pageAligned(sendBytes) : Bytes(nullptr, std::free);
  Bytes sharedRecv = a.nodata ? pageAligned(recvBytes) : Bytes(nullptr, std::free);
  bool timing = false;  // the ops since the last barrier were timed ones (else: a size's warm-up)
  // The size's results go around the cache, as a communicator's host op's do (ZCOLL_STREAM_STORES's default).
  bool streamStores = false;
  const size_t streamBytes = static_cast<size_t>(Config{}.streamBytes);
  auto restart = [&] {
    startUs = net.alignClocks();
    messages = net.messages();
    switches = net.switches();
    timing = true;
  };
  auto between = [&] {  // with every rank stopped: the last op's row, the next op's case
    if (!timing && k > 0 && k <= sizes.size()) {  // warmed up: the timed ops next
      restart();
      return;
    }
    if (k > 0) {
      const size_t bytes = sizes[k - 1];
      rows->push_back({bytes, current.count, (net.latestClock() - startUs) / a.iters, wrongTotal,
                       (net.messages() - messages) / static_cast<uint64_t>(a.iters),
                       chosen ? std::string(chosen->name()) : std::string("?"),
                       (net.switches() - switches) / a.iters});
      wrongTotal = 0;
    }
    if (k < sizes.size()) {
      current = makeCase(a, sizes[k]);
      net.setOpBytes(sizes[k]);
      streamStores = traits(a.coll).streamsResults && opBytes(a.coll, current.count, a.dtype, a.ranks) >= streamBytes;
      restart();
      timing = a.warmup == 0;
    }
    ++k;
  };
  TaskBarrier sync(sched, a.ranks, between);
  auto rankMain = [&](int rank) {
    SimTransport& transport = net.rank(rank);
    LazyScratch scratch;
    Bytes send = a.nodata ? Bytes(nullptr, std::free) : pageAligned(sendBytes);
    Bytes recv = a.nodata ? Bytes(nullptr, std::free) : pageAligned(recvBytes);
    sync.arriveAndWait();  // the first case
    uint64_t seq = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      for (int it = 0; it < a.warmup + a.iters; ++it) {
        if (it == a.warmup && a.warmup > 0) {  // the timed ops start together, from one clock
          transport.opEnded();
          sync.arriveAndWait();
        }
        void* s = nullptr;
        void* r = nullptr;
        if (a.nodata) {
          s = sharedSend.get(), r = sharedRecv.get();
        } else {
          if (it == 0 || a.check) {  // a checked op's inputs afresh (an in-place op overwrote them)
            std::memset(send.get(), 0, current.sendElems * es + 64);
            std::memset(recv.get(), 0xa5, current.recvElems * es + 64);
            if (a.check) fill(a, current, rank, send.get());
          }
          s = send.get(), r = recv.get();
        }
        OpArgs op{a.coll, s, r, current.count, a.dtype, a.op};
        op.root = 0;
        op.seq = seq++;
        const Algorithm* algorithm = nullptr;
        Status st = selector.select(op, a.ranks, &algorithm);
        if (st && !abort.load()) {
          if (rank == 0) chosen = algorithm;
          Waiter waiter(&transport, WaitPolicy{0, 0}, int64_t{600'000}, &abort);
          AlgoContext ctx;
          ctx.rank = rank, ctx.nranks = a.ranks, ctx.transport = &transport, ctx.waiter = &waiter;
          ctx.chunkBytes = static_cast<size_t>(a.chunk), ctx.scratch = &scratch, ctx.hosts = &hosts;
          ctx.sizesOnly = a.nodata;
          ctx.streamStores = streamStores;
          transport.spend(topo.opOverheadUs);
          st = algorithm->run(op, ctx);
        }
        if (!st) {
          if (firstFailure.empty()) firstFailure = fmt::format("rank {}: {}", rank, st.message());
          abort.store(true);
          for (int q = 0; q < a.ranks; ++q) net.rank(q).wake();
        } else if (a.check) {
          wrongTotal += wrong(a, current, rank, r);
        }
      }
      transport.opEnded();
      sync.arriveAndWait();
    }
  };
  for (int r = 0; r < a.ranks; ++r) sched.spawn([&rankMain, r] { rankMain(r); });
  std::vector<int> stuck;
  if (!sched.run(&stuck)) {
    *error = fmt::format("{} of {} ranks wait for what no rank will send (first: rank {}): a deadlock in the algorithm",
                         stuck.size(), a.ranks, stuck.front());
    return false;
  }
  *error = firstFailure;
  return firstFailure.empty();
}

double expectedMedian(std::vector<double> runs, int rounds) {
  if (runs.empty()) return 0;
  std::sort(runs.begin(), runs.end());
  const double k = static_cast<double>(runs.size());
  rounds = std::max(rounds, 1);
  // The j-th smallest of the rounds is at most runs[i] when j or more of them drew one of runs[0..i].
  auto atMost = [rounds](int j, double p) {
    double tail = 0, choose = 1;  // choose: C(rounds, m)
    for (int m = 0; m <= rounds; ++m) {
      if (m >= j) tail += choose * std::pow(p, m) * std::pow(1 - p, rounds - m);
      choose = choose * (rounds - m) / (m + 1);
    }
    return tail;
  };
  auto expectedOrder = [&](int j) {
    double e = 0, below = 0;
    for (size_t i = 0; i < runs.size(); ++i) {
      const double upTo = atMost(j, static_cast<double>(i + 1) / k);
      e += runs[i] * (upTo - below);
      below = upTo;
    }
    return e;
  };
  const int middle = (rounds + 1) / 2;  // and with an even count, the mean of it and the next
  return rounds % 2 ? expectedOrder(middle) : (expectedOrder(middle) + expectedOrder(middle + 1)) / 2;
}

std::vector<std::string> algorithmsOf(Collective coll, const Topology& topo) {
  const patterns::HostLayout hosts = hostsOf(topo);
  std::vector<std::string> out;
  for (const Algorithm* al : allAlgorithms())
    if (al->collective() == coll && al->supportsOn(hosts).isOk()) out.emplace_back(al->name());
  return out;
}

}  // namespace zcoll::sim
