// sim_transport.cpp - the network model and the sim transport's FIFOs (sim_transport.hpp).
#include "transport/sim/sim_transport.hpp"


#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <iterator>

#include <fmt/format.h>

namespace zcoll::sim {

namespace {

bool parsePositive(const std::string& s, double* out) {
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end || !(v > 0)) return false;
  *out = v;
  return true;
}

}  // namespace

bool Topology::parse(const std::string& text, int n, Topology* out, std::string* error) {
  Topology t;
  t.ranks = n;
  std::vector<std::string> parts;
  for (size_t at = 0;;) {
    const size_t colon = text.find(':', at);
    parts.push_back(text.substr(at, colon == std::string::npos ? std::string::npos : colon - at));
    if (colon == std::string::npos) break;
    at = colon + 1;
  }
  double g = 0;
  if (parts[0] == "1host" && parts.size() == 1) {
    t.perHost = 0;
  } else if ((parts[0] == "hosts" && parts.size() == 2) || (parts[0] == "fattree" && parts.size() == 3)) {
    if (!parsePositive(parts[1], &g) || g > n || g != static_cast<int>(g) || n % static_cast<int>(g) != 0) {
      *error = fmt::format("--topo {}: '{}' is not a count of ranks per host that divides {}", text, parts[1], n);
      return false;
    }
    t.perHost = static_cast<int>(g);
    if (parts[0] == "fattree") {
      t.fabric = Fabric::FatTree;
      if (!parsePositive(parts[2], &t.oversubscription) || t.oversubscription < 1) {
        *error = fmt::format("--topo {}: '{}' is not an oversubscription ratio >= 1", text, parts[2]);
        return false;
      }
    }
  } else {
    *error = fmt::format("--topo {}: expected 1host, hosts:G or fattree:G:RATIO", text);
    return false;
  }
  *out = t;
  return true;
}

std::string Topology::describe() const {
  std::string shared = cores > 0 ? fmt::format("; {} cores shared by all ranks", cores) : std::string();
  if (cores > 0 && cores < ranks) shared += fmt::format(", in turns (hand-off {} us, spin {} us)", handoffUs, spinUs);
  if (perHost == 0)
    return fmt::format("1 host of {} ranks (links {} us, {} GB/s{})", ranks, intraAlphaUs, intraGBps, shared);
  return fmt::format("{} hosts x {} ranks (links {} us, {} GB/s; NICs {} us, {} GB/s; {}{})", ranks / perHost, perHost,
                     intraAlphaUs, intraGBps, nicAlphaUs, nicGBps,
                     fabric == Fabric::Rail ? std::string("rail-optimised")
                                            : fmt::format("fat tree {}:1", oversubscription),
                     shared);
}

SimNetwork::SimNetwork(const Topology& topo, Scheduler& scheduler, size_t chunkBytes, int slotsPerPair, bool data)
    : topo_(topo),
      scheduler_(scheduler),
      chunkBytes_(chunkBytes),
      slots_(slotsPerPair),
      data_(data) {
  const size_t n = static_cast<size_t>(topo.ranks);
  if (!data_) shared_.resize(chunkBytes_);
  egress_.resize(n), ingress_.resize(n), nicOut_.resize(n), nicIn_.resize(n);
  cores_.resize(static_cast<size_t>(std::max(0, topo.cores)));
  turns_ = topo.cores > 0 && topo.cores < topo.ranks;
  if (turns_) cpus_.resize(static_cast<size_t>(topo.cores));
  if (topo.llcBytes > 0 && topo.dramGBps > 0) {
    // With Topology::cores every host is on one machine: one cache and one memory for all of them.
    const int memories = topo.cores > 0 || topo.perHost <= 0 ? 1 : topo.ranks / topo.perHost;
    caches_.assign(static_cast<size_t>(memories), SimCache(topo.llcBytes, 4096, topo.llcWays));
    drams_.resize(caches_.size());
    if (topo.privateBytes > 0 && topo.privateMissGBps > 0)
      privates_.assign(static_cast<size_t>(topo.cores > 0 ? topo.cores : topo.ranks), SimCache(topo.privateBytes));
  }
  scheduler.setTimed(turns_);
  if (topo.ranks <= kFlatRanks) flat_.resize(n * n);
  for (int r = 0; r < topo.ranks; ++r) ranks_.push_back(std::make_unique<SimTransport>(*this, r));
  if (topo.startSeed != 0) {  // a run that starts from another order of the ranks on their cores
    uint64_t x = topo.startSeed * 0x9e3779b97f4a7c15ull;
    for (auto& r : ranks_) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;  // xorshift64
      r->lastTurn_ = x % kStartTurns;
    }
  }
  openTurns(0);
}

