// engine.cpp - the ZeRO engine: creation (layout, allocation, the cross-rank check), the trainer's
// hooks (fetch/release with stage 3 gathering and prefetch, grads/gradsReady with bucketed
// reductions) and the request FIFO. The optimizer step is in engine_step.cpp, checkpoints in
// checkpoint.cpp.
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <thread>

#include "engine_impl.hpp"

namespace zcoll::zero {

using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------------------------
// HostBuffer

HostBuffer::HostBuffer(size_t bytes, bool pin) {
  if (bytes == 0) return;
  const size_t rounded = (bytes + 63) / 64 * 64;
  // zcollMemAlloc first: the local ranks' collectives on it run zero copy; plain memory if refused.
  void* p = nullptr;
  shared_ = zcollMemAlloc(&p, rounded) == zcollSuccess;
  if (!shared_) p = std::aligned_alloc(64, rounded);
  data_ = static_cast<std::byte*>(p);
  if (!data_) return;
  std::memset(data_, 0, rounded);  // zeroed, and touched now: no page fault in a step
  bytes_ = bytes;
  if (pin) pinned_ = mlock(data_, rounded) == 0;
}

HostBuffer::~HostBuffer() {
  if (!data_) return;
  if (pinned_) munlock(data_, (bytes_ + 63) / 64 * 64);
  if (shared_) zcollMemFree(data_);
  else std::free(data_);
}

// ---------------------------------------------------------------------------------------------
// Creation

Engine::~Engine() = default;

std::unique_ptr<Engine> Engine::create(zcollComm_t comm, const TrainConfig& config, std::vector<GroupSpec> groups,
                                       const EngineOptions& options, Result* result) {
  Result local;
  if (!comm) local = {zcollInvalidArgument, "Engine::create: comm is null"};
  if (!local.ok()) {
    if (result) *result = local;
    return nullptr;
  }
  auto engine = std::make_unique<EngineImpl>(comm, config, std::move(groups), options);
  Result r = engine->setup();
  if (result) *result = r;
  if (!r.ok()) return nullptr;
  return engine;
}

EngineImpl::EngineImpl(zcollComm_t comm, const TrainConfig& config, std::vector<GroupSpec> groups,
                       const EngineOptions& options)
    : comm_(comm), config_(config), groups_(std::move(groups)), options_(options), scaler_(config.fp16) {}

EngineImpl::~EngineImpl() {
  // Every request must be completed before the communicator may be destroyed.
  for (const Pending& p : pending_) zcollWait(p.request);
}

Result EngineImpl::fail(zcollResult_t code, std::string message) {
  Result r{code, std::move(message)};
  if (failed_.ok()) failed_ = r;
  return r;
}

Result EngineImpl::commFail(zcollResult_t code, const std::string& what) {
  return fail(code, what + ": " + zcollGetErrorString(code) + ": " + zcollGetLastError(comm_));
}

Result EngineImpl::usable() const {
  if (!failed_.ok())
    return {zcollInvalidUsage, "the engine failed earlier and cannot continue (" + failed_.message + ")"};
  return {};
}

Result EngineImpl::checkGroup(int g, const char* arg) const {
  if (g < 0 || g >= static_cast<int>(groups_.size()))
    return {zcollInvalidArgument, std::string(arg) + ": group " + std::to_string(g) + " is not in [0, " +
                                      std::to_string(groups_.size()) + ")"};
  return usable();
}

Result EngineImpl::setup() {
  int rc = zcollCommUserRank(comm_, &rank_);
  if (rc == zcollSuccess) rc = zcollCommCount(comm_, &ranks_);
  if (rc != zcollSuccess) return {static_cast<zcollResult_t>(rc), "Engine::create: comm: " + std::string(zcollGetLastError(comm_))};

  // Local checks first; every rank then joins the cross-check, so that a bad rank makes all fail.
  Result local;
  const ZeroOptimization& z = config_.zero;
  std::map<std::string, int> names;
  if (config_.fp16.enabled && config_.bf16) local = {zcollInvalidArgument, "config: fp16.enabled and bf16.enabled are both set"};
  else if (z.stage < 0 || z.stage > 3) local = {zcollInvalidArgument, "config: zero_optimization.stage " + std::to_string(z.stage) + " is not 0 to 3"};
  else if (groups_.empty()) local = {zcollInvalidArgument, "groups: no parameter group registered"};
  for (size_t g = 0; g < groups_.size() && local.ok(); ++g) {
    const GroupSpec& s = groups_[g];
    const std::string where = "groups[" + std::to_string(g) + "]";
    if (s.name.empty()) local = {zcollInvalidArgument, where + ".name is empty"};
    else if (s.numel <= 0) local = {zcollInvalidArgument, where + " ('" + s.name + "').numel is " + std::to_string(s.numel) + ", must be > 0"};
    else if (s.paramGroup < 0 || s.paramGroup >= static_cast<int>(groups_.size()))
      local = {zcollInvalidArgument, where + " ('" + s.name + "').paramGroup " + std::to_string(s.paramGroup) + " is not in [0, " + std::to_string(groups_.size()) + ")"};
    else if (!names.emplace(s.name, static_cast<int>(g)).second)
      local = {zcollInvalidArgument, where + ".name '" + s.name + "' is also groups[" + std::to_string(names[s.name]) + "]'s"};
    else if (!s.shape.empty()) {
      int64_t prod = 1;
      for (int64_t d : s.shape) prod = d < 0 ? -1 : prod * d;
      if (prod != s.numel)
        local = {zcollInvalidArgument, where + " ('" + s.name + "').shape does not hold numel " + std::to_string(s.numel) + " elements"};
    }
  }
  Result cross = crossCheck(local.ok());
  if (!local.ok()) return local;
  if (!cross.ok()) return cross;

  dtype_ = config_.fp16.enabled ? DType::F16 : config_.bf16 ? DType::BF16 : DType::F32;
  zdtype_ = dtype_ == DType::F16 ? zcollFloat16 : dtype_ == DType::BF16 ? zcollBfloat16 : zcollFloat32;
  part_ = z.stage == 0 ? 0 : rank_;
  std::vector<int64_t> numel;
  std::vector<bool> frozen;
  int paramGroups = 1;
  for (const GroupSpec& s : groups_) {
    numel.push_back(s.numel);
    frozen.push_back(s.frozen);
    paramGroups = std::max(paramGroups, s.paramGroup + 1);
  }
  ParamGroupOptions defaults;
  defaults.lr = config_.optimizer.lr;
  defaults.beta1 = config_.optimizer.beta1;
  defaults.beta2 = config_.optimizer.beta2;
  defaults.eps = config_.optimizer.eps;
  defaults.weightDecay = config_.optimizer.weightDecay;
  paramGroups_.assign(static_cast<size_t>(paramGroups), defaults);
  partition_ = std::make_unique<Partition>(numel, z.stage == 0 ? 1 : ranks_, z.stage == 3 ? 0 : z.reduceBucketSize, frozen);
  const Partition& P = *partition_;
  segments_ = P.segments(part_);
  const size_t units = P.units().size(), ng = groups_.size();
  unitSlot_.assign(units, -1);
  unitReady_.assign(units, 0);
  unitLaunched_.assign(units, false);
  groupReady_.assign(ng, false);

  const bool offOpt = z.offloadOptimizer.device != OffloadDevice::None;
  const bool pinOpt = offOpt && z.offloadOptimizer.pinMemory;
  const bool pinParam = z.offloadParam.device != OffloadDevice::None && z.offloadParam.pinMemory;
  const size_t shardBytes = static_cast<size_t>(P.shardNumel()) * esize();
  const size_t flatBytes = static_cast<size_t>(P.flatNumel()) * esize();
  if (z.stage <= 2) params_ = allocate(flatBytes, &paramBytes_, false, "parameters");
  else shardParams_ = allocate(shardBytes, &paramBytes_, pinParam, "the parameter shard");
  if (z.stage <= 1) grads_ = allocate(flatBytes, &gradBytes_, false, "gradients");
  else gradShard_ = allocate(static_cast<size_t>(P.trainableShardNumel()) * esize(), &gradBytes_, pinOpt, "the gradient shard");
  // Frozen groups: master weights (what checkpoints hold) but no moments.
  if (mixed()) master_ = allocate(static_cast<size_t>(P.shardNumel()) * sizeof(float), &optimBytes_, pinOpt, "master weights");
  const size_t stateBytes = static_cast<size_t>(P.trainableShardNumel()) * sizeof(float);
  expAvg_ = allocate(stateBytes, &optimBytes_, pinOpt, "exp_avg");
  expAvgSq_ = allocate(stateBytes, &optimBytes_, pinOpt, "exp_avg_sq");
  // At least 2: finish() splits it into a sum and an addend.
  scratchElems_ = std::clamp<int64_t>(std::min(z.subGroupSize, P.shardNumel()), 2, int64_t{1} << 20);
  scratch_ = allocate(static_cast<size_t>(scratchElems_) * sizeof(float), &bufferBytes_, false, "scratch");

  if (z.stage == 3) {
    live_.assign(ng, Live::Absent);
    liveBuf_.resize(ng);
    inUse_.assign(ng, false);
    gatherSeq_.assign(ng, 0);
    prefetched_.assign(ng, false);
    persistent_.resize(ng);
    isPersistent_.assign(ng, false);
    for (size_t g = 0; g < ng; ++g) {
      if (groups_[g].numel > z.stage3ParamPersistenceThreshold) continue;
      isPersistent_[g] = true;
      const Unit& u = P.units()[static_cast<size_t>(P.unitOf(static_cast<int>(g)))];
      persistent_[g] = allocate(static_cast<size_t>(u.padded) * esize(), &paramBytes_, false, "a persistent group");
    }
  }
  if (z.stage >= 2) {
    for (const Unit& u : P.units()) slotElems_ = std::max(slotElems_, u.padded);
    maxSlots_ = std::min(units, static_cast<size_t>(std::max<int64_t>(2, z.reduceBucketSize / slotElems_)));
  }
  if (Result r = usable(); !r.ok()) return r;  // out of memory
  if ((pinOpt || pinParam) && ((!master_.pinned() && master_.data()) || !expAvg_.pinned())) {
    if (options_.log && rank_ == 0)
      std::cerr << "zcoll zero: pin_memory: could not lock the offloaded states in memory (RLIMIT_MEMLOCK); they stay pageable\n";
  }
  int threads = options_.optimizerThreads;
  if (threads <= 0) threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / std::max(ranks_, 1));
  adam_ = std::make_unique<CpuAdam>(threads);
  stats_.lossScale = scaler_.scale();
  stats_.lr = learningRate();
  return {};
}

