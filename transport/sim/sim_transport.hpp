// sim_transport.hpp - the sim transport: every rank of a communicator as a cooperative task of one
// thread (scheduler.hpp), on a modelled network in virtual time (tools/sim: zcoll-sim).
//
// The algorithms run unchanged on it: a chunk committed to a peer carries its arrival time, computed
// from the sender's clock and the links it crosses; a rank that receives it moves its own clock to
// that time at least. Every rank's clock also advances by the compute it does, as an upper bound:
// each received chunk of an op that reduces costs its bytes at the reduction rate (also the copy-only
// phases of its algorithm), of other ops at the copy rate, and each committed chunk its bytes at the
// copy rate (a reduction straight into the send slot is counted twice). Links are shared: a transfer
// starts when the sender's egress and the receiver's ingress are both free; each link keeps its
// reservations in virtual time, so a transfer the tasks happen to reach late still takes the earliest
// gap its links share, and two that truly overlap are served in the order the tasks commit them.
// With Topology::cores, compute and transfers also take one of that many cores shared by all ranks;
// with fewer cores than ranks, rank r runs on core r % cores (its transfers too), one rank at a time,
// as an OS runs ranks that spin and yield: a rank that waits longer than Topology::spinUs yields, and
// the core's other ranks get it in turn, the one that ran least recently first (Linux's order for
// ranks that yield, kept through an op's start), each turn a hand-off (Topology::handoffUs) and a
// spin; a rank that can run takes the core at its turn, one that cannot yields again. The scheduler
// then runs the tasks in the order of their clocks, so that these decisions see every earlier event. A
// rank waits (and may yield) until a chunk is committed, then reads it on its core till it arrives.
// Ops of at most Topology::cacheBytes move within a host at cachedGBps (a CPU's private cache); what a
// host's last-level cache does not hold (Topology::llcBytes) also moves over its memory (dramGBps),
// and what a core's own cache does not hold of the caller's buffers costs its rank more
// (privateMissGBps); with Topology::cores all hosts are one machine with one such cache, through which
// a message between them goes at both ends. A message between hosts that its receiver does not answer
// costs it an ACK (nicAckUs); one may also take its receiver its bytes (nicReceiverCopies: a kernel's
// socket copies it at both ends, through its buffer). Simplifications: a fat tree divides every flow
// between hosts by its oversubscription (as under full load); a cross-rail hop adds its time but
// reserves no link. A rank that waits blocks its task until a commit or release towards it; slots
// exist per pair once used (a ring's rank touches 2 of N).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "transport/sim/cache.hpp"
#include "transport/sim/scheduler.hpp"
#include "transport/transport.hpp"

