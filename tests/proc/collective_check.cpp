// collective_check - one rank of a job (zcollCommInitFromEnv) that checks, element by element against
// the exact expected values (tests/common/typed.hpp, as the collective matrix does), in and out of
// place, at counts 0, 1, 37 and several chunks per rank plus a remainder:
//   all-reduce and reduce-scatter for every type x op, all-gather for every type.
// For jobs the in-process matrix cannot make: ranks on several "hosts" (tests/netns/run.sh, with
// ZCOLL_ALGO=hier). Prints one line per collective ("... N cases, M wrong (algorithm: NAME)"); exit
// status 1 when an element was wrong. With COLLECTIVE_CHECK_REGISTER=1 every buffer is registered
// (zcollCommRegister) before its call and deregistered after it (tools/rdma-check: the ib
// transport's zero-copy sends and MR cache), and a ring of send/recv (every type, the same counts)
// is checked too.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/common/typed.hpp"
#include "zcoll/zcoll.h"

using namespace zcoll::test;

namespace {

int rank = 0, n = 0;
long wrongTotal = 0;
bool registerBuffers = false;

// Registers [p, p + bytes) for the lifetime of the object when COLLECTIVE_CHECK_REGISTER=1.
class Registered {
 public:
  Registered(zcollComm_t comm, void* p, size_t bytes) : comm_(comm) {
    if (!registerBuffers || bytes == 0) return;
    if (zcollCommRegister(comm, p, bytes, &handle_) != zcollSuccess) {
      std::fprintf(stderr, "collective_check: rank %d: zcollCommRegister: %s\n", rank, zcollGetLastError(comm));
      std::exit(3);
    }
  }
  ~Registered() {
    if (handle_ && zcollCommDeregister(comm_, handle_) != zcollSuccess) {
      std::fprintf(stderr, "collective_check: rank %d: zcollCommDeregister: %s\n", rank, zcollGetLastError(comm_));
      std::exit(3);
    }
  }
  Registered(const Registered&) = delete;
  Registered& operator=(const Registered&) = delete;

 private:
  zcollComm_t comm_;
  void* handle_ = nullptr;
};

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
  registerBuffers = std::getenv("COLLECTIVE_CHECK_REGISTER") && std::string(std::getenv("COLLECTIVE_CHECK_REGISTER")) == "1";
  const size_t N = static_cast<size_t>(n), R = static_cast<size_t>(rank);
  bool ok = check(
      comm, "allreduce", true,
      [&](zcollDataType_t t, zcollRedOp_t op, size_t count, bool inPlace, std::vector<unsigned char>* out) {
        const size_t es = typeSize(t);
        std::vector<unsigned char> send(count * es + 1);
        out->assign(count * es + 1, 0);
        fillInput(t, op, rank, inPlace ? out->data() : send.data(), count);
        Registered rs(comm, send.data(), count * es), rr(comm, out->data(), count * es);
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
        Registered rs(comm, send.data(), count * N * es), rr(comm, recv.data(), count * es);
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
        Registered rs(comm, send.data(), count * es), rr(comm, out->data(), count * N * es);
        zcollResult_t r = zcollAllGather(mine, out->data(), count, t, comm, nullptr);
        out->resize(count * N * es);
        return r;
      },
      [&](zcollDataType_t t, zcollRedOp_t, size_t count, void* want) {
        for (int q = 0; q < n; ++q)
          fillInput(t, zcollSum, q, static_cast<unsigned char*>(want) + static_cast<size_t>(q) * count * typeSize(t), count,
                    static_cast<size_t>(q) * count);
      });
  // A ring of send/recv: rank r sends its input to r + 1 and receives r - 1's.
  const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  ok = ok && (!registerBuffers ||
              check(
                  comm, "sendrecv", false,
                  [&](zcollDataType_t t, zcollRedOp_t, size_t count, bool, std::vector<unsigned char>* out) {
                    // No in-place form: the "in place" case runs the exchange again.
                    const size_t es = typeSize(t);
                    std::vector<unsigned char> send(count * es + 1);
                    out->assign(count * es + 1, 0);
                    fillInput(t, zcollSum, rank, send.data(), count);
                    Registered rs(comm, send.data(), count * es), rr(comm, out->data(), count * es);
                    zcollGroupStart();
                    zcollSend(send.data(), count, t, next, comm, nullptr);
                    zcollRecv(out->data(), count, t, prev, comm, nullptr);
                    zcollResult_t r = zcollGroupEnd();
                    out->resize(count * es);
                    return r;
                  },
                  [&](zcollDataType_t t, zcollRedOp_t, size_t count, void* want) {
                    fillInput(t, zcollSum, prev, want, count);
                  }));
  zcollCommDestroy(comm);
  if (!ok) return 3;
  return wrongTotal ? 1 : 0;
}
