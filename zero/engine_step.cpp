// engine_step.cpp - the ZeRO engine's step: finishing the reductions, unscaling, the fp16 overflow
// check, clipping by global norm, AdamW on this rank's shard and the parameter update of every rank;
// also initParams, gatherMaster and the learning rate.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>

#include "engine_impl.hpp"

namespace zcoll::zero {

using Clock = std::chrono::steady_clock;

namespace {

double sumSquares(DType type, const std::byte* data, int64_t n, float* scratch, int64_t scratchElems) {
  double total = 0;
  for (int64_t off = 0; off < n; off += scratchElems) {
    const int64_t len = std::min(scratchElems, n - off);
    const float* x;
    if (type == DType::F32) {
      x = reinterpret_cast<const float*>(data) + off;
    } else {
      toFloat32(type, data + static_cast<size_t>(off) * static_cast<size_t>(dtypeSize(type)), scratch, len);
      x = scratch;
    }
    double part = 0;
    for (int64_t i = 0; i < len; ++i) part += static_cast<double>(x[i]) * x[i];
    total += part;
  }
  return total;
}

}  // namespace

double EngineImpl::learningRate() const { return config_.scheduler.lrAt(stepsTaken_, config_.optimizer.lr); }

std::byte* EngineImpl::ownedGrad(int u) const {
  const Unit& unit = partition_->units()[static_cast<size_t>(u)];
  if (stage() <= 1) return at(grads_, unit.flatOffset + part_ * unit.slice);
  return at(gradShard_, unit.shardOffset);
}

std::byte* EngineImpl::ownedParam(int u) const {
  const Unit& unit = partition_->units()[static_cast<size_t>(u)];
  if (stage() <= 2) return at(params_, unit.flatOffset + part_ * unit.slice);
  return at(shardParams_, unit.shardOffset);
}

float* EngineImpl::master(int u) const {
  if (!mixed()) return reinterpret_cast<float*>(ownedParam(u));
  return reinterpret_cast<float*>(master_.data()) + partition_->units()[static_cast<size_t>(u)].shardOffset;
}

Result EngineImpl::initParams(int g, const float* values) {
  Result r = checkGroup(g, "initParams");
  if (!r.ok()) return r;
  if (!values) return {zcollInvalidArgument, "initParams: values is null"};
  const Unit& unit = partition_->units()[static_cast<size_t>(partition_->unitOf(g))];
  const int64_t off = partition_->groupFlatOffset(g), numel = groups_[static_cast<size_t>(g)].numel;
  if (stage() <= 2) fromFloat32(dtype_, values, at(params_, off), numel);
  if (stage() == 3 && isPersistent_[static_cast<size_t>(g)])
    fromFloat32(dtype_, values, at(persistent_[static_cast<size_t>(g)], off - unit.flatOffset), numel);
  // This rank's part: the master weights and, at stage 3, the parameter shard.
  const int64_t sliceLo = unit.flatOffset + part_ * unit.slice;
  const int64_t lo = std::max(sliceLo, off), hi = std::min(sliceLo + unit.slice, off + numel);
  if (lo >= hi) return {};
  const int64_t shardAt = unit.shardOffset + (lo - sliceLo);
  if (stage() == 3) fromFloat32(dtype_, values + (lo - off), at(shardParams_, shardAt), hi - lo);
  if (mixed()) std::memcpy(reinterpret_cast<float*>(master_.data()) + shardAt, values + (lo - off), static_cast<size_t>(hi - lo) * 4);
  return {};
}

Result EngineImpl::gatherMaster(int g, float* out) {
  Result r = checkGroup(g, "gatherMaster");
  if (!r.ok()) return r;
  if (!out) return {zcollInvalidArgument, "gatherMaster: out is null"};
  const int u = partition_->unitOf(g);
  const Unit& unit = partition_->units()[static_cast<size_t>(u)];
  const int64_t inUnit = partition_->groupFlatOffset(g) - unit.flatOffset, numel = groups_[static_cast<size_t>(g)].numel;
  if (stage() == 0) {
    std::memcpy(out, master(u) + inUnit, static_cast<size_t>(numel) * 4);
    return {};
  }
  r = completeAll();
  if (!r.ok()) return r;
  std::vector<float> full(static_cast<size_t>(unit.padded));
  const auto t0 = Clock::now();
  r = blocking(zcollAllGather(master(u), full.data(), static_cast<size_t>(unit.slice), zcollFloat32, comm_, nullptr),
               "gatherMaster: all-gather of group '" + groups_[static_cast<size_t>(g)].name + "'");
  stats_.commWaitSeconds += seconds(Clock::now() - t0);
  if (r.ok()) std::memcpy(out, full.data() + inUnit, static_cast<size_t>(numel) * 4);
  return r;
}

Result EngineImpl::setParamGroup(int paramGroup, const ParamGroupOptions& o) {
  Result r = usable();
  if (!r.ok()) return r;
  if (paramGroup < 0 || paramGroup >= static_cast<int>(paramGroups_.size()))
    return {zcollInvalidArgument, "setParamGroup: paramGroup " + std::to_string(paramGroup) + " is not in [0, " +
                                      std::to_string(paramGroups_.size()) + ") (the groups' paramGroup values)"};
  const std::string where = "setParamGroup(" + std::to_string(paramGroup) + "): ";
  if (!(o.lr >= 0) || !std::isfinite(o.lr)) return {zcollInvalidArgument, where + "lr " + std::to_string(o.lr) + " must be finite and >= 0"};
  if (!(o.beta1 >= 0 && o.beta1 < 1)) return {zcollInvalidArgument, where + "betas[0] " + std::to_string(o.beta1) + " is not in [0, 1)"};
  if (!(o.beta2 >= 0 && o.beta2 < 1)) return {zcollInvalidArgument, where + "betas[1] " + std::to_string(o.beta2) + " is not in [0, 1)"};
  if (!(o.eps >= 0) || !std::isfinite(o.eps)) return {zcollInvalidArgument, where + "eps " + std::to_string(o.eps) + " must be finite and >= 0"};
  if (!(o.weightDecay >= 0) || !std::isfinite(o.weightDecay))
    return {zcollInvalidArgument, where + "weight_decay " + std::to_string(o.weightDecay) + " must be finite and >= 0"};
  paramGroups_[static_cast<size_t>(paramGroup)] = o;
  return {};
}

Result EngineImpl::setBoundary(Boundary boundary) {
  Result r = usable();
  if (!r.ok()) return r;
  for (size_t u = 0; u < unitLaunched_.size(); ++u)
    if (unitLaunched_[u] && stage() <= 1)
      return {zcollInvalidUsage, "setBoundary: gradients of this micro-batch are already being reduced (set it before backward)"};
  boundary_ = boundary;
  return {};
}

Result EngineImpl::step(bool* stepped) {
  if (stepped) *stepped = false;
  Result r = usable();
  if (!r.ok()) return r;
  const bool boundary = atBoundary();
  // Buckets whose groups got no gradient still take part (zeros): every rank issues the same calls.
  for (size_t u = 0; u < unitLaunched_.size() && r.ok(); ++u)
    if (!unitLaunched_[u]) r = launchUnit(static_cast<int>(u));
  if (r.ok()) r = completeAll();
  if (!r.ok()) return r;
  if (stage() == 3)
    for (size_t g = 0; g < groups_.size(); ++g) {
      freeLive(static_cast<int>(g));
      inUse_[g] = false;
    }
  endMicroBatch();
  ++microSteps_;
  ++stats_.microSteps;
  boundary_ = Boundary::Auto;
  if (!boundary) {
    ++sinceBoundary_;
    return {};
  }
  sinceBoundary_ = 0;
  return optimizerStep(stepped);
}

Result EngineImpl::optimizerStep(bool* stepped) {
  const auto t0 = Clock::now();
  const auto& units = partition_->units();
  float* scratch = reinterpret_cast<float*>(scratch_.data());
  const double inv =
      predivideFactor() / (scaler_.scale() * ranks_ * static_cast<double>(config_.gradientAccumulationSteps));

  // The global norm (and the overflow check: inf or NaN anywhere makes it non-finite).
  double sumsq = 0;
  auto frozen = [&](size_t u) { return groups_[static_cast<size_t>(units[u].firstGroup)].frozen; };
  for (size_t u = 0; u < units.size(); ++u)
    if (!frozen(u)) sumsq += sumSquares(dtype_, ownedGrad(static_cast<int>(u)), units[u].slice, scratch, scratchElems_);
  if (stage() >= 1 && ranks_ > 1) {
    const auto c0 = Clock::now();
    Result r = blocking(zcollAllReduce(&sumsq, &sumsq, 1, zcollFloat64, zcollSum, comm_, nullptr), "step: all-reduce of the gradient norm");
    stats_.commWaitSeconds += seconds(Clock::now() - c0);
    if (!r.ok()) return r;
  }
  const double norm = std::sqrt(sumsq) * inv;
  auto zeroGrads = [&] {
    if (stage() <= 1) std::memset(grads_.data(), 0, grads_.bytes());
    else if (gradShard_.bytes()) std::memset(gradShard_.data(), 0, gradShard_.bytes());
  };
  if (config_.fp16.enabled && !std::isfinite(norm)) {
    const double before = scaler_.scale();
    scaler_.update(true);
    ++stats_.skippedSteps;
    zeroGrads();
    if (options_.log && rank_ == 0)
      std::cerr << "zcoll zero: step " << stepsTaken_ + 1 << ": fp16 gradient overflow, step skipped; loss scale " << before
                << " -> " << scaler_.scale() << "\n";
    stats_.optimizerSeconds += seconds(Clock::now() - t0);
    return {};
  }
  const double clip = config_.gradientClipping;
  const double coef = clip > 0 && norm > clip ? clip / (norm + 1e-6) : 1.0;
  const float gscale = static_cast<float>(inv * coef);

  // Each group's stretch of this rank's shard with its paramGroup's settings (padding is not updated).
  const double lr = learningRate();
  std::vector<AdamStep> settings(paramGroups_.size());
  for (size_t k = 0; k < paramGroups_.size(); ++k) {
    const ParamGroupOptions& o = paramGroups_[k];
    AdamStep& a = settings[k];
    a.lr = static_cast<float>(config_.scheduler.type == SchedulerConfig::Type::None ? o.lr : lr);
    a.beta1 = static_cast<float>(o.beta1);
    a.beta2 = static_cast<float>(o.beta2);
    a.eps = static_cast<float>(o.eps);
    a.weightDecay = static_cast<float>(o.weightDecay);
    a.step = stepsTaken_ + 1;
    a.decoupled = config_.optimizer.type == "AdamW";
    a.biasCorrection = config_.optimizer.biasCorrection;
  }
  float* m = reinterpret_cast<float*>(expAvg_.data());
  float* v = reinterpret_cast<float*>(expAvgSq_.data());
  for (const Segment& seg : segments_) {
    const GroupSpec& spec = groups_[static_cast<size_t>(seg.group)];
    if (spec.frozen) continue;
    const int u = partition_->unitOf(seg.group);
    const Unit& unit = units[static_cast<size_t>(u)];
    const int64_t inSlice = seg.shardOffset - unit.shardOffset;
    const std::byte* g = ownedGrad(u) + static_cast<size_t>(inSlice) * esize();
    float* p = master(u) + inSlice;
    std::byte* out = ownedParam(u) + static_cast<size_t>(inSlice) * esize();
    const int64_t so = seg.shardOffset, len0 = seg.hi - seg.lo;
    for (int64_t off = 0; off < len0; off += scratchElems_) {
      const int64_t len = std::min(scratchElems_, len0 - off);
      toFloat32(dtype_, g + static_cast<size_t>(off) * esize(), scratch, len);
      for (int64_t i = 0; i < len; ++i) scratch[i] *= gscale;
      adam_->step(p + off, scratch, m + so + off, v + so + off, static_cast<size_t>(len), settings[static_cast<size_t>(spec.paramGroup)]);
      if (mixed()) fromFloat32(dtype_, p + off, out + static_cast<size_t>(off) * esize(), len);
    }
  }
  zeroGrads();
  scaler_.update(false);
  ++stepsTaken_;
  ++stats_.steps;
  stats_.lr = settings[0].lr;
  stats_.gradNorm = norm;
  stats_.optimizerSeconds += seconds(Clock::now() - t0);
  Result r = gatherParamsAfterStep();
  if (r.ok() && stepped) *stepped = true;
  return r;
}

// Every rank's parameters catch up with the updated shards: stages 1-2 all-gather every bucket in
// place, stage 3 re-gathers its persistent groups (the others are gathered when next fetched).
Result EngineImpl::gatherParamsAfterStep() {
  if (stage() == 0) return {};
  const auto& units = partition_->units();
  Result r;
  for (size_t u = 0; u < units.size() && r.ok(); ++u) {
    const Unit& unit = units[u];
    std::byte* dst;
    if (stage() <= 2) dst = at(params_, unit.flatOffset);
    else if (isPersistent_[static_cast<size_t>(unit.firstGroup)]) dst = persistent_[static_cast<size_t>(unit.firstGroup)].data();
    else continue;
    zcollRequest_t req = nullptr;
    issue(zcollAllGatherAsync(ownedParam(static_cast<int>(u)), dst, static_cast<size_t>(unit.slice), zdtype_, comm_, &req), req,
          Kind::ParamUpdate, static_cast<int>(u), -1, &r);
    stats_.gatherBytes += unit.padded * static_cast<int64_t>(esize());
  }
  if (!r.ok()) return r;
  return completeAll();
}

}  // namespace zcoll::zero