namespace zcoll::sim {

// The machine: hosts of `perHost` ranks joined by fast links (NVLink-like), a NIC per rank, and a
// fabric between hosts.
struct Topology {
  enum class Fabric { Rail, FatTree };
  int ranks = 2;
  int perHost = 0;              // 0: every rank on one host
  Fabric fabric = Fabric::Rail;
  double oversubscription = 1;  // fat tree: bisection = NICs' bandwidth / this
  double intraAlphaUs = 0.7, intraGBps = 150;  // between the ranks of a host (per rank's port)
  double nicAlphaUs = 3.5, nicGBps = 25;       // a rank's NIC (each way)
  double copyGBps = 300, reduceGBps = 150;     // compute: copying, reducing (per rank)
  double sendOverheadUs = 0.2;                 // a message's software cost at the sender
  double recvOverheadUs = 0;                   // and at the receiver
  double opOverheadUs = 0;                     // a call's cost at each rank before its op moves data
  // Ops of at most cacheBytes (0: none) move between a host's ranks at cachedGBps instead: on a CPU
  // host their chunks are still in the writer's private cache when read, at another rate than later.
  size_t cacheBytes = 0;
  double cachedGBps = 0;
  // A host's last-level cache, shared by its ranks (0: none modelled): the slots within a host and the
  // caller's buffers (as Primitives reports them) go through it (cache.hpp), and what a rank reads or
  // writes that it does not hold also moves over the host's memory, one link at dramGBps that its
  // ranks share, beside the rank's compute (the rates above are those of memory in cache): a step
  // ends when both have.
  size_t llcBytes = 0;
  double dramGBps = 0;
  // With llcBytes: each core's own cache (0: none modelled; with cores = 0, each rank's), in front of the
  // host's for the caller's buffers: what a rank touches of them that it does not hold but the host's
  // cache does costs the rank those bytes at privateMissGBps more on its core. (Slots are left out: a
  // chunk read from another core's writes is the link's rate.)
  size_t privateBytes = 0;
  double privateMissGBps = 0;
  size_t llcWays = 0;  // the host's cache in sets of this many blocks (SimCache's ways; 0: one set)
  // Messages between hosts of at most nicBufferBytes (0: none) move at nicBufferedGBps: on a software
  // network (tcp) they fit the receiver's socket buffer, larger ones wait on its window.
  size_t nicBufferBytes = 0;
  double nicBufferedGBps = 0;
  // With ranks taking turns: a message to a rank on its sender's own core, which cannot drain the socket
  // while the sender runs, moves only its first nicWindowBytes (0: no such limit) at nicBufferedGBps and
  // the rest at nicGBps (on tcp, what a sender gets into its socket before the receiver must run).
  size_t nicWindowBytes = 0;
  // Messages between hosts of more than nicSegmentBytes (0: none) take nicSegmentedUs more: on tcp, a
  // message of several segments wakes its receiver before all of it is there.
  size_t nicSegmentBytes = 0;
  double nicSegmentedUs = 0;
  // A message between hosts costs its receiver nicAckUs more on its core when it has sent nothing back
  // to the sender since the pair's previous message: on tcp, its ACK then goes as a packet of its own
  // (one-way traffic, as a ring's of more than 2 ranks), else it rides on the reply.
  double nicAckUs = 0;
  // A message between hosts also takes its receiver its bytes at the message's rate, on its core, once
  // it has arrived: on a software network (tcp) the kernel copies it out of the socket buffer there as
  // it copied it in on the sender's.
  bool nicReceiverCopies = false;
  // Within a host, a chunk moves as its receiver reads it (CPUs sharing memory): the link's time is the
  // receiver's own, after the commit and the link's latency, not a pipe of its own beside the ranks; and
  // a pairwise exchange there sends one chunk ahead of the one it awaits (shm's exchange window).
  bool receiverReads = false;
  // With receiverReads, within a host: a chunk of at most inlineBytes travels in its header and takes no
  // data slot, so that a sender may run `headers` small chunks ahead of its receiver, the data slots
  // bounding only larger ones (shm's FIFO: shm_layout.hpp's kInlineBytes and kMaxSlots). 0: none.
  size_t inlineBytes = 0;
  int headers = 64;
  // Ranks taking turns: 0 starts them in rank order on each core, another value in a pseudo-random one
  // of its own (an OS's state at a run's start).
  uint64_t startSeed = 0;
  // 0: every rank has a core of its own. Else every rank's compute and software costs, and every
  // transfer (a software network: kernel copies), take one of this many cores shared by all ranks,
  // and with fewer cores than ranks the ranks take turns on them (rank r on core r % cores) - the
  // simulated job on one machine (tools/sim-validate on this one).
  int cores = 0;
  // With fewer cores than ranks: a rank that waits (its chunk or slot comes later than its clock)
  // spins spinUs on its core, then yields it to the other ranks of the core in turn; each turn costs
  // handoffUs (a context switch).
  double handoffUs = 0;
  double spinUs = 0;