// Every rank gathers a fingerprint of every other's registration and configuration. Collective,
// and the same number of calls on every rank whatever the outcome.
Result EngineImpl::crossCheck(bool locallyOk) {
  auto mix = [](uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001b3ull + (h >> 29); };
  uint64_t groupsHash = 0xcbf29ce484222325ull, total = 0;
  std::vector<uint64_t> perGroup;
  for (const GroupSpec& s : groups_) {
    uint64_t h = std::hash<std::string>{}(s.name);
    h = mix(h, static_cast<uint64_t>(s.numel));
    h = mix(h, static_cast<uint64_t>(s.paramGroup) * 2 + (s.frozen ? 1 : 0));
    perGroup.push_back(h);
    groupsHash = mix(groupsHash, h);
    total += static_cast<uint64_t>(s.numel);
  }
  const ZeroOptimization& z = config_.zero;
  uint64_t cfg = 0;
  for (uint64_t v : {uint64_t(z.stage), uint64_t(z.reduceBucketSize), uint64_t(z.overlapComm), uint64_t(config_.fp16.enabled),
                     uint64_t(config_.bf16), uint64_t(config_.gradientAccumulationSteps),
                     uint64_t(z.stage3ParamPersistenceThreshold), uint64_t(z.stage3PrefetchBucketSize),
                     uint64_t(z.stage3MaxLiveParameters), uint64_t(z.stage3MaxReuseDistance), uint64_t(z.subGroupSize),
                     uint64_t(predivideFactor() * 1024)})
    cfg = mix(cfg, v);
  const uint64_t mine[5] = {locallyOk ? 1u : 0u, groups_.size(), total, groupsHash, cfg};
  std::vector<uint64_t> all(5 * static_cast<size_t>(ranks_));
  zcollResult_t rc = zcollAllGather(mine, all.data(), 5, zcollUint64, comm_, nullptr);
  if (rc != zcollSuccess) return {rc, "Engine::create: checking the other ranks: " + std::string(zcollGetLastError(comm_))};
  int badRank = -1, field = -1;
  for (int r = 0; r < ranks_ && badRank < 0; ++r)
    for (int f = 0; f < 5; ++f)
      if (all[static_cast<size_t>(r) * 5 + static_cast<size_t>(f)] != (f == 0 ? 1u : all[static_cast<size_t>(f)])) {
        badRank = r, field = f;
        break;
      }
  if (badRank < 0) return {};
  const std::string who = "rank " + std::to_string(badRank);
  if (field == 0) return {zcollInvalidArgument, "Engine::create: " + who + " rejected its own arguments (its error says why)"};
  if (field == 4) return {zcollInvalidArgument, "Engine::create: " + who + "'s configuration differs from rank 0's (stage, buckets, precision, accumulation, gradient scaling or stage3_* keys)"};
  if (field == 1 || field == 2) {
    return {zcollInvalidArgument, "Engine::create: mismatched parameter registration: rank 0 registered " +
                                      std::to_string(all[1]) + " groups of " + std::to_string(all[2]) + " elements, " +
                                      who + " " + std::to_string(all[static_cast<size_t>(badRank) * 5 + 1]) + " groups of " +
                                      std::to_string(all[static_cast<size_t>(badRank) * 5 + 2]) + " elements"};
  }
  // Same count and size, different names or sizes: find the first group that differs.
  std::vector<uint64_t> hashes(perGroup.size() * static_cast<size_t>(ranks_));
  rc = zcollAllGather(perGroup.data(), hashes.data(), perGroup.size(), zcollUint64, comm_, nullptr);
  if (rc != zcollSuccess) return {rc, "Engine::create: checking the other ranks: " + std::string(zcollGetLastError(comm_))};
  const size_t n = perGroup.size();
  for (size_t g = 0; g < n; ++g)
    if (hashes[static_cast<size_t>(badRank) * n + g] != hashes[g])
      return {zcollInvalidArgument, "Engine::create: mismatched parameter registration: group " + std::to_string(g) +
                                        " differs between rank 0 and " + who + " (here it is '" + groups_[g].name + "', " +
                                        std::to_string(groups_[g].numel) + " elements)"};
  return {zcollInvalidArgument, "Engine::create: mismatched parameter registration between rank 0 and " + who};
}

