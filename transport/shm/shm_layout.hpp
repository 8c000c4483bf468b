// shm_layout.hpp - where things live in one rank's shared-memory segment (pure arithmetic).
//
// The segment of rank `owner` holds its header and one inbound FIFO per other rank of its group (all
// ranks, or in a mixed communicator the ranks of this host; indices below are within the group):
//   [SegmentHeader: 4 KiB][FifoCtrl x (nranks-1)][page-aligned data: (nranks-1) x slots x slotStride]
// (the data part in device memory instead for the cuda_ipc transport)
// The FIFO from sender s sits at index fifoIndex(owner, s). The sender writes into the owner's
// segment; the owner reads in place. Each chunk has a header (SlotHeader) the sender writes last: the
// chunk's size and its FIFO position (seq), which is what the owner polls; tail and dataTail, on their
// own line, are written by the owner. Host FIFOs: a chunk of at most kInlineBytes travels inside its
// header alone (one cache-line transfer up to 48 bytes instead of three: position, size, data) and
// takes no data slot, so a sender may run kMaxSlots small chunks ahead of its receiver (a broadcast
// root's loop) while the data slots bound only the large ones. Device FIFOs (cuda_ipc) keep the data
// in device memory: one header per data slot.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace zcoll::shm {

inline constexpr uint64_t kSegmentMagic = 0x7a636f6c6c534833ull;  // "zcollSH3" (headers apart from data slots)
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

inline constexpr size_t kInlineBytes = 496;

struct alignas(64) SlotHeader {
  std::atomic<uint64_t> seq;           // 1 + the FIFO position of the chunk; written last
  uint64_t bytes;                      // its payload size
  uint8_t inlined[kInlineBytes];       // host FIFOs: a chunk of at most kInlineBytes lives here
};
static_assert(sizeof(SlotHeader) == 512);

struct alignas(64) FifoCtrl {
  alignas(64) std::atomic<uint64_t> tail;  // chunks released by the receiver
  std::atomic<uint64_t> dataTail;          // of them, those that held a data slot
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
