// types.hpp - the vocabulary shared by every layer: data types, reduction ops, collectives.
//
// The numeric values of DataType and RedOp equal the C ABI's zcollDataType_t / zcollRedOp_t
// (checked by static_asserts in comm/api.cpp), so the boundary converts by cast after validation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace zcoll {

enum class DataType : int {
  Int8 = 0, Uint8, Int32, Uint32, Int64, Uint64, Float16, Float32, Float64, Bfloat16,
};
inline constexpr int kNumDataTypes = 10;

enum class RedOp : int { Sum = 0, Prod, Max, Min, Avg };
inline constexpr int kNumRedOps = 5;
inline constexpr std::string_view kRedOpNames[kNumRedOps] = {"sum", "prod", "max", "min", "avg"};

enum class Collective : int {
  AllReduce = 0, AllGather, ReduceScatter, Broadcast, Reduce, SendRecv, Gather, Scatter, AllToAll, Barrier,
};
inline constexpr int kNumCollectives = 10;

// One row per data type, in DataType order: the one spelling (nccl-tests'), the other names parsers
// accept, and what the kernels and tests ask about it.
struct DataTypeTraits {
  std::string_view name;
  std::string_view aliases;  // space-separated
  size_t size;
  bool isFloat;
  bool isSigned;
};
inline constexpr DataTypeTraits kDataTypes[kNumDataTypes] = {
    {"int8", "char", 1, false, true},          {"uint8", "", 1, false, false},
    {"int32", "int", 4, false, true},          {"uint32", "", 4, false, false},
    {"int64", "", 8, false, true},             {"uint64", "", 8, false, false},
    {"half", "float16 fp16", 2, true, true},   {"float", "float32 fp32", 4, true, true},
    {"double", "float64 fp64", 8, true, true}, {"bfloat16", "bf16", 2, true, true},
};

// One row per collective, in Collective order: everything the layers, the benchmark and the tests ask
// about a collective. Adding one = a row here (plus its API entry point and algorithms).
struct CollectiveTraits {
  std::string_view name;       // as ZCOLL_ALGO, logs and zcoll-bench's command line spell it
  std::string_view tableName;  // in zcoll-bench's table header (the anchors' spelling)
  bool rooted;                 // has a root rank
  bool reduces;                // applies a reduction op
  bool perRankBlocks;          // its size (opBytes) is nranks blocks of `count` elements
  bool streamsResults;         // large host ops may write results around the cache (not read again)
  int busShare;                // bus bandwidth = algbw x busShare x (N-1)/N; 0: x 1 (nccl-tests')
};
inline constexpr CollectiveTraits kCollectives[kNumCollectives] = {
    // name            table            rooted reduces blocks stream bus
    {"allreduce",     "allreduce",     false, true,  false, true,  2},
    {"allgather",     "allgather",     false, false, true,  true,  1},
    {"reducescatter", "reducescatter", false, true,  true,  true,  1},
    {"broadcast",     "bcast",         true,  false, false, false, 0},
    {"reduce",        "reduce",        true,  true,  false, true,  0},
    {"sendrecv",      "sendrecv",      false, false, false, false, 0},
    {"gather",        "gather",        true,  false, true,  false, 1},
    {"scatter",       "scatter",       true,  false, true,  false, 1},
    {"alltoall",      "alltoall",      false, false, true,  false, 1},
    {"barrier",       "barrier",       false, false, false, false, 0},
};

constexpr const CollectiveTraits& traits(Collective c) { return kCollectives[static_cast<int>(c)]; }
constexpr const DataTypeTraits& traits(DataType t) { return kDataTypes[static_cast<int>(t)]; }

constexpr size_t dataTypeSize(DataType t) {
  const int i = static_cast<int>(t);
  return i >= 0 && i < kNumDataTypes ? kDataTypes[i].size : 0;
}

// nccl-tests' bus bandwidth factor of `c` on n ranks (busbw = algbw x this); barrier moves no data.
constexpr double busFactor(Collective c, int n) {
  if (c == Collective::Barrier) return 0.0;
  const int share = traits(c).busShare;
  return share == 0 ? 1.0 : share * static_cast<double>(n - 1) / n;
}

std::string_view dataTypeName(DataType t);
std::string_view redOpName(RedOp op);
std::string_view collectiveName(Collective c);
// Parse names as printed above, any case; collectives also with underscores ("all_reduce") and
// "bcast", data types by their aliases. False if unknown.
bool parseCollective(std::string_view s, Collective* out);
bool parseDataType(std::string_view s, DataType* out);
bool parseRedOp(std::string_view s, RedOp* out);

}  // namespace zcoll