HostBuffer EngineImpl::allocate(size_t bytes, int64_t* counter, bool pin, const char* what) {
  HostBuffer b(bytes, pin);
  if (bytes > 0 && !b.data()) {
    fail(zcollSystemError, std::string("out of memory: ") + std::to_string(bytes) + " bytes for " + what);
    return b;
  }
  *counter += static_cast<int64_t>(bytes);
  if (counter == &bufferBytes_) peakBufferBytes_ = std::max(peakBufferBytes_, bufferBytes_);
  return b;
}

// ---------------------------------------------------------------------------------------------
// Requests

std::string EngineImpl::describe(Kind kind, int unit) const {
  switch (kind) {
    case Kind::GradReduce: return "reducing the gradients of bucket " + std::to_string(unit);
    case Kind::ParamGather:
      return "gathering the parameters of group '" +
             groups_[static_cast<size_t>(partition_->units()[static_cast<size_t>(unit)].firstGroup)].name + "'";
    case Kind::ParamUpdate: return "step: gathering the updated parameters of bucket " + std::to_string(unit);
  }
  return "a collective";
}

uint64_t EngineImpl::issue(zcollResult_t r, const zcollRequest_t& req, Kind kind, int unit, int slot, Result* result) {
  if (r != zcollSuccess) {
    *result = commFail(r, describe(kind, unit));
    return 0;
  }
  ++stats_.collectives;
  pending_.push_back(Pending{req, kind, unit, slot, nextSeq_});
  return nextSeq_++;
}