SimNetwork::~SimNetwork() = default;

SimPair& SimNetwork::pair(int from, int to) {
  std::unique_ptr<SimPair>& p = flat_.empty() ? pairs_[pairKey(from, to)] : flat_[flatIndex(from, to)];
  if (!p) {
    p = std::make_unique<SimPair>();
    const bool inlines = topo_.inlineBytes > 0 && topo_.receiverReads && topo_.hostOf(from) == topo_.hostOf(to);
    p->slots.resize(static_cast<size_t>(inlines ? std::max(topo_.headers, slots_) : slots_));
    if (inlines) p->dataFreeUs.assign(static_cast<size_t>(slots_), 0.0);
  }
  return *p;
}

const SimPair* SimNetwork::findPair(int from, int to) const {
  if (!flat_.empty()) return flat_[flatIndex(from, to)].get();
  auto it = pairs_.find(pairKey(from, to));
  return it == pairs_.end() ? nullptr : it->second.get();
}

double SimNetwork::Link::firstFree(double t, double duration) const {
  auto it = busy.upper_bound(t);
  if (it != busy.begin() && std::prev(it)->second > t) t = std::prev(it)->second;
  for (; it != busy.end() && it->first < t + duration; ++it) t = std::max(t, it->second);
  return t;
}

double SimNetwork::reserve(Link& a, Link& b, double t, double duration, int from) {
  if (duration <= 0) return t;
  Link* core = nullptr;
  for (;;) {
    const double ta = a.firstFree(t, duration);
    const double tb = b.firstFree(ta, duration);
    double tc = tb;
    if (!cores_.empty()) {
      core = coreFor(from, tb, duration);
      tc = core->firstFree(tb, duration);
    }
    if (tc == ta) {
      t = ta;
      break;
    }
    t = tc;
  }
  a.take(t, t + duration, floorUs_);
  b.take(t, t + duration, floorUs_);
  if (core) core->take(t, t + duration, floorUs_);
  return t;
}

SimNetwork::Link* SimNetwork::coreFor(int rank, double t, double duration) {
  if (turns_) return &cores_[static_cast<size_t>(rank % topo_.cores)];
  Link* best = &cores_[0];
  double start = best->firstFree(t, duration);
  for (Link& c : cores_) {
    const double s = c.firstFree(t, duration);
    if (s < start) best = &c, start = s;
  }
  return best;
}

double SimNetwork::compute(int rank, double t, double duration) {
  if (cores_.empty() || duration <= 0) return t + duration;
  Link* core = coreFor(rank, t, duration);
  const double start = core->firstFree(t, duration);
  core->take(start, start + duration, floorUs_);
  return start + duration;
}

void SimNetwork::Link::take(double start, double end, double floorUs) {
  while (!busy.empty() && busy.begin()->second < floorUs) busy.erase(busy.begin());
  // Adjacent reservations merge, so that a link busy back to back is one interval to step over.
  constexpr double kTouch = 1e-9;
  auto next = busy.lower_bound(start);
  if (next != busy.end() && next->first <= end + kTouch) {
    end = std::max(end, next->second);
    next = busy.erase(next);
  }
  if (next != busy.begin()) {
    auto prev = std::prev(next);
    if (prev->second >= start - kTouch) {
      prev->second = std::max(prev->second, end);
      return;
    }
  }
  busy.emplace_hint(next, start, end);
}

void SimNetwork::refreshFloor() {
  if (messages_ - floorAt_ < static_cast<uint64_t>(topo_.ranks)) return;
  floorAt_ = messages_;
  double t = ranks_.front()->clockUs();
  for (const auto& r : ranks_) t = std::min(t, r->clockUs());
  floorUs_ = t;
}

