// sim_test.cpp - the simulator (transport/sim, tools/sim): every algorithm correct element by element
// at 1,024 ranks, the textbook step counts and times, multi-host layouts, bad topologies.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "tools/sim/driver.hpp"
#include "transport/sim/scheduler.hpp"
#include "transport/sim/sim_transport.hpp"

namespace zcoll::sim {
namespace {

// 1,024; fewer under the sanitizers (tests/meson.build sets ZCOLL_TEST_SIM_RANKS), whose every memory
// access is checked.
int manyRanks() {
  const char* v = std::getenv("ZCOLL_TEST_SIM_RANKS");
  return v ? std::atoi(v) : 1024;
}

Topology topology(const std::string& text, int ranks) {
  Topology t;
  std::string error;
  EXPECT_TRUE(Topology::parse(text, ranks, &t, &error)) << error;
  return t;
}

// Runs the sizes of `coll` by `algo` ("" automatic) in one sweep with every element checked, `iters`
// ops back to back per size; returns their rows.
std::vector<Row> sweepChecked(Collective coll, const std::string& algo, const Topology& topo,
                              const std::vector<size_t>& sizes, int iters, int warmup = 0) {
  Options o;
  o.coll = coll, o.ranks = topo.ranks, o.check = true, o.iters = iters, o.warmup = warmup;
  std::vector<Row> rows;
  std::string error;
  EXPECT_TRUE(sweep(o, topo, sizes, algo, &rows, &error)) << collectiveName(coll) << " " << algo << ": " << error;
  return rows;
}

// One size of it: its row (after `warmup` untimed ops).
Row runChecked(Collective coll, const std::string& algo, const Topology& topo, size_t bytes, int iters = 1,
               int warmup = 0) {
  const std::vector<Row> rows = sweepChecked(coll, algo, topo, {bytes}, iters, warmup);
  return rows.empty() ? Row{} : rows[0];
}

TEST(Sim, EveryAlgorithmIsRightElementByElementAtThousandsOfRanks) {
  const int n = manyRanks();
  const Topology topo = topology("1host", n);
  for (Collective coll : {Collective::AllReduce, Collective::AllGather, Collective::ReduceScatter}) {
    // All-reduce: 4 elements per rank; the others: 4 per rank's block.
    const size_t bytes = 4 * sizeof(float) * static_cast<size_t>(n);
    std::vector<std::string> algos = algorithmsOf(coll, topo);
    algos.insert(algos.begin(), "");
    for (const std::string& algo : algos) {
      const Row r = runChecked(coll, algo, topo, bytes);
      EXPECT_EQ(r.wrong, 0u) << collectiveName(coll) << " by " << (algo.empty() ? "auto" : algo) << " at " << n;
      EXPECT_GT(r.us, 0) << collectiveName(coll) << " " << algo;
    }
  }
}

// On hosts of 8 ranks (rail-optimised and a 4:1 fat tree), the hierarchical algorithms join in.
TEST(Sim, EveryAllReduceIsRightOnHosts) {
  for (const char* text : {"hosts:8", "fattree:8:4"}) {
    const Topology topo = topology(text, 64);
    const std::vector<std::string> algos = algorithmsOf(Collective::AllReduce, topo);
    EXPECT_NE(std::find(algos.begin(), algos.end(), "hier"), algos.end()) << text;
    for (const std::string& algo : algos)
      EXPECT_EQ(runChecked(Collective::AllReduce, algo, topo, 64 << 10).wrong, 0u) << text << " " << algo;
  }
}

// The textbook counts, exactly: ring 2(N-1) steps, recursive halving-doubling 2 log2 N, recursive
// doubling log2 N, messages per rank; and the ring's time is its steps times the model's cost of a
// step (sim_transport.hpp: every received chunk of a reducing op at the reduction rate).
TEST(Sim, TextbookStepCountsAndTimes) {
  const int n = 64;
  const Topology topo = topology("1host", n);
  const size_t bytes = 8 * static_cast<size_t>(n);  // 8 bytes (2 floats) per rank's block
  const double steps = 2.0 * (n - 1);
  const Row ring = runChecked(Collective::AllReduce, "ring", topo, bytes);
  EXPECT_EQ(static_cast<double>(ring.messages) / n, steps);
  EXPECT_EQ(static_cast<double>(runChecked(Collective::AllReduce, "rhd", topo, bytes).messages) / n, 2 * std::log2(n));
  EXPECT_EQ(static_cast<double>(runChecked(Collective::AllReduce, "rd", topo, bytes).messages) / n, std::log2(n));
  const double b = 8;  // a step's chunk
  const double step = topo.sendOverheadUs + b / (topo.copyGBps * 1e3) + topo.intraAlphaUs + b / (topo.intraGBps * 1e3) +
                      b / (topo.reduceGBps * 1e3);
  EXPECT_NEAR(ring.us, steps * step, 1e-6 * steps * step);
}

// Links are shared: a ring over 2 hosts of 2 sends each boundary rank's 2 (N-1)/N of the data through its
// NIC back to back, so with the rest free (no latency, compute or fast-link time) the op takes exactly
// that at the NIC's rate; with 2 cores shared by 4 ranks whose every transfer takes one, twice that.
// (A reservation that started while one link was still busy once let 2 transfers share a NIC.)
TEST(Sim, ALinkCarriesOneTransferAtATime) {
  Topology topo = topology("hosts:2", 4);
  topo.intraAlphaUs = topo.nicAlphaUs = topo.sendOverheadUs = 0;
  topo.intraGBps = topo.copyGBps = topo.reduceGBps = 1e5;
  topo.nicGBps = 1;
  const size_t bytes = 4 << 20;
  const double expected = 2.0 * 3 / 4 * static_cast<double>(bytes) / 1e3;  // us at 1 GB/s
  EXPECT_NEAR(runChecked(Collective::AllReduce, "ring", topo, bytes).us, expected, 1e-3 * expected);
  topo = topology("hosts:1", 4);
  topo.nicAlphaUs = topo.sendOverheadUs = 0;
  topo.copyGBps = topo.reduceGBps = 1e5;
  topo.nicGBps = 1;
  topo.cores = 2;
  EXPECT_NEAR(runChecked(Collective::AllReduce, "ring", topo, bytes).us, 2 * expected, 0.02 * expected);
}

// 2 ranks on 1 core, 1 us per message and nothing else (no hand-off yet).
Topology twoRanksOnOneCore() {
  Topology topo = topology("1host", 2);
  topo.intraAlphaUs = 1;
  topo.sendOverheadUs = 0;
  topo.intraGBps = topo.copyGBps = topo.reduceGBps = 1e6;
  topo.cores = 1;
  return topo;
}

// Ranks sharing a core take turns on it: a rank that waits yields, and the core goes to the next
// rank of the core (a hand-off h) whether or not that one can run. A 2-rank ring on 1 core, 1 us per
// message and nothing else, h >= 1 (a switch outlasts a message): rank 0 runs at 0, sends its step-1
// chunk and yields; rank 1 runs at h (that chunk there since 1), sends both its chunks and yields;
// rank 0 runs at 2h (they came at h + 1), ends and yields; rank 1 runs at 3h: 3h in all. With no
// cost to a switch, 2 (as with a core each).
TEST(Sim, RanksThatShareACoreTakeTurnsOnIt) {
  Topology topo = twoRanksOnOneCore();
  for (double h : {0.0, 1.0, 2.0}) {
    topo.handoffUs = h;
    EXPECT_NEAR(runChecked(Collective::AllReduce, "ring", topo, 8).us, h == 0 ? 2 : 3 * h, 1e-6) << h;
  }
  topo.cores = 0;
  EXPECT_NEAR(runChecked(Collective::AllReduce, "ring", topo, 8).us, 2, 1e-6);
}

// Ops back to back: recursive doubling on 2 ranks on 1 core, 1 us per message, h = 2. A rank sends,
// spins s and yields; the other gets the core h later, finds that chunk there (h >= 1 us) and goes on
// into the next op until it waits in turn: one switch per op, h + s, the message inside the switch
// (charging every wait a hand-off after its message made it 2h + 1). perf counts one context switch
// per op there too (2 ranks on 1 core, 64 B: 1.0 for recursive doubling, 2.0 for the ring). Every
// element right, op after op; with a core each, 1 us per op.
TEST(Sim, RanksThatShareACoreSwitchOncePerOpOfOneStep) {
  Topology topo = twoRanksOnOneCore();
  topo.handoffUs = 2;
  const int iters = 200;
  for (double spin : {0.0, 0.5}) {
    topo.spinUs = spin;
    const Row r = runChecked(Collective::AllReduce, "rd", topo, 8, iters);
    EXPECT_EQ(r.wrong, 0u) << spin;
    EXPECT_NEAR(r.us, 2 + spin, 0.02) << spin;  // and the first op's start, spread over 200
    EXPECT_NEAR(r.switches, 1, 0.01) << spin;
  }
  topo.cores = 0;
  EXPECT_NEAR(runChecked(Collective::AllReduce, "rd", topo, 8, iters).us, 1, 1e-6);
}

// More than 2 ranks on a core: Linux hands the core to the rank that ran least recently (perf sched, 8
// ranks on 2 cores: 99.9% of the switches), so the ranks go round in one order, set by who ran first,
// and a ring needs one round of turns per op where that order follows its chunks and two where it runs
// against them: perf counts 3 or 6 switches per op for a 3-rank ring on 1 core at 8 B, from process run
// to process run (zcoll-bench -b 8 -e 8, taskset -c 0). Rank order (startSeed 0) follows the ring.
// Every element right.
TEST(Sim, RanksThatShareACoreGoRoundLeastRecentlyRunFirst) {
  Topology topo = twoRanksOnOneCore();
  topo.ranks = 3;
  topo.handoffUs = 2;
  topo.spinUs = 0.2;
  std::set<long> rounds;
  for (uint64_t seed = 0; seed < 8; ++seed) {
    topo.startSeed = seed;
    const Row r = runChecked(Collective::AllReduce, "ring", topo, 8, 200);
    EXPECT_EQ(r.wrong, 0u) << seed;
    const double perRank = r.switches / topo.ranks;
    EXPECT_NEAR(perRank, std::round(perRank), 0.02) << seed;
    rounds.insert(std::lround(perRank));
    if (seed == 0) {
      EXPECT_EQ(std::lround(perRank), 1);
    }
  }
  EXPECT_EQ(rounds, (std::set<long>{1, 2}));
}

// 2 ranks (`text`: on one host, or on two) whose links and NICs move 1 GB/s and nothing else costs: a
// 2-rank ring of 1 MiB sends 1 MiB per rank through them, 1,048.576 us.
Topology twoRanksAtOneGBps(const std::string& text) {
  Topology topo = topology(text, 2);
  topo.intraAlphaUs = topo.nicAlphaUs = topo.sendOverheadUs = 0;
  topo.copyGBps = topo.reduceGBps = 1e6;
  topo.intraGBps = topo.nicGBps = 1;
  return topo;
}

// Ops of at most Topology::cacheBytes move within a host at cachedGBps: the ring of 1 MiB at 1 GB/s,
// twice as long at 0.5.
TEST(Sim, OpsUpToTheCacheEdgeMoveAtTheCachedRate) {
  Topology topo = twoRanksAtOneGBps("1host");
  topo.cachedGBps = 0.5;
  const size_t bytes = 1 << 20;
  for (size_t edge : {size_t{0}, bytes / 2, bytes}) {
    topo.cacheBytes = edge;
    const double expected = (edge >= bytes ? 2 : 1) * 1048.576;
    EXPECT_NEAR(runChecked(Collective::AllReduce, "ring", topo, bytes).us, expected, 1e-5 * expected) << edge;
  }
}

// Past Topology::llcBytes: what a host's cache does not hold moves over its memory, one link at dramGBps
// beside the ranks' compute and links. The 2-rank ring of 1 MiB reads and writes 4 MiB per rank and op
// (its input and output once, its slots' 256 KiB chunks written and read): with a cache that holds
// nothing, 8 MiB over a memory of 0.01 GB/s, 838,860.8 us; over one of 1e6 GB/s the links' 1,048.576.
// A cache that holds it all costs nothing once warm (zcoll-sim --warmup), however slow the memory.
TEST(Sim, WhatTheLastLevelCacheDoesNotHoldMovesOverMemory) {
  Topology topo = twoRanksAtOneGBps("1host");
  const size_t bytes = 1 << 20;
  topo.llcBytes = 1;
  for (double gbps : {0.01, 1e6}) {
    topo.dramGBps = gbps;
    const double expected = gbps < 1 ? 8 * 1048576 / (gbps * 1e3) : 1048.576;
    EXPECT_NEAR(runChecked(Collective::AllReduce, "ring", topo, bytes).us, expected, 1e-5 * expected) << gbps;
  }
  topo.llcBytes = size_t{64} << 20;
  topo.dramGBps = 0.01;
  EXPECT_GT(runChecked(Collective::AllReduce, "ring", topo, bytes).us, 1e5);  // cold: the first op fills it
  EXPECT_NEAR(runChecked(Collective::AllReduce, "ring", topo, bytes, 1, 1).us, 1048.576, 1e-2);
}

// With Topology::cores the hosts are one machine: one cache and one memory for all, through which a message
// between hosts goes at the sender (its slot), in the socket's buffer (nicReceiverCopies) and at the
// receiver (its slot). The 2-rank ring of 1 MiB over hosts, with a cache that holds nothing and a memory of
// 0.01 GB/s: each rank's buffers, 2 MiB, and its 1 MiB sent four times over: 12 MiB on the one memory,
// 1,258,291.2 us. Hosts apart (no cores), each has a memory of its own for its rank's buffers alone:
// 2 MiB, 209,715.2 us.
TEST(Sim, HostsOnOneMachineShareItsCacheAndMessagesGoThroughIt) {
  Topology topo = twoRanksAtOneGBps("hosts:1");
  topo.nicGBps = 1e6;
  topo.nicReceiverCopies = true;
  topo.llcBytes = 1;
  topo.dramGBps = 0.01;
  EXPECT_NEAR(runChecked(Collective::AllReduce, "ring", topo, 1 << 20).us, 209715.2, 1e-5 * 209715.2);
  topo.cores = 2;
  EXPECT_NEAR(runChecked(Collective::AllReduce, "ring", topo, 1 << 20).us, 1258291.2, 1e-5 * 1258291.2);
}

// Topology::privateBytes: each core's own cache in front of the host's for the caller's buffers. The 2-rank
// ring of 1 MiB reads 1 MiB of its input and writes 1 MiB of its output per rank and op: with an own
// cache that holds nothing, 2 MiB per rank at 1 GB/s, 2,097.152 us (links and compute next to free, the
// host's cache warm); with one that holds it all, next to nothing.
TEST(Sim, WhatACoresOwnCacheDoesNotHoldCostsItsRank) {
  Topology topo = twoRanksAtOneGBps("1host");
  topo.intraGBps = 1e6;
  topo.llcBytes = size_t{64} << 20;
  topo.dramGBps = 1e6;
  topo.privateMissGBps = 1;
  for (size_t own : {size_t{1}, size_t{64} << 20}) {
    topo.privateBytes = own;
    const double us = runChecked(Collective::AllReduce, "ring", topo, 1 << 20, 1, 1).us;
    if (own == 1) EXPECT_NEAR(us, 2097.152, 1e-2);
    else EXPECT_LT(us, 0.1);
  }
}

// The cache model itself: it holds what fits; a streamed store goes around it (and takes its block out);
// data cycled through a cache of half its size keeps most of what fits (bimodal insertion), where
// replacing a block at random on every miss would keep far less.
TEST(Sim, TheCacheHoldsWhatFitsAndPartOfACycleThatDoesNot) {
  using A = SimCache::Access;
  SimCache cache(1 << 20);
  EXPECT_EQ(cache.touch(1, 0, 512 << 10, A::Read), size_t{512} << 10);
  EXPECT_EQ(cache.touch(1, 0, 512 << 10, A::Write), 0u);
  EXPECT_EQ(cache.touch(1, 100, 5000, A::Read), 0u);
  EXPECT_EQ(cache.touch(3, 0, 4096, A::Read), 4096u);  // another space
  EXPECT_EQ(cache.touch(1, 0, 4096, A::Stream), 4096u);
  EXPECT_EQ(cache.touch(1, 0, 4096, A::Read), 4096u);
  const size_t cycle = 2 << 20;
  size_t missed = 0;
  for (int pass = 0; pass < 20; ++pass) missed = cache.touch(5, 0, cycle, A::Read);
  EXPECT_GT(cycle - missed, cycle / 3);
  EXPECT_LE(cycle - missed, cycle / 2);
}

// Set-associative (ways): a working set as large as the cache overfills some of its sets and misses
// there, where the fully associative one holds it all; half as large, it misses almost nothing. One set
// as large as the cache is the fully associative cache.
TEST(Sim, ASetAssociativeCacheMissesInTheSetsAWorkingSetOverfills) {
  using A = SimCache::Access;
  const size_t size = 1 << 20;
  SimCache full(size), sets(size, 4096, 16), one(size, 4096, size / 4096);
  for (SimCache* c : {&full, &sets, &one}) EXPECT_EQ(c->touch(1, 0, size, A::Read), size);
  EXPECT_EQ(full.touch(1, 0, size, A::Read), 0u);
  EXPECT_EQ(one.touch(1, 0, size, A::Read), 0u);
  const size_t missed = sets.touch(1, 0, size, A::Read);
  EXPECT_GT(missed, size / 20);
  EXPECT_LT(missed, size / 2);
  SimCache half(size, 4096, 16);
  EXPECT_EQ(half.touch(2, 0, size / 2, A::Read), size / 2);
  EXPECT_LT(half.touch(2, 0, size / 2, A::Read), size / 20);
}

// Messages between hosts of at most Topology::nicBufferBytes move at nicBufferedGBps: the ring of 1 MiB
// over NICs at 1 GB/s sends 256 KiB chunks, half as long at 2.
TEST(Sim, MessagesThatFitTheSocketBufferMoveAtItsRate) {
  Topology topo = twoRanksAtOneGBps("hosts:1");
  topo.nicBufferedGBps = 2;
  for (size_t edge : {size_t{0}, size_t{128} << 10, size_t{256} << 10}) {
    topo.nicBufferBytes = edge;
    const double expected = 1048.576 / (edge >= (size_t{256} << 10) ? 2 : 1);
    EXPECT_NEAR(runChecked(Collective::AllReduce, "ring", topo, 1 << 20).us, expected, 1e-5 * expected) << edge;
  }
}

// A message to a rank on its sender's core (ranks taking turns) moves past Topology::nicWindowBytes at the
// NIC's rate: its receiver cannot drain the socket meanwhile. A 2-rank broadcast of 256 KiB (one chunk)
// over NICs of 1 GB/s, buffered at 2: on 2 cores 131.072 us; on 1, 128 KiB at 2 and 128 KiB at 1,
// 196.608 (turns that cost nothing).
TEST(Sim, MessagesToARankOnTheSendersCoreMovePastTheWindowAtTheNicRate) {
  Topology topo = twoRanksAtOneGBps("hosts:1");
  topo.nicBufferedGBps = 2;
  topo.nicBufferBytes = size_t{1} << 20;
  topo.nicWindowBytes = size_t{128} << 10;
  for (int cores : {2, 1}) {
    topo.cores = cores;
    const double expected = cores == 2 ? 131.072 : 196.608;
    EXPECT_NEAR(runChecked(Collective::Broadcast, "ring", topo, 256 << 10).us, expected, 1e-3) << cores;
  }
}

// Messages between hosts of more than Topology::nicSegmentBytes take nicSegmentedUs more: a 2-rank ring
// of 64 B over NICs of 1 us latency sends 2 messages per rank, 2 us; of 64 KiB at 1e6 GB/s, 2 us plus 2
// of 3 us each, 8.
TEST(Sim, MessagesOfSeveralSegmentsTakeLonger) {
  Topology topo = twoRanksAtOneGBps("hosts:1");
  topo.nicAlphaUs = 1;
  topo.nicGBps = 1e6;
  topo.nicSegmentBytes = 1448;
  topo.nicSegmentedUs = 3;
  EXPECT_NEAR(runChecked(Collective::AllReduce, "ring", topo, 64).us, 2, 1e-3);
  EXPECT_NEAR(runChecked(Collective::AllReduce, "ring", topo, 64 << 10).us, 8, 1e-3);
}

// Topology::nicAckUs: a message whose receiver sent nothing back since the pair's last one costs it
// that much more. A ring of 64 B over NICs of 1 us: at 2 ranks every message has its reply (2 steps, 2
// us); at 3 each goes one way, and each of the 4 steps takes 1 us and an ACK of 5 before the next send.
TEST(Sim, OneWayMessagesCostTheirReceiverAnAck) {
  for (int n : {2, 3}) {
    Topology topo = twoRanksAtOneGBps("hosts:1");
    topo.ranks = n;
    topo.nicAlphaUs = 1;
    topo.nicGBps = 1e6;
    for (double ack : {0.0, 5.0}) {
      topo.nicAckUs = ack;
      const double expected = n == 2 ? 2 : 4 * (1 + ack);
      EXPECT_NEAR(runChecked(Collective::AllReduce, "ring", topo, 64).us, expected, 1e-3) << n << " " << ack;
    }
  }
}

// Topology::nicReceiverCopies: a message between hosts also takes its receiver its bytes at its rate. A
// 2-rank broadcast of 1 MiB over NICs at 1 GB/s sends 4 chunks of 256 KiB back to back, 1,048.576 us;
// copied out too, the last one's copy ends a chunk's time later, 1,310.72.
TEST(Sim, ReceiversOfAMessageBetweenHostsCopyItOut) {
  Topology topo = twoRanksAtOneGBps("hosts:1");
  for (bool copies : {false, true}) {
    topo.nicReceiverCopies = copies;
    const double expected = copies ? 1310.72 : 1048.576;
    EXPECT_NEAR(runChecked(Collective::Broadcast, "ring", topo, 1 << 20).us, expected, 1e-5 * expected) << copies;
  }
}

// Topology::receiverReads stands for shared memory: a pairwise exchange within a host sends one chunk
// ahead of the one it awaits there, as the shm transport's does, and all slots between hosts.
TEST(Sim, ReceiversThatReadExchangeOneChunkAhead) {
  Scheduler scheduler;
  for (bool reads : {false, true}) {
    Topology topo = topology("hosts:2", 4);
    topo.receiverReads = reads;
    SimNetwork net(topo, scheduler, 256 << 10, 4, false);
    EXPECT_EQ(net.rank(0).exchangeWindow(1), reads ? 1 : 4);
    EXPECT_EQ(net.rank(0).exchangeWindow(2), 4);
  }
}

// Topology::inlineBytes stands for shm's small chunks, which travel in their headers and take no data
// slot: a sender runs 64 of them ahead of its receiver (its headers) and 4 larger ones (its data slots),
// and a small one still goes while the data slots are full; without it, 4 of any size.
TEST(Sim, SmallChunksWithinAHostTakeAHeaderAndNoDataSlot) {
  for (size_t inlineBytes : {size_t{0}, size_t{496}}) {
    Scheduler scheduler;
    Topology topo = topology("1host", 2);
    topo.receiverReads = true;
    topo.inlineBytes = inlineBytes;
    SimNetwork net(topo, scheduler, 256 << 10, 4, false);
    auto ahead = [&](int from, size_t bytes) {  // chunks sent before the receiver takes any
      SendSlot slot;
      int n = 0;
      for (SimTransport& t = net.rank(from); n < 100 && t.tryAcquireSendFor(1 - from, bytes, &slot); ++n)
        t.commitSend(1 - from, bytes);
      return n;
    };
    EXPECT_EQ(ahead(0, 496), inlineBytes ? 64 : 4) << inlineBytes;
    EXPECT_EQ(ahead(1, 497), 4) << inlineBytes;
    EXPECT_EQ(ahead(1, 8), inlineBytes ? 60 : 0) << inlineBytes;
    SendSlot slot;
    RecvChunk chunk;
    ASSERT_TRUE(net.rank(0).tryRecv(1, &chunk));
    EXPECT_EQ(chunk.bytes, 497u);
    net.rank(0).releaseRecv(1);  // a data slot back: a chunk of any size goes
    EXPECT_TRUE(net.rank(1).tryAcquireSend(0, &slot)) << inlineBytes;
  }
}

// Topology::receiverReads: a chunk moves as its receiver reads it, on that rank's own time, so the
// reading and the reduction add up. A 2-rank rd of 1 MiB, links and reductions at 1 GB/s, copies free:
// read 1 MiB, then reduce it, 2,097.152 us; through a link of its own, the transfer of the next 256 KiB
// chunk overlaps the reduction of the last: 1,048.576 + 262.144.
TEST(Sim, ReceiversThatReadAChunkDoNotOverlapItWithTheirReduction) {
  Topology topo = twoRanksAtOneGBps("1host");
  topo.reduceGBps = 1;
  for (bool reads : {false, true}) {
    topo.receiverReads = reads;
    const double expected = reads ? 2097.152 : 1310.72;
    EXPECT_NEAR(runChecked(Collective::AllReduce, "rd", topo, 1 << 20).us, expected, 1e-5 * expected) << reads;
  }
}

// --nodata moves no data (Primitives skips its copies and reductions: AlgoContext::sizesOnly) and
// prices every chunk as the real run does: the same times and messages, per algorithm.
TEST(Sim, SizesOnlyTakesTheRealRunsTimes) {
  const Topology topo = topology("hosts:8", 64);
  for (Collective coll : {Collective::AllReduce, Collective::AllGather, Collective::ReduceScatter}) {
    for (const std::string& algo : algorithmsOf(coll, topo)) {
      const size_t bytes = 1 << 20;
      const Row real = runChecked(coll, algo, topo, bytes);
      Options o;
      o.coll = coll, o.ranks = topo.ranks, o.nodata = true;
      std::vector<Row> rows;
      std::string error;
      ASSERT_TRUE(sweep(o, topo, {bytes}, algo, &rows, &error)) << error;
      EXPECT_EQ(rows[0].us, real.us) << collectiveName(coll) << " " << algo;
      EXPECT_EQ(rows[0].messages, real.messages) << collectiveName(coll) << " " << algo;
    }
  }
}

TEST(Sim, ExpectedMedianIsWhatTheMedianOfRoundsAveragesOverEveryDraw) {
  const std::vector<double> runs = {20, 4, 1, 9, 4};  // unsorted, one value twice
  EXPECT_DOUBLE_EQ(expectedMedian(runs, 1), 38.0 / 5);  // one round: the mean
  EXPECT_DOUBLE_EQ(expectedMedian({}, 3), 0);
  for (int rounds : {2, 3, 4}) {  // every draw of `rounds` runs, equally likely
    double sum = 0, draws = 0;
    std::vector<size_t> pick(static_cast<size_t>(rounds), 0);
    for (;;) {
      std::vector<double> v;
      for (size_t i : pick) v.push_back(runs[i]);
      std::sort(v.begin(), v.end());
      const size_t m = v.size() / 2;
      sum += v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2, draws += 1;
      size_t d = 0;
      while (d < pick.size() && ++pick[d] == runs.size()) pick[d++] = 0;
      if (d == pick.size()) break;
    }
    EXPECT_NEAR(expectedMedian(runs, rounds), sum / draws, 1e-9) << rounds << " rounds";
  }
}

TEST(Sim, BadTopologiesNameWhatIsWrong) {
  Topology t;
  std::string error;
  EXPECT_FALSE(Topology::parse("hosts:3", 8, &t, &error));
  EXPECT_NE(error.find("'3'"), std::string::npos) << error;
  EXPECT_FALSE(Topology::parse("fattree:4:0.5", 8, &t, &error));
  EXPECT_NE(error.find("oversubscription"), std::string::npos) << error;
  EXPECT_FALSE(Topology::parse("torus", 8, &t, &error));
  EXPECT_NE(error.find("expected 1host"), std::string::npos) << error;
}

}  // namespace
}  // namespace zcoll::sim
