/* c_allreduce - the smallest zcoll program, in plain C: every rank contributes rank+1, all-reduces
 * (sum) and checks the result. Launch with `zcoll-run -n 4 ./c_allreduce` (or torchrun/mpirun/srun). */
#include <stdio.h>
#include <stdlib.h>

#include <zcoll/zcoll.h>

#define CHECK(call)                                                                                  \
  do {                                                                                               \
    zcollResult_t r_ = (call);                                                                       \
    if (r_ != zcollSuccess) {                                                                        \
      fprintf(stderr, "%s failed: %s: %s\n", #call, zcollGetErrorString(r_), zcollGetLastError(NULL)); \
      return 1;                                                                                      \
    }                                                                                                \
  } while (0)

int main(void) {
  zcollComm_t comm;
  CHECK(zcollCommInitFromEnv(&comm, NULL));
  int rank = 0, nranks = 0;
  CHECK(zcollCommUserRank(comm, &rank));
  CHECK(zcollCommCount(comm, &nranks));

  enum { kCount = 1 << 20 };
  float* data = malloc(kCount * sizeof(float));
  if (!data) return 1;
  for (size_t i = 0; i < kCount; ++i) data[i] = (float)(rank + 1);
  CHECK(zcollAllReduce(data, data, kCount, zcollFloat, zcollSum, comm, NULL)); /* in place; blocks */

  const float want = (float)nranks * (float)(nranks + 1) / 2.0f;
  size_t wrong = 0;
  for (size_t i = 0; i < kCount; ++i) wrong += data[i] != want;
  printf("rank %d of %d: all-reduce of %d floats: %s\n", rank, nranks, kCount, wrong ? "WRONG" : "ok");
  free(data);
  CHECK(zcollCommDestroy(comm));
  return wrong ? 1 : 0;
}
