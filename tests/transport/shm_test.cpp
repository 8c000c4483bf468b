// shm_test.cpp - the shm transport's FIFO itself, two ranks as threads: a small chunk travels in its
// header and takes no data slot, so a sender runs kMaxSlots small chunks ahead while the data slots
// bound the large ones; small and large chunks keep their order; a slot acquired without a size and
// committed small gives its data slot back at once.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "bootstrap/bootstrap.hpp"
#include "bootstrap/unique_id.hpp"
#include "core/config.hpp"
#include "transport/shm/shm_layout.hpp"
#include "transport/shm/shm_transport.hpp"
#include "zcoll/zcoll.h"

namespace zcoll {
namespace {

constexpr size_t kChunk = 4096;

// The byte at position i of chunk `seq`.
uint8_t fill(uint64_t seq, size_t i) { return static_cast<uint8_t>(seq * 131 + i * 7 + 1); }

class ShmFifo : public ::testing::Test {
 protected:
  void SetUp() override {
    zcollUniqueId id;
    ASSERT_EQ(zcollGetUniqueId(&id), zcollSuccess);
    UniqueIdFields f;
    ASSERT_TRUE(decodeUniqueId(id.internal, &f).isOk());
    config_.chunkBytes = kChunk;
    config_.fifoSlots = 2;
    config_.timeoutMs = 20'000;
    std::thread ranks[2];
    Status made[2];
    for (int r = 0; r < 2; ++r)
      ranks[r] = std::thread([&, r] {
        made[r] = Bootstrap::create(f, r, 2, config_, &abort_[r], &boot_[r]);
        if (made[r]) made[r] = shm::ShmTransport::create(TransportArgs{*boot_[r], config_, &abort_[r]}, &t_[r]);
      });
    for (auto& t : ranks) t.join();
    for (int r = 0; r < 2; ++r) ASSERT_TRUE(made[r].isOk()) << made[r].message();
  }

  // Rank 0 sends chunk `seq` of `bytes` (sized: the acquire knows the size), without waiting.
  bool send(uint64_t seq, size_t bytes, bool sized = true) {
    SendSlot slot;
    if (!(sized ? t_[0]->tryAcquireSendFor(1, bytes, &slot) : t_[0]->tryAcquireSend(1, &slot))) return false;
    EXPECT_GE(slot.capacity, bytes);
    auto* p = static_cast<uint8_t*>(slot.data);
    for (size_t i = 0; i < bytes; ++i) p[i] = fill(seq, i);
    t_[0]->commitSend(1, bytes);
    return true;
  }

  // Rank 1 takes the next chunk: chunk `seq` of `bytes`, every byte checked.
  void expect(uint64_t seq, size_t bytes) {
    RecvChunk in;
    ASSERT_TRUE(t_[1]->tryRecv(0, &in)) << "chunk " << seq << " did not arrive";
    ASSERT_EQ(in.bytes, bytes) << "chunk " << seq;
    const auto* p = static_cast<const uint8_t*>(in.data);
    for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(p[i], fill(seq, i)) << "chunk " << seq << " byte " << i;
    t_[1]->releaseRecv(0);
  }

  Config config_;
  std::atomic<bool> abort_[2]{};
  std::unique_ptr<Bootstrap> boot_[2];
  std::unique_ptr<Transport> t_[2];
};

TEST_F(ShmFifo, SmallChunksRunAheadOfTheDataSlots) {
  ASSERT_EQ(t_[0]->slotsPerPeer(), 2);
  // kMaxSlots small chunks with nobody reading: every size up to kInlineBytes.
  std::vector<size_t> sizes;
  for (int k = 0; k < shm::kMaxSlots; ++k) sizes.push_back(1 + (static_cast<size_t>(k) * 37) % shm::kInlineBytes);
  sizes.back() = shm::kInlineBytes;
  for (size_t k = 0; k < sizes.size(); ++k) ASSERT_TRUE(send(k, sizes[k])) << "small chunk " << k;
  EXPECT_FALSE(send(99, 8)) << "a small chunk past kMaxSlots headers";
  EXPECT_FALSE(send(99, kChunk)) << "a large chunk with every header taken";
  for (size_t k = 0; k < sizes.size(); ++k) ASSERT_NO_FATAL_FAILURE(expect(k, sizes[k]));
  RecvChunk none;
  EXPECT_FALSE(t_[1]->tryRecv(0, &none));
}

TEST_F(ShmFifo, LargeChunksTakeDataSlotsAndKeepTheirPlaceAmongSmallOnes) {
  uint64_t seq = 0;
  // Several rounds, so that both rings wrap (kMaxSlots headers, 2 data slots).
  for (int round = 0; round < 3 * shm::kMaxSlots; ++round) {
    const uint64_t first = seq;
    ASSERT_TRUE(send(seq++, kChunk));
    ASSERT_TRUE(send(seq++, 8));
    ASSERT_TRUE(send(seq++, shm::kInlineBytes + 1));  // one byte too many to travel in the header
    EXPECT_FALSE(send(seq, kChunk)) << "a third large chunk with two data slots";
    EXPECT_FALSE(send(seq, 100, false)) << "an unsized acquire needs a data slot";
    ASSERT_TRUE(send(seq++, 100)) << "a small chunk needs only a header";
    ASSERT_NO_FATAL_FAILURE(expect(first, kChunk));
    ASSERT_TRUE(send(seq++, 16, false)) << "the first data slot is free again";
    // Committed small: its data slot stays free for the next large chunk.
    ASSERT_TRUE(send(seq++, kChunk - 1));
    ASSERT_NO_FATAL_FAILURE(expect(first + 1, 8));
    ASSERT_NO_FATAL_FAILURE(expect(first + 2, shm::kInlineBytes + 1));
    ASSERT_NO_FATAL_FAILURE(expect(first + 3, 100));
    ASSERT_NO_FATAL_FAILURE(expect(first + 4, 16));
    ASSERT_NO_FATAL_FAILURE(expect(first + 5, kChunk - 1));
  }
}

}  // namespace
}  // namespace zcoll
