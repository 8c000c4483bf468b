// process_group.cpp - see process_group.hpp: creation, the executor hand-off (submit, enqueue) and the
// collectives; point-to-point is in process_group_p2p.cpp. Staging and checks (staging.hpp) run on
// the calling thread; the lambdas given to enqueue() run on the executor, in issue order.
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

#include "staging.hpp"
#include "work.hpp"

namespace zcoll_torch {

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
  // The caller's autograd / inference-mode state goes with the write-back copies (`after`) to
  // whichever thread runs them, as gloo does. Without them nothing here is torch's: no state is
  // taken (capturing and setting it cost more than a small all-reduce).
  std::optional<at::ThreadLocalState> state;
  if (after) state.emplace();
  task.run = [shared, comm = comm_, op = name, run = std::move(run), after = std::move(after),
              state = std::move(state)] {
    std::optional<at::ThreadLocalStateGuard> guard;
    if (state) guard.emplace(*state);
    std::exception_ptr error;
    try {
      const zcollResult_t r = run();
      // " Timed out " is what torch.distributed's callers match (its tests, watchdogs, elastic agents).
      if (r == zcollTimeout)
        throw std::runtime_error(std::string("zcoll ") + op +
                                 " failed: Timed out (the group's timeout): " + zcollGetLastError(comm));
      if (r != zcollSuccess)
        throw std::runtime_error(std::string("zcoll ") + op + " failed (" + zcollGetErrorString(r) +
                                 "): " + zcollGetLastError(comm));
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
      copyBackOf(s));
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
      copyBackOf(s));
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
      atRoot ? copyBackOf(s) : std::function<void()>());
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
      copyBackOf(s));
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
      copyBackOf(s));
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
      copyBackOf(s));
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
      copyBackOf(s));
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


}  // namespace zcoll_torch