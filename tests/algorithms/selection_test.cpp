// selection_test.cpp - ZCOLL_ALGO parsing and the cost-model choice.
#include <gtest/gtest.h>

#include "algorithms/registry.hpp"

namespace zcoll {
namespace {

OpArgs allReduce(size_t count) { return OpArgs{Collective::AllReduce, nullptr, nullptr, count, DataType::Float32}; }

std::string chosen(const AlgorithmSelector& s, const OpArgs& op, int nranks) {  // NOLINT
  const Algorithm* a = nullptr;
  EXPECT_TRUE(s.select(op, nranks, &a).isOk());
  return a ? std::string(a->name()) : "";
}

TEST(AlgoOverride, Parses) {
  std::vector<AlgoRule> rules;
  ASSERT_TRUE(parseAlgoOverride("", &rules).isOk());
  EXPECT_TRUE(rules.empty());
  ASSERT_TRUE(parseAlgoOverride("allreduce:0-64K:direct,allreduce:64K-:ring,broadcast:tree", &rules).isOk());
  ASSERT_EQ(rules.size(), 3u);
  EXPECT_EQ(rules[0].hi, 64u * 1024);
  EXPECT_EQ(rules[1].lo, 64u * 1024);
  EXPECT_FALSE(rules[2].anyCollective);
  EXPECT_EQ(rules[2].coll, Collective::Broadcast);
  for (const char* bad : {"nosuch", "allreduce:nosuch", "nocoll:ring", "allreduce:64K-1K:ring", "allreduce:x-:ring"}) {
    Status s = parseAlgoOverride(bad, &rules);
    EXPECT_EQ(s.code(), StatusCode::InvalidArgument) << bad;
    EXPECT_NE(s.message().find("ZCOLL_ALGO"), std::string::npos) << s.message();
  }
}

TEST(AlgoOverride, RangesAndFallThrough) {
  std::vector<AlgoRule> rules;
  ASSERT_TRUE(parseAlgoOverride("allreduce:0-64K:direct,allreduce:64K-:ring,reducescatter:rhd", &rules).isOk());
  AlgorithmSelector s(rules, CostModel{}, 4);
  EXPECT_EQ(chosen(s, allReduce(16), 4), "direct");
  EXPECT_EQ(chosen(s, allReduce(16 * 1024), 4), "ring");  // 64 KiB: the second rule
  OpArgs rs{Collective::ReduceScatter, nullptr, nullptr, 100, DataType::Float32};
  EXPECT_EQ(chosen(s, rs, 4), "rhd");
  AlgorithmSelector s3(rules, CostModel{}, 3);
  EXPECT_NE(chosen(s3, rs, 3), "rhd");  // rhd needs a power of two: falls through to the model
}

// The eager rule: host ops up to the limit / (N-1) go to their collective's eager algorithm unless a
// ZCOLL_ALGO rule covers them; device ops, larger ones and collectives without one never.
// A model under which eager never looks cheapest (each extra message costs a second): the limit alone.
CostModel eagerNeverCheaper() {
  CostModel m;
  m.message = 1.0;
  return m;
}

TEST(Eager, BelowTheLimitUnlessARuleSaysOtherwise) {
  AlgorithmSelector s({}, eagerNeverCheaper(), 4, 768);  // 256 B to each of 3 peers
  EXPECT_EQ(chosen(s, allReduce(64), 4), "eager");   // 256 B
  EXPECT_EQ(chosen(s, allReduce(0), 4), "eager");
  EXPECT_NE(chosen(s, allReduce(65), 4), "eager");   // 260 B
  OpArgs device = allReduce(2);
  device.device = true;
  EXPECT_NE(chosen(s, device, 4), "eager");
  for (Collective c : {Collective::Broadcast, Collective::Reduce, Collective::AllGather, Collective::ReduceScatter}) {
    OpArgs op{c, nullptr, nullptr, 4, DataType::Float32};  // 16 B a block: 16 or 64 B
    EXPECT_EQ(chosen(s, op, 4), "eager") << collectiveName(c);
  }
  OpArgs gather{Collective::Gather, nullptr, nullptr, 1, DataType::Float32};
  EXPECT_NE(chosen(s, gather, 4), "eager");
  EXPECT_NE(chosen(AlgorithmSelector({}, CostModel{}, 4, 0), allReduce(2), 4), "eager");  // 0: off
  EXPECT_NE(chosen(AlgorithmSelector({}, CostModel{}, 65, 1 << 20), allReduce(2), 65), "eager");  // too many ranks
  EXPECT_EQ(chosen(AlgorithmSelector({}, CostModel{}, 2, 768), allReduce(192), 2), "eager");   // 768 B to 1 peer
  EXPECT_NE(chosen(AlgorithmSelector({}, CostModel{}, 2, 768), allReduce(193), 2), "eager");
  EXPECT_EQ(chosen(AlgorithmSelector({}, CostModel{}, 1, 768), allReduce(192), 1), "eager");   // 1 rank: the op
  EXPECT_NE(chosen(AlgorithmSelector({}, CostModel{}, 1, 768), allReduce(193), 1), "eager");

  std::vector<AlgoRule> rules;
  ASSERT_TRUE(parseAlgoOverride("allreduce:128-:ring,broadcast:tree", &rules).isOk());
  AlgorithmSelector r(rules, eagerNeverCheaper(), 4, 768);
  EXPECT_EQ(chosen(r, allReduce(31), 4), "eager");  // 124 B: below the rule
  EXPECT_EQ(chosen(r, allReduce(32), 4), "ring");   // 128 B: the rule, though under the limit
  OpArgs bcast{Collective::Broadcast, nullptr, nullptr, 1, DataType::Float32};
  EXPECT_EQ(chosen(r, bcast, 4), "tree");
  OpArgs ag{Collective::AllGather, nullptr, nullptr, 1, DataType::Float32};
  EXPECT_EQ(chosen(r, ag, 4), "eager");  // no rule for it
  ASSERT_TRUE(parseAlgoOverride("eager", &rules).isOk());
  EXPECT_EQ(chosen(AlgorithmSelector(rules, CostModel{}, 4, 0), allReduce(1 << 20), 4), "eager");  // by name
}

// Past the limit, eager goes on while the model prices it below the table's choice (one step against
// rd's log2 N), up to kEagerModelBytes; a ZCOLL_ALGO rule still ends it.
TEST(Eager, ReachesPastTheLimitWhereTheModelPricesItCheapest) {
  CostModel m;
  m.alpha = 5e-6;
  m.beta = 1.0 / 20e9;
  m.message = 0.1e-6;
  AlgorithmSelector s({}, m, 8, 2048);  // the limit: 292 B to each of 7 peers
  EXPECT_EQ(chosen(s, allReduce(1024), 8), "eager");  // 4 KiB: 1 step against rd's 3
  const size_t last = static_cast<size_t>(AlgorithmSelector::kEagerModelBytes) / 4;
  EXPECT_NE(chosen(s, allReduce(4 * last), 8), "eager");  // the cap
  // Where its 7 copies of the payload cost more than rd's 2 extra steps save: not eager.
  m.alpha = 0.2e-6;
  AlgorithmSelector slowCopies({}, m, 8, 2048);
  EXPECT_EQ(chosen(slowCopies, allReduce(73), 8), "eager");  // 292 B: the limit
  EXPECT_NE(chosen(slowCopies, allReduce(1024), 8), "eager");
  std::vector<AlgoRule> rules;
  ASSERT_TRUE(parseAlgoOverride("allreduce:1K-:ring", &rules).isOk());
  EXPECT_EQ(chosen(AlgorithmSelector(rules, m, 8, 2048), allReduce(256), 8), "ring");
}

// Across hosts there is no limit below which eager always runs: the model decides from the smallest
// size (16 ranks on 2 hosts, whose 15 messages per rank cost more than rd's 4 steps), while on one
// host the limit holds under the same model.
TEST(Eager, AcrossHostsOnlyWhereTheModelPricesItCheapest) {
  CostModel m;
  m.alpha = 3.7e-6;
  m.beta = 1.0 / 25e9;
  m.message = 0.2e-6;
  m.alphaLocal = 0.9e-6;
  m.betaLocal = 1.0 / 150e9;
  std::vector<uint64_t> ids;
  for (int r = 0; r < 16; ++r) ids.push_back(static_cast<uint64_t>(r / 8));
  AlgorithmSelector twoHosts({}, m, 16, 2048);
  twoHosts.setHosts(patterns::HostLayout::fromHostIds(ids));
  EXPECT_NE(chosen(twoHosts, allReduce(2), 16), "eager");  // 8 B
  AlgorithmSelector oneHost({}, m, 16, 2048);
  EXPECT_EQ(chosen(oneHost, allReduce(2), 16), "eager");
}

TEST(CostModel, LatencyThenBandwidth) {
  CostModel m;
  m.alpha = 5e-6;
  m.beta = 1.0 / 5e9;
  m.message = 0.5e-6;
  // Tiny messages at 8 ranks: not the 14-step ring; huge ones: not the algorithms that move 2S or more
  // through one rank (parameter server, tree).
  EXPECT_NE(chosen(AlgorithmSelector({}, m, 8), allReduce(2), 8), "ring");
  for (int n : {3, 7, 8}) {
    const std::string large = chosen(AlgorithmSelector({}, m, n), allReduce(64 << 20), n);
    EXPECT_TRUE(large != "ps" && large != "tree") << large << " at " << n;
  }
  // Every collective has a choice at every rank count and size.
  for (int n : {1, 2, 3, 8}) {
    AlgorithmSelector s({}, m, n);
    for (const Algorithm* a : allAlgorithms()) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{1000}, size_t{1} << 30}) {
        OpArgs op{a->collective(), nullptr, nullptr, count, DataType::Float32};
        const Algorithm* got = nullptr;
        EXPECT_TRUE(s.select(op, n, &got).isOk()) << collectiveName(a->collective()) << " n=" << n;
      }
    }
  }
}