  // "1host" (all on one host), "hosts:G" (rail-optimised, G ranks per host) or "fattree:G:R" (R: the
  // oversubscription ratio); false with a message naming the part that is wrong.
  static bool parse(const std::string& text, int ranks, Topology* out, std::string* error);
  std::string describe() const;
  int hostOf(int rank) const { return perHost > 0 ? rank / perHost : 0; }
};

// One slot of a pair's FIFO: the committed chunk, copied out of the pair's staging area at its size.
struct SimSlot {
  std::vector<char> payload;
  const void* at = nullptr;  // the memory it lives in, for the caches: its own, or its data slot's
  size_t bytes = 0;
  double sentUs = 0;     // when the sender committed it: the receiver sees it from then
  double arrivalUs = 0;  // when the chunk is at the receiver
  double freeUs = 0;     // when the receiver handed the slot back
};

// The FIFO from one rank to another: slots the sender fills in order and the receiver empties in order.
struct SimPair {
  std::vector<SimSlot> slots;  // with inline chunks (Topology::inlineBytes), the headers
  uint64_t committed = 0;
  uint64_t released = 0;
  // With inline chunks: the data slots of the larger ones, apart (when each was handed back).
  std::vector<double> dataFreeUs;
  uint64_t dataCommitted = 0, dataReleased = 0;
  // Whether a chunk of `bytes` goes in a data slot of its own: with inline chunks, only a larger one.
  bool takesDataSlot(size_t bytes, size_t inlineBytes) const { return !dataFreeUs.empty() && bytes > inlineBytes; }
  uint64_t repliesSeen = 0;  // the reverse pair's commits when this pair's last chunk was released
};

class SimTransport;

// The network every rank's transport shares: the topology, the links' busy times, the pairs.
class SimNetwork {
 public:
  // chunkBytes: a slot's size; data: whether slots hold the bytes (false: every slot aliases one
  // buffer, for sizes that would not fit otherwise - results are then meaningless).
  SimNetwork(const Topology& topo, Scheduler& scheduler, size_t chunkBytes, int slotsPerPair, bool data);
  ~SimNetwork();
  const Topology& topology() const { return topo_; }
  SimTransport& rank(int r) { return *ranks_[static_cast<size_t>(r)]; }
  int size() const { return topo_.ranks; }
  // Whether a received chunk costs the reduction rate (the running op reduces) or the copy rate.
  void setReducing(bool reducing) { reducing_ = reducing; }
  // The running op's size (zcoll-bench's size column): up to Topology::cacheBytes, a host's links move
  // at cachedGBps.
  void setOpBytes(size_t bytes) { cached_ = bytes <= topo_.cacheBytes && topo_.cachedGBps > 0; }
  // All clocks to the latest of them (between ops, with every rank stopped): returns it.
  double alignClocks();
  double latestClock() const;
  uint64_t messages() const { return messages_; }
  // Ranks taking turns: the core switches so far, counting the average turns of ranks that still wait.
  double switches() const { return switches_; }

 private:
  friend class SimTransport;
  SimPair& pair(int from, int to);
  const SimPair* findPair(int from, int to) const;  // null if it was never used
  // Where pair (from, to) is kept: flat_'s index, or pairs_'s key.
  size_t flatIndex(int from, int to) const {
    return static_cast<size_t>(from) * static_cast<size_t>(topo_.ranks) + static_cast<size_t>(to);
  }
  static uint64_t pairKey(int from, int to) { return (static_cast<uint64_t>(from) << 32) | static_cast<uint32_t>(to); }
  // The transfer of `bytes` from `from` to `to` leaving at `departUs`: its arrival.
  double transfer(int from, int to, size_t bytes, double departUs);
  // A message's time between hosts at each end by its size (at a socket buffer's rate or the NIC's, and
  // past a window at the NIC's between ranks on one core), before a fabric's share.
  double nicUs(int from, int to, size_t bytes) const;

