// staging.hpp - the checks and staging of tensors that every operation of the torch backend shares:
// argument checks that name the argument, the zcoll type and op of a reduction, contiguous staging
// copies written back after the operation, and byte views of splits and lists. Calling thread only.
#pragma once

#include <ATen/MemoryOverlap.h>
#include <c10/util/Exception.h>

#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "process_group.hpp"

namespace zcoll_torch {

inline const char* opName(c10d::ReduceOp::RedOpType op) {
  switch (op) {
    case c10d::ReduceOp::SUM: return "SUM";
    case c10d::ReduceOp::AVG: return "AVG";
    case c10d::ReduceOp::PRODUCT: return "PRODUCT";
    case c10d::ReduceOp::MIN: return "MIN";
    case c10d::ReduceOp::MAX: return "MAX";
    case c10d::ReduceOp::BAND: return "BAND";
    case c10d::ReduceOp::BOR: return "BOR";
    case c10d::ReduceOp::BXOR: return "BXOR";
    default: return "PREMUL_SUM";
  }
}

inline void checkTensor(const at::Tensor& t, const char* name, const char* arg) {
  TORCH_CHECK(t.defined(), "zcoll ", name, ": ", arg, " is an undefined tensor");
  TORCH_CHECK(t.device().is_cpu(), "zcoll ", name, ": ", arg, " is on ", t.device(),
              "; this build of zcoll serves CPU tensors");
  TORCH_CHECK(t.layout() == c10::kStrided, "zcoll ", name, ": ", arg, " is not a dense (strided) tensor");
}

// An output written in place: no two elements may share memory, and its memory must hold its values
// (not a lazily conjugated or negated view).
inline void checkWritable(const at::Tensor& t, const char* name, const char* arg) {
  checkTensor(t, name, arg);
  TORCH_CHECK(at::has_internal_overlap(t) != at::MemOverlap::Yes, "zcoll ", name, ": ", arg,
              " has elements that share memory (an expanded view); it cannot be written");
  TORCH_CHECK(!t.is_conj() && !t.is_neg(), "zcoll ", name, ": ", arg,
              " is a conjugate or negative view; call resolve_conj()/resolve_neg() on it first");
}

// An input as its values, contiguous (a copy only where needed).
inline at::Tensor denseInput(const at::Tensor& t) { return t.resolve_conj().resolve_neg().contiguous(); }

inline const at::Tensor& single(const std::vector<at::Tensor>& tensors, const char* name, const char* arg) {
  TORCH_CHECK(tensors.size() == 1, "zcoll ", name, ": ", arg, " must hold one tensor per process, got ", tensors.size());
  return tensors[0];
}

// How a reduction runs: zcoll's type and operator, and the staging the tensor needs.
struct Reduction {
  zcollDataType_t type;
  zcollRedOp_t op;
  at::ScalarType stageAs;  // Undefined: the tensor's own type
  bool complexAsReal = false;
};

inline Reduction reductionFor(at::ScalarType dtype, c10d::ReduceOp::RedOpType op, const char* name) {
  zcollRedOp_t zop;
  switch (op) {
    case c10d::ReduceOp::SUM: zop = zcollSum; break;
    case c10d::ReduceOp::AVG: zop = zcollAvg; break;
    case c10d::ReduceOp::PRODUCT: zop = zcollProd; break;
    case c10d::ReduceOp::MIN: zop = zcollMin; break;
    case c10d::ReduceOp::MAX: zop = zcollMax; break;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
      TORCH_CHECK(dtype == at::kBool, "zcoll ", name, ": ReduceOp ", opName(op), " is supported on bool tensors only (got ",
                  dtype, ")");
      return {zcollUint8, op == c10d::ReduceOp::BAND ? zcollMin : zcollMax, at::ScalarType::Undefined};
    default:
      TORCH_CHECK(false, "zcoll ", name, ": ReduceOp ", opName(op),
                  " is not supported (SUM, AVG, PRODUCT, MIN, MAX; BAND and BOR on bool)");
  }
  const auto none = at::ScalarType::Undefined;
  switch (dtype) {
    case at::kFloat: return {zcollFloat32, zop, none};
    case at::kDouble: return {zcollFloat64, zop, none};
    case at::kHalf: return {zcollFloat16, zop, none};
    case at::kBFloat16: return {zcollBfloat16, zop, none};
    case at::kChar: return {zcollInt8, zop, none};
    case at::kByte: return {zcollUint8, zop, none};
    case at::kInt: return {zcollInt32, zop, none};
    case at::kLong: return {zcollInt64, zop, none};
    case at::kShort: return {zcollInt32, zop, at::kInt};  // no int16 in zcoll: reduced as int32, exact
    case at::kBool:
      // As NCCL does: SUM is a logical or, PRODUCT a logical and.
      TORCH_CHECK(zop != zcollAvg, "zcoll ", name, ": ReduceOp AVG is not defined for bool tensors");
      if (zop == zcollSum) zop = zcollMax;
      if (zop == zcollProd) zop = zcollMin;
      return {zcollUint8, zop, none};
    case at::kComplexFloat:
    case at::kComplexDouble: {
      TORCH_CHECK(zop == zcollSum || zop == zcollAvg, "zcoll ", name, ": ReduceOp ", opName(op),
                  " is not defined for complex tensors (SUM and AVG are)");
      Reduction r{dtype == at::kComplexFloat ? zcollFloat32 : zcollFloat64, zop, none};
      r.complexAsReal = true;
      return r;
    }
    default: TORCH_CHECK(false, "zcoll ", name, ": dtype ", dtype, " cannot be reduced");
  }
}

// A tensor as zcoll sees it: contiguous, in the reduction's type.
struct Staged {
  at::Tensor user;   // the caller's tensor
  at::Tensor dense;  // contiguous, same type (user itself when it is contiguous)
  at::Tensor buf;    // what zcoll reads and writes: dense, its real view, or a widened copy
  bool widened = false;