// Any number of measured curves, each under its full name, and the byte form that the cache and the
// ranks share gives the same model back; anything else does not parse.
TEST(CostModel, ManyCurvesWithFullNamesRoundTrip) {
  CostModel m;
  m.alpha = 1e-6, m.beta = 1e-10, m.message = 1e-7, m.points = kCalibrationPoints;
  for (int i = 0; i < 20; ++i) {
    MeasuredCurve c;
    c.algo = "an_all_reduce_with_a_long_name_" + std::to_string(i);
    for (int k = 0; k < kCalibrationPoints; ++k) c.seconds[static_cast<size_t>(k)] = 1e-6f * static_cast<float>((i + 1) * (k + 1));
    m.allReduce.push_back(c);
  }
  EXPECT_FLOAT_EQ(m.measured("an_all_reduce_with_a_long_name_19", 8), 20e-6f);
  EXPECT_FLOAT_EQ(m.measured("an_all_reduce_with_a_long_name_1", 8), 2e-6f);
  EXPECT_EQ(m.measured("an_all_reduce_with_a_long_name", 8), -1.0);  // a prefix is another name
  const std::string bytes = m.serialize();
  CostModel back;
  ASSERT_TRUE(CostModel::parse(bytes, &back));
  EXPECT_EQ(back.alpha, m.alpha);
  EXPECT_EQ(back.beta, m.beta);
  EXPECT_EQ(back.points, m.points);
  ASSERT_EQ(back.allReduce.size(), m.allReduce.size());
  for (size_t i = 0; i < m.allReduce.size(); ++i) {
    EXPECT_EQ(back.allReduce[i].algo, m.allReduce[i].algo);
    EXPECT_EQ(back.allReduce[i].seconds, m.allReduce[i].seconds);
  }
  for (size_t cut : {size_t{0}, size_t{3}, bytes.size() / 2, bytes.size() - 1})
    EXPECT_FALSE(CostModel::parse(std::string_view(bytes).substr(0, cut), &back)) << cut;
  EXPECT_FALSE(CostModel::parse(bytes + "x", &back));
  std::string bad = bytes;
  bad[0] ^= 1;
  EXPECT_FALSE(CostModel::parse(bad, &back));
}

// Algorithm A is faster than B within every trial but one (where the machine slowed down between
// them); absolute medians pick B, the paired figures A.
TEST(CostModel, PairedFiguresJudgeWithinTrials) {
  const double t[] = {
      1.0, 3.0, 3.0, 1.0, 3.0,  // A
      1.1, 1.1, 3.3, 1.1, 3.3,  // B
      1.3, 3.9, 3.9, 1.3, 3.9,  // C
  };
  float out[3];
  pairedFigures(t, 3, 5, out);
  // Fastest per trial: 1.0 1.1 3.0 1.0 3.0 (median 1.1); ratios' medians: A 1, B 1.1, C 1.3.
  EXPECT_FLOAT_EQ(out[0], 1.1f);
  EXPECT_FLOAT_EQ(out[1], 1.1f * 1.1f);
  EXPECT_NEAR(out[2], 1.3 * 1.1, 1e-6);
  EXPECT_LT(out[0], out[1]);
  EXPECT_LT(out[1], out[2]);
}

}  // namespace
}  // namespace zcoll
