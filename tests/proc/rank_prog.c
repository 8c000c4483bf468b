/* rank_prog.c - a plain C rank program for the process tests (and a check that zcoll.h is C).
 *
 *   rank_prog check            all-reduce, all-gather and send/recv over the launcher's ranks; exit 0 if
 *                              every element is right
 *   rank_prog exit-rank K      rank K exits with status 3 after init; the others wait in an all-reduce
 *   rank_prog kill-rank K      rank K kills itself (SIGKILL) before an all-reduce; the others report the
 *                              error they get and exit 4 (5 if the call wrongly succeeded)
 *   rank_prog hang             rank 0 waits in an all-reduce that rank 1 never joins (rank 1 sleeps)
 *   rank_prog loop             4 MiB all-reduces until one fails (a rank is killed from outside); exits
 *                              4 if zcollCommGetAsyncError reports the same error, 6 if not; with
 *                              RANK_PROG_LINGER_MS set, lingers that long before destroying the communicator
 *   rank_prog memalloc         all-reduces, all-gathers and reduce-scatters on zcollMemAlloc buffers (zero
 *                              copy): out of place, in place,
 *                              at an offset into the allocation, with one rank on malloc'd buffers (the
 *                              copying fallback), and across freed and reallocated buffers (the peers'
 *                              mappings must not pile up); exit 0 if every element is right
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "zcoll/zcoll.h"

#define CHECK(call)                                                                          \
  do {                                                                                       \
    zcollResult_t r_ = (call);                                                               \
    if (r_ != zcollSuccess) {                                                                \
      fprintf(stderr, "%s: %s (%s)\n", #call, zcollGetErrorString(r_), zcollGetLastError(NULL)); \
      return 2;                                                                              \
    }                                                                                        \
  } while (0)

static int check(zcollComm_t comm, int rank, int n) {
  enum { kCount = 100003 };
  float* in = malloc(sizeof(float) * kCount);
  float* out = malloc(sizeof(float) * kCount * (size_t)n);
  int wrong = 0;
  for (int i = 0; i < kCount; i++) in[i] = (float)(rank + i % 7);
  CHECK(zcollAllReduce(in, out, kCount, zcollFloat, zcollSum, comm, NULL));
  for (int i = 0; i < kCount; i++) wrong += out[i] != (float)(n * (n - 1) / 2 + n * (i % 7));
  CHECK(zcollAllGather(in, out, kCount, zcollFloat, comm, NULL));
  for (int r = 0; r < n; r++)
    for (int i = 0; i < kCount; i++) wrong += out[(size_t)r * kCount + i] != (float)(r + i % 7);
  int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  CHECK(zcollGroupStart());
  CHECK(zcollSend(in, kCount, zcollFloat, next, comm, NULL));
  CHECK(zcollRecv(out, kCount, zcollFloat, prev, comm, NULL));
  CHECK(zcollGroupEnd());
  for (int i = 0; i < kCount; i++) wrong += out[i] != (float)(prev + i % 7);
  free(in);
  free(out);
  if (wrong) fprintf(stderr, "rank %d: %d wrong elements\n", rank, wrong);
  return wrong ? 1 : 0;
}

/* sum over ranks of (r + i % 7) at element i, written by every rank as float */
static int wrongSums(const float* out, int count, int n) {
  int wrong = 0;
  for (int i = 0; i < count; i++) wrong += out[i] != (float)(n * (n - 1) / 2 + n * (i % 7));
  return wrong;
}

/* Mappings of zcollMemAlloc memory in this process (its own and its peers'). */
static int memMappings(void) {
  FILE* f = fopen("/proc/self/maps", "r");
  char line[512];
  int count = 0;
  if (!f) return -1;
  while (fgets(line, sizeof line, f))
    if (strstr(line, "/memfd:zcoll-mem")) count++;
  fclose(f);
  return count;
}