Result EngineImpl::completeThrough(uint64_t seq) {
  while (!pending_.empty() && pending_.front().seq <= seq) {
    Pending p = pending_.front();
    pending_.pop_front();
    const auto t0 = Clock::now();
    const zcollResult_t r = zcollWait(p.request);
    stats_.commWaitSeconds += seconds(Clock::now() - t0);
    if (r != zcollSuccess) {
      Result res = commFail(r, describe(p.kind, p.unit));
      for (const Pending& q : pending_) zcollWait(q.request);
      pending_.clear();
      return res;
    }
    Result f = finish(p);
    if (!f.ok()) return f;
  }
  return {};
}

Result EngineImpl::completeAll() { return completeThrough(nextSeq_); }

Result EngineImpl::blocking(zcollResult_t r, const std::string& what) {
  if (r != zcollSuccess) return commFail(r, what);
  return {};
}

// A finished reduce-scatter of a bucket slot (stage 2-3): its slice joins the gradient shard (the
// first micro-batch of an accumulation copies, the later ones add).
Result EngineImpl::finish(const Pending& p) {
  if (p.kind == Kind::ParamGather) {
    const Unit& u = partition_->units()[static_cast<size_t>(p.unit)];
    for (int g = u.firstGroup; g < u.endGroup; ++g)
      if (live_[static_cast<size_t>(g)] == Live::InFlight) live_[static_cast<size_t>(g)] = Live::Present;
    return {};
  }
  if (p.kind != Kind::GradReduce || p.slot < 0) return {};
  const Unit& u = partition_->units()[static_cast<size_t>(p.unit)];
  const std::byte* src = at(slots_[static_cast<size_t>(p.slot)], static_cast<int64_t>(part_) * u.slice);
  std::byte* dst = at(gradShard_, u.shardOffset);
  const bool first = sinceBoundary_ == 0;
  if (first) {
    std::memcpy(dst, src, static_cast<size_t>(u.slice) * esize());
  } else if (dtype_ == DType::F32) {
    float* d = reinterpret_cast<float*>(dst);
    const float* s = reinterpret_cast<const float*>(src);
    for (int64_t i = 0; i < u.slice; ++i) d[i] += s[i];
  } else {
    float* tmp = reinterpret_cast<float*>(scratch_.data());
    const int64_t half = scratchElems_ / 2;  // two halves (scratchElems_ >= 2): the sum and the addend
    for (int64_t off = 0; off < u.slice; off += half) {
      const int64_t n = std::min(half, u.slice - off);
      toFloat32(dtype_, dst + static_cast<size_t>(off) * esize(), tmp, n);
      toFloat32(dtype_, src + static_cast<size_t>(off) * esize(), tmp + half, n);
      for (int64_t i = 0; i < n; ++i) tmp[i] += tmp[half + i];
      fromFloat32(dtype_, tmp, dst + static_cast<size_t>(off) * esize(), n);
    }
  }
  releaseSlot(p.slot);
  return {};
}

