// rank_pool.hpp - N ranks as N threads of the test process, each with its own communicator, reused
// across many operations (Gloo's test style). run(fn) calls fn(rank, comm) on every rank's thread
// and returns when all are done; gtest assertions inside fn are thread-safe.
#pragma once

#include <gtest/gtest.h>

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "zcoll/zcoll.h"

namespace zcoll::test {

class RankPool {
 public:
  using Fn = std::function<void(int rank, zcollComm_t comm)>;

  RankPool(int nranks, zcollConfig_t config) : nranks_(nranks), comms_(nranks, nullptr) {
    zcollUniqueId id;
    EXPECT_EQ(zcollGetUniqueId(&id), zcollSuccess) << zcollGetLastError(nullptr);
    for (int r = 0; r < nranks_; ++r) threads_.emplace_back([this, r, id, config] { loop(r, id, config); });
    run([](int, zcollComm_t) {});  // waits for every init
  }

  ~RankPool() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
      ++generation_;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  int nranks() const { return nranks_; }
  bool ok() const { return initFailures_ == 0; }

  void run(const Fn& fn) {
    std::unique_lock lock(mu_);
    fn_ = &fn;
    done_ = 0;
    ++generation_;
    cv_.notify_all();
    doneCv_.wait(lock, [this] { return done_ == nranks_; });
    fn_ = nullptr;
  }

 private:
  void loop(int rank, zcollUniqueId id, zcollConfig_t config) {
    zcollComm_t comm = nullptr;
    zcollResult_t r = zcollCommInitRankConfig(&comm, nranks_, id, rank, &config);
    if (r != zcollSuccess) {
      ADD_FAILURE() << "rank " << rank << " init: " << zcollGetLastError(nullptr);
      initFailures_++;
    }
    uint64_t seen = 0;
    for (;;) {
      const Fn* fn = nullptr;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return generation_ != seen; });
        seen = generation_;
        if (stop_) break;
        fn = fn_;
      }
      if (comm) (*fn)(rank, comm);
      std::lock_guard lock(mu_);
      if (++done_ == nranks_) doneCv_.notify_all();
    }
    if (comm) {
      EXPECT_EQ(zcollCommDestroy(comm), zcollSuccess) << zcollGetLastError(comm);
    }
  }

  int nranks_;
  std::vector<zcollComm_t> comms_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_, doneCv_;
  const Fn* fn_ = nullptr;
  uint64_t generation_ = 0;
  int done_ = 0;
  bool stop_ = false;
  std::atomic<int> initFailures_{0};
};

}  // namespace zcoll::test
