/* The C ABI on a GPU, one process per rank (several processes may share
 * one GPU). Built on the GPU machine:
 *
 *   gcc -std=gnu11 -O2 -I cmd/libnccl/include -I /usr/local/cuda/include abi_gpu.c \
 *       -L DIR -l:libnccl.so.2 -L /usr/local/cuda/lib64 -lcudart -o abi_gpu
 *
 * and run under vcclrun (RANK, WORLD_SIZE), rank 0 writing the unique id
 * into a file the others read:
 *
 *   vcclrun -n 2 -- abi_gpu ops  ID_FILE   every call against a host reference
 *   vcclrun -n 2 -- abi_gpu fault ID_FILE  rank 1 exits; rank 0 must see it
 *   abi_gpu local                          ncclCommInitAll: 2 ranks in one process
 *
 * It prints one line per check and "PASS" or "FAIL n" at the end. */
#define _GNU_SOURCE
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nccl.h"

static int rank_, nranks_, failures_;

#define CUDA(x)                                                                   \
  do {                                                                            \
    cudaError_t e_ = (x);                                                         \
    if (e_ != cudaSuccess) {                                                      \
      printf("[%d] CUDA %s:%d %s: %s\n", rank_, __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(2);                                                                    \
    }                                                                             \
  } while (0)
#define NCCL(x)                                                                   \
  do {                                                                            \
    ncclResult_t r_ = (x);                                                        \
    if (r_ != ncclSuccess) {                                                      \
      printf("[%d] NCCL %s:%d %s: %s (%s)\n", rank_, __FILE__, __LINE__, #x, ncclGetErrorString(r_), \
             ncclGetLastError(NULL));                                             \
      exit(3);                                                                    \
    }                                                                             \
  } while (0)
#define CHECK(cond, ...)                                  \
  do {                                                    \
    if (!(cond)) {                                        \
      failures_++;                                        \
      printf("[%d] FAIL %s:%d: ", rank_, __FILE__, __LINE__); \
      printf(__VA_ARGS__);                                \
      printf("\n");                                       \
    }                                                     \
  } while (0)

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static ncclUniqueId share_id(const char *file) {
  ncclUniqueId id;
  if (rank_ == 0) {
    NCCL(ncclGetUniqueId(&id));
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s.tmp", file);
    FILE *f = fopen(tmp, "wb");
    fwrite(&id, sizeof id, 1, f);
    fclose(f);
    rename(tmp, file);
  } else {
    for (int i = 0;; i++) {
      FILE *f = fopen(file, "rb");
      if (f && fread(&id, sizeof id, 1, f) == 1) {
        fclose(f);
        break;
      }
      if (f) fclose(f);
      if (i > 60000) {
        printf("[%d] no id in %s\n", rank_, file);
        exit(4);
      }
      usleep(1000);
    }
  }
  return id;
}

/* value of element i of rank r's input */
static float val(int r, size_t i) { return (float)((r + 1) * 1000 + (int)(i % 977)); }

static void fill(float *d, size_t n, int r, cudaStream_t s) {
  float *h = malloc(n * sizeof *h);
  for (size_t i = 0; i < n; i++) h[i] = val(r, i);
  CUDA(cudaMemcpyAsync(d, h, n * sizeof *h, cudaMemcpyHostToDevice, s));
  CUDA(cudaStreamSynchronize(s));
  free(h);
}

static float *fetch(const float *d, size_t n, cudaStream_t s) {
  float *h = malloc(n * sizeof *h);
  CUDA(cudaMemcpyAsync(h, d, n * sizeof *h, cudaMemcpyDeviceToHost, s));
  CUDA(cudaStreamSynchronize(s));
  return h;
}

static void ops(const char *idfile) {
  ncclUniqueId id = share_id(idfile);
  ncclComm_t comm;
  CUDA(cudaSetDevice(0));
  double t0 = now();
  NCCL(ncclCommInitRank(&comm, nranks_, id, rank_));
  printf("[%d] init %.1f ms\n", rank_, (now() - t0) * 1e3);
  int n, r, dev;
  NCCL(ncclCommCount(comm, &n));
  NCCL(ncclCommUserRank(comm, &r));
  NCCL(ncclCommCuDevice(comm, &dev));
  CHECK(n == nranks_ && r == rank_ && dev == 0, "count %d rank %d device %d", n, r, dev);
  cudaStream_t s;
  CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  size_t counts[] = {1, 7, 1000, (1 << 20) + 3, 16 << 20};
  for (unsigned c = 0; c < sizeof counts / sizeof counts[0]; c++) {
    size_t cnt = counts[c];
    float *a, *b;
    /* 2 MiB at least, as allocators hand out (see "small buffers" below). */
    size_t bytes = cnt * sizeof(float) < (2u << 20) ? (2u << 20) : cnt * sizeof(float);
    CUDA(cudaMalloc((void **)&a, bytes));
    CUDA(cudaMalloc((void **)&b, bytes));
    for (int inplace = 0; inplace < 2; inplace++) {
      fill(a, cnt, rank_, s);
      NCCL(ncclAllReduce(a, inplace ? a : b, cnt, ncclFloat, ncclSum, comm, s));
      float *h = fetch(inplace ? a : b, cnt, s);
      size_t bad = 0;
      for (size_t i = 0; i < cnt; i++) {
        float want = 0;
        for (int q = 0; q < nranks_; q++) want += val(q, i);
        if (h[i] != want) bad++;
      }
      CHECK(bad == 0, "all-reduce %zu floats %s: %zu wrong", cnt, inplace ? "in place" : "out of place", bad);
      free(h);
    }
    CUDA(cudaFree(a));
    CUDA(cudaFree(b));
  }
  printf("[%d] all-reduce sizes checked\n", rank_);

  /* Stream order without a host wait: the all-reduce is queued behind
   * 80 GiB of memsets and a memset of its own input, a copy of its output
   * follows it on the same stream, and the call returns long before the
   * stream drains. */
  {
    size_t cnt = 1 << 24;
    float *a, *big, *out;
    CUDA(cudaMalloc((void **)&a, cnt * sizeof(float)));
    CUDA(cudaMalloc((void **)&big, (size_t)4 << 30));
    CUDA(cudaMallocHost((void **)&out, 2 * sizeof(float)));
    /* The first all-reduce of a size may grow the engine's scratch, which
     * waits for the stream: not the case measured. */
    NCCL(ncclAllReduce(a, a, cnt, ncclFloat, ncclSum, comm, s));
    CUDA(cudaStreamSynchronize(s));
    for (int i = 0; i < 20; i++) CUDA(cudaMemsetAsync(big, i, (size_t)4 << 30, s));
    CUDA(cudaMemsetAsync(a, 0x3f, cnt * sizeof(float), s)); /* 0x3f3f3f3f everywhere */
    double t = now();
    NCCL(ncclAllReduce(a, a, cnt, ncclFloat, ncclSum, comm, s));
    double call = now() - t;
    CUDA(cudaMemcpyAsync(out, a + cnt - 2, 2 * sizeof(float), cudaMemcpyDeviceToHost, s));
    double q = now();
    CUDA(cudaStreamSynchronize(s));
    double drain = now() - q;
    uint32_t bits = 0x3f3f3f3f;
    float v;
    memcpy(&v, &bits, sizeof v);
    float want = 0;
    for (int r = 0; r < nranks_; r++) want += v;
    CHECK(out[0] == want && out[1] == want, "stream-ordered all-reduce gave %g %g, want %g", out[0], out[1], want);
    printf("[%d] all-reduce of 64 MiB behind 80 GiB of memsets: the call took %.3f ms, the stream drained %.1f ms later\n",
           rank_, call * 1e3, drain * 1e3);
    CHECK(call < drain, "the call waited for the GPU (%.3f ms, drain %.3f ms)", call * 1e3, drain * 1e3);
    CUDA(cudaFree(big));
    CUDA(cudaFree(a));
    CUDA(cudaFreeHost(out));
  }

  /* Every collective once, float, against the host. */
  {
    size_t cnt = 4099;
    float *s1, *r1;
    CUDA(cudaMalloc((void **)&s1, cnt * nranks_ * sizeof(float)));
    CUDA(cudaMalloc((void **)&r1, cnt * nranks_ * sizeof(float)));
    /* broadcast from the last rank */
    fill(s1, cnt, rank_, s);
    NCCL(ncclBroadcast(s1, r1, cnt, ncclFloat, nranks_ - 1, comm, s));
    float *h = fetch(r1, cnt, s);
    size_t bad = 0;
    for (size_t i = 0; i < cnt; i++) bad += h[i] != val(nranks_ - 1, i);
    CHECK(bad == 0, "broadcast: %zu wrong", bad);
    free(h);
    /* reduce (max) to rank 0 */
    fill(s1, cnt, rank_, s);
    NCCL(ncclReduce(s1, r1, cnt, ncclFloat, ncclMax, 0, comm, s));
    if (rank_ == 0) {
      h = fetch(r1, cnt, s);
      bad = 0;
      for (size_t i = 0; i < cnt; i++) bad += h[i] != val(nranks_ - 1, i);
      CHECK(bad == 0, "reduce max: %zu wrong", bad);
      free(h);
    }
    /* all-gather */
    fill(s1, cnt, rank_, s);
    NCCL(ncclAllGather(s1, r1, cnt, ncclFloat, comm, s));
    h = fetch(r1, cnt * nranks_, s);
    bad = 0;
    for (int q = 0; q < nranks_; q++)
      for (size_t i = 0; i < cnt; i++) bad += h[q * cnt + i] != val(q, i);
    CHECK(bad == 0, "all-gather: %zu wrong", bad);
    free(h);
    /* reduce-scatter (sum): rank q gets block q of the sum */
    fill(s1, cnt * nranks_, rank_, s);
    NCCL(ncclReduceScatter(s1, r1, cnt, ncclFloat, ncclSum, comm, s));
    h = fetch(r1, cnt, s);
    bad = 0;
    for (size_t i = 0; i < cnt; i++) {
      float want = 0;
      for (int q = 0; q < nranks_; q++) want += val(q, rank_ * cnt + i);
      bad += h[i] != want;
    }
    CHECK(bad == 0, "reduce-scatter: %zu wrong", bad);
    free(h);
    /* average */
    fill(s1, cnt, rank_, s);
    NCCL(ncclAllReduce(s1, r1, cnt, ncclFloat, ncclAvg, comm, s));
    h = fetch(r1, cnt, s);
    bad = 0;
    for (size_t i = 0; i < cnt; i++) {
      float want = 0;
      for (int q = 0; q < nranks_; q++) want += val(q, i);
      bad += h[i] != (float)((double)want / nranks_);
    }
    CHECK(bad == 0, "average: %zu wrong", bad);
    free(h);
    /* pre-multiplied sums: host and device scalars */
    float scalar = 0.5f;
    ncclRedOp_t op;
    NCCL(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat, ncclScalarHostImmediate, comm));
    fill(s1, cnt, rank_, s);
    NCCL(ncclAllReduce(s1, r1, cnt, ncclFloat, op, comm, s));
    h = fetch(r1, cnt, s);
    bad = 0;
    for (size_t i = 0; i < cnt; i++) {
      float want = 0;
      for (int q = 0; q < nranks_; q++) want += val(q, i) * 0.5f;
      bad += h[i] != want;
    }
    CHECK(bad == 0, "pre-multiplied sum (host scalar): %zu wrong", bad);
    free(h);
    NCCL(ncclRedOpDestroy(op, comm));
    float *dscalar;
    CUDA(cudaMalloc((void **)&dscalar, sizeof(float)));
    float three = 3;
    CUDA(cudaMemcpy(dscalar, &three, sizeof three, cudaMemcpyHostToDevice));
    NCCL(ncclRedOpCreatePreMulSum(&op, dscalar, ncclFloat, ncclScalarDevice, comm));
    fill(s1, cnt, rank_, s);
    NCCL(ncclAllReduce(s1, r1, cnt, ncclFloat, op, comm, s));
    h = fetch(r1, cnt, s);
    bad = 0;
    for (size_t i = 0; i < cnt; i++) {
      float want = 0;
      for (int q = 0; q < nranks_; q++) want += val(q, i) * 3;
      bad += h[i] != want;
    }
    CHECK(bad == 0, "pre-multiplied sum (device scalar): %zu wrong", bad);
    free(h);
    NCCL(ncclRedOpDestroy(op, comm));
    CUDA(cudaFree(dscalar));
    /* a group: an exchange with every rank, itself included (all-to-all) */
    fill(s1, cnt * nranks_, rank_, s);
    NCCL(ncclGroupStart());
    for (int q = 0; q < nranks_; q++) {
      NCCL(ncclSend(s1 + q * cnt, cnt, ncclFloat, q, comm, s));
      NCCL(ncclRecv(r1 + q * cnt, cnt, ncclFloat, q, comm, s));
    }
    NCCL(ncclGroupEnd());
    h = fetch(r1, cnt * nranks_, s);
    bad = 0;
    for (int q = 0; q < nranks_; q++)
      for (size_t i = 0; i < cnt; i++) bad += h[q * cnt + i] != val(q, rank_ * cnt + i);
    CHECK(bad == 0, "grouped send/receive all-to-all: %zu wrong", bad);
    free(h);
    /* a group of two all-reduces */
    fill(s1, cnt, rank_, s);
    fill(r1, cnt, rank_, s);
    NCCL(ncclGroupStart());
    NCCL(ncclAllReduce(s1, s1, cnt, ncclFloat, ncclSum, comm, s));
    NCCL(ncclAllReduce(r1, r1, cnt, ncclFloat, ncclMin, comm, s));
    NCCL(ncclGroupEnd());
    h = fetch(r1, cnt, s);
    bad = 0;
    for (size_t i = 0; i < cnt; i++) bad += h[i] != val(0, i);
    CHECK(bad == 0, "grouped all-reduces: %zu wrong", bad);
    free(h);
    CUDA(cudaFree(s1));
    CUDA(cudaFree(r1));
  }
  printf("[%d] collectives checked\n", rank_);

  /* Split into one communicator per rank (color = rank) and one of all. */
  {
    ncclComm_t one, all;
    NCCL(ncclCommSplit(comm, rank_, 0, &one, NULL));
    NCCL(ncclCommSplit(comm, 0, nranks_ - rank_, &all, NULL));
    int c1, c2, r2;
    NCCL(ncclCommCount(one, &c1));
    NCCL(ncclCommCount(all, &c2));
    NCCL(ncclCommUserRank(all, &r2));
    CHECK(c1 == 1 && c2 == nranks_ && r2 == nranks_ - 1 - rank_, "split: sizes %d %d, rank %d", c1, c2, r2);
    float *a;
    CUDA(cudaMalloc((void **)&a, 1000 * sizeof(float)));
    fill(a, 1000, rank_, s);
    NCCL(ncclAllReduce(a, a, 1000, ncclFloat, ncclSum, all, s));
    float *h = fetch(a, 1000, s);
    float want = 0;
    for (int q = 0; q < nranks_; q++) want += val(q, 5);
    CHECK(h[5] == want, "all-reduce on the split communicator: %g, want %g", h[5], want);
    free(h);
    NCCL(ncclAllReduce(a, a, 1000, ncclFloat, ncclSum, one, s));
    CUDA(cudaStreamSynchronize(s));
    NCCL(ncclCommDestroy(one));
    NCCL(ncclCommDestroy(all));
    CUDA(cudaFree(a));
  }
  printf("[%d] split checked\n", rank_);

  ncclResult_t async;
  NCCL(ncclCommGetAsyncError(comm, &async));
  CHECK(async == ncclSuccess, "async error %d", async);

  /* Small separate cudaMallocs share a driver chunk, which CUDA IPC maps
   * once per process: the second one a peer maps is found inside the
   * first's mapping where the driver says so, else refused with a clear
   * error. Reported, not judged; the communicator is aborted if refused. */
  {
    float *x, *y;
    CUDA(cudaMalloc((void **)&x, 4096));
    CUDA(cudaMalloc((void **)&y, 4096));
    fill(x, 1024, rank_, s);
    ncclResult_t r = ncclAllReduce(x, y, 1024, ncclFloat, ncclSum, comm, s);
    float *h = r == ncclSuccess ? fetch(y, 1024, s) : NULL;
    float want = 0;
    for (int q = 0; q < nranks_; q++) want += val(q, 3);
    printf("[%d] NOTE small separate buffers: %s%s%s\n", rank_, ncclGetErrorString(r), r ? ": " : "",
           r ? ncclGetLastError(comm) : (h[3] == want ? " (result right)" : " (RESULT WRONG)"));
    free(h);
    if (r != ncclSuccess) {
      NCCL(ncclCommAbort(comm));
      return;
    }
  }
  t0 = now();
  NCCL(ncclCommFinalize(comm));
  NCCL(ncclCommDestroy(comm));
  printf("[%d] finalize + destroy %.1f ms\n", rank_, (now() - t0) * 1e3);
}

