// The ZeRO engine's pure parts: the partition layout (units, padding, shards, segments), the fp16
// loss scaler's rules (DeepSpeed's), fp16/bf16 conversions and the safetensors header.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "checkpoint_format.hpp"
#include "loss_scaler.hpp"
#include "partition.hpp"

namespace zcoll::zero {
namespace {

TEST(ZeroPartition, BucketsPackConsecutiveGroupsAndPadToThePartitionCount) {
  Partition p({10, 5, 7, 100, 3}, 4, 20);
  ASSERT_EQ(p.units().size(), 4u);  // {10, 5}, {7}, {100}, {3}
  EXPECT_EQ(p.units()[0].firstGroup, 0);
  EXPECT_EQ(p.units()[0].endGroup, 2);
  EXPECT_EQ(p.units()[0].numel, 15);
  EXPECT_EQ(p.units()[0].padded, 16);
  EXPECT_EQ(p.units()[0].slice, 4);
  EXPECT_EQ(p.units()[1].firstGroup, 2);
  EXPECT_EQ(p.units()[1].endGroup, 3);  // 7 + 100 > 20
  EXPECT_EQ(p.units()[2].firstGroup, 3);
  EXPECT_EQ(p.units()[2].endGroup, 4);  // larger than a bucket: a unit of its own
  EXPECT_EQ(p.units()[2].padded, 100);
  EXPECT_EQ(p.units()[3].padded, 4);
  EXPECT_EQ(p.flatNumel(), 16 + 8 + 100 + 4);
  EXPECT_EQ(p.shardNumel(), 4 + 2 + 25 + 1);
}

// A unit never mixes frozen and trainable groups (frozen ones are neither reduced nor updated).
TEST(ZeroPartition, FrozenGroupsNeverShareAUnitWithTrainableOnes) {
  Partition p({3, 4, 5, 6, 2}, 2, 100, {false, true, true, false, false});
  ASSERT_EQ(p.units().size(), 3u);  // {3}, {4, 5} frozen, {6, 2}
  EXPECT_EQ(p.units()[0].endGroup, 1);
  EXPECT_EQ(p.units()[1].firstGroup, 1);
  EXPECT_EQ(p.units()[1].endGroup, 3);
  EXPECT_EQ(p.units()[2].firstGroup, 3);
  EXPECT_EQ(p.units()[2].endGroup, 5);
  EXPECT_EQ(p.totalNumel(), 20);
  // The shard holds the trainable slices first (gradients and moments cover only them), frozen after.
  EXPECT_EQ(p.trainableShardNumel(), 2 + 4);  // slices of {3} and {6, 2} at 2 partitions
  EXPECT_EQ(p.shardNumel(), 2 + 5 + 4);
  EXPECT_EQ(p.units()[0].shardOffset, 0);
  EXPECT_EQ(p.units()[2].shardOffset, 2);
  EXPECT_EQ(p.units()[1].shardOffset, 6);
  for (const Segment& s : p.segments(1)) {
    const bool frozen = s.group == 1 || s.group == 2;
    EXPECT_EQ(s.shardOffset >= p.trainableShardNumel(), frozen) << "group " << s.group;
  }
}

TEST(ZeroPartition, OffsetsAndSizesAddUp) {
  const std::vector<int64_t> numel = {10, 5, 7, 100, 3, 1, 64};
  for (int parts : {1, 2, 3, 4, 7, 8}) {
    for (int64_t bucket : {0, 1, 16, 50, 1000}) {
      Partition p(numel, parts, bucket);
      int64_t flat = 0, shard = 0, total = 0;
      for (const Unit& u : p.units()) {
        EXPECT_EQ(u.flatOffset, flat);
        EXPECT_EQ(u.shardOffset, shard);
        EXPECT_EQ(u.padded % parts, 0);
        EXPECT_GE(u.padded, u.numel);
        EXPECT_LT(u.padded - u.numel, parts);
        EXPECT_EQ(u.slice * parts, u.padded);
        if (u.endGroup - u.firstGroup > 1) {
          EXPECT_LE(u.numel, bucket);
        }
        int64_t at = u.flatOffset;
        for (int g = u.firstGroup; g < u.endGroup; ++g) {
          EXPECT_EQ(p.unitOf(g), &u - p.units().data());
          EXPECT_EQ(p.groupFlatOffset(g), at);
          at += numel[static_cast<size_t>(g)];
        }
        flat += u.padded, shard += u.slice, total += u.numel;
      }
      EXPECT_EQ(p.flatNumel(), flat);
      EXPECT_EQ(p.shardNumel(), shard);
      EXPECT_EQ(p.totalNumel(), 190);
      EXPECT_EQ(total, 190);
    }
  }
}

TEST(ZeroPartition, SegmentsCoverEveryElementOnceAndStayInsideTheShard) {
  const std::vector<int64_t> numel = {10, 5, 7, 100, 3, 1, 64};
  for (int parts : {1, 2, 3, 4, 5, 8}) {
    for (int64_t bucket : {0, 16, 1000}) {
      Partition p(numel, parts, bucket);
      std::vector<std::vector<int>> seen(numel.size());
      for (size_t g = 0; g < numel.size(); ++g) seen[g].assign(static_cast<size_t>(numel[g]), 0);
      for (int r = 0; r < parts; ++r) {
        int64_t lastShard = -1;
        for (const Segment& s : p.segments(r)) {
          ASSERT_LT(s.lo, s.hi);
          EXPECT_GT(s.shardOffset, lastShard);  // in shard order
          lastShard = s.shardOffset;
          EXPECT_LE(s.shardOffset + (s.hi - s.lo), p.shardNumel());
          // The segment's shard position is where the flat layout puts it in rank r's slice.
          const Unit& u = p.units()[static_cast<size_t>(p.unitOf(s.group))];
          const int64_t flat = p.groupFlatOffset(s.group) + s.lo;
          EXPECT_EQ(flat - (u.flatOffset + r * u.slice), s.shardOffset - u.shardOffset);
          for (int64_t i = s.lo; i < s.hi; ++i) seen[static_cast<size_t>(s.group)][static_cast<size_t>(i)]++;
        }
      }
      for (size_t g = 0; g < numel.size(); ++g)
        for (int c : seen[g]) ASSERT_EQ(c, 1) << "parts " << parts << " bucket " << bucket << " group " << g;
    }
  }
}

TEST(ZeroPartition, OnePartitionOwnsEverything) {
  Partition p({3, 4}, 1, 0);
  const auto segs = p.segments(0);
  ASSERT_EQ(segs.size(), 2u);
  EXPECT_EQ(segs[0].hi, 3);
  EXPECT_EQ(segs[1].shardOffset, 3);
  EXPECT_EQ(p.shardNumel(), 7);
}

TEST(ZeroLossScaler, LowersAfterHysteresisAndRaisesAfterAWindow) {
  Fp16Config c;
  c.enabled = true;
  c.initialScalePower = 4;  // 16
  c.lossScaleWindow = 3;
  c.hysteresis = 2;
  c.minLossScale = 2;
  LossScaler s(c);
  EXPECT_EQ(s.scale(), 16);
  s.update(true);  // first overflow: hysteresis 2 -> 1, scale kept
  EXPECT_EQ(s.scale(), 16);
  s.update(true);  // second: lowered
  EXPECT_EQ(s.scale(), 8);
  s.update(false);  // iteration 2, last overflow 1: (2-1) % 3 != 0
  s.update(false);
  EXPECT_EQ(s.scale(), 8);
  s.update(false);  // (4-1) % 3 == 0: raised
  EXPECT_EQ(s.scale(), 16);
  for (int i = 0; i < 10; ++i) s.update(true);
  EXPECT_EQ(s.scale(), 2);  // never below min_loss_scale
}

TEST(ZeroLossScaler, StaticScaleAndDisabled) {
  Fp16Config c;
  c.enabled = true;
  c.lossScale = 128;
  LossScaler s(c);
  s.update(true);
  s.update(false);
  EXPECT_EQ(s.scale(), 128);
  LossScaler off{Fp16Config{}};
  EXPECT_EQ(off.scale(), 1);
}

TEST(ZeroDtype, ConversionsRoundToNearestEven) {
  const float in[] = {0.0f, 1.0f, -2.5f, 65504.0f, 1e-8f, 3.14159265f, 1.0f + 1.0f / 256, INFINITY, 70000.0f};
  const int n = sizeof in / sizeof in[0];
  uint16_t h[n];
  float back[n];
  fromFloat32(DType::F16, in, h, n);
  toFloat32(DType::F16, h, back, n);
  EXPECT_EQ(back[1], 1.0f);
  EXPECT_EQ(back[2], -2.5f);
  EXPECT_EQ(back[3], 65504.0f);
  EXPECT_NEAR(back[5], 3.140625f, 1e-6);
  EXPECT_TRUE(std::isinf(back[7]));
  EXPECT_TRUE(std::isinf(back[8]));  // beyond fp16's range
  fromFloat32(DType::BF16, in, h, n);
  toFloat32(DType::BF16, h, back, n);
  EXPECT_EQ(back[1], 1.0f);
  EXPECT_EQ(back[6], 1.0f);  // 1 + 2^-8 is a tie: to even
  EXPECT_EQ(back[5], 3.140625f);
  EXPECT_EQ(dtypeSize(DType::BF16), 2);
  EXPECT_EQ(dtypeSize(DType::F32), 4);
}

TEST(ZeroCheckpointFormat, SafetensorsHeaderIsAlignedJsonWithOffsets) {
  std::vector<int64_t> offsets;
  const std::string h = safetensorsHeader({{"a.weight", 6, {2, 3}}, {"a.bias", 2, {}}}, DType::BF16, &offsets);
  uint64_t len = 0;
  std::memcpy(&len, h.data(), 8);
  ASSERT_EQ(h.size(), 8 + len);
  EXPECT_EQ(h.size() % 8, 0u);
  const auto j = nlohmann::json::parse(h.substr(8));
  EXPECT_EQ(j["a.weight"]["dtype"], "BF16");
  EXPECT_EQ(j["a.weight"]["shape"], nlohmann::json::array({2, 3}));
  EXPECT_EQ(j["a.weight"]["data_offsets"], nlohmann::json::array({0, 12}));
  EXPECT_EQ(j["a.bias"]["shape"], nlohmann::json::array({2}));
  EXPECT_EQ(j["a.bias"]["data_offsets"], nlohmann::json::array({12, 16}));
  ASSERT_EQ(offsets.size(), 2u);
  EXPECT_EQ(offsets[0], static_cast<int64_t>(h.size()));
  EXPECT_EQ(offsets[1], static_cast<int64_t>(h.size()) + 12);
}

TEST(ZeroCheckpointFormat, MetaRoundTripsAndBadFilesAreNamed) {
  CheckpointMeta m;
  m.ranks = 3, m.stage = 2, m.dtype = "bf16", m.steps = 7, m.microSteps = 14, m.lossScale = 1, m.hysteresis = 2;
  m.groups = {{"w", 10, {2, 5}}, {"b", 2, {2}}};
  m.files = {{"zero_rank_00000.bin", {{0, 0, 4, 0}}}, {"zero_rank_00001.bin", {{0, 4, 10, 0}, {1, 0, 2, 72}}}};
  const std::string dir = testing::TempDir();
  std::string error;
  ASSERT_TRUE(writeFileAtomic(dir + "/meta.json", metaToJson(m), &error)) << error;
  CheckpointMeta back;
  ASSERT_TRUE(readMeta(dir + "/meta.json", &back, &error)) << error;
  EXPECT_EQ(back.ranks, 3);
  EXPECT_EQ(back.dtype, "bf16");
  ASSERT_EQ(back.files.size(), 2u);
  EXPECT_EQ(back.files[1].segments[1].offset, 72);
  EXPECT_EQ(back.groups[0].shape, (std::vector<int64_t>{2, 5}));
  m.files[1].segments[1].hi = 3;  // beyond group b
  ASSERT_TRUE(writeFileAtomic(dir + "/meta.json", metaToJson(m), &error));
  EXPECT_FALSE(readMeta(dir + "/meta.json", &back, &error));
  EXPECT_NE(error.find("files"), std::string::npos) << error;
  EXPECT_FALSE(readMeta(dir + "/missing.json", &back, &error));
  EXPECT_NE(error.find("missing.json"), std::string::npos) << error;
}

}  // namespace
}  // namespace zcoll::zero
