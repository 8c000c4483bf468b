// collective_check - one rank of a job (zcollCommInitFromEnv) that checks, element by element against
// the exact expected values (tests/common/typed.hpp, as the collective matrix does), in and out of
// place, at counts 0, 1, 37 and several chunks per rank plus a remainder:
//   all-reduce and reduce-scatter for every type x op, all-gather for every type.
// For jobs the in-process matrix cannot make: ranks on several "hosts" (tests/netns/run.sh, with
// ZCOLL_ALGO=hier). Prints one line per collective ("... N cases, M wrong (algorithm: NAME)"); exit
// status 1 when an element was wrong.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tests/common/typed.hpp"
#include "zcoll/zcoll.h"

using namespace zcoll::test;

namespace {

int rank = 0, n = 0;
long wrongTotal = 0;

// Runs one collective's cases; `run` calls it, `expect` fills the expected output.
template <typename Run, typename Expect>
bool check(zcollComm_t comm, const char* coll, bool reduces, Run run, Expect expect) {
  const size_t counts[] = {0, 1, 37, 3 * 4096 + 5};
  long cases = 0, wrong = 0;
  for (zcollDataType_t type : kAllTypes) {
    const size_t es = typeSize(type);
    for (zcollRedOp_t op : kAllOps) {
      if (!reduces && op != zcollSum) continue;
      for (size_t count : counts) {
        for (int inPlace = 0; inPlace < 2; ++inPlace) {
          std::vector<unsigned char> got, want;
          const zcollResult_t r = run(type, op, count, inPlace != 0, &got);
          if (r != zcollSuccess) {
            std::fprintf(stderr, "collective_check: rank %d: %s %s %s count %zu: %s\n", rank, coll, typeName(type).c_str(),
                         opName(op).c_str(), count, zcollGetLastError(comm));
            return false;
          }
          want.assign(got.size(), 0);
          expect(type, op, count, want.data());
          const size_t bad = countMismatches(got.data(), want.data(), got.size() / es, es);
          if (bad && wrong < 5)
            std::fprintf(stderr, "collective_check: rank %d: %s %s %s count %zu %s: %zu wrong elements\n", rank, coll,
                         typeName(type).c_str(), opName(op).c_str(), count, inPlace ? "in place" : "out of place", bad);
          wrong += bad ? 1 : 0;
          ++cases;
        }
      }
    }
  }
  char algo[32] = "";
  zcollCommAlgorithmFor(comm, coll, 3 * 4096 + 5, zcollFloat, algo, sizeof algo);
  std::printf("collective_check: rank %d of %d: %s: %ld cases, %ld wrong (algorithm: %s)\n", rank, n, coll, cases, wrong, algo);
  wrongTotal += wrong;
  return true;
}

}  // namespace

int main() {
  zcollComm_t comm = nullptr;
  if (zcollCommInitFromEnv(&comm, nullptr) != zcollSuccess) {
    std::fprintf(stderr, "collective_check: init: %s\n", zcollGetLastError(nullptr));
    return 2;
  }
  zcollCommUserRank(comm, &rank);
  zcollCommCount(comm, &n);
  const size_t N = static_cast<size_t>(n), R = static_cast<size_t>(rank);
  bool ok = check(
      comm, "allreduce", true,
      [&](zcollDataType_t t, zcollRedOp_t op, size_t count, bool inPlace, std::vector<unsigned char>* out) {
        const size_t es = typeSize(t);
        std::vector<unsigned char> send(count * es + 1);
        out->assign(count * es + 1, 0);
        fillInput(t, op, rank, inPlace ? out->data() : send.data(), count);
        zcollResult_t r = zcollAllReduce(inPlace ? out->data() : send.data(), out->data(), count, t, op, comm, nullptr);
        out->resize(count * es);
        return r;
      },
      [&](zcollDataType_t t, zcollRedOp_t op, size_t count, void* want) {
        for (size_t i = 0; i < count; ++i) storeExpected(t, op, n, want, i, i);
      });
  ok = ok && check(
      comm, "reducescatter", true,
      [&](zcollDataType_t t, zcollRedOp_t op, size_t count, bool inPlace, std::vector<unsigned char>* out) {
        const size_t es = typeSize(t);
        std::vector<unsigned char> send(count * N * es + 1), recv(count * es + 1);
        fillInput(t, op, rank, send.data(), count * N);
        void* dst = inPlace ? send.data() + R * count * es : recv.data();
        zcollResult_t r = zcollReduceScatter(send.data(), dst, count, t, op, comm, nullptr);
        out->assign(static_cast<unsigned char*>(dst), static_cast<unsigned char*>(dst) + count * es);
        return r;
      },
      [&](zcollDataType_t t, zcollRedOp_t op, size_t count, void* want) {
        for (size_t i = 0; i < count; ++i) storeExpected(t, op, n, want, i, R * count + i);
      });
  ok = ok && check(
      comm, "allgather", false,
      [&](zcollDataType_t t, zcollRedOp_t, size_t count, bool inPlace, std::vector<unsigned char>* out) {
        const size_t es = typeSize(t);
        std::vector<unsigned char> send(count * es + 1);
        out->assign(count * N * es + 1, 0);
        unsigned char* mine = inPlace ? out->data() + R * count * es : send.data();
        fillInput(t, zcollSum, rank, mine, count, R * count);
        zcollResult_t r = zcollAllGather(mine, out->data(), count, t, comm, nullptr);
        out->resize(count * N * es);
        return r;
      },
      [&](zcollDataType_t t, zcollRedOp_t, size_t count, void* want) {
        for (int q = 0; q < n; ++q)
          fillInput(t, zcollSum, q, static_cast<unsigned char*>(want) + static_cast<size_t>(q) * count * typeSize(t), count,
                    static_cast<size_t>(q) * count);
      });
  zcollCommDestroy(comm);
  if (!ok) return 3;
  return wrongTotal ? 1 : 0;
}
