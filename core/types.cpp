// types.cpp - names of the shared vocabulary, from the tables in types.hpp.
#include "core/types.hpp"

#include <strings.h>

#include <string>

namespace zcoll {

namespace {

bool sameName(std::string_view a, std::string_view b) {
  return a.size() == b.size() && strncasecmp(a.data(), b.data(), a.size()) == 0;
}

// Whether `s` is one of the space-separated words of `list`, any case.
bool inList(std::string_view list, std::string_view s) {
  while (!list.empty()) {
    const size_t space = list.find(' ');
    if (sameName(list.substr(0, space), s)) return true;
    list = space == std::string_view::npos ? std::string_view() : list.substr(space + 1);
  }
  return false;
}

}  // namespace

std::string_view dataTypeName(DataType t) {
  const int i = static_cast<int>(t);
  return i >= 0 && i < kNumDataTypes ? kDataTypes[i].name : "?";
}

std::string_view redOpName(RedOp op) {
  const int i = static_cast<int>(op);
  return i >= 0 && i < kNumRedOps ? kRedOpNames[i] : "?";
}

std::string_view collectiveName(Collective c) {
  const int i = static_cast<int>(c);
  return i >= 0 && i < kNumCollectives ? kCollectives[i].name : "?";
}

bool parseCollective(std::string_view s, Collective* out) {
  std::string k;
  for (char ch : s)
    if (ch != '_') k += ch;
  for (int i = 0; i < kNumCollectives; ++i) {
    if (sameName(k, kCollectives[i].name) || sameName(k, kCollectives[i].tableName)) {
      *out = static_cast<Collective>(i);
      return true;
    }
  }
  return false;
}

bool parseDataType(std::string_view s, DataType* out) {
  for (int i = 0; i < kNumDataTypes; ++i) {
    if (sameName(s, kDataTypes[i].name) || inList(kDataTypes[i].aliases, s)) {
      *out = static_cast<DataType>(i);
      return true;
    }
  }
  return false;
}

bool parseRedOp(std::string_view s, RedOp* out) {
  for (int i = 0; i < kNumRedOps; ++i) {
    if (sameName(s, kRedOpNames[i])) {
      *out = static_cast<RedOp>(i);
      return true;
    }
  }
  return false;
}

}  // namespace zcoll