double SimNetwork::transfer(int from, int to, size_t bytes, double departUs) {
  refreshFloor();
  const double b = static_cast<double>(bytes);
  const size_t f = static_cast<size_t>(from), t = static_cast<size_t>(to);
  if (topo_.hostOf(from) == topo_.hostOf(to)) {
    if (topo_.receiverReads) return departUs + topo_.intraAlphaUs;  // its bytes: the receiver's reading
    const double busy = b / (intraGBps() * 1e3);  // GB/s = 1e3 bytes per us
    return reserve(egress_[f], ingress_[t], departUs, busy, from) + topo_.intraAlphaUs + busy;
  }
  double busy = nicUs(from, to, bytes);
  double alpha = topo_.nicAlphaUs;
  if (topo_.nicSegmentBytes > 0 && bytes > topo_.nicSegmentBytes) alpha += topo_.nicSegmentedUs;
  if (topo_.fabric == Topology::Fabric::FatTree) {
    busy *= topo_.oversubscription;
  } else if (from % topo_.perHost != to % topo_.perHost) {
    // Rail-optimised: another rail is reached through the host's rank on it (one more hop).
    alpha += topo_.intraAlphaUs + b / (topo_.intraGBps * 1e3);
  }
  return reserve(nicOut_[f], nicIn_[t], departUs, busy, from) + alpha + busy;
}

double SimNetwork::nicUs(int from, int to, size_t bytes) const {
  const double buffered = topo_.nicBufferedGBps > 0 ? topo_.nicBufferedGBps * 1e3 : 0, nic = topo_.nicGBps * 1e3;
  const size_t window = topo_.nicWindowBytes;
  if (buffered > 0 && window > 0 && bytes > window && turns_ && from % topo_.cores == to % topo_.cores)
    return static_cast<double>(window) / buffered + static_cast<double>(bytes - window) / nic;
  const bool fits = buffered > 0 && bytes <= topo_.nicBufferBytes;
  return static_cast<double>(bytes) / (fits ? buffered : nic);
}

double SimNetwork::latestClock() const {
  double t = 0;
  for (const auto& r : ranks_) t = std::max(t, r->clockUs());
  return t;
}

double SimNetwork::alignClocks() {
  const double t = latestClock();
  for (auto& r : ranks_) {
    r->setClockUs(t);
    r->away_ = true;
    r->waitFromUs_ = -1;
    // lastTurn_ stays: an OS's scheduler keeps its order from size to size
    scheduler_.setKey(r->rank_, t);
  }
  for (auto* links : {&egress_, &ingress_, &nicOut_, &nicIn_, &cores_, &drams_})
    for (Link& l : *links) l.busy.clear();
  openTurns(t);
  floorUs_ = t;
  return t;
}

void SimNetwork::openTurns(double t) {
  // Every rank of a core waits for the op (the OS keeps their order through the barrier): the core's
  // first turn, at t, goes to the one that ran least recently.
  for (size_t core = 0; core < cpus_.size(); ++core) {
    cpus_[core] = Cpu{};
    const int m = ranksOn(static_cast<int>(core));
    if (m > 1) startTurns(static_cast<int>(core), t - topo_.handoffUs, m - 1);
    cpus_[core].opening = true;
  }
}

int SimNetwork::ranksOn(int core) const { return (topo_.ranks - core + topo_.cores - 1) / topo_.cores; }

void SimNetwork::letGo(SimTransport& r, double t) {
  r.away_ = true;
  Cpu& c = cpuOf(r.rank_);
  if (c.runner != r.rank_) return;
  // It yields: the core takes the other ranks of the core in turn, then r again (it ran last).
  r.lastTurn_ = ++turnsTaken_;
  startTurns(r.rank_ % topo_.cores, t, r.rank_ / topo_.cores);
}

void SimNetwork::startTurns(int core, double t, int last) {
  Cpu& c = cpus_[static_cast<size_t>(core)];
  c.runner = -1;
  c.cycling = true;
  c.opening = false;
  c.cycleStart = t;
  // Each turn a hand-off and, if the rank still waits, a spin before the next. The turns go in the order
  // Linux's scheduler takes ranks that yield: the one that ran least recently first (ties: in rank order
  // after the one at place `last` on the core); perf sched: 99.9% of them.
  const int m = ranksOn(core);
  c.order.clear();
  for (int i = 1; i <= m; ++i) c.order.push_back((last + i) % m * topo_.cores + core);
  std::stable_sort(c.order.begin(), c.order.end(),
                   [&](int a, int b) { return rank(a).lastTurn_ < rank(b).lastTurn_; });
  for (size_t i = 0; i < c.order.size(); ++i) rank(c.order[i]).turn_ = static_cast<int>(i);
  ++c.epoch;
  for (int q : c.queue) {  // the ranks that can run look for their turn
    scheduler_.setKey(q, t);
    scheduler_.wake(q);
  }
  c.queue.clear();
}

