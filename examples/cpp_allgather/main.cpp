// cpp_allgather - zcoll from C++: each rank contributes a block of its rank number; after the
// all-gather every rank holds every block, in rank order. Launch with `zcoll-run -n 4 ./cpp_allgather`.
#include <zcoll/zcoll.h>

#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

void check(zcollResult_t r, const char* what) {
  if (r != zcollSuccess)
    throw std::runtime_error(std::string(what) + ": " + zcollGetErrorString(r) + ": " + zcollGetLastError(nullptr));
}

// Owns a communicator: destroyed on scope exit, aborted if an exception unwinds.
class Comm {
 public:
  Comm() { check(zcollCommInitFromEnv(&comm_, nullptr), "zcollCommInitFromEnv"); }
  ~Comm() { zcollCommDestroy(comm_); }
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  zcollComm_t get() const { return comm_; }
  int rank() const {
    int r = 0;
    check(zcollCommUserRank(comm_, &r), "zcollCommUserRank");
    return r;
  }
  int size() const {
    int n = 0;
    check(zcollCommCount(comm_, &n), "zcollCommCount");
    return n;
  }

 private:
  zcollComm_t comm_ = nullptr;
};

}  // namespace

int main() try {
  Comm comm;
  const int rank = comm.rank(), n = comm.size();
  const size_t block = 1000;
  std::vector<int32_t> mine(block, rank), all(block * static_cast<size_t>(n), -1);
  check(zcollAllGather(mine.data(), all.data(), block, zcollInt32, comm.get(), nullptr), "zcollAllGather");
  size_t wrong = 0;
  for (size_t i = 0; i < all.size(); ++i) wrong += all[i] != static_cast<int32_t>(i / block);
  std::printf("rank %d of %d: all-gather of %zu x %d int32: %s\n", rank, n, block, n, wrong ? "WRONG" : "ok");
  return wrong ? 1 : 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "cpp_allgather: %s\n", e.what());
  return 1;
}