// ---------------------------------------------------------------------------------------------
// Gradient buckets

int EngineImpl::acquireSlot(Result* result) {
  for (;;) {
    if (!freeSlots_.empty()) {
      const int s = freeSlots_.back();
      freeSlots_.pop_back();
      std::memset(slots_[static_cast<size_t>(s)].data(), 0, slots_[static_cast<size_t>(s)].bytes());
      return s;
    }
    // Wait for the oldest reduction holding a slot while the bucket budget is spent; grow otherwise
    // (or when none is in flight: the trainer holds every slot).
    auto holder = std::find_if(pending_.begin(), pending_.end(), [](const Pending& p) { return p.slot >= 0; });
    if (slots_.size() < maxSlots_ || holder == pending_.end()) {
      HostBuffer slot = allocate(static_cast<size_t>(slotElems_) * esize(), &bufferBytes_, false, "a gradient bucket");
      if (!slot.data()) {
        *result = failed_;
        return -1;
      }
      slots_.push_back(std::move(slot));
      return static_cast<int>(slots_.size()) - 1;
    }
    Result r = completeThrough(holder->seq);
    if (!r.ok()) {
      *result = r;
      return -1;
    }
  }
}

void EngineImpl::releaseSlot(int slot) { freeSlots_.push_back(slot); }

void* EngineImpl::grads(int g, Result* result) {
  Result r = checkGroup(g, "grads");
  const int u = r.ok() ? partition_->unitOf(g) : -1;
  if (r.ok() && unitLaunched_[static_cast<size_t>(u)])
    r = {zcollInvalidUsage, "grads: group " + std::to_string(g) + " ('" + groups_[static_cast<size_t>(g)].name +
                                "'): its bucket is being reduced; gradients are written before gradsReady"};
  if (r.ok() && groups_[static_cast<size_t>(g)].frozen)
    r = {zcollInvalidUsage, "grads: group " + std::to_string(g) + " ('" + groups_[static_cast<size_t>(g)].name + "') is frozen: it has no gradient"};
  void* out = nullptr;
  if (r.ok()) {
    const int64_t off = partition_->groupFlatOffset(g);
    if (stage() <= 1) {
      out = at(grads_, off);
    } else {
      const Unit& unit = partition_->units()[static_cast<size_t>(u)];
      int& slot = unitSlot_[static_cast<size_t>(u)];
      if (slot < 0) slot = acquireSlot(&r);
      if (slot >= 0) out = at(slots_[static_cast<size_t>(slot)], off - unit.flatOffset);
    }
  }
  if (result) *result = r;
  return out;
}

