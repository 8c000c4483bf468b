// types.cpp - printable names of the shared vocabulary.
#include "core/types.hpp"

#include <strings.h>

#include <string>

namespace zcoll {

std::string_view dataTypeName(DataType t) {
  static constexpr std::string_view kNames[kNumDataTypes] = {
      "int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16"};
  int i = static_cast<int>(t);
  return i >= 0 && i < kNumDataTypes ? kNames[i] : "?";
}

std::string_view redOpName(RedOp op) {
  static constexpr std::string_view kNames[kNumRedOps] = {"sum", "prod", "max", "min", "avg"};
  int i = static_cast<int>(op);
  return i >= 0 && i < kNumRedOps ? kNames[i] : "?";
}

std::string_view collectiveName(Collective c) {
  static constexpr std::string_view kNames[kNumCollectives] = {
      "allreduce", "allgather", "reducescatter", "broadcast", "reduce", "sendrecv",
      "gather",    "scatter",   "alltoall",      "barrier"};
  int i = static_cast<int>(c);
  return i >= 0 && i < kNumCollectives ? kNames[i] : "?";
}

bool parseCollective(std::string_view s, Collective* out) {
  std::string k;
  for (char ch : s)
    if (ch != '_') k += static_cast<char>(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
  if (k == "bcast") k = "broadcast";
  for (int i = 0; i < kNumCollectives; ++i) {
    if (k == collectiveName(static_cast<Collective>(i))) {
      *out = static_cast<Collective>(i);
      return true;
    }
  }
  return false;
}

}  // namespace zcoll
