// scratch.hpp - a communicator's persistent scratch memory for algorithms that need a workspace
// (e.g. recursive-halving reduce-scatter). It grows to the largest size asked for, mapped with
// huge pages where the kernel allows and touched at once, then stays: no allocation or page fault
// per call in the steady state. Used by one operation at a time (the communicator's order).
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstring>

namespace zcoll {

// What algorithms see: grow-once memory of the operation's kind (host here, device memory for device
// operations: algorithms/device_executor.hpp), in 2 MiB multiples, kept until a larger size is asked.
class Scratch {
 public:
  Scratch() = default;
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  virtual ~Scratch() = default;

  // At least `bytes`, or nullptr if it cannot be had.
  void* get(size_t bytes) {
    if (bytes <= size_) return data_;
    release();
    const size_t want = (bytes + (size_t{2} << 20) - 1) & ~((size_t{2} << 20) - 1);
    data_ = acquire(want);
    size_ = data_ ? want : 0;
    return data_;
  }

 protected:
  virtual void* acquire(size_t bytes) = 0;  // nullptr on failure
  virtual void drop(void* p, size_t bytes) = 0;
  // Derived destructors call it (the base's would no longer reach their drop()).
  void release() {
    if (data_) drop(data_, size_);
    data_ = nullptr;
    size_ = 0;
  }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

// Mapped with huge pages where the kernel allows and touched at once.
class HostScratch final : public Scratch {
 public:
  ~HostScratch() override { release(); }

 private:
  void* acquire(size_t bytes) override {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    ::madvise(p, bytes, MADV_HUGEPAGE);
    std::memset(p, 0, bytes);
    return p;
  }
  void drop(void* p, size_t bytes) override { ::munmap(p, bytes); }
};

}  // namespace zcoll
