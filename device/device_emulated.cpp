// device_emulated.cpp - see device_emulated.hpp.
#include "device/device_emulated.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <thread>

#include "core/clock.hpp"
#include "kernels/host_reduce.hpp"

namespace zcoll {
namespace {

// One stream: its work runs in order on its own thread; the first failure sticks (as CUDA's).
class Stream {
 public:
  Stream() : thread_([this] { loop(); }) {}
  ~Stream() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  void push(std::function<void()> fn) {
    {
      std::lock_guard lock(mu_);
      queue_.push_back(std::move(fn));
      ++queued_;
    }
    cv_.notify_all();
  }
  bool idle() {
    std::lock_guard lock(mu_);
    return finished_ == queued_;
  }
  void synchronize() {
    std::unique_lock lock(mu_);
    doneCv_.wait(lock, [this] { return finished_ == queued_; });
  }

 private:
  void loop() {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      std::function<void()> fn = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      fn();
      lock.lock();
      ++finished_;
      doneCv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_, doneCv_;
  std::deque<std::function<void()>> queue_;
  uint64_t queued_ = 0, finished_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

struct Event {
  std::atomic<uint64_t> recorded{0};
  std::atomic<uint64_t> completed{0};
};

class Emulated final : public EmulatedDeviceRuntime {
 public:
  std::string_view name() const override { return "emulated"; }

  MemKind kindOf(const void* p) override {
    const auto a = reinterpret_cast<uintptr_t>(p);
    std::shared_lock lock(rangesMu_);
    auto it = ranges_.upper_bound(a);
    if (it == ranges_.begin()) return MemKind::Host;
    --it;
    return a < it->first + it->second ? MemKind::Device : MemKind::Host;
  }
  int currentDevice() override { return 0; }
  Status setDevice(int device) override {
    if (device != 0) return deviceError("emulated device: no device {} (there is one, 0)", device);
    return Status::ok();
  }

  Status alloc(size_t bytes, void** out) override {
    const size_t size = roundUp(bytes);
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return deviceError("emulated device: out of memory allocating {} bytes", bytes);
    addRange(p, size);
    *out = p;
    return Status::ok();
  }
  void free(void* p) override {
    if (!p) return;
    ::munmap(p, removeRange(p));
  }
  Status allocHostMapped(size_t bytes, void** out) override {
    *out = ::calloc(1, bytes);
    return *out ? Status::ok() : deviceError("emulated device: out of host memory ({} bytes)", bytes);
  }
  void freeHostMapped(void* p) override { ::free(p); }
  Status registerHost(void*, size_t) override { return Status::ok(); }
  void unregisterHost(void*) override {}

  Status streamCreate(DevStream* out) override {
    *out = new Stream();
    return Status::ok();
  }
  void streamDestroy(DevStream s) override {
    if (s && s != defaultStream()) delete static_cast<Stream*>(s);
  }
  Status streamQuery(DevStream s, bool* done) override {
    *done = stream(s)->idle();
    return Status::ok();
  }
  Status eventCreate(DevEvent* out) override {
    *out = new Event();
    return Status::ok();
  }
  void eventDestroy(DevEvent e) override { delete static_cast<Event*>(e); }
  Status eventRecord(DevEvent e, DevStream s) override {
    Event* ev = static_cast<Event*>(e);
    const uint64_t mark = ev->recorded.fetch_add(1) + 1;
    stream(s)->push([ev, mark] { ev->completed.store(mark, std::memory_order_release); });
    return Status::ok();
  }
  Status eventQuery(DevEvent e, bool* done) override {
    Event* ev = static_cast<Event*>(e);
    *done = ev->completed.load(std::memory_order_acquire) >= ev->recorded.load(std::memory_order_relaxed);
    return Status::ok();
  }
  Status streamWaitFlag(DevStream s, const uint64_t* flag, uint64_t value) override {
    stream(s)->push([flag, value] {
      // The stream waits as a GPU would (cuStreamWaitValue64): polling, without a bound.
      std::atomic_ref<const uint64_t> f(*flag);
      for (int i = 0; f.load(std::memory_order_acquire) < value; ++i) {
        if (i < 64) continue;
        timespec ts{0, 20'000};
        nanosleep(&ts, nullptr);
      }
    });
    return Status::ok();
  }

  Status copyAsync(void* dst, const void* src, size_t bytes, DevStream s) override {
    stream(s)->push([=] { std::memmove(dst, src, bytes); });
    return Status::ok();
  }
  Status reduceAsync(void* dst, void* dst2, const void* a, const void* b, size_t n, DataType t, RedOp op, int divisor,
                     DevStream s) override {
    ReduceFn reduce = reduceFunction(t, op);
    FinalizeFn fin = divisor > 0 ? finalizeFunction(t, op) : nullptr;
    const size_t bytes = n * dataTypeSize(t);
    stream(s)->push([=] {
      reduce(dst, a, b, n);
      if (fin) fin(dst, n, divisor);
      if (dst2) std::memcpy(dst2, dst, bytes);
    });
    return Status::ok();
  }
  Status divideAsync(void* data, size_t n, DataType t, int divisor, DevStream s) override {
    FinalizeFn fin = finalizeFunction(t, RedOp::Avg);
    stream(s)->push([=] { fin(data, n, divisor); });
    return Status::ok();
  }

  Status allocShareable(size_t bytes, void** ptr, int* fd, size_t* mappedBytes) override {
    const size_t size = roundUp(bytes);
    int f = ::memfd_create("zcoll-emulated-device", MFD_CLOEXEC);
    if (f < 0) return systemError("memfd_create (emulated device memory)", errno);
    if (::ftruncate(f, static_cast<off_t>(size)) != 0) {
      const int err = errno;
      ::close(f);
      return systemError("ftruncate (emulated device memory)", err);
    }
    void* p = nullptr;
    if (Status s = importShareable(f, size, &p); !s) {
      ::close(f);
      return s;
    }
    *ptr = p;
    *fd = f;
    *mappedBytes = size;
    return Status::ok();
  }
  Status importShareable(int fd, size_t mappedBytes, void** ptr) override {
    void* p = ::mmap(nullptr, mappedBytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (p == MAP_FAILED) return systemError("mmap (emulated device memory)", errno);
    addRange(p, mappedBytes);
    *ptr = p;
    return Status::ok();
  }
  void freeShareable(void* p, size_t mappedBytes) override {
    if (!p) return;
    removeRange(p);
    ::munmap(p, mappedBytes);
  }

  Status launchHost(DevStream s, std::function<void()> fn) override {
    stream(s)->push(std::move(fn));
    return Status::ok();
  }
  Status synchronize(DevStream s) override {
    stream(s)->synchronize();
    return Status::ok();
  }
  size_t allocatedBytes() const override {
    std::shared_lock lock(rangesMu_);
    size_t total = 0;
    for (const auto& [at, size] : ranges_) total += size;
    return total;
  }

 private:
  static size_t roundUp(size_t bytes) { return (std::max<size_t>(bytes, 1) + 4095) / 4096 * 4096; }
  // A NULL stream is the default stream, as in CUDA.
  Stream* stream(DevStream s) { return static_cast<Stream*>(s ? s : defaultStream()); }
  DevStream defaultStream() {
    static Stream* def = new Stream();  // lives as long as the process (work may be queued at exit)
    return def;
  }
  void addRange(void* p, size_t size) {
    std::unique_lock lock(rangesMu_);
    ranges_[reinterpret_cast<uintptr_t>(p)] = size;
  }
  size_t removeRange(void* p) {
    std::unique_lock lock(rangesMu_);
    auto it = ranges_.find(reinterpret_cast<uintptr_t>(p));
    if (it == ranges_.end()) return 0;
    const size_t size = it->second;
    ranges_.erase(it);
    return size;
  }

  mutable std::shared_mutex rangesMu_;
  std::map<uintptr_t, size_t> ranges_;
};

}  // namespace

EmulatedDeviceRuntime* emulatedDevice() {
  static Emulated* rt = new Emulated();  // never destroyed: streams may outlive static destructors
  return rt;
}

DeviceRuntime* emulatedDeviceRuntime() { return emulatedDevice(); }

}  // namespace zcoll
