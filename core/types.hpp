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

enum class Collective : int {
  AllReduce = 0, AllGather, ReduceScatter, Broadcast, Reduce, SendRecv, Gather, Scatter, AllToAll, Barrier,
};
inline constexpr int kNumCollectives = 10;

constexpr size_t dataTypeSize(DataType t) {
  switch (t) {
    case DataType::Int8: case DataType::Uint8: return 1;
    case DataType::Float16: case DataType::Bfloat16: return 2;
    case DataType::Int32: case DataType::Uint32: case DataType::Float32: return 4;
    case DataType::Int64: case DataType::Uint64: case DataType::Float64: return 8;
  }
  return 0;
}

std::string_view dataTypeName(DataType t);
std::string_view redOpName(RedOp op);
std::string_view collectiveName(Collective c);
// Parses names as printed above ("allreduce", "all_reduce", ...); false if unknown.
bool parseCollective(std::string_view s, Collective* out);

}  // namespace zcoll
