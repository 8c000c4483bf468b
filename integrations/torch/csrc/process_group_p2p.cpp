// process_group_p2p.cpp - the torch backend's point-to-point side: send, recv (also from any source),
// all-to-all as batches of transfers, and batch_isend_irecv (coalescing); see process_group.hpp.
#include <ATen/MemoryOverlap.h>

#include <cstring>

#include "process_group.hpp"
#include "staging.hpp"
#include "work.hpp"

namespace zcoll_torch {

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
        copyBackOf(s));
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
        if (selfSrc.numel()) std::memcpy(selfDst.data_ptr(), selfSrc.data_ptr(), bytesOf(selfSrc));
        return runP2P(*batch);
      },
      copyBackOf(s));
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
        // Both dense, of one type and size (checked above): bytes, no torch op (see submit()).
        if (const size_t bytes = bytesOf(selfSrc)) std::memcpy(selfDst.data_ptr(), selfSrc.data_ptr(), bytes);
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
