// process_group.cpp - see process_group.hpp. Staging and checks run on the calling thread; the
// lambdas given to enqueue() run on the executor, in issue order.
#include "process_group.hpp"

#include <ATen/MemoryOverlap.h>
#include <ATen/ThreadLocalState.h>
#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>

#include <pybind11/pybind11.h>

#include <algorithm>
#include <climits>
#include <optional>
#include <cstring>
#include <stdexcept>
#include <utility>

namespace zcoll_torch {

// A Work whose wait() runs the queued operations itself when no thread is running them.
class ZcollWork : public c10d::Work {
 public:
  ZcollWork(int rank, c10d::OpType type, const std::shared_ptr<OrderedExecutor>& executor,
            std::vector<at::Tensor> outputs)
      : c10d::Work(rank, type),
        executor_(executor),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

  void setTicket(uint64_t ticket) { ticket_.store(ticket); }
  // On the thread that ran the operation, before complete().
  void setError(std::exception_ptr e) { error_ = std::move(e); }
  // The future first: wait() returns once finish() ran, and then the future must be complete.
  // A callback that throws must not leave the work unfinished.
  void complete() {
    try {
      if (error_) future_->setError(error_);
      else future_->markCompleted(c10::IValue(outputs_));
    } catch (const std::exception& e) {
      TORCH_WARN("zcoll: a callback of a work's future raised: ", e.what());
    } catch (...) {
      TORCH_WARN("zcoll: a callback of a work's future raised");
    }
    finish(error_);
  }

  bool isCompleted() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return completed_;
  }
  std::vector<at::Tensor> result() override { return outputs_; }
  void synchronize() override {}
  bool wait(std::chrono::milliseconds timeout) override {
    const uint64_t ticket = ticket_.load();
    TORCH_CHECK(ticket != 0,
                "zcoll: wait() on a send or receive inside a coalescing block (batch_isend_irecv); "
                "wait once the block has ended");
    // The executor is gone only once the group is destroyed, and then every task has run.
    if (std::shared_ptr<OrderedExecutor> executor = executor_.lock())
      TORCH_CHECK(executor->waitFor(ticket, timeout), "zcoll: wait() timed out after ", timeout.count(), " ms");
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return completed_; });
    if (exception_) std::rethrow_exception(exception_);
    return true;
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  // A receive from any source: the rank it came from (set on the executor before complete()).
  void setSource(int rank) { source_.store(rank); }
  int sourceRank() const override { return source_.load(); }

 private:
  std::atomic<int> source_{-1};
  // Weak: the group owns the executor; a task (holding its work) must never hold the last
  // reference, or the executor would be destroyed by its own thread.
  std::weak_ptr<OrderedExecutor> executor_;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::atomic<uint64_t> ticket_{0};
  std::exception_ptr error_;
};

