// typed.hpp - the tests' own reference arithmetic for every zcoll data type, independent of the
// library's kernels: input patterns that make every result exact, and the expected reduction.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "core/types.hpp"
#include "zcoll/zcoll.h"

namespace zcoll::test {

inline const zcollDataType_t kAllTypes[] = {zcollInt8,    zcollUint8,   zcollInt32,   zcollUint32,  zcollInt64,
                                            zcollUint64,  zcollFloat16, zcollFloat32, zcollFloat64, zcollBfloat16};
inline const zcollRedOp_t kAllOps[] = {zcollSum, zcollProd, zcollMax, zcollMin, zcollAvg};

// Sizes, names and signedness from the one table of data types (core/types.hpp).
inline size_t typeSize(zcollDataType_t t) { return kDataTypes[t].size; }
inline std::string typeName(zcollDataType_t t) { return std::string(kDataTypes[t].name); }
inline std::string opName(zcollRedOp_t o) { return std::string(kRedOpNames[o]); }
inline bool isSigned(zcollDataType_t t) { return kDataTypes[t].isSigned; }
inline bool isFloat(zcollDataType_t t) { return kDataTypes[t].isFloat; }

// Elements of sendbuff and recvbuff of a collective of `count` (the API's count) on n ranks, as the
// matrix sizes them (every rank's buffers as large as the root's).
inline void bufferElems(Collective c, size_t count, size_t n, size_t* send, size_t* recv) {
  *send = *recv = count;
  if (c == Collective::AllGather || c == Collective::Gather || c == Collective::AllToAll) *recv = count * n;
  if (c == Collective::ReduceScatter || c == Collective::Scatter || c == Collective::AllToAll) *send = count * n;
}

// Input of `rank` at element i for op: small integers so every result is exact in every type.
inline int64_t inputValue(zcollRedOp_t op, zcollDataType_t t, int rank, size_t i) {
  switch (op) {
    case zcollProd: return (i + static_cast<size_t>(rank)) % 3 == 0 ? 2 : 1;
    case zcollMax: case zcollMin: {
      int64_t v = static_cast<int64_t>((i * 7 + static_cast<size_t>(rank) * 13) % 11);
      return isSigned(t) ? v - 5 : v;
    }
    default: return static_cast<int64_t>((i * 7 + static_cast<size_t>(rank) * 13) % 5 + 1);
  }
}

// bf16 from float, round to nearest even (the test's own).
inline uint16_t toBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// Writes value v (an exact small number, or a float for avg) as type t into buf[i].
inline void store(zcollDataType_t t, void* buf, size_t i, double v) {
  auto* b = static_cast<char*>(buf);
  auto put = [&](auto x) { std::memcpy(b + i * sizeof x, &x, sizeof x); };
  // Integers wrap like the kernels (through the unsigned type).
  auto wrap = [&](auto tag) {
    using T = decltype(tag);
    using U = std::make_unsigned_t<T>;
    put(static_cast<T>(static_cast<U>(static_cast<int64_t>(v))));
  };
  switch (t) {
    case zcollInt8: wrap(int8_t{}); break;
    case zcollUint8: wrap(uint8_t{}); break;
    case zcollInt32: wrap(int32_t{}); break;
    case zcollUint32: wrap(uint32_t{}); break;
    case zcollInt64: wrap(int64_t{}); break;
    case zcollUint64: wrap(uint64_t{}); break;
    case zcollFloat16: put(static_cast<_Float16>(static_cast<float>(v))); break;
    case zcollFloat32: put(static_cast<float>(v)); break;
    case zcollFloat64: put(v); break;
    case zcollBfloat16: put(toBf16(static_cast<float>(v))); break;
    default: break;
  }
}

// The expected reduction over ranks 0..nranks-1 of inputValue(op, t, r, i), stored as type t.
inline void storeExpected(zcollDataType_t t, zcollRedOp_t op, int nranks, void* buf, size_t outIndex,
                          size_t inIndex) {
  int64_t acc = inputValue(op, t, 0, inIndex);
  for (int r = 1; r < nranks; ++r) {
    int64_t v = inputValue(op, t, r, inIndex);
    switch (op) {
      case zcollProd: acc *= v; break;
      case zcollMax: acc = std::max(acc, v); break;
      case zcollMin: acc = std::min(acc, v); break;
      default: acc += v; break;
    }
  }
  if (op != zcollAvg) {
    store(t, buf, outIndex, static_cast<double>(acc));
    return;
  }
  // Avg: the sum is exact; the division follows the type's arithmetic.
  switch (t) {
    case zcollFloat64: store(t, buf, outIndex, static_cast<double>(acc) / nranks); break;
    case zcollFloat32: case zcollFloat16: case zcollBfloat16:
      store(t, buf, outIndex, static_cast<double>(static_cast<float>(acc) / static_cast<float>(nranks)));
      break;
    default: store(t, buf, outIndex, static_cast<double>(acc / nranks)); break;
  }
}

inline void fillInput(zcollDataType_t t, zcollRedOp_t op, int rank, void* buf, size_t n, size_t firstIndex = 0) {
  for (size_t i = 0; i < n; ++i) store(t, buf, i, static_cast<double>(inputValue(op, t, rank, firstIndex + i)));
}

// Index of the first element where a and b differ (n if none).
inline size_t firstMismatch(const void* a, const void* b, size_t n, size_t es) {
  for (size_t i = 0; i < n; ++i)
    if (std::memcmp(static_cast<const char*>(a) + i * es, static_cast<const char*>(b) + i * es, es) != 0) return i;
  return n;
}

inline size_t countMismatches(const void* a, const void* b, size_t n, size_t es) {
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i)
    wrong += std::memcmp(static_cast<const char*>(a) + i * es, static_cast<const char*>(b) + i * es, es) != 0;
  return wrong;
}

}  // namespace zcoll::test