  Topology topo_;
  Scheduler& scheduler_;
  size_t chunkBytes_;
  int slots_;
  bool data_;
  bool reducing_ = false;
  // A host's link rate for the running op (setOpBytes).
  double intraGBps() const { return cached_ ? topo_.cachedGBps : topo_.intraGBps; }
  bool cached_ = false;
  // Topology::llcBytes: each host's cache (one for all with Topology::cores), and what `bytes` missed there
  // cost.
  std::vector<SimCache> caches_;
  int memoryOf(int rank) const { return caches_.size() == 1 ? 0 : topo_.hostOf(rank); }
  SimCache& cacheOf(int rank) { return caches_[static_cast<size_t>(memoryOf(rank))]; }
  std::vector<SimCache> privates_;  // Topology::privateBytes: per core (per rank without Topology::cores)
  SimCache* privateOf(int rank) {
    if (privates_.empty()) return nullptr;
    return &privates_[static_cast<size_t>(topo_.cores > 0 ? rank % topo_.cores : rank)];
  }
  double missUs(size_t bytes) const { return static_cast<double>(bytes) / (topo_.dramGBps * 1e3); }
  std::vector<char> shared_;  // the one buffer of every slot without data
  // Slots keep their chunk's memory for the next one (no allocation per chunk) while all of it stays
  // under this; beyond it a released slot gives its memory back (N^2 pairs of a direct algorithm).
  static constexpr size_t kRetainBytes = size_t{256} << 20;
  size_t retained_ = 0;
  std::vector<std::unique_ptr<SimTransport>> ranks_;
  // Pairs by (from, to): a flat table up to kFlatRanks ranks (a lookup is an index), a hash map above.
  static constexpr int kFlatRanks = 2048;
  std::vector<std::unique_ptr<SimPair>> flat_;
  std::unordered_map<uint64_t, std::unique_ptr<SimPair>> pairs_;
  // A link's reservations in virtual time (start -> end, us), for the current op.
  // Reservations that end before every rank's clock (floorUs_) can serve no later request: take()
  // drops them, so memory follows the reservations still ahead (16,384 ranks at 1 GiB).
  struct Link {
    std::map<double, double> busy;
    double firstFree(double t, double duration) const;
    void take(double start, double end, double floorUs);
  };
  // The earliest start >= t at which both links (and a core, with Topology::cores) are free for
  // `duration`; reserves it. `from`: the sending rank.
  double reserve(Link& a, Link& b, double t, double duration, int from);
  // Compute of `duration` from t by `rank` on a core (a shared one with Topology::cores): its end.
  double compute(int rank, double t, double duration);
  // The core for work of `rank` from t: its own where ranks take turns, else the one free soonest.
  Link* coreFor(int rank, double t, double duration);
  std::vector<Link> egress_, ingress_, nicOut_, nicIn_;  // per rank
  std::vector<Link> cores_;  // Topology::cores of them: what each is busy with (compute, transfers)
  std::vector<Link> drams_;  // per cache modelled (caches_): its memory's transfers of what missed
  uint64_t messages_ = 0;
  // The earliest clock of all ranks, refreshed once per `ranks` messages (a scan of every clock).
  double floorUs_ = 0;
  uint64_t floorAt_ = 0;
  void refreshFloor();

  // Fewer cores than ranks: who runs on each core, or since when its ranks (all waiting) take turns.
  struct Cpu {
    int runner = -1;          // the rank that runs there (-1: none)
    bool cycling = false;     // every rank of the core waits: each spins in turn and yields
    double cycleStart = 0;    // when the turns began (the last runner's yield)
    std::vector<int> order;   // the ranks in the order of their turns (the one that yielded at the end)
    bool opening = false;     // the turns of an op's start: the first is no switch (the core was nobody's)
    uint64_t epoch = 0;       // bumped whenever the core changes hands
    std::vector<int> queue;   // ranks that can run, while another does
  };
  bool turns_ = false;
  std::vector<Cpu> cpus_;
  double switches_ = 0;
  // Turns taken on all cores so far; the ranks' first turns are under kStartTurns (in start order).
  static constexpr uint64_t kStartTurns = 1000;
  uint64_t turnsTaken_ = kStartTurns;
  Cpu& cpuOf(int rank) { return cpus_[static_cast<size_t>(rank % topo_.cores)]; }
  int ranksOn(int core) const;  // ranks r with r % cores == core
  // Rank r stops running at t (it yields after its spin, or its ops of a size ended): its core's other
  // ranks take turns, the least recently run first, then r, until one that can run gets its turn.
  void letGo(SimTransport& r, double t);
  // From t the ranks of `core` (all waiting) take turns on it, the least recently run first (ties: in
  // order after the one at place `last` of the core).
  void startTurns(int core, double t, int last);
  // At t (a run's or an op's start) every shared core's ranks begin their turns (startTurns).
  void openTurns(double t);
  // Rank r can run from its clock on: it gets its core at its next turn, or at once if it is free; while
  // another rank runs there, after that one's next yield (the task blocks till then).
  void takeCore(SimTransport& r);
};

class SimTransport final : public Transport {
 public:
  SimTransport(SimNetwork& net, int rank) : net_(net), rank_(rank) {}
  std::string_view name() const override { return "sim"; }
  size_t chunkCapacity() const override { return net_.chunkBytes_; }
  int slotsPerPeer() const override { return net_.slots_; }
  // A pairwise exchange within a host whose receivers read the chunks sends one ahead of the one it
  // awaits, as the shm transport's does; elsewhere all slots.
  int exchangeWindow(int peer) const override {
    const Topology& t = net_.topo_;
    return t.receiverReads && t.hostOf(peer) == t.hostOf(rank_) ? 1 : net_.slots_;
  }
  bool tryAcquireSend(int peer, SendSlot* slot) override { return acquire(peer, SIZE_MAX, slot); }
  bool tryAcquireSendFor(int peer, size_t bytes, SendSlot* slot) override { return acquire(peer, bytes, slot); }
  void commitSend(int peer, size_t bytes) override;
  bool tryRecv(int peer, RecvChunk* chunk) override;
  void releaseRecv(int peer) override;
  uint32_t prepareSleep() override { return doorbell_; }
  void cancelSleep() override {}
  void sleep(uint32_t token, int64_t maxNs) override;
  void wake() override { ring(); }
  bool modelsUserMemory() const override { return !net_.caches_.empty(); }
  void touchUserMemory(const void* p, size_t bytes, bool write, bool stream) override;