namespace {

const char* opName(c10d::ReduceOp::RedOpType op) {
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

void checkTensor(const at::Tensor& t, const char* name, const char* arg) {
  TORCH_CHECK(t.defined(), "zcoll ", name, ": ", arg, " is an undefined tensor");
  TORCH_CHECK(t.device().is_cpu(), "zcoll ", name, ": ", arg, " is on ", t.device(),
              "; this build of zcoll serves CPU tensors");
  TORCH_CHECK(t.layout() == c10::kStrided, "zcoll ", name, ": ", arg, " is not a dense (strided) tensor");
}

// An output written in place: no two elements may share memory, and its memory must hold its values
// (not a lazily conjugated or negated view).
void checkWritable(const at::Tensor& t, const char* name, const char* arg) {
  checkTensor(t, name, arg);
  TORCH_CHECK(at::has_internal_overlap(t) != at::MemOverlap::Yes, "zcoll ", name, ": ", arg,
              " has elements that share memory (an expanded view); it cannot be written");
  TORCH_CHECK(!t.is_conj() && !t.is_neg(), "zcoll ", name, ": ", arg,
              " is a conjugate or negative view; call resolve_conj()/resolve_neg() on it first");
}

// An input as its values, contiguous (a copy only where needed).
at::Tensor denseInput(const at::Tensor& t) { return t.resolve_conj().resolve_neg().contiguous(); }

const at::Tensor& single(const std::vector<at::Tensor>& tensors, const char* name, const char* arg) {
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

Reduction reductionFor(at::ScalarType dtype, c10d::ReduceOp::RedOpType op, const char* name) {
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
  // After the operation: the result back into the caller's tensor.
  void copyBack() const {
    if (widened) dense.copy_(buf);
    if (!dense.is_same(user)) user.copy_(dense);
  }
};

Staged stage(const at::Tensor& t, const Reduction* r) {
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

size_t bytesOf(const at::Tensor& t) { return static_cast<size_t>(t.numel()) * t.element_size(); }

// Staging of several same-shaped tensors as one flat buffer (gather targets, scatter sources).
void checkList(const std::vector<at::Tensor>& list, const at::Tensor& like, size_t n, const char* name, const char* arg) {
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

at::Tensor flatCat(const std::vector<at::Tensor>& list) {
  std::vector<at::Tensor> flat;
  flat.reserve(list.size());
  for (const at::Tensor& t : list) flat.push_back(t.resolve_conj().resolve_neg().reshape({-1}));
  return at::cat(flat);
}

void scatterFlat(const at::Tensor& flat, std::vector<at::Tensor>& list) {
  int64_t off = 0;
  for (at::Tensor& t : list) {
    t.copy_(flat.narrow(0, off, t.numel()).view(t.sizes()));
    off += t.numel();
  }
}

int64_t rowsOf(const at::Tensor& t) { return t.dim() == 0 ? 1 : t.size(0); }

// Byte offsets of the per-rank blocks of an all_to_all_single buffer split along dim 0.
std::vector<int64_t> splitBytes(const at::Tensor& t, const std::vector<int64_t>& splits, int n, const char* arg) {
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

}  // namespace

ProcessGroupZcoll::ProcessGroupZcoll(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                     std::chrono::milliseconds timeout)
    : ProcessGroupBase(rank, size), executor_(std::make_shared<OrderedExecutor>()) {
  TORCH_CHECK(store, "zcoll: no store to rendezvous through");
  const std::string key = "zcoll/unique_id";
  zcollUniqueId id;
  if (rank == 0) {
    zcollResult_t r = zcollGetUniqueId(&id);
    TORCH_CHECK(r == zcollSuccess, "zcoll: zcollGetUniqueId failed: ", zcollGetLastError(nullptr));
    const auto* p = reinterpret_cast<const uint8_t*>(&id);
    store->set(key, std::vector<uint8_t>(p, p + sizeof id));
  } else {
    const std::vector<uint8_t> v = store->get(key);  // waits, bounded by the store's timeout
    TORCH_CHECK(v.size() == sizeof id, "zcoll: the unique id in the store has ", v.size(), " bytes, expected ", sizeof id);
    std::memcpy(&id, v.data(), sizeof id);
  }
  zcollConfig_t config = ZCOLL_CONFIG_INITIALIZER;
  config.timeoutMs = static_cast<int>(std::clamp<int64_t>(timeout.count(), 1, INT_MAX));
  zcollResult_t r = zcollCommInitRankConfig(&comm_, size, id, rank, &config);
  TORCH_CHECK(r == zcollSuccess, "zcoll: creating the communicator (rank ", rank, " of ", size,
              ") failed: ", zcollGetLastError(nullptr));
  init();
}

ProcessGroupZcoll::~ProcessGroupZcoll() {
  // Python destroys the group holding the GIL, while the executor's threads may need it (a
  // completion that drops the last reference to a tensor with a Python object takes the GIL to
  // release it): let go of it while waiting for them.
  std::optional<pybind11::gil_scoped_release> noGil;
  if (Py_IsInitialized() && PyGILState_Check()) noGil.emplace();
  // Everything issued runs first (each operation is bounded by the timeout): no request may
  // outlive the communicator. After a failure the communicator is aborted instead of drained.
  executor_->waitFor(executor_->submit({[] {}, {}}));
  executor_.reset();  // joins its threads (works hold it weakly)
  zcollResult_t err = zcollSuccess;
  zcollCommGetAsyncError(comm_, &err);
  if (err != zcollSuccess) zcollCommAbort(comm_);
  else zcollCommDestroy(comm_);
}

c10::intrusive_ptr<ProcessGroupBase> ProcessGroupZcoll::create(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                               int size, const std::chrono::duration<float>& timeout) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
  return c10::make_intrusive<ProcessGroupZcoll>(store, rank, size, ms);
}

int ProcessGroupZcoll::checkRoot(int64_t root, const char* name) const {
  TORCH_CHECK(root >= 0 && root < size_, "zcoll ", name, ": root ", root, " is not a rank of the group (size ", size_, ")");
  return static_cast<int>(root);
}

void ProcessGroupZcoll::checkNotCoalescing(const char* name) {
  if (coalescing_ && batch_.empty()) {
    // A block that holds only collectives: torch 2.x fuses them into one call and never ends the
    // block, so this call ends it.
    coalescing_ = false;
    return;
  }
  TORCH_CHECK(!coalescing_, "zcoll ", name, ": only sends and receives may be issued inside a coalescing block");
}

void ProcessGroupZcoll::submit(std::vector<c10::intrusive_ptr<ZcollWork>> works, const char* name,
                               std::function<zcollResult_t()> run, std::function<void()> after) {
  auto shared = std::make_shared<std::vector<c10::intrusive_ptr<ZcollWork>>>(std::move(works));
  OrderedExecutor::Task task;
  // The caller's autograd / inference-mode state goes with the operation to whichever thread runs
  // it (the write-back copies depend on it), as gloo does.
  task.run = [shared, comm = comm_, op = std::string(name), run = std::move(run), after = std::move(after),
              state = at::ThreadLocalState()] {
    at::ThreadLocalStateGuard guard(state);
    std::exception_ptr error;
    try {
      const zcollResult_t r = run();
      // " Timed out " is what torch.distributed's callers match (its tests, watchdogs, elastic agents).
      if (r == zcollTimeout)
        throw std::runtime_error("zcoll " + op + " failed: Timed out (the group's timeout): " + zcollGetLastError(comm));
      if (r != zcollSuccess)
        throw std::runtime_error("zcoll " + op + " failed (" + zcollGetErrorString(r) + "): " + zcollGetLastError(comm));
      if (after) after();
    } catch (...) {
      error = std::current_exception();
    }
    for (auto& w : *shared) w->setError(error);
  };
  task.complete = [shared] {
    for (auto& w : *shared) w->complete();
  };
  const uint64_t ticket = executor_->submit(std::move(task));
  for (auto& w : *shared) w->setTicket(ticket);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupZcoll::enqueue(c10d::OpType type, const char* name,
                                                          std::vector<at::Tensor> outputs,
                                                          std::function<zcollResult_t()> run,
                                                          std::function<void()> after) {
  checkNotCoalescing(name);
  auto work = c10::make_intrusive<ZcollWork>(rank_, type, executor_, std::move(outputs));
  submit({work}, name, std::move(run), std::move(after));
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupZcoll::broadcast(std::vector<at::Tensor>& tensors,
                                                            const c10d::BroadcastOptions& opts) {
  const at::Tensor& t = single(tensors, "broadcast", "tensors");
  checkWritable(t, "broadcast", "tensor");
  const int root = checkRoot(opts.rootRank, "broadcast");
  auto s = std::make_shared<Staged>(stage(t, nullptr));
  return enqueue(
      c10d::OpType::BROADCAST, "broadcast", tensors,
      [s, root, comm = comm_] { return zcollBroadcast(s->data(), s->data(), bytesOf(s->buf), zcollUint8, root, comm, nullptr); },
      [s] { s->copyBack(); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupZcoll::allreduce(std::vector<at::Tensor>& tensors,
                                                            const c10d::AllreduceOptions& opts) {
  const at::Tensor& t = single(tensors, "allreduce", "tensors");
  checkWritable(t, "allreduce", "tensor");
  const Reduction r = reductionFor(t.scalar_type(), opts.reduceOp, "allreduce");
  auto s = std::make_shared<Staged>(stage(t, &r));
  return enqueue(
      c10d::OpType::ALLREDUCE, "allreduce", tensors,
      [s, r, comm = comm_] { return zcollAllReduce(s->data(), s->data(), s->count(), r.type, r.op, comm, nullptr); },
      [s] { s->copyBack(); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupZcoll::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                      const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK(!tensors.empty(), "zcoll allreduce_coalesced: no tensors");
  for (const at::Tensor& t : tensors) {
    checkWritable(t, "allreduce_coalesced", "tensors");
    TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type(), "zcoll allreduce_coalesced: tensors mix ",
                t.scalar_type(), " and ", tensors[0].scalar_type());
  }
  const Reduction r = reductionFor(tensors[0].scalar_type(), opts.reduceOp, "allreduce_coalesced");
  auto s = std::make_shared<Staged>(stage(flatCat(tensors), &r));
  auto outs = std::make_shared<std::vector<at::Tensor>>(tensors);
  return enqueue(
      c10d::OpType::ALLREDUCE_COALESCED, "allreduce_coalesced", tensors,
      [s, r, comm = comm_] { return zcollAllReduce(s->data(), s->data(), s->count(), r.type, r.op, comm, nullptr); },
      [s, outs] {
        s->copyBack();
        scatterFlat(s->dense, *outs);
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupZcoll::reduce(std::vector<at::Tensor>& tensors,
                                                         const c10d::ReduceOptions& opts) {
  const at::Tensor& t = single(tensors, "reduce", "tensors");
  checkWritable(t, "reduce", "tensor");
  const int root = checkRoot(opts.rootRank, "reduce");
  const Reduction r = reductionFor(t.scalar_type(), opts.reduceOp, "reduce");
  auto s = std::make_shared<Staged>(stage(t, &r));
  const bool atRoot = root == rank_;
  return enqueue(
      c10d::OpType::REDUCE, "reduce", tensors,
      [s, r, root, comm = comm_] {
        return zcollReduce(s->data(), s->data(), s->count(), r.type, r.op, root, comm, nullptr);
      },
      [s, atRoot] {
        if (atRoot) s->copyBack();
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupZcoll::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                            std::vector<at::Tensor>& inputs,
                                                            const c10d::AllgatherOptions&) {
  const at::Tensor& in = single(inputs, "allgather", "input list");
  checkTensor(in, "allgather", "input");
  TORCH_CHECK(outputs.size() == 1, "zcoll allgather: expects one output list per process, got ", outputs.size());
  checkList(outputs[0], in, static_cast<size_t>(size_), "allgather", "output list");
  for (const at::Tensor& t : outputs[0]) checkWritable(t, "allgather", "output list");
  at::Tensor src = denseInput(in);
  at::Tensor flat = at::empty({static_cast<int64_t>(size_) * in.numel()}, in.options().memory_format(at::MemoryFormat::Contiguous));
  auto outs = std::make_shared<std::vector<at::Tensor>>(outputs[0]);
  return enqueue(
      c10d::OpType::ALLGATHER, "allgather", outputs[0],
      [src, flat, comm = comm_] { return zcollAllGather(src.data_ptr(), flat.data_ptr(), bytesOf(src), zcollUint8, comm, nullptr); },
      [flat, outs] { scatterFlat(flat, *outs); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupZcoll::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                                  const c10d::AllgatherOptions&) {
  checkTensor(input, "_allgather_base", "input");
  checkWritable(output, "_allgather_base", "output");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "zcoll _allgather_base: output is ", output.scalar_type(),
              ", input is ", input.scalar_type());
  TORCH_CHECK(output.numel() == input.numel() * size_, "zcoll _allgather_base: output has ", output.numel(),
              " elements; it must have group size x input = ", input.numel() * size_);
  auto s = std::make_shared<Staged>(stage(output, nullptr));
  at::Tensor src = denseInput(input);
  if (at::get_overlap_status(src, s->dense) != at::MemOverlapStatus::No) src = src.clone();
  return enqueue(
      c10d::OpType::_ALLGATHER_BASE, "_allgather_base", {output},
      [src, s, comm = comm_] { return zcollAllGather(src.data_ptr(), s->data(), bytesOf(src), zcollUint8, comm, nullptr); },
      [s] { s->copyBack(); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupZcoll::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                         std::vector<at::Tensor>& inputs,
                                                         const c10d::GatherOptions& opts) {
  const at::Tensor& in = single(inputs, "gather", "input list");
  checkTensor(in, "gather", "input");
  const int root = checkRoot(opts.rootRank, "gather");
  at::Tensor src = denseInput(in);
  at::Tensor flat;
  std::shared_ptr<std::vector<at::Tensor>> outs;
  std::vector<at::Tensor> result;
  if (root == rank_) {
    TORCH_CHECK(outputs.size() == 1, "zcoll gather: the root expects one output list, got ", outputs.size());
    checkList(outputs[0], in, static_cast<size_t>(size_), "gather", "output list");
    for (const at::Tensor& t : outputs[0]) checkWritable(t, "gather", "output list");
    flat = at::empty({static_cast<int64_t>(size_) * in.numel()}, in.options().memory_format(at::MemoryFormat::Contiguous));
    outs = std::make_shared<std::vector<at::Tensor>>(outputs[0]);
    result = outputs[0];
  } else {
    TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
                "zcoll gather: only the root (rank ", root, ") takes an output list");
  }
  return enqueue(
      c10d::OpType::GATHER, "gather", result,
      [src, flat, root, comm = comm_] {
        return zcollGather(src.data_ptr(), flat.defined() ? flat.data_ptr() : nullptr, bytesOf(src), zcollUint8, root, comm,
                           nullptr);
      },
      [flat, outs] {
        if (outs) scatterFlat(flat, *outs);
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupZcoll::scatter(std::vector<at::Tensor>& outputs,
                                                          std::vector<std::vector<at::Tensor>>& inputs,
                                                          const c10d::ScatterOptions& opts) {
  const at::Tensor& out = single(outputs, "scatter", "output list");
  checkWritable(out, "scatter", "output");
  const int root = checkRoot(opts.rootRank, "scatter");
  at::Tensor flat;
  if (root == rank_) {
    TORCH_CHECK(inputs.size() == 1, "zcoll scatter: the root expects one input list, got ", inputs.size());
    checkList(inputs[0], out, static_cast<size_t>(size_), "scatter", "input list");
    flat = flatCat(inputs[0]);
  } else {
    TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()),
                "zcoll scatter: only the root (rank ", root, ") takes an input list");
  }
  auto s = std::make_shared<Staged>(stage(out, nullptr));
  return enqueue(
      c10d::OpType::SCATTER, "scatter", outputs,
      [flat, s, root, comm = comm_] {
        return zcollScatter(flat.defined() ? flat.data_ptr() : nullptr, s->data(), bytesOf(s->buf), zcollUint8, root, comm,
                            nullptr);
      },
      [s] { s->copyBack(); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupZcoll::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                                 std::vector<std::vector<at::Tensor>>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) {
  const at::Tensor& out = single(outputs, "reduce_scatter", "output list");
  checkWritable(out, "reduce_scatter", "output");
  TORCH_CHECK(inputs.size() == 1, "zcoll reduce_scatter: expects one input list per process, got ", inputs.size());
  checkList(inputs[0], out, static_cast<size_t>(size_), "reduce_scatter", "input list");
  const Reduction r = reductionFor(out.scalar_type(), opts.reduceOp, "reduce_scatter");
  auto in = std::make_shared<Staged>(stage(flatCat(inputs[0]), &r));
  auto s = std::make_shared<Staged>(stage(out, &r));
  return enqueue(
      c10d::OpType::REDUCE_SCATTER, "reduce_scatter", outputs,
      [in, s, r, comm = comm_] {
        return zcollReduceScatter(in->data(), s->data(), s->count(), r.type, r.op, comm, nullptr);
      },
      [s] { s->copyBack(); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupZcoll::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                       const c10d::ReduceScatterOptions& opts) {
  checkTensor(input, "_reduce_scatter_base", "input");
  checkWritable(output, "_reduce_scatter_base", "output");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "zcoll _reduce_scatter_base: output is ",
              output.scalar_type(), ", input is ", input.scalar_type());
  TORCH_CHECK(input.numel() == output.numel() * size_, "zcoll _reduce_scatter_base: input has ", input.numel(),
              " elements; it must have group size x output = ", output.numel() * size_);
  const Reduction r = reductionFor(output.scalar_type(), opts.reduceOp, "_reduce_scatter_base");
  auto in = std::make_shared<Staged>(stage(input, &r));
  auto s = std::make_shared<Staged>(stage(output, &r));
  return enqueue(
      c10d::OpType::_REDUCE_SCATTER_BASE, "_reduce_scatter_base", {output},
      [in, s, r, comm = comm_] {
        return zcollReduceScatter(in->data(), s->data(), s->count(), r.type, r.op, comm, nullptr);
      },
      [s] { s->copyBack(); });
}

zcollResult_t ProcessGroupZcoll::runP2P(const std::vector<P2P>& batch) const {
  zcollResult_t r = zcollGroupStart();
  if (r != zcollSuccess) return r;
  for (const P2P& p : batch) {
    const size_t bytes = bytesOf(p.buf);
    if (bytes == 0) continue;  // both ends know the size: both skip it
    r = p.isSend ? zcollSend(p.buf.data_ptr(), bytes, zcollUint8, p.peer, comm_, nullptr)
                 : zcollRecv(p.buf.data_ptr(), bytes, zcollUint8, p.peer, comm_, nullptr);
    if (r != zcollSuccess) break;
  }
  const zcollResult_t end = zcollGroupEnd();
  return r != zcollSuccess ? r : end;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupZcoll::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                                std::vector<int64_t>& outputSplitSizes,
                                                                std::vector<int64_t>& inputSplitSizes,
                                                                const c10d::AllToAllOptions&) {
  checkTensor(input, "alltoall_base", "input");
  checkWritable(output, "alltoall_base", "output");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "zcoll alltoall_base: output is ", output.scalar_type(),
              ", input is ", input.scalar_type());
  auto s = std::make_shared<Staged>(stage(output, nullptr));
  at::Tensor src = denseInput(input);
  // zcoll's all-to-all never runs in place, and a batch of sends and receives must not overlap.
  if (at::get_overlap_status(src, s->dense) != at::MemOverlapStatus::No) src = src.clone();
  if (outputSplitSizes.empty() && inputSplitSizes.empty()) {
    TORCH_CHECK(input.numel() == output.numel(), "zcoll alltoall_base: input has ", input.numel(),
                " elements, output ", output.numel());
    TORCH_CHECK(input.numel() % size_ == 0, "zcoll alltoall_base: ", input.numel(),
                " elements do not split evenly over ", size_, " ranks");
    return enqueue(
        c10d::OpType::ALLTOALL_BASE, "alltoall_base", {output},
        [src, s, n = size_, comm = comm_] {
          return zcollAlltoAll(src.data_ptr(), s->data(), bytesOf(src) / static_cast<size_t>(n), zcollUint8, comm, nullptr);
        },
        [s] { s->copyBack(); });
  }
  const std::vector<int64_t> sendBytes = splitBytes(src, inputSplitSizes, size_, "input");
  const std::vector<int64_t> recvBytes = splitBytes(s->dense, outputSplitSizes, size_, "output");
  auto batch = std::make_shared<std::vector<P2P>>();
  at::Tensor srcBytes = src.view({-1}).view(at::kByte), dstBytes = s->dense.view({-1}).view(at::kByte);
  int64_t so = 0, ro = 0;
  at::Tensor selfSrc, selfDst;
  for (int p = 0; p < size_; ++p) {
    const int64_t sb = sendBytes[static_cast<size_t>(p)], rb = recvBytes[static_cast<size_t>(p)];
    if (p == rank_) {
      TORCH_CHECK(sb == rb, "zcoll alltoall_base: this rank sends itself ", sb, " bytes but expects ", rb);
      selfSrc = srcBytes.narrow(0, so, sb);
      selfDst = dstBytes.narrow(0, ro, rb);
    } else {
      batch->push_back({true, p, srcBytes.narrow(0, so, sb), {}});
      batch->push_back({false, p, dstBytes.narrow(0, ro, rb), {}});
    }
    so += sb;
    ro += rb;
  }
  return enqueue(
      c10d::OpType::ALLTOALL_BASE, "alltoall_base", {output},
      [this, batch, selfSrc, selfDst, src] {
        if (selfSrc.numel()) selfDst.copy_(selfSrc);
        return runP2P(*batch);
      },
      [s] { s->copyBack(); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupZcoll::alltoall(std::vector<at::Tensor>& outputs,
                                                           std::vector<at::Tensor>& inputs,
                                                           const c10d::AllToAllOptions&) {
  TORCH_CHECK(static_cast<int>(inputs.size()) == size_ && static_cast<int>(outputs.size()) == size_,
              "zcoll alltoall: expects ", size_, " input and output tensors (one per rank), got ", inputs.size(), " and ",
              outputs.size());
  auto batch = std::make_shared<std::vector<P2P>>();
  auto staged = std::make_shared<std::vector<Staged>>();
  for (size_t p = 0; p < outputs.size(); ++p) {
    checkTensor(inputs[p], "alltoall", "input list");
    checkWritable(outputs[p], "alltoall", "output list");
    TORCH_CHECK(inputs[p].scalar_type() == outputs[p].scalar_type(), "zcoll alltoall: input list[", p, "] is ",
                inputs[p].scalar_type(), ", output list[", p, "] is ", outputs[p].scalar_type());
    staged->push_back(stage(outputs[p], nullptr));
  }
  at::Tensor selfSrc, selfDst;
  for (int p = 0; p < size_; ++p) {
    const at::Tensor& dst = (*staged)[static_cast<size_t>(p)].dense;
    at::Tensor src = denseInput(inputs[static_cast<size_t>(p)]);
    for (const Staged& o : *staged)  // a batch of sends and receives must not overlap
      if (at::get_overlap_status(src, o.dense) != at::MemOverlapStatus::No) {
        src = src.clone();
        break;
      }
    if (p == rank_) {
      TORCH_CHECK(src.numel() == dst.numel(), "zcoll alltoall: input list[", p, "] (to this rank) has ", src.numel(),
                  " elements; output list[", p, "] has ", dst.numel());
      selfSrc = src;
      selfDst = dst;
    } else {
      batch->push_back({true, p, src, {}});
      batch->push_back({false, p, dst, {}});
    }
  }
  return enqueue(
      c10d::OpType::ALLTOALL, "alltoall", outputs,
      [this, batch, selfSrc, selfDst] {
        selfDst.view({-1}).copy_(selfSrc.view({-1}));
        return runP2P(*batch);
      },
      [staged] {
        for (const Staged& s : *staged) s.copyBack();
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupZcoll::p2p(bool isSend, std::vector<at::Tensor>& tensors, int peer,
                                                      const char* name) {
  const at::Tensor& t = single(tensors, name, "tensors");
  if (isSend) checkTensor(t, name, "tensor");
  else checkWritable(t, name, "tensor");
  TORCH_CHECK(peer >= 0 && peer < size_ && peer != rank_, "zcoll ", name, ": peer ", peer,
              " is not another rank of the group (size ", size_, ", this rank ", rank_, ")");
  P2P item{isSend, peer, isSend ? denseInput(t) : t.contiguous(), t};
  const c10d::OpType type = isSend ? c10d::OpType::SEND : c10d::OpType::RECV;
  if (coalescing_) {
    auto work = c10::make_intrusive<ZcollWork>(rank_, type, executor_, tensors);
    batch_.push_back(std::move(item));
    batchWorks_.push_back(work);
    return work;
  }
  auto batch = std::make_shared<std::vector<P2P>>(1, std::move(item));
  return enqueue(
      type, name, tensors, [this, batch] { return runP2P(*batch); },
      [batch] {
        const P2P& p = batch->front();
        if (!p.isSend && !p.buf.is_same(p.user)) p.user.copy_(p.buf);
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupZcoll::send(std::vector<at::Tensor>& tensors, int dstRank, int) {
  return p2p(true, tensors, dstRank, "send");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupZcoll::recv(std::vector<at::Tensor>& tensors, int srcRank, int) {
  return p2p(false, tensors, srcRank, "recv");
}

c10::intrusive_ptr<c10d::Work> ProcessGroupZcoll::recvAnysource(std::vector<at::Tensor>& tensors, int) {
  const at::Tensor& t = single(tensors, "recv", "tensors");
  checkWritable(t, "recv", "tensor");
  TORCH_CHECK(!coalescing_, "zcoll recv: a receive from any source cannot be part of batch_isend_irecv; name the source");
  TORCH_CHECK(size_ > 1, "zcoll recv: a group of one rank has no other rank to receive from");
  at::Tensor buf = t.contiguous();
  auto work = c10::make_intrusive<ZcollWork>(rank_, c10d::OpType::RECVANYSOURCE, executor_, tensors);
  ZcollWork* w = work.get();  // the task holds the work until it completes
  submit(
      {work}, "recv",
      [buf, w, comm = comm_] {
        int from = -1;
        const size_t bytes = bytesOf(buf);  // an empty message is never sent (runP2P): nothing to take
        const zcollResult_t r = bytes ? zcollRecvAny(buf.data_ptr(), bytes, zcollUint8, &from, comm, nullptr) : zcollSuccess;
        w->setSource(from);
        return r;
      },
      [buf, user = t] {
        if (!buf.is_same(user)) user.copy_(buf);
      });
  return work;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupZcoll::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputLists,
                                                                      std::vector<at::Tensor>& inputs,
                                                                      const c10d::AllgatherOptions&) {
  TORCH_CHECK(static_cast<int>(outputLists.size()) == size_, "zcoll allgather_coalesced: expects ", size_,
              " output lists (one per rank), got ", outputLists.size());
  // The inputs' bytes one after the other: one all-gather, then each rank's block split back.
  std::vector<at::Tensor> dense;
  int64_t bytes = 0;
  for (const at::Tensor& in : inputs) {
    checkTensor(in, "allgather_coalesced", "input list");
    dense.push_back(denseInput(in));
    bytes += static_cast<int64_t>(bytesOf(dense.back()));
  }
  std::vector<at::Tensor> outs;
  for (size_t r = 0; r < outputLists.size(); ++r) {
    TORCH_CHECK(outputLists[r].size() == inputs.size(), "zcoll allgather_coalesced: output list ", r, " has ",
                outputLists[r].size(), " tensors, the input list ", inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      const at::Tensor& o = outputLists[r][i];
      checkWritable(o, "allgather_coalesced", "output list");
      TORCH_CHECK(o.scalar_type() == inputs[i].scalar_type() && o.numel() == inputs[i].numel(),
                  "zcoll allgather_coalesced: output list ", r, "[", i, "] is ", o.scalar_type(), " of ", o.numel(),
                  " elements, input ", i, " ", inputs[i].scalar_type(), " of ", inputs[i].numel());
      outs.push_back(o);
    }
  }
  at::Tensor send = at::empty({bytes}, at::kByte);
  at::Tensor flat = at::empty({bytes * size_}, at::kByte);
  auto lists = std::make_shared<std::vector<std::vector<at::Tensor>>>(outputLists);
  return enqueue(
      c10d::OpType::ALLGATHER_COALESCED, "allgather_coalesced", outs,
      [dense, send, flat, comm = comm_] {
        // Packed when the operation runs: an earlier queued operation may still write the inputs.
        int64_t offset = 0;
        for (const at::Tensor& d : dense) {
          std::memcpy(static_cast<uint8_t*>(send.data_ptr()) + offset, d.data_ptr(), bytesOf(d));
          offset += static_cast<int64_t>(bytesOf(d));
        }
        return zcollAllGather(send.data_ptr(), flat.data_ptr(), bytesOf(send), zcollUint8, comm, nullptr);
      },
      [flat, lists, bytes] {
        for (size_t r = 0; r < lists->size(); ++r) {
          int64_t off = static_cast<int64_t>(r) * bytes;
          for (at::Tensor& o : (*lists)[r]) {
            at::Tensor tmp = at::empty(o.sizes(), o.options().memory_format(at::MemoryFormat::Contiguous));
            std::memcpy(tmp.data_ptr(), static_cast<const uint8_t*>(flat.data_ptr()) + off, bytesOf(tmp));
            o.copy_(tmp);
            off += static_cast<int64_t>(bytesOf(tmp));
          }
        }
      });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupZcoll::barrier(const c10d::BarrierOptions&) {
  return enqueue(c10d::OpType::BARRIER, "barrier", {}, [comm = comm_] { return zcollBarrier(comm, nullptr); });
}

void ProcessGroupZcoll::startCoalescing() {
  TORCH_CHECK(!coalescing_, "zcoll: a coalescing block is already open");
  coalescing_ = true;
}

#if ZCOLL_TORCH_END_COALESCING_RETURNS_WORK
c10::intrusive_ptr<c10d::Work> ProcessGroupZcoll::endCoalescing() {
#else
void ProcessGroupZcoll::endCoalescing(std::vector<c10::intrusive_ptr<c10d::Work>>&) {
#endif
  TORCH_CHECK(coalescing_, "zcoll: endCoalescing without startCoalescing");
  coalescing_ = false;
  auto batch = std::make_shared<std::vector<P2P>>(std::move(batch_));
  std::vector<c10::intrusive_ptr<ZcollWork>> works = std::move(batchWorks_);
  batch_.clear();
  batchWorks_.clear();
  auto all = c10::make_intrusive<ZcollWork>(rank_, c10d::OpType::UNKNOWN, executor_, std::vector<at::Tensor>{});
  works.push_back(all);
  submit(std::move(works), "batch_isend_irecv", [this, batch] { return runP2P(*batch); },
         [batch] {
           for (const P2P& p : *batch)
             if (!p.isSend && !p.buf.is_same(p.user)) p.user.copy_(p.buf);
         });
#if ZCOLL_TORCH_END_COALESCING_RETURNS_WORK
  return all;
#endif
}

}  // namespace zcoll_torch