Result EngineImpl::gradsReady(int g) {
  Result r = checkGroup(g, "gradsReady");
  if (!r.ok()) return r;
  if (groups_[static_cast<size_t>(g)].frozen)
    return {zcollInvalidUsage, "gradsReady: group " + std::to_string(g) + " ('" + groups_[static_cast<size_t>(g)].name + "') is frozen: it has no gradient"};
  if (groupReady_[static_cast<size_t>(g)])
    return {zcollInvalidUsage, "gradsReady: group " + std::to_string(g) + " ('" + groups_[static_cast<size_t>(g)].name +
                                   "') was already marked ready in this micro-batch"};
  groupReady_[static_cast<size_t>(g)] = true;
  const int u = partition_->unitOf(g);
  const Unit& unit = partition_->units()[static_cast<size_t>(u)];
  if (++unitReady_[static_cast<size_t>(u)] < unit.endGroup - unit.firstGroup) return {};
  return launchUnit(u);
}

// DeepSpeed's gradient_predivide_factor (prescale_gradients: the rank count): gradients are scaled by
// 1/f before their sum, and by f/ranks in the step (optimizerStep's inv), so that fp16 sums stay in range.
double EngineImpl::predivideFactor() const {
  return config_.prescaleGradients ? static_cast<double>(ranks_) : config_.gradientPredivideFactor;
}

void EngineImpl::preDivide(std::byte* buf, int64_t n) {
  const double f = predivideFactor();
  if (f == 1.0 || n == 0) return;
  const float k = static_cast<float>(1.0 / f);
  if (dtype_ == DType::F32) {
    float* x = reinterpret_cast<float*>(buf);
    for (int64_t i = 0; i < n; ++i) x[i] *= k;
    return;
  }
  float* scratch = reinterpret_cast<float*>(scratch_.data());
  for (int64_t off = 0; off < n; off += scratchElems_) {
    const int64_t len = std::min(scratchElems_, n - off);
    std::byte* at = buf + static_cast<size_t>(off) * esize();
    toFloat32(dtype_, at, scratch, len);
    for (int64_t i = 0; i < len; ++i) scratch[i] *= k;
    fromFloat32(dtype_, scratch, at, len);
  }
}

// Issues a bucket's reduction: stages 0-1 only at the accumulation boundary, in place in the full
// gradients (all-reduce, or reduce-scatter into this rank's slice); stages 2-3 every micro-batch,
// a reduce-scatter of the bucket slot whose slice finish() adds to the shard.
Result EngineImpl::launchUnit(int u) {
  const Unit& unit = partition_->units()[static_cast<size_t>(u)];
  unitLaunched_[static_cast<size_t>(u)] = true;
  if (groups_[static_cast<size_t>(unit.firstGroup)].frozen) return {};  // nothing to reduce
  if (stage() <= 1 && !atBoundary()) return {};
  Result r;
  zcollRequest_t req = nullptr;
  const int64_t bytes = unit.padded * static_cast<int64_t>(esize());
  if (stage() == 0) {
    std::byte* buf = at(grads_, unit.flatOffset);
    preDivide(buf, unit.padded);
    issue(zcollAllReduceAsync(buf, buf, static_cast<size_t>(unit.padded), zdtype_, zcollSum, comm_, &req), req,
          Kind::GradReduce, u, -1, &r);
    stats_.reduceBytes += 2 * bytes;
  } else {
    int slot = -1;
    std::byte* buf;
    if (stage() == 1) {
      buf = at(grads_, unit.flatOffset);
    } else {
      slot = unitSlot_[static_cast<size_t>(u)];
      if (slot < 0) slot = unitSlot_[static_cast<size_t>(u)] = acquireSlot(&r);  // no group wrote gradients
      if (slot < 0) return r;
      buf = slots_[static_cast<size_t>(slot)].data();
    }
    std::byte* mine = buf + static_cast<size_t>(part_ * unit.slice) * esize();
    preDivide(buf, unit.padded);
    if (config_.zero.reduceScatter || stage() == 3) {
      issue(zcollReduceScatterAsync(buf, mine, static_cast<size_t>(unit.slice), zdtype_, zcollSum, comm_, &req), req,
            Kind::GradReduce, u, slot, &r);
      stats_.reduceBytes += bytes;
    } else {  // "reduce_scatter": false - DeepSpeed's all-reduce of the bucket; this rank keeps its slice
      issue(zcollAllReduceAsync(buf, buf, static_cast<size_t>(unit.padded), zdtype_, zcollSum, comm_, &req), req,
            Kind::GradReduce, u, slot, &r);
      stats_.reduceBytes += 2 * bytes;
    }
    unitSlot_[static_cast<size_t>(u)] = -1;
  }
  if (r.ok() && !config_.zero.overlapComm) r = completeAll();  // without overlap: reduce, then go on
  return r;
}