  double clockUs() const { return clockUs_; }
  void setClockUs(double t) { clockUs_ = t; }
  // Software work of `us` on this rank (on its core; with ranks taking turns, once it holds it), which
  // ends no sooner than the memory transfers of the bytes it missed (missed()).
  void spend(double us) {
    if (away_ && net_.turns_) net_.takeCore(*this);
    clockUs_ = std::max(net_.compute(rank_, clockUs_, us), memoryUntilUs_);
  }
  // The rank's ops of a size ended (it meets the others): with ranks taking turns, its core is free.
  void opEnded();

 private:
  SimPair& out(int peer);
  SimPair& in(int peer);
  void ring(double byUs = 0);  // a commit or release towards this rank at byUs (its clock at least)
  // The clock after waiting for something ready at readyUs (with ranks taking turns, at its core's
  // next turn for it if it yielded).
  void resumeAt(double readyUs);
  // Ranks taking turns: lets every rank whose clock is before t act first.
  void at(double t);
  // Ranks taking turns: at t, this rank stops running and its core goes to the others in turn.
  void yieldCore(double t);
  // A send slot to `peer` for a chunk of `bytes` (SIZE_MAX: not known yet), with a data slot of its own
  // where the pair takes one for that size (SimPair::takesDataSlot).
  bool acquire(int peer, size_t bytes, SendSlot* slot);
  friend class SimNetwork;

  SimNetwork& net_;
  int rank_;
  double clockUs_ = 0;
  uint32_t doorbell_ = 0;  // every task runs on one thread: plain data
  bool blocked_ = false;
  // Ranks taking turns: this rank does not run (it waits, or is between ops), since waitFromUs_ if >= 0.
  bool away_ = true;
  double waitFromUs_ = -1;
  int turn_ = 0;       // its place in its core's order of turns (SimNetwork::Cpu::order)
  uint64_t lastTurn_ = 0;  // when it last held its core, in turns taken (SimNetwork::turnsTaken_)
  // A rank writes a chunk here, and its commit keeps exactly its bytes in the slot: memory follows the
  // data in flight, not the N^2 pairs of a direct algorithm at thousands of ranks. One suffices: every
  // algorithm commits a slot before it takes the next (acquired_ checks it).
  std::vector<char> staging_;
  int acquired_ = -1;
  std::vector<SimPair*> outFlat_, inFlat_;      // by peer, up to SimNetwork::kFlatRanks ranks
  std::unordered_map<int, SimPair*> out_, in_;  // by peer, above
  // Bytes this rank's step touched that its host's cache did not hold: they move over the host's
  // memory from its clock on, beside its compute (a prefetched stream), and the step ends after both.
  void missed(size_t bytes);
  // The copies of a slot's chunk in memory: the sender's (the one within a host), the socket buffer's
  // and the receiver's (between hosts on one machine).
  enum class SlotCopy { Sender = 0, Socket = 1, Receiver = 2 };
  // Copy `copy` of slot s of the pair with `peer` read or written through the cache this rank shares
  // with it (within a host, or on one machine with Topology::cores).
  void touchSlot(int peer, const SimSlot& s, size_t bytes, SimCache::Access access, SlotCopy copy);
  double memoryUntilUs_ = 0;
  int lastOut_ = -1, lastIn_ = -1;                // the last peer of each map's lookups (it repeats)
  SimPair *lastOutPair_ = nullptr, *lastInPair_ = nullptr;
};

}  // namespace zcoll::sim
