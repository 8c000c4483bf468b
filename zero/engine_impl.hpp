// engine_impl.hpp - the ZeRO engine behind zero.hpp's Engine (shared by engine.cpp, the hooks and
// the optimizer step, and checkpoint.cpp). Only zcoll's public API is used.
//
// Storage (P = partitions: 1 at stage 0, the rank count otherwise; see partition.hpp):
//   stage 0-2  params_: every unit, full (compute dtype)     stage 3: shardParams_ (its slices)
//   stage 0-1  grads_: every unit, full, accumulating         stage 2-3: gradShard_ (its slices),
//              reduced in place at the boundary                 fed by reduce-scattered bucket slots
//   master_ (fp32, mixed precision only: in fp32 the owned parameters are the master weights),
//   expAvg_, expAvgSq_: the shard.
// Communication is nonblocking and completed in issue order (a FIFO of requests); every decision
// that issues a collective depends only on the calls made (never on timing), so every rank issues
// the same sequence.
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "adamw.hpp"
#include "loss_scaler.hpp"
#include "partition.hpp"
#include "zcoll/zero.hpp"

namespace zcoll::zero {

// Zeroed, 64-byte aligned host memory; `pin` locks it in RAM (best effort: without the privilege it
// stays pageable and the engine logs it once). From zcollMemAlloc where it can: gradient buckets,
// shards and the parameters all-gathered from them are then reduced and gathered zero-copy between
// the ranks of one host (algorithms/zcopy.hpp).
class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(size_t bytes, bool pin);
  ~HostBuffer();
  HostBuffer(HostBuffer&& o) noexcept { swap(o); }
  HostBuffer& operator=(HostBuffer&& o) noexcept {
    HostBuffer t(std::move(o));
    swap(t);
    return *this;
  }
  std::byte* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  bool pinned() const { return pinned_; }

 private:
  void swap(HostBuffer& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(bytes_, o.bytes_);
    std::swap(pinned_, o.pinned_);
    std::swap(shared_, o.shared_);
  }
  std::byte* data_ = nullptr;
  size_t bytes_ = 0;
  bool pinned_ = false;
  bool shared_ = false;  // from zcollMemAlloc
};

class EngineImpl final : public Engine {
 public:
  EngineImpl(zcollComm_t comm, const TrainConfig& config, std::vector<GroupSpec> groups, const EngineOptions& options);
  ~EngineImpl() override;
  Result setup();

  DType dtype() const override { return dtype_; }
  const std::vector<GroupSpec>& groups() const override { return groups_; }
  Result initParams(int g, const float* values) override;
  Result fetch(int g) override;
  const void* params(int g) const override;
  Result release(int g) override;
  void* grads(int g, Result* result) override;
  Result gradsReady(int g) override;
  Result setParamGroup(int paramGroup, const ParamGroupOptions& options) override;
  Result setBoundary(Boundary boundary) override;
  bool atBoundary() const override {
    return boundary_ == Boundary::Auto ? sinceBoundary_ + 1 >= config_.gradientAccumulationSteps : boundary_ == Boundary::Yes;
  }
  Result step(bool* stepped) override;
  double lossScale() const override { return scaler_.scale(); }
  double learningRate() const override;
  Result gatherMaster(int g, float* out) override;
  Result saveCheckpoint(const std::string& dir, const std::string& tag) override;
  Result loadCheckpoint(const std::string& dir, const std::string& tag) override;
  Result saveModel(const std::string& path) override;
  EngineStats stats() const override;
  EngineMemory memory() const override;

 private:
  enum class Kind { GradReduce, ParamGather, ParamUpdate };  // bucket reduction, stage 3 gather, after-step gather
  struct Pending {
    zcollRequest_t request = nullptr;
    Kind kind = Kind::GradReduce;
    int unit = -1;
    int slot = -1;  // stage 2-3: the bucket slot whose slice is added to the gradient shard
    uint64_t seq = 0;
  };
  enum class Live { Absent, InFlight, Present };

  // Errors. fail() records the first failure: the engine refuses further calls after it.
  Result fail(zcollResult_t code, std::string message);
  Result commFail(zcollResult_t code, const std::string& what);
  Result usable() const;
  Result checkGroup(int g, const char* arg) const;
  Result crossCheck(bool locallyOk);

  // Communication.
  uint64_t issue(zcollResult_t r, const zcollRequest_t& req, Kind kind, int unit, int slot, Result* result);
  std::string describe(Kind kind, int unit) const;  // for messages: what a request was doing
  Result completeThrough(uint64_t seq);  // waits for every request up to seq, in order
  Result completeAll();
  Result finish(const Pending& p);
  Result blocking(zcollResult_t r, const std::string& what);  // times a blocking call's wait