// ---------------------------------------------------------------------------------------------
// Parameters (stage 3 gathers; stages 0-2 hold them all)

const void* EngineImpl::params(int g) const {
  if (g < 0 || g >= static_cast<int>(groups_.size())) return nullptr;
  const int64_t off = partition_->groupFlatOffset(g);
  if (stage() <= 2) return at(params_, off);
  const Unit& u = partition_->units()[static_cast<size_t>(partition_->unitOf(g))];
  if (isPersistent_[static_cast<size_t>(g)]) return at(persistent_[static_cast<size_t>(g)], off - u.flatOffset);
  if (live_[static_cast<size_t>(g)] != Live::Present) return nullptr;
  return at(liveBuf_[static_cast<size_t>(g)], off - u.flatOffset);
}

// Issues the all-gather of a stage 3 group into a buffer from the pool.
Result EngineImpl::gatherUnit(int u, bool prefetch) {
  const Unit& unit = partition_->units()[static_cast<size_t>(u)];
  const int g = unit.firstGroup;
  const size_t bytes = static_cast<size_t>(unit.padded) * esize();
  auto& pool = livePool_[bytes];
  if (!pool.empty()) {
    liveBuf_[static_cast<size_t>(g)] = std::move(pool.back());
    pool.pop_back();
  } else {
    liveBuf_[static_cast<size_t>(g)] = allocate(bytes, &bufferBytes_, false, "gathered parameters");
    if (!liveBuf_[static_cast<size_t>(g)].data()) return failed_;
  }
  live_[static_cast<size_t>(g)] = Live::InFlight;
  liveElems_ += unit.padded;
  if (prefetch) prefetchElems_ += unit.padded, ++stats_.prefetches, prefetched_[static_cast<size_t>(g)] = true;
  Result r;
  zcollRequest_t req = nullptr;
  gatherSeq_[static_cast<size_t>(g)] =
      issue(zcollAllGatherAsync(at(shardParams_, unit.shardOffset), liveBuf_[static_cast<size_t>(g)].data(),
                                static_cast<size_t>(unit.slice), zdtype_, comm_, &req),
            req, Kind::ParamGather, u, -1, &r);
  stats_.gatherBytes += static_cast<int64_t>(bytes);
  return r;
}

void EngineImpl::freeLive(int g) {
  if (live_[static_cast<size_t>(g)] == Live::Absent) return;
  const Unit& unit = partition_->units()[static_cast<size_t>(partition_->unitOf(g))];
  if (prefetched_[static_cast<size_t>(g)]) prefetched_[static_cast<size_t>(g)] = false, prefetchElems_ -= unit.padded;
  livePool_[liveBuf_[static_cast<size_t>(g)].bytes()].push_back(std::move(liveBuf_[static_cast<size_t>(g)]));
  live_[static_cast<size_t>(g)] = Live::Absent;
  liveElems_ -= unit.padded;
}

// Prefetches the groups that follow in the recorded order, within stage3_prefetch_bucket_size
// elements in flight and stage3_max_live_parameters gathered.
void EngineImpl::prefetchFrom(size_t traceAt) {
  const ZeroOptimization& z = config_.zero;
  for (size_t j = traceAt; j < trace_.size(); ++j) {
    const int g = trace_[j];
    if (isPersistent_[static_cast<size_t>(g)] || live_[static_cast<size_t>(g)] != Live::Absent) continue;
    const int64_t padded = partition_->units()[static_cast<size_t>(partition_->unitOf(g))].padded;
    if (prefetchElems_ + padded > z.stage3PrefetchBucketSize || liveElems_ + padded > z.stage3MaxLiveParameters) return;
    Result r = gatherUnit(partition_->unitOf(g), true);
    if (!r.ok()) return;  // recorded in failed_; the next call reports it
  }
}

