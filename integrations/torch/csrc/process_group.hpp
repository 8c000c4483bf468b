// process_group.hpp - zcoll as a torch.distributed process group (backend "zcoll").
//
// One zcoll communicator per process group, created over torch's Store (rank 0 publishes the
// unique id). Every operation is checked and staged on the calling thread (a bad argument raises
// there, naming it), then runs on an OrderedExecutor in issue order, which all ranks share; the
// returned Work completes its future with the output tensors. Operations are those of Gloo's CPU
// backend; tensors are CPU tensors (a CUDA tensor is refused with a message).
//
// One source for torch 1.13 (subclass c10d::ProcessGroup) and torch 2.x (subclass c10d::Backend).
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/version.h>
#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

#include <zcoll/zcoll.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ordered_executor.hpp"

namespace zcoll_torch {

// torch 2.1 made endCoalescing() return the batch's Work (before: endCoalescing(reqs)).
#define ZCOLL_TORCH_END_COALESCING_RETURNS_WORK \
  (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1))

#if TORCH_VERSION_MAJOR >= 2
using ProcessGroupBase = c10d::Backend;
#else
using ProcessGroupBase = c10d::ProcessGroup;
#endif

class ZcollWork;

class ProcessGroupZcoll : public ProcessGroupBase {
 public:
  // Collective over the group: rank 0 creates the unique id and publishes it in store.
  ProcessGroupZcoll(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                    std::chrono::milliseconds timeout);
  // Runs what is still queued (bounded by the timeout), then destroys the communicator.
  ~ProcessGroupZcoll() override;

  // torch.distributed's creator function (register_backend).
  static c10::intrusive_ptr<ProcessGroupBase> create(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                     int size, const std::chrono::duration<float>& timeout);

  const std::string getBackendName() const override { return "zcoll"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts = c10d::AllreduceCoalescedOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts = c10d::ReduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts = c10d::GatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts = c10d::ScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplitSizes,
                                               std::vector<int64_t>& inputSplitSizes,
                                               const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  // Each input's all-gather (outputLists[r][i] = rank r's inputs[i]) as one zcoll all-gather.
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts = c10d::BarrierOptions()) override;

  // batch_isend_irecv: the sends and receives issued in between run as one zcoll group, so that
  // their order across ranks does not matter.
  void startCoalescing() override;
#if ZCOLL_TORCH_END_COALESCING_RETURNS_WORK
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
#else
  void endCoalescing(std::vector<c10::intrusive_ptr<c10d::Work>>& reqs) override;
#endif

  zcollComm_t comm() const { return comm_; }

 private:
  // A point-to-point transfer of a batch (bytes of a contiguous staging tensor).
  struct P2P {
    bool isSend;
    int peer;
    at::Tensor buf;   // contiguous; what zcoll reads or writes
    at::Tensor user;  // the caller's tensor (copied back after a receive when it is not buf)
  };
  // Queues run (the zcoll calls, then `after`) on the executor; its outcome completes every work.
  // Only `after` may call torch ops: it runs under the caller's thread-local state (grad mode...),
  // `run` under whichever thread's runs it. `name` is a string literal (kept, not copied).
  void submit(std::vector<c10::intrusive_ptr<ZcollWork>> works, const char* name, std::function<zcollResult_t()> run,
              std::function<void()> after);
  // One operation, one work with these outputs.
  c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, const char* name, std::vector<at::Tensor> outputs,
                                         std::function<zcollResult_t()> run, std::function<void()> after = {});
  c10::intrusive_ptr<c10d::Work> p2p(bool isSend, std::vector<at::Tensor>& tensors, int peer, const char* name);
  // Runs a batch of transfers (never to this rank) as one zcoll group; empty ones are skipped.
  zcollResult_t runP2P(const std::vector<P2P>& batch) const;
  // The root of a rooted collective, checked.
  int checkRoot(int64_t root, const char* name) const;
  // Refuses a collective inside a coalescing block of sends and receives.
  void checkNotCoalescing(const char* name);

  zcollComm_t comm_ = nullptr;
  std::shared_ptr<OrderedExecutor> executor_;
  bool coalescing_ = false;
  std::vector<P2P> batch_;
  std::vector<c10::intrusive_ptr<ZcollWork>> batchWorks_;
};

}  // namespace zcoll_torch