  // Memory.
  // A zeroed buffer counted in *counter; out of memory fails the engine (the buffer is then empty).
  HostBuffer allocate(size_t bytes, int64_t* counter, bool pin, const char* what);
  int acquireSlot(Result* result);
  void releaseSlot(int slot);
  Result launchUnit(int u);
  double predivideFactor() const;
  void preDivide(std::byte* buf, int64_t n);

  // Stage 3 parameters.
  Result gatherUnit(int u, bool prefetch);
  void freeLive(int g);
  void prefetchFrom(size_t traceAt);
  int64_t reuseDistance(int g) const;  // elements fetched before g is needed again; -1: not again
  void endMicroBatch();

  // The optimizer.
  std::byte* ownedGrad(int u) const;
  std::byte* ownedParam(int u) const;  // where this rank's updated slice goes (compute dtype)
  float* master(int u) const;
  Result optimizerStep(bool* stepped);
  Result gatherParamsAfterStep();

  // Checkpoints (checkpoint.cpp).
  Result restoreFrom(const std::string& dir, const std::string& tag);
  // Collective: every rank learns whether any failed; a rank that did not fail reports the other's.
  Result agree(const Result& local, const std::string& what);

  size_t esize() const { return static_cast<size_t>(dtypeSize(dtype_)); }
  std::byte* at(const HostBuffer& b, int64_t elems) const { return b.data() + static_cast<size_t>(elems) * esize(); }
  bool mixed() const { return dtype_ != DType::F32; }
  int stage() const { return config_.zero.stage; }

  zcollComm_t comm_;
  TrainConfig config_;
  std::vector<GroupSpec> groups_;
  EngineOptions options_;
  int rank_ = 0, ranks_ = 1, part_ = 0;  // part_: this rank's partition (0 at stage 0)
  DType dtype_ = DType::F32;
  zcollDataType_t zdtype_ = zcollFloat32;
  std::unique_ptr<Partition> partition_;
  std::vector<Segment> segments_;  // what this rank's partition owns, group by group
  std::unique_ptr<CpuAdam> adam_;
  LossScaler scaler_;
  Result failed_;

  HostBuffer params_, shardParams_, grads_, gradShard_, master_, expAvg_, expAvgSq_, scratch_;
  std::vector<HostBuffer> persistent_;  // stage 3: full copies of persistent groups (by group)
  std::vector<bool> isPersistent_;
  int64_t paramBytes_ = 0, gradBytes_ = 0, optimBytes_ = 0, bufferBytes_ = 0, peakBufferBytes_ = 0;
  int64_t scratchElems_ = 0;
  int64_t slotElems_ = 0;  // a gradient bucket slot: the largest unit, padded

  // Gradient buckets (stage 2-3): slots of the largest unit's padded size, reused.
  std::vector<HostBuffer> slots_;
  std::vector<int> freeSlots_;
  size_t maxSlots_ = 2;
  std::vector<int> unitSlot_;          // slot holding a unit's gradients this micro-batch, or -1
  std::vector<int> unitReady_;         // groups of the unit marked ready this micro-batch
  std::vector<bool> unitLaunched_;     // its reduction has been issued this micro-batch
  std::vector<bool> groupReady_;

  // Stage 3 gathered parameters.
  std::vector<Live> live_;
  std::vector<HostBuffer> liveBuf_;
  std::vector<bool> inUse_;
  std::vector<uint64_t> gatherSeq_;
  std::vector<bool> prefetched_;  // gathered ahead and not fetched yet (counted in prefetchElems_)
  std::map<size_t, std::vector<HostBuffer>> livePool_;  // freed buffers by size, reused
  int64_t liveElems_ = 0, prefetchElems_ = 0;
  std::vector<int> trace_;   // fetch order of a micro-batch, recorded in the first one
  bool recording_ = true, traceBroken_ = false;
  size_t traceAt_ = 0;

  std::deque<Pending> pending_;
  uint64_t nextSeq_ = 1;

  int64_t microSteps_ = 0, stepsTaken_ = 0;
  int64_t sinceBoundary_ = 0;  // micro-batches of the current accumulation before this one
  Boundary boundary_ = Boundary::Auto;
  std::vector<ParamGroupOptions> paramGroups_;  // by GroupSpec::paramGroup
  EngineStats stats_;
};

inline double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace zcoll::zero
