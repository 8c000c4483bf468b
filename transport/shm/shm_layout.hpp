// shm_layout.hpp - where things live in one rank's shared-memory segment (pure arithmetic).
//
// The segment of rank `owner` holds its header and one inbound FIFO per other rank of its group (all
// ranks, or in a mixed communicator the ranks of this host; indices below are within the group):
//   [SegmentHeader: 4 KiB][FifoCtrl x (nranks-1)][page-aligned data: (nranks-1) x slots x slotStride]
// (the data part in device memory instead for the cuda_ipc transport)
// The FIFO from sender s sits at index fifoIndex(owner, s). The sender writes into the owner's
// segment; the owner reads in place. Each slot has a header line (SlotHeader) the sender writes last:
// the chunk's size and its FIFO position (seq), which is what the owner polls; tail, on its own line,
// is written by the owner. A host chunk of at most kInlineBytes is also copied into its header line,
// so the owner takes a small message with one cache-line transfer instead of three (position, size,
// data): the latency of every small op.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace zcoll::shm {

inline constexpr uint64_t kSegmentMagic = 0x7a636f6c6c534832ull;  // "zcollSH2" (with hostBarrier)
inline constexpr int kMaxSlots = 64;

struct alignas(64) SegmentHeader {
  uint64_t magic;
  int32_t rank;
  int32_t nranks;
  int32_t slots;
  int32_t pid;
  uint64_t slotBytes;
  uint64_t nonce;
  uint32_t hostBarrier;  // 1: the owner's process takes hostBarrier()s (core/membarrier.hpp)
  alignas(64) std::atomic<uint32_t> doorbell;  // rung by peers whose event concerns this rank
  alignas(64) std::atomic<uint32_t> sleepers;  // > 0 while this rank sleeps on doorbell
  // > 0 while this rank sleeps on its wake eventfd (mixed communicators: beside a network transport)
  alignas(64) std::atomic<uint32_t> fdSleepers;
};

inline constexpr size_t kInlineBytes = 48;

struct alignas(64) SlotHeader {
  std::atomic<uint64_t> seq;           // 1 + the FIFO position of the chunk in the slot; written last
  uint64_t bytes;                      // its payload size
  uint8_t inlined[kInlineBytes];       // host FIFOs: a chunk of at most kInlineBytes, copied here too
};
static_assert(sizeof(SlotHeader) == 64);

struct alignas(64) FifoCtrl {
  alignas(64) std::atomic<uint64_t> tail;  // chunks released by the receiver
  SlotHeader slot[kMaxSlots];
};

struct Layout {
  int nranks = 1;
  int slots = 2;
  size_t slotBytes = 0;

  static constexpr size_t kPage = 4096;
  static constexpr size_t roundUp(size_t x, size_t a) { return (x + a - 1) / a * a; }

  static constexpr int fifoIndex(int owner, int sender) { return sender < owner ? sender : sender - 1; }
  size_t slotStride() const { return roundUp(slotBytes, 64); }
  size_t fifoDataBytes() const { return roundUp(slotStride() * static_cast<size_t>(slots), kPage); }
  size_t ctrlOffset(int index) const { return kPage + sizeof(FifoCtrl) * static_cast<size_t>(index); }
  size_t dataBase() const { return roundUp(ctrlOffset(nranks - 1), kPage); }
  size_t dataOffset(int index) const { return dataBase() + fifoDataBytes() * static_cast<size_t>(index); }
  // With hostData false (cuda_ipc) the segment ends at dataBase() and the FIFOs' data lives in a
  // separate device region laid out the same way: FIFO index i at deviceDataOffset(i).
  bool hostData = true;
  size_t totalBytes() const { return hostData ? dataOffset(nranks - 1) : dataBase(); }
  size_t deviceDataOffset(int index) const { return fifoDataBytes() * static_cast<size_t>(index); }
  size_t deviceDataBytes() const { return deviceDataOffset(nranks - 1); }
};

static_assert(sizeof(SegmentHeader) <= Layout::kPage);

}  // namespace zcoll::shm
