// checkpoint_format.hpp - the on-disk form of ZeRO checkpoints and of exported weights, shared by
// the engine (checkpoint.cpp) and zcoll-zero-consolidate.
//
// DIR/TAG/meta.json     what was saved: ranks, stage, precision, counters, loss scaler, the groups
//                       (name, numel, shape) and, per rank file, its segments
// DIR/TAG/zero_rank_NNNNN.bin   per segment [group, lo, hi): fp32 master weights, exp_avg,
//                       exp_avg_sq (hi - lo floats each, little-endian), at the segment's offset
// DIR/latest            the newest tag
// Exported weights are safetensors files (8-byte header length, JSON header, raw data).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "zcoll/zero.hpp"

namespace zcoll::zero {

struct FileSegment {
  int group = 0;
  int64_t lo = 0, hi = 0;  // elements of the group
  int64_t offset = 0;      // bytes into the file: master, then exp_avg, then exp_avg_sq
};

struct CheckpointMeta {
  int ranks = 0;
  int stage = 0;
  std::string dtype;  // fp32, fp16, bf16
  int64_t steps = 0, microSteps = 0;
  double lossScale = 1;
  int hysteresis = 0;
  int64_t scalerIteration = 0, lastOverflow = -1;
  std::vector<GroupSpec> groups;
  struct File {
    std::string name;
    std::vector<FileSegment> segments;
  };
  std::vector<File> files;
};

const char* dtypeName(DType type);  // fp32, fp16, bf16
bool parseDtypeName(const std::string& name, DType* type);

std::string metaToJson(const CheckpointMeta& meta);
// Reads DIR/TAG/meta.json; false with *error naming the file and the key.
bool readMeta(const std::string& path, CheckpointMeta* meta, std::string* error);
// The tag DIR/latest names; false with *error.
bool readLatest(const std::string& dir, std::string* tag, std::string* error);
// Writes / reads exactly `bytes` at `offset` of fd (pwrite/pread until done); false on an error or
// an early end of file (errno tells which).
bool writeAt(int fd, const void* data, size_t bytes, int64_t offset);
bool readAt(int fd, void* data, size_t bytes, int64_t offset);
// Writes text to path through a temporary file and a rename; false with *error.
bool writeFileAtomic(const std::string& path, const std::string& text, std::string* error);

// A safetensors header for these groups in `type`, tensors back to back in group order: the bytes
// to write first (length and padded JSON) and each group's data offset after them.
std::string safetensorsHeader(const std::vector<GroupSpec>& groups, DType type, std::vector<int64_t>* offsets);

}  // namespace zcoll::zero