void SimNetwork::takeCore(SimTransport& r) {
  Cpu& c = cpuOf(r.rank_);
  const int m = ranksOn(r.rank_ % topo_.cores);
  for (;;) {
    if (m == 1) {  // alone on its core: it runs at once
      r.lastTurn_ = ++turnsTaken_;
      c.runner = r.rank_;
      c.cycling = false;
      ++c.epoch;
      r.away_ = false;
      return;
    }
    if (c.cycling) {
      // Its next turn from its clock on: turn k (k = its place in the order, plus whole rounds of m)
      // holds the core from cycleStart + k (h + s) + h for s; inside one it runs at once.
      const double h = topo_.handoffUs, turn = h + topo_.spinUs;
      const int j = r.turn_;
      const double since = r.clockUs_ - c.cycleStart;
      int64_t k = j;
      if (turn > 0) {  // else turns take no time: its own comes at once
        k += m * std::max<int64_t>(0, static_cast<int64_t>(std::floor((since / turn - 1 - j) / m)));
        while (c.cycleStart + static_cast<double>(k + 1) * turn <= r.clockUs_ &&
               !(topo_.spinUs == 0 && c.cycleStart + static_cast<double>(k) * turn + h >= r.clockUs_))
          k += m;
      }
      const double start = std::max(r.clockUs_, c.cycleStart + static_cast<double>(k) * turn + h);
      const uint64_t epoch = c.epoch;
      r.at(start);
      if (c.epoch == epoch) {  // nobody took the core before that turn
        c.runner = r.rank_;
        c.cycling = false;
        ++c.epoch;
        switches_ += static_cast<double>(c.opening ? k : k + 1);
        for (int64_t i = std::max<int64_t>(0, k - m); i < k; ++i)  // the turns before: those ranks ran
          rank(c.order[static_cast<size_t>(i % m)]).lastTurn_ = ++turnsTaken_;
        r.lastTurn_ = ++turnsTaken_;
        r.clockUs_ = start;
        r.away_ = false;
        return;
      }
      continue;  // another took the core first: its next turn in what the core does now
    }
    c.queue.push_back(r.rank_);  // a rank runs there: its next wait starts the turns
    scheduler_.block();
  }
}

SimPair& SimTransport::out(int peer) {
  if (peer == lastOut_) return *lastOutPair_;
  if (!net_.flat_.empty() && outFlat_.empty()) outFlat_.resize(static_cast<size_t>(net_.size()));
  SimPair*& p = outFlat_.empty() ? out_[peer] : outFlat_[static_cast<size_t>(peer)];
  if (!p) p = &net_.pair(rank_, peer);
  lastOut_ = peer, lastOutPair_ = p;
  return *p;
}

SimPair& SimTransport::in(int peer) {
  if (peer == lastIn_) return *lastInPair_;
  if (!net_.flat_.empty() && inFlat_.empty()) inFlat_.resize(static_cast<size_t>(net_.size()));
  SimPair*& p = inFlat_.empty() ? in_[peer] : inFlat_[static_cast<size_t>(peer)];
  if (!p) p = &net_.pair(peer, rank_);
  lastIn_ = peer, lastInPair_ = p;
  return *p;
}

bool SimTransport::acquire(int peer, size_t bytes, SendSlot* slot) {
  SimPair& p = out(peer);
  const uint64_t next = p.committed;
  if (next - p.released >= p.slots.size()) return false;
  double freeUs = p.slots[next % p.slots.size()].freeUs;
  const size_t inlineBytes = net_.topo_.inlineBytes;
  const bool data = p.takesDataSlot(bytes, inlineBytes);
  if (data) {
    const size_t n = p.dataFreeUs.size();
    if (p.dataCommitted - p.dataReleased >= n) return false;
    freeUs = std::max(freeUs, p.dataFreeUs[p.dataCommitted % n]);
  }
  resumeAt(freeUs);  // the slot came back at the receiver's time
  if (acquired_ >= 0 && acquired_ != peer) std::abort();  // two slots taken at once: staging_ cannot serve
  acquired_ = peer;
  if (net_.data_ && staging_.empty()) staging_.resize(net_.chunkBytes_);
  slot->data = net_.data_ ? staging_.data() : net_.shared_.data();
  slot->capacity = data || p.dataFreeUs.empty() ? net_.chunkBytes_ : std::min(net_.chunkBytes_, inlineBytes);
  return true;
}

