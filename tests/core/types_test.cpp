// types_test.cpp - the tables of core/types.hpp: one spelling per data type and collective, the aliases
// parsers accept, and the traits every layer reads from them.
#include <gtest/gtest.h>

#include "core/types.hpp"
#include "zcoll/zcoll.h"

namespace zcoll {
namespace {

// Every value of an enum of `n` values parses back from each of its names.
template <typename E, typename... Names>
void roundTrip(int n, bool (*parse)(std::string_view, E*), Names... names) {
  for (int i = 0; i < n; ++i)
    for (std::string_view name : {names(static_cast<E>(i))...}) {
      E back;
      ASSERT_TRUE(parse(name, &back)) << name;
      EXPECT_EQ(back, static_cast<E>(i)) << name;
    }
}

TEST(Types, EveryDataTypeHasOneNameThatParsesBack) {
  roundTrip(kNumDataTypes, parseDataType, dataTypeName);
  // nccl-tests' spellings are the names; the others are aliases of them.
  EXPECT_EQ(dataTypeName(DataType::Float16), "half");
  EXPECT_EQ(dataTypeName(DataType::Bfloat16), "bfloat16");
  for (auto [alias, want] : {std::pair{"fp16", DataType::Float16}, {"FLOAT16", DataType::Float16},
                             {"fp32", DataType::Float32}, {"float32", DataType::Float32}, {"bf16", DataType::Bfloat16},
                             {"char", DataType::Int8}, {"int", DataType::Int32}, {"fp64", DataType::Float64}}) {
    DataType got;
    ASSERT_TRUE(parseDataType(alias, &got)) << alias;
    EXPECT_EQ(got, want) << alias;
  }
  DataType unused;
  for (const char* bad : {"", "fp", "float8", "int16", "bf"}) EXPECT_FALSE(parseDataType(bad, &unused)) << bad;
}

TEST(Types, SizesAndKindsMatchTheCAbi) {
  EXPECT_EQ(dataTypeSize(DataType::Int8), 1u);
  EXPECT_EQ(dataTypeSize(DataType::Float16), 2u);
  EXPECT_EQ(dataTypeSize(DataType::Bfloat16), 2u);
  EXPECT_EQ(dataTypeSize(DataType::Uint32), 4u);
  EXPECT_EQ(dataTypeSize(DataType::Float64), 8u);
  EXPECT_EQ(static_cast<int>(DataType::Bfloat16), zcollBfloat16);
  EXPECT_EQ(kNumDataTypes, zcollNumTypes);
  EXPECT_EQ(kNumRedOps, zcollNumOps);
  EXPECT_TRUE(traits(DataType::Bfloat16).isFloat);
  EXPECT_FALSE(traits(DataType::Uint64).isSigned);
  EXPECT_TRUE(traits(DataType::Int8).isSigned);
}

TEST(Types, CollectiveNamesAndAliasesParse) {
  roundTrip(kNumCollectives, parseCollective, collectiveName, [](Collective c) { return traits(c).tableName; });
  roundTrip(kNumRedOps, parseRedOp, redOpName);
  Collective c;
  ASSERT_TRUE(parseCollective("All_Reduce", &c));
  EXPECT_EQ(c, Collective::AllReduce);
  ASSERT_TRUE(parseCollective("bcast", &c));
  EXPECT_EQ(c, Collective::Broadcast);
  EXPECT_FALSE(parseCollective("allreduc", &c));
  RedOp op;
  ASSERT_TRUE(parseRedOp("MAX", &op));
  EXPECT_EQ(op, RedOp::Max);
  EXPECT_FALSE(parseRedOp("mean", &op));
}

// The traits that were re-derived by hand in six places, now read from the table.
TEST(Types, CollectiveTraits) {
  for (Collective c : {Collective::AllReduce, Collective::ReduceScatter, Collective::Reduce})
    EXPECT_TRUE(traits(c).reduces) << collectiveName(c);
  for (Collective c : {Collective::AllGather, Collective::Broadcast, Collective::Gather, Collective::Scatter,
                       Collective::AllToAll, Collective::SendRecv, Collective::Barrier})
    EXPECT_FALSE(traits(c).reduces) << collectiveName(c);
  for (Collective c : {Collective::Broadcast, Collective::Reduce, Collective::Gather, Collective::Scatter})
    EXPECT_TRUE(traits(c).rooted) << collectiveName(c);
  EXPECT_FALSE(traits(Collective::AllReduce).rooted);
  EXPECT_TRUE(traits(Collective::AllToAll).perRankBlocks);
  EXPECT_FALSE(traits(Collective::Broadcast).perRankBlocks);
  // nccl-tests' bus bandwidth factors.
  EXPECT_DOUBLE_EQ(busFactor(Collective::AllReduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(busFactor(Collective::AllGather, 4), 0.75);
  EXPECT_DOUBLE_EQ(busFactor(Collective::ReduceScatter, 2), 0.5);
  EXPECT_DOUBLE_EQ(busFactor(Collective::Broadcast, 8), 1.0);
  EXPECT_DOUBLE_EQ(busFactor(Collective::Reduce, 8), 1.0);
  EXPECT_DOUBLE_EQ(busFactor(Collective::Barrier, 8), 0.0);
}

}  // namespace
}  // namespace zcoll