static void fault(const char *idfile) {
  ncclUniqueId id = share_id(idfile);
  ncclComm_t comm;
  CUDA(cudaSetDevice(0));
  NCCL(ncclCommInitRank(&comm, nranks_, id, rank_));
  cudaStream_t s;
  CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float *a;
  CUDA(cudaMalloc((void **)&a, (1 << 20) * sizeof(float)));
  NCCL(ncclAllReduce(a, a, 1 << 20, ncclFloat, ncclSum, comm, s));
  CUDA(cudaStreamSynchronize(s));
  if (rank_ == 1) {
    printf("[1] exiting without a word\n");
    fflush(stdout);
    _exit(0);
  }
  usleep(100000);
  double t0 = now();
  ncclResult_t async = ncclSuccess;
  while (async == ncclSuccess && now() - t0 < 30) {
    NCCL(ncclCommGetAsyncError(comm, &async));
    usleep(1000);
  }
  printf("[0] ncclCommGetAsyncError: %s after %.0f ms: %s\n", ncclGetErrorString(async), (now() - t0) * 1e3,
         ncclGetLastError(comm));
  CHECK(async == ncclRemoteError, "async error %d, want ncclRemoteError", async);
  double t1 = now();
  ncclResult_t r = ncclAllReduce(a, a, 1 << 20, ncclFloat, ncclSum, comm, s);
  printf("[0] an all-reduce after the peer's end: %s in %.1f ms\n", ncclGetErrorString(r), (now() - t1) * 1e3);
  CHECK(r != ncclSuccess, "an all-reduce with a dead peer succeeded");
  double t2 = now();
  r = ncclCommAbort(comm);
  double abort_ms = (now() - t2) * 1e3;
  printf("[0] ncclCommAbort: %s in %.1f ms\n", ncclGetErrorString(r), abort_ms);
  CHECK(r == ncclSuccess && abort_ms < 15000, "abort");
  CUDA(cudaStreamSynchronize(s));
  CUDA(cudaFree(a));
}