void SimTransport::commitSend(int peer, size_t bytes) {
  SimPair& p = out(peer);
  const uint64_t next = p.committed;
  SimSlot& s = p.slots[next % p.slots.size()];
  const Topology& t = net_.topo_;
  s.at = &s;
  if (p.takesDataSlot(bytes, t.inlineBytes))
    s.at = &p.dataFreeUs[p.dataCommitted++ % p.dataFreeUs.size()];
  touchSlot(peer, s, bytes, SimCache::Access::Write, SlotCopy::Sender);
  // Between hosts on one machine over a software network, the kernel copies it into the socket's buffer.
  if (t.nicReceiverCopies && t.hostOf(peer) != t.hostOf(rank_))
    touchSlot(peer, s, bytes, SimCache::Access::Write, SlotCopy::Socket);
  spend(t.sendOverheadUs + static_cast<double>(bytes) / (t.copyGBps * 1e3));
  s.bytes = bytes;
  if (net_.data_) {
    const size_t before = s.payload.capacity();
    s.payload.assign(staging_.data(), staging_.data() + bytes);
    net_.retained_ += s.payload.capacity() - before;
  }
  acquired_ = -1;
  s.sentUs = clockUs_;
  s.arrivalUs = net_.transfer(rank_, peer, bytes, clockUs_);
  p.committed = next + 1;
  ++net_.messages_;
  net_.rank(peer).ring(clockUs_);
}

bool SimTransport::tryRecv(int peer, RecvChunk* chunk) {
  SimPair& p = in(peer);
  const uint64_t next = p.released;
  if (p.committed == next) return false;
  const SimSlot& s = p.slots[next % p.slots.size()];
  // It waits (and, taking turns, may yield) until the chunk is there to see, then reads it till it
  // has arrived, on its core.
  resumeAt(s.sentUs);
  clockUs_ = std::max(clockUs_, s.arrivalUs);
  const Topology& t = net_.topo_;
  const bool local = t.hostOf(peer) == t.hostOf(rank_);
  // Within a host its receiver reads it from the sender's slot; between hosts the kernel writes it into
  // the receiver's own (from the socket's buffer, with nicReceiverCopies).
  if (local) {
    touchSlot(peer, s, s.bytes, SimCache::Access::Read, SlotCopy::Sender);
  } else {
    if (t.nicReceiverCopies) touchSlot(peer, s, s.bytes, SimCache::Access::Read, SlotCopy::Socket);
    touchSlot(peer, s, s.bytes, SimCache::Access::Write, SlotCopy::Receiver);
  }
  if (local ? t.receiverReads : t.nicReceiverCopies)
    spend(local ? static_cast<double>(s.bytes) / (net_.intraGBps() * 1e3) : net_.nicUs(peer, rank_, s.bytes));
  chunk->data = net_.data_ ? s.payload.data() : net_.shared_.data();
  chunk->bytes = s.bytes;
  return true;
}

void SimTransport::releaseRecv(int peer) {
  SimPair& p = in(peer);
  const uint64_t next = p.released;
  SimSlot& s = p.slots[next % p.slots.size()];
  const Topology& t = net_.topo_;
  double ack = 0;
  if (t.nicAckUs > 0 && t.hostOf(peer) != t.hostOf(rank_)) {  // alone unless this rank replied since
    const SimPair* back = net_.findPair(rank_, peer);
    const uint64_t replies = back ? back->committed : 0;
    if (replies == p.repliesSeen) ack = t.nicAckUs;
    p.repliesSeen = replies;
  }
  spend(t.recvOverheadUs + ack +
        static_cast<double>(s.bytes) / ((net_.reducing_ ? t.reduceGBps : t.copyGBps) * 1e3));
  s.freeUs = clockUs_;
  if (p.takesDataSlot(s.bytes, t.inlineBytes))  // its data slot back too
    p.dataFreeUs[p.dataReleased++ % p.dataFreeUs.size()] = clockUs_;
  if (net_.retained_ > SimNetwork::kRetainBytes) {  // past the budget, memory follows the data in flight
    net_.retained_ -= s.payload.capacity();
    std::vector<char>().swap(s.payload);
  }
  p.released = next + 1;
  net_.rank(peer).ring(clockUs_);
}

