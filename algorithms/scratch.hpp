// scratch.hpp - a communicator's persistent scratch memory for algorithms that need a workspace
// (e.g. recursive-halving reduce-scatter). It grows to the largest size asked for, mapped with
// huge pages where the kernel allows and touched at once, then stays: no allocation or page fault
// per call in the steady state. Used by one operation at a time (the communicator's order).
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstring>

namespace zcoll {

// The interface algorithms see; device operations get device memory (algorithms/device_executor.hpp).
class Scratch {
 public:
  virtual ~Scratch() = default;
  // At least `bytes` of memory of the operation's kind, or nullptr if it cannot be had.
  virtual void* get(size_t bytes) = 0;
};

class HostScratch final : public Scratch {
 public:
  HostScratch() = default;
  HostScratch(const HostScratch&) = delete;
  HostScratch& operator=(const HostScratch&) = delete;
  ~HostScratch() override { release(); }

  // Touched memory.
  void* get(size_t bytes) override {
    if (bytes <= size_) return data_;
    release();
    size_t want = (bytes + (size_t{2} << 20) - 1) & ~((size_t{2} << 20) - 1);
    void* p = ::mmap(nullptr, want, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    ::madvise(p, want, MADV_HUGEPAGE);
    std::memset(p, 0, want);
    data_ = p;
    size_ = want;
    return data_;
  }

 private:
  void release() {
    if (data_) ::munmap(data_, size_);
    data_ = nullptr;
    size_ = 0;
  }
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace zcoll