static void local(void) {
  /* Two ranks in one process on GPU 0, from one thread through a group. */
  ncclComm_t comms[2];
  int devs[2] = {0, 0};
  CUDA(cudaSetDevice(0));
  NCCL(ncclCommInitAll(comms, 2, devs));
  float *buf[2];
  cudaStream_t s[2];
  for (int i = 0; i < 2; i++) {
    CUDA(cudaMalloc((void **)&buf[i], 4096 * sizeof(float)));
    CUDA(cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking));
    fill(buf[i], 4096, i, s[i]);
  }
  for (int iter = 0; iter < 3; iter++) {
    NCCL(ncclGroupStart());
    for (int i = 0; i < 2; i++) NCCL(ncclAllReduce(buf[i], buf[i], 4096, ncclFloat, ncclSum, comms[i], s[i]));
    NCCL(ncclGroupEnd());
  }
  for (int i = 0; i < 2; i++) {
    float *h = fetch(buf[i], 4096, s[i]);
    float want = 4 * (val(0, 9) + val(1, 9));
    CHECK(h[9] == want, "InitAll rank %d: %g, want %g", i, h[9], want);
    free(h);
  }
  for (int i = 0; i < 2; i++) NCCL(ncclCommDestroy(comms[i]));
  printf("[0] two ranks in one process checked\n");
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  rank_ = getenv("RANK") ? atoi(getenv("RANK")) : 0;
  nranks_ = getenv("WORLD_SIZE") ? atoi(getenv("WORLD_SIZE")) : 1;
  if (argc < 2) {
    fprintf(stderr, "usage: abi_gpu ops|fault ID_FILE | abi_gpu local\n");
    return 2;
  }
  if (!strcmp(argv[1], "ops") && argc > 2) ops(argv[2]);
  else if (!strcmp(argv[1], "fault") && argc > 2) fault(argv[2]);
  else if (!strcmp(argv[1], "local")) local();
  else return 2;
  if (failures_) {
    printf("[%d] FAIL %d\n", rank_, failures_);
    return 1;
  }
  printf("[%d] PASS\n", rank_);
  return 0;
}