void SimTransport::touchUserMemory(const void* p, size_t bytes, bool write, bool stream) {
  using A = SimCache::Access;
  // Each rank's buffers are a space of their own (--nodata gives all ranks the same addresses); the
  // slots' spaces are even. They go through the core's own cache too: what only the host's holds costs
  // the core's reading it from there.
  const uint64_t space = 2 * static_cast<uint64_t>(rank_) + 1, at = reinterpret_cast<uintptr_t>(p);
  const A access = stream ? A::Stream : write ? A::Write : A::Read;
  const size_t far = net_.cacheOf(rank_).touch(space, at, bytes, access);
  missed(far);
  if (SimCache* near = net_.privateOf(rank_)) {
    const size_t m = near->touch(space, at, bytes, access);
    if (access != A::Stream && m > far) spend(static_cast<double>(m - far) / (net_.topo_.privateMissGBps * 1e3));
  }
}

void SimTransport::touchSlot(int peer, const SimSlot& s, size_t bytes, SimCache::Access access, SlotCopy copy) {
  if (net_.caches_.empty() || &net_.cacheOf(peer) != &net_.cacheOf(rank_)) return;
  // Spaces: (the address of the memory it lives in + the copy) times 2: even, and no other slot's (those
  // are more than 2 bytes apart).
  const uint64_t space = (static_cast<uint64_t>(reinterpret_cast<uintptr_t>(s.at)) + static_cast<uint64_t>(copy)) << 1;
  missed(net_.cacheOf(rank_).touch(space, 0, bytes, access));
}

void SimTransport::missed(size_t bytes) {
  if (!bytes) return;
  SimNetwork::Link& dram = net_.drams_[static_cast<size_t>(net_.memoryOf(rank_))];
  const double us = net_.missUs(bytes), start = dram.firstFree(clockUs_, us);
  dram.take(start, start + us, net_.floorUs_);
  memoryUntilUs_ = std::max(memoryUntilUs_, start + us);
}

void SimTransport::at(double t) {
  net_.scheduler_.setKey(rank_, t);
  net_.scheduler_.yield();
}

void SimTransport::resumeAt(double readyUs) {
  const Topology& t = net_.topo_;
  if (!net_.turns_) {
    if (readyUs > clockUs_) clockUs_ = readyUs;
    return;
  }
  const double from = waitFromUs_ >= 0 ? waitFromUs_ : clockUs_;  // when this wait began
  waitFromUs_ = -1;
  if (!away_ && readyUs <= std::max(clockUs_, from + t.spinUs)) {  // no wait, or it spun on its core till then
    clockUs_ = std::max(clockUs_, readyUs);
    return;
  }
  if (!away_) yieldCore(from + t.spinUs);
  at(readyUs);
  clockUs_ = std::max(clockUs_, readyUs);
  net_.takeCore(*this);
}

void SimTransport::yieldCore(double t) {
  at(t);
  net_.letGo(*this, t);
}

void SimTransport::opEnded() {
  if (net_.turns_ && !away_) yieldCore(clockUs_);
}

void SimTransport::ring(double byUs) {
  ++doorbell_;
  if (blocked_) {
    blocked_ = false;
    net_.scheduler_.setKey(rank_, std::max(clockUs_, byUs));
    net_.scheduler_.wake(rank_);
  }
}

void SimTransport::sleep(uint32_t token, int64_t) {
  if (doorbell_ != token) return;  // rung since prepareSleep
  if (net_.turns_ && !away_) {
    const double spin = net_.topo_.spinUs;
    if (waitFromUs_ < 0) {  // the wait begins: spin first (the Waiter asks again after)
      waitFromUs_ = clockUs_;
      if (spin > 0) {
        at(clockUs_ + spin);
        return;
      }
    }
    yieldCore(waitFromUs_ + spin);
  }
  blocked_ = true;
  net_.scheduler_.block();  // until ring(); a wait nothing can end is the scheduler's deadlock report
}

}  // namespace zcoll::sim
