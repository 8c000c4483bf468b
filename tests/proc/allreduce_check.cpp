// allreduce_check - one rank of a job (zcollCommInitFromEnv) that runs all-reduce for every type x op,
// in and out of place, at counts 0, 1, 37 and several chunks per rank plus a remainder, and checks
// every element against the exact expected value (tests/common/typed.hpp, as the collective matrix
// does). For jobs the in-process matrix cannot make: ranks on several "hosts" (tests/netns/run.sh,
// e.g. with ZCOLL_ALGO=allreduce:hier). Prints one line; exit status 1 when an element was wrong.
#include <cstdio>
#include <vector>

#include "tests/common/typed.hpp"
#include "zcoll/zcoll.h"

using namespace zcoll::test;

int main() {
  zcollComm_t comm = nullptr;
  if (zcollCommInitFromEnv(&comm, nullptr) != zcollSuccess) {
    std::fprintf(stderr, "allreduce_check: init: %s\n", zcollGetLastError(nullptr));
    return 2;
  }
  int rank = 0, n = 0;
  zcollCommUserRank(comm, &rank);
  zcollCommCount(comm, &n);
  const size_t counts[] = {0, 1, 37, 3 * static_cast<size_t>(n) * 4096 + 5};
  long cases = 0, wrong = 0;
  for (zcollDataType_t type : kAllTypes) {
    const size_t es = typeSize(type);
    for (zcollRedOp_t op : kAllOps) {
      for (size_t count : counts) {
        for (int inPlace = 0; inPlace < 2; ++inPlace) {
          std::vector<unsigned char> send(count * es + 1), recv(count * es + 1), expect(count * es + 1);
          fillInput(type, op, rank, inPlace ? recv.data() : send.data(), count);
          const void* sbuf = inPlace ? recv.data() : send.data();
          if (zcollAllReduce(sbuf, recv.data(), count, type, op, comm, nullptr) != zcollSuccess) {
            std::fprintf(stderr, "allreduce_check: rank %d: %s %s count %zu: %s\n", rank, typeName(type).c_str(),
                         opName(op).c_str(), count, zcollGetLastError(comm));
            return 3;
          }
          for (size_t i = 0; i < count; ++i) storeExpected(type, op, n, expect.data(), i, i);
          const size_t bad = countMismatches(recv.data(), expect.data(), count, es);
          if (bad && wrong < 5)
            std::fprintf(stderr, "allreduce_check: rank %d: %s %s count %zu %s: %zu wrong elements\n", rank,
                         typeName(type).c_str(), opName(op).c_str(), count, inPlace ? "in place" : "out of place", bad);
          wrong += bad ? 1 : 0;
          ++cases;
        }
      }
    }
  }
  char algo[32] = "";
  zcollCommAlgorithmFor(comm, "allreduce", counts[3], zcollFloat, algo, sizeof algo);
  std::printf("allreduce_check: rank %d of %d: %ld cases, %ld wrong (algorithm at %zu floats: %s)\n", rank, n, cases,
              wrong, counts[3], algo);
  zcollCommDestroy(comm);
  return wrong ? 1 : 0;
}