  size_t count() const { return static_cast<size_t>(buf.numel()); }
  void* data() const { return buf.data_ptr(); }
  // Whether copyBack() has anything to do (the buffer is a copy of the caller's tensor).
  bool writesBack() const { return widened || !dense.is_same(user); }
  // After the operation: the result back into the caller's tensor.
  void copyBack() const {
    if (widened) dense.copy_(buf);
    if (!dense.is_same(user)) user.copy_(dense);
  }
};

inline Staged stage(const at::Tensor& t, const Reduction* r) {
  Staged s;
  s.user = t;
  s.dense = t.is_contiguous() ? t : t.contiguous();
  s.buf = s.dense;
  if (r && r->complexAsReal) s.buf = at::view_as_real(s.dense);
  if (r && r->stageAs != at::ScalarType::Undefined) {
    s.buf = s.dense.to(r->stageAs);
    s.widened = true;
  }
  return s;
}

// The write-back of a staged output, or none where zcoll works in the caller's tensor itself (the
// executor then carries no thread-local state over for it).
inline std::function<void()> copyBackOf(const std::shared_ptr<Staged>& s) {
  if (!s->writesBack()) return {};
  return [s] { s->copyBack(); };
}

inline size_t bytesOf(const at::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

// Staging of several same-shaped tensors as one flat buffer (gather targets, scatter sources).
inline void checkList(const std::vector<at::Tensor>& list, const at::Tensor& like, size_t n, const char* name, const char* arg) {
  TORCH_CHECK(list.size() == n, "zcoll ", name, ": ", arg, " must hold ", n, " tensors (one per rank), got ", list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const at::Tensor& t = list[i];
    checkTensor(t, name, arg);
    TORCH_CHECK(t.scalar_type() == like.scalar_type(), "zcoll ", name, ": ", arg, "[", i, "] is ", t.scalar_type(),
                "; the other side is ", like.scalar_type());
    TORCH_CHECK(t.numel() == like.numel(), "zcoll ", name, ": ", arg, "[", i, "] has ", t.numel(),
                " elements; the other side has ", like.numel());
  }
}

inline at::Tensor flatCat(const std::vector<at::Tensor>& list) {
  std::vector<at::Tensor> flat;
  flat.reserve(list.size());
  for (const at::Tensor& t : list) flat.push_back(t.resolve_conj().resolve_neg().reshape({-1}));
  return at::cat(flat);
}

inline void scatterFlat(const at::Tensor& flat, std::vector<at::Tensor>& list) {
  int64_t off = 0;
  for (at::Tensor& t : list) {
    t.copy_(flat.narrow(0, off, t.numel()).view(t.sizes()));
    off += t.numel();
  }
}

inline int64_t rowsOf(const at::Tensor& t) { return t.dim() == 0 ? 1 : t.size(0); }

// Byte offsets of the per-rank blocks of an all_to_all_single buffer split along dim 0.
inline std::vector<int64_t> splitBytes(const at::Tensor& t, const std::vector<int64_t>& splits, int n, const char* arg) {
  const int64_t rows = rowsOf(t);
  const int64_t rowBytes = rows == 0 ? 0 : static_cast<int64_t>(bytesOf(t)) / rows;
  std::vector<int64_t> bytes(static_cast<size_t>(n));
  if (splits.empty()) {
    TORCH_CHECK(rows % n == 0, "zcoll alltoall_base: ", arg, " has ", rows, " rows, not a multiple of the group size ", n);
    std::fill(bytes.begin(), bytes.end(), rows / n * rowBytes);
    return bytes;
  }
  TORCH_CHECK(static_cast<int>(splits.size()) == n, "zcoll alltoall_base: ", arg, " split sizes has ", splits.size(),
              " entries, expected ", n);
  int64_t total = 0;
  for (int i = 0; i < n; ++i) {
    TORCH_CHECK(splits[static_cast<size_t>(i)] >= 0, "zcoll alltoall_base: ", arg, " split size ", i, " is negative");
    total += splits[static_cast<size_t>(i)];
    bytes[static_cast<size_t>(i)] = splits[static_cast<size_t>(i)] * rowBytes;
  }
  TORCH_CHECK(total == rows, "zcoll alltoall_base: ", arg, " split sizes add up to ", total, " rows; the tensor has ", rows);
  return bytes;
}

}  // namespace zcoll_torch
