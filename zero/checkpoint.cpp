// checkpoint.cpp - sharded checkpoints of the ZeRO engine (each rank writes and reads only its own
// shard; a checkpoint loads onto any rank count and stage) and the export of the model's weights.
// The format is in checkpoint_format.hpp.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "checkpoint_format.hpp"
#include "engine_impl.hpp"

namespace zcoll::zero {
namespace {

std::string rankFileName(int r) {
  char name[32];
  std::snprintf(name, sizeof name, "zero_rank_%05d.bin", r);
  return name;
}

bool makeDirs(const std::string& path, std::string* error) {
  for (size_t at = 1; at <= path.size(); ++at) {
    if (at != path.size() && path[at] != '/') continue;
    const std::string part = path.substr(0, at);
    if (mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) {
      *error = part + ": cannot create: " + std::strerror(errno);
      return false;
    }
  }
  return true;
}

}  // namespace

Result EngineImpl::agree(const Result& local, const std::string& what) {
  int failed = local.ok() ? 0 : 1;
  const zcollResult_t rc = zcollAllReduce(&failed, &failed, 1, zcollInt32, zcollMax, comm_, nullptr);
  if (rc != zcollSuccess) return commFail(rc, what);
  if (!local.ok()) return local;
  if (failed) return {zcollRemoteError, what + ": another rank failed (its error says why)"};
  return {};
}

Result EngineImpl::saveCheckpoint(const std::string& dir, const std::string& tag) {
  Result r = usable();
  if (!r.ok()) return r;
  if (dir.empty()) return {zcollInvalidArgument, "saveCheckpoint: dir is empty"};
  if (tag.empty() || tag.find('/') != std::string::npos || tag == "." || tag == "..")
    return {zcollInvalidArgument, "saveCheckpoint: tag \"" + tag + "\" must be a non-empty name without '/'"};
  if (sinceBoundary_ != 0)
    return {zcollInvalidUsage, "saveCheckpoint: in the middle of a gradient accumulation (save after the step that completes it)"};
  r = completeAll();
  if (!r.ok()) return r;
  const std::string path = dir + "/" + tag;
  std::string error;
  Result local;
  if (!makeDirs(path, &error)) local = {zcollSystemError, "saveCheckpoint: " + error};

  // The writers: every rank from stage 1, rank 0 alone at stage 0 (all ranks hold the same states).
  const int writers = stage() == 0 ? 1 : ranks_;
  auto segmentsOf = [&](int p) {
    std::vector<FileSegment> out;
    int64_t offset = 0;
    for (const Segment& s : partition_->segments(p)) {
      out.push_back(FileSegment{s.group, s.lo, s.hi, offset});
      offset += 3 * (s.hi - s.lo) * static_cast<int64_t>(sizeof(float));
    }
    return out;
  };
  if (local.ok() && rank_ < writers) {
    const std::string file = path + "/" + rankFileName(rank_), tmp = file + ".tmp";
    const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    bool ok = fd >= 0;
    const std::vector<Segment> mine = partition_->segments(part_);
    const std::vector<FileSegment> at = segmentsOf(part_);
    const float* m = reinterpret_cast<const float*>(expAvg_.data());
    const float* v = reinterpret_cast<const float*>(expAvgSq_.data());
    std::vector<float> zeros;  // a frozen group's moments (it has none)
    for (size_t i = 0; ok && i < mine.size(); ++i) {
      const Segment& s = mine[i];
      const Unit& unit = partition_->units()[static_cast<size_t>(partition_->unitOf(s.group))];
      const float* w = master(partition_->unitOf(s.group)) + (s.shardOffset - unit.shardOffset);
      const size_t bytes = static_cast<size_t>(s.hi - s.lo) * sizeof(float);
      const bool frozen = groups_[static_cast<size_t>(s.group)].frozen;
      if (frozen) zeros.assign(static_cast<size_t>(s.hi - s.lo), 0.0f);
      ok = writeAt(fd, w, bytes, at[i].offset) &&
           writeAt(fd, frozen ? zeros.data() : m + s.shardOffset, bytes, at[i].offset + static_cast<int64_t>(bytes)) &&
           writeAt(fd, frozen ? zeros.data() : v + s.shardOffset, bytes, at[i].offset + 2 * static_cast<int64_t>(bytes));
    }
    if (ok) ok = fsync(fd) == 0;
    const int err = errno;
    if (fd >= 0) close(fd);
    if (ok && std::rename(tmp.c_str(), file.c_str()) != 0) ok = false;
    if (!ok) {
      unlink(tmp.c_str());
      local = {zcollSystemError, "saveCheckpoint: " + file + ": cannot write: " + std::strerror(err ? err : errno)};
    }
  }
  r = agree(local, "saveCheckpoint");
  if (!r.ok()) return r;

  // Rank 0 describes the whole checkpoint, then points `latest` at it.
  if (rank_ == 0) {
    CheckpointMeta meta;
    meta.ranks = ranks_;
    meta.stage = stage();
    meta.dtype = dtypeName(dtype_);
    meta.steps = stepsTaken_;
    meta.microSteps = microSteps_;
    const LossScaler::State s = scaler_.state();
    meta.lossScale = s.scale, meta.hysteresis = s.hysteresis, meta.scalerIteration = s.iteration, meta.lastOverflow = s.lastOverflow;
    meta.groups = groups_;
    for (int p = 0; p < writers; ++p) meta.files.push_back({rankFileName(p), segmentsOf(p)});
    if (!writeFileAtomic(path + "/meta.json", metaToJson(meta), &error) || !writeFileAtomic(dir + "/latest", tag + "\n", &error))
      local = {zcollSystemError, "saveCheckpoint: " + error};
  }
  return agree(local, "saveCheckpoint");
}

Result EngineImpl::loadCheckpoint(const std::string& dir, const std::string& tag) {
  Result r = usable();
  if (!r.ok()) return r;
  r = completeAll();
  if (!r.ok()) return r;
  r = agree(restoreFrom(dir, tag), "loadCheckpoint");
  if (!r.ok()) return r;
  // The compute-precision parameters follow the loaded master weights.
  if (mixed())
    for (size_t u = 0; u < partition_->units().size(); ++u)
      fromFloat32(dtype_, master(static_cast<int>(u)), ownedParam(static_cast<int>(u)), partition_->units()[u].slice);
  if (stage() == 3)
    for (size_t g = 0; g < groups_.size(); ++g) freeLive(static_cast<int>(g));
  return gatherParamsAfterStep();
}

// Reads this rank's share of DIR/TAG: the master weights and both moments of every element it owns,
// from whichever files hold them.
Result EngineImpl::restoreFrom(const std::string& dir, const std::string& tagIn) {
  std::string tag = tagIn, error;
  if (dir.empty()) return {zcollInvalidArgument, "loadCheckpoint: dir is empty"};
  if (tag.empty() && !readLatest(dir, &tag, &error)) return {zcollInvalidArgument, "loadCheckpoint: " + error};
  const std::string path = dir + "/" + tag;
  CheckpointMeta meta;
  if (!readMeta(path + "/meta.json", &meta, &error)) return {zcollInvalidArgument, "loadCheckpoint: " + error};
  if (meta.groups.size() != groups_.size())
    return {zcollInvalidArgument, "loadCheckpoint: " + path + " holds " + std::to_string(meta.groups.size()) +
                                      " parameter groups, this engine has " + std::to_string(groups_.size())};
  for (size_t g = 0; g < groups_.size(); ++g)
    if (meta.groups[g].name != groups_[g].name || meta.groups[g].numel != groups_[g].numel)
      return {zcollInvalidArgument, "loadCheckpoint: group " + std::to_string(g) + " is '" + meta.groups[g].name + "' (" +
                                        std::to_string(meta.groups[g].numel) + " elements) in " + path + ", '" + groups_[g].name +
                                        "' (" + std::to_string(groups_[g].numel) + ") here"};
  std::vector<int> fds(meta.files.size(), -1);
  auto closeAll = [&] {
    for (int fd : fds)
      if (fd >= 0) close(fd);
  };
  float* m = reinterpret_cast<float*>(expAvg_.data());
  float* v = reinterpret_cast<float*>(expAvgSq_.data());
  for (const Segment& s : partition_->segments(part_)) {
    const Unit& unit = partition_->units()[static_cast<size_t>(partition_->unitOf(s.group))];
    float* w = master(partition_->unitOf(s.group)) + (s.shardOffset - unit.shardOffset);
    int64_t covered = 0;
    for (size_t f = 0; f < meta.files.size(); ++f)
      for (const FileSegment& old : meta.files[f].segments) {
        if (old.group != s.group) continue;
        const int64_t lo = std::max(old.lo, s.lo), hi = std::min(old.hi, s.hi);
        if (lo >= hi) continue;
        if (fds[f] < 0) {
          const std::string file = path + "/" + meta.files[f].name;
          fds[f] = open(file.c_str(), O_RDONLY | O_CLOEXEC);
          if (fds[f] < 0) {
            closeAll();
            return {zcollSystemError, "loadCheckpoint: " + file + ": cannot open: " + std::strerror(errno)};
          }
        }
        const size_t n = static_cast<size_t>(hi - lo);
        const int64_t len = (old.hi - old.lo) * static_cast<int64_t>(sizeof(float));
        const int64_t skip = (lo - old.lo) * static_cast<int64_t>(sizeof(float));
        const int64_t dst = lo - s.lo;
        const bool frozen = groups_[static_cast<size_t>(s.group)].frozen;  // no moments to restore
        if (!readAt(fds[f], w + dst, n * 4, old.offset + skip) ||
            (!frozen && !readAt(fds[f], m + s.shardOffset + dst, n * 4, old.offset + len + skip)) ||
            (!frozen && !readAt(fds[f], v + s.shardOffset + dst, n * 4, old.offset + 2 * len + skip))) {
          closeAll();
          return {zcollSystemError, "loadCheckpoint: " + path + "/" + meta.files[f].name + " is shorter than its segments say"};
        }
        covered += hi - lo;
      }
    if (covered != s.hi - s.lo) {
      closeAll();
      return {zcollInvalidArgument, "loadCheckpoint: " + path + " does not hold elements [" + std::to_string(s.lo) + ", " +
                                        std::to_string(s.hi) + ") of group '" + groups_[static_cast<size_t>(s.group)].name + "' exactly once"};
    }
  }
  closeAll();
  stepsTaken_ = meta.steps;
  microSteps_ = meta.steps * config_.gradientAccumulationSteps;
  sinceBoundary_ = 0;
  stats_.steps = stepsTaken_;  // the trainer resumes counting from here
  stats_.microSteps = microSteps_;
  if (config_.fp16.enabled && meta.dtype == "fp16")  // the scale of an fp16 run carries over to an fp16 run
    scaler_.restore({meta.lossScale, meta.hysteresis, meta.scalerIteration, meta.lastOverflow});
  stats_.lr = learningRate();
  return {};
}

Result EngineImpl::saveModel(const std::string& path) {
  Result r = usable();
  if (!r.ok()) return r;
  if (path.empty()) return {zcollInvalidArgument, "saveModel: path is empty"};
  if (stage() == 3 && !config_.zero.stage3Gather16bitWeightsOnModelSave)
    return {zcollInvalidUsage, "saveModel: stage 3 gathers the weights only with zero_optimization."
                               "stage3_gather_16bit_weights_on_model_save (or use zcoll-zero-consolidate on a checkpoint)"};
  r = completeAll();
  if (!r.ok()) return r;
  Result local;
  int fd = -1;
  std::vector<int64_t> offsets;
  const std::string tmp = path + ".tmp";
  if (rank_ == 0) {
    const std::string header = safetensorsHeader(groups_, dtype_, &offsets);
    fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0 || !writeAt(fd, header.data(), header.size(), 0))
      local = {zcollSystemError, "saveModel: " + tmp + ": cannot write: " + std::strerror(errno)};
  }
  r = agree(local, "saveModel");
  std::vector<std::byte> full;
  for (size_t g = 0; g < groups_.size() && r.ok(); ++g) {
    const Unit& unit = partition_->units()[static_cast<size_t>(partition_->unitOf(static_cast<int>(g)))];
    const int64_t inUnit = partition_->groupFlatOffset(static_cast<int>(g)) - unit.flatOffset;
    const std::byte* src;
    if (stage() <= 2) {
      src = at(params_, unit.flatOffset + inUnit);
    } else {  // gather the group from the shards, one at a time
      full.resize(static_cast<size_t>(unit.padded) * esize());
      r = blocking(zcollAllGather(at(shardParams_, unit.shardOffset), full.data(), static_cast<size_t>(unit.slice), zdtype_, comm_, nullptr),
                   "saveModel: gathering group '" + groups_[g].name + "'");
      src = full.data() + static_cast<size_t>(inUnit) * esize();
    }
    if (r.ok() && rank_ == 0 && local.ok() &&
        !writeAt(fd, src, static_cast<size_t>(groups_[g].numel) * esize(), offsets[g]))
      local = {zcollSystemError, "saveModel: " + tmp + ": cannot write: " + std::strerror(errno)};
  }
  if (fd >= 0) {
    if (local.ok() && r.ok() && (fsync(fd) != 0 || std::rename(tmp.c_str(), path.c_str()) != 0))
      local = {zcollSystemError, "saveModel: " + path + ": cannot write: " + std::strerror(errno)};
    close(fd);
    if (!local.ok() || !r.ok()) unlink(tmp.c_str());
  }
  if (!r.ok()) return r;
  return agree(local, "saveModel");
}

}  // namespace zcoll::zero