static int memalloc(zcollComm_t comm, int rank, int n) {
  enum { kCount = 300007 }; /* 1.2 MB per rank: above ZCOLL_ZERO_COPY's default */
  const size_t bytes = sizeof(float) * ((size_t)kCount * (size_t)n + 16); /* all-gather's and reduce-scatter's too */
  int wrong = 0;
  for (int round = 0; round < 6; round++) {
    float *in = NULL, *out = NULL;
    /* round 3: rank 0 brings malloc'd buffers, so every rank takes the copying path */
    int shared = !(round == 3 && rank == 0);
    if (shared) {
      CHECK(zcollMemAlloc((void**)&in, bytes));
      CHECK(zcollMemAlloc((void**)&out, bytes));
    } else {
      in = malloc(bytes);
      out = malloc(bytes);
    }
    float* src = round == 2 ? in + 16 : in; /* round 2: an offset into the allocation */
    for (int i = 0; i < kCount; i++) src[i] = (float)(rank + i % 7);
    CHECK(zcollAllReduce(src, out, kCount, zcollFloat, zcollSum, comm, NULL));
    wrong += wrongSums(out, kCount, n);
    CHECK(zcollAllReduce(src, src, kCount, zcollFloat, zcollSum, comm, NULL)); /* in place */
    wrong += wrongSums(src, kCount, n);
    /* all-gather: block r holds rank r's (r + i % 7); reduce-scatter of n such blocks: the sums */
    for (int i = 0; i < kCount; i++) src[i] = (float)(rank + i % 7);
    CHECK(zcollAllGather(src, out, kCount, zcollFloat, comm, NULL));
    for (int r = 0; r < n; r++)
      for (int i = 0; i < kCount; i++) wrong += out[(size_t)r * kCount + i] != (float)(r + i % 7);
    for (int r = 0; r < n; r++)
      for (int i = 0; i < kCount; i++) src[(size_t)r * kCount + i] = (float)(rank + i % 7);
    CHECK(zcollReduceScatter(src, out, kCount, zcollFloat, zcollSum, comm, NULL));
    wrong += wrongSums(out, kCount, n);
    /* broadcast from the first rank and from the last: every rank gets the root's values */
    for (int k = 0; k < 2; k++) {
      int root = k ? n - 1 : 0;
      for (int i = 0; i < kCount; i++) src[i] = rank == root ? (float)(root + i % 7) : -1.0f;
      CHECK(zcollBroadcast(src, out, kCount, zcollFloat, root, comm, NULL));
      for (int i = 0; i < kCount; i++) wrong += out[i] != (float)(root + i % 7);
    }
    if (shared) {
      CHECK(zcollMemFree(in));
      CHECK(zcollMemFree(out));
    } else {
      free(in);
      free(out);
    }
  }
  /* Freed allocations must not stay mapped: at most the last round's peers' two buffers each. */
  int maps = memMappings();
  if (maps > 2 * (n - 1)) {
    fprintf(stderr, "rank %d: %d zcollMemAlloc mappings remain after freeing (at most %d expected)\n", rank, maps,
            2 * (n - 1));
    wrong++;
  }
  if (wrong) fprintf(stderr, "rank %d: %d wrong elements\n", rank, wrong);
  return wrong ? 1 : 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: rank_prog check | exit-rank K | kill-rank K | hang | loop | memalloc\n");
    return 2;
  }
  zcollComm_t comm = NULL;
  CHECK(zcollCommInitFromEnv(&comm, NULL));
  int rank = 0, n = 0;
  CHECK(zcollCommUserRank(comm, &rank));
  CHECK(zcollCommCount(comm, &n));
  int status = 0;
  if (!strcmp(argv[1], "check")) {
    status = check(comm, rank, n);
  } else if (!strcmp(argv[1], "memalloc")) {
    status = memalloc(comm, rank, n);
  } else if (argc > 2 && (!strcmp(argv[1], "exit-rank") || !strcmp(argv[1], "kill-rank"))) {
    int victim = atoi(argv[2]);
    if (rank == victim) {
      if (argv[1][0] == 'e') exit(3);
      raise(SIGKILL);
    }
    float x[1024] = {0};
    zcollResult_t r = zcollAllReduce(x, x, 1024, zcollFloat, zcollSum, comm, NULL);
    fprintf(stderr, "rank %d: all-reduce returned %d (%s): %s\n", rank, (int)r, zcollGetErrorString(r),
            zcollGetLastError(comm));
    status = r == zcollSuccess ? 5 : 4;
  } else if (!strcmp(argv[1], "loop")) {
    enum { kLoopCount = 1 << 20 };
    float* x = calloc(kLoopCount, sizeof(float));
    zcollResult_t r;
    long ops = 0;
    while ((r = zcollAllReduce(x, x, kLoopCount, zcollFloat, zcollSum, comm, NULL)) == zcollSuccess) ops++;
    zcollResult_t async = zcollSuccess;
    CHECK(zcollCommGetAsyncError(comm, &async));
    fprintf(stderr, "rank %d: all-reduce %ld returned %s: %s; async error: %s\n", rank, ops, zcollGetErrorString(r),
            zcollGetLastError(comm), zcollGetErrorString(async));
    free(x);
    status = async == r ? 4 : 6;
    /* A failed rank that is slow to leave (a long teardown, a leak check at exit) answers no peer meanwhile. */
    const char* linger = getenv("RANK_PROG_LINGER_MS");
    if (linger) usleep((useconds_t)atoi(linger) * 1000u);
  } else if (!strcmp(argv[1], "hang")) {
    float x = 0;
    if (rank == 1) sleep(600);
    status = zcollAllReduce(&x, &x, 1, zcollFloat, zcollSum, comm, NULL) == zcollSuccess ? 0 : 4;
  }
  zcollCommDestroy(comm);
  return status;
}