int64_t EngineImpl::reuseDistance(int g) const {
  if (recording_ || traceBroken_) return -1;
  int64_t distance = 0;
  for (size_t j = traceAt_; j < trace_.size(); ++j) {
    if (trace_[j] == g) return distance;
    distance += groups_[static_cast<size_t>(trace_[j])].numel;
  }
  return -1;
}

Result EngineImpl::fetch(int g) {
  Result r = checkGroup(g, "fetch");
  if (!r.ok() || stage() <= 2) return r;
  // Follow the recorded order; a different order stops prefetching until the next micro-batch,
  // which records anew.
  if (recording_) {
    trace_.push_back(g);
  } else if (!traceBroken_) {
    if (traceAt_ < trace_.size() && trace_[traceAt_] == g) ++traceAt_;
    else traceBroken_ = true;
  }
  inUse_[static_cast<size_t>(g)] = true;
  if (!isPersistent_[static_cast<size_t>(g)]) {
    const int u = partition_->unitOf(g);
    if (live_[static_cast<size_t>(g)] == Live::Absent) {
      // Over the live budget: free gathered groups nobody is using.
      const int64_t need = partition_->units()[static_cast<size_t>(u)].padded;
      for (size_t k = 0; k < groups_.size() && liveElems_ + need > config_.zero.stage3MaxLiveParameters; ++k)
        if (!inUse_[k] && live_[k] == Live::Present) freeLive(static_cast<int>(k));
      r = gatherUnit(u, false);
      if (!r.ok()) return r;
    } else if (prefetched_[static_cast<size_t>(g)]) {
      prefetched_[static_cast<size_t>(g)] = false;
      prefetchElems_ -= partition_->units()[static_cast<size_t>(u)].padded;
    }
  }
  // Queue the next groups before waiting for this one.
  if (!recording_ && !traceBroken_) prefetchFrom(traceAt_);
  if (live_[static_cast<size_t>(g)] == Live::InFlight) {
    r = completeThrough(gatherSeq_[static_cast<size_t>(g)]);
    if (!r.ok()) return r;
  }
  return usable();
}

Result EngineImpl::release(int g) {
  Result r = checkGroup(g, "release");
  if (!r.ok() || stage() <= 2) return r;
  inUse_[static_cast<size_t>(g)] = false;
  if (isPersistent_[static_cast<size_t>(g)] || live_[static_cast<size_t>(g)] != Live::Present) return {};
  const int64_t d = reuseDistance(g);
  if (d >= 0 && d <= config_.zero.stage3MaxReuseDistance) return {};  // needed again soon: keep
  freeLive(g);
  return {};
}

void EngineImpl::endMicroBatch() {
  if (stage() == 3) {
    if (recording_) recording_ = false;          // the order is known from now on
    else if (traceBroken_) trace_.clear(), recording_ = true, traceBroken_ = false;
    traceAt_ = 0;
  }
  std::fill(unitReady_.begin(), unitReady_.end(), 0);
  std::fill(unitLaunched_.begin(), unitLaunched_.end(), false);
  std::fill(groupReady_.begin(), groupReady_.end(), false);
}

EngineStats EngineImpl::stats() const {
  EngineStats s = stats_;
  s.lossScale = scaler_.scale();
  return s;
}

EngineMemory EngineImpl::memory() const {
  EngineMemory m;
  m.paramBytes = paramBytes_;
  m.gradBytes = gradBytes_;
  m.optimizerBytes = optimBytes_;
  m.bufferBytes = bufferBytes_;
  m.peakBufferBytes = peakBufferBytes_;
  const ZeroOptimization& z = config_.zero;
  const bool offOpt = z.offloadOptimizer.device != OffloadDevice::None;
  const bool offParam = z.offloadParam.device != OffloadDevice::None;
  m.hostBytes = (offOpt ? optimBytes_ + (stage() >= 2 ? gradBytes_ : 0) : 0) + (offParam ? static_cast<int64_t>(shardParams_.bytes()) : 0);
  m.deviceBytes = paramBytes_ + gradBytes_ + optimBytes_ - m.hostBytes;
  return m;
}

}  // namespace zcoll::zero
